"""The official correctness gates of qr_v2 and eigh, at their exact tolerances.

check_output(problem, A, output) first checks the output's structure (a tuple of two tensors,
exact shapes, float32, A's device, finite), then computes every gate in float64 on float64 copies,
on A's device, in chunks over the batch. As the official checker does, qr_v2's Q is materialized
by householder_product from the float32 (H, tau) as returned, and only then widened to float64.
Each gate's value is scaled to the unit its limit is given in (docs/problems.md), e.g.
factor = ||R - Q^T A||_1 / (n eps ||A||_1) <= 20; per-matrix gates report the worst matrix.
||X||_1 is the max absolute column sum, eps = 2**-23. The reported-only qr diagnostics (leakage,
reconstruction) are batch-wide: max residual / (n eps max ||A||_1). See docs/harness-agreement.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from checks.problems import ProblemError

EPS = 2.0 ** -23
CHUNK_ELEMENTS = 2 ** 24   # float64 elements per n x n work array: 128 MiB


@dataclass(frozen=True)
class Gate:
    name: str
    limit: float
    unit: str   # what the scaled value is measured in, for messages


GATES: dict[str, tuple[Gate, ...]] = {
    "qr_v2": (Gate("factor", 20, "n eps ||A||_1"),
              Gate("orthogonality", 100, "n eps")),
    "eigh": (Gate("sorted", 100, "n eps max(1, max|L|)"),
             Gate("eigen_equation", 200, "n eps ||A||_1"),
             Gate("orthogonality", 100, "n eps"),
             Gate("reconstruction", 400, "n eps ||A||_1")),
}
OUTPUT_NAMES = {"qr_v2": ("H", "tau"), "eigh": ("Q", "L")}


@dataclass
class GateReport:
    passed: bool
    residuals: dict[str, list[float]] = field(default_factory=dict)   # gate -> [scaled value, limit]
    message: str | None = None                                         # the first failure, one line
    info: dict[str, float] = field(default_factory=dict)              # reported, not gated


class _NonFinite(Exception):
    """A derived quantity (Q, Q^T A) of some matrix is not finite."""


# ---------------------------------------------------------------- norms and scaling

def _l1(X: torch.Tensor) -> torch.Tensor:
    """Per-matrix L1 norm: the max absolute column sum."""
    return X.abs().sum(dim=-2).amax(dim=-1)


def _scaled(residual: torch.Tensor, unit: torch.Tensor) -> torch.Tensor:
    """residual / unit; a zero unit (the zero matrix) allows only an exactly zero residual."""
    ok = unit > 0
    exact = torch.where(residual == 0, 0.0, math.inf)
    return torch.where(ok, residual / torch.where(ok, unit, 1.0), exact)


def _orthogonality(Q: torch.Tensor) -> torch.Tensor:
    n = Q.shape[-1]
    eye = torch.eye(n, dtype=Q.dtype, device=Q.device)
    return _l1(Q.mT @ Q - eye) / (n * EPS)


def _first_bad(bad: torch.Tensor) -> int:
    return int(bad.nonzero()[0, 0])


def _require_finite(X: torch.Tensor, what: str) -> None:
    bad = ~torch.isfinite(X).flatten(1).all(dim=1)
    if bad.any():
        raise _NonFinite(what, _first_bad(bad))


# ---------------------------------------------------------------- per-problem measures (float64)

def _qr_measures(A: torch.Tensor, H: torch.Tensor, tau: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-matrix scaled residuals of a compact QR (H, tau) of A; the inputs are as submitted (float32).

    Q = householder_product(H, tau) is formed in the submitted precision, then widened; the
    diagnostics come back as (residual, ||A||_1) pairs for check_output's batch-wide scaling.
    """
    n = A.shape[-1]
    Q = torch.linalg.householder_product(H, tau)
    _require_finite(Q, "Q")
    A, Q, R = A.double(), Q.double(), torch.triu(H).double()
    QtA = Q.mT @ A
    _require_finite(QtA, "Q^T A")
    norm_a = _l1(A)
    return {
        "factor": _scaled(_l1(R - QtA), n * EPS * norm_a),
        "orthogonality": _orthogonality(Q),
        "leakage": (_l1(torch.tril(QtA, -1)), norm_a),      # Q^T A below the diagonal
        "reconstruction": (_l1(Q @ R - A), norm_a),
    }


def _eigh_measures(A: torch.Tensor, Q: torch.Tensor, L: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-matrix scaled residuals of an eigendecomposition (Q, L) of A (widened to float64 here)."""
    A, Q, L = A.double(), Q.double(), L.double()
    n = A.shape[-1]
    if n > 1:
        drop = (L[:, :-1] - L[:, 1:]).amax(dim=-1).clamp(min=0)   # the largest descent
    else:
        drop = torch.zeros(L.shape[0], dtype=L.dtype, device=L.device)
    QL = Q * L[:, None, :]
    unit = n * EPS * _l1(A)
    return {
        "sorted": drop / (n * EPS * L.abs().amax(dim=-1).clamp(min=1)),
        "eigen_equation": _scaled(_l1(A @ Q - QL), unit),
        "orthogonality": _orthogonality(Q),
        "reconstruction": _scaled(_l1(QL @ Q.mT - A), unit),
    }


_MEASURES = {"qr_v2": _qr_measures, "eigh": _eigh_measures}


# ---------------------------------------------------------------- structure

def _describe(output) -> str:
    if isinstance(output, (tuple, list)):
        return f"a {type(output).__name__} of {len(output)} ({', '.join(type(x).__name__ for x in output)})"
    return f"a {type(output).__name__}"


def _structure_error(problem: str, A: torch.Tensor, output) -> str | None:
    """The first structural defect of output, or None."""
    names = OUTPUT_NAMES[problem]
    if (not isinstance(output, tuple) or len(output) != 2
            or not all(isinstance(t, torch.Tensor) for t in output)):
        return f"output: expected a tuple ({', '.join(names)}) of 2 tensors, got {_describe(output)}"
    b, n = A.shape[0], A.shape[-1]
    for name, t, shape in zip(names, output, ((b, n, n), (b, n))):
        if tuple(t.shape) != shape:
            return f"shape: {name} is {tuple(t.shape)}, expected {shape}"
    for name, t in zip(names, output):
        if t.dtype != torch.float32:
            return f"dtype: {name} is {t.dtype}, expected torch.float32"
    for name, t in zip(names, output):
        if t.device != A.device:
            return f"device: {name} is on {t.device}, the input on {A.device}"
    for name, t in zip(names, output):
        bad = ~torch.isfinite(t).flatten(1).all(dim=1)
        if bad.any():
            return f"finite: {name} of matrix {_first_bad(bad)} has non-finite entries"
    return None


# ---------------------------------------------------------------- the gate check

def check_output(problem: str, A: torch.Tensor, output) -> GateReport:
    """Check a submission's output for input A against the problem's gates."""
    if problem not in GATES:
        raise ProblemError(f"no gates for problem {problem!r} (known: {', '.join(GATES)})")
    if A.dim() != 3 or A.shape[-1] != A.shape[-2]:
        raise ProblemError(f"the input must be batch x n x n, got {tuple(A.shape)}")
    defect = _structure_error(problem, A, output)
    if defect:
        return GateReport(passed=False, message=defect)

    b, n = A.shape[0], A.shape[-1]
    chunk = max(1, CHUNK_ELEMENTS // (n * n))
    worst: dict[str, tuple[float, int]] = {}          # gate measure -> (worst scaled value, its matrix)
    batch_max: dict[str, tuple[float, float]] = {}    # diagnostic -> (max residual, max ||A||_1)
    for start in range(0, b, chunk):
        part = slice(start, start + chunk)
        try:
            values = _MEASURES[problem](*(x[part] for x in (A, *output)))
        except _NonFinite as e:
            what, index = e.args
            message = f"finite: {what} of matrix {start + index} has non-finite entries"
            return GateReport(False, _residuals(problem, worst), message)
        for name, v in values.items():
            if isinstance(v, tuple):
                residual, scale = (float(torch.where(x.isnan(), math.inf, x).amax()) for x in v)
                old = batch_max.get(name, (0.0, 0.0))
                batch_max[name] = (max(old[0], residual), max(old[1], scale))
                continue
            v = torch.where(v.isnan(), math.inf, v)   # NaN is as bad as it gets
            i = int(v.argmax())
            value = float(v[i])
            if name not in worst or value > worst[name][0]:
                worst[name] = (value, start + i)

    gates = GATES[problem]
    failed = [g for g in gates if not worst[g.name][0] <= g.limit]
    message = None
    if failed:
        g = failed[0]
        value, index = worst[g.name]
        message = f"{g.name}: matrix {index} residual {value:.3g} > {g.limit:g} ({g.unit})"
    info = {name: float(_scaled(torch.tensor(residual, dtype=torch.float64),
                               torch.tensor(n * EPS * scale, dtype=torch.float64)))
            for name, (residual, scale) in batch_max.items()}
    return GateReport(not failed, _residuals(problem, worst), message, info)


def _residuals(problem: str, worst: dict[str, tuple[float, int]]) -> dict[str, list[float]]:
    return {g.name: [worst[g.name][0], float(g.limit)] for g in GATES[problem] if g.name in worst}
