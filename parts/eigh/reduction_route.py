"""Our dense eigh route (issue 10), where route.reduction_for(n) says "ours": on the H200 since 2026-12-02.

The pipeline is reduction_model.eigh_pipeline_model with step 2 replaced by tridiagonal_reduction.cu:
    prescale           torch (the model's prescale: an exact power of two per matrix)
    tridiagonalize     tridiagonal_reduction.cu: the panel kernel and the rank-2k update, one call
    solve T            tridiagonal_route.tridiagonal_eigh_cuda: tridiagonal_leaf.cu, tridiagonal_merge.cu and
                       torch batched matmuls for the merges' back-multiplication
    back-transform     apply_q_model, torch batched matmuls in fp32 (placeholder for the compact-WY GEMMs)
"""
import functools

import torch

from parts.common.cuda_loader import CUDA  # popkit: inline
from parts.eigh.reduction_model import PANEL, eigh_pipeline_model  # popkit: inline
from parts.eigh.tridiagonal_route import tridiagonal_eigh_cuda  # popkit: inline

# The panel kernel's CTA size (a multiple of 32, at most 512): a guess to sweep on the GPU
# (512 gives two CTAs an SM at the kernel's <= 64 registers).
PANEL_THREADS = 512
# The form of the panel kernel's matrix-vector product A22 v: "rows" (every trailing row dotted with v, the reference)
# or "tiles" (32 x 32 tiles on and below the diagonal, each read once for its products with v and its transpose's:
# half the bytes, more loads in flight; runs at PANEL_THREADS 512 only). Tiles: 0.64-0.83x the reduction's time at
# every benchmark shape, same similarity (H200, logs/device/20261202T1015Z-aa6375e-eigh_symv_rows_tiles.txt).
SYMV = "tiles"
SYMV_FORMS = {"rows": 0, "tiles": 1}            # tridiagonal_reduction.cu's `symv` argument
# CTAs a matrix for the panel kernel, by n (a thread block cluster of 2, 4, 8 or 16 splitting the tiles form's A22 v,
# n % 4 == 0; an n not listed: 1, one CTA). Keys are ints, or the strings a JSON object gives (scripts' --set
# '{"CLUSTER": {"2048": 16}}'). Empty until measured on a GPU (tridiagonal_reduction.cu's outline).
CLUSTER = {}
CLUSTER_SIZES = (1, 2, 4, 8, 16)


def cluster_for(n: int) -> int:
    """CLUSTER's CTAs a matrix at n (1 where n is not listed); a size the kernel does not take is a ValueError."""
    cluster = CLUSTER.get(n, CLUSTER.get(str(n), 1))
    if cluster not in CLUSTER_SIZES or (cluster > 1 and (SYMV != "tiles" or n % 4)):
        raise ValueError(f"CLUSTER {cluster!r} at n {n}: one of {CLUSTER_SIZES}, over 1 only with SYMV tiles and "
                         "n % 4 == 0")
    return cluster


def tridiagonalize_cuda(A: torch.Tensor, panel: int = PANEL, overwrite: bool = False):
    """tridiagonal_reduction.cu with reduction_model.tridiagonalize_model's signature and outputs (d, e, V, T).

    overwrite=True lets the kernel work in A itself (A's entries are then lost): a caller whose A is a
    temporary of its own saves a copy of the whole batch."""
    b, n, _ = A.shape
    if A.shape != (b, n, n) or panel != PANEL:
        raise ValueError(f"need A (batch, n, n) and panel {PANEL} (the kernel's); got {tuple(A.shape)}, {panel}")
    if SYMV not in SYMV_FORMS:
        raise ValueError(f"SYMV {SYMV!r}: one of {', '.join(SYMV_FORMS)}")
    reflectors = max(n - 2, 0)
    trailing = A if overwrite else A.clone()          # the kernel leaves the trailing matrices in it
    d = torch.empty(b, n, dtype=A.dtype, device=A.device)
    e = torch.empty(b, max(n - 1, 0), dtype=A.dtype, device=A.device)
    V = torch.empty(b, n, reflectors, dtype=A.dtype, device=A.device)
    T = torch.empty(b, reflectors, min(panel, reflectors), dtype=A.dtype, device=A.device)
    Vp = torch.empty(b, n, panel, dtype=A.dtype, device=A.device)     # the panel's V and W, row-major
    W = torch.empty(b, n, panel, dtype=A.dtype, device=A.device)
    CUDA.call("eigh_tridiagonalize", trailing, d, e, V, T, Vp, W, b, n, PANEL_THREADS, SYMV_FORMS[SYMV],
              cluster_for(n))
    return d, e, V, T


def reduction_eigh_cuda(A: torch.Tensor):
    """(Q, L) through our reduction and tridiagonal kernels and the model's back-transform on the GPU."""
    # The pipeline hands step 2 its own prescaled copy of A: the kernel may work in it.
    in_place = functools.partial(tridiagonalize_cuda, overwrite=True)
    return eigh_pipeline_model(A, PANEL, in_place, tridiagonal_eigh_cuda)
