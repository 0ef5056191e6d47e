"""Grader-style timing of one benchmark case, and the helpers a diff needs.

The official harness (../shared/docs/problems.md, "How the official harness runs
a submission"; its eval.py) times a case like this: with the inputs generated
and each checked once, repeat { synchronize; clear L2 by writing 256 MiB;
record an event; call custom_kernel on every input in turn; record an event;
synchronize }, and take elapsed / len(inputs) as one sample (ns per call). The
outputs of every repeat are re-checked. `time_case` is that loop, `StopRule`
its stop rule, `CudaEventClock` its timed region; `PerfCounterClock` stands in
for it on a CPU. All times are in nanoseconds unless a name says otherwise.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import torch

L2_FLUSH_BYTES = 256 * 1024 * 1024
MIN_REPEATS = 3
# A slow call (a torch solver's host loop: seconds per call) gets a bounded rule, StopRule(slow_call_s=...).
SLOW_CALL_S = 1.0
SLOW_REPEATS = 3
SLOW_BUDGET_S = 5.0
# mode -> (max repeats, budget in seconds of mean * runs), as eval.py runs them.
MODE_LIMITS = {"benchmark": (200, 10.0), "leaderboard": (1000, 30.0)}
# On a CPU (--device cpu) the loop is there to try the verbs, never for evidence (CPU timings say nothing about a
# GPU): the grader's rule, which re-checks every repeat until 0.1% relative error or 120 s, took minutes on one tiny
# case there. cpu_rule() stops at CPU_REPEATS repeats or once CPU_WALL_S have passed, whichever comes first.
CPU_REPEATS = 3
CPU_WALL_S = 2.0


@dataclass(frozen=True)
class Stats:
    """What the harness reports for a case: runs and ns-per-call statistics."""

    runs: int
    mean: float
    std: float
    err: float
    best: float
    worst: float

    @classmethod
    def from_samples(cls, samples: Sequence[float]) -> Stats:
        """eval.py's calculate_stats: sample std (n - 1), 0 for one run; err = std / sqrt(runs)."""
        if not samples:
            raise ValueError("no samples")
        runs = len(samples)
        mean = sum(samples) / runs
        std = math.sqrt(sum((x - mean) ** 2 for x in samples) / (runs - 1)) if runs > 1 else 0.0
        return cls(runs, mean, std, std / math.sqrt(runs), float(min(samples)), float(max(samples)))

    def as_us_dict(self) -> dict:
        """The timing keys of a performance.jsonl case record (design.md, "Evidence")."""
        return {
            "mean_us": self.mean / 1e3,
            "err_us": self.err / 1e3,
            "best_us": self.best / 1e3,
            "worst_us": self.worst / 1e3,
            "runs": self.runs,
        }

    def as_incumbent_dict(self) -> dict:
        """A diff's incumbent beside the candidate's as_us_dict: its mean is the record's incumbent_us (a key
        older records have), its spread incumbent_err_us, incumbent_best_us and incumbent_worst_us."""
        return {f"incumbent_{key}" if key != "mean_us" else "incumbent_us": value
                for key, value in self.as_us_dict().items()}


@dataclass
class StopRule:
    """When the repeat loop stops; max_repeats and budget_s default to the mode's.

    As eval.py: stop at max_repeats; otherwise never before MIN_REPEATS samples
    and min_time_s of wall time, then stop once err/mean < rel_err, or
    mean * runs > budget_s, or wall time > wall_limit_s. (eval.py's 0.1 s floor
    is wall time since the first repeat began, not summed sample time.)

    slow_call_s (not eval.py's; for a baseline only): once every sample so far took longer
    than this, stop at SLOW_REPEATS samples or when they sum past SLOW_BUDGET_S, whichever
    comes first, so a baseline of seconds per call costs a few calls, not the full rule.

    cap_s (not eval.py's; cpu_rule only): stop once this much wall time has passed, whatever
    the number of samples (at least one).
    """

    mode: str = "benchmark"
    max_repeats: int | None = None
    budget_s: float | None = None
    wall_limit_s: float = 120.0
    min_time_s: float = 0.1
    rel_err: float = 0.001
    slow_call_s: float | None = None
    cap_s: float | None = None

    def __post_init__(self):
        if self.mode not in MODE_LIMITS:
            raise ValueError(f"unknown mode {self.mode!r} (known: {', '.join(MODE_LIMITS)})")
        max_repeats, budget_s = MODE_LIMITS[self.mode]
        if self.max_repeats is None:
            self.max_repeats = max_repeats
        if self.budget_s is None:
            self.budget_s = budget_s

    def done(self, samples_ns: Sequence[float], wall_elapsed_s: float) -> bool:
        if len(samples_ns) >= self.max_repeats:
            return True
        if self.cap_s is not None and samples_ns and wall_elapsed_s > self.cap_s:
            return True
        if samples_ns and self._slow(min(samples_ns)):
            return len(samples_ns) >= SLOW_REPEATS or sum(samples_ns) > SLOW_BUDGET_S * 1e9
        if len(samples_ns) < MIN_REPEATS or wall_elapsed_s <= self.min_time_s:
            return False
        stats = Stats.from_samples(samples_ns)
        return (
            stats.err / stats.mean < self.rel_err
            or stats.mean * stats.runs > self.budget_s * 1e9
            or wall_elapsed_s > self.wall_limit_s
        )

    def bounded(self, stats: Stats) -> bool:
        """Whether the slow-call bound decided when these samples stopped (every sample was slow)."""
        return self._slow(stats.best)

    def _slow(self, ns: float) -> bool:
        return self.slow_call_s is not None and ns > self.slow_call_s * 1e9


def cpu_rule() -> StopRule:
    """The bounded rule of a CPU run: CPU_REPEATS repeats or CPU_WALL_S of wall time (module comment above)."""
    return StopRule("benchmark", max_repeats=CPU_REPEATS, cap_s=CPU_WALL_S)


def cpu_bound_text() -> str:
    """What cpu_rule does, for a run's notes."""
    return (f"each timing loop stopped at {CPU_REPEATS} repeats or {CPU_WALL_S:g} s (not the grader's rule, which "
            "re-checks every repeat until 0.1% relative error or 120 s)")


class Clock(Protocol):
    def measure(self, run: Callable[[], object]) -> tuple[float, object]:
        """Time one call of run: (elapsed ns of the timed region, run's return value)."""


class CudaEventClock:
    """The official timed region: sync, L2 flush, event, run, event, sync.

    As the official clear_l2_cache, every repeat allocates a fresh 256 MiB int64 buffer,
    fills it with 42 and drops it again (the caching allocator keeps the block, so the kernel
    may reuse that memory while it is timed); the two events are new each repeat too.
    """

    def __init__(self, device: str | torch.device = "cuda"):
        self.device = torch.device(device)

    def measure(self, run: Callable[[], object]) -> tuple[float, object]:
        with torch.cuda.device(self.device):
            torch.cuda.synchronize()
            flush = torch.empty(L2_FLUSH_BYTES // 8, dtype=torch.int64, device=self.device)
            flush.fill_(42)
            del flush
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            result = run()
            end.record()
            torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e6, result


class PerfCounterClock:
    """Host wall time around the run; for CPU runs, where nothing is asynchronous."""

    def measure(self, run: Callable[[], object]) -> tuple[float, object]:
        start = time.perf_counter_ns()
        result = run()
        return float(time.perf_counter_ns() - start), result


def per_launch_us(launch: Callable[[], object], repeats: int = 50) -> float:
    """Microseconds a launch of one kernel (or call) takes back to back on the GPU: CUDA events around
    `repeats` launches after one warm-up, no L2 flush. For comparing kernel variants in one run (the
    kernel benches in scripts/), not for the grader's number (time_case)."""
    launch()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        launch()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / repeats


def time_case(
    custom_kernel: Callable[[object], object],
    inputs: Sequence[object],
    recheck: Callable[[list], None],
    clock: Clock,
    rule: StopRule,
    progress: Callable[[int, Stats], None] | None = None,
    wall: Callable[[], float] = time.perf_counter,
) -> Stats:
    """Repeat timed passes over all inputs until rule is done; recheck raises on a wrong output.

    The caller has already run and checked each input once (the warm-up). As in
    eval.py, the same input objects are passed every repeat (no copies), recheck
    sees all outputs of a repeat after the timed region, and the wall time the
    stop rule sees runs from just before the first repeat, rechecks included.
    progress, if given, gets the 0-based index of each finished repeat and the
    statistics so far.
    """
    if not inputs:
        raise ValueError("no inputs to time")
    samples: list[float] = []
    started = wall()
    while True:
        elapsed_ns, outputs = clock.measure(lambda: [custom_kernel(x) for x in inputs])
        samples.append(elapsed_ns / len(inputs))
        recheck(outputs)
        if progress is not None:
            progress(len(samples) - 1, Stats.from_samples(samples))
        if rule.done(samples, wall() - started):
            return Stats.from_samples(samples)


def alternate(candidates: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Rounds that measure every candidate once each, in an order that moves: round i rotates the
    candidates by i // 2 places and every odd round runs that order backwards.

    Two candidates alternate (A B, B A, B A, A B, ...); with more, every candidate takes every place
    twice in 2 n rounds, so neither drift over the run (clocks, temperature) nor what ran just
    before a candidate (a 3-round sweep whose second candidate always followed torch's call read
    15-40% slow at small n) lands on one candidate. Returns each candidate's samples, in round order.
    """
    if rounds < MIN_REPEATS:
        raise ValueError(f"need at least {MIN_REPEATS} rounds, got {rounds}")
    names = list(candidates)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = (index // 2) % len(names)
        order = names[shift:] + names[:shift]
        for name in order if index % 2 == 0 else reversed(order):
            samples[name].append(candidates[name]())
    return samples
