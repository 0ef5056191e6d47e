"""Leaderboard results: the server's flat result dicts as per-case records, tables and logs.

A run's `result` is the flat dict of strings the grader's eval.py writes
(`test.i.status`, `benchmark.i.mean` in ns, ...). Cases come out in the shape of
the evidence log's `cases` (times in us); ranked scores stay in seconds, as the
server gives them. Raw replies are saved before they are parsed.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from checks.preflight import SUFFIXES
from checks.problems import Problem, load_problem, parse_spec, problems_on, short_spec
from popcorn.client.api import loads
from popcorn.errors import PopkitError, ProblemError
from popcorn.evidence.files import write_atomic
from popcorn.evidence.logs import DEFAULT_LOG, append_record, case_geomean, new_record, read_records
from popcorn.evidence.provenance import built_from
from popcorn.evidence.tables import fmt_us, render_table

NS_PER_US = 1000.0
TIMINGS = (("mean_us", "mean"), ("err_us", "err"), ("best_us", "best"), ("worst_us", "worst"))
CASE_KEYS = ("spec", "status", "error", "runs", "report") + tuple(key for _, key in TIMINGS)
STOPPED_WHY = "a crash or a timeout"
NO_LOG = "the server does not return its log"  # GET /user/submissions/{id} has no stdout or stderr
REPORT_ALTCHARS = b"+*"  # eval.py's base64 alphabet for profiler reports ('*' for '/')
MAX_CASES = 10_000  # far beyond any task's list; a count above it would be looped over for hours
# The columns of check/bench tables (checks.runner.results_table), plus best and worst.
CASE_HEADERS = ["case", "status", "mean us", "err us", "runs", "best us", "worst us", "error"]


# -- cases -----------------------------------------------------------------------------------

def number(value) -> float | None:
    """A finite float from a string or number; None otherwise."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class ResultProblem:
    """The problem a board's result is logged under: NAME, its RECORD (which reads the case specs; None where
    popkit has none), and a NOTE of one line where the board's own name stands in for a problem."""
    name: str
    record: Problem | None = None
    note: str | None = None


def result_problem(board: str, code: str = "") -> ResultProblem:
    """The problem whose file (CODE) went to BOARD: the file's own ('# Built by popkit from parts/NAME') where
    that problem's record names BOARD, since several problems may share a board; else the one problem whose
    record names BOARD; else the board's name, with a note."""
    serving, own = problems_on(board), built_from(code)
    if own in serving or len(serving) == 1:
        name = own if own in serving else serving[0]
        try:
            return ResultProblem(name, load_problem(name))
        except ProblemError as exc:
            return ResultProblem(name, None, f"{exc}: the case specs are read without it")
    if serving:
        return ResultProblem(board, None, f"board {board} serves {', '.join(serving)} and the submitted file's "
                                          "'# Built by popkit from parts/NAME' line names none of them: its result "
                                          "is logged under the board's name")
    return ResultProblem(board, None, f"no problem's record names board {board} (`popkit problem list`): its "
                                      "result is logged under the board's name")


def spec_of(text: str, problem: Problem | None = None) -> dict:
    try:
        return parse_spec(text, problem)
    except ProblemError:
        return {"raw": text}


def case_count(result: dict, kind: str) -> int:
    """The run's '{kind}-count' line; a count no run can have is refused."""
    count = int(number(result.get(f"{kind}-count")) or 0)
    if count > MAX_CASES:
        raise PopkitError(f"the result claims {count:,} {kind} cases, more than popkit reads ({MAX_CASES:,}): "
                          "it cannot be a run's result")
    return count


def case_lines(result: dict, kind: str, i: int) -> dict:
    """The lines of case i (keys without the 'kind.i.' prefix), as the strings eval.py wrote (a value of another
    JSON kind is read as its text)."""
    values = {key: result.get(f"{kind}.{i}.{key}") for key in CASE_KEYS}
    return {key: None if value is None else str(value) for key, value in values.items()}


def reported(lines: dict) -> bool:
    """Whether the harness wrote anything about the case beyond its spec."""
    return any(lines[key] is not None for key in ("status", "mean", "report"))


def parse_cases(result: dict, kind: str, problem: Problem | None = None, unreported_status: str | None = None,
                reported_only: bool = False) -> list[dict]:
    """The 'test' or 'benchmark' cases of one run's result dict, as evidence-log cases."""
    lines = (case_lines(result, kind, i) for i in range(case_count(result, kind)))
    return [case_from(entry, problem, unreported_status) for entry in lines if reported(entry) or not reported_only]


def case_from(lines: dict, problem: Problem | None = None, unreported_status: str | None = None) -> dict:
    """One case from its lines. A case without a status or timings takes unreported_status (a
    profile run reports neither: its verdict is the run's `check`); without one it fails."""
    timings = {name: _us(lines[key]) for name, key in TIMINGS}
    said = lines["status"] or ("pass" if timings["mean_us"] is not None else unreported_status)
    status = "pass" if said == "pass" else "fail"
    error = None if status == "pass" else lines["error"] or (None if said else "no result reported")
    runs = number(lines["runs"])
    return {"spec": spec_of(lines["spec"] or "", problem), "status": status, "error": error, **timings,
            "runs": None if runs is None else int(runs), "baseline_us": None, "residuals": {}}


def stop_reason(result: dict, problem: Problem | None = None, why: str = STOPPED_WHY) -> str | None:
    """What a run that never wrote its closing `check` line left: 'produced no results (why)' or
    'stopped after 3 of 12 cases, during case X (why)'; None when the run finished."""
    if "check" in result:
        return None
    kind = "benchmark" if "benchmark-count" in result else "test"
    count = case_count(result, kind)
    lines = [case_lines(result, kind, i) for i in range(count)]
    done = sum(map(reported, lines))
    text = f"stopped after {done} of {count} cases" if done else "produced no results"
    current = next((entry for entry in lines if entry["spec"] and not reported(entry)), None)
    if current:
        text += f", during case {case_label(spec_of(current['spec'], problem))}"
    return f"{text} ({why})"


def _us(ns) -> float | None:
    value = number(ns)
    return None if value is None else value / NS_PER_US


def case_label(spec: dict) -> str:
    return spec["raw"] if "raw" in spec else short_spec(spec)


def render_cases(cases: list[dict]) -> str:
    """The per-case table: status and timings (us) of every case."""
    rows = [[case_label(c["spec"]), c["status"], fmt_us(c["mean_us"]), fmt_us(c["err_us"]), c["runs"],
             fmt_us(c["best_us"]), fmt_us(c["worst_us"]), _clip(c["error"])] for c in cases]
    return render_table(CASE_HEADERS, rows, right_align={2, 3, 4, 5, 6})


def _clip(text: str | None, width: int = 90) -> str | None:
    if text is None:
        return None
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


# -- a submission ----------------------------------------------------------------------------

@dataclass
class Run:
    mode: str
    secret: bool
    gpu: str
    passed: bool
    score_s: float | None
    tests: list[dict] = field(default_factory=list)
    benchmarks: list[dict] = field(default_factory=list)
    stopped: str | None = None  # stop_reason() of a run that ended early

    @property
    def label(self) -> str:
        return run_label(self.mode, self.secret)


def run_label(mode: str, secret: bool) -> str:
    return f"{mode} (secret)" if secret else mode


@dataclass
class Outcome:
    """A finished submission as `GET /user/submissions/{id}` describes it."""
    submission_id: int | None
    leaderboard: str
    file_name: str
    code: str
    job_status: str | None
    job_error: str | None      # one line, cut at 300 characters (the raw reply saved by submit and wait has it all)
    runs: list[Run]
    problem: ResultProblem     # what the result is logged under

    @property
    def gpu(self) -> str | None:
        return self.runs[0].gpu if self.runs else None

    @property
    def run_mode(self) -> str | None:
        """The mode it was submitted in, as far as its runs tell."""
        modes = [run.mode for run in self.runs]
        return "leaderboard" if "leaderboard" in modes else (modes[0] if modes else None)

    def score_s(self, secret: bool) -> float | None:
        return next((run.score_s for run in self.runs
                     if run.mode == "leaderboard" and run.secret == secret and run.score_s is not None), None)

    @property
    def cases(self) -> list[dict]:
        """The cases worth logging: the benchmark cases when there are any, else the tests."""
        for kind in ("benchmarks", "tests"):
            for run in self.runs:
                if getattr(run, kind):
                    return getattr(run, kind)
        return []

    def failures(self, mode: str) -> list[str]:
        """Why the requested runs did not all pass; empty when they did."""
        problems = []
        if self.job_status not in (None, "succeeded"):
            problems.append(f"job {self.job_status}" + (f": {self.job_error}" if self.job_error else ""))
        if not self.runs:
            problems.append("no runs were stored" + (" (the runner itself failed)" if not problems else ""))
        problems += [f"{run.label} run on {run.gpu} {run.stopped or 'did not pass'}"
                     for run in self.runs if not run.passed]
        if problems:
            return problems
        required = {(mode, False), (mode, True)} if mode == "leaderboard" else {(mode, False)}
        stored = {(run.mode, run.secret) for run in self.runs}
        return [f"no {run_label(m, s)} run was stored" for m, s in sorted(required - stored)]


def parse_submission(data: dict) -> Outcome:
    leaderboard = str(data.get("leaderboard_name") or "?")
    code = str(data.get("code") or "")
    owner = result_problem(leaderboard, code)
    problem = owner.record
    runs = []
    for raw in data.get("runs") or []:
        passed = bool(raw.get("passed"))
        # The server sends `result` only for public test and benchmark runs: without one, nothing is known.
        result = raw.get("result") if isinstance(raw.get("result"), dict) else None
        stopped = None if passed or result is None else stop_reason(result, problem, f"{STOPPED_WHY}; {NO_LOG}")
        result = result or {}
        tests, benchmarks = (parse_cases(result, kind, problem, reported_only=stopped is not None)
                             for kind in ("test", "benchmark"))
        runs.append(Run(mode=str(raw.get("mode")), secret=bool(raw.get("secret")),
                        gpu=str(raw.get("runner") or "?"), passed=passed, score_s=number(raw.get("score")),
                        tests=tests, benchmarks=benchmarks, stopped=stopped))
    job = data.get("job") or {}
    return Outcome(submission_id=data.get("id"), leaderboard=leaderboard,
                   file_name=str(data.get("file_name") or "?"), code=code,
                   job_status=job.get("status"), job_error=_clip(job.get("error"), 300), runs=runs, problem=owner)


def format_score(score_s: float | None) -> str:
    return "-" if score_s is None else f"{score_s * 1e6:.3f} us ({score_s:.9f} s)"


def render_outcome(outcome: Outcome) -> str:
    """Runs, the per-case table of each run with results, geomean and ranked scores."""
    title = f"submission {outcome.submission_id}: {outcome.leaderboard}, {outcome.file_name}"
    lines = [f"{title}, job {outcome.job_status or 'done'}"
             + (f" ({outcome.job_error})" if outcome.job_error else "")]
    if outcome.runs:
        lines += ["", render_table(["run", "gpu", "passed", "score us"],
                                   [[r.label, r.gpu, "yes" if r.passed else "no",
                                     None if r.score_s is None else fmt_us(r.score_s * 1e6)]
                                    for r in outcome.runs], right_align={3})]
    for run in outcome.runs:
        for kind, cases in (("tests", run.tests), ("benchmarks", run.benchmarks)):
            if cases:
                passed = sum(c["status"] == "pass" for c in cases)
                lines += ["", f"{run.label} on {run.gpu}: {passed}/{len(cases)} {kind} passed",
                          render_cases(cases)]
                geomean = case_geomean(cases) if kind == "benchmarks" else None
                if geomean is not None:
                    lines.append(f"geomean {geomean:,.1f} us")
        if run.stopped:
            lines += ["", f"{run.label} on {run.gpu}: the run {run.stopped}"]
    for secret in (False, True):
        score = outcome.score_s(secret)
        if score is not None:
            lines.append(f"ranked score ({'secret' if secret else 'public'}): {format_score(score)}")
    return "\n".join(lines)


def describe_progress(submission: dict) -> str:
    """'submission 7: pending; B200 queue: 3 queued, 2 runners available'."""
    status = (submission.get("job") or {}).get("status") or ("done" if submission.get("done") else "waiting")
    line = f"submission {submission.get('id')}: {status}"
    queue = submission.get("runner_queue") or {}
    parts = [f"{queue[key]} {label}" for key, label in
             (("queued_jobs", "queued"), ("running_jobs", "running"), ("available_runners", "runners available"))
             if queue.get(key) is not None]
    return f"{line}; {queue.get('gpu') or 'runner'} queue: {', '.join(parts)}" if parts else line


# -- listings --------------------------------------------------------------------------------

def _us_from_s(score) -> str | None:
    seconds = number(score)
    return None if seconds is None else fmt_us(seconds * 1e6)


def _names(value) -> str:
    """A list of names joined with commas; a single name (the server's list sent as one string) as it is."""
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return "" if value is None else str(value)


def render_leaderboards(boards: list[dict]) -> str:
    """One row per board; closed boards (visibility 'closed') are marked, with how to get in."""
    rows = [[b.get("name"), "closed" if b.get("visibility") == "closed" else "open",
             _names(b.get("gpu_types")), str(b.get("deadline") or "")[:10] or None,
             _clip(str(b.get("description") or "").strip().split("\n")[0], 60)]
            for b in sorted(boards, key=lambda b: str(b.get("name")))]
    table = render_table(["leaderboard", "access", "gpus", "deadline", "description"], rows)
    if any(row[1] == "closed" for row in rows):
        table += "\nclosed: submissions need an invite code first (`popkit join CODE`)"
    return table


def render_submission_list(submissions: list[dict]) -> str:
    """One row per submission, with its best ranked score (us) where it has one."""
    rows = []
    for sub in submissions:
        scored = [run for run in sub.get("runs") or [] if number(run.get("score")) is not None]
        best = min(scored, key=lambda run: number(run["score"]), default={})
        rows.append([sub.get("id"), sub.get("leaderboard_name"), sub.get("file_name"),
                     str(sub.get("submission_time") or "")[:19] or None,
                     "done" if sub.get("done") else "running", best.get("gpu_type"),
                     _us_from_s(best.get("score"))])
    return render_table(["id", "leaderboard", "file", "submitted", "status", "gpu", "best us"], rows,
                        right_align={0, 6})


def render_ranking(entries: list[dict], me: str | None = None, limit: int = 20) -> str:
    """The top of the ranking (us), the user's row wherever it is, rank and gap to first."""
    entries = sorted(entries, key=lambda e: number(e.get("rank")) or math.inf)
    mine = next((e for e in entries if me is not None and str(e.get("user_id")) == me), None)
    shown = entries[:limit] + ([mine] if mine is not None and entries.index(mine) >= limit else [])
    rows = [[e.get("rank"), e.get("user_name"), _us_from_s(e.get("submission_score")), e.get("submission_id"),
             str(e.get("submission_time") or "")[:19] or None, "<- you" if e is mine else ""] for e in shown]
    lines = [render_table(["rank", "user", "score us", "submission", "submitted", ""], rows,
                          right_align={0, 2, 3})]
    if not entries:
        lines = ["no ranked submission yet"]
    if len(entries) > len(shown):
        lines.append(f"({len(entries) - len(shown)} more not shown)")
    if me is not None:
        lines.append(_my_standing(entries, mine))
    return "\n".join(lines)


def _my_standing(entries: list[dict], mine: dict | None) -> str:
    """'you: rank 2 of 40, 125.0 us, 25.0 us behind first (+25.0%)' (or the lead over second)."""
    if mine is None:
        return "you: not on this ranking"
    score = number(mine.get("submission_score"))
    where = f"you: rank {mine.get('rank')} of {len(entries)}, {_us_from_s(score)} us"
    other = entries[1] if mine is entries[0] and len(entries) > 1 else entries[0]
    other_score = number(other.get("submission_score"))
    if other is mine or score is None or other_score is None:
        return where
    gap = fmt_us(abs(score - other_score) * 1e6)
    if mine is entries[0]:
        return f"{where}, {gap} us ahead of second"
    return f"{where}, {gap} us behind first ({(score / other_score - 1) * 100:+.1f}%)"


# -- evidence on disk ------------------------------------------------------------------------

def code_path(submission_id: int, file_name: str | None) -> Path:
    """Where `fetch` saves a submission's code by default: submission_ID with the uploaded file's suffix."""
    return Path(f"submission_{submission_id}{Path(file_name or '').suffix or '.py'}")


def refuse_overwrite(submission_id: int, output: Path | None, force: bool = False) -> None:
    """Before any request: refuse an existing OUTPUT, or without one an existing submission_ID.<suffix> for
    any suffix the server accepts (the reply would name which one), unless FORCE."""
    candidates = [output] if output else [code_path(submission_id, f"code{suffix}") for suffix in SUFFIXES]
    for path in candidates:
        if not force and path.exists():
            raise PopkitError(f"{path} exists: pass --force to overwrite it, or -o to choose another path")


def log_dir() -> Path:
    """logs/ of the toolkit, or POPKIT_LOG_DIR when set."""
    return Path(os.environ.get("POPKIT_LOG_DIR") or DEFAULT_LOG.parent)


def save_raw(raw: bytes, name: str, directory: Path | None = None) -> Path:
    """The server's reply as it came, under logs/leaderboard/ unless told otherwise."""
    return write_atomic((directory or log_dir() / "leaderboard") / name, raw)


def log_outcome(outcome: Outcome, run_mode: str, raw_path: Path, log_path: Path | None = None) -> dict | None:
    """Append the submission's per-case numbers to the evidence log, under its problem (outcome.problem) with
    the board beside it, and its verdict: `passed`, and `failures` (outcome.failures, empty when it passed), so
    a failed, timed-out or hacked job whose public cases passed never reads as passing; the record, or None
    when the log already holds this submission (one record per submission, however often it is followed)."""
    log_path = Path(log_path or log_dir() / "performance.jsonl")
    if outcome.submission_id is not None and is_logged(outcome.leaderboard, outcome.submission_id, log_path):
        return None
    cases, failures = outcome.cases, outcome.failures(run_mode)
    record = new_record(
        outcome.problem.name, "leaderboard", leaderboard=outcome.leaderboard, gpu=outcome.gpu, cases=cases,
        geomean_us=case_geomean(cases),
        submission_sha256=hashlib.sha256(outcome.code.encode()).hexdigest() if outcome.code else None,
        submission_id=outcome.submission_id, run_mode=run_mode, job_status=outcome.job_status,
        public_score_s=outcome.score_s(False), secret_score_s=outcome.score_s(True),
        passed=not failures, failures=failures,
        raw_result=os.path.relpath(raw_path, log_path.parent.parent))  # relative to the folder holding logs/
    append_record(record, log_path)
    return record


def is_logged(leaderboard: str, submission_id: int, log_path: Path) -> bool:
    """Whether the log holds this submission to LEADERBOARD; a record older than the `leaderboard` key has the
    board as its problem."""
    records, _ = read_records(log_path)
    return any(r.get("mode") == "leaderboard" and r.get("leaderboard", r.get("problem")) == leaderboard
               and r.get("submission_id") == submission_id for r in records)


# -- profile runs (event stream) -------------------------------------------------------------

@dataclass
class ProfileRun:
    label: str
    passed: bool
    cases: list[dict]
    reports: list[str]       # the decoded profiler reports, one per case that has one
    files: list[Path]
    error: str | None = None


@dataclass
class ProfileResult:
    directory: Path
    runs: list[ProfileRun]
    failures: list[str]      # runner failures: the error text of each result that did not succeed

    @property
    def ok(self) -> bool:
        return bool(self.runs) and not self.failures and all(run.passed for run in self.runs)


def save_profile(raw: str, directory: Path, problem: Problem | None = None) -> ProfileResult:
    """Save a profile result (raw JSON first), its summaries, reports and trace archives."""
    write_atomic(directory / "result.json", raw.encode())
    try:
        data = loads(raw)
    except ValueError:
        raise PopkitError(f"the profile result is not JSON (saved as {directory / 'result.json'})") from None
    odd = profile_shape_problem(data)
    if odd:
        raise PopkitError(f"the profile result is not as expected: {odd} (saved as {directory / 'result.json'})")
    for i, report in enumerate(data.get("reports") or []):
        write_atomic(directory / f"report{i}.md", str(report).encode())
    runs, failures = [], []
    for i, full in enumerate(data.get("results") or []):
        if not full.get("success"):
            failures.append(f"result{i}: the runner failed: {full.get('error') or 'it gave no error text'}")
        for key, entry in (full.get("runs") or {}).items():
            if key.startswith("profile"):
                runs.append(_save_profile_run(f"result{i}_{key}", entry, directory, problem))
    if not runs and not failures:
        failures.append("the result holds no profile runs")
    return ProfileResult(directory, runs, failures)


def profile_shape_problem(data) -> str | None:
    """What in a profile result (the `result` event: results[i].runs[key].run.result ...) is not of the
    documented kind; None when everything popkit reads is."""
    def odd(where: str, value, kind: type, required: bool = False) -> str | None:
        if isinstance(value, kind) or (value is None and not required):
            return None
        return f"{where} is {'null' if value is None else type(value).__name__}, not " \
               f"{'an object' if kind is dict else 'a list'}"

    checks = [("the result", data, dict, True)]
    if isinstance(data, dict):
        checks += [("reports", data.get("reports"), list, False), ("results", data.get("results"), list, False)]
        for i, full in enumerate(data.get("results") if isinstance(data.get("results"), list) else []):
            checks.append((f"results[{i}]", full, dict, True))
            runs = full.get("runs") if isinstance(full, dict) else None
            checks.append((f"results[{i}].runs", runs, dict, False))
            for key, entry in (runs.items() if isinstance(runs, dict) else []):
                where = f"results[{i}].runs[{key!r}]"
                checks.append((where, entry, dict, True))
                entry = entry if isinstance(entry, dict) else {}
                run = entry.get("run")
                checks += [(f"{where}.run", run, dict, False), (f"{where}.profile", entry.get("profile"), dict, False),
                           (f"{where}.run.result", run.get("result") if isinstance(run, dict) else None, dict, False)]
    return next(filter(None, (odd(*check) for check in checks)), None)


def _save_profile_run(name: str, entry: dict, directory: Path, problem: Problem | None) -> ProfileRun:
    run = entry.get("run") or {}
    result = run.get("result") or {}
    passed = bool(run.get("passed"))
    stopped = None if passed else stop_reason(result, problem)
    cases = parse_cases(result, "benchmark", problem, unreported_status=result.get("check"),
                        reported_only=bool(stopped))
    reports = [decode_report(str(result[key])) for key in (f"benchmark.{i}.report" for i in
                                                           range(case_count(result, "benchmark"))) if key in result]
    files = []
    if reports:
        files.append(write_atomic(directory / f"{name}_report.txt", "\n\n".join(reports).encode()))
    trace = (entry.get("profile") or {}).get("trace")
    if trace:
        try:
            archive = base64.b64decode(trace)
        except binascii.Error:
            raise PopkitError(f"{name}: the trace archive is not base64 "
                              f"(the raw result is in {directory / 'result.json'})") from None
        files.append(write_atomic(directory / f"{name}.zip", archive))
    return ProfileRun(name, passed, cases, reports, files, None if passed else _run_error(run, stopped))


def _run_error(run: dict, stopped: str | None) -> str:
    """Why a profile run failed: how it ended, its exit code and the end of its stderr."""
    parts = [stopped] if stopped else []
    if run.get("exit_code") not in (None, 0):
        parts.append(f"exit code {run['exit_code']}")
    tail = [line for line in str(run.get("stderr") or "").splitlines() if line.strip()][-1:]
    parts += [f"stderr: {line.strip()}" for line in tail]
    return "; ".join(parts) or "the run did not pass"


def decode_report(value: str) -> str:
    """A profiler report as eval.py writes it (base64 with '+*' as the last two characters); the
    text itself when it is not base64."""
    try:
        return base64.b64decode(value, altchars=REPORT_ALTCHARS, validate=True).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return value


def render_profile(result: ProfileResult) -> str:
    """Per run: verdict, cases, the decoded reports (as the official client prints them), saved files."""
    lines = [f"error: {failure}" for failure in result.failures]
    for run in result.runs:
        lines += ["", f"=== {run.label}: {'passed' if run.passed else 'FAILED'} ==="]
        if run.error:
            lines.append(f"error: {run.error}")
        for case in run.cases:
            lines.append(f"case {case_label(case['spec'])}: {case['status']}"
                         + (f" ({_clip(case['error'])})" if case["error"] else ""))
        for report in run.reports:
            lines += ["", report.rstrip()]
        lines += [""] + [f"saved {path}" for path in run.files]
    return "\n".join(lines).strip()
