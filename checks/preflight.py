"""Preflight: the leaderboard's rules, checked on a file before it is written or uploaded.

Rules (../shared/docs/platform-rules.md): no 'stream' in any case, 1..1,000,000
bytes, UTF-8, an accepted file suffix, the #!POPCORN directives in the leading
comment block; a .py file must compile (the grader would fail at import, after
the upload); and KernelGuard (PyPI 'kernelguard'), whose 'should_filter'
verdict the server would mark as hacked. Without kernelguard installed the
other rules still run and the report says KernelGuard was skipped.
"""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

MAX_BYTES = 1_000_000
SUFFIXES = (".py", ".cu", ".cuh", ".cpp")
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


def check_rules(data: bytes, name: str, expect_leaderboard: str | None = None) -> PreflightReport:
    """The server's own rules on the file's bytes (no external tools)."""
    report = PreflightReport()
    if not name.endswith(SUFFIXES):
        report.errors.append(f"{name}: file name must end in {', '.join(SUFFIXES)}")
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
    if name.endswith(".py"):
        check_syntax(report, text, name)
    report.directives = leading_directives(text)
    for key in ("leaderboard", "gpu"):
        if key not in report.directives:
            report.errors.append(f"{name}: missing '#!POPCORN {key} ...' in the leading comment block")
    board = report.directives.get("leaderboard")
    if expect_leaderboard and board and board != expect_leaderboard:
        report.errors.append(f"{name}: directive says leaderboard {board!r}, expected {expect_leaderboard!r}")
    return report


def check_syntax(report: PreflightReport, text: str, name: str) -> None:
    """Compile (never run) the file: a syntax error is an error with its line; a compiler
    warning (an invalid escape, say) is a warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            compile(text, name, "exec", dont_inherit=True)
        except SyntaxError as exc:
            where = f"{name}:{exc.lineno}" if exc.lineno else name
            report.errors.append(f"{where}: not valid Python ({exc.msg})")
        except ValueError as exc:        # a NUL byte, on Pythons that refuse it before parsing
            report.errors.append(f"{name}: not valid Python ({exc})")
    report.warnings.extend(f"{name}:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught)


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
                    kernelguard: bool = True) -> PreflightReport:
    report = check_rules(data, name, expect_leaderboard)
    if kernelguard and report.ok:
        apply_kernelguard(report, data.decode("utf-8"), name)
    return report


def preflight_file(path: Path | str, expect_leaderboard: str | None = None,
                   kernelguard: bool = True) -> PreflightReport:
    """All rules on a file on disk; an unreadable file is an error in the report."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        report = PreflightReport()
        report.errors.append(f"{path}: cannot read ({exc.strerror})")
        return report
    return preflight_bytes(data, path.name, expect_leaderboard, kernelguard)
