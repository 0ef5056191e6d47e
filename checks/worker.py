"""The worker process: imports submission files once and runs cases the way the grader does.

It runs in a freshly spawned process (multiprocessing 'spawn'), so a crash,
a CUDA error or a leaked global cannot touch the caller. It sends one message
per event through a pipe: ("start", info), ("progress", text), ("case", result),
("done", None), ("import_failed", text) or ("error", text). checks/runner.py is the other end.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import random
import sys
import time
import traceback

import torch

from checks import baselines, timing, verdicts
from checks.native import native_checker
from checks.native.gate_tools import GateReport
from checks.problems import short_spec
from popcorn.errors import ProblemError
from popcorn.evidence.counters import COUNTERS, NOT_COUNTS, route_counts


def checker(problem: str):
    """The problem's native checker module (generators, gates, baseline)."""
    module = native_checker(problem)
    if module is None:
        raise ProblemError(f"{problem} has no native checker (checks/native/{problem}.py)")
    return module


def import_submission(path: str, module_name: str):
    """Import a submission file as a module (the grader does `from submission import custom_kernel`).
    The loader is named: the grader saves any file as submission.py, so a name without .py runs too."""
    loader = importlib.machinery.SourceFileLoader(module_name, path)
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


class ImportFailed(Exception):
    """A submission that could not be imported: the text names the file and its error."""


def import_each(submissions: dict[str, str]) -> dict:
    """Each submission imported once, as the grader does; one that raises or exits while it is imported ends the
    run as an ImportFailed that names it (a diff imports two, and the line named both files)."""
    modules = {}
    for name, path in submissions.items():
        try:
            modules[name] = import_submission(path, f"popkit_{name}")
        except (Exception, SystemExit) as exc:      # sys.exit() at import read 'worker died (exit code 0)'
            role = f" (the {name})" if len(submissions) > 1 else ""
            raise ImportFailed(f"{path}{role}: it fails at import: {error_line(exc)}") from exc
    return modules


def environment(device: str) -> dict:
    cuda = device.startswith("cuda")
    return {"gpu": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
            "cuda": torch.version.cuda if cuda else None}


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def check_once(problem: str, kernel, A: torch.Tensor) -> GateReport:
    """Call the kernel on a copy of A (so an in-place change cannot fool the gates) and check it."""
    output = kernel(A.clone())
    return checker(problem).check_output(A, output)


def run_check_case(problem, kernel, spec, device) -> dict:
    A = checker(problem).generate(spec, device)
    report = check_once(problem, kernel, A)
    return {"status": "pass" if report.passed else "fail", "error": report.message,
            "residuals": report.residuals, "info": report.info}


class GateFailed(AssertionError):
    """A timed input failed the gates: the text names the input among the case's and the gate's value and limit."""


def which_input(index: int, count: int) -> str:
    """'input 3 of 50: ' among a case's several benchmark inputs (each of its own seed), '' for the only one:
    'matrix 0' alone did not say which input of the case held it."""
    return f"input {index + 1} of {count}: " if count > 1 else ""


def recheck_all(problem, references):
    """A recheck against pristine copies of the inputs (eval.py's check_copy), so an in-place
    change of an input by the kernel cannot make its own output look right."""
    def recheck(outputs):
        for index, (A, out) in enumerate(zip(references, outputs)):
            report = checker(problem).check_output(A, out)
            if not report.passed:
                raise GateFailed(f"re-check failed: {which_input(index, len(references))}{report.message}")
    return recheck


def time_kernel(problem, kernel, inputs, device, rule, send, label, recheck=True):
    """Grader-style timing on prepared inputs: run and check each input once, then the repeat loop.

    As eval.py: pristine copies of the inputs are taken first; the warm-up calls the kernel on a
    fresh copy of every input, all calls before any check (outputs that share storage across
    calls are caught); the timed loop calls it on the inputs themselves and, unless
    recheck=False (the torch baseline), re-checks every repeat against the pristine copies.
    Returns (the first input's gate report, Stats)."""
    references = [A.clone() for A in inputs]
    outputs = [kernel(A.clone()) for A in inputs]
    reports = [checker(problem).check_output(A, out) for A, out in zip(references, outputs)]
    del outputs
    failed = [(index, r) for index, r in enumerate(reports) if not r.passed]
    if failed:
        index, report = failed[0]
        raise GateFailed(which_input(index, len(reports)) + report.message)
    sync(device)
    clock = timing.CudaEventClock(device) if device.startswith("cuda") else timing.PerfCounterClock()

    def progress(i, stats):
        if i % 10 == 0:
            send(("progress", f"{label}: repeat {i + 1}, mean {stats.mean / 1e3:.1f} us"))
    rechecker = recheck_all(problem, references) if recheck else (lambda outputs: None)
    return reports[0], timing.time_case(kernel, inputs, rechecker, clock, rule, progress)


WARMUP_BUDGET_S = 0.1   # eval.py's benchmark mode: one untimed run of the first case, 0.1 s budget
WARMUP_REPEATS = 200    # ... and at most 200 repeats, unless the checker says otherwise (WARMUP_REPEATS)
DIFF_RULE = {"budget_s": 1.0, "max_repeats": 50}     # each side's timing loop in one round of a diff


def stop_rule(device: str, **grader) -> timing.StopRule:
    """On a GPU, the grader's benchmark rule with GRADER's changes (StopRule's fields); on the CPU, where timings
    only try the verbs, timing.cpu_rule()'s few repeats."""
    return timing.StopRule("benchmark", **grader) if device.startswith("cuda") else timing.cpu_rule()


def warm_up_rule(problem: str, device: str) -> timing.StopRule:
    """The warm-up's stop rule: the grader's with a 0.1 s budget and the repeats of the problem's eval.py (a
    native checker's WARMUP_REPEATS where its eval.py warms up for fewer than the usual 200)."""
    repeats = getattr(checker(problem), "WARMUP_REPEATS", WARMUP_REPEATS)
    return stop_rule(device, budget_s=WARMUP_BUDGET_S, max_repeats=repeats)


def seed_like_the_grader(problem: str) -> None:
    """The global random state a submission starts from. Most problems' eval.py run every case in a spawned pool
    worker, which keeps the libraries' default seeds (as this spawned worker does: nothing to do); one that runs
    cases in its own process after seeding random, numpy and torch (POPCORN_SEED or 42) states that seed as its
    native checker's GLOBAL_SEED (--seeds runs keep it: the grader would seed each run's salt)."""
    seed = getattr(checker(problem), "GLOBAL_SEED", None)
    if seed is None:
        return
    random.seed(seed)
    try:
        import numpy
    except ImportError:       # a submission cannot use numpy's random state without numpy either
        pass
    else:
        numpy.random.seed(seed)
    torch.manual_seed(seed)   # every device's default generator too


def warm_up(problem, kernel, spec, device) -> None:
    """eval.py's benchmark-mode warm-up: the first case once through the timing loop, result ignored."""
    try:
        inputs = checker(problem).benchmark_inputs(spec, device)
        rule = warm_up_rule(problem, device)
        time_kernel(problem, kernel, inputs, device, rule, lambda message: None, "warm-up", recheck=False)
    except Exception:   # the timed run of the same case reports any failure
        pass
    sync(device)


def run_bench_case(problem, kernel, spec, device, baseline, send, reuse: dict | None = None) -> dict:
    """Grader-style timing of the kernel; with baseline, also the checker's baseline on the same inputs.

    reuse (checks/baselines.py: a logged baseline of this case, GPU and torch) stands in for timing
    the baseline again. A fresh baseline keeps the grader's rule unless its calls take seconds
    (timing.StopRule's slow_call_s bound); the kernel's own timing always keeps the full rule (on a GPU: the CPU
    bounds both, stop_rule)."""
    inputs = checker(problem).benchmark_inputs(spec, device)
    first, stats = time_kernel(problem, kernel, inputs, device, stop_rule(device), send, short_spec(spec))
    result = {"status": "pass", "error": None, "residuals": first.residuals, **stats.as_us_dict(),
              "baseline_us": None}
    if baseline and reuse is not None:
        send(("progress", f"{short_spec(spec)} baseline: {reuse['baseline_us']:,.1f} us, logged at {reuse['time']}"))
        result.update(baselines.reused_fields(reuse))
    elif baseline:
        base, bounded = time_baseline(problem, inputs, device, send, short_spec(spec))
        result.update(baselines.timed_fields(base.mean / 1e3, base.runs, bounded))
    return result


def time_baseline(problem, inputs, device, send, label) -> tuple[timing.Stats, bool]:
    """The checker's torch baseline on a case's inputs, as bench times it: no re-check, the grader's rule bounded
    for calls of seconds (slow_call_s). Returns its Stats and whether that bound decided when it stopped.
    scripts/sweep_route.py --baseline calls it too."""
    native = checker(problem)
    rule = stop_rule(device, slow_call_s=timing.SLOW_CALL_S)
    _, stats = time_kernel(problem, native.baseline, inputs, device, rule, send, f"{label} {native.BASELINE_NAME}",
                           recheck=False)
    return stats, rule.bounded(stats)


class SideFailed(Exception):
    """One side of a diff failed a case; its text names the side (candidate or incumbent) and the error."""


def error_line(exc: BaseException) -> str:
    """An error in one line: the exception's type and its text's first line (a SideFailed's text already says
    both; a GateFailed's is the gate's own line, as a check's). Where a later line names the cause in the
    compilers' form "...: error: ..." and the first does not (a CUDA compile failure: torch's "Error building
    extension 'x': [1/2] nvcc ..." line first, nvcc's "u3.cu(12): error: ..." further down), that line is
    added, so the cause is not cut off."""
    text = str(exc) if isinstance(exc, (SideFailed, GateFailed)) else f"{type(exc).__name__}: {exc}"
    lines = [line.strip() for line in text.splitlines() if line.strip()] or [""]
    cause = next((line for line in lines[1:] if "error:" in line.lower()), None)
    if cause is not None and "error:" not in lines[0].split(": ", 1)[-1].lower():
        return f"{lines[0][:200]} ... {cause[:300]}"
    return lines[0][:500]


def run_diff_case(problem, kernels, spec, device, rounds, send) -> dict:
    """Candidate vs incumbent in alternating rounds of grader-style timing, on the same inputs."""
    inputs = checker(problem).benchmark_inputs(spec, device)
    reports, samples = time_rounds(problem, kernels, inputs, device, rounds, send, short_spec(spec))
    cand = timing.Stats.from_samples(samples["candidate"])
    inc = timing.Stats.from_samples(samples["incumbent"])
    verdict = verdicts.case_verdict(cand, inc)
    margins = verdicts.margin_regressions(reports["candidate"].residuals, reports["incumbent"].residuals)
    passed = all(r.passed for r in reports.values())
    return {"status": "pass" if passed and not margins and not verdict.regression else "fail",
            "error": "; ".join([f"{name}: {r.message}" for name, r in reports.items() if r.message] + margins) or None,
            "residuals": reports["candidate"].residuals, "incumbent_residuals": reports["incumbent"].residuals,
            **cand.as_us_dict(), **inc.as_incumbent_dict(), "ratio": verdict.ratio,
            "verdict": verdict.verdict, "regression": verdict.regression, "margin_regressions": margins}


def time_rounds(problem, kernels: dict, inputs, device, rounds, send, label,
                before=lambda name: None, failures: dict | None = None) -> tuple[dict, dict[str, list[float]]]:
    """A diff's timing of one case, for any number of kernels: ROUNDS rounds in the order timing.alternate moves,
    each kernel's sample in a round the mean ns a call of one grader-style loop (time_kernel under DIFF_RULE) on
    the same INPUTS. Returns each kernel's gate report (its last round's, first input) and its samples.

    BEFORE(name) runs just before each of name's loops, outside every timed region (scripts/sweep_route.py sets
    a variant's route globals there). A kernel that raises or fails a gate ends the rounds as SideFailed naming
    it (diff: the case fails), unless FAILURES is a dict: then its error line goes there under its name and it
    sits out the later rounds while the others go on (the sweep: one variant's failure costs only its cell)."""
    reports, samples = {}, {name: [] for name in kernels}
    rule = stop_rule(device, **DIFF_RULE)

    def measure(name):
        def run():
            if failures is not None and name in failures:
                return None
            before(name)
            round_label = f"{label} {name} round {len(samples[name]) + 1}/{rounds}"
            try:
                reports[name], stats = time_kernel(problem, kernels[name], inputs, device, rule, send, round_label)
            except Exception as exc:
                if failures is None:
                    raise SideFailed(f"{name}: {error_line(exc)}") from exc
                failures[name] = error_line(exc)
                return None
            samples[name].append(stats.mean)
            return stats.mean
        return run
    timing.alternate({name: measure(name) for name in kernels}, rounds)
    return reports, samples


class RouteCounters:
    """A submission's own counts, read around each case: a module may define COUNTERS, a dict of str -> int that
    its route increments as it runs (e.g. how many calls took a fast path and how many results its fallback re-did).

    A case's result gets each module's increase over the case's own calls ("counters"; a diff's incumbent's
    "incumbent_counters", named as residuals and incumbent_residuals): check's call; bench's first call on each
    input (checked) and every timed repeat; in a diff, those of every round, each side its own. Not bench's
    warm-up on the first case, which runs before any case, nor the torch baseline (not the submission). A case
    that fails keeps the calls it made. A module without the dict adds nothing; one whose dict is not of
    str -> int (popcorn/evidence/counters.py: a bool is no count) is named once in a progress line and left out
    for the rest of the run."""

    def __init__(self, modules: dict, send):
        self.modules = {name: module for name, module in modules.items() if hasattr(module, COUNTERS)}
        self.send = send

    def read(self) -> dict[str, dict[str, int]]:
        """A copy of each module's counts now."""
        return {name: dict(counts) for name in list(self.modules) if (counts := self._counts(name)) is not None}

    def since(self, before: dict[str, dict[str, int]]) -> dict:
        """The case result's fields: each module's increase since BEFORE (read()), in its dict's order."""
        fields = {}
        for name, start in before.items():
            counts = self._counts(name)
            if counts is not None:
                key = "counters" if name == "candidate" else f"{name}_counters"
                fields[key] = {counter: value - start.get(counter, 0) for counter, value in counts.items()}
        return fields

    def _counts(self, name: str) -> dict | None:
        """NAME's dict when it is one of str -> int; else None, and the module is dropped with one line."""
        if name not in self.modules:
            return None
        module = self.modules[name]
        counts = route_counts(getattr(module, COUNTERS))
        if counts is not None:
            return counts
        del self.modules[name]
        self.send(("progress", f"{module.__file__} (the {name}): its {COUNTERS} is {NOT_COUNTS}; "
                               "its counters are left out of this run"))
        return None


def main(conn, job: dict) -> None:
    """Entry point in the spawned process. job: mode, problem, device, submissions{name: path}, specs, options
    (bench: baseline, and logged_baselines, the entries of checks/baselines.py it may reuse)."""
    send = conn.send
    try:
        problem, device, mode = job["problem"], job["device"], job["mode"]
        seed_like_the_grader(problem)    # before the import, as eval.py seeds before importing the submission
        start = time.perf_counter()
        modules = import_each(job["submissions"])
        sync(device)
        compile_s = time.perf_counter() - start
        env = environment(device)
        send(("start", {**env, "compile_s": compile_s}))
        kernels = {name: m.custom_kernel for name, m in modules.items()}
        if mode == "bench" and job["specs"]:
            send(("progress", f"warm-up: {short_spec(job['specs'][0])}"))
            warm_up(problem, kernels["candidate"], job["specs"][0], device)
        counters = RouteCounters(modules, send)
        for index, spec in enumerate(job["specs"]):
            send(("progress", f"case {index + 1}/{len(job['specs'])}: {short_spec(spec)}"))
            before = counters.read()
            try:
                if mode == "check":
                    result = run_check_case(problem, kernels["candidate"], spec, device)
                elif mode == "bench":
                    reuse = baselines.find(job.get("logged_baselines", []), spec, env["gpu"], env["torch"], device)
                    result = run_bench_case(problem, kernels["candidate"], spec, device,
                                            job.get("baseline", False), send, reuse)
                else:
                    result = run_diff_case(problem, kernels, spec, device, job.get("rounds", 3), send)
            except Exception as exc:  # one case's failure is reported, the next case still runs
                result = {"status": "fail", "error": error_line(exc), "residuals": {}}
                send(("case", {"spec": spec, **result, **counters.since(before)}))
                sync(device)          # a sticky CUDA error raises here and ends the worker
                continue
            send(("case", {"spec": spec, **result, **counters.since(before)}))
        send(("done", None))
    except ImportFailed as exc:
        send(("import_failed", str(exc)))
    except Exception:
        send(("error", traceback.format_exc(limit=6)))
    finally:
        conn.close()
