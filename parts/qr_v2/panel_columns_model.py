"""Torch replay of householder_panel_columns.cu's data flow, to hold it to model.factor_panel_model.

The kernel computes the same reflectors as the thread-per-row panel kernel with a different bookkeeping:
each lane keeps its column's tail unscaled after the column is factored (the scale beside it), writes
row c of the panel to A the moment it is final, and never updates row c's registers again. This replay
does the same on whole tensors, writes every output from NaN-filled storage (an entry the kernel would
leave unwritten stays NaN), and is what tests/test_qr_panel_model.py compares with the model.
"""
import torch

from parts.qr_v2.model import SSQ_SAFE, scaled_norm, slarfg


def factor_panel_columns_replay(H: torch.Tensor, tau: torch.Tensor, k0: int, w: int):
    """factor_panel_model's outputs (H's panel, tau, Vt, T) the way the column kernel produces them."""
    b, n, _ = H.shape
    m = n - k0
    regs = H[:, k0:, k0:k0 + w].clone()               # the lanes' registers: column j in lane j
    out = torch.full_like(regs, float("nan"))          # what the kernel writes back to A's panel
    scale = torch.ones(b, w, dtype=H.dtype, device=H.device)     # my_scale, per lane
    G = torch.full((b, w, w), float("nan"), dtype=H.dtype, device=H.device)
    panel_tau = torch.full((b, w), float("nan"), dtype=H.dtype, device=H.device)
    rows = torch.arange(m, device=H.device)
    lanes = torch.arange(w, device=H.device)
    for c in range(w):
        x = torch.where(rows[None, :] > c, regs[:, :, c], torch.zeros_like(regs[:, :, c]))   # s_x
        p = torch.einsum("br,brj->bj", x, regs)        # every lane, every row (x is zero at and above c)
        row = regs[:, c, :].clone()                    # s_row
        ssq = p[:, c]
        safe = (ssq >= SSQ_SAFE[0]) & (ssq <= SSQ_SAFE[1])
        xnorm = torch.where(safe, torch.sqrt(ssq), scaled_norm(x))
        t, beta, s = slarfg(row[:, c], xnorm)
        vdot = row + s[:, None] * p
        G[:, :c, c] = (scale * vdot)[:, :c]
        panel_tau[:, c] = t
        left = lanes[None, :] < c
        out[:, c, :] = torch.where(left, scale * row, torch.where(lanes[None, :] == c, beta[:, None],
                                                                   row - t[:, None] * vdot))
        scale[:, c] = s
        coef = torch.where(lanes[None, :] > c, t[:, None] * vdot * s[:, None], torch.zeros_like(vdot))
        regs -= x[:, :, None] * coef[:, None, :]
    out[:, w:, :] = scale[:, None, :] * regs[:, w:, :]
    Vt = torch.where(rows[None, None, :] > lanes[None, :, None], scale[:, :, None] * regs.mT,
                     (rows[None, None, :] == lanes[None, :, None]).to(H.dtype).expand(b, w, m))
    T = torch.zeros(b, w, w, dtype=H.dtype, device=H.device)
    for c in range(w):
        T[:, c, c] = panel_tau[:, c]
        if c:
            T[:, :c, c] = -panel_tau[:, c, None] * (T[:, :c, :c] @ G[:, :c, c, None])[..., 0]
    H[:, k0:, k0:k0 + w] = out
    tau[:, k0:k0 + w] = panel_tau
    return Vt.contiguous(), T
