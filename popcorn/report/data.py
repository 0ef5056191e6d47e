"""What the report shows, aggregated per problem from logs/performance.jsonl.

Reading is tolerant by design: a missing key, a null, a failing case or an unknown mode
leaves a gap (None, an empty list) that the page turns into a note, never an exception.
"Newest" means last in the file: the log is append-only, so file order is time order.
By default check, bench and diff records count only when they ran on a GPU over the problem's
full official list (tests for check, benchmarks for bench and diff); the others are counted as
hidden, and shown when asked (include_cpu, all_cases). The frontier, whatever is asked, holds only
geomeans that compare: GPU runs of the full benchmark list, one line per source (bench, leaderboard) and GPU.
"""
from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from checks.problems import Problem, known_problems, load_problem, normalize, parse_spec, short_spec
from popcorn.errors import PopkitError, ProblemError
from popcorn.evidence.counters import NOT_COUNTS, route_counts
from popcorn.evidence.logs import capped, covers, not_a_log, ran_on_gpu, read_records, spec_key, where_ran

VERDICTS = ("faster", "slower", "within noise")
NEWEST_SUBMISSIONS = 10
HIDDEN = {"CPU": "{n} CPU run(s) (--include-cpu shows them)",
          "unknown device": "{n} run(s) on no known device (--include-cpu shows them)",
          "chosen cases": "{n} run(s) of chosen cases only (--all-cases shows them)"}
FRONTIER_SKIPPED = {"not GPU": "{n} run(s) not on a known GPU (CPU timings are not GPU evidence)",
                    "other cases": "{n} run(s) not over the full benchmark list"}


@dataclass
class CaseTimes:
    """One benchmark case across the bench runs on one GPU."""
    label: str
    first_us: float | None = None
    best_us: float | None = None
    best_time: str | None = None
    newest_us: float | None = None
    baseline_us: float | None = None


@dataclass
class Bench:
    """The bench runs on the GPU of the newest one, case by case, and that run's geomeans."""
    gpu: str | None
    runs: int
    cases: list[CaseTimes]
    geomean_us: float | None
    baseline_geomean_us: float | None
    baseline: str | None


@dataclass
class FrontierLine:
    """Best-so-far geomean of one source ("bench": local runs, "leaderboard": the server's) on one GPU:
    one point per run that counts."""
    source: str
    gpu: str
    times: list[dt.datetime] = field(default_factory=list)
    best_us: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.source} on {self.gpu}"

    @property
    def since(self) -> dt.datetime:
        """When the current best was first reached."""
        return self.times[self.best_us.index(self.best_us[-1])]


@dataclass
class DiffCase:
    label: str
    status: str | None
    candidate_us: float | None
    incumbent_us: float | None
    ratio: float | None
    verdict: str | None
    margin: float | None
    incumbent_margin: float | None
    # each side's ROUTE_COUNTERS increase on the case (checks/worker.py RouteCounters; {}: it counts nothing)
    counters: dict[str, int] = field(default_factory=dict)
    incumbent_counters: dict[str, int] = field(default_factory=dict)


@dataclass
class Diff:
    """The newest diff: candidate against incumbent, case by case."""
    time: str | None
    commit: str | None
    candidate_sha: str | None
    incumbent_sha: str | None
    passed: bool | None
    changed_parts: list[str]
    cases: list[DiffCase]
    refused_counters: int = 0       # counters dicts left out whole: not a dict of str -> int

    @property
    def counted(self) -> bool:
        """Whether a side counted its route on any case: the page's counters columns only then."""
        return any(c.counters or c.incumbent_counters for c in self.cases)


@dataclass
class CheckCase:
    label: str
    status: str | None
    error: str | None
    fractions: dict[str, float | None]
    counters: dict[str, int] = field(default_factory=dict)


@dataclass
class Check:
    """The newest check: each gate's scaled residual as a fraction of its limit, per case."""
    time: str | None
    commit: str | None
    gpu: str | None
    gates: list[str]
    cases: list[CheckCase]
    refused_counters: int = 0

    @property
    def counted(self) -> bool:
        return any(c.counters for c in self.cases)


@dataclass(frozen=True)
class Coverage:
    """How much of one official list ("benchmarks" or "tests") a leaderboard run's cases hold."""
    kind: str
    ran: int
    of: int

    @property
    def full(self) -> bool:
        return self.ran == self.of

    def __str__(self) -> str:
        if self.of == 1:                      # a board ranked by one case (vectoradd): "all 1 benchmarks" read oddly
            return f"the 1 {self.kind[:-1]}" if self.full else f"0 of 1 {self.kind[:-1]}"
        return f"all {self.of} {self.kind}" if self.full else f"{self.ran} of {self.of} {self.kind}"


@dataclass
class Submission:
    time: str | None
    submission_id: object
    run_mode: str | None
    gpu: str | None
    cases: Coverage | None   # None: no cases, or no official list, to compare
    public_us: float | None
    secret_us: float | None
    raw_result: Path | None


@dataclass
class ProblemEvidence:
    name: str
    counts: Counter
    hidden: Counter          # why check/bench/diff records were left out -> how many
    left_out: Counter        # mode -> how many of its check/bench/diff records were left out
    bench: Bench | None
    frontier: list[FrontierLine]
    frontier_skipped: Counter  # why timed runs that other sections show are not in the frontier -> how many
    diff: Diff | None
    check: Check | None
    submissions: list[Submission]

    def hidden_line(self) -> str | None:
        """Which check, bench and diff records were left out and the option that shows them."""
        return _tally("Left out", self.hidden, HIDDEN)

    def frontier_skipped_line(self) -> str | None:
        """Which timed runs the frontier leaves out, because their geomean is not comparable."""
        return _tally("Not in the frontier", self.frontier_skipped, FRONTIER_SKIPPED)

    def notes(self) -> dict[str, str]:
        """Why a section has nothing to draw, keyed by section; absent sections are drawable."""
        name, notes = self.name, {}
        if self.bench is None:
            notes["cases"] = self._none_yet("bench")
        elif not any(c.newest_us for c in self.bench.cases):
            notes["cases"] = f"The bench records for {name} hold no passing, timed case."
        if not self.frontier:
            notes["frontier"] = ("No GPU geomean yet: it needs a GPU bench run of the full benchmark list "
                                 "whose cases all pass, or a scored leaderboard run.")
        if self.diff is None:
            notes["diff"] = self._none_yet("diff")
        elif not any(c.ratio for c in self.diff.cases):
            notes["diff"] = "The newest diff record holds no case ratios."
        if self.check is None:
            notes["check"] = self._none_yet("check")
        elif not self.check.gates:
            notes["check"] = "The newest check record holds no gate residuals."
        if not self.submissions:
            notes["submissions"] = f"No leaderboard submissions for {name} logged yet."
        return notes

    def _none_yet(self, mode: str) -> str:
        """A section without MODE's records; when its runs were all left out, asking for one more would mislead."""
        if self.left_out[mode]:
            return (f"No {mode} run of {self.name} counts here yet ({self.left_out[mode]} left out, see above): "
                    f"run `popkit {mode} {self.name}` on a GPU over the official list.")
        return f"No {mode} records for {self.name} yet: run `popkit {mode} {self.name}`."


@dataclass
class Evidence:
    log: Path
    problems: list[ProblemEvidence]
    notes: list[str]
    include_cpu: bool = False
    all_cases: bool = False


def load_evidence(log: Path | str, problem: str | None = None, include_cpu: bool = False,
                  all_cases: bool = False) -> Evidence:
    """Read the log and aggregate it per problem (only PROBLEM when given); CPU runs and runs of
    chosen cases count only when asked."""
    log = Path(log)
    records, notes = read_records(log)
    if notes and not records:
        raise PopkitError(f"{log} is not an evidence log: none of its {len(notes)} non-blank line(s) is a JSON record "
                          f"(the first: {notes[0]})")
    why = not_a_log(log)           # a source file's name, or no run among its records (promote's history)
    if why:
        raise PopkitError(f"{log} is not an evidence log: {why}")
    notes = capped(notes)          # the terminal and the page show the first few bad lines and a count
    if not log.is_file():
        notes.append(f"No log at {log}: check, bench and diff runs write it.")
    by_problem: dict[str, list[dict]] = {}
    for record in records:
        name = record.get("problem")
        if isinstance(name, str) and name.strip():
            by_problem.setdefault(name, []).append(record)
    # Kept out of every section ({"a": 1} was problem '?', {"problem": 5} asked for `popkit bench 5`), and counted.
    if unnamed := len(records) - sum(map(len, by_problem.values())):
        notes.append(f"{unnamed} record(s) skipped: their problem is not a name (a non-empty string)")
    if problem and problem not in by_problem and problem not in known_problems():
        raise PopkitError(f"no records for problem {problem!r} in {log}, and popkit does not know it")
    names = [problem] if problem else sorted(by_problem)
    root = log.resolve().parent.parent
    problems = [problem_evidence(n, by_problem.get(n, []), root, include_cpu, all_cases) for n in names]
    for ev in problems:
        for mode, section in (("diff", ev.diff), ("check", ev.check)):
            if section and section.refused_counters:
                notes.append(f"{ev.name}'s newest {mode}: {section.refused_counters} counters dict(s) of its cases "
                             f"left out, {NOT_COUNTS} (a bool is no count)")
    return Evidence(log, problems, notes, include_cpu, all_cases)


def problem_evidence(name: str, records: list[dict], root: Path, include_cpu: bool = False,
                     all_cases: bool = False) -> ProblemEvidence:
    """Everything the report shows for one problem; raw_result paths resolve against root."""
    prob = _problem(name)
    official = {"tests": prob.tests, "benchmarks": prob.ranked_benchmarks} if prob else {"tests": [], "benchmarks": []}
    hidden, left_out = Counter(), Counter()
    modes = {"leaderboard": [r for r in records if r.get("mode") == "leaderboard"]}
    for mode, which in (("check", "tests"), ("bench", "benchmarks"), ("diff", "benchmarks")):
        modes[mode] = []
        for record in (r for r in records if r.get("mode") == mode):
            if not include_cpu and not ran_on_gpu(record):
                hidden["CPU" if where_ran(record) == "cpu" else "unknown device"] += 1
            elif not all_cases and not covers(record, official[which]):
                hidden["chosen cases"] += 1
            else:
                modes[mode].append(record)
                continue
            left_out[mode] += 1
    lines, skipped = frontier(modes["bench"] + modes["leaderboard"], prob)
    return ProblemEvidence(
        name=name,
        counts=Counter(r["mode"] if isinstance(r.get("mode"), str) and r["mode"] else "no mode" for r in records),
        hidden=hidden,
        left_out=left_out,
        bench=bench_cases(modes["bench"], official["benchmarks"]),
        frontier=lines,
        frontier_skipped=skipped,
        diff=newest_diff(modes["diff"]),
        check=newest_check(modes["check"]),
        submissions=newest_submissions(modes["leaderboard"], root, prob),
    )


def bench_cases(records: list[dict], official: list[dict]) -> Bench | None:
    """First, best and newest passing time per case, over the bench runs on one GPU: that of the
    newest run with a passing timed case (so a broken newest record hides nothing).

    Cases follow the official benchmark list, then any other logged case in first-seen order.
    """
    if not records:
        return None
    timed = [r for r in records if any(_passing_time(c) is not None for c in _cases(r))]
    gpu = _text((timed or records)[-1].get("gpu"))
    runs = [r for r in records if _text(r.get("gpu")) == gpu]
    specs, times, baselines = list(official), {}, {}
    seen = {spec_key(s) for s in specs}
    for record in runs:
        for case in _cases(record):
            key = spec_key(case["spec"])
            if key not in seen:
                seen.add(key)
                specs.append(case["spec"])
            if (mean := _passing_time(case)) is not None:
                times.setdefault(key, []).append((record.get("time"), mean))
            if (baseline := _num(case.get("baseline_us"))) is not None:
                baselines[key] = baseline
    rows = []
    for spec, label in zip(specs, _labels(specs)):
        row = CaseTimes(label, baseline_us=baselines.get(spec_key(spec)))
        points = times.get(spec_key(spec))
        if points:
            row.best_time, row.best_us = min(points, key=lambda p: p[1])
            row.first_us, row.newest_us = points[0][1], points[-1][1]
        rows.append(row)
    newest = runs[-1]
    return Bench(gpu, len(runs), rows, _num(newest.get("geomean_us")),
                 _num(newest.get("baseline_geomean_us")), newest.get("baseline"))


def frontier(records: list[dict], prob: Problem | None) -> tuple[list[FrontierLine], Counter]:
    """Best-so-far geomean over time, one line per source and GPU; and why timed runs were left out.

    Only numbers of one kind share a line: a bench times the GPU that ran it with popkit's harness, a
    leaderboard run the board's GPU with the server's. A run counts when it has a time and a geomean, none
    of its cases failed and its record's verdict (`passed`, where it has one) is not a failure: a leaderboard
    job that failed, timed out or was hacked after its public cases passed never counts; a leaderboard run
    without geomean_us counts with its public score (a geomean in seconds). A timed run that ran on no known
    GPU, or one of other cases than the full benchmark list (a leaderboard run that stopped early, a bench that
    --all-cases shows elsewhere), is counted as skipped.
    """
    points, skipped = [], Counter()
    for record in records:
        source = "leaderboard" if record.get("mode") == "leaderboard" else "bench"
        when, value = _parse_time(record.get("time")), _num(record.get("geomean_us"))
        if value is None and source == "leaderboard":
            value = _seconds_to_us(record.get("public_score_s"))
        if (not when or not value or record.get("passed") is False
                or any(c.get("status") == "fail" for c in _cases(record))):
            continue
        if not ran_on_gpu(record):
            skipped["not GPU"] += 1
        elif not timed_full_list(record, prob):
            skipped["other cases"] += 1
        else:
            points.append((when, source, _text(record.get("gpu")) or "an unknown GPU", value))
    lines: dict[tuple[str, str], FrontierLine] = {}
    for when, source, gpu, value in sorted(points, key=lambda p: p[0]):
        line = lines.setdefault((source, gpu), FrontierLine(source, gpu))
        line.times.append(when)
        line.best_us.append(min(value, line.best_us[-1]) if line.best_us else value)
    return list(lines.values()), skipped


def timed_full_list(record: dict, prob: Problem | None) -> bool:
    """Whether a bench or leaderboard run timed the whole benchmark list, as far as its cases tell: a
    leaderboard run without cases, or of a problem popkit has no record of, is taken at the server's word."""
    if record.get("mode") == "leaderboard":
        coverage = board_coverage(record, prob)
        return coverage is None or (coverage.kind == "benchmarks" and coverage.full)
    return prob is None or covers(record, prob.ranked_benchmarks)


def board_coverage(record: dict, prob: Problem | None) -> Coverage | None:
    """The official list a leaderboard run's cases hold the most of (benchmarks on a tie), and how much;
    None without cases or a list. Its specs are read again under the problem's record: the client logs a
    spec it cannot read as {'raw': text}, and an older one read specs under the record named like the
    board, or under none, which left out the problem's defaults."""
    ran = {spec_key(_reread(c["spec"], prob)) for c in _cases(record)} if prob else set()
    if not ran:
        return None
    return max((Coverage(kind, sum(spec_key(s) in ran for s in specs), len(specs))
                for kind, specs in (("benchmarks", prob.ranked_benchmarks), ("tests", prob.tests))),
               key=lambda c: c.ran / c.of)


def _reread(spec: dict, prob: Problem) -> dict:
    """A logged spec in the problem's terms today; as it was when they cannot read it."""
    try:
        return parse_spec(str(spec["raw"]), prob) if set(spec) == {"raw"} else normalize(prob, spec)
    except ProblemError:
        return spec


def newest_diff(records: list[dict]) -> Diff | None:
    if not records:
        return None
    record = records[-1]
    cases = _cases(record)
    rows = [DiffCase(label, case.get("status"), _num(case.get("mean_us")),
                     _num(case.get("incumbent_us")), _num(case.get("ratio")),
                     case.get("verdict") if case.get("verdict") in VERDICTS else None,
                     _worst(case.get("residuals")), _worst(case.get("incumbent_residuals")),
                     _counters(case.get("counters")), _counters(case.get("incumbent_counters")))
            for case, label in zip(cases, _labels([c["spec"] for c in cases]))]
    passed = record.get("passed")
    parts = record.get("changed_parts")
    return Diff(record.get("time"), _text(record.get("commit")), _text(record.get("submission_sha256")),
                _text(record.get("incumbent_sha256")), passed if isinstance(passed, bool) else None,
                [str(p) for p in parts] if isinstance(parts, list) else [], rows,
                _refused(cases, ("counters", "incumbent_counters")))


def newest_check(records: list[dict]) -> Check | None:
    if not records:
        return None
    record = records[-1]
    cases = _cases(record)
    gates = list(dict.fromkeys(g for c in cases for g in _residuals(c.get("residuals"))))
    rows = [CheckCase(label, case.get("status"), case.get("error"),
                      {g: _fraction(_residuals(case.get("residuals")).get(g)) for g in gates},
                      _counters(case.get("counters")))
            for case, label in zip(cases, _labels([c["spec"] for c in cases]))]
    return Check(record.get("time"), _text(record.get("commit")), _text(record.get("gpu")), gates, rows,
                 _refused(cases, ("counters",)))


def newest_submissions(records: list[dict], root: Path, prob: Problem | None) -> list[Submission]:
    """The newest leaderboard records, newest first, each with how its cases compare with the official lists."""
    rows = []
    for record in reversed(records[-NEWEST_SUBMISSIONS:]):
        raw = record.get("raw_result")
        rows.append(Submission(
            record.get("time"), record.get("submission_id"), record.get("run_mode"),
            record.get("gpu"), board_coverage(record, prob), _seconds_to_us(record.get("public_score_s")),
            _seconds_to_us(record.get("secret_score_s")),
            root / raw if isinstance(raw, str) and raw else None))
    return rows


def case_label(spec: dict) -> str:
    """short_spec's label; for a spec it cannot read (any keys may appear), 'k=v' pairs."""
    try:
        return short_spec(spec)
    except (KeyError, TypeError, ValueError):
        return generic_label(spec)


def generic_label(spec: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in spec.items()) or "{}"


def _labels(specs: list[dict]) -> list[str]:
    """Labels for a list of specs; labels shared by different specs get their seed added (or, without
    a seed, every key)."""
    labels = [case_label(s) for s in specs]
    shared = {label for label, n in Counter(labels).items() if n > 1}
    return [label if label not in shared else f"{label} s{spec['seed']}" if "seed" in spec else generic_label(spec)
            for label, spec in zip(labels, specs)]


def _tally(title: str, counts: Counter, texts: dict[str, str]) -> str | None:
    """'TITLE: 2 ..., 1 ....' from the counts of each reason in texts (None when all are zero)."""
    parts = [text.format(n=counts[why]) for why, text in texts.items() if counts[why]]
    return f"{title}: " + ", ".join(parts) + "." if parts else None


def _problem(name: str) -> Problem | None:
    """popkit's record of the problem (its official tests, and the benchmarks its leaderboard times); None
    for a problem it does not know."""
    try:
        return load_problem(name)
    except ProblemError:
        return None


def _cases(record: dict) -> list[dict]:
    """A record's case entries that are objects with a spec object."""
    cases = record.get("cases")
    return [c for c in cases if isinstance(c, dict) and isinstance(c.get("spec"), dict)] \
        if isinstance(cases, list) else []


def _passing_time(case: dict) -> float | None:
    """A case's mean time, unless it failed."""
    return None if case.get("status") == "fail" else _num(case.get("mean_us"))


def _num(value) -> float | None:
    """A finite number as float; None for anything else (null, strings, booleans, NaN)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _text(value) -> str | None:
    """A string field (commit, sha256, gpu) when it is one; None for anything else (the page slices them)."""
    return value if isinstance(value, str) else None


def _seconds_to_us(value) -> float | None:
    seconds = _num(value)
    return None if seconds is None else seconds * 1e6


def _residuals(value) -> dict:
    return value if isinstance(value, dict) else {}


def _counters(value) -> dict[str, int]:
    """A case's counters (checks/worker.py RouteCounters: name -> increase); {} for none, or for a dict the rule
    of popcorn/evidence/counters.py refuses (_refused counts those)."""
    return route_counts(value) or {}


def _refused(cases: list[dict], keys: tuple[str, ...]) -> int:
    """How many counters dicts under KEYS the cases hold that are not a dict of str -> int (null: none logged)."""
    return sum(case.get(key) is not None and route_counts(case[key]) is None for case in cases for key in keys)


def _fraction(pair) -> float | None:
    """A gate's [scaled value, limit] as value / limit."""
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
        return None
    value, limit = _num(pair[0]), _num(pair[1])
    return value / limit if value is not None and limit else None


def _worst(residuals) -> float | None:
    """The largest fraction of its limit over a case's gates: the tightest margin."""
    fractions = [f for f in map(_fraction, _residuals(residuals).values()) if f is not None]
    return max(fractions, default=None)


def _parse_time(value) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
