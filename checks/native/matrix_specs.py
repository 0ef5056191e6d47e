"""Case specs of the batched square-matrix problems: {batch, n, cond, seed, case}.

Validation with the default family filled in, one case's input from a family table, the grader's
benchmark inputs of a case, and the robustness suite (sizes the official lists never show).
"""
from __future__ import annotations

from typing import Callable

import torch

from checks.native import profiles
from checks.native.draw import F32, Draw
from popcorn.errors import ProblemError

SPEC_KEYS = ("batch", "n", "cond", "seed", "case")   # in the order the official cases file writes them
WHAT_A_CASE_TAKES = ("(a case takes batch, n, cond and seed, and optionally case, e.g. "
                     "'batch: 4; n: 64; cond: 1; seed: 7; case: dense')")
BENCH_BYTES = 256 * 2 ** 20                          # the grader's benchmark input budget
# A case seed fits 64 signed bits: torch's generator takes -2^63 .. 2^64 - 1, and a benchmark input's seed is
# up to 42 x 50 above the case's; past that every input failed, case by case, in 'Overflow when unpacking'.
SEED_MIN, SEED_MAX = -2 ** 63, 2 ** 63 - 1
MAX_BENCH_INPUTS = 50

# The robustness suite straddles every power of two (where routes switch: one-CTA kernels, panel
# widths, shared-memory limits); batches of 1 and 3 check that nothing assumes a batch of 2 or more.
SMALL_SIZES = (1, 2, 3, 5, 8, 16, 17, 31, 32, 33, 63, 64, 65)
LARGE_SIZES = (100, 127, 129, 255, 257, 511, 513, 1023, 1025, 1537, 2047, 2049)
SEED_BASE = 910_000


def normalize_spec(spec: dict, default_case: str) -> dict:
    """Check a spec's keys and types; fill in the default case family."""
    if not isinstance(spec, dict):
        raise ProblemError(f"a case spec is a mapping, got {spec!r}")
    unknown = set(spec) - set(SPEC_KEYS)
    if unknown:
        raise ProblemError(f"unknown key(s) {sorted(unknown)} in case spec {spec} {WHAT_A_CASE_TAKES}")
    missing = [key for key in SPEC_KEYS[:4] if key not in spec]
    if missing:
        raise ProblemError(f"case spec {spec} lacks {', '.join(map(repr, missing))} {WHAT_A_CASE_TAKES}")
    out = {}
    for key in SPEC_KEYS[:4]:
        try:
            out[key] = int(spec[key])
        except (TypeError, ValueError):
            raise ProblemError(f"case spec {spec}: {key} must be an integer") from None
    if out["batch"] < 1 or out["n"] < 1:
        raise ProblemError(f"case spec {spec}: batch and n must be >= 1")
    if out["cond"] < 0:
        raise ProblemError(f"case spec {spec}: cond must be >= 0")
    if not SEED_MIN <= out["seed"] <= SEED_MAX:
        raise ProblemError(f"case spec {spec}: seed must fit 64 signed bits ({SEED_MIN} .. {SEED_MAX})")
    out["case"] = str(spec.get("case", default_case))
    return out


def family_of(families: dict[str, Callable], case: str, problem: str) -> Callable:
    if case not in families:
        raise ProblemError(f"unknown {problem} case family {case!r} (known: {', '.join(families)})")
    return families[case]


def generate_case(families: dict[str, Callable], spec: dict, device, problem: str) -> torch.Tensor:
    """The contiguous float32 input of a normalized spec: its family on a Draw seeded with its seed."""
    family = family_of(families, spec["case"], problem)
    A = family(Draw(spec["seed"], device), spec["batch"], spec["n"], spec["cond"])
    return A.to(F32).contiguous()


def benchmark_count(spec: dict) -> int:
    """How many inputs the grader times per case: 256 MiB of float32 input, 1 .. 50."""
    return max(1, min(MAX_BENCH_INPUTS, BENCH_BYTES // (4 * spec["batch"] * spec["n"] ** 2)))


def benchmark_specs(spec: dict, first: int) -> list[dict]:
    """The specs of a case's benchmark inputs: input i has seed spec seed + 42 (first + i).

    first is 1 where eval.py adds 42 before each generation, 0 where it adds it after."""
    return [{**spec, "seed": spec["seed"] + 42 * (first + i)} for i in range(benchmark_count(spec))]


def robustness_specs(families: list[str]) -> list[dict]:
    """Every family at each small size (batch 3), one family per large size in turn (batch 1 or 3)."""
    specs = [{"batch": 3, "n": n, "cond": 1, "case": name} for n in SMALL_SIZES for name in families]
    specs += [{"batch": 1 + 2 * (i % 2), "n": n, "cond": 1, "case": families[i % len(families)]}
              for i, n in enumerate(LARGE_SIZES)]
    return [{**spec, "seed": SEED_BASE + i} for i, spec in enumerate(specs)]


class MatrixCases:
    """The case half of a matrix problem's native interface, from its family table: a module sets
    `normalize_spec, families, generate, benchmark_inputs, robustness_specs` from one of these."""

    def __init__(self, problem: str, families: dict[str, Callable], default_case: str, bench_seed_first: int,
                 mixed_weights: dict[str, int] | None = None):
        self.problem, self.table = problem, families
        self.default_case, self.bench_seed_first = default_case, bench_seed_first
        self.mixed_weights = mixed_weights

    def normalize_spec(self, spec: dict) -> dict:
        return normalize_spec(spec, self.default_case)

    def families(self) -> list[str]:
        return list(self.table)

    def generate(self, spec: dict, device="cpu") -> torch.Tensor:
        """The contiguous batch x n x n float32 input of one case; deterministic per spec and device."""
        return generate_case(self.table, self.normalize_spec(spec), device, self.problem)

    def benchmark_inputs(self, spec: dict, device="cpu") -> list[torch.Tensor]:
        """The grader's benchmark inputs of a case (seeds as benchmark_specs says)."""
        return [self.generate(s, device) for s in benchmark_specs(self.normalize_spec(spec), self.bench_seed_first)]

    def robustness_specs(self) -> list[dict]:
        return robustness_specs(self.families())

    def mixed_profiles(self, spec: dict, device="cpu") -> list[str]:
        """The profile of each matrix of generate(spec, device): the case name unless mixed."""
        spec = self.normalize_spec(spec)
        family_of(self.table, spec["case"], self.problem)
        return profiles.case_profiles(self.mixed_weights, spec, device)
