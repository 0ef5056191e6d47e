"""Our tridiagonal eigensolver on CUDA (issue 10): tridiagonal_model.tridiagonal_eigh_model with its two
stages replaced by kernels. Not yet run on a GPU.

    scaling, tear, recursion   torch (the model's: a power of two per matrix, one call per tree node shape)
    leaves                     tridiagonal_leaf.cu: one launch per leaf level (warp per leaf)
    merge up to the GEMM       tridiagonal_merge.cu: one launch per merge level (CTA per matrix)
    back-multiplication        torch batched matmuls (tridiagonal_model.back_multiply) between the launches,
                               until a kernel (tensor cores at fp32 accuracy, skipping deflated columns) does it
"""
import torch

from parts.common.cuda_loader import CUDA  # popkit: inline
from parts.eigh.tridiagonal_model import LEAF_SIZE, back_multiply, tridiagonal_eigh_model  # popkit: inline

LEAF_MAX = 32                     # tridiagonal_leaf.cu: one lane per eigenvalue


def solve_leaves_cuda(d: torch.Tensor, e: torch.Tensor):
    """tridiagonal_model.solve_leaf on tridiagonal_leaf.cu: (w, Z) of a batch of leaves of m <= 32 rows."""
    b, m = d.shape
    d, e = d.contiguous(), e.contiguous()
    w = torch.empty_like(d)
    Z = torch.empty(b, m, m, dtype=d.dtype, device=d.device)
    CUDA.call("eigh_tridiagonal_leaves", d, e, w, Z, b, m)
    return w, Z


def merge_cuda(w1, Z1, w2, Z2, beta):
    """tridiagonal_model.merge on tridiagonal_merge.cu, then the back-multiplication in torch."""
    b, n1 = w1.shape
    n = n1 + w2.shape[1]
    values = torch.empty(b, n, dtype=w1.dtype, device=w1.device)
    S = torch.empty(b, n, n, dtype=w1.dtype, device=w1.device)
    Z1, Z2 = Z1.contiguous(), Z2.contiguous()
    CUDA.call("eigh_tridiagonal_merge", w1.contiguous(), Z1, w2.contiguous(), Z2, beta.contiguous(), values, S,
              b, n1, n - n1)
    return values, back_multiply(Z1, Z2, S)


def tridiagonal_eigh_cuda(d: torch.Tensor, e: torch.Tensor, leaf_size: int = LEAF_SIZE):
    """(w, Z) of tridiag(e, d, e) as tridiagonal_eigh_model, its leaves and merges on our kernels (float32, CUDA)."""
    if d.dtype != torch.float32 or not d.is_cuda or not 1 <= leaf_size <= LEAF_MAX:
        raise ValueError(f"need float32 CUDA tensors and leaf_size in 1..{LEAF_MAX}; got {d.dtype} on {d.device}, "
                         f"{leaf_size}")
    return tridiagonal_eigh_model(d, e, leaf_size, solve_leaves_cuda, merge_cuda)
