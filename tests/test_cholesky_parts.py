"""parts/cholesky: the torch models of the kernels and the CPU route meet the gates, the blocked
driver agrees with the unblocked factor, the pivot floor keeps numerically singular inputs inside the
gate, the tunables fit the kernels."""
from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
import torch

from parts.cholesky import route
from parts.cholesky.model import (HALF, TILED_STEP, blocked_cholesky, blocked_tf32x3_model,
                                  blocked_two_level_model, halves_model, inverse_model, pivot_floor,
                                  right_looking_model, trailing_update)
from parts.common.tf32_model import matmul_precision, tf32_split

EPS = torch.finfo(torch.float32).eps
SIZES = (1, 2, 3, 17, 31, 32, 33, 64, 100, 128, 129, 257, 600)
MODEL_FAMILIES = ("dense", "spectrum", "diagonal")
ROUTE_FAMILIES = ("dense", "spectrum", "diagonal", "lowrank", "rowscale", "tridiagonal")


@functools.lru_cache(maxsize=None)
def spd(case: str, n: int, batch: int) -> torch.Tensor:
    """SPD float32 batch of one family (as in cholesky.yml, at the hardest dynamic range: eigenvalues to 1e-5)."""
    g = torch.Generator().manual_seed(1000 * n + batch)
    eye = torch.eye(n, dtype=torch.float64)
    values = torch.logspace(0, -5, n, dtype=torch.float64)
    if case == "dense":
        X = torch.randn(batch, n, n, generator=g, dtype=torch.float64)
        A = X @ X.mT / n + 1e-2 * eye
    elif case == "diagonal":
        A = torch.diag_embed(values.expand(batch, n))
    elif case == "spectrum":
        Q, _ = torch.linalg.qr(torch.randn(batch, n, n, generator=g, dtype=torch.float64))
        A = (Q * values) @ Q.mT
    elif case == "lowrank":
        r = max(1, min(n // 8, 64))
        F = torch.randn(batch, n, r, generator=g, dtype=torch.float64)
        A = F @ F.mT / r + 1e-4 * eye
    elif case == "rowscale":
        s = torch.logspace(0, -2.5, n, dtype=torch.float64)
        A = s[:, None] * spd("dense", n, batch).double() * s + 1e-6 * eye
    else:
        A = torch.diag_embed(torch.rand(batch, n, generator=g, dtype=torch.float64) + 1.5)
        off = torch.rand(batch, n - 1, generator=g, dtype=torch.float64) / 2 - 0.25
        A = A + torch.diag_embed(off, 1) + torch.diag_embed(off, -1)
    return (0.5 * (A + A.mT)).float().contiguous()


def assert_cholesky(A: torch.Tensor, L: torch.Tensor, limit: float = 20.0) -> None:
    """Exactly lower triangular, positive finite diagonal, ||L L^T - A||_1 <= limit n eps ||A||_1 (float64)."""
    n = A.shape[-1]
    assert L.shape == A.shape and L.dtype == torch.float32
    assert torch.isfinite(L).all()
    assert torch.count_nonzero(torch.triu(L, 1)) == 0
    assert (L.diagonal(dim1=1, dim2=2) > 0).all()
    L64, A64 = L.double(), A.double()
    residual = torch.linalg.matrix_norm(L64 @ L64.mT - A64, ord=1)
    scaled = residual / (n * EPS * torch.linalg.matrix_norm(A64, ord=1))
    assert scaled.max() <= limit, f"scaled residual {scaled.max():.3g} > {limit}"


def blocked(nb: int, chunk_rows: int = 48):
    return lambda A: blocked_cholesky(A, nb, chunk_rows)


MODELS = {
    "unblocked": right_looking_model,
    "blocked-16": blocked(16),
    "blocked-32": blocked(32),
    "blocked-64": blocked(64, chunk_rows=1 << 20),       # one trailing GEMM per step
    "blocked-32-split": lambda A: blocked_cholesky(A, 32, 48, split_tf32=True),
    "blocked-32-tf32x3": lambda A: blocked_tf32x3_model(A, 32),
    "route": route.custom_kernel,
}


@pytest.mark.parametrize("batch", (1, 3))
@pytest.mark.parametrize("case", MODEL_FAMILIES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("model", MODELS)
def test_models_meet_the_gates(model, n, case, batch):
    A = spd(case, n, batch)
    assert_cholesky(A, MODELS[model](A))


@pytest.mark.parametrize("case", ROUTE_FAMILIES)
@pytest.mark.parametrize("n", (5, 32, 33, 129, 300))
def test_route_meets_the_gates_on_every_family(case, n):
    A = spd(case, n, 3)
    assert_cholesky(A, route.custom_kernel(A))


@pytest.mark.parametrize("n", (7, 40, 100))
def test_inverse_model_is_the_inverse_of_the_factor(n):
    L = right_looking_model(spd("spectrum", n, 2))
    X = inverse_model(L)
    assert torch.count_nonzero(torch.triu(X, 1)) == 0
    I = torch.eye(n, dtype=torch.float64)
    assert (X.double() @ L.double() - I).abs().max() < 1e-3


@pytest.mark.parametrize("n", (100, 129, 200))
@pytest.mark.parametrize("nb", (16, 32, 64))
def test_blocked_agrees_with_unblocked(nb, n):
    A = spd("dense", n, 3)
    L_ref = right_looking_model(A)
    L = blocked_cholesky(A, nb, chunk_rows=40)
    assert torch.count_nonzero(torch.triu(L, 1)) == 0
    assert ((L - L_ref).norm() / L_ref.norm()) < 1e-5


def test_blocked_rejects_a_zero_block():
    with pytest.raises(ValueError, match=r"nb \(0\) and chunk_rows \(8\) must be >= 1"):
        blocked_cholesky(spd("dense", 8, 1), 0, 8)


# An SPD matrix (exact pivot 9.3e-9 > 0) whose float32 factor meets a non-positive second pivot (with each
# operation rounded; a LAPACK built with fused multiply-adds may land just above zero on some CPUs).
FP32_FAILS = ((3.0, 1.3681573867797852), (1.3681573867797852, 0.6239515542984009))


def test_a_pivot_that_fails_in_float32_is_floored_and_the_factor_passes_the_gate():
    A = spd("dense", 2, 3).clone()
    A[1] = torch.tensor(FP32_FAILS)
    assert torch.linalg.cholesky_ex(A[1].double())[1] == 0                  # SPD in exact arithmetic
    a = A[1]                                                                # the second pivot in float32,
    assert a[1, 1] - (a[1, 0] * torch.rsqrt(a[0, 0])) ** 2 <= 0              # rounded step by step, fails
    L = route.custom_kernel(A)
    assert_cholesky(A, L)
    floor = pivot_floor(A)[1]
    assert L[1, 1, 1] == floor * torch.rsqrt(floor)                         # the floored pivot
    assert torch.equal(L[0], right_looking_model(A[:1])[0])                 # other matrices untouched


def test_an_indefinite_matrix_gives_a_finite_factor_that_the_gate_rejects():
    A = spd("dense", 6, 2).clone()
    A[1, 3, 3] = -1.0
    L = route.custom_kernel(A)
    assert torch.isfinite(L).all()
    assert_cholesky(A[:1], L[:1])
    with pytest.raises(AssertionError, match="scaled residual"):
        assert_cholesky(A[1:], L[1:])


def test_a_nan_input_stays_nan():
    A = spd("dense", 40, 2).clone()
    A[0, 5, 5] = float("nan")
    L = route.custom_kernel(A)
    assert torch.isnan(L[0]).any() and torch.isfinite(L[1]).all()


def test_pivot_floor_is_eps_times_the_largest_diagonal_entry():
    A = torch.diag_embed(torch.tensor([[4.0, 1.0, 2.0], [0.0, 0.0, 0.0]]))
    assert torch.equal(pivot_floor(A), torch.tensor([4 * EPS, torch.finfo(torch.float32).tiny]))


@pytest.mark.parametrize("data, message", [
    (torch.zeros(4, 4), r"batch x n x n float32 tensor.*shape \(4, 4\)"),
    (torch.zeros(2, 3, 4), r"shape \(2, 3, 4\)"),
    (torch.zeros(2, 3, 3, dtype=torch.float64), r"got torch.float64"),
])
def test_route_rejects_bad_input(data, message):
    with pytest.raises(ValueError, match=message):
        route.custom_kernel(data)


def test_route_rejects_bad_input_on_every_call():
    with pytest.raises(ValueError):
        route.custom_kernel(torch.zeros(2, 3, 3, dtype=torch.float64))
    with pytest.raises(ValueError):                     # no plan was kept for the bad input
        route.custom_kernel(torch.zeros(2, 3, 3, dtype=torch.float64))


def test_a_plan_is_made_once_per_shape_and_again_when_a_table_changes(monkeypatch):
    made = []
    real_plan = route.plan
    monkeypatch.setattr(route, "plan", lambda data: made.append(tuple(data.shape)) or real_plan(data))
    monkeypatch.setattr(route, "PLANS", {})
    A, B = spd("dense", 200, 3), spd("dense", 40, 2)
    first = route.custom_kernel(A)
    route.custom_kernel(B)
    assert torch.equal(route.custom_kernel(A), first) and made == [(3, 200, 200), (2, 40, 40)]
    default_nb = route.BLOCK_NB
    monkeypatch.setattr(route, "BLOCK_NB", ((1 << 30, 64),))          # as scripts/sweep_route.py does
    assert_cholesky(A, route.custom_kernel(A))
    assert made == [(3, 200, 200), (2, 40, 40), (3, 200, 200)]
    monkeypatch.setattr(route, "BLOCK_NB", tuple(tuple(row) for row in default_nb))   # equal, not the same object
    assert torch.equal(route.custom_kernel(A), first)                  # the first plan, kept beside the second
    assert len(made) == 3


def test_route_reads_only_the_lower_triangle_and_accepts_non_contiguous_input():
    A = spd("dense", 50, 2)
    junk = A + torch.triu(torch.full_like(A, 7.0), 1)
    assert torch.equal(route.custom_kernel(junk), route.custom_kernel(A))
    assert torch.equal(route.custom_kernel(A.mT), route.custom_kernel(A.mT.contiguous()))


def test_matmul_precision_restores_the_flag():
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    with matmul_precision("tf32"):
        assert matmul.fp32_precision == "tf32"
    assert matmul.fp32_precision == before
    assert matmul.allow_tf32 in (True, False)              # the legacy read the grader makes still works
    with pytest.raises(RuntimeError, match="inside"):
        with matmul_precision("tf32"):
            raise RuntimeError("inside")
    assert matmul.fp32_precision == before


@pytest.mark.parametrize("table", ("BLOCK_NB", "TILED_SHAPE"))
def test_tables_cover_every_n_in_order(table):
    rows = getattr(route, table)
    bounds = [row[0] for row in rows]
    assert bounds == sorted(bounds) and bounds[-1] >= 1 << 30
    assert route.by_n(rows, 1) is not None and route.by_n(rows, 32768) is not None


def test_chunk_product_and_driver_tables_cover_every_shape():
    for n in (129, 256, 512, 1024, 2048, 4096, 32768):
        for batch in (1, 4, 60, 640, 100000):
            assert route.first_row(route.TRAILING_CHUNK_ROWS, n, batch * n) >= 1
            assert route.first_row(route.TRAILING_PRODUCT, n, batch * n) in ("fp32", "split_tf32")
            assert route.first_row(route.BLOCKED_DRIVER, n, batch * n) in ("tf32x3", "library")
    assert route.PRODUCTS in ("auto", "portable")                # cholesky_blocked's `portable` flag


def test_by_n_refuses_an_uncovered_n():
    with pytest.raises(ValueError, match=r"no table row covers \(9,\)"):
        route.by_n(((8, "x"),), 9)


def test_first_row_needs_every_key_covered():
    table = ((2048, 8192, "one GEMM"), (2048, 1 << 30, "chunks"), (1 << 30, 1 << 30, "big"))
    assert route.first_row(table, 1024, 4096) == "one GEMM"
    assert route.first_row(table, 1024, 61440) == "chunks"
    assert route.first_row(table, 4096, 4096) == "big"
    assert route.first_row(((8, 2, 3, 4),), 8, 2) == (3, 4)


def test_tunables_fit_the_kernels():
    shapes = {(8, 8), (16, 8)}                                # the instantiations cholesky_tiled.cu has
    for max_n, tdim, ts in route.TILED_SHAPE:
        assert (tdim, ts) in shapes and min(max_n, route.BLOCK_MAX_N) <= tdim * ts
    for _, nb in route.BLOCK_NB:                              # a diagonal block fits the largest tiled shape
        assert route.SMALL_MAX_N < nb <= route.BLOCK_MAX_N <= max(t * s for _, t, s in route.TILED_SHAPE)
        assert nb % 32 == 0 and nb <= 128                     # cholesky_blocked.cu: K in chunks of 32, one tile
    assert route.SMALL_MAX_N == 32 and 1 <= route.SMALL_WARPS_PER_CTA <= 16
    assert all(halves in (0, 1) for _, halves in route.DIAG_HALVES)
    assert all(row[-1] in ("fp32", "split_tf32") for row in route.TRAILING_PRODUCT)


def test_empty_batch_gives_an_empty_result():
    assert route.custom_kernel(torch.zeros(0, 5, 5)).shape == (0, 5, 5)


def test_floor_test_input_really_fails_in_float32():
    # the pivot the float32 factor sees: y - fl(x / sqrt(3))^2 <= 0 although y - x^2 / 3 > 0
    (a, x), (_, y) = FP32_FAILS
    l = torch.tensor(x) * torch.rsqrt(torch.tensor(a))
    assert (torch.tensor(y) - l * l).item() <= 0 < y - x * x / a
    assert math.isclose(y - x * x / a, 9.3e-9, rel_tol=0.01)


STEP = TILED_STEP
TILED_SHAPES = ((8, 8), (16, 8))


def threads(tdim: int, ts: int):
    """Every (ty, tx, i, j): a thread of cholesky_tiled.cu and one of its registers."""
    return ((ty, tx, i, j) for ty in range(tdim) for tx in range(tdim) for i in range(ts) for j in range(ts))


def entries(tdim: int, ts: int, keep) -> torch.Tensor:
    """The padded matrix's entries (ty + tdim i, tx + tdim j) whose thread and register satisfy keep."""
    npad = tdim * ts
    mask = torch.zeros(npad, npad, dtype=torch.bool)
    for ty, tx, i, j in threads(tdim, ts):
        if keep(ty, tx, i, j):
            mask[ty + tdim * i, tx + tdim * j] = True
    return mask


@pytest.mark.parametrize("tdim, ts", TILED_SHAPES)
def test_column_steps_update_exactly_the_trailing_lower_part(tdim, ts):
    """column_steps' predicates (tiled_block.cuh), per thread and register: step k updates c > k, r >= c."""
    npad = tdim * ts
    r, c = torch.arange(npad)[:, None], torch.arange(npad)[None, :]
    for k in range(npad):
        kb, kt = divmod(k, tdim)

        def updated(ty, tx, i, j):
            return j >= kb and i >= j and not (j == kb and not tx > kt) and not (i == j and ty < tx)
        assert torch.equal(entries(tdim, ts, updated), (c > k) & (r >= c)), k


@pytest.mark.parametrize("tdim, ts", TILED_SHAPES)
def test_column_steps_scale_and_publish_exactly_column_k_below_the_diagonal(tdim, ts):
    for k in range(tdim * ts):
        rows = sorted(ty + tdim * i for ty in range(tdim) for i in range(ts) if ty + tdim * i > k)
        assert rows == list(range(k + 1, tdim * ts))


@pytest.mark.parametrize("tdim, ts", TILED_SHAPES)
def test_column_steps_inverse_updates_exactly_rows_below_k_and_columns_up_to_k(tdim, ts):
    """The column steps' inverse: row k of X is published for c <= k, and x is updated for r > k >= c."""
    npad = tdim * ts
    r, c = torch.arange(npad)[:, None], torch.arange(npad)[None, :]
    for k in range(npad):
        kb, kt = divmod(k, tdim)
        published = sorted(tx + tdim * j for tx in range(tdim) for j in range(kb + 1) if not (j == kb and tx > kt))
        assert published == list(range(k + 1)), k

        def updated(ty, tx, i, j):
            return j <= kb and not (j == kb and tx > kt) and i >= kb and not (i == kb and ty <= kt)
        assert torch.equal(entries(tdim, ts, updated), (r > k) & (c <= k)), k


@pytest.mark.parametrize("tdim, ts", TILED_SHAPES)
def test_grouped_steps_update_exactly_the_trailing_lower_part(tdim, ts):
    """grouped_steps' predicates (tiled_block.cuh), as the kernel decides them per thread and register: the
    rank-4 update of the step starting at column k touches exactly c >= k + 4, r >= c."""
    npad = tdim * ts
    r, c = torch.arange(npad)[:, None], torch.arange(npad)[None, :]
    for k in range(0, npad, STEP):
        kb, kt = divmod(k, tdim)

        def updated(ty, tx, i, j):
            return j >= kb and i >= j and not (j == kb and tx < kt + STEP) and not (i == j and ty < tx)
        assert torch.equal(entries(tdim, ts, updated), (c >= k + STEP) & (r >= c)), k


@pytest.mark.parametrize("tdim, ts", TILED_SHAPES)
def test_grouped_steps_publish_and_keep_exactly_the_steps_columns(tdim, ts):
    """publish_step writes the step's columns at every row r >= k (tile column jb, rows i >= jb), and the
    owners keep L's values at exactly the lower part of those columns (p = r - k >= q)."""
    npad = tdim * ts
    r, c = torch.arange(npad)[:, None], torch.arange(npad)[None, :]
    for k in range(0, npad, STEP):
        jb, kt = divmod(k, tdim)
        step_columns = (c >= k) & (c < k + STEP)

        def published(ty, tx, i, j):
            return 0 <= tx - kt < STEP and j == jb and i >= j and ty + tdim * i >= k
        assert torch.equal(entries(tdim, ts, published), step_columns & (r >= k)), k

        def kept(ty, tx, i, j):
            return 0 <= tx - kt < STEP and j == jb and i >= jb and ty + tdim * i - k >= tx - kt
        assert torch.equal(entries(tdim, ts, kept), step_columns & (r >= c)), k


@pytest.mark.parametrize("tdim, ts", TILED_SHAPES)
def test_grouped_steps_inverse_publishes_and_updates_exactly_its_part(tdim, ts):
    """The fused inverse's predicates: the step's rows of X are published at c < k + 4 and solved there,
    and x is updated for r >= k + 4 > c."""
    npad = tdim * ts
    r, c = torch.arange(npad)[:, None], torch.arange(npad)[None, :]
    for k in range(0, npad, STEP):
        kb, kt = divmod(k, tdim)

        def published(ty, tx, i, j):
            return 0 <= ty - kt < STEP and i == kb and j <= i and tx + tdim * j < k + STEP
        assert torch.equal(entries(tdim, ts, published), (r >= k) & (r < k + STEP) & (c < k + STEP)), k

        def updated(ty, tx, i, j):
            return (j <= kb and not (j == kb and tx >= kt + STEP) and i >= kb
                    and not (i == kb and ty < kt + STEP))
        assert torch.equal(entries(tdim, ts, updated), (r >= k + STEP) & (c < k + STEP)), k


@pytest.mark.parametrize("n", (1, 7, 24, 33, 128))
def test_grouped_steps_give_the_column_by_column_factor_and_inverse(n):
    """cholesky_tiled.cu's groups of 4 columns (right_looking_model step 4, inverse_model step 4) meet the
    gates on every family, and on a well-conditioned matrix give the spotf2 order's factor and inverse up
    to rounding (ill-conditioned families amplify the rounding differences in L itself)."""
    for case in ROUTE_FAMILIES:
        A = spd(case, n, 2)
        assert_cholesky(A, right_looking_model(A, step=STEP))
    A = spd("dense", n, 2)
    L1, L4 = right_looking_model(A), right_looking_model(A, step=STEP)
    assert ((L4 - L1).norm() / L1.norm()) < 1e-5
    X1, X4 = inverse_model(L4), inverse_model(L4, STEP)
    assert ((X4 - X1).norm() / X1.norm()) < 1e-5


@pytest.mark.parametrize("step", (1, STEP))
def test_inverse_model_runs_the_kernels_elimination_order(step):
    L = right_looking_model(spd("dense", 24, 2), step=step)
    X = inverse_model(L, step)
    reference = torch.linalg.solve_triangular(L.double(), torch.eye(24, dtype=torch.float64), upper=False)
    assert ((X.double() - reference).abs().max() / reference.abs().max()) < 1e-5


def test_split_trailing_update_agrees_with_fp32():
    g = torch.Generator().manual_seed(5)
    L21 = torch.randn(2, 70, 16, generator=g)
    A22 = torch.randn(2, 70, 70, generator=g)
    plain, split = A22.clone(), A22.clone()
    trailing_update(plain, L21, L21, 32)
    hi, lo = tf32_split(L21)
    trailing_update(split, torch.cat([hi, hi, lo], -1), torch.cat([hi, lo, hi], -1), 32, tf32=True)
    lower = torch.ones(70, 70).tril().bool()
    exact = A22.double() - L21.double() @ L21.double().mT
    for result in (plain, split):   # on CPU TF32 is off: the split's three products are fp32 products
        assert ((result.double() - exact)[:, lower].abs().max() / exact.abs().max()) < 1e-6


@pytest.mark.parametrize("case", ROUTE_FAMILIES)
def test_split_tf32_blocked_route_meets_the_gates_on_every_family(case):
    A = spd(case, 150, 2)
    assert_cholesky(A, blocked_cholesky(A, 64, 48, split_tf32=True))


@pytest.mark.parametrize("nb", (32, 64))
@pytest.mark.parametrize("n", (100, 129, 200))
def test_tf32x3_blocked_agrees_with_unblocked(nb, n):
    A = spd("dense", n, 3)
    L_ref = right_looking_model(A)
    L = blocked_tf32x3_model(A, nb)
    assert torch.count_nonzero(torch.triu(L, 1)) == 0
    assert ((L - L_ref).norm() / L_ref.norm()) < 1e-5


@pytest.mark.parametrize("case", ROUTE_FAMILIES)
def test_tf32x3_blocked_route_meets_the_gates_on_every_family(case):
    A = spd(case, 150, 2)
    assert_cholesky(A, blocked_tf32x3_model(A, 64))


def test_tf32x3_blocked_rejects_a_zero_block():
    with pytest.raises(ValueError, match=r"nb \(0\) must be >= 1"):
        blocked_tf32x3_model(spd("dense", 8, 1), 0)


@pytest.mark.parametrize("n, nb, outer", [(100, 32, 64), (200, 32, 96), (257, 64, 128), (130, 64, 128), (64, 32, 64)])
def test_two_level_order_gives_the_plain_loops_factor(n, nb, outer):
    """Two-level blocking regroups the trailing sums (inside an outer panel now, the rest once per outer
    panel): a block column left out or updated twice would differ by far more than rounding."""
    A = spd("dense", n, 2)
    plain = blocked_tf32x3_model(A, nb)
    grouped = blocked_two_level_model(A, nb, outer)
    assert ((grouped - plain).norm() / plain.norm()) < 1e-6


@pytest.mark.parametrize("case", ROUTE_FAMILIES)
def test_two_level_model_meets_the_gates_on_every_family(case):
    A = spd(case, 150, 2)
    assert_cholesky(A, blocked_two_level_model(A, 32, 64))


def test_two_level_model_rejects_an_outer_panel_that_is_not_a_multiple_of_the_block():
    with pytest.raises(ValueError, match="multiple of nb"):
        blocked_two_level_model(spd("dense", 8, 1), 32, 48)



def test_a_launch_plan_calls_its_entry_with_fresh_output_and_keeps_its_workspace():
    calls, work = [], torch.zeros(5)
    run = route.launch_plan(lambda *args: calls.append(args), work.data_ptr(), 3, 4, keep=(work,))
    A = torch.ones(2, 3, 3)
    L = run(A)
    assert L.shape == A.shape and L.data_ptr() != A.data_ptr()
    assert calls == [(A.data_ptr(), L.data_ptr(), work.data_ptr(), 3, 4)] and run.keep == (work,)


@pytest.mark.parametrize("n", (40, 65, 100, 128))
def test_halves_give_the_factor_and_its_inverse(n):
    """tiled_block.cuh's halves_steps (halves_model): two 64-blocks joined by products meet the gate on every
    family, agree with the one-block factor on a well-conditioned matrix, and X is inv(L)."""
    for case in ROUTE_FAMILIES:
        A = spd(case, n, 2)
        L, X = halves_model(A, pivot_floor(A))
        assert_cholesky(A, L)
        assert torch.count_nonzero(torch.triu(X, 1)) == 0
        reference = torch.linalg.solve_triangular(L.double(), torch.eye(n, dtype=torch.float64), upper=False)
        assert ((X.double() - reference).norm() / reference.norm()) < 1e-4, case
    A = spd("dense", n, 2)
    L, _ = halves_model(A, pivot_floor(A))
    L1 = right_looking_model(A, step=STEP)
    assert ((L - L1).norm() / L1.norm()) < 1e-5


def test_halves_registers_are_the_quarters_of_the_block():
    """halves_steps works on a[I0 + i][J0 + j] (i, j < 4) of the (16, 8) layout as on a 64-block: those registers
    hold exactly the block's quarter, the lower update of A22 (i > j, or i == j and ty >= tx) exactly its lower
    triangle, and a column operand's place 4 tx + j (stage_cols) is one place per column."""
    for i0 in (0, 4):
        for j0 in (0, 4):
            quarter = entries(16, 8, lambda ty, tx, i, j: i0 <= i < i0 + 4 and j0 <= j < j0 + 4)
            expected = torch.zeros(128, 128, dtype=torch.bool)
            expected[16 * i0:16 * i0 + HALF, 16 * j0:16 * j0 + HALF] = True
            assert torch.equal(quarter, expected)
    lower = entries(16, 8, lambda ty, tx, i, j: i >= 4 and j >= 4 and (i > j or (i == j and ty >= tx)))
    expected = torch.zeros(128, 128, dtype=torch.bool)
    expected[HALF:, HALF:] = torch.ones(HALF, HALF, dtype=torch.bool).tril()
    assert torch.equal(lower, expected)
    assert sorted(4 * tx + j for tx in range(16) for j in range(4)) == list(range(HALF))


@pytest.mark.parametrize("case", ("dense", "rowscale", "lowrank"))
def test_route_with_halves_meets_the_gates(case, monkeypatch):
    monkeypatch.setattr(route, "DIAG_HALVES", ((1 << 30, 1),))
    A = spd(case, 300, 2)
    assert_cholesky(A, route.custom_kernel(A))


# tiled_block.cuh's Terms: which terms of the halves' products a thread computes, by k's 16-wide segment s
LIVE_TERMS = {
    "kColsFromS": lambda s, i, j: j >= s,
    "kColsUpToS": lambda s, i, j: j <= s,
    "kRowsFromS": lambda s, i, j: i >= s,
}
# ... and where the operand is structurally zero: (r, c, k) -> True when the term is an exact zero
ZERO_TERMS = {
    "kColsFromS": lambda r, c, k: k > c,          # cols[k][c] = X11[c][k], X11 lower (L21 = A21 X11^T)
    "kColsUpToS": lambda r, c, k: k < c,          # cols[k][c] = X11[k][c] (T = L21 X11)
    "kRowsFromS": lambda r, c, k: k > r,          # rows[r][k] = X22[r][k] (X21 = -X22 T)
}


@pytest.mark.parametrize("terms", sorted(LIVE_TERMS))
def test_halves_products_skip_only_zero_terms(terms):
    """Every term that product_quarter<TERMS> skips multiplies a structural zero of a triangular operand."""
    live, zero = LIVE_TERMS[terms], ZERO_TERMS[terms]
    for s in range(4):
        for i in range(4):
            for j in range(4):
                if live(s, i, j):
                    continue
                assert all(zero(ty + 16 * i, tx + 16 * j, k)
                           for ty in range(16) for tx in range(16) for k in range(16 * s, 16 * s + 16)), (s, i, j)
