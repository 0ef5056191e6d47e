"""Families built as profiles on a base draw, and mixed batches of those profiles.

A profile is `profile(draw, A0, cond) -> float32 (b, n, n)`: it transforms (or discards) the base
A0 = randn(b, n, n), which every such family draws first. A mixed batch draws A0, then one profile
per matrix (multinomial over float32 weights, repaired so a batch >= 2 has a dense matrix and a
non-dense one), then applies each profile, in the weights' order, to the sub-batch that drew it.
A family is `family(draw, b, n, cond) -> float32 (b, n, n)`.
"""
from __future__ import annotations

from typing import Callable

import torch

from checks.native.draw import Draw

Profile = Callable[[Draw, torch.Tensor, int], torch.Tensor]


def identity(A: torch.Tensor) -> torch.Tensor:
    return A


def choose_profiles(r: Draw, weights: dict[str, float], b: int) -> list[str]:
    """Profiles by weight; for b >= 2 at least one dense (the first name) and one other.

    The repair draws only when needed: no dense -> a uniform position becomes dense; all
    dense -> a uniform position gets a non-dense profile chosen uniformly (not by weight).
    """
    names = list(weights)
    picks = r.choice(list(weights.values()), b)
    if b >= 2:
        if 0 not in picks:
            picks[int(r.integers(0, b, 1))] = 0
        elif all(p == 0 for p in picks):
            pos = int(r.integers(0, b, 1))
            picks[pos] = int(r.integers(1, len(names), 1))
    return [names[p] for p in picks]


def profile_families(profiles: dict[str, Profile], weights: dict[str, float],
                     finish: Callable[[torch.Tensor], torch.Tensor] = identity) -> dict[str, Callable]:
    """One family per profile (draw A0, apply, finish) plus "mixed"; weights' first name is the dense one."""
    def apply(name: str, r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
        return finish(profiles[name](r, A, cond))

    def on_base(name: str) -> Callable:
        def family(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
            return apply(name, r, r.normal(b, n, n), cond)
        family.__doc__ = profiles[name].__doc__
        family.__name__ = profiles[name].__name__
        return family

    def mixed(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
        """Each matrix of A0 a random profile by weight (at least one dense and one not), each
        profile applied to its rows as one sub-batch."""
        A = r.normal(b, n, n)
        chosen = choose_profiles(r, weights, b)
        for name in weights:                 # a fixed order keeps the draws deterministic
            rows = torch.tensor([p == name for p in chosen], device=A.device)
            if bool(rows.any()):
                A[rows] = apply(name, r, A[rows], cond)
        return A

    return {**{name: on_base(name) for name in profiles}, "mixed": mixed}


def case_profiles(weights: dict[str, float], spec: dict, device="cpu") -> list[str]:
    """The profile of each matrix of a normalized spec's input: the case name unless mixed.

    A mixed case's profiles are the first draw after A0, so replaying them needs no profile work."""
    if spec["case"] != "mixed":
        return [spec["case"]] * spec["batch"]
    r = Draw(spec["seed"], device)
    r.normal(spec["batch"], spec["n"], spec["n"])
    return choose_profiles(r, weights, spec["batch"])
