"""tridiagonal_reduction.cu's data flow in torch: which stored entry each step reads, and when it was written.

The kernel computes reduction_model.tridiagonalize_model with four departures that change what it reads:
    - column c is read as row c of the trailing matrix (coalesced; equal because A stays exactly symmetric);
    - the rank-2k update computes the lower triangle (i >= j) once and mirrors it to the upper one;
    - the panel's V and W live in n x 32 row-major copies (Vp, W) and every panel product reads only
      columns l < j of them (the rest hold an earlier panel's values, or nothing);
    - W's entry in row c+1 of column j is written by its owning thread after the column's last barrier,
      so the next column does not read it: every thread recomputes it as p_{c+1} - (tau/2)(p^T v).
This model replays those steps vectorised over the batch, with every output and workspace starting as
NaN (what torch.empty may hold) and that one W entry stored only once the next column has read row c+1:
an entry read before it is written shows up as NaN in d, e, V or T. Summation orders are torch's, so it
agrees with the kernel to rounding, not bit for bit; tests compare it with reduction_model.py.
"""
import torch

from parts.eigh.reduction_model import PANEL, householder, matvec  # popkit: inline


def tridiagonalize_kernel_order(A: torch.Tensor, panel: int = PANEL):
    """(d, e, V, T) as tridiagonal_reduction.cu's eigh_tridiagonalize computes them (reduction_model's storage)."""
    b, n, _ = A.shape
    reflectors = max(n - 2, 0)
    nan = dict(fill_value=float("nan"), dtype=A.dtype, device=A.device)
    A = A.clone()
    d, e = torch.full((b, n), **nan), torch.full((b, max(n - 1, 0)), **nan)
    V = torch.full((b, n, reflectors), **nan)
    T = torch.full((b, reflectors, min(panel, reflectors)), **nan)
    Vp, W = torch.full((b, n, panel), **nan), torch.full((b, n, panel), **nan)
    for k in range(0, reflectors, panel):
        nb = min(panel, reflectors - k)
        panel_kernel(A, d, e, V, T, Vp, W, k, nb)
        update_kernel(A, Vp, W, k + nb, nb)
    d[:, reflectors:] = A[:, reflectors:, reflectors:].diagonal(dim1=1, dim2=2)
    if n >= 2:
        e[:, n - 2] = A[:, n - 1, n - 2]
    return d, e, V, T


def panel_kernel(A, d, e, V, T, Vp, W, k, nb):
    """eigh_reduce_panel: steps 1-5 of the kernel per column; A is only read."""
    b, n, _ = A.shape
    panel = Vp.shape[2]
    s_T = torch.full((b, panel, panel), float("nan"), dtype=A.dtype, device=A.device)
    pending = None                                           # (row, column, value) of W not yet stored
    for j in range(nb):
        c = k + j
        # 1. Row c of the stale matrix, corrected by the panel; W[c, j-1] from the previous column's p and coef.
        x = A[:, c, c:]
        if j > 0:
            row, column, value = pending
            Wc = torch.cat([W[:, c, :j - 1], value[:, None]], dim=1)
            W[:, row, column] = value                        # stored by its owner: readable from the next barrier
            x = (x - matvec(Vp[:, c:, :j], Wc)) - matvec(W[:, c:, :j], Vp[:, c, :j])
        # 2. The reflector (the model's householder: max-scaled norm); V's column c whole, Vp's rows c+1..
        v, tau, beta = householder(x[:, 1:])
        d[:, c], e[:, c] = x[:, 0], beta
        V[:, :c + 1, c] = 0
        V[:, c + 1:, c] = v
        Vp[:, c + 1:, j] = v
        # 3. A22 v and the panel's V^T v, W^T v over rows c+1..
        Av = matvec(A[:, c + 1:, c + 1:], v)
        Vv, Wv = matvec(Vp[:, c + 1:, :j].mT, v), matvec(W[:, c + 1:, :j].mT, v)
        # 4. p; T's column j reads only s_T's upper triangle (its only written entries).
        p = tau[:, None] * ((Av - matvec(Vp[:, c + 1:, :j], Wv)) - matvec(W[:, c + 1:, :j], Vv))
        s_T[:, :j, j] = -tau[:, None] * matvec(s_T[:, :j, :j].triu(), Vv)
        s_T[:, j, j] = tau
        coef = 0.5 * tau * (p * v).sum(dim=1)
        # 5. W's column j below row c+1 now; row c+1 once the next column has read it.
        W[:, c + 2:, j] = p[:, 1:] - coef[:, None] * v[:, 1:]
        pending = (c + 1, j, p[:, 0] - coef)
    row, column, value = pending
    W[:, row, column] = value
    # T's rows k..k+nb-1, every column: s_T's upper triangle within the panel's nb columns, zeros elsewhere.
    rows, columns = torch.arange(nb, device=A.device)[:, None], torch.arange(T.shape[2], device=A.device)[None, :]
    written = (rows <= columns) & (columns < nb)
    block = s_T[:, :nb, :T.shape[2]]
    T[:, k:k + nb, :] = torch.where(written, block, torch.zeros_like(block))


def update_kernel(A, Vp, W, start, nb):
    """eigh_update_trailing: A[start:, start:] -= V W^T + W V^T, the lower triangle computed and mirrored."""
    Vs, Ws = Vp[:, start:, :nb], W[:, start:, :nb]
    lower = (Vs @ Ws.mT + Ws @ Vs.mT).tril()
    A[:, start:, start:] -= lower + lower.tril(-1).mT
