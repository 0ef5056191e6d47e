"""Torch model of our symmetric tridiagonal eigensolver (issue 10, eigh): the executable specification.

What it computes
    For a batch of real symmetric tridiagonal matrices T (diagonal d: batch x n, off-diagonal e:
    batch x n-1), the eigenvalues w ascending and orthonormal eigenvectors Z (in columns) with
    T = Z diag(w) Z^T. It is stage 2 of the three-stage eigh (tridiagonalise, solve T, back-transform).

The math: Cuppen's divide and conquer
    Tear T at its middle k with the coupling beta = e[k-1]:
        T = diag(T1', T2') + rho v v^T,  v = (e_{k-1} + sign(beta) e_k) / sqrt(2),  rho = 2 |beta|,
    where T1', T2' are T's diagonal blocks with |beta| taken off their touching diagonal entries.
    With Ti' = Zi diag(wi) Zi^T, the merge solves the rank-one update of a diagonal matrix
        diag(D) + rho z z^T,  D = (w1, w2),  z = diag(Z1, Z2)^T v = (last row of Z1, ±first row of Z2)/sqrt(2),
    whose eigenvalues are the roots of the secular equation f(lam) = 1 + rho sum_j z_j^2 / (D_j - lam),
    one in each gap of the sorted D and the last in (D_max, D_max + rho |z|^2]. With the roots lam_i,
    Gu and Eisenstat's (Loewner) formula gives the z_hat for which they are exact,
        z_hat_j^2 = prod_i (lam_i - D_j) / (rho prod_{l != j} (D_l - D_j)),
    and the eigenvectors u_i = (z_hat_j / (D_j - lam_i))_j / norm, orthogonal to working precision
    because every D_j - lam_i is computed to high relative accuracy (each root is kept as
    origin pole + offset tau). The eigenvectors of T are diag(Z1, Z2) @ S, S holding the u_i.

Recursion shape
    Split at n // 2 until a block has at most `leaf_size` rows (default 32). Every matrix of a
    batch has the same n, so the tree is the same for all of them; halves of equal size are solved
    as one batch, so each tree level is one batched call (one kernel launch per level on the GPU).

CUDA kernels (one row per stage; tridiagonal_route.py runs them through this recursion)
    leaf kernel     tridiagonal_leaf.cu, `solve_leaf`: one warp per leaf, one lane per eigenvalue. Bisection on Sturm
                    counts, the lane's shift (`cluster_shifts`: a ballot and shuffles), then inverse
                    iteration (a tridiagonal LU solve per lane) and Gram-Schmidt of the leaf's vectors.
    merge kernel    tridiagonal_merge.cu, `merge_factors`: z, sort, `deflate` (a serial scan: one thread),
                    `solve_secular` (one thread per root), `secular_vectors` (a thread per
                    column), then the deflation rotations and permutations applied to S.
    GEMM            `back_multiply`, Z = [Z1 @ S[:n1]; Z2 @ S[n1:]]: torch matmuls for now (to come: tensor
                    cores at fp32 accuracy); LAPACK additionally skips S's deflated columns.

Numerical safeguards
    - Each matrix is scaled by a power of two (exact) to max |entry| in [0.5, 1): no overflow
      in e^2 or z^2 (inputs reach 1.8e19), and every tolerance below is relative to 1.
    - Sturm counts replace a pivot smaller than pivmin by -pivmin (LAPACK's slaebz), so an
      exact zero pivot never divides.
    - Inverse iteration perturbs tiny LU pivots (slagts), gives the lanes of a chain of eigenvalues that
      bisection cannot tell apart one shared shift just outside the chain (`cluster_shifts`:
      without it, clusters such as d = 1 with couplings near eps lose orthogonality entirely),
      normalises by the largest entry before Gram-Schmidt (no overflow in the dot products),
      and orthogonalises every leaf vector against all earlier ones.
    - Deflation (slaed2's two tests, tolerance DEFLATION_TOL) leaves poles strictly separated and
      every z_j away from zero, so the secular roots are strictly interlaced.
    - The secular iteration is bracketed: a two-pole rational step is taken only when it lands
      strictly inside the current bracket, otherwise the bracket is bisected.

All arithmetic is in the input's dtype (float32 in production); nothing needs float64.
"""
import math

import torch

LEAF_SIZE = 32
# slaed2: TOL = 8 * slamch('Epsilon') * max(|D|_max, |z|_max); slamch('Epsilon') is the unit
# roundoff eps/2, so 8 of those are 4 machine epsilons. A pole whose rho |z_j| is below it, or
# a pair whose coupling after a Givens rotation is below it, is left where it is.
DEFLATION_TOL = 4
# Stop once |f| <= eps * (1 + rho * (SECULAR_TERM_ERROR * sum_j |z_j^2 / delta_j| + |tau| f'/rho)):
# the rounding error of evaluating f. slaed4 uses its worst-case bound (a factor 8); in float32
# that left roots ~8 ulps off (measured: eigenvalue errors 2.5x larger), so we stop at the typical
# error instead; where f's noise never gets that small the bracket closes to adjacent floats.
SECULAR_TERM_ERROR = 1
# The rational step converges quadratically (a handful of steps); the cap only bounds the
# bisection fallback, which reaches the adjacent float of tau well within it.
SECULAR_MAX_STEPS = 64
# With eigenvalues accurate to eps ||T||, one solve multiplies the wanted eigenvector by at
# least 1/eps relative to the others' 1/gap; three solves leave (eps/gap)^3-sized contamination,
# whose residual (eps/gap)^3 * gap stays below eps for any gap >= eps. Clusters tighter than
# that are handled by cluster_shifts and Gram-Schmidt, not by more solves.
INVERSE_ITERATIONS = 3
# Bisection leaves each eigenvalue within ~eps ||T|| of the truth (0.7 eps ||T|| measured): chains of
# neighbours closer than CLUSTER_GAP eps ||T|| share one shift, CLUSTER_OFFSET eps ||T|| outside the
# chain (see cluster_shifts). 4 split chains of gaps 1-13 eps ||T|| (the clustered family at n = 512)
# into groups whose shift sat inside the chain: leaf residuals up to 707 n eps ||T||; 8, 12 and 16
# measured alike (<= 6.8 over 2 x 10240 leaves of 640x512 clustered and mixed; 8 has the lowest median).
CLUSTER_GAP = 8
CLUSTER_OFFSET = 2


def tridiagonal_eigh_model(d: torch.Tensor, e: torch.Tensor, leaf_size: int = LEAF_SIZE, leaf_stage=None,
                           merge_stage=None):
    """(w, Z): eigenvalues ascending (batch x n) and eigenvectors in columns (batch x n x n) of tridiag(e, d, e).

    `leaf_stage(d, e) -> (w, Z)` and `merge_stage(w1, Z1, w2, Z2, beta) -> (w, Z)` replace solve_leaf and
    merge (the CUDA route passes its kernels); the scaling and the recursion stay this model's."""
    b, n = d.shape
    if e.shape != (b, max(n - 1, 0)) or leaf_size < 1:
        raise ValueError(f"need d (batch, n), e (batch, n-1) and leaf_size >= 1; got {tuple(d.shape)}, "
                         f"{tuple(e.shape)}, {leaf_size}")
    scale = power_of_two_scale(torch.cat([d, e], dim=1))
    w, Z = divide_and_conquer(d / scale[:, None], e / scale[:, None], leaf_size, leaf_stage or solve_leaf,
                              merge_stage or merge)
    return w * scale[:, None], Z


def power_of_two_scale(entries: torch.Tensor) -> torch.Tensor:
    """Per matrix, the power of two that brings max |entry| into [0.5, 1) (1 for a zero matrix): exact scaling."""
    return power_of_two_above(largest_magnitude(entries))


def largest_magnitude(entries: torch.Tensor) -> torch.Tensor:
    """Per row of entries, max |entry| (NaN if one is NaN): one reduction, no |entries| temporary of the batch."""
    return torch.linalg.vector_norm(entries, ord=math.inf, dim=1)


def power_of_two_above(largest: torch.Tensor) -> torch.Tensor:
    """The power of two that brings each `largest` into [0.5, 1) (1 for a zero)."""
    _, exponent = torch.frexp(largest)
    return torch.where(largest > 0, torch.ldexp(torch.ones_like(largest), exponent), torch.ones_like(largest))


def divide_and_conquer(d: torch.Tensor, e: torch.Tensor, leaf_size: int, leaf_stage, merge_stage):
    """Eigenpairs of every tridiagonal of the batch: tear at the middle, solve both halves, merge."""
    n = d.shape[1]
    if n <= leaf_size:
        return leaf_stage(d, e)
    half = n // 2
    d1, e1, d2, e2, beta = tear(d, e, half)
    if 2 * half == n:
        w, Z = divide_and_conquer(torch.cat([d1, d2]), torch.cat([e1, e2]), leaf_size, leaf_stage, merge_stage)
        (w1, w2), (Z1, Z2) = w.chunk(2), Z.chunk(2)
    else:
        w1, Z1 = divide_and_conquer(d1, e1, leaf_size, leaf_stage, merge_stage)
        w2, Z2 = divide_and_conquer(d2, e2, leaf_size, leaf_stage, merge_stage)
    return merge_stage(w1, Z1, w2, Z2, beta)


def tear(d: torch.Tensor, e: torch.Tensor, k: int):
    """T = diag(T1', T2') + |beta| (e_{k-1} + sign(beta) e_k)(...)^T with beta = e[k-1]: the two halves and beta."""
    beta = e[:, k - 1]
    d1, d2 = d[:, :k].clone(), d[:, k:].clone()
    d1[:, -1] -= beta.abs()
    d2[:, 0] -= beta.abs()
    return d1, e[:, :k - 1], d2, e[:, k:], beta


# ---------------------------------------------------------------------------------------------
# Leaves: bisection on Sturm counts, then inverse iteration.
# ---------------------------------------------------------------------------------------------

def solve_leaf(d: torch.Tensor, e: torch.Tensor):
    """Eigenpairs of small tridiagonals: eigenvalues by bisection, eigenvectors by inverse iteration."""
    if d.shape[1] == 1:
        return d.clone(), torch.ones_like(d)[:, :, None]
    lo, hi = gershgorin_interval(d, e)
    tnorm = torch.maximum(lo.abs(), hi.abs())
    w = bisect_leaf(d, e, lo, hi, tnorm)
    return w, inverse_iteration(d, e, w, tnorm)


def gershgorin_interval(d: torch.Tensor, e: torch.Tensor):
    """(lo, hi) per matrix enclosing every eigenvalue: min/max of d_i -/+ (|e_{i-1}| + |e_i|)."""
    radius = torch.zeros_like(d)
    radius[:, :-1] += e.abs()
    radius[:, 1:] += e.abs()
    return (d - radius).amin(dim=1), (d + radius).amax(dim=1)


def sturm_count(d: torch.Tensor, e2: torch.Tensor, x: torch.Tensor, pivmin: torch.Tensor) -> torch.Tensor:
    """Per matrix and per shift x (batch x k), how many eigenvalues lie below x.

    The count of negative pivots q_i of the LDL^T factorization of T - x I (Sylvester's inertia):
    q_0 = d_0 - x, q_i = d_i - x - e_{i-1}^2 / q_{i-1}. A pivot smaller than pivmin becomes
    -pivmin (slaebz), so e^2 / q never divides by zero; pivmin = tiny * max(1, max e^2) keeps
    that quotient finite. The count is monotone in x in IEEE arithmetic (Demmel, Dhillon, Ren).
    """
    count = torch.zeros_like(x, dtype=torch.long)
    q = None
    for i in range(d.shape[1]):
        q = d[:, i:i + 1] - x if i == 0 else d[:, i:i + 1] - x - e2[:, i - 1:i] / q
        q = torch.where(q.abs() < pivmin, -pivmin, q)
        count += q < 0
    return count


def bisection_steps(eps: float) -> int:
    """Halvings that take a Gershgorin interval (at most ~2 ||T|| wide) down to eps ||T||, plus 2 for its widening."""
    return math.ceil(math.log2(2 / eps)) + 2


def bisect_leaf(d, e, lo, hi, tnorm) -> torch.Tensor:
    """All eigenvalues of each leaf, ascending, to absolute accuracy eps ||T||: one bisection per index.

    Eigenvalue j is the x where sturm_count(x) passes j; each index keeps its own bracket
    [lo_j, hi_j] with count(lo_j) <= j < count(hi_j), so the indices run independently (a lane each).
    """
    b, m = d.shape
    finfo = torch.finfo(d.dtype)
    e2 = e * e
    pivmin = finfo.tiny * torch.clamp(e2.amax(dim=1, keepdim=True), min=1.0)
    widen = 2 * m * finfo.eps * tnorm[:, None] + 2 * pivmin   # count(lo) = 0 and count(hi) = m despite rounding
    lo = (lo[:, None] - widen).expand(b, m).clone()
    hi = (hi[:, None] + widen).expand(b, m).clone()
    index = torch.arange(m, device=d.device)
    for _ in range(bisection_steps(finfo.eps)):
        mid = 0.5 * (lo + hi)
        below = sturm_count(d, e2, mid, pivmin) > index    # eigenvalue j lies below mid
        hi = torch.where(below, mid, hi)
        lo = torch.where(below, lo, mid)
    return 0.5 * (lo + hi)


def start_vectors(lanes: int, m: int, dtype, device) -> torch.Tensor:
    """Fixed pseudo-random starting vectors (lanes x m) in [-1/2, 1/2): an integer hash of (lane, row),
    so a kernel reproduces them."""
    h = torch.arange(lanes, device=device)[:, None] * m + torch.arange(m, device=device)[None, :] + 1
    for _ in range(2):
        h = (((h >> 16) ^ h) * 0x45D9F3B) & 0xFFFFFFFF
    h = (h >> 16) ^ h
    return h.to(dtype) / 2.0 ** 32 - 0.5


def inverse_iteration(d, e, w, tnorm) -> torch.Tensor:
    """Eigenvectors (columns) of each leaf for its eigenvalues w: INVERSE_ITERATIONS solves with T - sigma_l I
    per lane (sigma from cluster_shifts), each followed by Gram-Schmidt of all the leaf's vectors in lane order;
    lane l's vector is the eigenvector of w[column_l] (cluster_shifts: a group's lanes nearest its shift first).

    Orthogonalising against every earlier vector (not only a cluster of close eigenvalues, as
    LAPACK's stein does) costs m^3/2 per leaf at m <= 32 and removes the eps/gap loss of
    orthogonality between separately computed vectors of moderately close eigenvalues.
    """
    b, m = d.shape
    shift, column = cluster_shifts(w, tnorm)
    pivtol = torch.finfo(d.dtype).eps * tnorm                     # slagts: pivots below eps ||T|| are perturbed
    factors = factor_shifted(d, e, shift, torch.clamp(pivtol, min=torch.finfo(d.dtype).tiny))
    x = start_vectors(m, m, d.dtype, d.device).expand(b, m, m)    # rows: lanes, columns: entries
    for _ in range(INVERSE_ITERATIONS):
        x = solve_factored(factors, x)
        x = x / x.abs().amax(dim=2, keepdim=True)                # a solve grows x by up to 1/pivtol
        x = orthonormalize_rows(x)
    return torch.empty_like(x).scatter_(2, column[:, None, :].expand(b, m, m), x.transpose(1, 2))


def cluster_shifts(w: torch.Tensor, tnorm: torch.Tensor):
    """(shift, column) per lane l of a leaf with eigenvalues w ascending: the shift of lane l's solves and the
    eigenvalue whose vector lane l computes.

    A group is a chain of eigenvalues whose consecutive gaps are all <= CLUSTER_GAP eps ||T||. A lone
    eigenvalue's lane solves with w_l itself, column l. A group of two or more shares one shift
    CLUSTER_OFFSET eps ||T|| outside the chain, on the side of its wider outer gap (above its largest w,
    or below its smallest), and its lanes take its eigenvalues nearest that shift first: above, lane
    first + i computes the vector of w[last - i]; below, lane l computes column l.

    Why one shift per group: lanes of an unresolved group would otherwise solve with (nearly) the same
    shift, which can sit far closer to one of the group's eigenvalues than to the others (1e-16
    against 1e-8 is seen): one solve then favours that direction by more than 1/eps in every lane and
    Gram-Schmidt is left with dependent vectors. From outside the chain every member lies on one side
    of the shift, so the lanes' solves and Gram-Schmidt are a subspace iteration onto the group's
    invariant subspace, and a lane's residual is bounded by the chain's width.
    Why chains, outside, and the wider side (2026-12-02, 640x512 clustered, seed 770004): with gaps
    of 1-13 eps ||T|| a threshold of 4 split one chain into groups whose shift, above each group,
    lay inside the chain, nearer the next group's eigenvalue than its own farthest member. Lanes with
    different shifts on both sides of an eigenvalue (an indefinite operator on the chain) then
    produced a vector lying in the span of the earlier ones: Gram-Schmidt's remainder was 2e-4 to
    4e-7 of it, the rest rounding noise along eigenvalues ||T|| away, leaf residuals up to 707 n eps
    ||T|| and 18 units of the eigen equation's n eps ||A|| at n = 512. Nearest first: the first
    lanes converge onto the members nearest the shift, so each keeps its own eigenvector (median
    leaf residual 1.5 against 4.9 in ascending order).
    """
    b, m = w.shape
    eps = torch.finfo(w.dtype).eps
    gaps = w[:, 1:] - w[:, :-1]
    apart = gaps > CLUSTER_GAP * eps * tnorm[:, None]
    index = torch.arange(m, device=w.device).expand(b, m)
    starts = torch.cat([torch.ones_like(apart[:, :1]), apart], dim=1)         # lane l begins a group
    ends = torch.cat([apart, torch.ones_like(apart[:, :1])], dim=1)           # lane l ends one
    first = torch.where(starts, index, 0).cummax(dim=1).values
    last = torch.where(ends, index, m - 1).flip(1).cummin(dim=1).values.flip(1)
    outside = torch.full_like(w[:, :1], math.inf)
    padded = torch.cat([outside, gaps, outside], dim=1)        # padded[l] = w_l - w_{l-1}, inf past either end
    up = padded.gather(1, last + 1) >= padded.gather(1, first)
    offset = CLUSTER_OFFSET * eps * tnorm[:, None]
    shared = last > first
    shift = torch.where(shared, torch.where(up, w.gather(1, last) + offset, w.gather(1, first) - offset), w)
    return shift, torch.where(shared & up, first + last - index, index)


def factor_shifted(d, e, shift, pivtol):
    """LU with partial pivoting of T - shift_j I for every lane j (slagtf): rows of U (diag, super, super-2),
    the multipliers and the row interchanges, each batch x lanes x m (m-1 for the last three)."""
    m = d.shape[1]
    a = d[:, None, :] - shift[:, :, None]
    sub = e[:, None, :].expand(-1, a.shape[1], -1)
    u0, u1, u2, mult, swap = [], [], [], [], []
    pivot, upper = a[..., 0], sub[..., 0]            # the current pivot row: its diagonal and first super entry
    for i in range(m - 1):
        below, below_diag = sub[..., i], a[..., i + 1]
        below_upper = sub[..., i + 1] if i + 1 < m - 1 else torch.zeros_like(pivot)
        swapped = below.abs() > pivot.abs()
        top = torch.where(swapped, below, pivot)
        other = torch.where(swapped, pivot, below)
        factor = other / torch.where(top == 0, torch.ones_like(top), top)   # top == 0 only when other == 0 too
        u0.append(top)
        u1.append(torch.where(swapped, below_diag, upper))
        u2.append(torch.where(swapped, below_upper, torch.zeros_like(upper)))
        mult.append(factor)
        swap.append(swapped)
        pivot = torch.where(swapped, upper - factor * below_diag, below_diag - factor * upper)
        upper = torch.where(swapped, -factor * below_upper, below_upper)
    u0.append(pivot)
    diag = torch.stack(u0, dim=2)
    tiny = diag.abs() < pivtol[:, None, None]
    diag = torch.where(tiny, torch.copysign(pivtol[:, None, None].expand_as(diag), diag), diag)
    return diag, u1, u2, mult, swap


def solve_factored(factors, rhs: torch.Tensor) -> torch.Tensor:
    """x with (T - shift_j I) x_j = rhs_j for every lane, from factor_shifted's LU: forward, then back substitution."""
    diag, u1, u2, mult, swap = factors
    m = rhs.shape[2]
    y = list(rhs.unbind(dim=2))
    for i in range(m - 1):
        top = torch.where(swap[i], y[i + 1], y[i])
        y[i + 1] = torch.where(swap[i], y[i], y[i + 1]) - mult[i] * top
        y[i] = top
    x = [None] * m
    for i in reversed(range(m)):
        acc = y[i]
        if i + 1 < m:
            acc = acc - u1[i] * x[i + 1]
        if i + 2 < m:
            acc = acc - u2[i] * x[i + 2]
        x[i] = acc / diag[..., i]
    return torch.stack(x, dim=2)


def orthonormalize_rows(x: torch.Tensor) -> torch.Tensor:
    """Gram-Schmidt of each matrix's rows in order, classical and applied twice ("twice is enough"):
    as orthogonal as the modified variant, and each projection is one parallel reduction."""
    x = x.clone()
    for j in range(x.shape[1]):
        v = x[:, j]
        for _ in range(2 if j else 0):
            coefficients = torch.einsum("bim,bm->bi", x[:, :j], v)
            v = v - torch.einsum("bi,bim->bm", coefficients, x[:, :j])
        x[:, j] = v / torch.linalg.vector_norm(v, dim=1, keepdim=True)
    return x


# ---------------------------------------------------------------------------------------------
# Merge: deflation, secular equation, Gu-Eisenstat vectors, back-multiplication.
# ---------------------------------------------------------------------------------------------

def merge(w1, Z1, w2, Z2, beta):
    """Eigenpairs of T from its torn halves' eigenpairs (w1, Z1), (w2, Z2) and the coupling beta."""
    values, S = merge_factors(w1, Z1, w2, Z2, beta)
    return values, back_multiply(Z1, Z2, S)


def back_multiply(Z1: torch.Tensor, Z2: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """T's eigenvectors diag(Z1, Z2) S: the merge's GEMM, each half's product written into its rows of the result
    (torch's batched GEMM takes a row-major view with a longer batch stride as its output: no copy, no cat)."""
    n1 = Z1.shape[1]
    Z = torch.empty(S.shape, dtype=S.dtype, device=S.device)
    torch.bmm(Z1, S[:, :n1], out=Z[:, :n1])
    torch.bmm(Z2, S[:, n1:], out=Z[:, n1:])
    return Z


def merge_factors(w1, Z1, w2, Z2, beta):
    """(values, S): the merged eigenvalues ascending and the n x n S with T's eigenvectors diag(Z1, Z2) S.

    Both sorts are stable, so ties keep the halves' order (the CUDA merge ranks them the same way)."""
    n = w1.shape[1] + w2.shape[1]
    sign = torch.where(beta < 0, -torch.ones_like(beta), torch.ones_like(beta))
    z = torch.cat([Z1[:, -1, :], sign[:, None] * Z2[:, 0, :]], dim=1) * math.sqrt(0.5)
    rho = 2 * beta.abs()
    D = torch.cat([w1, w2], dim=1)
    D, perm = D.sort(dim=1, stable=True)     # the secular equation wants its poles ascending
    z = z.gather(1, perm)
    D, z, deflated, rotations = deflate(D, z, rho)
    # Live (non-deflated) poles first, each group still ascending: the secular problem is dense in [0, k).
    order = torch.argsort(deflated.to(torch.uint8), dim=1, stable=True)
    live = torch.arange(n, device=D.device) < (~deflated).sum(dim=1, keepdim=True)
    dc, zc = D.gather(1, order), torch.where(live, z.gather(1, order), torch.zeros_like(z))
    origin, tau = solve_secular(dc, zc, rho, live)
    values, U = secular_vectors(dc, zc, rho, live, origin, tau)
    S = torch.empty_like(U).scatter_(1, order[:, :, None].expand_as(U), U)      # rows: back to sorted positions
    S = undo_rotations(S, rotations)                                           # rows: deflation basis -> sorted basis
    S = torch.empty_like(S).scatter_(1, perm[:, :, None].expand_as(S), S)      # rows: sorted -> the halves' order
    values, columns = values.sort(dim=1, stable=True)
    return values, S.gather(2, columns[:, None, :].expand_as(S))


def deflate(D: torch.Tensor, z: torch.Tensor, rho: torch.Tensor):
    """slaed2's deflation of diag(D) + rho z z^T, D ascending; returns (D, z, deflated, rotations).

    One scan over the poles, each matrix keeping a pending candidate p:
    - rho |z_j| <= tol: pole j is an eigenpair already (eigenvalue D_j, eigenvector e_j);
    - else, if a rotation in the (p, j) plane that zeroes z_p leaves a coupling
      |(D_j - D_p) c s| <= tol, apply it: p deflates with D_p c^2 + D_j s^2, j carries on with
      z_j = hypot(z_p, z_j) and D_p s^2 + D_j c^2.
    The survivors are strictly separated (gaps > 2 tol) and have rho |z| > tol. rotations
    (partner p, c, s per step j; p = j, c = 1, s = 0 where none) map the final basis back to the
    sorted one: x_p = c y_p + s y_j, x_j = -s y_p + c y_j, applied last rotation first.
    """
    b, n = D.shape
    tol = DEFLATION_TOL * torch.finfo(D.dtype).eps * torch.maximum(D.abs().amax(dim=1), z.abs().amax(dim=1))
    D, z = D.clone(), z.clone()
    deflated = torch.zeros_like(D, dtype=torch.bool)
    partner = torch.arange(n, device=D.device).expand(b, n).clone()
    cosine, sine = torch.ones_like(D), torch.zeros_like(D)
    pending = torch.full((b,), -1, dtype=torch.long, device=D.device)
    rows = torch.arange(b, device=D.device)
    for j in range(n):
        small = rho * z[:, j].abs() <= tol
        deflated[:, j] = small
        p = pending.clamp(min=0)
        zp, zj, dp, dj = z[rows, p], z[:, j].clone(), D[rows, p], D[:, j].clone()
        r = torch.hypot(zp, zj)
        c, s = zj / r, zp / r                            # r > 0 wherever it is used: j is not small
        close = (pending >= 0) & ~small & (((dj - dp) * c * s).abs() <= tol)
        if bool(close.any()):
            c = torch.where(close, c, torch.ones_like(c))
            s = torch.where(close, s, torch.zeros_like(s))
            D[rows, p] = dp * c * c + dj * s * s
            D[:, j] = torch.where(close, dp * s * s + dj * c * c, dj)
            z[rows, p] = torch.where(close, torch.zeros_like(zp), zp)
            z[:, j] = torch.where(close, r, zj)
            deflated[rows, p] |= close
            partner[:, j] = torch.where(close, p, partner[:, j])
            cosine[:, j], sine[:, j] = c, s
        pending = torch.where(small, pending, torch.full_like(pending, j))
    return D, z, deflated, (partner, cosine, sine)


def undo_rotations(S: torch.Tensor, rotations) -> torch.Tensor:
    """Apply deflate's rotations to the rows of S, last first: vectors in the deflated basis -> the sorted basis."""
    partner, cosine, sine = rotations
    S = S.clone()
    rows = torch.arange(S.shape[0], device=S.device)
    for j in reversed(range(S.shape[1])):
        if not bool((partner[:, j] != j).any()):
            continue
        p, c, s = partner[:, j], cosine[:, j, None], sine[:, j, None]
        Sp, Sj = S[rows, p], S[:, j].clone()
        S[rows, p] = c * Sp + s * Sj                     # where no rotation, p = j and both writes leave S_j
        S[:, j] = -s * Sp + c * Sj
    return S


def solve_secular(d, z, rho, live):
    """Roots of f(lam) = 1 + rho sum_j z_j^2 / (d_j - lam) over the live poles d[:k] (ascending), as (origin, tau):
    root i = d[origin_i] + tau_i, origin_i in {i, i+1} the pole nearer the root, so that
    d_j - root = (d_j - d[origin]) - tau keeps full relative accuracy.

    Root i < k-1 lies in (d_i, d_{i+1}); the sign of f at the gap's midpoint says which half, hence the
    origin. The last root lies in (d_{k-1}, d_{k-1} + rho |z|^2]. Each step evaluates f and brackets the
    root by its sign (f increases between poles), then takes `rational_step` (Li's "middle way": the left
    poles' sum psi and the right poles' sum phi each replaced by one pole matching value and slope)
    when it lands strictly inside the bracket, else the bracket's midpoint. Dead roots (i >= k) stay at 0.
    """
    b, n = d.shape
    eps = torch.finfo(d.dtype).eps
    index = torch.arange(n, device=d.device)
    last = index == live.sum(dim=1, keepdim=True) - 1
    nxt = (index + 1).clamp(max=n - 1).expand(b, n)
    gap = d.gather(1, nxt) - d
    mid = 0.5 * gap
    f_mid = secular_terms(d, z, rho, live, index.expand(b, n), mid)[0]
    left = (f_mid >= 0) | last
    origin = torch.where(left, index, nxt)
    zero = torch.zeros_like(d)
    lo = torch.where(left, zero, mid - gap)
    hi = torch.where(left, mid, zero)
    hi = torch.where(last, rho[:, None] * (z * z).sum(dim=1, keepdim=True), hi)
    tau = torch.where(live, torch.where(left, hi, lo), zero)
    active = live.clone()
    for _ in range(SECULAR_MAX_STEPS):
        f, psi, phi, dpsi, dphi, delta_here, delta_next = secular_terms(d, z, rho, live, origin, tau)
        lo = torch.where(active & (f < 0), tau, lo)
        hi = torch.where(active & (f > 0), tau, hi)
        error_bound = eps * (1 + rho[:, None] * (SECULAR_TERM_ERROR * (phi - psi) + tau.abs() * (dpsi + dphi)))
        active &= f.abs() > error_bound
        if not bool(active.any()):
            break
        candidate = tau + rational_step(f, rho[:, None], dpsi, dphi, delta_here, delta_next, last)
        inside = (candidate > lo) & (candidate < hi)
        candidate = torch.where(inside, candidate, 0.5 * (lo + hi))
        active &= (candidate > lo) & (candidate < hi)     # else the bracket is two adjacent floats: done
        tau = torch.where(active, candidate, tau)
    return origin, tau


def secular_terms(d, z, rho, live, origin, tau):
    """f and its pieces at root i's point d[origin_i] + tau_i, for every root i at once (batch x n each):
    (f, psi, phi, psi', phi', delta_i, delta_{i+1}) with psi the sum over poles j <= i (negative),
    phi over j > i (positive), delta_j = d_j - lam, and delta_i, delta_{i+1} root i's two poles."""
    n = d.shape[1]
    delta = pole_offsets(d, origin) - tau[:, :, None]
    weight = (z * z)[:, None, :]
    dead = ~live[:, None, :]                      # dead poles have z = 0; 0/0 must not leak into the sums
    term = torch.where(dead, torch.zeros_like(delta), weight / delta)
    slope = torch.where(dead, torch.zeros_like(delta), weight / (delta * delta))
    index = torch.arange(n, device=d.device)
    left = index[None, :] <= index[:, None]       # [root i, pole j]: j <= i
    psi, phi = (term * left).sum(dim=2), (term * ~left).sum(dim=2)
    dpsi, dphi = (slope * left).sum(dim=2), (slope * ~left).sum(dim=2)
    f = 1 + rho[:, None] * (psi + phi)
    delta_here = delta.diagonal(dim1=1, dim2=2)
    delta_next = torch.cat([delta.diagonal(offset=1, dim1=1, dim2=2), delta_here[:, -1:]], dim=1)
    return f, psi, phi, dpsi, dphi, delta_here, delta_next


def pole_offsets(d: torch.Tensor, origin: torch.Tensor) -> torch.Tensor:
    """d_j - d[origin_i] for every root i and pole j (batch x n x n): differences of data, no tau in them."""
    return d[:, None, :] - d.gather(1, origin)[:, :, None]


def rational_step(f, rho, dpsi, dphi, delta_here, delta_next, last):
    """Li's middle way: the step eta to the root of C + rho psi' dl^2 / (dl - eta) + rho phi' dr^2 / (dr - eta),
    the model matching f's value and slope with psi on the pole dl = delta_i and phi on dr = delta_{i+1}.

    Cleared of denominators it is C eta^2 - B eta + f dl dr = 0; the wanted root is the one between
    the poles (dl < eta < dr), taken from the cancellation-free pair q / C and f dl dr / q. The last
    root has no right pole: eta = dl f / (f - rho psi' dl).
    """
    dl, dr = delta_here, delta_next
    C = f - rho * (dpsi * dl + dphi * dr)
    B = C * (dl + dr) + rho * (dpsi * dl * dl + dphi * dr * dr)
    product = f * dl * dr
    q = 0.5 * (B + torch.copysign(torch.sqrt(torch.clamp(B * B - 4 * C * product, min=0)), B))
    first, second = q / C, product / q
    between = torch.where((first > dl) & (first < dr), first, second)
    return torch.where(last, dl * f / (f - rho * dpsi * dl), between)


def secular_vectors(d, z, rho, live, origin, tau):
    """(values, U): all n eigenvalues of the deflated problem and its eigenvectors in U's columns.

    Columns i < k: root i, with Gu-Eisenstat's z_hat (exact for the computed roots) and
    u_i = (z_hat_j / delta_ij)_j / norm. The product z_hat_j^2 = prod_i (lam_i - d_j) / (rho prod_{l!=j} (d_l - d_j))
    pairs each root with a neighbouring pole so every factor is a positive ratio of moderate size:
    (lam_i - d_j) / (d_i - d_j) for i < j, (lam_i - d_j) / (d_{i+1} - d_j) for j <= i < k-1, (lam_{k-1} - d_j) / rho.
    Columns i >= k: the deflated pole d_i itself, with the unit vector e_i.
    """
    b, n = d.shape
    delta = pole_offsets(d, origin) - tau[:, :, None]          # [root i, pole j] = d_j - lam_i
    values = torch.where(live, d.gather(1, origin) + tau, d)
    index = torch.arange(n, device=d.device)
    nxt = (index + 1).clamp(max=n - 1)
    last = (index == live.sum(dim=1, keepdim=True) - 1)[:, :, None]
    partner = torch.where(index[:, None] < index[None, :], d[:, :, None], d[:, nxt][:, :, None])
    denominator = torch.where(last, rho[:, None, None].expand(b, n, n), partner - d[:, None, :])
    both = live[:, :, None] & live[:, None, :]
    ratio = torch.where(both, -delta / denominator, torch.ones_like(delta))
    z_hat = torch.copysign(torch.sqrt(ratio.prod(dim=1)), z)
    vectors = torch.where(both, z_hat[:, None, :] / delta, torch.zeros_like(delta))
    vectors = vectors / torch.linalg.vector_norm(vectors, dim=2, keepdim=True).clamp(min=torch.finfo(d.dtype).tiny)
    unit = torch.diag_embed((~live).to(d.dtype))
    return values, vectors.transpose(1, 2) + unit
