"""Torch models of the cholesky kernels: the executable specification.

Same algorithm, same blocking and the same float32 operation order as the CUDA parts where torch
allows, vectorized over the batch; CPU tests check them against the gates, and the built
submission runs them on CPU tensors.

- `pivot_floor`: eps * max_i a_ii per matrix. A pivot at or below it becomes it (a
  roundoff-level pivot of a numerically singular SPD matrix; NaN stays NaN): L stays finite with
  no host-side check, and A moves by at most ~2 floor, far inside the gate.
- `right_looking_model`: spotf2-order Cholesky, the arithmetic of cholesky_small.cu (one warp per
  matrix, n <= 32) and of cholesky_tiled.cu (n <= 128); `inverse_model` is cholesky_tiled.cu's
  inverse: column elimination of L X = I beside the factorization. With step = TILED_STEP both are
  tiled_block.cuh's grouped steps (4 columns, one rank-4 update each), which the 128-blocks with the
  inverse take (factor_diag_model says which); `halves_model` is such a block as two 64-blocks.
- `blocked_cholesky`: the blocked right-looking driver with library GEMMs; the diagonal-block
  factor is a parameter, so the GPU route runs this very function with the CUDA block kernel. Its
  trailing update is fp32, or "split TF32" (tf32_model.tf32_split): three TF32 tensor-core products whose
  sum carries ~21 bits.
- `blocked_tf32x3_model`: cholesky_blocked.cu, the same loop with our own tensor-core products
  (tf32_model.tf32x3_product) for the panel and the trailing update, in one CUDA call (also the H200's
  look-ahead, cholesky_lookahead.cu: the same operations, the next diagonal block factored inside
  the trailing update's launch); `blocked_two_level_model` its two-level order (outer panels with
  one K = outer update each).
"""
import torch

from parts.common.tf32_model import matmul_precision, tf32_split, tf32x3_product  # popkit: inline

EPS = 1.1920928955078125e-07      # float32 machine epsilon
TINY = 1.1754943508222875e-38     # smallest normal float32: the floor of an all-zero diagonal
TILED_STEP = 4                    # columns per grouped step of cholesky_tiled.cu (tiled_block.cuh kStep)
HALF = 64                         # rows of the first half of a block by halves (tiled_block.cuh kHalf)


def diagonal_max(A: torch.Tensor) -> torch.Tensor:
    """max_i a_ii of each matrix: what the kernels derive their pivot floor from."""
    return A.diagonal(dim1=-2, dim2=-1).amax(dim=-1)


def floor_from_max(top: torch.Tensor) -> torch.Tensor:
    """eps * max_i a_ii (float32, one per matrix), never below the smallest normal."""
    floor = top * EPS
    return torch.where(floor > 0, floor, torch.full_like(floor, TINY))


def pivot_floor(A: torch.Tensor) -> torch.Tensor:
    """The pivot floor of each matrix: eps * max_i a_ii, never below the smallest normal."""
    return floor_from_max(diagonal_max(A))


def right_looking_model(A: torch.Tensor, floors: torch.Tensor | None = None, step: int = 1) -> torch.Tensor:
    """Factor the lower triangle of each n x n matrix; pivots at or below the floor become the floor.
    step = 1: spotf2 order, column by column (cholesky_small.cu). step > 1: cholesky_tiled.cu's order
    (tiled_block.cuh, kStep = 4): per group of `step` columns, the group's diagonal block column by column,
    the rows below it by forward substitution with that block, then one rank-`step` trailing update."""
    n = A.shape[-1]
    floors = pivot_floor(A) if floors is None else floors
    S = torch.tril(A)
    for k0 in range(0, n, step):
        k1 = min(n, k0 + step)
        inverses = []
        for k in range(k0, k1):                 # the group's diagonal block, column by column
            d = S[:, k, k]
            d = torch.where(d <= floors, floors, d)
            inv = torch.rsqrt(d)                # popkit::cholesky_pivot: 1 / l_kk = rsqrt(d), l_kk = d / l_kk
            S[:, k + 1:k1, k] *= inv[:, None]
            S[:, k, k] = d * inv
            column = S[:, k + 1:k1, k]
            S[:, k + 1:k1, k + 1:k1] -= torch.tril(column[:, :, None] * column[:, None, :])
            inverses.append(inv)
        for q, k in enumerate(range(k0, k1)):   # the rows below: forward substitution with the block
            S[:, k1:, k] -= (S[:, k1:, k0:k] * S[:, k, None, k0:k]).sum(-1)
            S[:, k1:, k] *= inverses[q][:, None]
        panel = S[:, k1:, k0:k1]
        S[:, k1:, k1:] -= torch.tril(panel @ panel.mT)
    return torch.tril(S)


def inverse_model(L: torch.Tensor, step: int = 1) -> torch.Tensor:
    """inv(L) by elimination of L X = I in cholesky_tiled.cu's order: per group of `step` rows, those rows of
    X by forward substitution with the group's diagonal block (1 / l_kk as the factor's rsqrt), then
    X[r, :k1] -= L[r, k0:k1] X[k0:k1, :k1] for the rows r below."""
    b, n, _ = L.shape
    X = torch.eye(n, dtype=L.dtype, device=L.device).expand(b, n, n).clone()
    for k0 in range(0, n, step):
        k1 = min(n, k0 + step)
        for k in range(k0, k1):
            X[:, k, :k1] -= (L[:, k, k0:k, None] * X[:, k0:k, :k1]).sum(1)
            X[:, k, :k1] *= (1.0 / L[:, k, k])[:, None]
        X[:, k1:, :k1] -= L[:, k1:, k0:k1] @ X[:, k0:k1, :k1]
    return X


def halves_model(A: torch.Tensor, floors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, inv(L)) of each block (n <= 128) as tiled_block.cuh's halves_steps: the first HALF columns and
    the rest each by grouped steps with their inverses, joined by L21 = A21 X11^T, A22 -= L21 L21^T and
    X21 = -X22 (L21 X11)."""
    n, h = A.shape[-1], min(A.shape[-1], HALF)

    def half(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        L = right_looking_model(M, floors, TILED_STEP)
        return L, inverse_model(L, TILED_STEP)

    A = torch.tril(A)
    L, X = torch.zeros_like(A), torch.zeros_like(A)
    L11, X11 = half(A[:, :h, :h])
    L[:, :h, :h], X[:, :h, :h] = L11, X11
    if n > h:
        L21 = A[:, h:, :h] @ X11.mT
        L22, X22 = half(A[:, h:, h:] - torch.tril(L21 @ L21.mT))
        L[:, h:, :h], L[:, h:, h:] = L21, L22
        X[:, h:, :h], X[:, h:, h:] = -(X22 @ (L21 @ X11)), X22
    return L, X


def factor_diag_model(L: torch.Tensor, k0: int, w: int, top: torch.Tensor, X: torch.Tensor | None,
                      halves: bool = False) -> None:
    """Factor the diagonal block L[:, k0:k0+w, k0:k0+w] in place (pivot floor from each whole
    matrix's max diagonal `top`); write inv(L11) into X unless X is None. halves: the 128-blocks with the
    inverse by halves_model."""
    block = L[:, k0:k0 + w, k0:k0 + w]
    grouped = X is not None and w > 64          # cholesky_tiled.cu: 128-blocks with the inverse
    if grouped and halves:
        L11, X11 = halves_model(block, floor_from_max(top))
        block.copy_(L11)
        X.copy_(X11)
        return
    step = TILED_STEP if grouped else 1
    L11 = right_looking_model(block, floor_from_max(top), step)
    block.copy_(L11)
    if X is not None:
        X.copy_(inverse_model(L11, step))


def workspace_size(b: int, n: int, nb: int, split_tf32: bool) -> int:
    """Floats of the per-call workspace: L21 (b x m x nb, m = n - nb at most) and, split, left and right
    (b x m x 3nb each). One allocation per call: per-step temporaries of changing sizes miss the
    allocator's cache under the grader's timing loop (docs/priors.md)."""
    return b * max(n - nb, 0) * nb * (7 if split_tf32 else 1)


def l21_view(workspace: torch.Tensor, b: int, m: int, w: int) -> torch.Tensor:
    """The workspace's first b x m x w floats: L21."""
    return workspace[:b * m * w].view(b, m, w)


def split_views(workspace: torch.Tensor, b: int, m: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The workspace after L21: the split operands left and right, b x m x 3w each."""
    size = b * m * w
    return workspace[size:4 * size].view(b, m, 3 * w), workspace[4 * size:7 * size].view(b, m, 3 * w)


def panel_model(L: torch.Tensor, k0: int, w: int, X: torch.Tensor, split_tf32: bool, workspace: torch.Tensor):
    """L21 = A21 inv(L11)^T in place below the diagonal block; returns the trailing update's operands
    (left, right) as views of the workspace: (L21, L21), or the split pair [hi hi lo], [hi lo hi]
    (cholesky_split.cu's pass)."""
    b, n, _ = L.shape
    m = n - k0 - w
    panel = L[:, k0 + w:, k0:k0 + w]
    L21 = l21_view(workspace, b, m, w)
    torch.matmul(panel, X.mT, out=L21)
    panel.copy_(L21)
    if not split_tf32:
        return L21, L21
    hi, lo = tf32_split(L21)
    left, right = split_views(workspace, b, m, w)
    torch.cat([hi, hi, lo], dim=-1, out=left)
    torch.cat([hi, lo, hi], dim=-1, out=right)
    return left, right


def trailing_update(A22: torch.Tensor, left: torch.Tensor, right: torch.Tensor, chunk_rows: int,
                    tf32: bool = False) -> None:
    """A22 -= left right^T on the lower part only: row chunks of chunk_rows, each up to its own last column.

    Each chunk [r0, r1) updates A22[r0:r1, :r1], so about half the flops of the full square are
    spent (plus a triangle per chunk, left in the unused upper part). tf32: the GEMMs run on
    tensor cores (for the split operands of panel_model)."""
    m = A22.shape[1]
    with matmul_precision("tf32" if tf32 else "ieee"):
        for r0 in range(0, m, chunk_rows):
            r1 = min(m, r0 + chunk_rows)
            A22[:, r0:r1, :r1].baddbmm_(left[:, r0:r1], right[:, :r1].mT, alpha=-1.0)


def factor_blocks(L: torch.Tensor, nb: int, factor_diag=factor_diag_model):
    """Walk L's diagonal blocks in place (L holds A on entry): factor each one, pivot floors from
    A's max diagonal, and yield (k0, w, X = inv(L11)) for every block with a panel below it (the
    last block is factored without an inverse)."""
    b, n, _ = L.shape
    top = diagonal_max(L)
    inverses = torch.empty(b * nb * nb, dtype=L.dtype, device=L.device)
    for k0 in range(0, n, nb):
        w = min(nb, n - k0)
        if k0 + w == n:
            factor_diag(L, k0, w, top, None)
            return
        X = inverses[:b * w * w].view(b, w, w)
        factor_diag(L, k0, w, top, X)
        yield k0, w, X


def blocked_cholesky(A: torch.Tensor, nb: int, chunk_rows: int, factor_diag=factor_diag_model,
                     solve_panel=panel_model, split_tf32: bool = False) -> torch.Tensor:
    """Blocked right-looking Cholesky with library GEMMs.

    Per block column (factor_blocks): L21 = A21 inv(L11)^T in place (solve_panel), then
    A22 -= L21 L21^T (trailing_update; fp32, or split TF32 on tensor cores). The upper part, which
    holds A's upper triangle and the chunked updates' junk, is zeroed once at the end. The
    diagonal and panel steps are parameters, so the GPU route runs this driver with its kernels."""
    if nb < 1 or chunk_rows < 1:
        raise ValueError(f"blocked_cholesky: nb ({nb}) and chunk_rows ({chunk_rows}) must be >= 1")
    L = A.clone()
    b, n, _ = L.shape
    workspace = torch.empty(workspace_size(b, n, nb, split_tf32), dtype=A.dtype, device=A.device)
    for k0, w, X in factor_blocks(L, nb, factor_diag):
        left, right = solve_panel(L, k0, w, X, split_tf32, workspace)
        trailing_update(L[:, k0 + w:, k0 + w:], left, right, chunk_rows, split_tf32)
    return L.tril_()


def blocked_tf32x3_model(A: torch.Tensor, nb: int, factor_diag=factor_diag_model) -> torch.Tensor:
    """cholesky_blocked.cu: blocked right-looking Cholesky whose panel (L21 = A21 inv(L11)^T, in place)
    and trailing update (A22 -= L21 L21^T) are tf32x3 products; the upper part is zeroed at the end
    (the kernels write those zeros as they go, and read A without copying it)."""
    if nb < 1:
        raise ValueError(f"blocked_tf32x3_model: nb ({nb}) must be >= 1")
    L = A.clone()
    for k0, w, X in factor_blocks(L, nb, factor_diag):
        panel = L[:, k0 + w:, k0:k0 + w]
        panel.copy_(tf32x3_product(panel, X))
        L[:, k0 + w:, k0 + w:] -= tf32x3_product(panel, panel)
    return L.tril_()


def blocked_two_level_model(A: torch.Tensor, nb: int, outer: int) -> torch.Tensor:
    """cholesky_blocked.cu's two-level loop (blocked_two_level): nb-column blocks inside outer panels of
    `outer` columns. Each block's trailing update reaches only the columns of its outer panel; the rest
    of the matrix gets one update per outer panel with K = outer (the same sums, grouped differently)."""
    if nb < 1 or outer < nb or outer % nb:
        raise ValueError(f"blocked_two_level_model: outer ({outer}) must be a multiple of nb ({nb}) >= 1")
    L = A.clone()
    b, n, _ = L.shape
    top = diagonal_max(L)
    inverses = torch.empty(b, nb, nb, dtype=L.dtype, device=L.device)
    for s0 in range(0, n, outer):
        s1 = min(n, s0 + outer)
        for k0 in range(s0, s1, nb):
            w = min(nb, n - k0)
            if k0 + w == n:
                factor_diag_model(L, k0, w, top, None)
                return L.tril_()
            X = inverses[:, :w, :w]
            factor_diag_model(L, k0, w, top, X)
            panel = L[:, k0 + w:, k0:k0 + w]
            panel.copy_(tf32x3_product(panel, X))
            L[:, k0 + w:, k0 + w:s1] -= tf32x3_product(panel, panel[:, :s1 - k0 - w])
        if s1 < n:
            left = L[:, s1:, s0:s1]
            L[:, s1:, s1:] -= tf32x3_product(left, left)
    return L.tril_()
