"""cholesky routes: which algorithm factors a batch, by n and by device.

| n         | CUDA route                                                  | CPU (model)              |
|-----------|-------------------------------------------------------------|--------------------------|
| <= 32     | cholesky_small.cu: one warp per matrix, rows in registers   | right_looking_model      |
| <= 128    | cholesky_tiled.cu: one CTA per matrix, in registers         | right_looking_model      |
| larger    | BLOCKED_DRIVER "tf32x3": cholesky_blocked.cu, the whole     | blocked_tf32x3_model     |
|           | blocked loop in one call: cholesky_tiled.cu (+ inverse) per |                          |
|           | diagonal block, our tensor-core products for the panel and  |                          |
|           | the trailing update; on the H200 (LOOKAHEAD) the next       | (the same operations)    |
|           | diagonal block is factored inside each trailing update;     |                          |
|           | above n = 8192 (OUTER_PANEL) blocks in two levels           | blocked_two_level_model  |
|           | "library": blocked_cholesky with cholesky_tiled.cu per      | blocked_cholesky with    |
|           | diagonal block, cuBLAS GEMMs for the panel and the trailing | factor_diag_model and    |
|           | update; cholesky_split.cu writes split-TF32 operands        | panel_model              |

Every route reads the lower triangle of A only. A pivot at or below eps * max_i a_ii becomes that
floor (model.pivot_floor says why), so no route needs a host-side check or a second pass. The
tunables below were measured on the H200 (docs/priors.md).
"""
import functools
from typing import Callable

import torch

from parts.common.cuda_loader import CUDA  # popkit: inline
from parts.cholesky.model import (blocked_cholesky, blocked_tf32x3_model,  # popkit: inline
                                  factor_diag_model, l21_view, panel_model, right_looking_model,  # popkit: inline
                                  split_views)  # popkit: inline

SMALL_MAX_N = 32                 # cholesky_small.cu's register tile is 32 rows
SMALL_WARPS_PER_CTA = 8          # matrices per CTA in the small kernel (1..16)
BLOCK_MAX_N = 128                # cholesky_tiled.cu holds up to 128 x 128
# (max n, TDIM, TS) of cholesky_tiled.cu for whole matrices: TDIM^2 threads, TS x TS entries each
TILED_SHAPE = ((64, 8, 8), (1 << 30, 16, 8))
# (max batch, halves) of the 128-blocks with the inverse (the blocked drivers' diagonal blocks): 1 factors
# each as two 64-blocks joined by 64 x 64 products (tiled_block.cuh halves_steps, model.halves_model).
# H200 sweep at 976a2d1, halves / none, us: 1x4096 1927 / 2029, 4x1024 457 / 519, 60x1024 986 / 1114,
# 64x256 105 / 125, 1x16384 26706 / 28311.
DIAG_HALVES = ((1 << 30, 1),)
# (max batch, diagonal block size): 128 lengthens the GEMMs (K = 128) and halves the chain of steps;
# at large batch the GEMMs are already big and 64 keeps more diagonal blocks per SM (H200, 479aad1:
# 128 is 1.3-1.9x faster from 64x256 to 1x8192, 1.4x slower at 640x512)
BLOCK_NB = ((256, 128), (1 << 30, 64))
# (max n, max batch * n, rows per trailing GEMM): one GEMM per step (no chunks, twice the flops)
# when the batch is small (fewer launches: 4x1024 857 -> 754 us, 16x512 403 -> 382) and at n = 2048
# (split operands: 8x2048 2853 -> 2348 against 256-row chunks), 256-row chunks for large batches
# (640x512 3398 vs 3672 unchunked, 60x1024 1944 vs 2235), and 2048 or 4096 rows for single large
# matrices (unchunked is 1.4-3x slower from n = 8192). H200, 368c49a-0c2bdaf.
TRAILING_CHUNK_ROWS = ((1024, 8192, 1 << 30), (1024, 1 << 62, 256), (2048, 1 << 62, 1 << 30),
                       (8192, 1 << 62, 2048), (1 << 30, 1 << 62, 4096))
# (max n, max batch * n, trailing product): "fp32" (SIMT GEMMs), or "split_tf32": three TF32 tensor-core products
# summed in one GEMM of depth 3 nb (model.tf32_split), ~21 bits, with cholesky_split.cu writing the
# operands. Split from n = 2048: 1x32768 437 -> 218 ms, 1x16384 68 -> 39, 1x8192 13.8 -> 10.0,
# 2x4096 5.2 -> 4.1, 8x2048 2.6 -> 2.1 (H200, eb7f279-1b4f48f); below, and at 2x2048 (1.61 fp32
# against 1.94 split, 1b4f48f), its extra work does not pay.
# Plain TF32 (~11 bits) is unsafe at any n: its error exceeds the 1e-3..1e-4 damping of the lowrank
# family, the trailing matrix loses definiteness and L overflows (H200, 7ae5206: 2x1024 and 3x1537
# lowrank failed).
TRAILING_PRODUCT = ((1024, 1 << 62, "fp32"), (2048, 4096, "fp32"), (1 << 30, 1 << 62, "split_tf32"))
# (max n, max batch * n, driver) for n > 128: "tf32x3" (cholesky_blocked.cu: one call, our tensor-core
# products; its row offsets are 32-bit, n <= 46340) or "library" (blocked_cholesky: a Python loop over
# cuBLAS GEMMs, the tables above). The one call removes ~25 us of host time per step and, with the
# wgmma products (H200 sweep at 23aa9a4 + no clone, us, tf32x3 / library): 1x16384 34815/37361;
# with two levels (OUTER_PANEL) it also wins at 1x32768 (H200 sweep at 19a3b0b, ms: 177.6 / 218.1).
BLOCKED_DRIVER = ((46340, 1 << 62, "tf32x3"), (1 << 30, 1 << 62, "library"))
# (max n, look-ahead) of the tf32x3 driver (cholesky_lookahead.cu, H200 only; taken where the diagonal
# blocks are 16 x 16 tiled): the trailing update's launch also factors the next diagonal block. It pays
# where one matrix's chain of diagonal blocks is long. H200 sweep at de3f7a4, 11 rounds (us, on / off):
# 8x2048 1387 / 1484, 1x4096 2132 / 2338, 2x4096 2548 / 2835, 1x8192 6010 / 7539; 2x2048 1058 / 1054;
# up to n = 1024 it costs (64x256 140 / 121, 16x512 290 / 244, 4x1024 548 / 507, 60x1024 1081 / 1065):
# the fused launch runs one CTA per SM against the plain product's three.
LOOKAHEAD = ((1024, 0), (1 << 30, 1))
# (max n, outer panel) of the tf32x3 driver's two-level loop (cholesky_blocked.cu blocked_two_level; 0: one
# level): nb-column blocks inside outer panels, one K = outer trailing update per outer panel (less
# memory traffic for the trailing matrix, read and written once per outer panel instead of once per
# block). H200 sweep at 19a3b0b (ms; one level / outer 256 / 512 / 1024): 1x16384 34.2 / 30.1 / 28.0 /
# 27.3, 1x32768 257.3 / 205.1 / 196.6 / 177.6; at 1x8192 one level with the look-ahead wins (6.33 /
# 6.91 / 6.63 / 6.61).
OUTER_PANEL = ((8192, 0), (1 << 30, 1024))
# "auto": wgmma products on the H200, mma.sync elsewhere; "portable": mma.sync everywhere (the path the
# B200 and other non-Hopper GPUs take, checked and timed on the H200 with a sweep variant).
PRODUCTS = "auto"


def first_row(table, *keys: int):
    """The value of the first (bound, ..., value...) row whose bounds cover every key."""
    for row in table:
        if all(key <= bound for key, bound in zip(keys, row)):
            rest = row[len(keys):]
            return rest[0] if len(rest) == 1 else rest
    raise ValueError(f"cholesky: no table row covers {keys}")


def by_n(table, n: int):
    """The value of the first (max n, value...) row that covers n."""
    return first_row(table, n)


NULL = None   # a missing optional pointer (ctypes passes 0)


def diag_shape(w: int) -> tuple[int, int]:
    """(TDIM, TS) of cholesky_tiled.cu for diagonal blocks of width w: the whole-matrix shape of that width
    (cholesky_tiled.cu builds two shapes, to keep the cold compile short)."""
    return by_n(TILED_SHAPE, w)


def factor_diag_cuda(L: torch.Tensor, k0: int, w: int, top: torch.Tensor, X: torch.Tensor | None) -> None:
    """The tiled kernel on the diagonal block, in place, with the signature of model.factor_diag_model."""
    b, n, _ = L.shape
    block = L[:, k0:, k0:]                      # data_ptr() points at L[:, k0, k0]
    CUDA.call("cholesky_tiled", block, block, X, top, b, w, n, n * n, *diag_shape(w), first_row(DIAG_HALVES, b))


def panel_cuda(L: torch.Tensor, k0: int, w: int, X: torch.Tensor, split_tf32: bool, workspace: torch.Tensor):
    """The panel step with the signature of model.panel_model: cuBLAS's GEMM for L21, then (split)
    cholesky_split.cu writes it back and writes the split operands in one pass instead of ~8 ops."""
    if not split_tf32:
        return panel_model(L, k0, w, X, split_tf32, workspace)
    b, n, _ = L.shape
    m = n - k0 - w
    L21 = l21_view(workspace, b, m, w)
    torch.matmul(L[:, k0 + w:, k0:k0 + w], X.mT, out=L21)
    left, right = split_views(workspace, b, m, w)
    CUDA.call("cholesky_split", L21, L[:, k0 + w:, k0:], left, right, b, m, w, n, n * n)
    return left, right


Run = Callable[[torch.Tensor], torch.Tensor]   # a plan: the contiguous batch in, L out


def launch_plan(entry, *args, keep: tuple = ()) -> Run:
    """A plan that calls entry(A, L, *args) into a fresh L; keep: the tensors args point into (alive with the
    plan)."""
    def run(A: torch.Tensor) -> torch.Tensor:
        L = torch.empty_like(A)
        entry(A.data_ptr(), L.data_ptr(), *args)
        return L
    run.keep = keep
    return run


def small_plan(b: int, n: int) -> Run:
    """cholesky_small.cu, one warp per matrix."""
    return launch_plan(CUDA.function("cholesky_small", "ppiii"), b, n, SMALL_WARPS_PER_CTA)


def tiled_plan(b: int, n: int) -> Run:
    """cholesky_tiled.cu on whole matrices, one CTA per matrix."""
    return launch_plan(CUDA.function("cholesky_tiled", "ppppiiiiiii"), NULL, NULL, b, n, n, n * n,
                       *by_n(TILED_SHAPE, n), 0)


def blocked_tf32x3_plan(b: int, n: int, nb: int, device: torch.device) -> Run:
    """cholesky_blocked.cu: the whole blocked factorization in one call (model.blocked_tf32x3_model), into an
    L it writes whole (the factor and zeros above it). Its workspace (the diagonal blocks' inverses, then
    max_i a_ii) and, where the look-ahead may run, the buffer its panels go to are the plan's, allocated
    once."""
    work = torch.empty(b * nb * nb + b, dtype=torch.float32, device=device)
    lookahead, outer = by_n(LOOKAHEAD, n), by_n(OUTER_PANEL, n)
    panels = lookahead and not outer and nb == 128    # the look-ahead's out-of-place panels
    panel = torch.empty(b * (n - nb) * nb if panels else 0, dtype=torch.float32, device=device)
    return launch_plan(CUDA.function("cholesky_blocked", "ppppiiiiiiiii"), work.data_ptr(),
                       panel.data_ptr() if panels else NULL, b, n, nb, *diag_shape(nb), first_row(DIAG_HALVES, b),
                       lookahead, outer, int(PRODUCTS == "portable"), keep=(work, panel))


def plan(data: torch.Tensor) -> Run:
    """The route for every batch of data's shape, dtype and device, with the tables read once: a function
    of the contiguous batch. Raises ValueError for a batch that is not b x n x n float32."""
    if data.dim() != 3 or data.shape[-1] != data.shape[-2] or data.dtype != torch.float32:
        raise ValueError(f"cholesky: expected a batch x n x n float32 tensor, got {data.dtype} "
                         f"of shape {tuple(data.shape)}")
    batch, n = data.shape[0], data.shape[-1]
    if data.numel() == 0:
        return torch.empty_like
    if n <= BLOCK_MAX_N:
        if not data.is_cuda:
            return right_looking_model
        return small_plan(batch, n) if n <= SMALL_MAX_N else tiled_plan(batch, n)
    nb = by_n(BLOCK_NB, batch)
    factor_diag_cpu = functools.partial(factor_diag_model, halves=bool(first_row(DIAG_HALVES, batch)))
    if first_row(BLOCKED_DRIVER, n, batch * n) == "tf32x3":
        if not data.is_cuda:
            return lambda A: blocked_tf32x3_model(A, nb, factor_diag_cpu)
        return blocked_tf32x3_plan(batch, n, nb, data.device)
    factor_diag, solve_panel = (factor_diag_cuda, panel_cuda) if data.is_cuda else (factor_diag_cpu, panel_model)
    split_tf32 = first_row(TRAILING_PRODUCT, n, batch * n) == "split_tf32"
    chunk_rows = first_row(TRAILING_CHUNK_ROWS, n, batch * n)
    return lambda A: blocked_cholesky(A, nb, chunk_rows, factor_diag, solve_panel, split_tf32)


def tunables() -> tuple:
    """Every table a plan reads (a plan made before one of them changed, as scripts/sweep_route.py
    changes them between variants, is made again)."""
    return (SMALL_WARPS_PER_CTA, TILED_SHAPE, DIAG_HALVES, BLOCK_NB, TRAILING_CHUNK_ROWS, TRAILING_PRODUCT,
            BLOCKED_DRIVER, LOOKAHEAD, OUTER_PANEL, PRODUCTS)


PLANS: dict = {}   # (shape, dtype, device) -> [(tunables(), plan), ...], the latest first
KEPT_PLANS = 4     # per shape: a sweep alternates a few variants, each keeps its plan


def custom_kernel(data: torch.Tensor) -> torch.Tensor:
    """Cholesky factor of a batch of SPD matrices: L lower triangular, positive diagonal, A = L L^T.
    The route's choice, its entry point and workspace are made once per shape (plan): looking them up
    and converting the arguments on every call cost 6-25 us of host time inside the timed call (H200)."""
    key, now = (data.shape, data.dtype, data.device), tunables()
    for made, run in PLANS.get(key, ()):
        if made == now:
            return run(data.contiguous())
    run = plan(data)
    PLANS[key] = [(now, run)] + PLANS.get(key, [])[:KEPT_PLANS - 1]
    return run(data.contiguous())
