"""The builder: parts + template -> one self-contained submission file.

build(problem) reads parts/PROBLEM/manifest.yml, embeds the CUDA parts (each
part's text, and the translation units the loader compiles them as: see
assemble_cuda), inlines the Python parts into one module, renders
templates/submission.py.j2, checks the result (preflight rules, imports limited
to torch, the standard library, the manifest's run_folder_imports and its
packages) and writes it atomically. The header's leaderboard and GPU come from
the problem's record (checks/cases/PROBLEM.yml) when it has one. A manifest with
no CUDA parts builds a pure-Python file that compiles nothing. Same parts in,
same bytes out: the provenance names the last commit that touched the builder's
inputs, not the current HEAD.
"""
from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import jinja2
import yaml

from checks import packages, problems
from checks.cuda_units import ONE_UNIT_CLASH, namespace_clashes
from checks.preflight import BANNED, PreflightReport, defines, name_error, preflight_bytes
from checks.task_folder import SUBMISSION_SOURCE
from popcorn.errors import PopkitError, ProblemError, parse_error_line
from popcorn.evidence.files import is_null_device, write_atomic
from popcorn.evidence.provenance import built_from

ROOT = Path(__file__).resolve().parent
PARTS = ROOT / "parts"
TEMPLATES = ROOT / "templates"
TEMPLATE = "submission.py.j2"
CASES_DIR = problems.CASES_DIR
DEFAULT_GPU = "B200"
INLINE_MARK = "# popkit: inline"
PARTS_PACKAGE = "parts"     # a cross-part import: from parts.PROBLEM.module import ...
LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')
COMMIT_LINE = re.compile(r"^# toolkit commit: .*$", re.MULTILINE)
# Where git cannot list the project's files: the folders and top-level files that hold its sources.
SOURCE_FOLDERS = ("checks", "docs", "parts", "popcorn", "scripts", "templates", "tests")
TOP_LEVEL_SOURCES = ("AGENTS.md", "Makefile", "README.md", "build.py", "pyproject.toml")


@dataclass(frozen=True)
class Part:
    path: str          # relative to parts/
    text: str
    sha256: str


@dataclass
class BuildResult:
    problem: str
    text: str
    parts: list[Part]
    preflight: PreflightReport
    output: Path | None = None


def read_part(rel: str) -> Part:
    path = PARTS / rel
    if BANNED.search(rel.encode()):
        raise PopkitError(f"{path}: the part's name holds the banned word 'stream' (any case), and the built file "
                          "names every part")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PopkitError(f"{path}: cannot read part ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PopkitError(f"{path}: part is not UTF-8") from None
    match = BANNED.search(data)
    if match:
        line = data.count(b"\n", 0, match.start()) + 1
        raise PopkitError(f"{path}:{line}: part contains the banned word 'stream' (any case)")
    return Part(rel, text, hashlib.sha256(data).hexdigest())


def load_manifest(problem: str) -> dict:
    """The manifest, checked: problem (= its folder), title, cuda and python lists, run_folder_imports and
    packages (third-party modules the built file may import: the runner has them)."""
    path = PARTS / problem / "manifest.yml"
    if not path.is_file():
        record = problems.record_path(problem, CASES_DIR)
        if problems.NAME_PATTERN.match(problem) and record.is_file():    # a problem whose parts are gone
            raise PopkitError(f"{problem} has no parts: no parts/{problem}/manifest.yml (its record {record} is there; "
                              f"`popkit problem add {problem} --from DIR --force` scaffolds the missing parts)")
        known = sorted(p.parent.name for p in PARTS.glob("*/manifest.yml"))
        raise PopkitError(f"unknown problem {problem!r}: no {path.relative_to(ROOT)} (known: {', '.join(known)})")
    try:
        manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise PopkitError(f"{path}: not valid YAML ({parse_error_line(exc)})") from None
    if not isinstance(manifest, dict):
        raise PopkitError(f"{path}: empty or not a mapping; a manifest needs the keys problem, title, cuda, python")
    for key in ("problem", "title", "cuda", "python"):
        if key not in manifest:
            raise PopkitError(f"{path}: missing key {key!r}")
    if manifest["problem"] != problem:
        raise PopkitError(f"{path}: problem: {manifest['problem']!r} does not match its folder {problem!r}")
    why = _title_error(manifest["title"])
    if why:
        raise PopkitError(f"{path}: {why}: the built file's docstring holds it")
    for key in ("cuda", "python", "run_folder_imports", "packages"):
        manifest[key] = _string_list(manifest.get(key), key, path)
    if not manifest["python"]:
        raise PopkitError(f"{path}: 'python' lists no parts; the last one must define custom_kernel")
    for key in ("run_folder_imports", "packages"):
        for name in manifest[key]:
            if not name.isidentifier():
                raise PopkitError(f"{path}: {key}: {name!r} is not a module name (a top-level one: reference, "
                                  "not reference.py; triton, not triton.language)")
    return manifest


def _title_error(title) -> str | None:
    """Why TITLE cannot stand in the built file's docstring (None when it can)."""
    if title is None or title == "":
        return "title is empty"
    if not isinstance(title, str):
        return "title is not text"
    if "\n" in title or "\r" in title:
        return "title is not one line"
    if '"""' in title or "\\" in title:
        return 'title holds """ or a backslash'
    if BANNED.search(title.encode()):
        return "title holds the banned word 'stream' (any case)"
    return None


def _string_list(value, key: str, path: Path) -> list[str]:
    """A manifest list; an absent or empty value is an empty list."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PopkitError(f"{path}: {key!r} must be a list of names ([] for none)")
    return value


def part_hashes(problem: str) -> dict[str, str]:
    """{part path: sha256} of the parts PROBLEM's manifest lists now, as a built file's header names them
    (popcorn.evidence.provenance.part_hashes); a part that cannot be read is left out."""
    manifest = load_manifest(problem)
    hashes = {}
    for rel in manifest["cuda"] + manifest["python"]:
        try:
            hashes[rel] = hashlib.sha256((PARTS / rel).read_bytes()).hexdigest()
        except OSError:
            continue
    return hashes


def header_facts(problem: str) -> tuple[str, str, set[str] | None, list[str]]:
    """(leaderboard, gpu, modules the runner places beside submission.py, what the grader calls) from the problem's
    record; without a record: the problem's name, B200, None (unknown, so not checked) and custom_kernel."""
    if not problems.record_path(problem, CASES_DIR).is_file():
        return problem, DEFAULT_GPU, None, [problems.ENTRY_POINT]
    try:
        record = problems.load_problem(problem, CASES_DIR)
    except ProblemError as exc:
        raise PopkitError(str(exc)) from None
    files = record.harness.get("files")
    placed = {Path(str(f["name"])).stem for f in files
              if str(f["name"]).endswith(".py") and f["source"] != SUBMISSION_SOURCE} if files else None
    return record.leaderboard, record.gpu, placed, record.entry_points


@dataclass(frozen=True)
class CudaAssembly:
    """The CUDA a built file embeds: each part's text in manifest order (local includes of other parts and
    `#pragma once` dropped) and the translation units the loader may compile in parallel, one per .cu
    part: every header part (.cuh; anything not .cu) in manifest order, then that .cu part. A unit's
    anonymous-namespace and static helpers stay its own; an entry point one unit calls in another is
    declared POPKIT_EXPORT where it is called and links. The loader compiles `units` on machines with
    enough cores and the whole manifest as one unit (`source()`) elsewhere (parts/common/cuda_loader.py)."""
    parts: dict[str, str]
    units: list[tuple[str, ...]]

    def source(self, unit: tuple[str, ...] | None = None) -> str:
        """One translation unit's text: the named parts (default: every part, in manifest order), each under
        a `// ---- part PATH ----` line; the loader joins them the same way (CudaLibrary.unit_source)."""
        return "\n\n".join(f"// ---- part {path} ----\n{self.parts[path]}" for path in (unit or self.parts))


def assemble_cuda(parts: list[Part]) -> CudaAssembly:
    """The CUDA parts as the built file embeds them (CudaAssembly): the one place that knows the layout."""
    names = {Path(p.path).name for p in parts}
    texts = {}
    for part in parts:
        lines = []
        for line in part.text.splitlines():
            include = LOCAL_INCLUDE.match(line)
            if include and Path(include.group(1)).name in names:
                continue
            if line.strip() == "#pragma once":
                continue
            lines.append(line)
        texts[part.path] = "\n".join(lines).strip("\n")
        if "'''" in texts[part.path]:
            raise PopkitError(f"{PARTS / part.path}: contains ''' which would end the embedded string")
    clashes = namespace_clashes(texts)
    if clashes:
        raise PopkitError(f"{'; '.join(clashes)}: {ONE_UNIT_CLASH}")
    headers = tuple(path for path in texts if not path.endswith(".cu"))
    return CudaAssembly(texts, [headers + (path,) for path in texts if path.endswith(".cu")])


def python_part_text(part: Part) -> str:
    """A Python part without its cross-part imports (all parts share one namespace once built)."""
    kept = [line for line in part.text.splitlines()
            if not line.rstrip().endswith(INLINE_MARK) and not line.startswith("from __future__")]
    return "\n".join(kept).strip("\n")


def inputs_commit() -> str:
    """The last commit that touched parts/, templates/ or the builder; POPKIT_COMMIT when set (a copy
    on another machine, whose own git may be stale: see popcorn.evidence.logs.git_commit); 'uncommitted'
    outside a work tree of its own."""
    if os.environ.get("POPKIT_COMMIT"):
        return os.environ["POPKIT_COMMIT"]
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        out = subprocess.run(["git", "log", "-1", "--format=%H", "--", "parts", "templates", "build.py"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "uncommitted"
    return out if out and Path(top).resolve() == ROOT else "uncommitted"


def is_project_source(path: Path) -> bool:
    """PATH (resolved) is an existing source file of the project: a file git tracks in ROOT's work tree, the default
    submission.py aside (it is the build's own output).

    Where git cannot tell (no git, ROOT not a repository, or ROOT inside another repository, as a copy without
    .git from scripts/snapshot.sh is), a file under SOURCE_FOLDERS or one of TOP_LEVEL_SOURCES counts as a source,
    tracked or not, and no other does: refusing every existing file would refuse rebuilding a candidate in place."""
    root = ROOT.resolve()
    if path == root / "submission.py" or not path.is_file() or not path.is_relative_to(root):
        return False
    rel = path.relative_to(root)
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        if Path(top).resolve() == root:
            return bool(subprocess.run(["git", "--literal-pathspecs", "ls-files", "-z", "--", str(rel)], cwd=root,
                                       capture_output=True, check=True).stdout)
    except (OSError, subprocess.CalledProcessError):
        pass
    return rel.parts[0] in SOURCE_FOLDERS if len(rel.parts) > 1 else rel.name in TOP_LEVEL_SOURCES


def check_imports(text: str, where: str, run_folder: list[str] = (), placed: set[str] | None = None,
                  allowed_packages: list[str] = ()) -> None:
    """Code that goes into the built file may import only torch, the standard library, the modules the runner
    places beside it (the manifest's run_folder_imports) and the third-party packages the manifest lists (its
    packages); a refusal names the fix for its kind of module: another part (or a relative import), a module
    of the run folder (PLACED) not listed yet, or a package not listed yet."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise PopkitError(f"{where}:{exc.lineno}: not valid Python ({exc.msg})") from None
    allowed = packages.STANDARD | set(run_folder) | set(allowed_packages)
    for name, node in packages.imports(tree):
        top = name.split(".")[0]
        if top in allowed:
            continue
        if top in (PARTS_PACKAGE, ""):
            fix = f"a cross-part import ends with '{INLINE_MARK}'"
        elif placed and top in placed:
            fix = f"the runner places {top}.py beside submission.py: add {top} to the manifest's run_folder_imports"
        else:
            fix = (f"a package beyond torch and the standard library: add {top} to the manifest's packages when the "
                   "leaderboard's runner has it")
        raise PopkitError(f"{where}:{node.lineno}: imports {name!r}; {fix}")


def render(problem: str, kernelguard: bool = True, name: str | None = None) -> BuildResult:
    """Render the submission text for a problem (no file is written); preflight it, with KernelGuard unless
    kernelguard is False (a KernelGuard scan is a process of its own, ~2 s for a CUDA problem's file). The
    preflight's lines name the file NAME (the path a build writes; default PROBLEM.py)."""
    manifest = load_manifest(problem)
    manifest_path = PARTS / problem / "manifest.yml"
    leaderboard, gpu, placed, entry_points = header_facts(problem)
    run_folder, allowed_packages = manifest["run_folder_imports"], manifest["packages"]
    if placed is not None and set(run_folder) - placed:
        missing = ", ".join(sorted(set(run_folder) - placed))
        raise PopkitError(f"{manifest_path}: run_folder_imports names {missing}, which the runner does not place "
                          f"beside submission.py (its task files give: {', '.join(sorted(placed)) or 'none'})")
    cuda_parts = [read_part(rel) for rel in manifest["cuda"]]
    python_parts = [read_part(rel) for rel in manifest["python"]]
    python_texts = [python_part_text(p) for p in python_parts]
    for part, text in zip(python_parts, python_texts):
        check_imports(text, str(PARTS / part.path), run_folder, placed, allowed_packages)
    if cuda_parts and not any(defines(ast.parse(text), "CUDA") for text in python_texts):
        raise PopkitError(f"{manifest_path}: CUDA parts need a Python part that defines CUDA, the loader: "
                          "add common/cuda_loader.py to 'python'")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    try:
        template = env.get_template(TEMPLATE)
        text = template.render(
            problem=problem, title=manifest["title"], leaderboard=leaderboard, gpu=gpu, entry_points=entry_points,
            commit=inputs_commit(), parts=cuda_parts + python_parts, has_cuda=bool(cuda_parts),
            packages_line=packages.header_line(packages.imported(python_texts, allowed_packages)),
            cuda=assemble_cuda(cuda_parts),
            python_parts=[{"path": p.path, "text": t} for p, t in zip(python_parts, python_texts)])
    except jinja2.TemplateError as exc:
        where = f"{TEMPLATES / TEMPLATE}:{getattr(exc, 'lineno', '?')}"
        raise PopkitError(f"{where}: template error: {exc}") from None
    check_imports(text, "the built file", run_folder, placed, allowed_packages)
    report = preflight_bytes(text.encode(), name or f"{problem}.py", expect_leaderboard=leaderboard,
                             kernelguard=kernelguard)
    return BuildResult(problem, text, cuda_parts + python_parts, report)


def build(problem: str, output: Path | str = ROOT / "submission.py") -> BuildResult:
    """Render, preflight and write; a failing preflight, or an output name other than *.py (the built file is
    Python: preflight.name_error, the rule submit uses too), leaves any previous output untouched. The null
    device as OUTPUT builds and preflights, and keeps nothing."""
    if not Path(output).name:       # -o '' (Path('') is '.', whose name is empty)
        raise PopkitError("an empty output name: name the file to write, e.g. -o submission.py; nothing built")
    discard = is_null_device(output)     # -o /dev/null: built and preflighted, kept nowhere
    refused = None if discard else name_error(Path(output).name, python=True)
    if refused:
        raise PopkitError(f"{refused}; nothing built")
    target = Path(output).resolve()
    for sources in (PARTS, TEMPLATES):      # a built file written there replaced a part (or the template)
        if target.is_relative_to(sources.resolve()):
            raise PopkitError(f"-o {output}: inside {sources}, where the sources the builder reads live; nothing built")
    if not discard and is_project_source(target):     # -o build.py replaced the builder
        raise PopkitError(f"-o {output}: a source file of the project, which the built file would replace: "
                          "name a new file (or submission.py); nothing built")
    result = render(problem, name=None if discard else str(output))    # /dev/null is no .py name: PROBLEM.py
    if not result.preflight.ok:
        raise PopkitError("; ".join(result.preflight.errors))
    result.output = Path(output)
    if discard:
        return result
    try:
        write_atomic(result.output, result.text)
    except OSError as exc:
        raise PopkitError(f"{output}: cannot write ({exc.strerror})") from None
    return result


def stale_reason(path: Path | str = ROOT / "submission.py") -> str | None:
    """None when PATH is what `popkit build PROBLEM` writes now, PROBLEM being the one its header names
    ('# Built by popkit from parts/PROBLEM'); else why not, with the command that rebuilds it.

    The same build means the same bytes but for the '# toolkit commit:' line: it names the last commit that
    touched the builder's inputs, which a file committed together with its parts' change cannot name (the
    commit does not exist yet when the file is built), and a copy without git says 'uncommitted'. The parts'
    hashes, the header directives and every line of code must match."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})"
    problem = built_from(text)
    if problem is None:
        return f"{path}: not built by popkit (no '# Built by popkit from parts/PROBLEM' line in its header)"
    command = f"popkit build {problem}" + ("" if path.resolve() == (ROOT / "submission.py") else f" -o {path}")
    fresh = render(problem, kernelguard=False).text       # only the text is compared: no KernelGuard scan
    old_lines, new_lines = COMMIT_LINE.sub("", text).splitlines(), COMMIT_LINE.sub("", fresh).splitlines()
    if old_lines == new_lines and text.endswith("\n") == fresh.endswith("\n"):
        return None
    index = next((i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b),
                 min(len(old_lines), len(new_lines)))
    was = old_lines[index][:110] if index < len(old_lines) else "(end of file)"
    now = new_lines[index][:110] if index < len(new_lines) else "(end of file)"
    return (f"{path} is not a fresh build of parts/{problem}: line {index + 1} is {was!r}, a build now writes "
            f"{now!r}; rebuild it with `{command}`")
