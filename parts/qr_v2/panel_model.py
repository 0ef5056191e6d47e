"""Torch model of a multi-CTA panel factorization for qr_v2 (issue 9): the executable specification.

What it computes
    factor_panel_tsqr_hr(H, tau, k0, w) factors the panel P = H[:, k0:, k0:k0+w] (m = n - k0 rows) of
    every matrix in place, exactly as model.factor_panel_model does and with its signature: R on and
    above the panel's diagonal, the Householder tails below it, tau[:, k0:k0+w], and (Vt, T) with
    H_0 H_1 ... H_{w-1} = I - V T V^T for the compact-WY trailing update. blocked_qr_multi_cta_model
    runs model.blocked_qr with it, so (H, tau) is torch.geqrf's output: Q = H_0 ... H_{n-1},
    H_i = I - tau_i v_i v_i^T, v_i = (0, ..., 0, 1, H[i+1:, i]), R = triu(H).
    The work of one panel is spread over many row blocks (one CTA each) instead of one CTA per matrix.

The math: TSQR, then Householder reconstruction (Ballard et al., "Reconstructing Householder vectors
from tall-skinny QR", IPDPS 2014 / JPDC 2015; LAPACK's sorhr_col)
    1. Leaves. Split P into row blocks of r rows (r >= w; the last one padded with zero rows) and
       Householder-factor each block alone: P_k = Q_k R_k, Q_k explicit (r x w), R_k (w x w).
    2. Tree. Stack fan_in of the R's (missing children are zero blocks), factor the stack the same
       way, repeat until one R is left: P = Q1 R, Q1 = (block-diagonal leaf Q's) (tree Q's) [I_w; 0].
    3. Q1. Walk down: the root's coefficient block is C = I_w; a node's children get the row
       slices of Q_node C; a leaf's rows of Q1 are Q_k C_k (an r x w by w x w product).
    4. Reconstruction. Find a unit lower trapezoidal Y, signs S = diag(s) and tau with
           (I - Y T Y^T)[:, :w] = Q1 S,   so   P = (I - Y T Y^T)[:, :w] (S R):
       that is the LU factorization without pivoting  Q1 - [S; 0] = Y U  (U = -T Y1^T S, Y1 the top
       w x w of Y), with s_i chosen while eliminating: s_i = -sign(d_i), d_i the i-th pivot before
       s_i is subtracted, so |u_ii| = 1 + |d_i| >= 1 and no pivoting is needed (Ballard et al. show
       the reconstruction is as stable as Householder QR). Then tau_i = T_ii = -u_ii s_i = 1 + |d_i|.
       This is slarfg's choice: beta = -sign(alpha) ||x|| gives tau = (beta - alpha)/beta =
       1 + |alpha|/||x||, and R_ii = s_i R1_ii has slarfg's sign, so in exact arithmetic (Y, tau, S R)
       is what sgeqrf returns for the panel, signs included; no sign fix-up follows.
       Only the top w x w block needs the elimination; the rows below are Y2 = Q1[w:] U^-1.
       T is then built from Y and tau (slarft, as householder_panel.cu does).
    Why TSQR + reconstruction and not the alternatives (facts from ../shared/seeds):
    - One CTA per panel (householder_panel.cu) runs 2 matrices on 2 of 132 SMs at n = 4096 and
      does not fit a 4096 x 32 panel (512 KiB) in shared memory (w narrows to 16 or 8 there,
      making the trailing GEMMs skinny). Every row block here holds <= 1024 x 32 floats.
    - A recursive column-split panel (Elmroth-Gustavson) makes the in-panel update a GEMM, and the
      write-ups credit it for a 3.3x faster panel (16 + 16, 8 + 8 + 16 splits) - inside one CTA.
      Across CTAs, every column still needs a norm and a v^T A over all m rows: >= 2 grid-wide
      synchronizations per column, 8192 per n = 4096 matrix. TSQR synchronizes once per tree level
      (leaves, ceil(log_fan_in(blocks)) levels, Q1, LU, Y: ~8 per 32 columns). The split remains
      the right design *inside* the block kernel.
    - CholeskyQR-HR (Gram matrix, Cholesky, the same reconstruction) is what the 5th place used at
      n >= 2048 and what "Cholesky-ORHR for n4096" means in the 12th place's write-up; it needed
      conditioning guards (kappa^2 eps < 1 breaks on near-collinear or rank-deficient panels).
      TSQR is a Householder QR of every block, stable for any panel: no guard, no fallback by
      conditioning. A guarded CholeskyQR2 can later replace stages 1-3 only; stages 4+ stay.
    - The output convention: reconstruction yields LAPACK reflectors (unit v, tau in [1, 2] or 0),
      not TSQR's implicit tree of reflectors, so the grader's householder_product(H, tau) is Q.

    tau = 0, as slarfg gives it (xnorm == 0 exactly, H_i = I, R_ii = alpha):
    - A pivot whose column below it is exactly zero (column i of the eliminated Q1 - [S; 0], all m
      rows): Q1's column i is +-e_i in eliminated coordinates. Then s_i = +sign(d_i), tau_i = 0, Y_i = e_i.
      Exact zeros survive TSQR exactly (slarfg returns tau = 0 and every update is x - 0 * y), so this
      catches upper-triangular and diagonal inputs (Q1 = [I; 0]: H = A, tau = 0, as geqrf), all-zero
      panels, and the last column of a square matrix (its tail is empty). The test reads the rows
      below the top block from a per-column flag: Q1[w:, :i+1] is exactly zero.
    - An exactly zero panel column: TSQR gives Q1 an arbitrary orthonormal completion there. When no
      nonzero column follows it in the panel (rankdef: the zero columns are the matrix's last ones),
      the earlier columns do not depend on it: tau_i = 0, Y_i = e_i, and R's row and column i are
      zero already. When a nonzero column follows, slarfg's later reflectors skip row i, which TSQR
      cannot see: that matrix's panel is factored by the one-CTA panel kernel instead (no checker
      family produces this; it costs one flagged launch per panel).

Future CUDA kernels, per panel (grid.y = batch everywhere; the trailing update stays as it is)
    tsqr_block_qr      grid (blocks, batch), one CTA per r x w block on chip (r = 32..128 at batch 2-8):
                       Householder QR of the block column by column (slarfg; a 16 + 16 or 8 + 8 + 16
                       column split inside, as the write-ups found), writes R_k and the explicit Q_k
                       (in place in H for the leaves, to a workspace for tree nodes). Launched for the
                       leaves, then once per tree level on the stacked R's (a node is fan_in * w rows,
                       the same kernel).
    tsqr_q1            grid (blocks, batch): C_k by the products along its root-to-leaf path (depth
                       w x w products), Q1_k = Q_k C_k in place, and per column an "any nonzero in rows
                       >= w" flag (a block's column of Q1 is zero exactly when its C_k column is).
    reconstruct_lu     one CTA per matrix: the modified LU of Q1[0:w] (w x w on chip), tau, S, writes
                       S R and L1 into H, U^-1 (u_ii = 1 for tau = 0 columns) to a workspace.
    reconstruct_y      grid (blocks, batch): Y_k = Q1_k U^-1 in place (rows >= w), the Gram partials
                       Y_k^T Y_k for T (or fold into the next kernel).
    wy_factor          T from tau and the Gram matrix (slarft), as householder_panel.cu does.
    trailing GEMMs     cuBLAS, unchanged: W = Y^T C, W = T^T W, C -= Y W.
    Launch shapes: leaf_rows() takes the smallest power-of-two r >= w with batch * ceil(m / r) <= 132
    CTAs. n = 4096, batch 2, w = 32: r = 64 for the first panels (2 x 64 = 128 CTAs on 132 SMs),
    r = 32 once m <= 2112 (2 x 66 = 132 CTAs, then 2m/32); fan_in = 4 keeps the tree at 3-4 levels
    (64 blocks -> 16 -> 4 -> 1, nodes of 128 x 32: again one CTA each). Batch 8, n = 2048: r = 128
    (128 CTAs); batch 60, n = 1024: r = 512 (120 CTAs). Batch 640, n = 512 stays one block per matrix:
    batches that fill the GPU keep the one-CTA panel. The trailing GEMMs fill the GPU by their tiles
    (m x (n - k0 - w) outputs) as they do now. The critical path of a panel is (1 + depth) block QRs
    and the LU, each w dependent column steps over <= 128 rows held on chip, instead of w steps over
    all m rows in one CTA: more steps, each far shorter; to be measured. ~8 launches per panel
    plus the 3 GEMMs: capture them in a CUDA graph (the write-ups' largest launch-overhead win).
"""
import math

import torch

from parts.qr_v2.model import blocked_qr, factor_panel_model, reflector  # popkit: inline

H200_SMS = 132
LEAF_ROWS_MAX = 1024    # 1024 x 32 floats = 128 KiB: the most one CTA holds on chip
FAN_IN = 4              # R's per tree node: 4 x 32 = 128 rows, no more than a leaf CTA already holds


def leaf_rows(m: int, batch: int, w: int, sms: int = H200_SMS) -> int:
    """Rows per leaf block: the smallest power of two >= w whose leaf grid fits one wave of `sms` CTAs."""
    rows = 1 << (w - 1).bit_length()
    while rows < min(m, LEAF_ROWS_MAX) and batch * math.ceil(m / rows) > sms:
        rows *= 2
    return rows


def householder_block_qr(X: torch.Tensor):
    """Householder QR of each block X (N, rows, w), rows >= w, with slarfg per column.

    Returns the explicit thin Q (N, rows, w) = H_0 ... H_{w-1} [I; 0] and R (N, w, w)."""
    N, rows, w = X.shape
    F = X.clone()
    taus = X.new_zeros(N, w)
    for c in range(w):
        t, beta, scale = reflector(F[:, c, c], F[:, c + 1:, c])
        F[:, c + 1:, c] *= scale[:, None]
        F[:, c, c] = beta
        taus[:, c] = t
        v = torch.cat([torch.ones_like(t)[:, None], F[:, c + 1:, c]], dim=1)
        F[:, c:, c + 1:] -= (t[:, None] * v)[:, :, None] * (v[:, None, :] @ F[:, c:, c + 1:])
    # Backward accumulation: H_c only mixes rows c.., where columns < c of the product are still zero.
    Q = torch.eye(rows, w, dtype=X.dtype, device=X.device).repeat(N, 1, 1)
    for c in reversed(range(w)):
        v = torch.cat([torch.ones_like(taus[:, c])[:, None], F[:, c + 1:, c]], dim=1)
        Q[:, c:, c:] -= (taus[:, c, None] * v)[:, :, None] * (v[:, None, :] @ Q[:, c:, c:])
    return Q, torch.triu(F[:, :w])


def tsqr(P: torch.Tensor, rows: int, fan_in: int):
    """P (B, m, w) = Q1 R by a reduction tree over row blocks of `rows` >= w rows: returns explicit Q1, R."""
    B, m, w = P.shape
    blocks = math.ceil(m / rows)
    padded = P.new_zeros(B, blocks * rows, w)
    padded[:, :m] = P
    Q_leaf, R = householder_block_qr(padded.view(B * blocks, rows, w))
    R = R.view(B, blocks, w, w)
    levels = []                                   # (node Q's, number of children) per level, bottom up
    while R.shape[1] > 1:
        children = R.shape[1]
        nodes = math.ceil(children / fan_in)
        stacked = R.new_zeros(B, nodes * fan_in, w, w)
        stacked[:, :children] = R
        Q_node, R = householder_block_qr(stacked.view(B * nodes, fan_in * w, w))
        levels.append((Q_node.view(B, nodes, fan_in * w, w), children))
        R = R.view(B, nodes, w, w)
    C = torch.eye(w, dtype=P.dtype, device=P.device).expand(B, 1, w, w)
    for Q_node, children in reversed(levels):
        C = (Q_node @ C).view(B, -1, w, w)[:, :children]
    Q1 = Q_leaf.view(B, blocks, rows, w) @ C
    return Q1.view(B, blocks * rows, w)[:, :m], R[:, 0]


def householder_reconstruction(Q1: torch.Tensor):
    """Q1 (B, m, w), orthonormal columns: Y (B, m, w) unit lower trapezoidal, tau (B, w) and signs s (B, w)
    with H_0 ... H_{w-1} [I; 0] = Q1 diag(s), H_i = I - tau_i y_i y_i^T (the modified LU above)."""
    B, m, w = Q1.shape
    M = Q1[:, :w].clone()                         # the top block, eliminated in place into L1 \ U
    below_zero = (Q1[:, w:] == 0).all(dim=1).int().cummin(dim=1).values.bool()   # Q1[w:, :i+1] == 0
    s = Q1.new_empty(B, w)
    trivial = torch.empty(B, w, dtype=torch.bool, device=Q1.device)
    for i in range(w):
        pivot = M[:, i, i]
        trivial[:, i] = (M[:, i + 1:, i] == 0).all(dim=1) & below_zero[:, i]
        sign = torch.copysign(torch.ones_like(pivot), pivot)
        s[:, i] = torch.where(trivial[:, i], sign, -sign)
        M[:, i, i] = pivot - s[:, i]
        M[:, i + 1:, i] /= torch.where(trivial[:, i], 1.0, M[:, i, i])[:, None]   # a trivial tail is zero
        M[:, i + 1:, i + 1:] -= M[:, i + 1:, i, None] * M[:, None, i, i + 1:]
    u_diag = M.diagonal(dim1=1, dim2=2)
    tau = torch.where(trivial, 0.0, -u_diag * s)
    # A trivial column's numerator below the top block is exactly zero, so any nonzero u_ii keeps it zero.
    U = torch.triu(M, 1) + torch.diag_embed(torch.where(trivial, 1.0, u_diag))
    Y_below = torch.linalg.solve_triangular(U, Q1[:, w:], upper=True, left=False)
    Y_top = torch.tril(M, -1) + torch.eye(w, dtype=M.dtype, device=M.device)
    return torch.cat([Y_top, Y_below], dim=1), tau, s


def compact_wy_factor(V: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """slarft (forward, columnwise): T (B, w, w) with H_0 ... H_{w-1} = I - V T V^T."""
    B, _, w = V.shape
    G = V.mT @ V
    T = V.new_zeros(B, w, w)
    for c in range(w):
        T[:, c, c] = tau[:, c]
        if c:
            T[:, :c, c] = -tau[:, c, None] * (T[:, :c, :c] @ G[:, :c, c, None])[..., 0]
    return T


def zero_column_kinds(P: torch.Tensor):
    """Exactly zero columns of each panel (B, w): those with no nonzero column after them, and
    whether a zero column is followed by a nonzero one (per matrix)."""
    zero = (P == 0).all(dim=1)
    nonzero = (~zero).int()
    nonzero_after = nonzero.flip(1).cumsum(dim=1).flip(1) - nonzero      # nonzero columns right of each
    return zero & (nonzero_after == 0), (zero & (nonzero_after > 0)).any(dim=1)


def factor_panel_tsqr_hr(H: torch.Tensor, tau: torch.Tensor, k0: int, w: int, rows: int | None = None,
                         fan_in: int = FAN_IN):
    """Factor H[:, k0:, k0:k0+w] in place and fill tau[:, k0:k0+w] (model.factor_panel_model's contract):
    TSQR over row blocks of `rows` rows (leaf_rows() when None), Householder reconstruction.
    Returns Vt (B, w, m) and T (B, w, w)."""
    P = H[:, k0:, k0:k0 + w]
    B, m, _ = P.shape
    rows = max(w, rows or leaf_rows(m, B, w))
    zero_tail, split = zero_column_kinds(P)
    if split.any():                               # the one-CTA kernel's result for those matrices
        H_split, tau_split = H[split], tau[split]
        factor_panel_model(H_split, tau_split, k0, w)

    Q1, R = tsqr(P, rows, fan_in)
    Y, panel_tau, s = householder_reconstruction(Q1)
    # Zero columns with nothing nonzero after them: slarfg's tau = 0 and zero tail, not TSQR's completion.
    below_diagonal = torch.ones(m, w, dtype=torch.bool, device=H.device).tril(-1)
    Y = torch.where(zero_tail[:, None, :] & below_diagonal, 0.0, Y)
    panel_tau = torch.where(zero_tail, 0.0, panel_tau)
    P[:, :w] = torch.triu(s[:, :, None] * R) + torch.tril(Y[:, :w], -1)
    P[:, w:] = Y[:, w:]
    tau[:, k0:k0 + w] = panel_tau
    if split.any():
        H[split, k0:, k0:k0 + w] = H_split[:, k0:, k0:k0 + w]
        tau[split, k0:k0 + w] = tau_split[:, k0:k0 + w]

    V = torch.tril(P, -1) + torch.eye(m, w, dtype=H.dtype, device=H.device)
    return V.mT.contiguous(), compact_wy_factor(V, tau[:, k0:k0 + w])


def blocked_qr_multi_cta_model(A: torch.Tensor, panel: int = 32, rows: int | None = None, fan_in: int = FAN_IN):
    """Blocked Householder QR in geqrf form (H, tau): TSQR + reconstruction panels of `panel` columns,
    model.blocked_qr's compact-WY trailing update."""
    def factor_panel(H, tau, k0, w):
        return factor_panel_tsqr_hr(H, tau, k0, w, rows, fan_in)
    return blocked_qr(A, lambda m: panel, factor_panel)
