"""Torch models of the cholesky kernels: the executable specification.

Same algorithm, same blocking and the same float32 operation order as the CUDA
parts, vectorized over the batch; CPU tests check them against the gates, and
the built submission runs them on CPU tensors. A factor returns per-matrix
flags (int32, 1 = a pivot was not positive and finite) as the kernels do.

- `right_looking_model`: spotf2-order Cholesky, fused with the forward
  substitution for inv(L) on request; cholesky_small.cu (one warp per matrix)
  and cholesky_tile.cu (one CTA per block) both do exactly this arithmetic.
- `factor_diag_model`: the tile kernel as the diagonal-block factor of
  `blocked_cholesky` (in place, with the inverse).
- `blocked_cholesky`: the blocked right-looking driver; the diagonal-block
  factor is a parameter, so the GPU route runs this very function with the
  CUDA tile kernel.
"""
import torch


def bad_pivot(d: torch.Tensor) -> torch.Tensor:
    """True where a pivot is not positive and finite (NaN included)."""
    return ~((d > 0) & (d < float("inf")))


def right_looking_model(A: torch.Tensor, with_inverse: bool = False):
    """Factor the lower triangle of each n x n matrix: returns (L, X or None, flags), X = inv(L).

    S holds L in its lower triangle and X^T in its strict upper triangle; step k
    updates S[r, c] -= u_r u_c for c > k and (r >= c or r <= k), with
    u = S[:, k] / l_kk except u_k = 1 / l_kk (cholesky_tile.cu's outline)."""
    b, n, _ = A.shape
    S = torch.tril(A)
    flags = torch.zeros(b, dtype=torch.int32, device=A.device)
    xdiag = torch.empty(b, n, dtype=A.dtype, device=A.device)
    for k in range(n):
        d = S[:, k, k].clone()
        flags |= bad_pivot(d).to(torch.int32)
        lkk = torch.sqrt(d)
        inv = 1.0 / lkk
        u = S[:, :, k] * inv[:, None]
        u[:, k] = inv
        xdiag[:, k] = inv
        trailing = u[:, k + 1:]
        S[:, k + 1:, k + 1:] -= torch.tril(trailing[:, :, None] * trailing[:, None, :])
        if with_inverse:
            S[:, :k + 1, k + 1:] -= u[:, :k + 1, None] * trailing[:, None, :]
            S[:, :k, k] = u[:, :k]
        S[:, k + 1:, k] = trailing
        S[:, k, k] = lkk
    L = torch.tril(S)
    if not with_inverse:
        return L, None, flags
    X = torch.tril(S.mT, diagonal=-1)
    X.diagonal(dim1=1, dim2=2).copy_(xdiag)
    return L, X, flags


def factor_diag_model(L: torch.Tensor, k0: int, w: int, flags: torch.Tensor) -> torch.Tensor:
    """Factor the diagonal block L[:, k0:k0+w, k0:k0+w] in place; OR its flags in; return inv(L11)."""
    block = L[:, k0:k0 + w, k0:k0 + w]
    L11, X, block_flags = right_looking_model(block, with_inverse=True)
    block.copy_(L11)
    flags |= block_flags
    return X


def trailing_update(A22: torch.Tensor, L21: torch.Tensor, chunk_rows: int) -> None:
    """A22 -= L21 L21^T on the lower part only: row chunks of chunk_rows, each up to its own last column.

    Each chunk [r0, r1) updates A22[r0:r1, :r1], so about half the flops of the
    full square are spent (plus a triangle per chunk, left in the unused upper part)."""
    m = A22.shape[1]
    for r0 in range(0, m, chunk_rows):
        r1 = min(m, r0 + chunk_rows)
        A22[:, r0:r1, :r1].baddbmm_(L21[:, r0:r1], L21[:, :r1].mT, alpha=-1.0)


def blocked_cholesky(A: torch.Tensor, nb: int, chunk_rows: int, factor_diag=factor_diag_model):
    """Blocked right-looking Cholesky: returns (L, flags).

    Per block column k0 (width w = min(nb, n - k0)): factor and invert the
    diagonal block, L21 = A21 inv(L11)^T (one batched GEMM), then
    A22 -= L21 L21^T (batched GEMMs on row chunks), and zero the block row to
    the right of the diagonal block (junk from the chunked updates lives there)."""
    if nb < 1 or chunk_rows < 1:
        raise ValueError(f"blocked_cholesky: nb ({nb}) and chunk_rows ({chunk_rows}) must be >= 1")
    L = A.clone()
    b, n, _ = L.shape
    flags = torch.zeros(b, dtype=torch.int32, device=A.device)
    for k0 in range(0, n, nb):
        w = min(nb, n - k0)
        X = factor_diag(L, k0, w, flags)
        if k0 + w == n:
            break
        panel = L[:, k0 + w:, k0:k0 + w]
        L21 = torch.matmul(panel, X.mT)
        panel.copy_(L21)
        trailing_update(L[:, k0 + w:, k0 + w:], L21, chunk_rows)
        L[:, k0:k0 + w, k0 + w:].zero_()
    return L, flags
