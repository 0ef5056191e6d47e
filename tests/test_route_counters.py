"""ROUTE_COUNTERS, a submission's own counts (checks/worker.py's RouteCounters): each case's increase in the case
results, the tables' "counters" column and the records, through check, bench and diff on the CPU.

The submissions are torch routes for qr_v2 (torch.geqrf) that count their calls and matrices; the worker runs are
made once, by a module fixture, and the tests read their outcomes and log.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from checks import runner, timing, worker
from checks.native.matrix_specs import benchmark_count
from checks.problems import short_spec
from popcorn.evidence import logs
from popcorn.evidence.counters import route_counts
from popcorn.evidence.tables import fmt_counters
from popcorn.report.dashboard import build_report

PLAIN = "import torch\n\n\ndef custom_kernel(data):\n    return torch.geqrf(data)\n"
COUNTING = '''import torch

ROUTE_COUNTERS = {"calls": 0, "matrices": 0}


def custom_kernel(data):
    ROUTE_COUNTERS["calls"] += 1
    ROUTE_COUNTERS["matrices"] += data.shape[0]
    return torch.geqrf(data)
'''
BAD_KEY = PLAIN + '\nROUTE_COUNTERS = {1: 0}\n'                      # not str -> int from the start
TURNS_BAD = COUNTING.replace("    return torch", '    ROUTE_COUNTERS["last"] = "geqrf"\n    return torch')
CASES = ["batch: 2; n: 4; cond: 1; seed: 3; case: dense", "batch: 3; n: 4; cond: 1; seed: 5; case: dense"]
ROUNDS = 3


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each verb's outcome and progress lines, all logged to one file (runs.log)."""
    folder = tmp_path_factory.mktemp("counters")
    files = {}
    for name, text in (("counting", COUNTING), ("counting_copy", COUNTING), ("plain", PLAIN), ("bad_key", BAD_KEY),
                       ("turns_bad", TURNS_BAD)):
        files[name] = folder / f"{name}.py"
        files[name].write_text(text)
    log = folder / "perf.jsonl"
    verbs = {
        "check": lambda **kw: runner.check("qr_v2", files["counting"], **kw),
        "bench": lambda **kw: runner.bench("qr_v2", files["counting"], baseline=True, **kw),
        "diff": lambda **kw: runner.diff("qr_v2", files["counting"], files["counting_copy"], rounds=ROUNDS, **kw),
        "plain": lambda **kw: runner.check("qr_v2", files["plain"], **kw),
        "malformed": lambda **kw: runner.diff("qr_v2", files["bad_key"], files["turns_bad"], rounds=ROUNDS, **kw),
    }
    outcomes, lines = {}, {}
    for name, verb in verbs.items():
        lines[name] = []
        outcomes[name] = verb(custom=CASES, device="cpu", log_path=log, progress=lines[name].append)
    return SimpleNamespace(outcomes=outcomes, lines=lines, log=log, folder=folder)


def logged(runs, name: str) -> dict:
    """The log's record of the run NAME (the records are appended in the fixture's order)."""
    records = [json.loads(line) for line in runs.log.read_text().splitlines()]
    return records[list(runs.outcomes).index(name)]


def counters_cell(table: str, spec: dict) -> str:
    """The counters column of SPEC's row."""
    header, *rows = table.splitlines()
    row = next(line for line in rows if line.startswith(short_spec(spec) + " "))
    return row[header.index("counters"):header.index("error / message")].strip()


def test_check_reports_each_cases_own_calls(runs):
    outcome = runs.outcomes["check"]
    assert outcome.passed
    cases = logged(runs, "check")["cases"]
    # One call a case; the second case's counts are its own, not the two cases' sum.
    assert [c["counters"] for c in cases] == [{"calls": 1, "matrices": 2}, {"calls": 1, "matrices": 3}]
    assert all("incumbent_counters" not in c for c in cases)
    assert [counters_cell(outcome.table, c["spec"]) for c in cases] == ["calls 1, matrices 2", "calls 1, matrices 3"]
    assert outcome.table.splitlines()[0].split()[-4:] == ["counters", "error", "/", "message"]


def test_bench_counts_the_checked_and_the_timed_calls_but_not_the_warm_up(runs):
    outcome = runs.outcomes["bench"]
    assert outcome.passed
    for case, batch in zip(logged(runs, "bench")["cases"], (2, 3)):
        # Every input once, checked, then every input in each timed repeat; the torch baseline is not the
        # submission. The warm-up on the first case runs before any case and is in none.
        calls = benchmark_count(case["spec"]) * (1 + case["runs"])
        assert case["runs"] >= 1 and case["baseline_us"] > 0
        assert case["counters"] == {"calls": calls, "matrices": batch * calls}
        assert counters_cell(outcome.table, case["spec"]) == f"calls {calls}, matrices {batch * calls}"


def test_diff_reports_each_sides_counters_and_shows_the_candidates(runs):
    outcome = runs.outcomes["diff"]
    cases = logged(runs, "diff")["cases"]
    for case, batch in zip(cases, (2, 3)):
        # Each round: every input once, checked, then the CPU rule's repeats of every input; one side's calls
        # never reach the other's counts, though the two files are the same.
        assert case["runs"] == ROUNDS
        calls = ROUNDS * benchmark_count(case["spec"]) * (1 + timing.CPU_REPEATS)
        assert case["counters"] == case["incumbent_counters"] == {"calls": calls, "matrices": batch * calls}
        assert counters_cell(outcome.table, case["spec"]) == f"calls {calls}, matrices {batch * calls}"


def test_a_submission_without_counters_keeps_its_records_and_tables(runs):
    plain, counting = runs.outcomes["plain"], runs.outcomes["check"]
    assert plain.passed and "counters" not in plain.table
    assert plain.table.splitlines()[0].split() == [word for word in counting.table.splitlines()[0].split()
                                                   if word != "counters"]
    plain_cases, counting_cases = logged(runs, "plain")["cases"], logged(runs, "check")["cases"]
    assert [set(c) for c in plain_cases] == [set(c) - {"counters"} for c in counting_cases]
    assert runs.lines["plain"] and not any("ROUTE_COUNTERS" in line for line in runs.lines["plain"])


def test_a_malformed_dict_is_named_once_and_left_out(runs):
    outcome = runs.outcomes["malformed"]
    assert outcome.passed, outcome.table
    cases = logged(runs, "malformed")["cases"]
    assert len(cases) == 2 and all("counters" not in c and "incumbent_counters" not in c for c in cases)
    assert "counters" not in outcome.table
    named = [line for line in runs.lines["malformed"] if "ROUTE_COUNTERS" in line]
    # The candidate's at its first read; the incumbent's once its first call added a word, at the end of case 1.
    assert named == [
        f"{runs.folder / 'bad_key.py'} (the candidate): its ROUTE_COUNTERS is not a dict of str -> int; its counters "
        "are left out of this run",
        f"{runs.folder / 'turns_bad.py'} (the incumbent): its ROUTE_COUNTERS is not a dict of str -> int; its "
        "counters are left out of this run"]


def test_records_with_and_without_counters_merge_and_report(runs, tmp_path):
    # An older log's records have no counters (as the plain check's); both kinds merge and report together.
    target = tmp_path / "performance.jsonl"
    merged = logs.merge_logs([runs.log], target)
    assert (merged.added, merged.bad) == (len(runs.outcomes), [])
    assert logs.merge_logs([runs.log], target).present == len(runs.outcomes)
    report = build_report(target, tmp_path / "report", include_cpu=True, all_cases=True)
    assert report.page.is_file()


def test_route_counters_take_new_keys_and_the_dicts_order():
    module = SimpleNamespace(__file__="s.py", ROUTE_COUNTERS={"resolved": 4, "calls": 10})
    lines = []
    counters = worker.RouteCounters({"candidate": module, "incumbent": SimpleNamespace(__file__="i.py")},
                                    lines.append)
    before = counters.read()
    module.ROUTE_COUNTERS["calls"] += 2
    module.ROUTE_COUNTERS["fallback"] = 1             # a key that appears during the case counts from 0
    assert counters.since(before) == {"counters": {"resolved": 0, "calls": 2, "fallback": 1}}
    assert list(counters.since(before)["counters"]) == ["resolved", "calls", "fallback"]
    module.ROUTE_COUNTERS["calls"] = 1.5
    assert counters.since(before) == {} and counters.read() == {} and counters.since(before) == {}
    assert lines == [("progress", "s.py (the candidate): its ROUTE_COUNTERS is not a dict of str -> int; its "
                                  "counters are left out of this run")]


def test_a_bool_is_no_count_and_refuses_the_whole_dict():
    # One rule for the worker (a live module's dict) and the report (a logged case's): the worker took
    # {"fast": True} as a count of 1, the report dropped the entry and showed the rest as the whole dict.
    counts = {"calls": 3, "resolved": 0}
    assert route_counts(counts) is counts and route_counts({}) == {}
    for bad in ({"calls": 3, "fast": True}, {"calls": False}, {"calls": 1.0}, {"calls": "1"}, {1: 0}, [("calls", 1)],
                None, 5):
        assert route_counts(bad) is None, bad


def test_the_worker_names_a_dict_holding_a_bool_once_and_leaves_it_out():
    module = SimpleNamespace(__file__="s.py", ROUTE_COUNTERS={"calls": 1, "fast": True})
    lines = []
    counters = worker.RouteCounters({"candidate": module}, lines.append)
    assert counters.read() == {} and counters.since({"candidate": {}}) == {}
    assert lines == [("progress", "s.py (the candidate): its ROUTE_COUNTERS is not a dict of str -> int; its "
                                  "counters are left out of this run")]


def test_the_counters_cell_keeps_whole_pairs():
    assert fmt_counters(None, 60) == fmt_counters({}, 60) == "-"
    assert fmt_counters({"resolved": 7, "calls": 12}, 60) == "resolved 7, calls 12"
    many = {f"counter{i}": 1000 * i for i in range(10)}
    assert fmt_counters(many, 40) == "counter0 0, counter1 1000, ..."
    assert fmt_counters({"a_very_long_counter_name": 123456}, 10) == "..."


def test_the_table_shows_only_the_candidates_counters():
    spec = {"batch": 2, "n": 8, "cond": 1, "seed": 3, "case": "dense"}
    timed = {"spec": spec, "status": "pass", "residuals": {}, "mean_us": 10.0, "incumbent_us": 10.0, "ratio": 1.0}
    assert "counters" not in runner.results_table([{**timed, "incumbent_counters": {"calls": 3}}], "diff")
    table = runner.results_table([{**timed, "counters": {"calls": 2}, "incumbent_counters": {"calls": 3}}], "diff")
    assert counters_cell(table, spec) == "calls 2"
    # The column is text: the timing columns before it keep their right alignment, the counters start flush left.
    header, _, row = table.splitlines()
    assert row[header.index("counters"):].startswith("calls 2")
