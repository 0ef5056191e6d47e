"""Diff verdicts: is a candidate at least as good as the incumbent?

Pure functions over timing statistics (anything with `mean` and `err` in ns,
such as checks.timing.Stats) and gate residuals ({gate: [value, limit]}, as in
a performance.jsonl case record). A diff case passes (checks/worker.py) when it
did not regress in time and no gate's margin shrank by more than MARGIN_FACTOR;
being faster is reported, not required.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

NOISE_SIGMAS = 3.0  # differences within this many combined standard errors are noise
NOISE_FLOOR = 0.005  # ... and so are differences under 0.5% of the incumbent's mean
TOLERANCE = 0.02  # allowed slowdown, as a fraction of the incumbent's mean
SHORT_TOLERANCE = 0.04  # allowed slowdown for cases whose incumbent runs under SHORT_CASE_NS
SHORT_CASE_NS = 1e6
MARGIN_FACTOR = 2.0  # a gate regresses when its value / limit grows by more than this
TINY_MARGIN = 0.01  # values under this fraction of their limit never regress


class Timed(Protocol):
    mean: float
    err: float


@dataclass(frozen=True)
class CaseVerdict:
    ratio: float  # candidate mean / incumbent mean; under 1 is faster
    verdict: str  # "faster" | "slower" | "within noise"
    regression: bool
    tolerance: float  # the allowed slowdown that applied


def case_verdict(candidate: Timed, incumbent: Timed) -> CaseVerdict:
    """Compare one case's timings.

    The difference d = candidate.mean - incumbent.mean is "within noise" when
    |d| <= NOISE_SIGMAS * sqrt(candidate.err**2 + incumbent.err**2) or
    |d| < NOISE_FLOOR * incumbent.mean; otherwise the verdict is "faster" or
    "slower" by its sign. A regression is a slowdown that is both outside the
    noise and larger than the tolerance: TOLERANCE of the incumbent's mean, or
    SHORT_TOLERANCE when the incumbent runs under 1 ms.
    """
    if incumbent.mean <= 0:
        raise ValueError(f"incumbent mean must be positive, got {incumbent.mean}")
    diff = candidate.mean - incumbent.mean
    noise = NOISE_SIGMAS * math.hypot(candidate.err, incumbent.err)
    within_noise = abs(diff) <= noise or abs(diff) < NOISE_FLOOR * incumbent.mean
    verdict = "within noise" if within_noise else ("slower" if diff > 0 else "faster")
    tolerance = SHORT_TOLERANCE if incumbent.mean < SHORT_CASE_NS else TOLERANCE
    regression = not within_noise and diff > tolerance * incumbent.mean
    return CaseVerdict(candidate.mean / incumbent.mean, verdict, regression, tolerance)


def margin_regressions(
    candidate_residuals: dict[str, list[float]], incumbent_residuals: dict[str, list[float]]
) -> list[str]:
    """One message per gate (present in both) whose value / limit grew more than MARGIN_FACTOR-fold.

    Gates where both values are under TINY_MARGIN of their limits are exempt.
    """
    messages = []
    for gate, (value, limit) in candidate_residuals.items():
        if gate not in incumbent_residuals:
            continue
        old_value, old_limit = incumbent_residuals[gate]
        share, old_share = value / limit, old_value / old_limit
        if share < TINY_MARGIN and old_share < TINY_MARGIN:
            continue
        if share > MARGIN_FACTOR * old_share:
            messages.append(
                f"{gate}: {old_share:.1%} -> {share:.1%} of its limit "
                f"(more than {MARGIN_FACTOR:g}x worse)"
            )
    return messages
