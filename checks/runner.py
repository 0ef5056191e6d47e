"""check, bench and diff: pick the cases, run them on a backend, and turn the results into a table and a log record.

Two backends give the same per-case results, tables, verdicts and records:
- native (a problem with checks/native/NAME.py): a spawned worker (checks/worker.py) imports the
  submission once, as the grader's worker does, and runs our generators and gates; this side shows
  progress, enforces the task's timeout, and survives a worker crash;
- official (every problem; the only one for a harness problem): the competition folder's own eval.py
  (checks/harness.py).
`--harness both` (check only) runs the two and shows where they disagree.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import math
import multiprocessing
import re
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from checks import harness as official
from checks import baselines, packages, task_folder, timing, verdicts, worker
from checks.preflight import MAX_BYTES, leading_directives, missing_entry_points
from checks.problems import (ENTRY_POINT, INTEGER, Problem, format_spec, load_problem, normalize, parse_spec,
                             short_spec)
from popcorn.errors import Interrupted, PopkitError, ProblemError, deferred_interrupt
from popcorn.evidence import logs
from popcorn.evidence.provenance import changed_parts
from popcorn.evidence.tables import fmt_counters, fmt_speedup, fmt_us, render_table

CPU_WORK_LIMIT = 2.2e9   # batch * n^3 above this is too slow for the CPU path (16 x 512^3 fits)
CPU_TIMEOUT_FACTOR = 10  # the task's limits are for the GPU; the CPU path of the same cases is far slower
# A run holds its cases in a list and its record in one log line: --seeds 10^9 sat silently building a list of
# billions of cases. A thousand reruns of the official list is days of GPU time, and a record of 22,000 cases.
MAX_SEEDS = 1000
SUBMISSION_MAX_READ = 10 * MAX_BYTES   # a file is read as a submission up to this (over 1 MB: local experiments)
BUDGET_LIMIT = "--budget"   # the limit name a run under --budget gives run_worker (cut_by finds its cases)
BACKENDS = ("native", "official", "both")
TIMEOUT_KEYS = {"check": "test", "bench": "benchmark", "diff": "benchmark"}
INCUMBENT_TIMING = ("incumbent_us", "incumbent_err_us", "incumbent_best_us", "incumbent_worst_us", "incumbent_runs")
REFERENCE_INCUMBENT = "reference"   # diff --incumbent reference: the competition folder's ref_kernel
BUILDER_SOURCES = ("parts", "templates")   # the builder's folders of the project root: no file there is a submission
COUNTERS_WIDTH = 60     # the table's counters column at most (whole "name delta" pairs), so its rows stay one line


@dataclass
class RunOutcome:
    record: dict
    table: str
    passed: bool
    notes: list[str]
    logged: bool = False      # the record is in the log (set by _finish)
    log_error: str | None = None   # why the record is not in the log, when appending it failed


def default_device() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | None) -> str:
    """'cuda', 'cuda:N' or 'cpu'; asking for a GPU that is not there is one clear error."""
    if device is None:
        return default_device()
    if device != "cpu" and not (device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise PopkitError(f"--device {device!r}: use cuda, cuda:N or cpu")
    if device != "cpu":
        import torch
        if not torch.cuda.is_available():
            raise PopkitError(f"--device {device}: no CUDA GPU is visible to torch here (use --device cpu)")
    return device


def require_device_for(prob: Problem, device: str, backend: str | None = None, why: str | None = None) -> None:
    """The folder's eval.py (a harness problem's, or a native problem's under --harness official or both) makes
    its inputs on the leaderboard's GPU: on the CPU every case would crash. Refused before anything runs, unless
    the record's GPUs name the CPU (a folder made to run there, such as the toy folder of popkit's tests). BACKEND
    None is the problem's own (native where it has a checker); WHY is the option that chose eval.py (default:
    --harness BACKEND)."""
    backend = backend or ("native" if prob.native is not None else "official")
    if device != "cpu" or backend == "native" or "CPU" in (g.upper() for g in prob.gpus):
        return
    if prob.native is None:
        raise PopkitError(f"{prob.name} is a harness problem, and harness problems run on the GPU only (the "
                          f"folder's eval.py makes its inputs on the leaderboard's GPU, {'/'.join(prob.gpus)}): "
                          "nothing ran on the CPU; run it on a GPU host")
    instead = "" if why else ", or --harness native here"
    raise PopkitError(f"{why or f'--harness {backend}'} runs the competition folder's eval.py, which makes its inputs "
                      f"on the leaderboard's GPU ({'/'.join(prob.gpus)}): nothing ran on the CPU; run it on a GPU host"
                      f"{instead}")


def _require_reference_run(prob: Problem, harness: str | None, device: str) -> None:
    """diff --incumbent reference: the folder's ref_kernel, which only its eval.py runs (our checker's worker
    failed at `from reference import ...`, after the candidate's runs), on the device eval.py needs."""
    if harness == "native":
        raise PopkitError(f"--incumbent {REFERENCE_INCUMBENT} is the competition folder's ref_kernel, which only its "
                          "eval.py runs, not --harness native: leave --harness out, or pass --harness official")
    require_device_for(prob, device, "official", f"--incumbent {REFERENCE_INCUMBENT}")
    require_reference_kernel(prob, "reference incumbent")


def require_reference_kernel(prob: Problem, role: str = "baseline") -> None:
    """The folder's ref_kernel stands in for a submission (ROLE: bench --baseline's baseline, diff --incumbent
    reference's incumbent) only where eval.py calls custom_kernel and the folder's reference.py defines ref_kernel:
    without it every run of the stand-in fails at import, after the candidate's runs (bench even passed, with no
    baseline), so it is refused before anything runs."""
    if prob.entry_points != [ENTRY_POINT]:
        raise PopkitError(f"{prob.name}'s eval.py calls {', '.join(prob.entry_points)}, not {ENTRY_POINT}, so the "
                          "folder's reference.ref_kernel cannot stand in for a submission: nothing to time it "
                          "against but a file of your own (diff --incumbent FILE)")
    why = task_folder.no_ref_kernel(task_folder.harness_folder(prob), prob.harness.get("files") or [])
    if why:
        instead = ("bench without --baseline times the file alone" if role == "baseline" else
                   f"pass --incumbent FILE, a file of your own (`popkit promote {prob.name}` installs one)")
        raise PopkitError(f"{prob.name}'s reference has no ref_kernel ({why}), so there is no "
                          f"{role} to time: nothing ran; {instead}")


def resolve_backend(prob: Problem, harness: str | None, mode: str) -> str:
    if harness is None:
        return "native" if prob.native is not None else "official"
    if harness not in BACKENDS:
        raise PopkitError(f"--harness {harness!r}: use native, official or both")
    if harness != "official" and prob.native is None:
        raise PopkitError(f"{prob.name} is a harness problem (no checks/native/{prob.name}.py): "
                          "only --harness official runs it")
    if harness == "both" and mode != "check":
        raise PopkitError("--harness both compares verdicts: use it with check")
    return harness


def select_specs(prob: Problem, which: str, custom: list[str] = (), seeds: int = 0, device: str = "cuda",
                 robust: bool = False, backend: str = "native") -> tuple[list[dict], list[str]]:
    """The cases to run: official tests or the benchmarks the leaderboard times (or custom specs), plus the
    robustness suite when asked; for the native backend also K extra seeds each and the CPU size limit."""
    _require_seeds(seeds)
    specs = checked_specs(prob, custom) if custom else list(getattr(prob, which))
    notes = []
    if which == "ranked_benchmarks" and not custom and len(specs) < len(prob.benchmarks):
        notes.append(f"{prob.name} is ranked by its last benchmark case only (ranking: last): the leaderboard "
                     "times that case alone, and so does this run (--case SPEC times others)")
    _require_robust(prob, robust)
    if robust:
        specs += [normalize(prob, s) for s in prob.native.robustness_specs()]
    if backend != "official" and device == "cpu":
        small = [s for s in specs if s.get("batch", 1) * s.get("n", 1) ** 3 <= CPU_WORK_LIMIT]
        if len(small) < len(specs):
            notes.append(f"no GPU: running the CPU path on {len(small)} of {len(specs)} cases "
                         f"(batch * n^3 <= {CPU_WORK_LIMIT:.1e})")
        specs = small
    if not specs:
        raise PopkitError("no cases to run" + (f": {notes[0]}" if notes else ""))
    if backend != "official":
        _require_remapped_seeds(prob, specs, seeds)
        specs = specs + [{**s, "seed": official.remap_seed(s["seed"], k)} for k in range(1, seeds + 1) for s in specs]
    return specs, notes


def require_options(problem: str, mode: str, custom: list[str] = (), seeds: int = 0, harness: str | None = None,
                    rounds: int | None = None, baseline: bool = False, incumbent: str | None = None,
                    robust: bool = False, budget_s: float | None = None, device: str | None = None) -> None:
    """What can be judged of a run's options before anything is built or run (the CLI asks first): --harness,
    --seeds, --rounds, --robust, --budget, every --case, and a folder's ref_kernel that --baseline or --incumbent
    (as typed, on DEVICE) would time. A wrong one ended the verb only after a build of the parts."""
    prob = load_problem(problem)
    backend = resolve_backend(prob, harness, mode)
    _require_budget(budget_s, backend)
    _require_seeds(seeds)
    _require_robust(prob, robust)
    if rounds is not None:
        _require_rounds(rounds)
    specs = checked_specs(prob, custom)
    _require_seeded(prob, specs or prob.tests, seeds, backend)
    _require_remapped_seeds(prob, specs or prob.tests, seeds)
    if baseline and backend == "official":        # a native problem's baseline is its torch reference
        require_reference_kernel(prob, "baseline")
    if incumbent is not None and incumbent_of(incumbent) == REFERENCE_INCUMBENT:
        _require_reference_run(prob, harness, resolve_device(device))


def _require_budget(budget_s: float | None, backend: str) -> None:
    """--budget: a positive number of seconds, for popkit's own worker (eval.py keeps the task's limits)."""
    if budget_s is None:
        return
    if not math.isfinite(budget_s) or budget_s <= 0:
        raise PopkitError(f"--budget {budget_s:g}: a positive number of seconds")
    if backend != "native":
        raise PopkitError(f"--budget stops popkit's own checker; with --harness {backend} eval.py runs under the "
                          "task's limits, which --budget does not change")


def _require_robust(prob: Problem, robust: bool) -> None:
    if robust and prob.native is None:
        raise PopkitError(f"--robust needs a native checker (checks/native/{prob.name}.py); "
                          f"{prob.name} is a harness problem")


def _require_seeds(seeds: int) -> None:
    if seeds < 0:
        raise PopkitError(f"--seeds {seeds}: the number of extra seeds must be 0 or more")
    if seeds > MAX_SEEDS:
        raise PopkitError(f"--seeds {seeds}: at most {MAX_SEEDS} extra seeds in one run (each reruns every case); "
                          "split a larger sweep over several runs")


def _require_remapped_seeds(prob: Problem, specs: list[dict], seeds: int) -> None:
    """--seeds K gives a case of seed a the seeds remap_seed(a, 1 .. K), which a native checker's generator must
    take too: a seed past its range failed every extra case, one by one, after the build."""
    if not seeds or prob.native is None:
        return
    for spec in specs:
        for salt in (1, seeds):      # a + (a + k)(a + k + 1)/2 is convex in k: its extremes are at the ends
            remapped = {**spec, "seed": official.remap_seed(spec["seed"], salt)}
            try:
                prob.native.normalize_spec(remapped)
            except ProblemError:
                raise PopkitError(f"--seeds {seeds}: {short_spec(spec)}'s seed {spec['seed']} becomes "
                                  f"{remapped['seed']} under the grader's remap, a seed {prob.name}'s generator "
                                  "cannot take; use smaller case seeds or fewer --seeds") from None


def _require_seeded(prob: Problem, specs: list[dict], seeds: int, backend: str) -> list[str]:
    """--seeds through eval.py sets POPCORN_SEED, which the runner's protocol applies to each case's seed: cases
    without one (princeton's) would be run again unchanged, and counted as new seeds; so would every case of an
    older eval.py that uses POPCORN_SEED only as a global seed. An eval.py whose source does not tell runs as
    asked, with a note (returned) that says so."""
    if seeds and backend != "native" and not any("seed" in spec for spec in specs):
        raise PopkitError(f"--seeds {seeds}: {prob.name}'s cases have no seed, and POPCORN_SEED remaps only a case's "
                          "seed: the extra runs would repeat the same cases; nothing ran")
    if not seeds or backend != "official":       # 'both' sends the extra seeds to our generators only
        return []
    honoured = official.case_seeds_honoured(prob)
    if honoured is False:
        raise PopkitError(f"--seeds {seeds}: {prob.name}'s eval.py uses POPCORN_SEED only as a global seed and keeps "
                          "each case's seed: the extra runs would repeat the same cases; nothing ran")
    if honoured is None:
        return [f"--seeds: cannot tell from {prob.name}'s eval.py whether POPCORN_SEED changes each case's seed; the "
                "extra runs may repeat the same cases"]
    return []


def _require_rounds(rounds: int) -> None:
    if rounds < 3:
        raise PopkitError(f"--rounds {rounds}: diff needs at least 3 alternating rounds per case (the default is 3)")


def checked_specs(prob: Problem, texts: list[str]) -> list[dict]:
    """Every --case, checked (checked_spec); one case given twice, even spelt two ways (the default family named
    or left out), is refused: it ran twice, and a bench counted it twice in the geomean."""
    specs, seen = [], {}
    for text in texts:
        spec = checked_spec(prob, text)
        first = seen.get(logs.spec_key(spec))
        if first is not None:
            same = "given twice" if first == text else f"the same case as --case {first!r}"
            raise PopkitError(f"--case {text!r} is {same}: a run takes each case once")
        seen[logs.spec_key(spec)] = text
        specs.append(spec)
    return specs


def checked_spec(prob: Problem, text: str) -> dict:
    """A --case spec, parsed and validated up front (keys, types, and a native problem's families)."""
    spec = parse_spec(text, prob)
    if prob.native is not None and "case" in spec and spec["case"] not in prob.native.families():
        raise PopkitError(f"--case {text!r}: unknown {prob.name} family {spec['case']!r} "
                          f"(known: {', '.join(prob.native.families())})")
    if prob.native is None:
        _require_task_keys(prob, text, spec)
        _require_task_types(prob, text, spec)
        spec = _official_booleans(prob, spec)
    return spec


def _official_booleans(prob: Problem, spec: dict) -> dict:
    """'True' or 'False' for a key the official cases give as a boolean is that boolean: the cases file line is the
    same either way, and the spec then equals the official case it repeats (records, baseline reuse)."""
    flags = {key for case in prob.tests + prob.benchmarks for key, value in case.items() if isinstance(value, bool)}
    return {key: value == "True" if key in flags and value in ("True", "False") else value
            for key, value in spec.items()}


def _require_task_keys(prob: Problem, text: str, spec: dict) -> None:
    """A harness problem's spec uses the keys of its official cases, and every key they all have: eval.py
    passes the keys to the task's generate_input, which otherwise crashes after the pre-run."""
    official = prob.tests + prob.benchmarks
    keys = list(dict.fromkeys(key for case in official for key in case))
    unknown = [key for key in spec if key not in keys]
    missing = [key for key in keys if all(key in case for case in official) and key not in spec]
    if unknown or missing:
        why = ", ".join(part for part in (unknown and f"unknown key {', '.join(unknown)}",
                                          missing and f"missing {', '.join(missing)}") if part)
        raise PopkitError(f"--case {text!r}: {why} ({prob.name}'s official cases have the keys "
                          f"{', '.join(keys)}; e.g. {format_spec(prob.tests[0])!r})")


def _require_task_types(prob: Problem, text: str, spec: dict) -> None:
    """A harness problem's spec gives each key a value of the kind its official cases give it (as eval.py reads the
    cases file: an integer, a list of integers, True or False, a number or a word): `seed: x` where every official
    seed is an integer reached the task's generate_input as the string 'x' and crashed there, after a pre-run."""
    official = prob.tests + prob.benchmarks
    for key, value in spec.items():
        expected = list(dict.fromkeys(_value_kind(case[key]) for case in official if key in case))
        if expected and not any(_fits_kind(value, kind) for kind in expected):
            example = next(case[key] for case in official if key in case)
            raise PopkitError(f"--case {text!r}: {key} is {value!r}, expected {' or '.join(expected)} (as "
                              f"{prob.name}'s official cases give it, e.g. {key}: {example})")


def _value_kind(value) -> str:
    """The kind of an official case's value, as eval.py reads it back from the cases file (int() where it can)."""
    if isinstance(value, bool):
        return "True or False"
    if isinstance(value, int) or (isinstance(value, str) and re.fullmatch(INTEGER, value.strip())):
        return "an integer"
    if isinstance(value, list):
        return "a list of integers"
    return "a number" if isinstance(value, float) or _is_number(value) else "a word"


def _fits_kind(value, kind: str) -> bool:
    """Whether a --case value (an int, a list of ints or a word, as parse_spec reads it) is of KIND."""
    if isinstance(value, list):
        return kind == "a list of integers"
    if isinstance(value, int):
        return kind in ("an integer", "a number")
    return {"True or False": value in ("True", "False"), "a number": _is_number(value),
            "a word": True}.get(kind, False)


def _is_number(value) -> bool:
    try:
        float(str(value))
    except ValueError:
        return False
    return True


def case_line(result: dict) -> str:
    """One finished case as a progress line, so a long run shows its results as they come."""
    timing_text = "".join(f", {label} {fmt_us(result[key])} us" for key, label in
                          (("mean_us", "mean"), ("baseline_us", "baseline"), ("incumbent_us", "incumbent"))
                          if result.get(key) is not None)
    error = f": {result['error']}" if result.get("error") else ""
    return f"done {short_spec(result['spec'])}: {result['status']}{timing_text}{error}"


def run_worker(job: dict, progress: Callable[[str], None] = lambda text: None,
               timeout_s: float | None = None, limit_name: str = "the task's limit") -> tuple[dict, list[dict]]:
    """Run a job in a spawned worker; returns (environment info, one result per spec).

    timeout_s bounds the whole run, as the runner's limit bounds eval.py: past it the worker is
    killed, the case in progress is named as timed out and the rest are not run. A worker that fails
    before its first case (the submission does not import, CUDA is missing) is one PopkitError."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=worker.main, args=(child, job), daemon=True)
    with _sigint_ignored():        # the worker inherits it: Ctrl-C reaches popkit only, which kills the worker
        proc.start()
    child.close()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    info, results, failure, started = {}, [], None, False
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not parent.poll(wait):
                index = len(results)
                where = short_spec(job["specs"][index]) if index < len(job["specs"]) else "the run"
                failure = f"timed out after {timeout_s:g} s {_limit_tag(limit_name)} during {where}"
                proc.kill()
                break
            try:
                kind, payload = parent.recv()
            except EOFError:
                proc.join(timeout=5)     # the pipe closes as the process ends: its exit code comes just after
                failure = f"worker died ({exit_text(proc.exitcode)})"
                break
            if kind == "start":
                info, started = payload, True
            elif kind == "progress":
                progress(payload)
            elif kind == "case":
                results.append(payload)
                progress(case_line(payload))
            elif kind == "import_failed":      # the line names the file that failed
                raise PopkitError(payload)
            elif kind == "error":
                failure = payload.strip().splitlines()[-1]
                break
            elif kind == "done":
                break
    except BaseException:          # Ctrl-C, or a failing progress callback: the worker stops with us
        proc.kill()
        proc.join()
        raise
    proc.join(timeout=30)
    if not started:
        names = ", ".join(str(p) for p in job["submissions"].values())
        raise PopkitError(f"{names}: {failure or 'the worker stopped before its first case'}")
    for index, spec in enumerate(job["specs"][len(results):]):
        reason = failure if index == 0 else f"not run ({failure})" if failure else "not run"
        results.append({"spec": spec, "status": "fail", "error": reason or "not run", "residuals": {}})
    return info, results


def _limit_tag(limit_name: str) -> str:
    """How a case cut by a limit names it in its error; cut_by reads it back."""
    return f"({limit_name})"


def cut_by(result: dict, limit_name: str) -> bool:
    """Whether run_worker's limit LIMIT_NAME cut this case: the case it stopped, or one it left unrun."""
    return _limit_tag(limit_name) in (result.get("error") or "")


def exit_text(code: int | None) -> str:
    """How a process ended, for a line: its exit code, or the signal that killed it (a crash in a kernel or a
    library is SIGSEGV or SIGABRT, which multiprocessing reports as a negative exit code)."""
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _gate_cell(residuals: dict, gate: str) -> str:
    value = residuals.get(gate)
    return "-" if not value else f"{value[0]:.3g}/{value[1]:g}"


def results_table(results: list[dict], mode: str) -> str:
    """One row per case; a seed column, gate columns, timing columns by mode, an "official" column when
    a native check ran beside the folder's eval.py, a "counters" column when the submission counts what its route
    did (the worker's RouteCounters; a diff's candidate), and the error (or eval.py's message)."""
    official_col = any("official" in r for r in results)
    counters_col = any("counters" in r for r in results)
    seeds = any("seed" in r["spec"] for r in results)
    gate_names = list(dict.fromkeys(g for r in results for g in r.get("residuals", {})))
    headers = ["case"] + (["seed"] if seeds else []) + ["status"] + gate_names
    if mode == "bench":
        headers += ["mean us", "err us", "runs", "baseline us", "speedup"]
    if mode == "diff":         # each side's mean and its standard error over the rounds, which the verdict weighs
        headers += ["cand us", "err us", "incumbent us", "err us", "ratio", "verdict"]
    text_columns = (["official"] if official_col else []) + (["counters"] if counters_col else []) + ["error / message"]
    headers += text_columns
    rows = []
    for r in results:
        row = [short_spec(r["spec"])] + ([r["spec"].get("seed", "-")] if seeds else []) + [r["status"]]
        row += [_gate_cell(r.get("residuals", {}), g) for g in gate_names]
        if mode == "bench":
            speed = (r["baseline_us"] / r["mean_us"]) if r.get("baseline_us") and r.get("mean_us") else None
            row += [fmt_us(r.get("mean_us")), fmt_us(r.get("err_us")), r.get("runs"),
                    fmt_us(r.get("baseline_us")) + _baseline_mark(r), fmt_speedup(speed) if speed else "-"]
        if mode == "diff":
            ratio = r.get("ratio")
            row += [fmt_us(r.get("mean_us")), fmt_us(r.get("err_us")), fmt_us(r.get("incumbent_us")),
                    fmt_us(r.get("incumbent_err_us")), f"{ratio:.3f}" if ratio else "-", r.get("verdict", "-")]
        if official_col:
            row.append(r.get("official") or "-")
        if counters_col:
            row.append(fmt_counters(r.get("counters"), COUNTERS_WIDTH))
        row.append((r.get("error") or r.get("message") or "")[:90])
        rows.append(row)
    first_numeric = 2 + (1 if seeds else 0)
    numeric = set(range(first_numeric, len(headers) - len(text_columns)))
    return render_table(headers, rows, right_align=numeric)


def header_line(label: str, record: dict) -> str:
    """The result's first line: LABEL, where it ran and what it saw, only what is known (a harness problem's
    eval.py may not report torch; a pre-run that failed reports nothing)."""
    facts = ([f"torch {record['torch']}"] if record.get("torch") else []) + (
        [f"import+compile {record['compile_s']:.1f} s"] if record.get("compile_s") is not None else [])
    where = f" on {record['gpu']}" if record.get("gpu") else ""
    return f"{label}{where}" + (f" ({', '.join(facts)})" if facts else "")


def _baseline_mark(result: dict) -> str:
    """'*' after a baseline reused from the log, '~' after one timed with the slow-call bound."""
    if result.get(baselines.REUSED):
        return "*"
    return "~" if result.get(baselines.BOUNDED) else ""


def baseline_counts(results: list[dict]) -> dict:
    """The record's count of baselines reused from the log, and of fresh ones timed with the slow-call bound."""
    reused = sum(1 for r in results if r.get(baselines.REUSED))
    bounded = sum(1 for r in results if r.get(baselines.BOUNDED) and not r.get(baselines.REUSED))
    return {"baselines_reused": reused, "baselines_bounded": bounded}


def baseline_notes(results: list[dict]) -> list[str]:
    """What the table's baseline marks mean, when any case has one."""
    counts, notes = baseline_counts(results), []
    if counts["baselines_reused"]:
        times = ", ".join(sorted({r[baselines.REUSED] for r in results if r.get(baselines.REUSED)}))
        notes.append(f"baseline us marked *: {counts['baselines_reused']} reused from the log (same case, GPU, "
                     f"torch; measured at {times}); --fresh-baseline times them again")
    if counts["baselines_bounded"]:
        notes.append(f"baseline us marked ~: {counts['baselines_bounded']} timed with at most "
                     f"{timing.SLOW_REPEATS} repeats or {timing.SLOW_BUDGET_S:g} s of samples "
                     f"(calls over {timing.SLOW_CALL_S:g} s each)")
    return notes


def spread_note(cases: list[dict]) -> list[str]:
    """What a diff table's two 'err us' columns are, and how the verdict weighs them (when a case was timed)."""
    rounds = sorted({c["runs"] for c in cases if c.get("runs") and c.get("incumbent_err_us") is not None})
    if not rounds:
        return []
    return [f"err us: the standard error of each side's mean over its {'/'.join(map(str, rounds))} rounds; a "
            f"difference within {verdicts.NOISE_SIGMAS:g} x their combined error, or under "
            f"{verdicts.NOISE_FLOOR:.1%} of the incumbent, is within noise"]


def case_record(result: dict) -> dict:
    """A result in the log's per-case shape (timing keys null when not timed)."""
    keys = ("mean_us", "err_us", "best_us", "worst_us", "runs", "baseline_us")
    return {"spec": result["spec"], "status": result["status"], "error": result.get("error"),
            **{k: result.get(k) for k in keys}, "residuals": result.get("residuals", {}),
            **{k: result[k] for k in ("message", *INCUMBENT_TIMING, "ratio", "verdict", "incumbent_residuals", "info",
                                      "official", "counters", "incumbent_counters", baselines.RUNS,
                                      baselines.BOUNDED, baselines.REUSED)
               if k in result}}


def not_a_submission(prob: Problem, path: Path, text: str) -> str | None:
    """Why the file at PATH (its TEXT) is not a submission for PROB, or None. A file of the builder's sources (a
    part, even route.py, which defines custom_kernel: it runs only inlined with the other parts; the template)
    is not one, nor is a file that is not Python or defines none of the functions the grader imports from it.
    Nothing else is asked: a hand-written file without popkit's header or a leaderboard line is a submission."""
    resolved = path.resolve()
    for folder in BUILDER_SOURCES:
        if resolved.is_relative_to((logs.ROOT / folder).resolve()):
            return f"a file of {folder}/, which the builder reads"
    try:
        tree = ast.parse(text, filename=path.name)
    except (SyntaxError, ValueError) as exc:
        where = f", line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        return f"not valid Python ({type(exc).__name__}: {getattr(exc, 'msg', exc)}{where})"
    missing = missing_entry_points(tree, prob.entry_points)
    if missing:
        return f"defines no {', '.join(missing)} at its top level (what the grader calls)"
    return None


def require_submission_for(prob: Problem, path: Path, role: str = "candidate") -> None:
    """The file exists, is a submission (not_a_submission) and, when it names a leaderboard, names this problem's;
    ROLE says what to pass instead: "incumbent" (--incumbent), "candidate" (--submission) or "file" (a script's
    argument)."""
    if not path.is_file():
        raise PopkitError(f"{path}: no such submission file (run `popkit build {prob.name}` first)")
    size = path.stat().st_size
    if size > SUBMISSION_MAX_READ:      # parsed as Python whole: a log or a tarball given by mistake ran out of memory
        raise PopkitError(f"{path} is not a submission: {size:,} bytes, where the leaderboard takes at most "
                          f"{MAX_BYTES:,}")
    text = path.read_text(encoding="utf-8", errors="replace")
    why = not_a_submission(prob, path, text)
    if why is not None:
        instead = {"incumbent": "--incumbent a built file (`popkit promote` installs one)",
                   "file": "the file it writes (-o FILE.py)"}.get(role, "--submission the file it writes (or leave "
                                                                     "--submission out)")
        raise PopkitError(f"{path} is not a submission ({why}): `popkit build {prob.name}` makes one; pass {instead}")
    board = leading_directives(text).get("leaderboard")
    if board is not None and board != prob.leaderboard:
        # Worded so that no article stands before a name (it said "is a BOARD submission", whatever BOARD was).
        wrong = f"{path} is built for leaderboard {board} (its #!POPCORN leaderboard line), not {prob.leaderboard}"
        if role == "incumbent":
            raise PopkitError(f"the incumbent {wrong}: pass --incumbent a file built for {prob.name} (`popkit "
                              f"promote {prob.name}` installs one, or --incumbent {REFERENCE_INCUMBENT})")
        option = "" if role == "file" else "--submission "
        raise PopkitError(f"{wrong}: run `popkit build {prob.name} -o FILE.py` and pass {option}FILE.py")


def make_outcome(mode: str, prob: Problem, submissions: dict[str, Path], results: list[dict], info: dict,
                 device: str, backend: str, notes: list[str], baseline_name: str | None) -> RunOutcome:
    """The run's record (design.md "Evidence") and table."""
    cases = [case_record(r) for r in results]
    passed = all(c["status"] == "pass" for c in cases)
    record = logs.new_record(
        prob.name, mode, submission_sha256=logs.file_sha256(submissions["candidate"]),
        gpu=info.get("gpu"), torch=info.get("torch"), cuda=info.get("cuda"), compile_s=info.get("compile_s"),
        cases=cases, device=device, harness=backend, passed=passed)
    if mode in ("bench", "diff"):
        record["geomean_us"] = logs.case_geomean(cases, "mean_us")
    if baseline_name:
        record["baseline_geomean_us"] = logs.case_geomean(cases, "baseline_us")
        record["baseline"] = baseline_name
        record.update(baseline_counts(cases))
        notes = notes + baseline_notes(results)
    if mode == "diff":
        notes = notes + spread_note(cases)
        record["incumbent_sha256"] = logs.file_sha256(submissions["incumbent"])
        record["incumbent_geomean_us"] = logs.case_geomean(cases, "incumbent_us")
        record["changed_parts"] = changed_parts(submissions["candidate"], submissions["incumbent"])
    return RunOutcome(record, results_table(results, mode), passed, notes)


def _run_native(mode: str, prob: Problem, submissions: dict[str, Path], specs: list[dict], device: str,
                progress, passes: int = 1, budget_s: float | None = None, **options) -> tuple[dict, list[dict]]:
    """Run the job in a worker under the task's limit once per PASS: the grader's limit is for one pass over
    the cases, and --seeds, --robust, a baseline or a diff's rounds make several in the one worker (a diff of 20
    rounds, 40 timing loops per case, timed out at the limit of one). BUDGET_S (--budget), when shorter, stops
    the run at that time instead: the cases finished by then keep their results, the rest fail as not run."""
    job = {"mode": mode, "problem": prob.name, "device": device, "specs": specs,
           "submissions": {k: str(Path(v).resolve()) for k, v in submissions.items()}, **options}
    task_s = float(prob.timeouts_s.get(TIMEOUT_KEYS[mode], 0))
    limit, name = task_s * passes or None, f"the task's {task_s:g} s limit"
    if passes > 1:
        name += f" x {passes} passes"
    if limit and device == "cpu":
        limit *= CPU_TIMEOUT_FACTOR
        name += f" x {CPU_TIMEOUT_FACTOR:g} on the CPU"
    if budget_s is not None and (limit is None or budget_s < limit):
        return run_worker(job, progress, budget_s, BUDGET_LIMIT)
    return run_worker(job, progress, limit, name)


def _start(problem: str, submissions: dict[str, Path], device: str | None, harness: str | None,
           mode: str, log_path: Path | None) -> tuple[Problem, str, str]:
    prob = load_problem(problem)
    if log_path is not None:
        logs.require_appendable(log_path)
    for role, path in submissions.items():
        if role == "incumbent" and not Path(path).is_file():
            raise PopkitError(f"{path}: no such incumbent: `popkit promote {prob.name}` installs one, or pass "
                              f"--incumbent FILE (or --incumbent {REFERENCE_INCUMBENT}, the folder's ref_kernel)")
        require_submission_for(prob, Path(path), role)
    backend = resolve_backend(prob, harness, mode)
    device = resolve_device(device)
    require_device_for(prob, device, backend)
    # Where eval.py is, found before anything runs (--harness both: ours too), and what its files import.
    placed = task_folder.placed_sources(prob.harness.get("files") or [], task_folder.harness_folder(prob)) \
        if backend != "native" else {}
    for path in submissions.values():
        packages.require_installed(Path(path))
    packages.require_folder_installed(placed)
    return prob, device, backend


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored for the block (main thread only: elsewhere Python cannot set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


def interrupted(mode: str, problem: str, log_path: Path | None, logged: bool = False) -> Interrupted:
    """The one line for Ctrl-C during MODE: what stopped, and whether its record reached the log."""
    if logged:
        return Interrupted(f"interrupted: {mode} {problem} had finished; its record is in {log_path}")
    unchanged = f" ({log_path} is unchanged)" if log_path is not None else ""
    return Interrupted(f"interrupted: {mode} {problem} stopped before it finished; nothing was logged{unchanged}")


@contextlib.contextmanager
def interruptible(mode: str, problem: str, log_path: Path | None, outcome: list | None = None):
    """Ctrl-C in the block becomes Interrupted with its one line; OUTCOME (a list), when it holds a RunOutcome
    by then, says whether the record was logged. The worker and eval.py are killed on the way out (run_worker,
    harness._run_main); temporary run folders are removed; the log is written only by _finish, whole."""
    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt:
        logged = bool(outcome) and outcome[-1].logged
        raise interrupted(mode, problem, log_path, logged) from None


def _finish(outcome: RunOutcome, log_path: Path | None) -> RunOutcome:
    """Log the record (Ctrl-C waits for the one write, then says the record is there) and return the outcome;
    a write that fails (a full disk) leaves the outcome to be shown, with log_error saying why it is not logged."""
    if log_path is not None:
        written = False
        try:
            with deferred_interrupt():
                logs.append_record(outcome.record, log_path)
                written = True
        except KeyboardInterrupt:
            raise interrupted(outcome.record["mode"], outcome.record["problem"], log_path, written) from None
        except OSError as exc:
            outcome.log_error = (f"{log_path}: the record could not be appended ({exc.strerror or exc}): "
                                 "the run above is not logged")
            return outcome
        outcome.logged = True
    return outcome


def _interruptible_run(mode: str):
    """check, bench and diff: Ctrl-C ends them as Interrupted, whose line says that nothing was logged."""
    def wrap(func):
        signature = inspect.signature(func)

        @functools.wraps(func)
        def run(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            with interruptible(mode, bound.arguments["problem"], bound.arguments["log_path"]):
                return func(*args, **kwargs)
        return run
    return wrap


@_interruptible_run("check")
def check(problem: str, submission: Path, custom: list[str] = (), seeds: int = 0, device: str | None = None,
          progress=lambda text: None, log_path: Path | None = logs.DEFAULT_LOG, harness: str | None = None,
          robust: bool = False, budget_s: float | None = None) -> RunOutcome:
    """Every official test case (or the given ones), plus the robustness suite when asked, K extra seeds
    each; native gates, the folder's eval.py, or both (which must agree). budget_s: see _run_native."""
    prob, device, backend = _start(problem, {"candidate": submission}, device, harness, "check", log_path)
    _require_budget(budget_s, backend)
    specs, notes = select_specs(prob, "tests", custom, seeds if backend != "official" else 0, device, robust, backend)
    notes = notes + _require_seeded(prob, specs, seeds, backend)
    if backend == "official":
        runs = [official.run_eval(prob, submission, "test", specs, device, seed, progress)
                for seed in [None] + list(range(1, seeds + 1))]
        results = [r for run in runs for r in run.results()]
        outcome = make_outcome("check", prob, {"candidate": submission}, results, runs[0].env, device, backend,
                               notes + official.run_notes(runs), None)
        return _finish(outcome, log_path)
    info, results = _run_native("check", prob, {"candidate": submission}, specs, device, progress,
                                passes=(1 + seeds) * (2 if robust else 1), budget_s=budget_s)   # robust: a list more
    if backend == "both":
        run = official.run_eval(prob, submission, "test", specs, device, None, progress)
        results, disagreements = _agreement(results, run.results())
        notes = notes + official.run_notes([run]) + disagreements
    return _finish(_with_budget(make_outcome("check", prob, {"candidate": submission}, results, info, device,
                                             backend, notes, None), budget_s), log_path)


def _agreement(ours: list[dict], theirs: list[dict]) -> tuple[list[dict], list[str]]:
    """Our results with eval.py's status beside them; a case passes only when both pass."""
    merged, notes = [], []
    for mine, other in zip(ours, theirs):
        row = {**mine, "official": other["status"]}
        if other["status"] != mine["status"]:
            why = other.get("error") or other.get("message") or "no message"
            notes.append(f"eval.py and popkit disagree on {short_spec(mine['spec'])}: popkit {mine['status']}, "
                         f"eval.py {other['status']} ({why})")
            if mine["status"] == "pass":
                row.update(status="fail", error=f"eval.py: {why}")
        merged.append(row)
    return merged, notes


@_interruptible_run("bench")
def bench(problem: str, submission: Path, baseline: bool = False, custom: list[str] = (),
          device: str | None = None, progress=lambda text: None,
          log_path: Path | None = logs.DEFAULT_LOG, harness: str | None = None,
          fresh_baseline: bool = False, budget_s: float | None = None) -> RunOutcome:
    """Grader-style timing of every benchmark case (or the given ones), optionally with the baseline
    (a native problem's torch reference, or the folder's reference.ref_kernel) in the same run.

    A case's baseline comes from the log (checks/baselines.py: the --log file and logs/performance.jsonl)
    when an earlier passing bench timed it for the same case, GPU, torch and device, unless
    fresh_baseline; only the rest are timed."""
    prob, device, backend = _start(problem, {"candidate": submission}, device, harness, "bench", log_path)
    _refuse_cpu_timing(backend, device, custom, "bench")
    if baseline and backend == "official":
        require_reference_kernel(prob, "baseline")
    notes = [] if device.startswith("cuda") else ["no GPU: CPU timings say nothing about GPU speed"]
    specs, more = select_specs(prob, "ranked_benchmarks", custom, 0, device, False, backend)
    name = (official.BASELINE_NAME if backend == "official" else prob.native.BASELINE_NAME) if baseline else None
    logged = baselines.logged(_baseline_logs(log_path), prob.name, name) if baseline and not fresh_baseline else []
    if backend == "official":
        run = official.run_eval(prob, submission, "benchmark", specs, device, None, progress)
        results, runs = run.results(), [run]
        if baseline:
            runs += _official_baselines(prob, results, logged, run.env, device, progress)
        outcome = make_outcome("bench", prob, {"candidate": submission}, results, run.env, device, backend,
                               notes + more + official.run_notes(runs), name)
        return _finish(outcome, log_path)
    info, results = _run_native("bench", prob, {"candidate": submission}, specs, device, progress,
                                passes=2 if baseline else 1, budget_s=budget_s, baseline=baseline,
                                logged_baselines=logged)
    return _finish(_with_budget(_bounded_on_cpu(make_outcome("bench", prob, {"candidate": submission}, results, info,
                                                             device, backend, more, name), device), budget_s),
                   log_path)


def _baseline_logs(log_path: Path | None) -> list[Path]:
    """Where logged baselines are looked up: the run's --log file, and the project's log (a batch on a GPU
    host logs to a fresh file, but its copy of the tree carries logs/performance.jsonl)."""
    return [path for path in (log_path, logs.DEFAULT_LOG) if path is not None]


def _official_baselines(prob: Problem, results: list[dict], logged: list[dict], env: dict, device: str,
                        progress) -> list[official.EvalRun]:
    """Each result's baseline: a logged one where it matches, else from one eval.py run of the folder's
    ref_kernel on the remaining cases (none when every case was reused). Returns the runs made."""
    fresh = []
    for index, result in enumerate(results):
        entry = baselines.find(logged, result["spec"], env.get("gpu"), env.get("torch"), device)
        if entry is None:
            fresh.append(index)
        else:
            result.update(baselines.reused_fields(entry))
    if not fresh:
        progress("baseline: every case reused from the log; no eval.py run of the reference")
        return []
    with tempfile.TemporaryDirectory(prefix="popkit-baseline-") as tmp:
        base = official.run_eval(prob, official.write_baseline(Path(tmp)), "benchmark",
                                 [results[i]["spec"] for i in fresh], device, None, progress)
    for index, other in zip(fresh, base.results()):
        results[index].update(baselines.timed_fields(other.get("mean_us"), other.get("runs"), False))
    return [base]


def incumbent_of(text: str) -> Path | str:
    """--incumbent as typed: the word 'reference' alone is the folder's ref_kernel, anything else a file. Where
    the other reading is possible too (the word while a file of that name is here, or './reference' naming
    no file) the choice is refused rather than guessed."""
    if text == REFERENCE_INCUMBENT:
        if Path(text).is_file():
            raise PopkitError(f"--incumbent {text}: the word is the competition folder's ref_kernel, and ./{text} "
                              f"is also a file here: pass ./{text} for the file, or run from another folder for "
                              "the ref_kernel")
        return text
    if Path(text) == Path(REFERENCE_INCUMBENT) and not Path(text).is_file():
        raise PopkitError(f"--incumbent {text}: no such file (the word {REFERENCE_INCUMBENT} alone is the "
                          "competition folder's ref_kernel)")
    return Path(text)


@_interruptible_run("diff")
def diff(problem: str, submission: Path, incumbent: Path | str, rounds: int = 3, custom: list[str] = (),
         device: str | None = None, progress=lambda text: None,
         log_path: Path | None = logs.DEFAULT_LOG, harness: str | None = None,
         budget_s: float | None = None) -> RunOutcome:
    """Candidate against incumbent in alternating rounds; fails on a regression or a worse margin.
    An incumbent given as text is read by incumbent_of ("reference": the competition folder's own ref_kernel,
    through its eval.py); a Path is always a file."""
    _require_rounds(rounds)
    if isinstance(incumbent, str):
        incumbent = incumbent_of(incumbent)
    if incumbent == REFERENCE_INCUMBENT:
        _require_reference_run(load_problem(problem), harness, resolve_device(device))
        with tempfile.TemporaryDirectory(prefix="popkit-reference-") as tmp:
            return diff(problem, submission, official.write_baseline(Path(tmp)), rounds, custom, device, progress,
                        log_path, "official" if harness is None else harness, budget_s)
    submissions = {"candidate": submission, "incumbent": incumbent}
    prob, device, backend = _start(problem, submissions, device, harness, "diff", log_path)
    _require_budget(budget_s, backend)
    _refuse_cpu_timing(backend, device, custom, "diff")
    specs, notes = select_specs(prob, "ranked_benchmarks", custom, 0, device, False, backend)
    if backend == "official":
        results, runs = _official_diff(prob, submissions, specs, device, rounds, progress)
        outcome = make_outcome("diff", prob, submissions, results, runs[0].env, device, backend,
                               notes + official.run_notes(runs), None)
        return _finish(outcome, log_path)
    info, results = _run_native("diff", prob, submissions, specs, device, progress, passes=2 * rounds,
                                budget_s=budget_s, rounds=rounds)
    return _finish(_with_budget(_bounded_on_cpu(make_outcome("diff", prob, submissions, results, info, device, backend,
                                                             notes, None), device), budget_s), log_path)


def _with_budget(outcome: RunOutcome, budget_s: float | None) -> RunOutcome:
    """A run under --budget says so in its record (budget_s) and, where the budget cut it short, in a note."""
    if budget_s is None:
        return outcome
    outcome.record["budget_s"] = budget_s
    cases = outcome.record["cases"]
    unfinished = sum(cut_by(c, BUDGET_LIMIT) for c in cases)
    if unfinished:
        done = len(cases) - unfinished
        outcome.notes.append(f"--budget {budget_s:g} s ran out: {done} of {len(cases)} cases finished and keep "
                             "their results; the others are not run, so the run fails")
    return outcome


CPU_BOUNDED = "cpu_bounded_timing"      # a native bench or diff on the CPU: its timing loops' bound (timing.cpu_rule)


def _bounded_on_cpu(outcome: RunOutcome, device: str) -> RunOutcome:
    """A native bench or diff on the CPU timed each loop with timing.cpu_rule(), not the grader's rule: the record
    says so (CPU_BOUNDED: the repeats and seconds), and so does one line first among the notes."""
    if device.startswith("cuda"):
        return outcome
    outcome.record[CPU_BOUNDED] = {"max_repeats": timing.CPU_REPEATS, "wall_s": timing.CPU_WALL_S}
    outcome.notes.insert(0, f"no GPU: CPU timings say nothing about GPU speed; {timing.cpu_bound_text()}")
    return outcome


def _official_diff(prob: Problem, submissions: dict[str, Path], specs: list[dict], device: str, rounds: int,
                   progress) -> tuple[list[dict], list[official.EvalRun]]:
    """Alternating eval.py benchmark runs of the two files; per case, the verdict over the rounds' means."""
    runs: dict[str, list] = {"candidate": [], "incumbent": []}
    for index in range(rounds):
        for name in (("candidate", "incumbent") if index % 2 == 0 else ("incumbent", "candidate")):
            progress(f"round {index + 1}/{rounds}: {name}")
            runs[name].append(official.run_eval(prob, submissions[name], "benchmark", specs, device, None, progress))
    per_run = {name: [run.results() for run in group] for name, group in runs.items()}
    results = []
    for i, spec in enumerate(specs):
        cand = [r[i] for r in per_run["candidate"]]
        inc = [r[i] for r in per_run["incumbent"]]
        firsts = {name: next((r for r in side if r["status"] != "pass"), None)
                  for name, side in (("candidate", cand), ("incumbent", inc))}
        failed = [f"{name}: {r['error']}" for name, r in firsts.items() if r is not None]
        if failed:      # each side's first failure, named: the two files are run alike, so the table cannot tell
            results.append({"spec": spec, "status": "fail", "error": "; ".join(failed), "residuals": {}})
            continue
        cand_stats = timing.Stats.from_samples([r["mean_us"] * 1e3 for r in cand])
        inc_stats = timing.Stats.from_samples([r["mean_us"] * 1e3 for r in inc])
        verdict = verdicts.case_verdict(cand_stats, inc_stats)
        results.append({"spec": spec, "status": "fail" if verdict.regression else "pass",
                        "error": "slower than the incumbent" if verdict.regression else None, "residuals": {},
                        **cand_stats.as_us_dict(), **inc_stats.as_incumbent_dict(), "ratio": verdict.ratio,
                        "verdict": verdict.verdict})
    return results, runs["candidate"] + runs["incumbent"]


def _refuse_cpu_timing(backend: str, device: str, custom: list[str], verb: str) -> None:
    """Native timing on CPU takes minutes for numbers that say nothing about a GPU: only on chosen cases."""
    if backend == "native" and device == "cpu" and not custom:
        raise PopkitError(f"{verb} on CPU times the CPU path of every benchmark case (many minutes, and CPU "
                          f"timings say nothing about GPU speed): run it on a GPU, or pass --case SPEC to time "
                          f"chosen small cases here")
