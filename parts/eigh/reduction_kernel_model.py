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

Step 3's A22 v has two forms, as the kernel's `symv` argument (reduction_route.SYMV): "rows", the full
square's rows dotted with v, and "tiles" (symv_tiles): 32 x 32 tiles at absolute indices on and below the
diagonal, each read once, whose row and column sums its 16 warps leave in 8 partial vectors that step 4
adds in the kernel's order. Here the tiles read a copy of A with every block above the diagonal NaN (never
read) and zeros past n (what the kernel loads there), v from the kernel's s_v (v over 0..n-1, zeros up to
row c, zero padding to whole tiles), and the partial vectors start NaN every column: a tile the warps skip,
a partial sum step 4 reads unwritten, or a read above the diagonal shows as NaN.

The tiles form's `cluster` (the kernel's, reduction_route.CLUSTER: C CTAs a matrix, a thread block cluster)
splits the tiles over C CTAs (symv_share), each with its own 8 partial vectors (NaN every column) and its own
copy of v (the leader's, rank 0, from the tile row of c+1 on; NaN below, so a read there shows); A22 v's row i
is then the sum over ranks 0..C-1, in that order, of each rank's partial sums in the one-CTA order (cta_sums:
those of the tile rows and columns the rank holds). C = 1 is the one-CTA kernel's order.
"""
import torch

from parts.eigh.reduction_model import PANEL, householder, matvec  # popkit: inline

SYMV_TILE = 32
SYMV_GROUPS = SYMV_CLASSES = 4            # the tiles form's 16 warps: row groups x column classes
CLUSTER_SIZES = (1, 2, 4, 8, 16)          # the kernel's CTAs a matrix


def tridiagonalize_kernel_order(A: torch.Tensor, panel: int = PANEL, symv: str = "rows", cluster: int = 1):
    """(d, e, V, T) as tridiagonal_reduction.cu's eigh_tridiagonalize computes them (reduction_model's storage),
    step 3 in the form `symv` ("rows" or "tiles"), on `cluster` CTAs a matrix (over 1: tiles only)."""
    if symv not in ("rows", "tiles"):
        raise ValueError(f"symv {symv!r}: rows or tiles")
    if cluster not in CLUSTER_SIZES or (cluster > 1 and symv != "tiles"):
        raise ValueError(f"cluster {cluster!r}: one of {CLUSTER_SIZES}, over 1 only with tiles")
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
        panel_kernel(A, d, e, V, T, Vp, W, k, nb, symv, cluster)
        update_kernel(A, Vp, W, k + nb, nb)
    d[:, reflectors:] = A[:, reflectors:, reflectors:].diagonal(dim1=1, dim2=2)
    if n >= 2:
        e[:, n - 2] = A[:, n - 1, n - 2]
    return d, e, V, T


def panel_kernel(A, d, e, V, T, Vp, W, k, nb, symv="rows", cluster=1):
    """eigh_reduce_panel: steps 1-5 of the kernel per column; A is only read."""
    b, n, _ = A.shape
    panel = Vp.shape[2]
    nan = dict(fill_value=float("nan"), dtype=A.dtype, device=A.device)
    s_T = torch.full((b, panel, panel), **nan)
    if symv == "tiles":
        ld = -(-n // SYMV_TILE) * SYMV_TILE
        seen = tiles_view(A, ld)                             # A does not change inside a panel
        s_v = torch.full((b, cluster, ld), **nan)          # each rank's; rank 0's is the leader's
        s_v[:, :, n:] = 0                                    # the last tile's padding, zeroed once
        s_sym = torch.full((b, cluster, SYMV_GROUPS + SYMV_CLASSES, ld), **nan)
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
        if symv == "rows":
            Av = matvec(A[:, c + 1:, c + 1:], v)
        else:
            s_v[:, 0, :c + 1], s_v[:, 0, c + 1:n] = 0, v
            first = (c + 1) // SYMV_TILE * SYMV_TILE
            s_v[:, 1:, :first] = float("nan")                # the other ranks copy from the tile of row c+1 on
            s_v[:, 1:, first:] = s_v[:, :1, first:]
            s_sym.fill_(float("nan"))
            symv_tiles(seen, s_v, s_sym, c)
            Av = cluster_sum(s_sym, c, n)                    # step 4
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


def tiles_view(A, ld):
    """A as the tiles form can read it, ld x ld: the 32 x 32 blocks on and below the diagonal, zeros past n (the
    kernel's loads of the last tile row and column there), NaN in every block above the diagonal (never read)."""
    b, n, _ = A.shape
    seen = A.new_zeros(b, ld, ld)
    seen[:, :n, :n] = A
    block = torch.arange(ld, device=A.device) // SYMV_TILE
    seen[:, block[:, None] < block[None, :]] = float("nan")
    return seen


def snake_members(m, k, count):
    """The tile indices below `count` of class m among k, in the kernel's snake order (snake_member)."""
    members, b = [], 0
    while (t := k * b + (k - 1 - m if b % 2 else m)) < count:
        members.append(t)
        b += 1
    return members


def snake_owner(t, k):
    """The class among k whose snake order holds each tile index of the tensor t (the kernel's snake_owner)."""
    return torch.where((t // k) % 2 == 1, k - 1 - t % k, t % k)


def symv_share(rank, cluster):
    """The kernel's SymvShare of a rank: (group0, groups, class0, classes), its warps (g, q) being row group
    group0 + g of groups and column class class0 + q of classes: 4 Cr x 4 Cc over the cluster, Cr = max(1, C / 4)."""
    row_ranks = max(1, cluster // 4)
    column_ranks = cluster // row_ranks
    return (SYMV_GROUPS * (rank // column_ranks), SYMV_GROUPS * row_ranks, SYMV_CLASSES * (rank % column_ranks),
            SYMV_CLASSES * column_ranks)


def symv_tiles(seen, s_v, part, c):
    """Step 3 in the tiles form on each rank of the cluster (part: batch x ranks x 8 x ld, s_v: batch x ranks x ld):
    warp (g, q) of a rank takes the tiles whose tile row (from the one holding row c+1) is of row group group0 + g
    and whose tile column is of column class class0 + q (symv_share); each tile's row sums add to its tile row's
    total, stored in part[q], and below the diagonal its column sums add to part[SYMV_CLASSES + g] (zeroed first),
    as the kernel's lanes do. A diagonal tile counts whole, for its row sums alone."""
    b, ld, _ = seen.shape
    t0 = (c + 1) // SYMV_TILE
    tiles = ld // SYMV_TILE - t0

    def span(t):
        return slice((t0 + t) * SYMV_TILE, (t0 + t + 1) * SYMV_TILE)

    for rank in range(part.shape[1]):
        group0, groups, class0, classes = symv_share(rank, part.shape[1])
        own, v = part[:, rank], s_v[:, rank]
        for g in range(SYMV_GROUPS):
            for q in range(SYMV_CLASSES):
                columns = snake_members(class0 + q, classes, tiles)
                for u in columns:
                    own[:, SYMV_CLASSES + g, span(u)] = 0
                for t in snake_members(group0 + g, groups, tiles):
                    total = torch.zeros(b, SYMV_TILE, dtype=seen.dtype, device=seen.device)
                    for u in (u for u in columns if u <= t):
                        tile = seen[:, span(t), span(u)]
                        total += matvec(tile, v[:, span(u)])
                        if u < t:
                            own[:, SYMV_CLASSES + g, span(u)] += matvec(tile.mT, v[:, span(t)])
                    own[:, q, span(t)] = total


def cluster_sum(part, c, n):
    """Step 4's A22 v over rows c+1..n-1: per rank (cta_partials) its row sums where it holds the row's tile row
    group, then its column sums where it holds that tile column's class, added one by one in the kernel's order;
    then the ranks' sums in rank order. Partial entries no rank wrote are NaN, so reading one shows."""
    b, cluster = part.shape[:2]
    rows = torch.arange(c + 1, n, device=part.device)
    t = rows // SYMV_TILE - (c + 1) // SYMV_TILE
    total = None
    for rank in range(cluster):
        group0, groups, class0, classes = symv_share(rank, cluster)
        holds_row = (snake_owner(t, groups) - group0).div(SYMV_GROUPS, rounding_mode="floor") == 0
        holds_column = (snake_owner(t, classes) - class0).div(SYMV_CLASSES, rounding_mode="floor") == 0
        own = torch.zeros(b, rows.numel(), dtype=part.dtype, device=part.device)
        for q in range(SYMV_CLASSES):
            own = torch.where(holds_row, own + part[:, rank, q, c + 1:n], own)
        for g in range(SYMV_GROUPS):
            own = torch.where(holds_column, own + part[:, rank, SYMV_CLASSES + g, c + 1:n], own)
        total = own if total is None else total + own
    return total


def update_kernel(A, Vp, W, start, nb):
    """eigh_update_trailing: A[start:, start:] -= V W^T + W V^T, the lower triangle computed and mirrored."""
    Vs, Ws = Vp[:, start:, :nb], W[:, start:, :nb]
    lower = (Vs @ Ws.mT + Ws @ Vs.mT).tril()
    A[:, start:, start:] -= lower + lower.tril(-1).mT
