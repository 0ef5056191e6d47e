"""Torch models of the qr_v2 kernels: the executable specification.

Same algorithm, same blocking and the same float32 arithmetic choices as the
CUDA parts, vectorized over the batch; CPU tests check them against the gates,
and the built submission uses them on CPU tensors.

- `reflector`: LAPACK slarfg with a norm scaled by the largest entry (`slarfg` from a given norm).
- `householder_qr_model`: unblocked QR (householder_small.cu).
- `factor_panel_model`: one panel plus its compact-WY factor T, one reduction per column (householder_panel.cu;
  over all n columns of an n <= 32 matrix, householder_warp.cu).
- `blocked_qr`: the blocked algorithm; the panel factorization and the trailing update are
  parameters, so the GPU route runs this very driver with the CUDA kernels.
- `apply_block_reflector` (float32 matmuls) and `apply_block_reflector_tf32x3` (householder_update.cu):
  the trailing update.
"""
import torch

from parts.common.tf32_model import tf32x3_product  # popkit: inline


def slarfg(alpha: torch.Tensor, xnorm: torch.Tensor):
    """slarfg from (alpha, ||x||) per matrix -> tau, beta, scale with v_tail = x * scale; ||x|| = 0 gives tau = 0."""
    beta = -torch.copysign(torch.hypot(alpha, xnorm), alpha)
    zero = xnorm == 0
    tau = torch.where(zero, torch.zeros_like(alpha), (beta - alpha) / beta)
    scale = torch.where(zero, torch.zeros_like(alpha), 1.0 / (alpha - beta))
    beta = torch.where(zero, alpha, beta)
    return tau, beta, scale


def scaled_norm(x: torch.Tensor) -> torch.Tensor:
    """||x|| per row of x (b, m), computed on x divided by its largest entry (no overflow or underflow)."""
    amax = x.abs().amax(dim=1) if x.shape[1] else torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    return amax * torch.linalg.vector_norm(x / safe[:, None], dim=1)


def reflector(alpha: torch.Tensor, x: torch.Tensor):
    """slarfg per matrix: alpha (b,), x (b, m) -> tau (b,), beta (b,), scale (b,) with v_tail = x * scale."""
    return slarfg(alpha, scaled_norm(x))


def _reflect_column(M: torch.Tensor, tau: torch.Tensor, c: int, tau_index: int) -> None:
    """Make the reflector for column c of M (rows c..), store it in place and apply it to columns c+1.."""
    t, beta, scale = reflector(M[:, c, c], M[:, c + 1:, c])
    M[:, c + 1:, c] *= scale[:, None]
    M[:, c, c] = beta
    tau[:, tau_index] = t
    if c + 1 < M.shape[2]:
        v = torch.cat([torch.ones_like(t)[:, None], M[:, c + 1:, c]], dim=1)  # (b, m - c)
        w = torch.einsum("bi,bij->bj", v, M[:, c:, c + 1:]) * t[:, None]
        M[:, c:, c + 1:] -= v[:, :, None] * w[:, None, :]


def householder_qr_model(A: torch.Tensor):
    """Unblocked Householder QR in geqrf form: returns (H, tau)."""
    H = A.clone()
    b, n, _ = H.shape
    tau = torch.zeros(b, n, dtype=H.dtype, device=H.device)
    for k in range(n):
        _reflect_column(H[:, k:, k:], tau, 0, k)
    return H, tau


SSQ_SAFE = (2.0 ** -100, 2.0 ** 100)   # outside it the plain sum of squares may have lost bits


def factor_panel_model(H: torch.Tensor, tau: torch.Tensor, k0: int, w: int):
    """Factor H[:, k0:, k0:k0+w] in place (R and tails), fill tau; return Vt (b, w, m) and T (b, w, w).

    One reduction per column, as householder_panel.cu does it: p = x^T (rows below c), x the column's
    tail, gives ||x||^2 (entry c), v^T A[:, j] = A[c, j] + s p_j (j > c, s = 1/(alpha - beta)) and
    v_j^T v = s_j (x_j[c] + s p_j) (j < c: column c of G = V^T V, from which T follows). Column j keeps
    x_j (and alpha_j) until the panel is stored, as the kernel's registers do; then v_j = s_j x_j and beta_j."""
    b = H.shape[0]
    P = H[:, k0:, k0:k0 + w]
    panel = P.clone()
    panel_tau = torch.zeros(b, w, dtype=H.dtype, device=H.device)
    scales = torch.zeros(b, w, dtype=H.dtype, device=H.device)
    betas = torch.zeros(b, w, dtype=H.dtype, device=H.device)
    G = torch.zeros(b, w, w, dtype=H.dtype, device=H.device)
    for c in range(w):
        x = panel[:, c + 1:, c].clone()
        p = torch.einsum("br,brj->bj", x, panel[:, c + 1:, :])
        row = panel[:, c, :].clone()
        ssq = p[:, c]
        safe = (ssq >= SSQ_SAFE[0]) & (ssq <= SSQ_SAFE[1])
        xnorm = torch.where(safe, torch.sqrt(ssq), scaled_norm(x))
        t, beta, scale = slarfg(row[:, c], xnorm)
        vdot = row + scale[:, None] * p
        G[:, :c, c] = scales[:, :c] * vdot[:, :c]
        coef = (t[:, None] * vdot)[:, c + 1:]
        v = x * scale[:, None]
        panel[:, c, c + 1:] -= coef
        panel[:, c + 1:, c + 1:] -= v[:, :, None] * coef[:, None, :]
        panel_tau[:, c], scales[:, c], betas[:, c] = t, scale, beta
    below = torch.tril(torch.ones(panel.shape[1], w, dtype=torch.bool, device=H.device), diagonal=-1)
    panel = torch.where(below, panel * scales[:, None, :], panel)
    panel[:, torch.arange(w), torch.arange(w)] = betas
    P.copy_(panel)
    tau[:, k0:k0 + w] = panel_tau
    V = torch.tril(panel, diagonal=-1)
    V.diagonal(dim1=1, dim2=2).fill_(1.0)
    return V.mT.contiguous(), compact_wy_factor(G, panel_tau)


WY_BLOCK = 8   # compact_wy.cuh's kWyBlock


def compact_wy_factor(G: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """T (b, w, w) with H_0 ... H_{w-1} = I - V T V^T, from the strict upper part of G = V^T V and tau
    (LAPACK slarft, forward, column-wise: T[c][c] = tau_c, T[:c, c] = -tau_c T[:c, :c] G[:c, c]), in
    compact_wy.cuh's order: that recurrence inside diagonal blocks of WY_BLOCK, then blocks merged pairwise,
    T[A, D] = -(T[A, A] G[A, D]) T[D, D]."""
    b, w = tau.shape
    T = torch.zeros(b, w, w, dtype=tau.dtype, device=tau.device)
    for k in range(w):
        T[:, k, k] = tau[:, k]
        for c in range(k + 1, min((k // WY_BLOCK + 1) * WY_BLOCK, w)):
            T[:, k, c] = -tau[:, c] * (T[:, k, k:c] * G[:, k:c, c]).sum(dim=1)
    size = WY_BLOCK
    while size < w:
        for a in range(0, w - size, 2 * size):
            A, D = slice(a, a + size), slice(a + size, min(a + 2 * size, w))
            T[:, A, D] = -((T[:, A, A] @ G[:, A, D]) @ T[:, D, D])
        size *= 2
    return T


def apply_block_reflector(Vt: torch.Tensor, T: torch.Tensor, C: torch.Tensor) -> None:
    """C <- Q_panel^T C = C - V (T^T (V^T C)) in place, as three float32 batched matmuls."""
    W = torch.bmm(T.mT, torch.bmm(Vt, C))
    C.baddbmm_(Vt.mT, W, alpha=-1.0)


def apply_block_reflector_tf32x3(Vt: torch.Tensor, T: torch.Tensor, C: torch.Tensor) -> None:
    """The same with householder_update.cu's arithmetic: W0 = Vt C, W = T^T W0 and C -= V W as tf32x3
    products (operands split into TF32 hi + lo, ~21 bits)."""
    W = tf32x3_product(T.mT, tf32x3_product(Vt, C.mT).mT)
    C -= tf32x3_product(Vt.mT, W.mT)


def blocked_qr(A: torch.Tensor, panel_width, factor_panel=factor_panel_model, update=apply_block_reflector):
    """Blocked Householder QR: per panel, factor it, then C -= V (T^T (V^T C)) on the trailing columns.

    panel_width(m) gives the panel width for a panel of m rows (the CUDA panel narrows when a tall
    panel would not fit in its registers); update(Vt, T, C) applies the panel to C in place."""
    H = A.clone()
    b, n, _ = H.shape
    tau = torch.zeros(b, n, dtype=H.dtype, device=H.device)
    k0 = 0
    while k0 < n:
        w = min(panel_width(n - k0), n - k0)
        if w < 1:
            raise RuntimeError(f"no panel width fits {n - k0} rows")
        Vt, T = factor_panel(H, tau, k0, w)
        if k0 + w < n:
            update(Vt, T, H[:, k0:, k0 + w:])
        k0 += w
    return H, tau
