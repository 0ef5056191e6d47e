"""Preflight: the leaderboard's rules, checked on a file before it is written or uploaded.

Rules (../shared/docs/platform-rules.md): no 'stream' in any case, 1..1,000,000
bytes, UTF-8, an accepted file suffix, the #!POPCORN directives in the leading
comment block; a .py file must compile and define custom_kernel, or the functions
its board's record names (else the grader fails at import, after the upload); and
KernelGuard (PyPI 'kernelguard'), whose 'should_filter' verdict the server would
mark as hacked. Without kernelguard installed the other rules still run and the
report says KernelGuard was skipped.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from checks.cuda_units import ONE_UNIT_CLASH, embedded_parts, namespace_clashes
from checks.problems import ENTRY_POINT, entry_points_of

MAX_BYTES = 1_000_000
PYTHON_SUFFIX = ".py"
SUFFIXES = (PYTHON_SUFFIX, ".cu", ".cuh", ".cpp")
BANNED = re.compile(b"stream", re.IGNORECASE)
DIRECTIVE = re.compile(r"^\s*(?:#|//)!POPCORN\s+(\w+)\s+(\S+)")


@dataclass
class PreflightReport:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


def leading_directives(text: str) -> dict[str, str]:
    """'#!POPCORN key value' lines of the leading comment block (as the server reads them)."""
    found = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not (stripped.startswith("#") or stripped.startswith("//")):
            break
        match = DIRECTIVE.match(stripped)
        if match:
            found.setdefault(match.group(1).lower(), match.group(2))
    return found


def is_python_name(name: str) -> bool:
    """Whether the preflight checks a file as Python (it compiles, defines custom_kernel): by its name, .py."""
    return name.endswith(PYTHON_SUFFIX)


def name_error(name: str, python: bool = False) -> str | None:
    """The one rule on a file's name, for submit's preflight and the builder's output: the error line, or
    None for a name it accepts. The server takes any of SUFFIXES (a hand-written .cu file, say); a file
    known to hold Python (python=True: what `popkit build` writes) must be named .py, the name under
    which the preflight checks it as Python, so a built file never reaches submit unchecked."""
    if python and not is_python_name(name):
        return (f"{name}: a built file is Python, so its name must end in {PYTHON_SUFFIX} (the preflight "
                f"checks syntax and {ENTRY_POINT} only in a {PYTHON_SUFFIX} file)")
    if name.endswith(SUFFIXES):
        return None
    return f"{name}: file name must end in {', '.join(SUFFIXES)}"


def check_rules(data: bytes, name: str, expect_leaderboard: str | None = None,
                stand_in: dict[str, str] | None = None) -> PreflightReport:
    """The server's own rules on the file's bytes (no external tools), and for a popkit build that its embedded
    CUDA parts (CUDA_PARTS) can compile as one unit, as a runner of under 4 CPUs builds them (checks/cuda_units.py).
    STAND_IN gives directives (leaderboard, gpu) that a file without them is checked under, as a problem's record
    gives them; report.directives keeps only the file's own."""
    stand_in = stand_in or {}
    report = PreflightReport()
    refused = name_error(name)
    if refused:
        report.errors.append(refused)
    if not data:
        report.errors.append(f"{name}: file is empty")
    if len(data) > MAX_BYTES:
        report.errors.append(f"{name}: {len(data):,} bytes, over the {MAX_BYTES:,}-byte limit")
    for match in BANNED.finditer(data):
        line = data.count(b"\n", 0, match.start()) + 1
        report.errors.append(f"{name}:{line}: contains the banned word 'stream' (any case)")
        break
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        report.errors.append(f"{name}: not UTF-8 (byte {exc.start})")
        return report
    report.directives = leading_directives(text)
    if is_python_name(name):
        tree = check_syntax(report, text, name)
        called = entry_points_of(report.directives.get("leaderboard", stand_in.get("leaderboard")))
        missing = missing_entry_points(tree, called) if tree is not None else []
        if missing:
            report.errors.append(f"{name}: defines no {', '.join(missing)} at its top level (the grader runs "
                                 f"`from submission import {', '.join(called)}`)")
        for clash in namespace_clashes(embedded_parts(tree) or {}) if tree is not None else []:
            report.errors.append(f"{name}: CUDA_PARTS: {clash}: {ONE_UNIT_CLASH}")
    for key in ("leaderboard", "gpu"):
        if key not in report.directives and key not in stand_in:
            report.errors.append(f"{name}: missing '#!POPCORN {key} ...' in the leading comment block")
    board = report.directives.get("leaderboard")
    if expect_leaderboard and board and board != expect_leaderboard:
        report.errors.append(f"{name}: directive says leaderboard {board!r}, expected {expect_leaderboard!r}")
    return report


def check_syntax(report: PreflightReport, text: str, name: str) -> ast.Module | None:
    """Compile (never run) the file: a syntax error is an error with its line; a parser or compiler
    warning (an invalid escape, say) is a warning. Returns the syntax tree of a file that compiles."""
    tree = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            # Parsed once, then compiled from the tree: each warning is raised by one stage only.
            tree = compile(text, name, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
            compile(tree, name, "exec", dont_inherit=True)
        except SyntaxError as exc:
            where = f"{name}:{exc.lineno}" if exc.lineno else name
            report.errors.append(f"{where}: not valid Python ({exc.msg})")
            tree = None
        except ValueError as exc:        # a NUL byte, on Pythons that refuse it before parsing
            report.errors.append(f"{name}: not valid Python ({exc})")
    report.warnings.extend(f"{name}:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught)
    return tree


def defines(tree: ast.Module, name: str) -> bool:
    """Whether a module binds NAME at its top level (def, class, assignment or import, also under
    if/try/with); a star import might, so it counts."""
    names = _bound_names(tree.body)
    return name in names or "*" in names


def missing_entry_points(tree: ast.Module, called: list[str]) -> list[str]:
    """The entry points of CALLED (what the grader imports from the file) that the module does not define."""
    return [entry for entry in called if not defines(tree, entry)]


def _bound_names(body: list[ast.stmt]) -> set[str]:
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t)
                      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            nested = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            nested += [handler.body for handler in getattr(node, "handlers", [])]
            names |= _bound_names([stmt for block in nested for stmt in block])
    return names


def kernelguard_available() -> bool:
    return importlib.util.find_spec("kernelguard") is not None


def run_kernelguard(text: str) -> dict:
    """KernelGuard's API-mode verdict on the code (a JSON object)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, kernelguard; sys.argv = ['kernelguard', '--api-mode']; kernelguard.main()"],
        input=text, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"kernelguard exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def apply_kernelguard(report: PreflightReport, text: str, name: str) -> None:
    if not kernelguard_available():
        report.notes.append("kernelguard is not installed: KernelGuard scan skipped (pip install kernelguard)")
        return
    try:
        verdict = run_kernelguard(text)
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        report.errors.append(f"{name}: KernelGuard could not scan the file: {exc}")
        return
    patterns = verdict.get("matched_patterns") or []
    described = [f"{p.get('pattern')} ({p.get('severity')}): {str(p.get('evidence'))[:120]}" for p in patterns]
    if verdict.get("should_filter") or verdict.get("classification") == "hacked":
        reason = "; ".join(filter(None, [verdict.get("filter_reason"), *described])) or "no reason given"
        report.errors.append(f"{name}: KernelGuard would mark it hacked: {reason}")
    else:
        report.warnings.extend(f"{name}: KernelGuard {d}" for d in described)


def preflight_bytes(data: bytes, name: str, expect_leaderboard: str | None = None,
                    kernelguard: bool = True, stand_in: dict[str, str] | None = None) -> PreflightReport:
    report = check_rules(data, name, expect_leaderboard, stand_in)
    if kernelguard and report.ok:
        apply_kernelguard(report, data.decode("utf-8"), name)
    return report


def preflight_file(path: Path | str, expect_leaderboard: str | None = None,
                   kernelguard: bool = True, stand_in: dict[str, str] | None = None) -> PreflightReport:
    """All rules on a file on disk; an unreadable file is an error in the report."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        report = PreflightReport()
        report.errors.append(f"{path}: cannot read ({exc.strerror})")
        return report
    return preflight_bytes(data, path.name, expect_leaderboard, kernelguard, stand_in)
