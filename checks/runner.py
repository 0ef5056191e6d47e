"""Runs check, bench and diff jobs in a spawned worker and turns the results into a table and a log record.

The worker (checks/worker.py) imports the submission once, as the grader's
worker does; this side picks the cases, shows progress, survives a worker
crash (the cases it did not reach are reported as failed), and writes one
record per run to logs/performance.jsonl.
"""
from __future__ import annotations

import multiprocessing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from checks import worker
from checks.problems import load_problem, parse_spec, short_spec
from checks.robustness import robustness_specs
from popcorn import logs
from popcorn.errors import PopkitError
from popcorn.preflight import leading_directives
from popcorn.provenance import changed_parts
from popcorn.tables import fmt_us, render_table

CPU_WORK_LIMIT = 2.2e9   # batch * n^3 above this is too slow for the CPU path (16 x 512^3 fits)


@dataclass
class RunOutcome:
    record: dict
    table: str
    passed: bool
    notes: list[str]


def default_device() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def remap_seed(seed: int, salt: int) -> int:
    """The grader's POPCORN_SEED remap: a + (a + b)(a + b + 1) / 2."""
    return seed + (seed + salt) * (seed + salt + 1) // 2


def select_specs(problem: str, which: str, custom: list[str] = (), seeds: int = 0,
                 device: str = "cuda", robust: bool = False) -> tuple[list[dict], list[str]]:
    """The cases to run: official tests or benchmarks (or custom specs), plus the robustness suite
    when asked, K extra seeds each, CPU-sized on CPU."""
    prob = load_problem(problem)
    specs = [parse_spec(text) for text in custom] if custom else list(getattr(prob, which))
    if robust:
        specs += robustness_specs(problem)
    notes = []
    if device == "cpu":
        small = [s for s in specs if s["batch"] * s["n"] ** 3 <= CPU_WORK_LIMIT]
        if len(small) < len(specs):
            notes.append(f"no GPU: running the CPU path on {len(small)} of {len(specs)} cases "
                         f"(batch * n^3 <= {CPU_WORK_LIMIT:.1e})")
        specs = small
    extra = [{**s, "seed": remap_seed(s["seed"], k)} for k in range(1, seeds + 1) for s in specs]
    return specs + extra, notes


def case_line(result: dict) -> str:
    """One finished case as a progress line, so a long run shows its results as they come."""
    timing = "".join(f", {label} {fmt_us(result[key])} us" for key, label in
                     (("mean_us", "mean"), ("baseline_us", "baseline"), ("incumbent_us", "incumbent"))
                     if result.get(key) is not None)
    error = f": {result['error']}" if result.get("error") else ""
    return f"done {short_spec(result['spec'])}: {result['status']}{timing}{error}"


def run_worker(job: dict, progress: Callable[[str], None] = lambda text: None,
               timeout_s: float | None = None) -> tuple[dict, list[dict]]:
    """Run a job in a spawned worker; returns (environment info, one result per spec)."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=worker.main, args=(child, job), daemon=True)
    proc.start()
    child.close()
    info, results, failure = {}, [], None
    while True:
        if not parent.poll(timeout_s):
            failure = f"worker timed out after {timeout_s:.0f} s"
            proc.kill()
            break
        try:
            kind, payload = parent.recv()
        except EOFError:
            failure = f"worker died (exit code {proc.exitcode if proc.exitcode is not None else 'unknown'})"
            break
        if kind == "start":
            info = payload
        elif kind == "progress":
            progress(payload)
        elif kind == "case":
            results.append(payload)
            progress(case_line(payload))
        elif kind == "error":
            failure = "worker failed: " + payload.strip().splitlines()[-1]
            progress(payload)
            break
        elif kind == "done":
            break
    proc.join(timeout=30)
    for spec in job["specs"][len(results):]:
        results.append({"spec": spec, "status": "fail", "error": failure or "not run", "residuals": {}})
    return info, results


def _gate_cell(residuals: dict, gate: str) -> str:
    value = residuals.get(gate)
    return "-" if not value else f"{value[0]:.3g}/{value[1]:g}"


def results_table(results: list[dict], mode: str) -> str:
    """One row per case; an "official" column (checks.official) when any result carries one."""
    official = any("official" in r for r in results)
    gate_names = list(dict.fromkeys(g for r in results for g in r.get("residuals", {})))
    headers = ["case", "status"] + gate_names
    if mode == "bench":
        headers += ["mean us", "err us", "runs", "baseline us", "speedup"]
    if mode == "diff":
        headers += ["cand us", "incumbent us", "ratio", "verdict"]
    if official:
        headers.append("official")
    headers.append("error")
    rows = []
    for r in results:
        row = [short_spec(r["spec"]), r["status"]] + [_gate_cell(r.get("residuals", {}), g) for g in gate_names]
        if mode == "bench":
            speed = (r["baseline_us"] / r["mean_us"]) if r.get("baseline_us") and r.get("mean_us") else None
            row += [fmt_us(r.get("mean_us")), fmt_us(r.get("err_us")), r.get("runs"),
                    fmt_us(r.get("baseline_us")), f"{speed:.1f}x" if speed else "-"]
        if mode == "diff":
            ratio = r.get("ratio")
            row += [fmt_us(r.get("mean_us")), fmt_us(r.get("incumbent_us")),
                    f"{ratio:.3f}" if ratio else "-", r.get("verdict", "-")]
        if official:
            row.append(r.get("official") or "-")
        row.append((r.get("error") or "")[:90])
        rows.append(row)
    numeric = set(range(2, len(headers) - (2 if official else 1)))
    return render_table(headers, rows, right_align=numeric)


def case_record(result: dict) -> dict:
    """A result in the log's per-case shape (timing keys null when not timed)."""
    keys = ("mean_us", "err_us", "best_us", "worst_us", "runs", "baseline_us")
    return {"spec": result["spec"], "status": result["status"], "error": result.get("error"),
            **{k: result.get(k) for k in keys}, "residuals": result.get("residuals", {}),
            **{k: result[k] for k in ("incumbent_us", "ratio", "verdict", "incumbent_residuals", "info")
               if k in result}}


def require_submission_for(problem: str, path: Path) -> None:
    """The file exists and, when it names a leaderboard, names this problem's."""
    if not path.is_file():
        raise PopkitError(f"{path}: no such submission file (run `popkit build {problem}` first)")
    board = leading_directives(path.read_text(encoding="utf-8", errors="replace")).get("leaderboard")
    expected = load_problem(problem).leaderboard
    if board is not None and board != expected:
        raise PopkitError(f"{path} is a {board} submission (its #!POPCORN leaderboard line), not {expected}: "
                          f"run `popkit build {problem} -o FILE` and pass --submission FILE")


def execute(mode: str, problem: str, submissions: dict[str, Path], specs: list[dict], device: str,
            progress: Callable[[str], None], log_path: Path | None, notes: list[str],
            **options) -> RunOutcome:
    for name, path in submissions.items():
        require_submission_for(problem, Path(path))
    if not specs:
        raise PopkitError("no cases to run")
    job = {"mode": mode, "problem": problem, "device": device, "specs": specs,
           "submissions": {k: str(Path(v).resolve()) for k, v in submissions.items()}, **options}
    info, results = run_worker(job, progress)
    cases = [case_record(r) for r in results]
    passed = all(c["status"] == "pass" for c in cases)
    record = logs.new_record(
        problem, mode, submission_sha256=logs.file_sha256(submissions["candidate"]),
        gpu=info.get("gpu"), torch=info.get("torch"), cuda=info.get("cuda"), compile_s=info.get("compile_s"),
        cases=cases, device=device, passed=passed)
    if mode in ("bench", "diff"):
        record["geomean_us"] = logs.case_geomean(cases, "mean_us")
    if mode == "bench" and options.get("baseline"):
        record["baseline_geomean_us"] = logs.case_geomean(cases, "baseline_us")
        record["baseline"] = worker.BASELINES[problem][0]
    if mode == "diff":
        record["incumbent_sha256"] = logs.file_sha256(submissions["incumbent"])
        record["incumbent_geomean_us"] = logs.case_geomean(cases, "incumbent_us")
    if log_path is not None:
        logs.append_record(record, log_path)
    return RunOutcome(record, results_table(results, mode), passed, notes)


def check(problem: str, submission: Path, custom: list[str] = (), seeds: int = 0, device: str | None = None,
          progress=lambda text: None, log_path: Path | None = logs.DEFAULT_LOG,
          official_dir: Path | None = None, robust: bool = False) -> RunOutcome:
    """Every official test case (or the given ones), plus the robustness suite when asked, K extra
    seeds each, through the gates; with official_dir, the competition's own eval.py runs the same
    cases and must agree."""
    device = device or default_device()
    specs, notes = select_specs(problem, "tests", custom, seeds, device, robust)
    outcome = execute("check", problem, {"candidate": submission}, specs, device, progress, None, notes)
    if official_dir is not None:
        from checks import official   # official builds on this module
        outcome = official.merge(outcome, official.run_official(official_dir, submission, outcome.record,
                                                                progress=progress))
    if log_path is not None:
        logs.append_record(outcome.record, log_path)
    return outcome


def bench(problem: str, submission: Path, baseline: bool = False, custom: list[str] = (),
          device: str | None = None, progress=lambda text: None,
          log_path: Path | None = logs.DEFAULT_LOG) -> RunOutcome:
    """Grader-style timing of every benchmark case (or the given ones), optionally with the torch baseline."""
    device = device or default_device()
    notes = [] if device.startswith("cuda") else ["no GPU: CPU timings say nothing about GPU speed"]
    specs, more = select_specs(problem, "benchmarks", custom, 0, device)
    return execute("bench", problem, {"candidate": submission}, specs, device, progress, log_path,
                   notes + more, baseline=baseline)


def diff(problem: str, submission: Path, incumbent: Path, rounds: int = 3, custom: list[str] = (),
         device: str | None = None, progress=lambda text: None,
         log_path: Path | None = logs.DEFAULT_LOG) -> RunOutcome:
    """Candidate against incumbent, alternating rounds per case; fails on a regression or a worse margin."""
    if rounds < 3:
        raise PopkitError("diff needs at least 3 rounds")
    device = device or default_device()
    specs, notes = select_specs(problem, "benchmarks", custom, 0, device)
    outcome = execute("diff", problem, {"candidate": submission, "incumbent": incumbent}, specs, device,
                      progress, None, notes, rounds=rounds)
    outcome.record["changed_parts"] = changed_parts(submission, incumbent)
    if log_path is not None:
        logs.append_record(outcome.record, log_path)
    return outcome


