"""qr_v2 native checker: batched Householder QR in geqrf's compact form (H, tau).

Inputs follow the official generator step by step (docs/harness-agreement.md): one seeded
generator; every family first draws A0 = randn(batch, n, n), even the ones that then discard it
(diagonal, nearcollinear); float32 arithmetic in the official order. Gates: factor
||R - Q^T A||_1 <= 20 n eps ||A||_1 and orthogonality ||Q^T Q - I||_1 <= 100 n eps, with Q formed
by householder_product from the float32 (H, tau) as returned, then widened to float64.
"""
from __future__ import annotations

import torch

from checks.native import matrix_specs, peers, profiles
from checks.native.blocks import band_mask, band_width, kept_rank
from checks.native.draw import EPS, F32, Draw
from checks.native.gate_tools import (Gate, GateReport, l1, matrix_vector_report, orthogonality, require_finite,
                                      scaled)

DEFAULT_CASE = "dense"
BASELINE_NAME = "torch.geqrf"
GATES = (Gate("factor", 20, "n eps ||A||_1"), Gate("orthogonality", 100, "n eps"))
OUTPUT_NAMES = ("H", "tau")
_BENCH_SEED_FIRST = 1   # eval.py adds 42 to the seed before each benchmark input


def baseline(A: torch.Tensor):
    return torch.geqrf(A)


# The task returns geqrf's compact (H, tau), as the baseline does; jnp.linalg.qr would go on to form Q
# (householder_product), work the task does not ask for, so JAX's peer is the geqrf it starts with.
PEERS = {"jax": peers.jax_peer(lambda jax, A: jax.lax.linalg.geqrf(A))}


def floor_bytes(spec: dict) -> int:
    """The least a call moves: each A read, each H and tau written (float32)."""
    b, n = spec["batch"], spec["n"]
    return 4 * b * (2 * n * n + n)


# ---------------------------------------------------------------- profiles on a base A0

def _col_scaling(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Column j times 10^(-cond j/(n-1)) (a float32 logspace); cond 0 leaves A untouched."""
    return A * r.logspace(0, -cond, A.shape[-1]) if cond else A


def dense(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """A0 with column scaling."""
    return _col_scaling(r, A, cond)


def upper(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Upper triangular: triu(A0), diagonal += linspace(1, 0.25), column scaling."""
    A = torch.triu(A)
    A.diagonal(dim1=-2, dim2=-1).add_(r.linspace(1, 0.25, A.shape[-1]))
    return _col_scaling(r, A, cond)


def diagonal(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Diagonal (A0 discarded): sign of a fresh normal draw (+1 if > 0, else -1) times logspace(0, -max(cond, 2), n)."""
    m, n = A.shape[0], A.shape[-1]
    signs = torch.where(r.normal(m, n) > 0, 1.0, -1.0).to(F32)
    return torch.diag_embed(signs * r.logspace(0, -max(cond, 2), n))


def rankdef(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Rank max(1, 3n//4): the columns from there on are zero, column scaling."""
    A[..., kept_rank(A.shape[-1]):] = 0.0
    return _col_scaling(r, A, cond)


def nearrank(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Nearly rank max(1, 3n//4): the columns from there on copy the first ones plus 1e-5 noise."""
    m, n = A.shape[0], A.shape[-1]
    rank = kept_rank(n)
    tail = n - rank
    if tail > 0:
        A[..., rank:] = A[..., :tail] + 1e-5 * r.normal(m, n, tail)
    return _col_scaling(r, A, cond)


def clustered(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Column scales 1 (first half), 4 eps (second half), sqrt(eps) (columns n/2-2 .. n/2+1, n >= 8 only)."""
    n = A.shape[-1]
    d = torch.ones(n, dtype=F32, device=r.device)
    d[n // 2:] = 4 * EPS
    if n >= 8:
        d[max(0, n // 2 - 2):min(n, n // 2 + 2)] = torch.sqrt(torch.tensor(EPS, dtype=F32, device=r.device))
    return A * d


def band(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Zero outside |i-j| <= max(2, min(32, n/32)), diagonal += linspace(1, 0.5), column scaling."""
    n = A.shape[-1]
    A = A * band_mask(r, n, band_width(n))
    A.diagonal(dim1=-2, dim2=-1).add_(r.linspace(1, 0.5, n))
    return _col_scaling(r, A, cond)


def nearcollinear(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Every column = one shared fresh random vector + 1e-4 fresh noise (A0 discarded), column scaling."""
    m, n = A.shape[0], A.shape[-1]
    shared = r.normal(m, n, 1)
    noise = r.normal(m, n, n)
    return _col_scaling(r, shared.expand(m, n, n) + 1e-4 * noise, cond)


def rowscale(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Row i of A0 times 10^(-max(cond,4) i/(n-1))."""
    return r.logspace(0, -max(cond, 4), A.shape[-1])[:, None] * A


PROFILES = {"dense": dense, "upper": upper, "diagonal": diagonal, "rankdef": rankdef, "nearrank": nearrank,
            "clustered": clustered, "band": band, "nearcollinear": nearcollinear, "rowscale": rowscale}
MIXED_WEIGHTS = {"dense": 6, "rankdef": 1, "nearrank": 1, "clustered": 1, "band": 1, "rowscale": 1,
                 "nearcollinear": 1}
FAMILIES = profiles.profile_families(PROFILES, MIXED_WEIGHTS)


# ---------------------------------------------------------------- cases

CASES = matrix_specs.MatrixCases("qr_v2", FAMILIES, DEFAULT_CASE, _BENCH_SEED_FIRST, MIXED_WEIGHTS)
normalize_spec, families, generate = CASES.normalize_spec, CASES.families, CASES.generate
benchmark_inputs, robustness_specs = CASES.benchmark_inputs, CASES.robustness_specs
mixed_profiles = CASES.mixed_profiles


# ---------------------------------------------------------------- gates

def _measures(A: torch.Tensor, H: torch.Tensor, tau: torch.Tensor) -> dict:
    """Per-matrix scaled residuals of a compact QR (H, tau) of A; the inputs are as submitted (float32).

    Q = householder_product(H, tau) is formed in the submitted precision, then widened; the
    diagnostics leakage (Q^T A below the diagonal) and reconstruction come back as (residual, ||A||_1).
    """
    n = A.shape[-1]
    Q = torch.linalg.householder_product(H, tau)
    require_finite(Q, "Q")
    A, Q, R = A.double(), Q.double(), torch.triu(H).double()
    QtA = Q.mT @ A
    require_finite(QtA, "Q^T A")
    norm_a = l1(A)
    return {
        "factor": scaled(l1(R - QtA), n * EPS * norm_a),
        "orthogonality": orthogonality(Q),
        "leakage": (l1(torch.tril(QtA, -1)), norm_a),
        "reconstruction": (l1(Q @ R - A), norm_a),
    }


def check_output(A: torch.Tensor, output) -> GateReport:
    """Structure first (a tuple (H, tau), exact shapes, float32, A's device, finite), then the gates."""
    return matrix_vector_report(GATES, _measures, A, output, OUTPUT_NAMES)
