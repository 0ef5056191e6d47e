"""Runs the competition's own eval.py on a submission and folds its verdict into a popkit run.

The user points at a reference-kernels problem folder (eval.py, reference.py,
task.py, utils.py, ...). Its files and the submission go into a fresh folder;
the submission runs once on its own (the grader's pre-run, so a compile at
import is cached), then `eval.py test CASES_FILE` runs the very cases popkit
ran and reports `key: value` lines through the pipe named by POPCORN_FD (see
docs/problems.md, "How the official harness runs a submission"). POPCORN_SEED,
when set, passes through to eval.py as it does on the grader.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from checks.problems import format_spec, load_problem, short_spec
from checks.runner import RunOutcome, results_table
from popcorn.errors import PopkitError
from popcorn.results import number

PRERUN_TIMEOUT_S = 120
TIMEOUT_EXIT = 114          # the grader's exit code for a run past its limit
EXIT_MEANINGS = {0: "ok", 111: "no pipe", 112: "validation failed", 113: "bad case file", TIMEOUT_EXIT: "timed out"}
TIMEOUT_KEYS = {"test": "test", "benchmark": "benchmark", "leaderboard": "ranked"}
STDERR_TAIL_CHARS = 2000


@dataclass
class OfficialResult:
    cases: list[dict]           # {"spec": str, "status": "pass"|"fail", "message": str|None}, in eval.py's order
    check: str | None           # the final `check:` line, None when eval.py wrote none
    exit_code: int
    stderr_tail: str
    prerun_error: str | None = None
    timeout_s: float | None = None

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and self.check == "pass"


def run_official(problem_dir: Path, submission: Path, record: dict, progress: Callable[[str], None] = lambda s: None,
                 mode: str = "test", timeout_s: float | None = None) -> OfficialResult:
    """Run the official eval.py on the cases of a popkit run record; failures are reported, not raised."""
    problem_dir, submission = Path(problem_dir), Path(submission)
    if mode not in TIMEOUT_KEYS:
        raise PopkitError(f"unknown official mode {mode!r} (known: {', '.join(TIMEOUT_KEYS)})")
    if not (problem_dir / "eval.py").is_file():
        raise PopkitError(f"{problem_dir}: no eval.py there (expected a reference-kernels problem folder)")
    if not submission.is_file():
        raise PopkitError(f"{submission}: no such submission file")
    if timeout_s is None:
        timeout_s = load_problem(record["problem"]).timeouts_s[TIMEOUT_KEYS[mode]]
    specs = [format_spec(case["spec"]) for case in record["cases"]]
    with tempfile.TemporaryDirectory(prefix="popkit-official-") as tmp:
        workdir = Path(tmp)
        shutil.copytree(problem_dir, workdir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copyfile(submission, workdir / "submission.py")
        progress("official: pre-run of submission.py")
        prerun_error = prerun(workdir)
        (workdir / "cases.txt").write_text("".join(spec + "\n" for spec in specs))
        progress(f"official: eval.py {mode} on {len(specs)} cases (limit {timeout_s:g} s)")
        lines, exit_code, stderr = run_eval(workdir, mode, timeout_s)
    kind = "test" if mode == "test" else "benchmark"
    return OfficialResult(cases=parse_cases(lines, kind), check=lines.get("check"), exit_code=exit_code,
                          stderr_tail=stderr[-STDERR_TAIL_CHARS:], prerun_error=prerun_error, timeout_s=timeout_s)


def prerun(workdir: Path) -> str | None:
    """Run submission.py once on its own, as the grader does; None on success, else why it failed."""
    try:
        done = subprocess.run([sys.executable, "submission.py"], cwd=workdir, capture_output=True, text=True,
                              timeout=PRERUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"timed out after {PRERUN_TIMEOUT_S} s"
    if done.returncode != 0:
        return f"exit code {done.returncode}: {last_line(done.stderr)}"
    return None


def run_eval(workdir: Path, mode: str, timeout_s: float) -> tuple[dict, int, str]:
    """Run `eval.py MODE cases.txt` with POPCORN_FD; returns (its key: value lines, exit code, stderr).

    The pipe is read by a thread while the process runs, so a large report
    cannot fill the pipe and deadlock; past the limit the whole process group
    is killed and the exit code is the grader's 114.
    """
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([sys.executable, "eval.py", mode, "cases.txt"], cwd=workdir,
                            env={**os.environ, "POPCORN_FD": str(write_fd)}, pass_fds=(write_fd,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    os.close(write_fd)
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.append(_read_all(read_fd)), daemon=True)
    reader.start()
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
        exit_code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        exit_code = TIMEOUT_EXIT
    reader.join()
    return parse_lines(b"".join(chunks).decode(errors="replace")), exit_code, stderr.decode(errors="replace")


def _read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as pipe:
        return pipe.read()


def parse_lines(text: str) -> dict:
    """`key: value` lines as a dict (the last value of a repeated key wins)."""
    pairs = (line.partition(":") for line in text.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep}


def parse_cases(lines: dict, kind: str) -> list[dict]:
    """The reported cases of one kind ('test' or 'benchmark'); a case with no result fails."""
    cases = []
    for i in range(int(number(lines.get(f"{kind}-count")) or 0)):
        case = {key: lines.get(f"{kind}.{i}.{key}") for key in ("spec", "status", "error", "message", "mean")}
        reported = case["status"] or ("pass" if case["mean"] else None)
        cases.append({"spec": case["spec"] or "", "status": "pass" if reported == "pass" else "fail",
                      "message": case["error"] or case["message"] or (None if reported else "no result reported")})
    return cases


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "no output"


def merge(outcome: RunOutcome, official: OfficialResult) -> RunOutcome:
    """Our run with the official verdict: an "official" column, record["official"], and a note per problem."""
    ours = outcome.record["cases"]
    theirs = official.cases + [None] * (len(ours) - len(official.cases))
    rows = [{**case, "official": other["status"] if other else "-"} for case, other in zip(ours, theirs)]
    record = {**outcome.record, "official": {"check": official.check, "exit_code": official.exit_code,
                                             "prerun_error": official.prerun_error, "cases": official.cases}}
    return RunOutcome(record=record, table=results_table(rows, outcome.record["mode"]),
                      passed=outcome.passed and official.passed, notes=outcome.notes + official_notes(ours, official))


def official_notes(ours: list[dict], official: OfficialResult) -> list[str]:
    """One line per thing worth knowing about the official run: a failed pre-run, mismatches, failures."""
    notes = []
    if official.prerun_error:
        notes.append(f"official pre-run of submission.py failed ({official.prerun_error}); eval.py ran anyway")
    if len(official.cases) != len(ours):
        notes.append(f"official eval.py reported {len(official.cases)} cases, popkit ran {len(ours)}")
    for i, (case, other) in enumerate(zip(ours, official.cases)):
        if other["spec"] != format_spec(case["spec"]):
            notes.append(f"official case {i} is {other['spec']!r}, popkit's is {format_spec(case['spec'])!r}")
        if other["status"] == "fail":
            notes.append(f"official: {short_spec(case['spec'])} failed: {other['message'] or 'no message'}")
    if official.exit_code == TIMEOUT_EXIT:
        notes.append(f"official eval.py timed out after {official.timeout_s:g} s")
    elif official.exit_code not in (0, 112):
        meaning = EXIT_MEANINGS.get(official.exit_code, "crashed")
        notes.append(f"official eval.py exit code {official.exit_code} ({meaning}): {last_line(official.stderr_tail)}")
    elif not official.passed and not any(other["status"] == "fail" for other in official.cases):
        notes.append(f"official eval.py failed without a failing case: check {official.check or 'missing'}, "
                     f"exit code {official.exit_code}")
    return notes
