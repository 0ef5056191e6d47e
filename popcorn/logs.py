"""Evidence log: logs/performance.jsonl, one JSON record per check/bench/diff run.

The record shape is the contract in ../shared/docs/design.md ("Evidence"):
time, problem, mode, commit, submission_sha256, gpu, torch, cuda, compile_s,
cases[...], geomean_us, baseline_geomean_us, baseline. Extra keys are allowed.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LOG = ROOT / "logs" / "performance.jsonl"
MODES = ("check", "bench", "diff", "leaderboard")


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git_commit(cwd: Path = ROOT) -> str | None:
    """The toolkit's current commit (with '-dirty' when the tree has changes).

    Outside git (the device machine gets a copy of the tree without .git) it is
    the POPKIT_COMMIT variable the caller passes along, else None."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("POPKIT_COMMIT")
    return sha + ("-dirty" if dirty else "")


def file_sha256(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def geomean(values) -> float:
    """Geometric mean of positive values (how the leaderboard ranks a set of cases)."""
    values = list(values)
    if not values:
        raise ValueError("geomean of no values")
    if any(v <= 0 for v in values):
        raise ValueError(f"geomean needs positive values, got {min(values)}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def case_geomean(cases: list[dict], key: str = "mean_us") -> float | None:
    """Geomean of one timing key over a record's cases; None unless every case has a positive value."""
    values = [case.get(key) for case in cases]
    if not values or any(v is None or v <= 0 for v in values):
        return None
    return geomean(values)


def new_record(problem: str, mode: str, **fields) -> dict:
    """A record with the contract's keys; callers fill in the rest via fields."""
    if mode not in MODES:
        raise ValueError(f"unknown log mode {mode!r}")
    record = {
        "time": utc_now(), "problem": problem, "mode": mode, "commit": git_commit(),
        "submission_sha256": None, "gpu": None, "torch": None, "cuda": None, "compile_s": None,
        "cases": [], "geomean_us": None, "baseline_geomean_us": None, "baseline": None,
    }
    record.update(fields)
    return record


def strict_json(value):
    """The value with non-finite floats (a gate's inf on a failed case) as null: the log stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def append_record(record: dict, path: Path | str = DEFAULT_LOG) -> Path:
    """Append one record as one line. A single write of one line keeps concurrent appends whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(strict_json(record), sort_keys=False, allow_nan=False) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return path


def read_records(path: Path | str = DEFAULT_LOG) -> tuple[list[dict], list[str]]:
    """All records, plus one message per line that is not a JSON object (with its line number)."""
    path = Path(path)
    records, problems = [], []
    if not path.is_file():
        return records, problems
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            problems.append(f"{path}:{number}: not UTF-8")
            continue
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{number}: not JSON ({exc.msg})")
            continue
        if not isinstance(value, dict):
            problems.append(f"{path}:{number}: not a JSON object")
            continue
        records.append(value)
    return records, problems
