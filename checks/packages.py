"""Third-party packages in a built file: which modules count as third-party, which ones a competition folder's
own files import, the built file's header line that names them, and whether they are installed here.

The leaderboards' runners carry packages beyond torch (triton, helion, cutlass, aiter ...). A problem's
manifest lists the ones its built file may import (`packages:`; the builder refuses any other), `problem add`
fills that list from the folder's templates and reference.py, and the built file names the ones it imports in its
header (`# packages: ...`), so check, bench and diff can refuse a file whose packages this Python lacks in one line
instead of a traceback from inside the worker or eval.py; so are the packages the run folder's own files (eval.py,
reference.py ...) import at their top level.
"""
from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from popcorn.errors import PopkitError

STANDARD = frozenset({"torch"} | set(sys.stdlib_module_names))    # what every runner has
LINE_PREFIX = "# packages: "


def imports(tree: ast.AST) -> Iterator[tuple[str, ast.stmt]]:
    """Every module an import statement of TREE names, with the statement; a relative import's name starts
    with its dots (`from .model import x` is '.model', whose top-level name is '')."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield "." * node.level + (node.module or ""), node


def folder_packages(paths: Iterable[Path], run_folder: Iterable[str]) -> list[str]:
    """The third-party top-level modules the Python files PATHS import (read with ast, never imported), beyond
    torch, the standard library and RUN_FOLDER (the modules the runner places beside them); a file that is
    missing or not Python (helion's `def kernel(...) -> ...` template) is passed over."""
    found = set()
    for path in paths:
        try:
            tree = ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        found |= {name.split(".")[0] for name, _ in imports(tree)}
    return sorted(found - STANDARD - set(run_folder) - {""})


def imported(texts: Iterable[str], allowed: list[str]) -> list[str]:
    """Those of ALLOWED (a manifest's packages, in its order) that the Python TEXTS import: the built file's header
    names only these, since a package the manifest allows but no part imports is never needed at import (the
    scaffold allows every package of the folder's files while its route only calls the reference)."""
    found = {name.split(".")[0] for text in texts for name, _ in imports(ast.parse(text))}
    return [name for name in allowed if name in found]


def header_line(packages: list[str]) -> str:
    """The built file's header line naming its packages (read back by declared); empty for none."""
    return LINE_PREFIX + ", ".join(packages) if packages else ""


def declared(text: str) -> list[str]:
    """The packages a built file's leading comment block names (its header_line); none without one."""
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        if line.startswith(LINE_PREFIX):
            return [name.strip() for name in line[len(LINE_PREFIX):].split(",") if name.strip()]
    return []


def absent_folder_packages(sources: dict[str, Path]) -> dict[str, list[str]]:
    """{file: the third-party packages it imports at its top level that this Python cannot import} for the runner's
    files (SOURCES: name in the run folder -> its file), only the files that have some. An import inside a function
    or a try is optional, and a file that cannot be read or parsed is left to the run."""
    placed = {Path(name).stem for name in sources}
    by_file = {}
    for name, path in sources.items():
        try:
            body = ast.parse(path.read_bytes()).body
        except (OSError, SyntaxError, ValueError):
            continue
        found = {module.split(".")[0] for node in body if isinstance(node, (ast.Import, ast.ImportFrom))
                 for module, _ in imports(node)}
        absent = sorted(m for m in found - STANDARD - placed - {""} if importlib.util.find_spec(m) is None)
        if absent:
            by_file[name] = absent
    return by_file


def require_folder_installed(sources: dict[str, Path]) -> None:
    """The third-party packages the runner's files (SOURCES) import at their top level must be importable here:
    eval.py imports them before any case runs, whatever the submission imports (absent_folder_packages)."""
    for name, absent in absent_folder_packages(sources).items():
        them = "it" if len(absent) == 1 else "them"
        raise PopkitError(f"the folder's {name} imports {', '.join(absent)}, not installed for {sys.executable}: "
                          f"install {them} here, or run on a host that has {them} (the leaderboard's runner does); "
                          "nothing ran")


def require_installed(path: Path) -> None:
    """The packages PATH's header names must be importable by this Python (the one the worker and eval.py run
    on); else one line before anything runs, where the file's import would fail inside the run."""
    absent = [name for name in declared(path.read_text(encoding="utf-8", errors="replace"))
              if importlib.util.find_spec(name) is None]
    if absent:
        them = "it" if len(absent) == 1 else "them"
        raise PopkitError(f"{path} imports {', '.join(absent)} (its manifest's packages), not installed for "
                          f"{sys.executable}: install {them} here, or run on a host that has {them} (the leaderboard's "
                          "runner does); nothing ran")
