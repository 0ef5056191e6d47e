"""Incumbents: the submission a candidate must beat, kept with its evidence under logs/incumbents/.

`promote` copies the built file to logs/incumbents/PROBLEM.py (the one `diff`
compares against by default), moves the incumbent it replaces to
logs/incumbents/archive/, and records in history.jsonl which runs justified
it, so nothing earlier is lost.

The evidence must be about the very file (its sha256), made on a GPU, over the
problem's full official list: a passing diff of every benchmark case the
leaderboard times (Problem.ranked_benchmarks), against that very incumbent, to replace it; a passing
check of every test and a passing bench of those cases for the first one. --force skips the evidence, never the
problem and leaderboard checks, nor that the file is a built submission (runner.not_a_submission, and popkit's
build header or a leaderboard line) whose CUDA parts can compile as one unit (checks/cuda_units.py).
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from checks.cuda_units import ONE_UNIT_CLASH, built_file_clashes
from checks.preflight import leading_directives
from checks.problems import Problem, load_problem
from checks.runner import require_submission_for
from popcorn.errors import Interrupted, PopkitError, ProblemError, deferred_interrupt
from popcorn.evidence import logs
from popcorn.evidence.files import write_atomic
from popcorn.evidence.provenance import built_from

INCUMBENTS = logs.ROOT / "logs" / "incumbents"
FULL_LIST = {"check": "tests", "bench": "ranked_benchmarks", "diff": "ranked_benchmarks"}


def incumbent_path(problem: str, root: Path | None = None) -> Path:
    return (root or INCUMBENTS) / f"{problem}.py"


def newest_evidence(records: list[dict], prob: Problem, sha: str, mode: str,
                    incumbent: Path | None = None) -> tuple[dict | None, Counter]:
    """The newest GPU record of MODE for this file over the full official list (a diff: against INCUMBENT, the
    file it would replace), and how many records of this file and mode were passed over (on CPU, on chosen
    cases only, against another incumbent)."""
    specs = getattr(prob, FULL_LIST[mode])
    against = logs.file_sha256(incumbent) if mode == "diff" and incumbent is not None else None
    passed_over = Counter()
    for record in reversed(records):
        if (record.get("problem"), record.get("mode"), record.get("submission_sha256")) != (prob.name, mode, sha):
            continue
        if not logs.ran_on_gpu(record):
            passed_over["CPU run"] += 1
        elif not logs.covers(record, specs):
            passed_over["run on chosen cases only"] += 1
        elif against is not None and record.get("incumbent_sha256") != against:
            # A win over a slower file (--incumbent reference, an older incumbent) says nothing about this one.
            passed_over[f"run against another incumbent than {incumbent.name} ({against[:12]})"] += 1
        else:
            return record, passed_over
    return None, passed_over


def _missing(mode: str, prob: Problem, submission: Path, record: dict | None, passed_over: Counter,
             log_path: Path = logs.DEFAULT_LOG) -> str:
    """What one missing piece of evidence is, and the command that makes it (into the log promote reads)."""
    count = len(getattr(prob, FULL_LIST[mode]))
    kind = "test" if mode == "check" else "benchmark case"
    if mode != "check" and prob.ranking == "last":
        scope = "the last benchmark case, the only one the leaderboard ranks"
    else:
        scope = f"the only {kind}" if count == 1 else f"all {count} {kind}s"
    into = "" if Path(log_path) == logs.DEFAULT_LOG else f" --log {log_path}"
    command = f"`popkit {mode} {prob.name} --submission {submission}{into}` on a GPU"
    if record is not None:
        return f"the newest GPU {mode} of this file over {scope} failed ({record.get('time')}): fix it and rerun {command}"
    ignored = ", ".join(f"{n} {why}" for why, n in passed_over.items())
    return f"no GPU {mode} of this file over {scope}" + (f" (ignored: {ignored})" if ignored else "") + f": run {command}"


def promote(problem: str, submission: Path, root: Path | None = None, log_path: Path = logs.DEFAULT_LOG,
            force: bool = False) -> Path:
    """Make the candidate the incumbent. Without force it needs GPU evidence of this exact file (see above)."""
    try:
        prob = load_problem(problem)      # read now: `popkit problem add` adds problems at runtime
    except ProblemError as exc:
        raise PopkitError(str(exc)) from None
    submission = Path(submission)
    require_submission_for(prob, submission)
    text = submission.read_text(encoding="utf-8", errors="replace")
    if built_from(text) is None and "leaderboard" not in leading_directives(text):
        raise PopkitError(f"{submission}: neither popkit's build header nor a '#!POPCORN leaderboard' line: not a "
                          f"built submission; `popkit build {problem}` writes one")
    clashes = built_file_clashes(text)
    if clashes:      # the GPU hosts build one unit a part and pass it; a runner of under 4 CPUs cannot build it
        raise PopkitError(f"{submission}: {'; '.join(clashes)}: {ONE_UNIT_CLASH}, rebuild it and run its evidence "
                          "again (--force does not skip this)")
    root = root or INCUMBENTS
    sha = logs.file_sha256(submission)
    target = incumbent_path(problem, root)
    if target.exists() and os.path.samefile(submission, target):
        # Copying it onto itself would fail half-way, after archiving it.
        alias = "" if submission == target else f" ({target})"
        raise PopkitError(f"{submission} is the {problem} incumbent itself{alias}: nothing to promote; pass the "
                          "candidate with --submission")
    if target.is_file() and logs.file_sha256(target) == sha:
        # Its diff would be against its own copy, and --force logged a promotion that changed nothing.
        raise PopkitError(f"{submission} is a copy of the {problem} incumbent ({target}, {sha[:12]}): nothing to "
                          "promote")
    used = {}
    if not force:
        # A wrong --log (the candidate, history.jsonl) holds no evidence: its refusal asked for runs into that file.
        logs.refuse_non_log(log_path, "nothing was promoted")
        records, _ = logs.read_records(log_path)
        missing = []
        for mode in ("diff",) if target.is_file() else ("check", "bench"):
            record, passed_over = newest_evidence(records, prob, sha, mode, target)
            if record is not None and logs.record_passed(record):
                used[mode] = record.get("time")
            else:
                missing.append(_missing(mode, prob, submission, record, passed_over, log_path))
        if missing:
            role = f"the {problem} incumbent" if target.is_file() else f"the first {problem} incumbent"
            raise PopkitError(f"cannot make {submission} ({sha[:12]}) {role}: " + "; ".join(missing)
                              + " (or pass --force)")
    history = root / "history.jsonl"
    # Asked first: an incumbent replaced and then no history line (read-only) was an incumbent without its why.
    if why := logs.unappendable(history):
        raise PopkitError(f"{history}: the promotion cannot be recorded ({why}); nothing was changed")
    root.mkdir(parents=True, exist_ok=True)
    code = submission.read_bytes()
    if target.exists():
        write_atomic(root / "archive" / f"{problem}-{logs.file_sha256(target)[:12]}.py", target.read_bytes())
    # Written whole (shutil.copyfile cut off by a full disk or Ctrl-C left a truncated incumbent, which every later
    # diff ran against), and together with its history line: Ctrl-C waits for the two.
    try:
        with deferred_interrupt():
            write_atomic(target, code)
            logs.append_record({"time": logs.utc_now(), "problem": problem, "sha256": sha, "evidence": used,
                                "forced": force}, history)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: promote {problem} had finished; {target} is the incumbent") from None
    return target
