"""The layers (README "Layers"): no module imports a project package above its own layer, no modules
import each other in a circle, and docs/layers.json draws the same layers.

Imports are read with ast from the source (function-level imports included), so a lazy import
cannot hide an upward dependency or a circle."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PICTURE = ROOT / "docs" / "layers.json"
BOTTOM = ("popcorn.errors", "popcorn.evidence")
MIDDLE = ("checks",) + BOTTOM
LIBRARY = ("build", "popcorn.client", "popcorn.report", "popcorn.promote") + MIDDLE

# layer -> (its modules, by name prefix; the project packages it may import besides its own modules)
LAYERS = {
    "cli": (("popcorn.cli", "popcorn.__main__"), None),                    # None: anything
    "scripts": (("scripts",), LIBRARY),
    "builder": (("build",), MIDDLE),
    "client": (("popcorn.client",), MIDDLE),
    "report": (("popcorn.report",), MIDDLE),
    "promote": (("popcorn.promote",), MIDDLE),
    "checker": (("checks",), ("checks.native",) + BOTTOM),
    "native": (("checks.native",), BOTTOM),                               # looked up by name (checks/native)
    "evidence": (("popcorn.evidence",), ("popcorn.errors",)),
    "errors": (("popcorn.errors",), ()),
}
PROJECT = ("popcorn", "checks", "build", "scripts")
PACKAGES = ("popcorn", "checks")        # bare package names: their __init__ files are empty


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def layer_of(module: str) -> str | None:
    """The layer whose prefix matches MODULE most closely (popcorn.cli.loop -> cli)."""
    hits = [(len(p), layer) for layer, (prefixes, _) in LAYERS.items() for p in prefixes if _within(module, (p,))]
    return max(hits)[1] if hits else None


def imported(source: str, package: str) -> set[str]:
    """Absolute names of the project modules SOURCE imports (relative imports resolved in PACKAGE)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return {n for n in names if _within(n, PROJECT)}


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """'module imports name (layer)' for each import of a package MODULE's layer may not use."""
    layer = layer_of(module)
    own, allowed = LAYERS[layer]
    if allowed is None:
        return []
    bad = []
    for name in sorted(imported(source, module if is_package else module.rpartition(".")[0])):
        if _within(name, own) or _within(name, allowed) or name in PACKAGES:
            continue
        bad.append(f"{module} imports {name} ({layer_of(name)})")
    return bad


def project_modules() -> dict[str, Path]:
    """{module name: file} of build.py and every module of popcorn/, checks/ and scripts/."""
    files = {"build": ROOT / "build.py"}
    for package in ("popcorn", "checks", "scripts"):
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            files[name.removesuffix(".__init__")] = path
    return files


def import_graph() -> dict[str, set[str]]:
    """{module: the project modules it imports} over project_modules()."""
    modules = project_modules()
    return {m: {n for n in imported(path.read_text(encoding="utf-8"),
                                    m if path.name == "__init__.py" else m.rpartition(".")[0])
                if n in modules and n != m}
            for m, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The sets of two or more modules that reach each other through imports (strongly connected
    components, Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def picture_part(path: str, parts: dict) -> str | None:
    """The part of the picture a file (relative path) is on: the one whose path takes it most closely."""
    hits = [(len(p), name) for name, part in parts.items() for p in part["is"]
            if path == p or (p.endswith("/") and path.startswith(p))]
    return max(hits)[1] if hits else None


def test_every_project_module_has_a_layer():
    assert [m for m in project_modules() if m != "popcorn" and layer_of(m) is None] == []


def test_no_module_imports_a_higher_layer():
    found = [v for m, path in project_modules().items() if m != "popcorn"
             for v in violations(path.read_text(encoding="utf-8"), m, path.name == "__init__.py")]
    assert found == []


def test_the_picture_draws_a_never_for_each_pair_of_its_parts_the_layers_keep_apart():
    """docs/layers.json (the layers as parts, the imports between them today, and the imports they must never
    make) marks never exactly where the rule above forbids every import from one part into another."""
    picture = json.loads(PICTURE.read_text(encoding="utf-8"))
    assert [p for part in picture["parts"].values() for p in part["is"] if not (ROOT / p).exists()] == []
    members = {name: [] for name in picture["parts"]}
    for module, path in project_modules().items():
        part = picture_part(path.relative_to(ROOT).as_posix(), picture["parts"])
        if part is not None and module not in PACKAGES:
            members[part].append(module)
    kept_apart = {(a, b) for a in members for b in members if a != b and members[a] and members[b]
                  and all(violations(f"import {n}\n", m) for m in members[a] for n in members[b])}
    assert sorted((a, b) for a, b, *_ in picture["never"]) == sorted(kept_apart)


def test_the_pictures_arrows_are_the_imports_between_its_parts_today():
    # scripts/peers.py imports popcorn.errors and popcorn.evidence, and the picture drew no scripts -> bottom.
    picture = json.loads(PICTURE.read_text(encoding="utf-8"))
    part = {m: picture_part(path.relative_to(ROOT).as_posix(), picture["parts"])
            for m, path in project_modules().items()}
    today = {(part[m], part[n]) for m, names in import_graph().items() for n in names
             if part[m] and part[n] and part[m] != part[n]}
    assert sorted(tuple(arrow) for arrow in picture["arrows"]) == sorted(today)


def test_no_modules_import_each_other_in_a_circle():
    assert circles(import_graph()) == []


def test_a_circle_is_found_through_any_number_of_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("module, source, expected", [
    ("checks.runner", "def f():\n    from popcorn.cli import failures\n",
     ["checks.runner imports popcorn.cli (cli)", "checks.runner imports popcorn.cli.failures (cli)"]),
    ("popcorn.evidence.logs", "import checks.problems\n", ["popcorn.evidence.logs imports checks.problems (checker)"]),
    ("popcorn.client.results", "import popcorn.report.data\n",
     ["popcorn.client.results imports popcorn.report.data (report)"]),
    ("checks.native.qr_v2", "import checks.problems\n", ["checks.native.qr_v2 imports checks.problems (checker)"]),
    ("scripts.sweep_route", "import popcorn.cli.loop\n", ["scripts.sweep_route imports popcorn.cli.loop (cli)"]),
    ("popcorn.errors", "from . import evidence\n", ["popcorn.errors imports popcorn.evidence (evidence)"]),
    ("popcorn.client.results", "from checks.problems import load_problem\nfrom popcorn.errors import PopkitError\n", []),
    ("popcorn.cli.loop", "import build\nfrom popcorn.client import api\n", []),
])
def test_the_rule_catches_an_upward_import(module, source, expected):
    assert violations(source, module) == expected
