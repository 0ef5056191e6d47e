"""cholesky native checker: batched Cholesky factorization A = L L^T, output L lower triangular.

Inputs follow the official generator step by step (docs/harness-agreement.md): one seeded
generator on the target device; each family makes only its own draws (dense, lowrank and
rowscale one randn, spectrum the randn of its orthogonal Q, tridiagonal two uniform_, diagonal
none); float32 arithmetic in the official order, every family but diagonal and tridiagonal ending
with 0.5 (A + A^T). Every input is symmetric positive definite up to float32 roundoff.

Gates, decided as the official check does, in float32 on the whole batch, each matrix against
n eps ||A||_1 (||.||_1 = matrix_norm ord 1, ||A||_1 clamped to float32 tiny):
triangular ||triu(L, 1)||_1 <= 8, then diagonal L_jj > 0, then reconstruction
||L L^T - A||_1 <= 20 with L L^T formed in float32, TF32 off. Reported: the worst matrix's scaled
value per gate, and the smallest diagonal entry (info). A NaN residual fails here (the official
comparison would let it through).
"""
from __future__ import annotations

import contextlib

import torch

from checks.native import matrix_specs, peers
from checks.native.blocks import orthogonal, sym
from checks.native.draw import EPS, F32, Draw
from checks.native.gate_tools import (Gate, GateReport, describe, nan_as_inf, require_matrix_batch,
                                      tensors_error)

DEFAULT_CASE = "dense"
BASELINE_NAME = "torch.linalg.cholesky_ex"
GATES = (Gate("triangular", 8, "n eps ||A||_1"), Gate("reconstruction", 20, "n eps ||A||_1"))
_BENCH_SEED_FIRST = 0   # eval.py generates with the spec seed first, then adds 42 after each input
WARMUP_REPEATS = 20     # its benchmark-mode warm-up of the first case stops at 20 repeats (qr_v2's and eigh's: 200)
GLOBAL_SEED = 42        # it runs cases in its own process after seeding random, numpy and torch (POPCORN_SEED or 42)


def baseline(A: torch.Tensor) -> torch.Tensor:
    return torch.linalg.cholesky_ex(A, check_errors=False).L


# JAX reads the lower triangle only (symmetrize_input=False), as torch's baseline does: its default adds a
# symmetrizing pass over A that the task's inputs (symmetric already) do not need.
PEERS = {"jax": peers.jax_peer(lambda jax, A: jax.numpy.linalg.cholesky(A, symmetrize_input=False))}


def floor_bytes(spec: dict) -> int:
    """The least a call moves: the lower triangle of each A read, each L written whole (float32)."""
    b, n = spec["batch"], spec["n"]
    return 4 * b * (n * (n + 1) // 2 + n * n)


# ---------------------------------------------------------------- families

def _spd_from(X: torch.Tensor, damping: float) -> torch.Tensor:
    """sym(X X^T / max(n, 1) + damping I), the damping added to the product's diagonal in place."""
    out = (X @ X.mT) / float(max(X.shape[-1], 1))
    out.diagonal(dim1=-2, dim2=-1).add_(damping)
    return sym(out)


def dense(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """X X^T / n + 10^-max(cond,2) I, X = randn(b, n, n), symmetrized."""
    return _spd_from(r.normal(b, n, n), 10.0 ** -max(cond, 2))


def diagonal(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """diag(logspace(0, -max(cond,1), n)), the same for every matrix (no draws)."""
    return torch.diag_embed(r.logspace(0.0, -float(max(cond, 1)), n).expand(b, n))


def spectrum(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Q diag(logspace(0, -max(cond,1), n)) Q^T, Q from the QR of randn (column signs: R_jj >= 0), symmetrized."""
    values = r.logspace(0.0, -float(max(cond, 1)), n).expand(b, n)
    Q = orthogonal(r, b, n, zero_is_positive=True)
    return sym((Q * values[:, None, :]) @ Q.mT)


def lowrank(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """F F^T / k + 10^-max(cond,3) I, F = randn(b, n, k), k = max(1, min(n // 8, 64)), symmetrized."""
    k = max(1, min(n // 8, 64))
    F = r.normal(b, n, k)
    out = (F @ F.mT) / float(k)
    out.diagonal(dim1=-2, dim2=-1).add_(10.0 ** -max(cond, 3))
    return sym(out)


def rowscale(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """D B D + 1e-6 I, B = dense with damping 1e-3, D = logspace(0, -max(cond,2)/2, n) as (d_i b_ij) d_j; symmetrized."""
    B = _spd_from(r.normal(b, n, n), 1.0e-3)
    d = r.logspace(0.0, -0.5 * float(max(cond, 2)), n)
    out = d[:, None] * B * d
    out.diagonal(dim1=-2, dim2=-1).add_(1.0e-6)
    return sym(out)


def tridiagonal(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Symmetric tridiagonal: diagonal uniform(1.5, 2.5), then off-diagonal uniform(-0.25, 0.25) (diagonally dominant)."""
    main = r.uniform(1.5, 2.5, b, n)
    off = r.uniform(-0.25, 0.25, b, max(n - 1, 0))
    out = torch.diag_embed(main)
    if n > 1:
        out = out + torch.diag_embed(off, offset=1) + torch.diag_embed(off, offset=-1)
    return out


FAMILIES = {"dense": dense, "diagonal": diagonal, "spectrum": spectrum, "lowrank": lowrank,
            "rowscale": rowscale, "tridiagonal": tridiagonal}


# ---------------------------------------------------------------- cases

CASES = matrix_specs.MatrixCases("cholesky", FAMILIES, DEFAULT_CASE, _BENCH_SEED_FIRST)
normalize_spec, families, generate = CASES.normalize_spec, CASES.families, CASES.generate
benchmark_inputs, robustness_specs = CASES.benchmark_inputs, CASES.robustness_specs


# ---------------------------------------------------------------- gates

@contextlib.contextmanager
def _no_tf32(device: torch.device):
    """float32 matmuls in full precision on a GPU (as the official check forms L L^T)."""
    if device.type != "cuda":
        yield
        return
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _norm1(X: torch.Tensor) -> torch.Tensor:
    return torch.linalg.matrix_norm(X, ord=1, dim=(-2, -1))


def _gate(residual: torch.Tensor, scale: torch.Tensor, n: int, limit: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-matrix value in n eps ||A||_1, per-matrix failure), decided as the official check: the float32
    comparison residual > limit n eps ||A||_1 (the allowance rounded to float32), or a NaN residual (ours).
    The value is limit x residual / allowance in float64, over the limit exactly when the comparison fails
    (float32 numbers x > y > 0 have x / y > 1 in float64); a float64 residual / (n eps ||A||_1) beside the
    float32 comparison also failed outputs within float32 rounding of the limit that the grader passes."""
    allowed = limit * n * EPS * scale
    value = nan_as_inf(limit * residual.double() / allowed.double())
    value = torch.where(residual == 0, 0.0, value)      # 0 / 0 where a float32 allowance underflows
    return value, value > limit


def _failure(gate: Gate, value: torch.Tensor, bad: torch.Tensor) -> str:
    i = int(torch.where(bad, value, -torch.inf).argmax())
    return f"{gate.name}: matrix {i} residual {float(value[i]):.3g} > {gate.limit:g} ({gate.unit})"


def check_output(A: torch.Tensor, output) -> GateReport:
    """Structure first (a tensor L of A's shape, float32, A's device, finite), then the three gates."""
    require_matrix_batch(A)
    if not isinstance(output, torch.Tensor):
        return GateReport(passed=False, message=f"output: expected a tensor L, got {describe(output)}")
    defect = tensors_error(A, [("L", output, tuple(A.shape))])
    if defect:
        return GateReport(passed=False, message=defect)

    n = A.shape[-1]
    scale = _norm1(A).clamp_min(torch.finfo(F32).tiny)
    triangular, tri_bad = _gate(_norm1(torch.triu(output, diagonal=1)), scale, n, GATES[0].limit)
    diag = output.diagonal(dim1=-2, dim2=-1)
    with _no_tf32(A.device):
        product = output @ output.mT
    reconstruction, rec_bad = _gate(_norm1(product - A), scale, n, GATES[1].limit)
    del product

    residuals = {"triangular": [float(triangular.max()), float(GATES[0].limit)],
                 "reconstruction": [float(reconstruction.max()), float(GATES[1].limit)]}
    low = int(diag.flatten().argmin())
    matrix, j = divmod(low, n)
    info = {"min_diagonal": float(diag[matrix, j])}
    message = None
    if bool(tri_bad.any()):
        message = _failure(GATES[0], triangular, tri_bad)
    elif info["min_diagonal"] <= 0:
        message = f"diagonal: matrix {matrix} has L[{j},{j}] = {info['min_diagonal']:.3g}, not > 0"
    elif bool(rec_bad.any()):
        message = _failure(GATES[1], reconstruction, rec_bad)
    return GateReport(message is None, residuals, message, info)
