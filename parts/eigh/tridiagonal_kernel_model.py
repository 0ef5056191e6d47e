"""tridiagonal_leaf.cu's and tridiagonal_merge.cu's data flow in torch: their storage, orders of sums and writes.

The kernels compute tridiagonal_model.solve_leaf and merge_factors with these departures:
    leaf   the LU of T - shift I lives in [row][lane] arrays, is redone every iteration with the forward
           elimination riding in it, and its second superdiagonal is rebuilt from the swap bits and e;
           Gram-Schmidt's dot products and projections are sums in index order, the norm a warp butterfly.
    merge  the sorts are ranks (smaller entries, then equal ones before: a stable sort); the secular sums
           run over the live poles in index order, each root iterating on its own (a thread each); z_hat's
           product and the norms run in index order; S is written a column at a time (root i's column
           lands at its value's rank, rows through the compression and the sort) and each column then
           takes the deflation rotations, last first.
This model replays those steps vectorised over the batch (and the lanes or roots), every output and the
LU's storage starting as NaN (what torch.empty may hold): an entry read before it is written, or never
written, shows up as NaN. Steps the kernels take exactly as the model does (Gershgorin, bisection,
cluster_shifts, deflate's scan, rational_step) call the model. The one sum not replayed is the merge's
sum of z^2 (a block reduction; it only bounds the last root's first bracket). Tests compare this with
tridiagonal_model.py.
"""
import math

import torch

from parts.eigh import tridiagonal_model as model  # popkit: inline

WARP = 32


def nan_like(x: torch.Tensor, *shape) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=x.dtype, device=x.device)


# ---------------------------------------------------------------------------------------------
# Leaves: tridiagonal_leaf.cu.
# ---------------------------------------------------------------------------------------------

def solve_leaf_kernel_order(d: torch.Tensor, e: torch.Tensor):
    """(w, Z) as eigh_tridiagonal_leaves computes them (tridiagonal_model.solve_leaf's outputs)."""
    b, m = d.shape
    w, Z = nan_like(d, b, m), nan_like(d, b, m, m)
    if m == 1:
        w[:, 0], Z[:, 0, 0] = d[:, 0], 1
        return w, Z
    finfo = torch.finfo(d.dtype)
    lo, hi = model.gershgorin_interval(d, e)
    tnorm = torch.maximum(lo.abs(), hi.abs())
    values = model.bisect_leaf(d, e, lo, hi, tnorm)
    shift, column = model.cluster_shifts(values, tnorm)
    pivtol = torch.clamp(finfo.eps * tnorm, min=finfo.tiny)
    x = model.start_vectors(m, m, d.dtype, d.device).T.expand(b, m, m).clone()     # x[row][lane]
    for _ in range(model.INVERSE_ITERATIONS):
        x = solve_shifted(d, e, shift, pivtol, x)
        x = gram_schmidt(x)
    w[:] = values
    Z.scatter_(2, column[:, None, :].expand(b, m, m), x)          # lane l's vector is column column_l
    return w, Z


def solve_shifted(d, e, shift, pivtol, x):
    """Every lane's (T - shift I) x = x and its scaling by the largest entry (the kernel's solve_shifted)."""
    b, m = d.shape
    x = x.clone()
    diag, u1 = nan_like(d, b, m, m), nan_like(d, b, m, m)                      # [row][lane]
    swaps = torch.zeros(b, m, m, dtype=torch.bool, device=d.device)
    pivot, upper = d[:, :1] - shift, e[:, :1].expand(b, m)
    y = x[:, 0].clone()
    zero = torch.zeros_like(pivot)
    for i in range(m - 1):
        below, below_diag = e[:, i:i + 1], d[:, i + 1:i + 2] - shift
        below_upper = e[:, i + 1:i + 2].expand(b, m) if i + 1 < m - 1 else zero
        swapped = below.abs() > pivot.abs()
        top, other = torch.where(swapped, below, pivot), torch.where(swapped, pivot, below)
        factor = other / torch.where(top == 0, torch.ones_like(top), top)
        diag[:, i] = top
        u1[:, i] = torch.where(swapped, below_diag, upper)
        swaps[:, i] = swapped
        next_pivot = torch.where(swapped, upper - factor * below_diag, below_diag - factor * upper)
        upper = torch.where(swapped, -factor * below_upper, below_upper)
        pivot = next_pivot
        y_next = x[:, i + 1].clone()
        y_top = torch.where(swapped, y_next, y)
        x[:, i] = y_top
        y = torch.where(swapped, y, y_next) - factor * y_top
    x[:, m - 1] = y
    diag[:, m - 1] = pivot
    x1 = x2 = None
    for i in reversed(range(m)):
        acc = x[:, i]
        if i + 1 < m:
            acc = acc - u1[:, i] * x1
        if i + 2 < m:
            u2 = torch.where(swaps[:, i], e[:, i + 1:i + 2], 0) if i + 1 < m - 1 else torch.zeros_like(acc)
            acc = acc - u2 * x2
        pivot_i = diag[:, i]
        pivot_i = torch.where(pivot_i.abs() < pivtol[:, None], torch.copysign(pivtol[:, None].expand_as(pivot_i),
                                                                              pivot_i), pivot_i)
        x[:, i] = acc / pivot_i
        x2, x1 = x1, x[:, i].clone()
    return x / x.abs().amax(dim=1, keepdim=True)


def warp_sum(v: torch.Tensor) -> torch.Tensor:
    """popkit::warp_sum over the last dimension (<= 32 lanes, the rest zero): the butterfly's order."""
    v = torch.nn.functional.pad(v, (0, WARP - v.shape[-1]))
    lanes = torch.arange(WARP, device=v.device)
    for offset in (16, 8, 4, 2, 1):
        v = v + v[..., lanes ^ offset]
    return v[..., 0]


def gram_schmidt(x: torch.Tensor) -> torch.Tensor:
    """The kernel's gram_schmidt on x[row][lane]: classical, twice, sums in index order, norm by butterfly."""
    x = x.clone()
    m = x.shape[1]
    for j in range(m):
        for _ in range(2 if j else 0):
            coefficient = torch.zeros_like(x[:, 0, :j])
            for k in range(m):
                coefficient = coefficient + x[:, k, :j] * x[:, k, j:j + 1]
            projection = torch.zeros_like(x[:, :, 0])
            for i in range(j):
                projection = projection + coefficient[:, i:i + 1] * x[:, :, i]
            x[:, :, j] = x[:, :, j] - projection
        v = x[:, :, j]
        x[:, :, j] = v / torch.sqrt(warp_sum(v * v))[:, None]
    return x


# ---------------------------------------------------------------------------------------------
# Merges: tridiagonal_merge.cu.
# ---------------------------------------------------------------------------------------------

def stable_rank(x: torch.Tensor) -> torch.Tensor:
    """The kernel's stable_rank for every entry: smaller entries, and equal ones with a lower index."""
    index = torch.arange(x.shape[1], device=x.device)
    before = (x[:, None, :] < x[:, :, None]) | ((x[:, None, :] == x[:, :, None]) & (index[None, :] < index[:, None]))
    return before.sum(dim=2)


def merge_kernel_order(w1, Z1, w2, Z2, beta):
    """(values, S) as eigh_tridiagonal_merge computes them (tridiagonal_model.merge_factors' outputs)."""
    b, n1 = w1.shape
    n = n1 + w2.shape[1]
    finfo = torch.finfo(w1.dtype)
    rows = torch.arange(b, device=w1.device)[:, None]
    rho = 2 * beta.abs()
    sign = torch.where(beta < 0, -torch.ones_like(beta), torch.ones_like(beta))
    raw_d = torch.cat([w1, w2], dim=1)
    raw_z = torch.cat([Z1[:, -1, :], sign[:, None] * Z2[:, 0, :]], dim=1) * math.sqrt(0.5)
    rank = stable_rank(raw_d)
    D, z = nan_like(w1, b, n), nan_like(w1, b, n)
    perm = torch.full((b, n), -1, dtype=torch.long, device=w1.device)
    D[rows, rank], z[rows, rank], perm[rows, rank] = raw_d, raw_z, torch.arange(n, device=w1.device).expand(b, n)
    D, z, deflated, (partner, cosine, sine) = model.deflate(D, z, rho)
    # The compression: live poles first, then the deflated ones, each in sorted order.
    k = (~deflated).sum(dim=1, keepdim=True)
    position = torch.where(deflated, k + deflated.long().cumsum(dim=1) - 1, (~deflated).long().cumsum(dim=1) - 1)
    order = torch.full_like(perm, -1)
    dc, zc = nan_like(w1, b, n), nan_like(w1, b, n)
    order[rows, position] = torch.arange(n, device=w1.device).expand(b, n)
    dc[rows, position] = D
    zc[rows, position] = torch.where(deflated, torch.zeros_like(z), z)
    weight_sum = (zc * zc).sum(dim=1)

    index = torch.arange(n, device=w1.device).expand(b, n)
    live = index < k
    origin, tau = solve_roots(dc, zc, rho, weight_sum, k, live)
    value = torch.where(live, dc.gather(1, origin) + tau, dc)
    delta = (dc[:, None, :] - dc.gather(1, origin)[:, :, None]) - tau[:, :, None]      # [root i, pole j]
    last = index == k - 1
    partner_pole = torch.where(index[:, :, None] < index[:, None, :], dc[:, :, None],
                               dc.gather(1, (index + 1).clamp(max=n - 1))[:, :, None])
    denominator = torch.where(last[:, :, None], rho[:, None, None], partner_pole - dc[:, None, :])
    product = torch.ones_like(dc)
    for i in range(n):
        factor = -delta[:, i] / denominator[:, i]
        product = torch.where(live[:, i:i + 1], product * factor, product)
    z_hat = torch.copysign(torch.sqrt(product), zc)
    u = z_hat[:, None, :] / delta                                                       # [root i, pole j]
    squares = torch.zeros_like(dc)
    for j in range(n):
        squares = torch.where(live[:, j:j + 1], squares + u[:, :, j] * u[:, :, j], squares)
    norm = torch.clamp(torch.sqrt(squares), min=finfo.tiny)
    column = stable_rank(value)

    S = nan_like(w1, b, n, n)
    for r in range(n):
        entry = torch.where(live, torch.where(live[:, r:r + 1], u[:, :, r] / norm, 0),
                            (index == r).to(w1.dtype))                                  # U[r, i] for every root i
        S[rows, perm.gather(1, order[:, r:r + 1]), column] = entry
    for j in reversed(range(n)):
        p = partner[:, j:j + 1]
        rotated = p != j
        if not bool(rotated.any()):
            continue
        row_p, row_j = perm.gather(1, p), perm[:, j:j + 1]
        xp, xj = S[rows, row_p], S[rows, row_j]
        c, s = cosine[:, j, None, None], sine[:, j, None, None]
        S[rows, row_p] = torch.where(rotated[:, :, None], c * xp + s * xj, xp)
        S[rows, row_j] = torch.where(rotated[:, :, None], -s * xp + c * xj, xj)
    values = nan_like(w1, b, n)
    values[rows, column] = value
    return values, S


def merge_stage_kernel_order(w1, Z1, w2, Z2, beta):
    """The CUDA route's merge stage in this replay: the merge kernel, then the model's back-multiplication."""
    values, S = merge_kernel_order(w1, Z1, w2, Z2, beta)
    return values, model.back_multiply(Z1, Z2, S)


def solve_roots(dc, zc, rho, weight_sum, k, live):
    """The kernel's solve_root for every root at once: each root stops on its own (a thread each)."""
    b, n = dc.shape
    eps = torch.finfo(dc.dtype).eps
    index = torch.arange(n, device=dc.device).expand(b, n)
    last = index == k - 1
    nxt = (index + 1).clamp(max=n - 1)
    gap = dc.gather(1, nxt) - dc
    mid = 0.5 * gap
    left = last | (secular_terms(dc, zc, rho, k, index, mid)[0] >= 0)
    origin = torch.where(live, torch.where(left, index, nxt), index)
    zero = torch.zeros_like(dc)
    lo = torch.where(left, zero, mid - gap)
    hi = torch.where(last, rho[:, None] * weight_sum[:, None], torch.where(left, mid, zero))
    tau = torch.where(live, torch.where(left, hi, lo), zero)
    active = live.clone()
    for _ in range(model.SECULAR_MAX_STEPS):
        f, psi, phi, dpsi, dphi, here, following = secular_terms(dc, zc, rho, k, origin, tau)
        lo = torch.where(active & (f < 0), tau, lo)
        hi = torch.where(active & (f > 0), tau, hi)
        bound = eps * (1 + rho[:, None] * (model.SECULAR_TERM_ERROR * (phi - psi) + tau.abs() * (dpsi + dphi)))
        active &= f.abs() > bound
        if not bool(active.any()):
            break
        candidate = tau + model.rational_step(f, rho[:, None], dpsi, dphi, here, following, last)
        candidate = torch.where((candidate > lo) & (candidate < hi), candidate, 0.5 * (lo + hi))
        active &= (candidate > lo) & (candidate < hi)
        tau = torch.where(active, candidate, tau)
    return origin, tau


def secular_terms(dc, zc, rho, k, origin, tau):
    """The kernel's secular_terms for every root i (batch x n each): live poles only, summed in index order."""
    b, n = dc.shape
    index = torch.arange(n, device=dc.device)
    base = dc.gather(1, origin)
    psi, phi, dpsi, dphi = (torch.zeros_like(dc) for _ in range(4))
    for j in range(n):
        delta = (dc[:, j:j + 1] - base) - tau
        weight = zc[:, j:j + 1] * zc[:, j:j + 1]
        term, slope = weight / delta, weight / (delta * delta)
        live = j < k
        on_left = live & (j <= index)
        on_right = live & (j > index)
        psi, dpsi = torch.where(on_left, psi + term, psi), torch.where(on_left, dpsi + slope, dpsi)
        phi, dphi = torch.where(on_right, phi + term, phi), torch.where(on_right, dphi + slope, dphi)
    f = 1 + rho[:, None] * (psi + phi)
    here = (dc - base) - tau
    nxt = (index + 1).clamp(max=n - 1).expand(b, n)
    following = torch.where(index < n - 1, (dc.gather(1, nxt) - base) - tau, here)
    return f, psi, phi, dpsi, dphi, here, following
