"""eigh native checker: batched symmetric eigendecomposition, output (Q, L) with L ascending.

Inputs follow the official generator step by step (docs/harness-agreement.md): one seeded
generator; every family except the lapack_* types first draws A0 = randn(batch, n, n) (the planted
spectra then discard it) and ends symmetrized, (A + A^T)/2; float32 arithmetic in the official
order (two-sided scaling is (d_i a_ij) d_j). The lapack_* types draw no A0: the spectrum's signs,
then Q, then (band) the widths. Gates: sorted (in float32, as the official check), then in float64
the eigen equation, orthogonality and reconstruction, each in units of n eps (||A||_1 or max(1, max|L|)).
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from checks.native import matrix_specs, peers, profiles
from checks.native.blocks import band_mask, band_width, kept_rank, orthogonal, sym
from checks.native.draw import F32, HIGH, LOW, ULP, Draw
from checks.native.gate_tools import (EPS, Gate, GateReport, l1, matrix_vector_report, orthogonality, scaled)

DEFAULT_CASE = "dense"
BASELINE_NAME = "torch.linalg.eigh"
GATES = (Gate("sorted", 100, "n eps max(1, max|L|)"),
         Gate("eigen_equation", 200, "n eps ||A||_1"),
         Gate("orthogonality", 100, "n eps"),
         Gate("reconstruction", 400, "n eps ||A||_1"))
OUTPUT_NAMES = ("Q", "L")
_BENCH_SEED_FIRST = 1   # eval.py adds 42 to the seed before each benchmark input


def baseline(A: torch.Tensor):
    L, Q = torch.linalg.eigh(A)
    return Q, L


# JAX reads the lower triangle only (symmetrize_input=False), as torch's baseline does: the inputs are
# symmetric already, and its default adds a symmetrizing pass over A.
PEERS = {"jax": peers.jax_peer(lambda jax, A: jax.numpy.linalg.eigh(A, symmetrize_input=False))}


def floor_bytes(spec: dict) -> int:
    """The least a call moves: the lower triangle of each A read, each Q and L written (float32)."""
    b, n = spec["batch"], spec["n"]
    return 4 * b * (n * (n + 1) // 2 + n * n + n)


# ---------------------------------------------------------------- helpers

def _two_sided(d: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """D S D evaluated as (d_i s_ij) d_j, rows first."""
    return d[:, None] * S * d


def _planted(r: Draw, values: torch.Tensor) -> torch.Tensor:
    """sym(Q diag(values) Q^T) with a random orthogonal Q per matrix; values is (b, n)."""
    b, n = values.shape
    Q = orthogonal(r, b, n)
    return sym((Q * values[:, None, :]) @ Q.mT)


def _signed_logspace(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """(b, n): logspace(-max(cond,1), 0, n) with the even indices negated (spectrum/diagonal)."""
    signs = torch.ones(n, dtype=F32, device=r.device)
    signs[0::2] = -1.0
    return (r.logspace(-max(cond, 1), 0, n) * signs).expand(b, n).contiguous()


# ---------------------------------------------------------------- profiles on a base A0
# Each returns the matrix before the final symmetrization, which every one of them gets.

def dense(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """sym(A0); for cond > 0 two-sided scaled D A D with D = logspace(0, -cond, n)."""
    S = sym(A)
    return _two_sided(r.logspace(0, -cond, A.shape[-1]), S) if cond else S


def spectrum(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Planted eigenvalues logspace(-max(cond,1), 0, n), even indices negative (A0 discarded)."""
    return _planted(r, _signed_logspace(r, A.shape[0], A.shape[-1], cond))


def psd(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Positive semidefinite G G^T / n, G = A0 diag(logspace(0, -max(cond,1), n))."""
    n = A.shape[-1]
    G = A * r.logspace(0, -max(cond, 1), n)
    return (G @ G.mT) / float(n)


def rankdef(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Planted: n - max(1, 3n//4) zero eigenvalues, then logspace(-max(cond,1), 0, max(1, 3n//4))."""
    m, n = A.shape[0], A.shape[-1]
    rank = kept_rank(n)
    values = torch.zeros(m, n, dtype=F32, device=r.device)
    values[:, n - rank:] = r.logspace(-max(cond, 1), 0, rank)
    return _planted(r, values)


def nearrank(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Planted: n - rank eigenvalues 1e-6 logspace(-2, 0), then logspace(-max(cond,1), 0, rank); rank max(1, 3n//4)."""
    m, n = A.shape[0], A.shape[-1]
    rank = kept_rank(n)
    values = torch.empty(m, n, dtype=F32, device=r.device)
    values[:, :n - rank] = 1e-6 * r.logspace(-2, 0, n - rank)
    values[:, n - rank:] = r.logspace(-max(cond, 1), 0, rank)
    return _planted(r, values)


def repeated(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Planted: g = max(1, min(16, n/8)) values linspace(-1, 1, g), each ceil(n/g) times, cut to n."""
    m, n = A.shape[0], A.shape[-1]
    g = max(1, min(16, n // 8))
    values = r.linspace(-1, 1, g).repeat_interleave(-(-n // g))[:n]
    return _planted(r, values.expand(m, n).contiguous())


def clustered(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Planted, deterministic: t = linspace(-1, 1, n); +-1 (sign of t, 0 counts as -1) + 1e-5 t,
    the middle third (n//3 .. 2n//3 - 1) 1 + 1e-6 t instead; sorted ascending."""
    m, n = A.shape[0], A.shape[-1]
    t = r.linspace(-1, 1, n)
    values = torch.where(t > 0, 1.0, -1.0).to(F32) + 1e-5 * t
    values[n // 3:2 * n // 3] = 1.0 + 1e-6 * t[n // 3:2 * n // 3]
    return _planted(r, values.sort().values.expand(m, n).contiguous())


def diagonal(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Diagonal of the signed logspace of `spectrum` (A0 discarded)."""
    return torch.diag_embed(_signed_logspace(r, A.shape[0], A.shape[-1], cond))


def band(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """sym(A0) zero outside |i-j| <= max(2, min(32, n/32)), diagonal += linspace(-1, 1)."""
    n = A.shape[-1]
    S = sym(A) * band_mask(r, n, band_width(n))
    S.diagonal(dim1=-2, dim2=-1).add_(r.linspace(-1, 1, n))
    return S


def rowscale(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """D sym(A0) D with D = logspace(0, -max(cond,4), n)."""
    return _two_sided(r.logspace(0, -max(cond, 4), A.shape[-1]), sym(A))


PROFILES = {"dense": dense, "spectrum": spectrum, "psd": psd, "rankdef": rankdef, "nearrank": nearrank,
            "repeated": repeated, "clustered": clustered, "diagonal": diagonal, "band": band,
            "rowscale": rowscale}
MIXED_WEIGHTS = {"dense": 6, "spectrum": 1, "psd": 2, "rankdef": 1, "nearrank": 1, "repeated": 1,
                 "clustered": 1, "band": 1, "rowscale": 1}


# ---------------------------------------------------------------- LAPACK's test matrix types

def _lapack_spectrum(r: Draw, b: int, n: int, kind: str) -> torch.Tensor:
    """(b, n) random-sign eigenvalues in [ulp, 1]: even, geometric or clustered (one 1, rest ulp); n = 1 gives 1."""
    if n == 1:
        v = torch.ones(1, dtype=F32, device=r.device)
    elif kind == "even":
        v = r.linspace(1, ULP, n)
    elif kind == "geometric":
        v = r.logspace(0, math.log10(ULP), n)
    else:
        v = torch.full((n,), ULP, dtype=F32, device=r.device)
        v[0] = 1.0
    return v.expand(b, n) * r.signs(b, n)


def lapack_zero(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """The zero matrix."""
    return torch.zeros(b, n, n, dtype=F32, device=r.device)


def lapack_identity(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """The identity."""
    return torch.eye(n, dtype=F32, device=r.device).expand(b, n, n).clone()


def lapack_diag(r: Draw, b: int, n: int, kind: str, scale: float) -> torch.Tensor:
    """Diagonal; a random-sign LAPACK spectrum, times scale."""
    return torch.diag_embed(_lapack_spectrum(r, b, n, kind) * scale)


def lapack_dense(r: Draw, b: int, n: int, kind: str, scale: float) -> torch.Tensor:
    """Planted; a random-sign LAPACK spectrum, times scale (the values are scaled, then planted)."""
    return _planted(r, _lapack_spectrum(r, b, n, kind) * scale)


def lapack_band(r: Draw, b: int, n: int, kind: str, scale: float) -> torch.Tensor:
    """Planted, masked to a random bandwidth per matrix (uniform in 0 .. n-1); a LAPACK spectrum, times scale."""
    A = _planted(r, _lapack_spectrum(r, b, n, kind) * scale)
    width = r.integers(0, n, b)
    return A * band_mask(r, n, width)


def lapack_random(r: Draw, b: int, n: int, kind: str, scale: float) -> torch.Tensor:
    """Symmetrized uniform(-1, 1): 0.5 (U + U^T); times scale."""
    return sym(r.uniform(-1.0, 1.0, b, n, n)) * scale


_MAGNITUDE_WORDS = {1.0: "", HIGH: ", times sqrt(float32 max)", LOW: ", times sqrt(float32 tiny)"}


def _variant(base: Callable, kind: str | None, scale: float) -> Callable:
    """A family (r, b, n, cond) from a LAPACK base generator with its spectrum and scale fixed."""
    def family(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
        return base(r, b, n, kind, scale)
    what = f", {kind} spectrum" if kind else ""
    family.__doc__ = f"{base.__doc__.split(';')[0]}{what}{_MAGNITUDE_WORDS[scale]}."
    family.__name__ = base.__name__
    return family


# The LAPACK types by the names the case list uses, plus the diagonal magnitudes it leaves out
# (lapack_diag_even_*_magnitude, lapack_diag_clustered_*_magnitude: ours, not official).
LAPACK_TYPES: dict[str, tuple[Callable, str | None, float]] = {
    "lapack_diag_even_spectrum": (lapack_diag, "even", 1.0),
    "lapack_diag_geometric_spectrum": (lapack_diag, "geometric", 1.0),
    "lapack_diag_clustered_spectrum": (lapack_diag, "clustered", 1.0),
    "lapack_diag_even_high_magnitude": (lapack_diag, "even", HIGH),
    "lapack_diag_even_low_magnitude": (lapack_diag, "even", LOW),
    "lapack_diag_geometric_high_magnitude": (lapack_diag, "geometric", HIGH),
    "lapack_diag_geometric_low_magnitude": (lapack_diag, "geometric", LOW),
    "lapack_diag_clustered_high_magnitude": (lapack_diag, "clustered", HIGH),
    "lapack_diag_clustered_low_magnitude": (lapack_diag, "clustered", LOW),
    "lapack_dense_even_spectrum": (lapack_dense, "even", 1.0),
    "lapack_dense_geometric_spectrum": (lapack_dense, "geometric", 1.0),
    "lapack_dense_clustered_spectrum": (lapack_dense, "clustered", 1.0),
    "lapack_dense_even_high_magnitude": (lapack_dense, "even", HIGH),
    "lapack_dense_even_low_magnitude": (lapack_dense, "even", LOW),
    "lapack_random_symmetric": (lapack_random, None, 1.0),
    "lapack_random_symmetric_high_magnitude": (lapack_random, None, HIGH),
    "lapack_random_symmetric_low_magnitude": (lapack_random, None, LOW),
    "lapack_band_even_spectrum": (lapack_band, "even", 1.0),
    "lapack_band_even_high_magnitude": (lapack_band, "even", HIGH),
    "lapack_band_even_low_magnitude": (lapack_band, "even", LOW),
}

FAMILIES: dict[str, Callable] = {
    **profiles.profile_families(PROFILES, MIXED_WEIGHTS, finish=sym),
    "lapack_zero": lapack_zero, "lapack_identity": lapack_identity,
    **{name: _variant(*args) for name, args in LAPACK_TYPES.items()},
}


# ---------------------------------------------------------------- cases

CASES = matrix_specs.MatrixCases("eigh", FAMILIES, DEFAULT_CASE, _BENCH_SEED_FIRST, MIXED_WEIGHTS)
normalize_spec, families, generate = CASES.normalize_spec, CASES.families, CASES.generate
benchmark_inputs, robustness_specs = CASES.benchmark_inputs, CASES.robustness_specs
mixed_profiles = CASES.mixed_profiles


# ---------------------------------------------------------------- gates

def _sorted(L: torch.Tensor) -> torch.Tensor:
    """The sorted gate per matrix, decided as the official check decides it: in float32, each step
    L[i+1] - L[i] against -(100 n eps) max(1, max|L|), both rounded to float32 (a float64 copy of
    the same sums passed or failed some outputs within float32 rounding of the limit otherwise).
    The value is 100 x the largest descent over its float32 allowance: over 100 exactly when some
    step fails, as float32 numbers x > y > 0 have x / y > 1 in float64."""
    b, n = L.shape
    limit = GATES[0].limit
    if n < 2:
        return torch.zeros(b, dtype=torch.float64, device=L.device)
    steps = L[:, 1:] - L[:, :-1]                                                 # float32, as the official
    allowed = (limit * n * EPS) * L.abs().amax(dim=-1, keepdim=True).clamp_min(1.0)
    return (limit * (-steps).double() / allowed.double()).amax(dim=-1).clamp(min=0)


def _measures(A: torch.Tensor, Q: torch.Tensor, L: torch.Tensor) -> dict:
    """Per-matrix scaled residuals of an eigendecomposition (Q, L) of A (sorted in float32, the rest in float64)."""
    ordered = _sorted(L)
    A, Q, L = A.double(), Q.double(), L.double()
    n = A.shape[-1]
    QL = Q * L[:, None, :]
    unit = n * EPS * l1(A)
    return {
        "sorted": ordered,
        "eigen_equation": scaled(l1(A @ Q - QL), unit),
        "orthogonality": orthogonality(Q),
        "reconstruction": scaled(l1(QL @ Q.mT - A), unit),
    }


def check_output(A: torch.Tensor, output) -> GateReport:
    """Structure first (a tuple (Q, L), exact shapes, float32, A's device, finite), then the gates."""
    return matrix_vector_report(GATES, _measures, A, output, OUTPUT_NAMES)
