"""bench --baseline: logged baselines reused on an exact match only, and a slow baseline's bounded repeats.

The official backend's reuse (eval.py of the reference skipped or run on fewer cases) is in test_harness.py.
"""
from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
import torch

from checks import baselines, runner, timing, worker
from checks.native import native_checker
from popcorn.evidence import logs

SPEC = {"batch": 1, "n": 4, "cond": 1, "seed": 3, "case": "dense"}
GEQRF = "import torch\n\n\ndef custom_kernel(data):\n    return torch.geqrf(data)\n"


def bench_record(spec=SPEC, problem="qr_v2", gpu="NVIDIA H200", torch_version="2.11.0+cu130", device="cuda",
                 baseline="torch.geqrf", time="2026-12-01T10:00:00Z", passed=True, **case_keys) -> dict:
    case = {"spec": spec, "status": "pass", "baseline_us": 500.0, "baseline_runs": 4, **case_keys}
    return {"time": time, "problem": problem, "mode": "bench", "gpu": gpu, "torch": torch_version,
            "device": device, "baseline": baseline, "passed": passed, "cases": [case]}


def write_log(path, *records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def lookup(tmp_path, record, spec=SPEC, gpu="NVIDIA H200", torch_version="2.11.0+cu130", device="cuda"):
    entries = baselines.logged([write_log(tmp_path / "perf.jsonl", record)], "qr_v2", "torch.geqrf")
    return baselines.find(entries, spec, gpu, torch_version, device)


# ---- the lookup ---------------------------------------------------------------------------------

def test_an_exact_match_is_reused_with_the_time_of_its_run(tmp_path):
    entry = lookup(tmp_path, bench_record())
    assert baselines.reused_fields(entry) == {"baseline_us": 500.0, "baseline_runs": 4, "baseline_bounded": None,
                                              "baseline_reused": "2026-12-01T10:00:00Z"}
    assert lookup(tmp_path, bench_record(spec={"case": "dense", "seed": 3, "cond": 1, "n": 4, "batch": 1}))


@pytest.mark.parametrize("record, query", [
    (bench_record(spec={**SPEC, "seed": 4}), {}),                       # another case
    (bench_record(problem="eigh"), {}),                                  # another problem
    (bench_record(baseline="reference.ref_kernel"), {}),                 # another baseline
    (bench_record(gpu="NVIDIA B200"), {}),                               # another GPU
    (bench_record(torch_version="2.10.0+cu128"), {}),                    # another torch
    (bench_record(gpu="cpu", device="cpu"), {"gpu": "cpu"}),             # a CPU record never serves a GPU run
    (bench_record(), {"device": "cpu"}),                                 # nor a GPU record a CPU run
    (bench_record(gpu=None), {"gpu": None}),                             # a run that could not name its GPU
    (bench_record(passed=False), {}),                                    # a failing record
    (bench_record(baseline_reused="2026-11-01T00:00:00Z"), {}),          # a reused value is not a measurement
    (bench_record(baseline_us=None), {}),
    ({**bench_record(), "mode": "diff"}, {}),
], ids=["spec", "problem", "baseline", "gpu", "torch", "cpu-record", "gpu-record", "unknown-gpu", "failed",
        "reused", "no-time", "diff"])
def test_anything_but_an_exact_match_is_timed_again(tmp_path, record, query):
    assert lookup(tmp_path, record, **query) is None


def test_the_newest_measurement_wins_and_unreadable_lines_are_skipped(tmp_path):
    log = write_log(tmp_path / "perf.jsonl", bench_record(time="2026-12-02T00:00:00Z", baseline_us=700.0),
                    bench_record(time="2026-12-01T00:00:00Z"))
    with log.open("a") as handle:
        handle.write("not json\n")
    entries = baselines.logged([log, log], "qr_v2", "torch.geqrf")
    assert len(entries) == 2
    assert baselines.find(entries, SPEC, "NVIDIA H200", "2.11.0+cu130", "cuda:1")["baseline_us"] == 700.0


def test_a_record_whose_cases_are_not_a_list_is_skipped(tmp_path):
    # "cases": 5 (a hand edit) stopped every bench --baseline with "TypeError: 'int' object is not iterable".
    log = write_log(tmp_path / "perf.jsonl", {**bench_record(), "cases": 5}, bench_record())
    assert len(baselines.logged([log], "qr_v2", "torch.geqrf")) == 1


# ---- the bounded rule for a slow baseline ---------------------------------------------------------

class Scripted:
    """A clock whose every measurement takes the next of the given ns."""

    def __init__(self, ns):
        self.ns = list(ns)

    def measure(self, run):
        return self.ns.pop(0), run()


def timed(samples_ns, rule):
    """time_case on scripted samples, with a wall clock that moves one second per reading."""
    seconds = iter(range(10_000))
    return timing.time_case(lambda x: x, [0], lambda outputs: None, Scripted(samples_ns), rule,
                            wall=lambda: float(next(seconds)))


def jittered(seconds):
    return [seconds * (1.1 if i % 2 else 0.9) * 1e9 for i in range(60)]


@pytest.mark.parametrize("sample_s, runs", [(1.5, 3), (4.0, 2), (12.0, 1)])
def test_a_slow_call_stops_at_three_repeats_or_five_seconds(sample_s, runs):
    rule = timing.StopRule("benchmark", slow_call_s=timing.SLOW_CALL_S)
    stats = timed(jittered(sample_s), rule)
    assert stats.runs == runs and rule.bounded(stats)
    graders = timing.StopRule("benchmark")
    unbounded = timed(jittered(sample_s), graders)
    assert unbounded.runs > runs and not graders.bounded(unbounded)


def test_a_fast_or_mixed_baseline_keeps_the_graders_rule():
    rule = timing.StopRule("benchmark", slow_call_s=timing.SLOW_CALL_S)
    stats = timed([2e9] + jittered(0.6), rule)
    assert stats == timed([2e9] + jittered(0.6), timing.StopRule("benchmark"))
    assert stats.runs > timing.SLOW_REPEATS and not rule.bounded(stats)


@pytest.fixture
def few_repeats(monkeypatch):
    """The worker's rules of a GPU on this CPU (worker.stop_rule bounds every loop of a CPU run alike), and the
    grader's benchmark rule stopped at one repeat more than a bounded baseline's SLOW_REPEATS: a 4 x 4 case seldom
    settles to the rule's 0.1% error and takes up to 200 repeats, each re-checking 50 inputs."""
    budget_s = timing.MODE_LIMITS["benchmark"][1]
    monkeypatch.setitem(timing.MODE_LIMITS, "benchmark", (timing.SLOW_REPEATS + 1, budget_s))
    monkeypatch.setattr(worker, "stop_rule", lambda device, **grader: timing.StopRule("benchmark", **grader))


def test_worker_bounds_a_slow_baseline_and_keeps_the_full_rule_for_the_kernel(monkeypatch, few_repeats):
    monkeypatch.setattr(timing, "SLOW_CALL_S", 0.0)          # every call of the torch baseline counts as slow
    sent = []
    kernel = native_checker("qr_v2").baseline
    result = worker.run_bench_case("qr_v2", kernel, SPEC, "cpu", True, sent.append)
    assert result["baseline_runs"] == timing.SLOW_REPEATS and result["baseline_bounded"] is True
    assert result["runs"] > timing.SLOW_REPEATS and result["baseline_reused"] is None
    assert result["baseline_us"] > 0


def test_worker_uses_a_reused_baseline_without_calling_it(monkeypatch, few_repeats):
    module = native_checker("qr_v2")

    def never(A):
        raise AssertionError("the baseline ran")
    monkeypatch.setattr(module, "baseline", never)
    entry = {"baseline_us": 123.0, "baseline_runs": 3, "baseline_bounded": True, "time": "2026-12-01T10:00:00Z"}
    sent = []
    result = worker.run_bench_case("qr_v2", torch.geqrf, SPEC, "cpu", True, sent.append, reuse=entry)
    assert result["baseline_us"] == 123.0 and result["baseline_reused"] == "2026-12-01T10:00:00Z"
    assert any("logged at 2026-12-01T10:00:00Z" in text for kind, text in sent if kind == "progress")


# ---- the runner, native backend -------------------------------------------------------------------

@pytest.fixture
def project_log(tmp_path, monkeypatch):
    """The project's log (read for baselines besides --log), moved to tmp_path."""
    path = tmp_path / "project.jsonl"
    monkeypatch.setattr(logs, "DEFAULT_LOG", path)
    return path


def test_fresh_baseline_passes_no_logged_baselines_to_the_worker(tmp_path, project_log, monkeypatch):
    jobs = []

    def fake_native(mode, prob, submissions, specs, device, progress, **options):
        jobs.append(options)
        return {"gpu": "cpu", "torch": torch.__version__}, [
            {"spec": s, "status": "pass", "error": None, "residuals": {}, "mean_us": 2.0, "runs": 9,
             **baselines.timed_fields(4.0e6, 3, True)} for s in specs]
    monkeypatch.setattr(runner, "_run_native", fake_native)
    write_log(project_log, bench_record(gpu="cpu", device="cpu", torch_version=torch.__version__))
    sub = tmp_path / "s.py"
    sub.write_text(GEQRF)
    case = "batch: 1; n: 4; cond: 1; seed: 3; case: dense"
    runner.bench("qr_v2", sub, baseline=True, custom=[case], device="cpu", log_path=None)
    fresh = runner.bench("qr_v2", sub, baseline=True, custom=[case], device="cpu", log_path=None,
                         fresh_baseline=True)
    assert len(jobs[0]["logged_baselines"]) == 1 and jobs[1]["logged_baselines"] == []
    # the worker's bounded baseline: marked ~ in the table, counted and explained
    assert fresh.record["baselines_bounded"] == 1 and fresh.record["baselines_reused"] == 0
    assert "4,000,000~" in fresh.table
    assert any("marked ~: 1 timed with at most 3 repeats" in note for note in fresh.notes)


@pytest.fixture
def in_process_worker(monkeypatch, few_repeats):
    """The runner's worker run in this process instead of a spawned one, so that few_repeats reaches it (the
    spawned worker's messages and timeouts: test_cli_loop.py, test_runner_hardening.py)."""
    def run_worker(job, progress=lambda text: None, timeout_s=None, limit_name=None):
        sent = []
        worker.main(SimpleNamespace(send=sent.append, close=lambda: None), job)
        assert sent[-1] == ("done", None), sent[-1]
        return sent[0][1], [payload for kind, payload in sent if kind == "case"]
    monkeypatch.setattr(runner, "run_worker", run_worker)
    yield
    sys.modules.pop("popkit_candidate", None)         # the submission worker.main imported


def test_native_bench_reuses_its_own_logged_baseline(tmp_path, project_log, in_process_worker):
    sub = tmp_path / "s.py"
    sub.write_text(GEQRF)
    log = tmp_path / "perf.jsonl"
    case = "batch: 1; n: 4; cond: 1; seed: 3; case: dense"
    first = runner.bench("qr_v2", sub, baseline=True, custom=[case], device="cpu", log_path=log)
    second = runner.bench("qr_v2", sub, baseline=True, custom=[case], device="cpu", log_path=log)
    (fresh,), (reused,) = first.record["cases"], second.record["cases"]
    assert fresh["baseline_reused"] is None and first.record["baselines_reused"] == 0
    assert reused["baseline_us"] == fresh["baseline_us"] and reused["baseline_runs"] == fresh["baseline_runs"]
    assert reused["baseline_reused"] == first.record["time"] and second.record["baselines_reused"] == 1
    assert "*" in second.table and "*" not in first.table
    assert any("1 reused from the log" in note and "--fresh-baseline" in note for note in second.notes)
    records, bad = logs.read_strict(log)
    assert bad == [] and len(records) == 2
    assert all(set(logs.CONTRACT) <= set(r) and r["baseline"] == "torch.geqrf" for r in records)
