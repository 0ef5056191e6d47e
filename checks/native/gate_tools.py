"""Shared pieces of the correctness gates: the report, L1 norms, structure checks, and a chunked
float64 driver for gates measured per matrix.

Every gate's value is scaled to the unit its limit is given in (e.g. n eps ||A||_1); ||X||_1 is the
max absolute column sum and eps = 2**-23. A per-matrix gate reports its worst matrix.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from popcorn.errors import ProblemError

EPS = 2.0 ** -23
CHUNK_ELEMENTS = 2 ** 24   # float64 elements per n x n work array: 128 MiB


@dataclass(frozen=True)
class Gate:
    name: str
    limit: float
    unit: str   # what the scaled value is measured in, for messages


@dataclass
class GateReport:
    passed: bool
    residuals: dict[str, list[float]] = field(default_factory=dict)   # gate -> [scaled value, limit]
    message: str | None = None                                         # the first failure, one line
    info: dict[str, float] = field(default_factory=dict)              # reported, not gated


class NonFinite(Exception):
    """A derived quantity (Q, Q^T A) of some matrix is not finite: args (what, matrix index)."""


# ---------------------------------------------------------------- norms and scaling

def l1(X: torch.Tensor) -> torch.Tensor:
    """Per-matrix L1 norm: the max absolute column sum."""
    return X.abs().sum(dim=-2).amax(dim=-1)


def scaled(residual: torch.Tensor, unit: torch.Tensor) -> torch.Tensor:
    """residual / unit; a zero unit (the zero matrix) allows only an exactly zero residual."""
    ok = unit > 0
    exact = torch.where(residual == 0, 0.0, math.inf)
    return torch.where(ok, residual / torch.where(ok, unit, 1.0), exact)


def orthogonality(Q: torch.Tensor) -> torch.Tensor:
    """||Q^T Q - I||_1 / (n eps) per matrix."""
    n = Q.shape[-1]
    eye = torch.eye(n, dtype=Q.dtype, device=Q.device)
    return l1(Q.mT @ Q - eye) / (n * EPS)


def nan_as_inf(v: torch.Tensor) -> torch.Tensor:
    """NaN is as bad as it gets."""
    return torch.where(v.isnan(), math.inf, v)


def first_bad(bad: torch.Tensor) -> int:
    return int(bad.nonzero()[0, 0])


def require_finite(X: torch.Tensor, what: str) -> None:
    bad = ~torch.isfinite(X).flatten(1).all(dim=1)
    if bad.any():
        raise NonFinite(what, first_bad(bad))


# ---------------------------------------------------------------- structure

def require_matrix_batch(A: torch.Tensor) -> None:
    if not isinstance(A, torch.Tensor) or A.dim() != 3 or A.shape[-1] != A.shape[-2]:
        shape = tuple(A.shape) if isinstance(A, torch.Tensor) else type(A).__name__
        raise ProblemError(f"the input must be batch x n x n, got {shape}")


def describe(output) -> str:
    """What a kernel returned, e.g. "a tuple of 2 (Tensor, int)" or "a value of type int" (no article before
    a type's name: "a int", "a EighResult")."""
    if isinstance(output, (tuple, list)):
        kind = "tuple" if isinstance(output, tuple) else "list"
        named = "" if type(output) in (tuple, list) else f" (type {type(output).__name__})"
        return f"a {kind}{named} of {len(output)} ({', '.join(type(x).__name__ for x in output)})"
    return f"a value of type {type(output).__name__}"


def tuple_error(output, names: tuple[str, ...]) -> str | None:
    """Unless output is a tuple (or tuple subclass) of len(names) tensors, the one-line defect."""
    if (not isinstance(output, tuple) or len(output) != len(names)
            or not all(isinstance(t, torch.Tensor) for t in output)):
        return (f"output: expected a tuple ({', '.join(names)}) of {len(names)} tensors, "
                f"got {describe(output)}")
    return None


def tensors_error(A: torch.Tensor, named: list[tuple[str, torch.Tensor, tuple]]) -> str | None:
    """The first defect of (name, tensor, expected shape) triples: shapes, then dtypes, devices, finiteness."""
    for name, t, shape in named:
        if tuple(t.shape) != shape:
            return f"shape: {name} is {tuple(t.shape)}, expected {shape}"
    for name, t, _ in named:
        if t.dtype != torch.float32:
            return f"dtype: {name} is {t.dtype}, expected torch.float32"
    for name, t, _ in named:
        if t.device != A.device:
            return f"device: {name} is on {t.device}, the input on {A.device}"
    for name, t, _ in named:
        bad = ~torch.isfinite(t).flatten(1).all(dim=1)
        if bad.any():
            return f"finite: {name} of matrix {first_bad(bad)} has non-finite entries"
    return None


# ---------------------------------------------------------------- the chunked driver

Measures = Callable[..., dict]   # (A, *outputs) chunk -> {gate: per-matrix values, diagnostic: (residual, ||A||_1)}


def matrix_vector_report(gates: tuple[Gate, ...], measures: Measures, A: torch.Tensor, output,
                         names: tuple[str, str]) -> GateReport:
    """A (batch x n x n, batch x n) output tuple: structure first (a tuple of exactly these tensors, exact
    shapes, float32, A's device, finite), then the gates, chunked over the batch."""
    require_matrix_batch(A)
    b, n = A.shape[0], A.shape[-1]
    defect = tuple_error(output, names) or tensors_error(A, list(zip(names, output, ((b, n, n), (b, n)))))
    if defect:
        return GateReport(passed=False, message=defect)
    return chunked_report(gates, measures, A, tuple(output))


def chunked_report(gates: tuple[Gate, ...], measures: Measures, A: torch.Tensor, outputs: tuple) -> GateReport:
    """Run measures over chunks of the batch (float64 work stays near CHUNK_ELEMENTS per array).

    Per-matrix values give each gate's worst matrix; (residual, ||A||_1) pairs are reported
    batch-wide as max residual / (n eps max ||A||_1), not gated. A NonFinite ends the check."""
    b, n = A.shape[0], A.shape[-1]
    chunk = max(1, CHUNK_ELEMENTS // (n * n))
    worst: dict[str, tuple[float, int]] = {}          # gate -> (worst scaled value, its matrix)
    batch_max: dict[str, tuple[float, float]] = {}    # diagnostic -> (max residual, max ||A||_1)
    for start in range(0, b, chunk):
        part = slice(start, start + chunk)
        try:
            values = measures(*(x[part] for x in (A, *outputs)))
        except NonFinite as e:
            what, index = e.args
            message = f"finite: {what} of matrix {start + index} has non-finite entries"
            return GateReport(False, _residuals(gates, worst), message)
        for name, v in values.items():
            if isinstance(v, tuple):
                residual, scale = (float(nan_as_inf(x).amax()) for x in v)
                old = batch_max.get(name, (0.0, 0.0))
                batch_max[name] = (max(old[0], residual), max(old[1], scale))
                continue
            v = nan_as_inf(v)
            i = int(v.argmax())
            value = float(v[i])
            if name not in worst or value > worst[name][0]:
                worst[name] = (value, start + i)

    failed = [g for g in gates if not worst[g.name][0] <= g.limit]
    message = None
    if failed:
        g = failed[0]
        value, index = worst[g.name]
        message = f"{g.name}: matrix {index} residual {value:.3g} > {g.limit:g} ({g.unit})"
    info = {name: float(scaled(torch.tensor(residual, dtype=torch.float64),
                              torch.tensor(n * EPS * scale, dtype=torch.float64)))
            for name, (residual, scale) in batch_max.items()}
    return GateReport(not failed, _residuals(gates, worst), message, info)


def _residuals(gates: tuple[Gate, ...], worst: dict[str, tuple[float, int]]) -> dict[str, list[float]]:
    return {g.name: [worst[g.name][0], float(g.limit)] for g in gates if g.name in worst}
