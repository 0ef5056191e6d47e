"""qr_v2: a panel by CholeskyQR2 and Householder reconstruction, the torch model of a planned kernel.

The Householder panel (householder_panel.cu) needs one team-wide reduction per column: 32 barriers a
panel, and the panel is latency-bound wherever the batch leaves SMs idle (ncu, 2026-12-01: 4.4% issue
at 2x4096, 8% at 40x176). This panel needs a handful of reductions, each a small GEMM:
  1. CholeskyQR2 on the column-equilibrated panel P D^-1: G = Q^T Q, R = chol(G), Q <- Q R^-1, twice.
     The second pass's Gram measures the first Q's orthogonality; where it is off by ORTHOGONALITY_TOL or
     more (a panel too ill-conditioned for fp32 CholeskyQR2), or a Cholesky breaks down, or anything is
     not finite, that matrix's panel falls back to the Householder panel (factor_panel_model).
  2. Householder reconstruction (LAPACK sorhr_col, unblocked): LU without pivoting of Q[:w] - S, the
     signs S = diag(s) picked on the way (s_i = -sign of the pivot, so every pivot is at least 1 in
     magnitude): Q - [S; 0] = V U with V unit lower trapezoidal. Then H_0 ... H_{w-1} = I - V T V^T has
     first w columns Q S, tau_i = -U_ii s_i, and the panel's R in geqrf form is S R_chol.
The output is a valid compact form (H, tau) for the gates (Q formed from it), not geqrf's bits: the
reflectors' signs can differ from slarfg's. The study behind it (2026-12-01, CPU, fp32): on every input
family at n = 128 .. 1024 the gate margins equal the Householder panel's (factor 0.004-0.10 of 20,
orthogonality 0.22-1.05 of 100); fallbacks: every panel of `upper` (triangular panels are
ill-conditioned), the zero panels of `rankdef`, 7% of `mixed`, 6% of `nearcollinear`, none on dense.
"""
import torch

from parts.qr_v2.model import compact_wy_factor, factor_panel_model

ORTHOGONALITY_TOL = 0.1   # max |G2 - I| of the second pass; CholeskyQR2 is accurate well inside it


def cholesky_qr2(P: torch.Tensor):
    """Q (b, m, w) with orthonormal columns, R (b, w, w) upper with P = Q R, and ok (b,): where ok is
    False the pair is not to be used (a breakdown, a non-finite entry, or Q not orthonormal)."""
    b, m, w = P.shape
    eye = torch.eye(w, dtype=P.dtype, device=P.device).expand(b, w, w)
    norms = torch.linalg.vector_norm(P, dim=1)
    norms = torch.where(norms > 0, norms, torch.ones_like(norms))
    Q, R = P / norms[:, None, :], torch.diag_embed(norms)
    ok = torch.ones(b, dtype=torch.bool, device=P.device)
    for second in (False, True):
        G = Q.mT @ Q
        if second:
            ok &= (G - eye).abs().amax(dim=(1, 2)) < ORTHOGONALITY_TOL
        L, info = torch.linalg.cholesky_ex(G)
        ok &= (info == 0) & torch.isfinite(L).all(dim=(1, 2))
        U = torch.where(ok[:, None, None], L.mT, eye)    # a broken matrix carries on harmlessly
        Q = torch.linalg.solve_triangular(U, Q, upper=True, left=False)
        R = U @ R
    ok &= torch.isfinite(Q).all(dim=(1, 2)) & torch.isfinite(R).all(dim=(1, 2))
    return Q, R, ok


def householder_reconstruction(Q: torch.Tensor):
    """V (b, m, w) unit lower trapezoidal, tau (b, w) and signs s (b, w) with
    (I - V T V^T)[:, :w] = Q diag(s), T = compact_wy_factor(V^T V, tau)."""
    b, m, w = Q.shape
    Y = Q.clone()
    s = torch.empty(b, w, dtype=Q.dtype, device=Q.device)
    for i in range(w):
        s[:, i] = torch.where(Y[:, i, i] >= 0, -1.0, 1.0)
        Y[:, i, i] -= s[:, i]
        Y[:, i + 1:, i] /= Y[:, i, i, None]
        Y[:, i + 1:, i + 1:] -= Y[:, i + 1:, i:i + 1] @ Y[:, i:i + 1, i + 1:]
    tau = -Y.diagonal(dim1=1, dim2=2) * s
    V = torch.tril(Y, diagonal=-1)
    V.diagonal(dim1=1, dim2=2).fill_(1.0)
    return V, tau, s


def orhr_panel_model(H: torch.Tensor, tau: torch.Tensor, k0: int, w: int):
    """factor_panel_model's contract (H's panel and tau in place; returns Vt, T) by CholeskyQR2 and
    reconstruction, with the Householder panel for the matrices whose CholeskyQR2 is not ok."""
    P = H[:, k0:, k0:k0 + w]
    Q, R, ok = cholesky_qr2(P)
    V, panel_tau, s = householder_reconstruction(Q)
    fallback_H, fallback_tau = H.clone(), tau.clone()
    fallback_Vt, _ = factor_panel_model(fallback_H, fallback_tau, k0, w)
    top = torch.triu(s[:, :, None] * R) + torch.tril(V[:, :w], diagonal=-1)
    panel = torch.cat([top, V[:, w:]], dim=1)
    P.copy_(torch.where(ok[:, None, None], panel, fallback_H[:, k0:, k0:k0 + w]))
    tau[:, k0:k0 + w] = torch.where(ok[:, None], panel_tau, fallback_tau[:, k0:k0 + w])
    Vt = torch.where(ok[:, None, None], V.mT, fallback_Vt).contiguous()
    return Vt, compact_wy_factor(Vt @ Vt.mT, tau[:, k0:k0 + w])
