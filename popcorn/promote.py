"""Incumbents: the submission a candidate must beat, kept with its evidence under logs/incumbents/.

`promote` copies the built file to logs/incumbents/PROBLEM.py (the one `diff`
compares against by default), moves the incumbent it replaces to
logs/incumbents/archive/, and records in history.jsonl which diff justified
it, so nothing earlier is lost.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from popcorn import logs
from popcorn.errors import PopkitError

INCUMBENTS = logs.ROOT / "logs" / "incumbents"


def incumbent_path(problem: str, root: Path | None = None) -> Path:
    return (root or INCUMBENTS) / f"{problem}.py"


def last_diff_for(problem: str, sha: str, log_path: Path) -> dict | None:
    records, _ = logs.read_records(log_path)
    for record in reversed(records):
        if record.get("problem") == problem and record.get("mode") == "diff" \
                and record.get("submission_sha256") == sha:
            return record
    return None


def promote(problem: str, submission: Path, root: Path | None = None, log_path: Path = logs.DEFAULT_LOG,
            force: bool = False) -> Path:
    """Make the candidate the incumbent; without force it needs a passing diff of this exact file."""
    root = root or INCUMBENTS
    if not submission.is_file():
        raise PopkitError(f"{submission}: no such file")
    sha = logs.file_sha256(submission)
    target = incumbent_path(problem, root)
    evidence = last_diff_for(problem, sha, log_path)
    if target.exists() and not force:
        if evidence is None:
            raise PopkitError(f"no diff record for this file ({sha[:12]}): run `popkit diff {problem}` first, "
                              "or pass --force")
        if not evidence.get("passed"):
            raise PopkitError(f"the last diff of this file failed (at {evidence.get('time')}); --force overrides")
    root.mkdir(parents=True, exist_ok=True)
    if target.exists():
        archive = root / "archive"
        archive.mkdir(exist_ok=True)
        shutil.copyfile(target, archive / f"{problem}-{logs.file_sha256(target)[:12]}.py")
    shutil.copyfile(submission, target)
    with open(root / "history.jsonl", "a") as history:
        history.write(json.dumps({"time": logs.utc_now(), "problem": problem, "sha256": sha,
                                  "diff_time": evidence.get("time") if evidence else None,
                                  "forced": force}) + "\n")
    return target
