"""Torch models of the cholesky kernels: the executable specification.

Same algorithm, same blocking and the same float32 operation order as the CUDA parts where torch
allows, vectorized over the batch; CPU tests check them against the gates, and the built
submission runs them on CPU tensors.

- `pivot_floor`: eps * max_i a_ii per matrix. A pivot at or below it becomes it (a
  roundoff-level pivot of a numerically singular SPD matrix; NaN stays NaN): L stays finite with
  no host-side check, and A moves by at most ~2 floor, far inside the gate.
- `right_looking_model`: spotf2-order Cholesky, the arithmetic of cholesky_small.cu (one warp per
  matrix, n <= 32) and cholesky_tiled.cu (n <= 128); `inverse_model` is cholesky_tiled.cu's
  forward substitution for inv(L).
- `blocked_cholesky`: the blocked right-looking driver; the diagonal-block factor is a parameter,
  so the GPU route runs this very function with the CUDA block kernel.
"""
import torch

EPS = 1.1920928955078125e-07      # float32 machine epsilon
TINY = 1.1754943508222875e-38     # smallest normal float32: the floor of an all-zero diagonal


def pivot_floor(A: torch.Tensor) -> torch.Tensor:
    """eps * max_i a_ii of each matrix (float32, one per matrix), never below the smallest normal."""
    top = A.diagonal(dim1=-2, dim2=-1).amax(dim=-1) * EPS
    return torch.where(top > 0, top, torch.full_like(top, TINY))


def right_looking_model(A: torch.Tensor, floors: torch.Tensor | None = None) -> torch.Tensor:
    """Factor the lower triangle of each n x n matrix; pivots at or below the floor become the floor."""
    n = A.shape[-1]
    floors = pivot_floor(A) if floors is None else floors
    S = torch.tril(A)
    for k in range(n):
        d = S[:, k, k]
        d = torch.where(d <= floors, floors, d)
        lkk = torch.sqrt(d)
        inv = 1.0 / lkk
        column = S[:, k + 1:, k] * inv[:, None]
        S[:, k + 1:, k] = column
        S[:, k, k] = lkk
        S[:, k + 1:, k + 1:] -= torch.tril(column[:, :, None] * column[:, None, :])
    return torch.tril(S)


def inverse_model(L: torch.Tensor) -> torch.Tensor:
    """inv(L) by forward substitution: x_c = 1 / l_cc, x_i = -(sum_{c <= k < i} l_ik x_k) / l_ii."""
    b, n, _ = L.shape
    X = torch.zeros_like(L)
    diag = L.diagonal(dim1=1, dim2=2)
    for i in range(n):
        partial = torch.matmul(L[:, i:i + 1, :i], X[:, :i, :]).squeeze(1)     # sum over k < i
        X[:, i, :] = -partial / diag[:, i:i + 1]
        X[:, i, i] = 1.0 / diag[:, i]
    return X


def factor_diag_model(L: torch.Tensor, k0: int, w: int, floors: torch.Tensor) -> torch.Tensor:
    """Factor the diagonal block L[:, k0:k0+w, k0:k0+w] in place; return inv(L11)."""
    block = L[:, k0:k0 + w, k0:k0 + w]
    L11 = right_looking_model(block, floors)
    block.copy_(L11)
    return inverse_model(L11)


def trailing_update(A22: torch.Tensor, L21: torch.Tensor, chunk_rows: int) -> None:
    """A22 -= L21 L21^T on the lower part only: row chunks of chunk_rows, each up to its own last column.

    Each chunk [r0, r1) updates A22[r0:r1, :r1], so about half the flops of the
    full square are spent (plus a triangle per chunk, left in the unused upper part)."""
    m = A22.shape[1]
    for r0 in range(0, m, chunk_rows):
        r1 = min(m, r0 + chunk_rows)
        A22[:, r0:r1, :r1].baddbmm_(L21[:, r0:r1], L21[:, :r1].mT, alpha=-1.0)


def blocked_cholesky(A: torch.Tensor, nb: int, chunk_rows: int, factor_diag=factor_diag_model) -> torch.Tensor:
    """Blocked right-looking Cholesky.

    Per block column k0 (width w = min(nb, n - k0)): factor and invert the diagonal block
    (pivot floors from the original matrix), L21 = A21 inv(L11)^T (one batched GEMM), then
    A22 -= L21 L21^T (batched GEMMs on row chunks), and zero the block row to the right of the
    diagonal block (junk from the chunked updates lives there)."""
    if nb < 1 or chunk_rows < 1:
        raise ValueError(f"blocked_cholesky: nb ({nb}) and chunk_rows ({chunk_rows}) must be >= 1")
    L = A.clone()
    n = L.shape[-1]
    floors = pivot_floor(A)
    for k0 in range(0, n, nb):
        w = min(nb, n - k0)
        X = factor_diag(L, k0, w, floors)
        if k0 + w == n:
            break
        panel = L[:, k0 + w:, k0:k0 + w]
        L21 = torch.matmul(panel, X.mT)
        panel.copy_(L21)
        trailing_update(L[:, k0 + w:, k0 + w:], L21, chunk_rows)
        L[:, k0:k0 + w, k0 + w:].zero_()
    return L
