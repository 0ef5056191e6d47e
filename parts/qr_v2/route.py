"""qr_v2 routes: which algorithm factors a batch, by n and by device.

| n            | CUDA route                                              | CPU (model)          |
|--------------|---------------------------------------------------------|----------------------|
| <= 64        | householder_small.cu: whole QR on chip, one CTA/matrix,  | householder_qr_model |
|              | or (n <= 32, by SMALL_KERNEL) householder_warp.cu: a warp |                      |
| <= 4096      | blocked_qr: householder_panel.cu (a CTA or, by           | blocked_qr (model)   |
|              | PANEL_CLUSTER, a cluster of CTAs per panel) + the        |                      |
|              | trailing update by BLOCKED_VARIANT: cuBLAS fp32,         |                      |
|              | householder_update.cu, or both kernels from one C++ loop |                      |
|              | (householder_blocked.cu); where the first panel would be |                      |
|              | under 16 columns wide (tall, batch over the cluster rows)|                      |
|              | torch.geqrf                                              |                      |
| larger       | torch.geqrf (cuSOLVER)                                   | torch.geqrf          |

Every route is Householder QR with geqrf's reflector convention, so each
matrix is factored on its own merits: rank-deficient, clustered or
near-collinear columns need no detection (a zero column gives tau = 0).
"""
import torch

from parts.common.cuda_loader import CUDA  # popkit: inline
from parts.qr_v2.model import apply_block_reflector, blocked_qr, householder_qr_model  # popkit: inline

SMALL_MAX_N = 64
# The n <= SMALL_MAX_N kernel by n (n <= bound -> kernel): "smem" (householder_small.cu) or "warp"
# (householder_warp.cu, n <= 32: a matrix per warp, no CTA barrier). H200, sweep_route at cc0382a
# (logs/device/20261201T1915Z-*): warp against smem at 20x32 1.99x (32.5 against 64.8 us).
SMALL_KERNEL = ((32, "warp"), (64, "smem"))
PANEL_WIDTH = 32
# The panel kernel's CTA size cap (fewer threads own more rows each). 256 up to 512 rows (ec11348)
# lets two CTAs share an SM: 640x512 0.96x, but 40x352 1.04x (40 CTAs leave SMs idle, so fewer
# threads only lengthen each), hence the cap by batch below. 256 above 512
# rows puts 4 rows a thread in 16-column panels (60x1024 1.30x in sweep_route at d11541b).
PANEL_MAX_THREADS = 512
# ... and by n and batch, the first row (max n, min batch, threads) that fits: a batch that fills the
# GPU's SMs twice over takes 256 up to n = 512 (two rows a thread, still 32 columns): 640x512 0.984x
# (sweep_route after the lazy panel scaling, run 31d). At 1024 < n <= 2048 the panel runs beside the
# look-ahead update (LOOKAHEAD) and takes 256, which leaves an SM room for both: with look-ahead at 132,
# against 512-thread panels, 8x2048 0.98x (sweep_route, run 33d, logs/device/20261202T0255Z-*).
PANEL_THREADS_BY_BATCH = ((512, 264, 256), (1024, 1, 512), (2048, 1, 256))


def panel_threads(n: int, batch: int) -> int:
    """The panel kernel's CTA size cap for a batch of n x n matrices."""
    return next((threads for max_n, min_batch, threads in PANEL_THREADS_BY_BATCH
                 if n <= max_n and batch >= min_batch), PANEL_MAX_THREADS)

# Matrices of n <= PANEL_COLUMNS_MAX_N send their panels to householder_panel_columns.cu (lane = column,
# ~1/3 of the instructions a column; panels of at most 512 rows a CTA). H200, sweep_route at f385eb2
# (logs/device/20261201T1900Z-*), every panel of <= 512 rows a CTA against the row kernel: 40x176 1.13x,
# 40x352 1.19x (40 CTAs: a shorter column chain is a shorter factorization), but 640x512 0.93x, 60x1024
# 0.99x, 8x2048 0.98x (with a CTA on every SM, the row kernel's work per column is no longer exposed).
PANEL_COLUMNS_MAX_N = 352
COLUMNS_MAX_ROWS = 512   # the column kernel's limit, rows a CTA
# How the blocked route runs, by n (n <= bound -> variant): "fp32" (a Python loop: the panel kernel, then
# cuBLAS batched SGEMMs), "tf32x3" (the same loop, householder_update.cu on TF32 tensor cores at ~21
# bits) or "one_call" (householder_blocked.cu: that loop in C++, one call a factorization).
# H200, sweep_route at 97f3e52 (logs/device/20261201T1705Z-*): one_call against fp32 at 40x176 3.2x,
# 40x352 2.3x, 640x512 1.26x, 60x1024 1.23x, 8x2048 1.26x (tf32x3 alike but for the host time between
# launches at 40x176); gate fractions 0.002-0.012 of 1 either way.
BLOCKED_VARIANT = ((1 << 30, "one_call"),)
# CTAs per panel by n and batch (n <= bound and batch <= bound -> cluster size 1, 2, 4 or 8): a thread
# block cluster splits a panel's rows and adds its partial sums through distributed shared memory, so
# a small batch of tall panels uses more SMs and keeps 32 columns. H200, sweep_route at 70cadd5
# (logs/device/20261201T1725Z-*): against one CTA a panel, 2x4096 at 8 CTAs 1.90x (against geqrf,
# the route one CTA leaves to it), 8x2048 at 8 CTAs 1.75x, 60x1024 at 2 CTAs 1.07x.
PANEL_CLUSTER = ((512, 1 << 30, 1), (1024, 60, 2), (2048, 8, 8), (4096, 2, 8), (1 << 30, 1 << 30, 1))
BLOCKED_MAX_N = 4096     # above it, or where the panel would narrow below 16 columns: geqrf


def qr_small_cuda(A: torch.Tensor, kernel: str = "smem"):
    """householder_small.cu ("smem") or householder_warp.cu ("warp", n <= 32) on the whole batch."""
    b, n, _ = A.shape
    H = torch.empty_like(A)
    tau = torch.empty(b, n, dtype=A.dtype, device=A.device)
    CUDA.call("qr_warp" if kernel == "warp" else "qr_small", A, H, tau, b, n)
    return H, tau


def panel_cluster(n: int, batch: int) -> int:
    return next(size for max_n, max_batch, size in PANEL_CLUSTER if n <= max_n and batch <= max_batch)


def columns_max_rows(n: int) -> int:
    """Rows a CTA up to which an n x n factorization's panels take the column kernel (0: none)."""
    return COLUMNS_MAX_ROWS if n <= PANEL_COLUMNS_MAX_N else 0


def factor_panel_cuda(H: torch.Tensor, tau: torch.Tensor, k0: int, w: int):
    """The CUDA panel kernel, with the signature of model.factor_panel_model."""
    b, n, _ = H.shape
    Vt = torch.empty(b, w, n - k0, dtype=H.dtype, device=H.device)
    T = torch.empty(b, w, w, dtype=H.dtype, device=H.device)
    CUDA.call("qr_panel", H, tau, Vt, T, b, n, k0, w, panel_threads(n, b), panel_cluster(n, b),
              columns_max_rows(n))
    return Vt, T


UPDATE_WIDTHS = (16, 32)  # the panel widths householder_update.cu is compiled for
# householder_update.cu splits a tile's rows over a cluster of 2, 4 or 8 CTAs while a launch has fewer
# CTAs than this (0: never): a small batch of tall matrices (2x4096: 128 CTAs on the first update, three
# slots an SM on 132 SMs) otherwise leaves most SMs idle. H200, sweep_route at 9fbbaf1 (logs/device/
# 20261201T1940Z-*), against never: 264 (two CTAs an SM) 2x4096 1.08x, 8x2048 1.03x, 60x1024 1.00x;
# 396 1.02x / 1.00x / 0.99x; 792 and up slower (8x2048 0.84x): the split halves each CTA's rows, but
# the W0 sums through distributed shared memory and the cluster scheduling eat most of the gain.
UPDATE_TARGET_CTAS = 264
# Look-ahead (householder_blocked.cu's qr_blocked_lookahead, one CUDA graph a factorization) by n and batch:
# the first row (max n, max batch, beside CTAs) that fits; beside CTAs is the row-split target of the part
# of each update that runs beside the next panel (0: no look-ahead, the one-call loop). At UPDATE_TARGET_CTAS
# the outputs are bitwise the loop's (same_outputs on all 12 benchmark cases, run 33d); lower leaves the
# panel room. H200, sweep_route at 6e03454 (run 33d, logs/device/20261202T0255Z-*), against the loop:
# 132 (about two of the 128-thread update CTAs an SM) with 256-thread panels above n = 1024: 2x4096 0.95x,
# 8x2048 0.97x, 60x1024 0.96x; 264: 1.03x / 1.01x / 0.99x. But the grader-style diff (run 34a, fresh
# inputs a call) gave 60x1024 0.964x, 8x2048 0.949x and 2x4096 1.045x slower: on for 512 < n <= 2048 up
# to the batches measured (60); n <= 512, n > 2048 and larger batches keep the loop.
LOOKAHEAD = ((512, 1 << 30, 0), (2048, 64, 132), (1 << 30, 1 << 30, 0))


def lookahead_ctas(n: int, batch: int) -> int:
    return next(ctas for max_n, max_batch, ctas in LOOKAHEAD if n <= max_n and batch <= max_batch)


def update_tf32x3_cuda(Vt: torch.Tensor, T: torch.Tensor, C: torch.Tensor) -> None:
    """householder_update.cu on C = H[:, k0:, k0 + w:] in place (model.apply_block_reflector's signature)."""
    b, w, m = Vt.shape
    if w in UPDATE_WIDTHS:
        CUDA.call("qr_update", C, C.stride(1), C.stride(0), Vt, T, b, m, C.shape[2], w, UPDATE_TARGET_CTAS)
    else:
        apply_block_reflector(Vt, T, C)


def blocked_one_call_cuda(A: torch.Tensor):
    """householder_blocked.cu: the whole blocked factorization in one call (model.blocked_qr with the
    tf32x3 update); Vt and T in one workspace for every panel, two with look-ahead (by panel parity)."""
    b, n, _ = A.shape
    H = A.clone()
    tau = torch.empty(b, n, dtype=A.dtype, device=A.device)
    beside = lookahead_ctas(n, b)
    buffers, w = (2 if beside else 1), UPDATE_WIDTHS[-1]
    Vt = torch.empty(buffers, b, w, n, dtype=A.dtype, device=A.device)
    T = torch.empty(buffers, b, w, w, dtype=A.dtype, device=A.device)
    common = (H, tau, Vt, T, b, n, panel_threads(n, b), panel_cluster(n, b), columns_max_rows(n), UPDATE_TARGET_CTAS)
    if beside:
        CUDA.call("qr_blocked_lookahead", *common, beside)
    else:
        CUDA.call("qr_blocked", *common)
    return H, tau


def first_row(table, key: int, allowed: tuple[str, ...]) -> str:
    """The value of a route table's first row whose bound is at least key, one of `allowed` (a misspelt
    value would otherwise pick the default route without a word)."""
    value = next((value for bound, value in table if key <= bound), None)
    if value not in allowed:
        raise ValueError(f"route table {table!r} gives {value!r} for n = {key}: expected one of {allowed}")
    return value


def panel_width_cuda(m: int, cluster: int = 1, threads: int = PANEL_MAX_THREADS) -> int:
    return CUDA.query("qr_panel_width", m, threads, cluster)


def fixed_panel_width(m: int) -> int:
    return PANEL_WIDTH


def custom_kernel(data: torch.Tensor):
    """Compact-Householder QR of a batch: returns (H, tau) as torch.geqrf does."""
    A = data.contiguous()
    n = A.shape[-1]
    if not A.is_cuda:
        return householder_qr_model(A) if n <= SMALL_MAX_N else blocked_qr(A, fixed_panel_width)
    if n <= SMALL_MAX_N:
        return qr_small_cuda(A, first_row(SMALL_KERNEL, n, ("smem", "warp")))
    cluster, threads = panel_cluster(n, A.shape[0]), panel_threads(n, A.shape[0])
    if n <= BLOCKED_MAX_N and panel_width_cuda(n, cluster, threads) in UPDATE_WIDTHS:
        variant = first_row(BLOCKED_VARIANT, n, ("fp32", "tf32x3", "one_call"))
        if variant == "one_call":
            return blocked_one_call_cuda(A)
        update = update_tf32x3_cuda if variant == "tf32x3" else apply_block_reflector
        return blocked_qr(A, lambda m: panel_width_cuda(m, cluster, threads), factor_panel_cuda, update)
    return torch.geqrf(A)
