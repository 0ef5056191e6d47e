// eigh, stage 1: blocked Householder tridiagonalisation (LAPACK ssytrd / slatrd, lower, panels of
// 32 columns), reduction_model.py's tridiagonalize_model in CUDA: same d, e, V, T, same panel algorithm.
//
// What it computes (per matrix of the batch, A symmetric n x n, prescaled by the caller)
//   d (n), e (n-1): the tridiagonal Q1^T A Q1 = tridiag(e, d, e), Q1 = H_0 ... H_{n-3};
//   V (n x r, r = n-2): reflector c in column c (zero in rows 0..c, 1 in row c+1);
//   T (r x p, p = min(32, r)): rows k..k+nb-1 hold the panel's upper-triangular compact-WY factor.
//   A is overwritten with the trailing matrices as the panels leave them (scratch for the caller).
//
// The math (reduction_model.reduce_panel, per column c = k + j of the panel starting at k)
//   column  = A[c:, c] - V[c:, :j] W[c, :j] - W[c:, :j] V[c, :j]   (A stale since the panel began)
//   d_c = column_0; (v, tau, beta) = slarfg(column_1..) with the tail's norm taken of the tail divided
//   by its largest entry (finding 2 in docs/priors.md); e_c = beta;
//   p = tau (A22 v - V (W^T v) - W (V^T v)),  W[:, j] = p - (tau/2)(p^T v) v,
//   T[:j, j] = -tau T[:j, :j] (V^T v),  T[j, j] = tau;
//   after the panel A22 -= V W^T + W V^T (the rank-2k update, its own kernel).
//   A is kept as a full symmetric square, exactly symmetric: the update computes each lower tile once
//   and writes it to both triangles. So column c is read as row c (coalesced), and A22 v is one
//   contiguous row dot product per row, as the model's full-square matvec ("rows", the reference), or
//   ("tiles", the candidate: `symv` picks at run time) a symmetric product over 32 x 32 tiles at absolute
//   indices on and below the diagonal: a tile below it read once for both y_I += A_IJ v_J and
//   y_J += A_IJ^T v_I, a diagonal tile read whole for y_I += A_II v_I; rows and columns <= c meet v's
//   zeros (reduction_kernel_model.symv_tiles replays it).
//
// Launch shape
//   eigh_reduce_panel: grid = batch (one CTA per matrix), `threads` (a multiple of 32, <= 512; tiles:
//     512) threads, 3 n floats of dynamic shared memory (the column, v, A22 v then p; tiles: 11 n, n
//     rounded up to 32, with 8 partial vectors of A22 v). Row i of the per-row work
//     (column update, v, p, W's column) belongs to thread i % threads in every column, so a thread
//     reads back its own writes of V and W without a barrier. The matrix-vector product, rows: each
//     warp takes kSymvRows rows at a time; tiles: the 16 warps as 4 row groups x 4 column classes, warp
//     (g, q) the tiles whose tile row is g's and tile column q's, lane 4h + r reading rows r + 4s
//     (s < 8), columns 4h..4h+3 of a tile (8 float4 loads, 4 whole rows a load instruction); row sums
//     and column sums leave the lanes by transposed shuffle sums (7 + 3 shuffles a tile), each into a
//     partial vector of its own writer (row sums: one a class, column sums: one a group), which the
//     row's owner adds in a fixed order: deterministic, no atomics. Six barriers a column either way:
//     the two norms' reductions, v ready, A22 v ready, V^T v and W^T v summed, p^T v.
//     The panel's V and W also go to Vp, W (n x 32 each, row-major): 128-byte aligned rows that the
//     per-row dot products read as float4 and the matrix-vector loop reads one coalesced row a warp.
//   eigh_reduce_panel with cluster C in {2, 4, 8, 16} (tiles, n % 4 == 0): grid = batch x C CTAs, a thread block
//     cluster of C a matrix (cudaLaunchKernelEx; 16 with the non-portable opt-in), the same 11 n floats a CTA (97 KiB
//     at n = 2048: two CTAs an SM, as one CTA's). Rank 0, the leader, runs steps 1, 2, 4, 5 and V^T v, W^T v as one
//     CTA does; step 3's tiles are split over the cluster's 16 C warps as 4 Cr row groups x 4 Cc column classes
//     (Cr = max(1, C / 4), Cc = C / Cr; rank ra Cc + rb holds groups 4 ra.. and classes 4 rb..), each rank reading v
//     from its own copy of the leader's (distributed shared memory, after a cluster barrier) and leaving its 8
//     partial vectors in its own shared memory; each other rank adds its partials per row (in the one-CTA order,
//     those of the tile rows and columns it holds) into its s_y, and after a second cluster barrier the leader adds
//     to its own sum the other ranks' in rank order 1..C-1 (loads of their shared memory, 8 in flight): two cluster
//     barriers a column, deterministic, no atomics. The order of A22 v's sum changes with C (rank sums of partial
//     sums): reduction_kernel_model.py replays it (`cluster`), tests/test_eigh_reduction_model.py checks it.
//   eigh_update_trailing: grid = (lower-triangle 64 x 64 tiles, batch), 256 threads, 4 x 4 entries a
//     thread, fp32 SIMT; a tile off the diagonal is also written, transposed through shared memory,
//     to the upper triangle.
//   eigh_tridiagonalize: the loop over panels (panel, update), then the last 2 x 2 block; one call.
//
// Why it is fast (H200, 2026-12-02; docs/priors.md "## eigh" has the runs)
//   The time is the matrix-vector product: it reads the trailing matrix once per column (n^3/3 floats
//   a matrix) and nothing else can start before it ends. Rows: each warp has one float4 load per lane
//   of each of its kSymvRows rows in flight (2 KB a warp, 32 KB a CTA, two CTAs an SM at <= 64
//   registers), reads the rows as float4 where n % 4 == 0 (scalar otherwise), through the read-only
//   path (A does not change inside a panel), and the products with the panel's V and W ride in the
//   same loop on rows the warp has just touched: 74.5 ms at 640 x 512, latency-bound.
//   Tiles (the default): half the bytes (the upper triangle is never read off the diagonal tiles) and up
//   to 8 float4 loads a lane a wave (4 KB a warp; ptxas issues 5, then 3 as the first land, at 64
//   registers, no spills); its V^T v, W^T v take a short loop of their own: the panels 42 ms at 640 x 512
//   (DRAM at 49% of its peak, long-scoreboard stalls 59%), against ~12 ms of bytes. Batching the panel's
//   L2 loads of Vp and W rows changed nothing (43 ms). The update, its factors one float4 shared load
//   each: 5.4 ms at 640 x 512 (13.6 with sixteen scalar loads an l). Levers to measure next: an L2
//   prefetch of a warp's next tile (loads in flight without registers), barriers a column.
//   Clusters (not yet measured on a GPU): where the batch is small one CTA a matrix leaves most SMs idle (8 x 2048:
//   8 CTAs on 132 SMs, 195 ms of reduction for ~46 GB of tile loads, ~10 ms at HBM speed if spread); C CTAs a matrix
//   spread step 3's loads over C SMs (the busiest warp's tiles, counted on CPU over every column: 1/10.2 of one CTA's
//   at C = 16, n = 2048; 1/1.9 at C = 2, n = 1024), against two cluster barriers and the leader's C - 1 remote loads a
//   row each column, and serial steps that stay on one SM.
#include <climits>
#include <cooperative_groups.h>

#include "device_utils.cuh"

namespace {

constexpr int kPanel = 32;                       // reduction_model.PANEL, and the width of Vp and W
constexpr int kPanelMaxThreads = 512;
constexpr int kPanelMaxWarps = kPanelMaxThreads / 32;
constexpr int kSymvRows = 4;                     // rows a warp multiplies at once: loads in flight
constexpr int kSymvTile = 32;                    // the tiles form's square tile, and its shared vectors' padding
constexpr int kSymvRowsForm = 0, kSymvTilesForm = 1;   // eigh_reduce_panel's `symv`
// The tiles form's 16 warps (it runs kPanelMaxThreads threads) as 4 row groups x 4 column classes: 4 + 4 partial
// vectors, where one a warp would take 16 (n = 2048 would then not fit two CTAs' shared memory).
constexpr int kSymvGroups = 4, kSymvClasses = kPanelMaxWarps / kSymvGroups;
constexpr int kSymvPartials = kSymvGroups + kSymvClasses;
constexpr int kRemoteLoads = 8;                 // a cluster leader's loads of the other ranks' sums in flight
constexpr int kClusterMax = 16;                 // CTAs a matrix (over 8: a non-portable cluster size)
constexpr int kTile = 64;                        // the update's tile
constexpr int kUpdateThreads = 256;              // 16 x 16, each 4 x 4 entries of a tile
constexpr int kFinishThreads = 128;

// A CTA-wide sum (or max, of values >= 0) in one barrier: each warp leaves its partial in `slot`,
// then every thread combines them. The panel kernel gives its three reductions three slots, so a
// slot is written again only two barriers after its last read.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float x, float* slot) {
    x = kMax ? popkit::warp_max(x) : popkit::warp_sum(x);
    if ((threadIdx.x & 31) == 0) slot[threadIdx.x >> 5] = x;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total = kMax ? fmaxf(total, slot[w]) : total + slot[w];
    return total;
}

// sum_{l < j} x[l] y[l] over a 32-float row x (Vp or W: 16-byte aligned) and y, in order of l.
// Entries l >= j are not read as products (they may hold another panel's values, or nothing yet).
// y_last replaces y[j - 1]: the row-c entry of W that its owner is writing in this very column.
__device__ __forceinline__ float panel_dot(const float* x, const float* y, int j, bool replace_last, float y_last) {
    float total = 0.f;
    for (int q = 0; 4 * q < j; ++q) {
        const float4 a = reinterpret_cast<const float4*>(x)[q];
        const float xs[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const int l = 4 * q + t;
            const float yl = (replace_last && l == j - 1) ? y_last : (l < j) ? y[l] : 0.f;
            total = fmaf(l < j ? xs[t] : 0.f, yl, total);
        }
    }
    return total;
}

// W's entry p - coef v: one expression for the stored entry and for the copy every thread computes.
__device__ __forceinline__ float w_entry(float p, float coef, float v) { return p - coef * v; }

// acc[t] += A[row t, c0:n] . v[c0:n] (each lane a partial sum), rows clamped to n - 1 by the caller.
template <bool kVec4>
__device__ __forceinline__ void row_products(const float* __restrict__ A, const float* s_v, int n, int c0,
                                             const int (&rows)[kSymvRows], float (&acc)[kSymvRows], int lane) {
    if constexpr (kVec4) {
        const int head = min((4 - (c0 & 3)) & 3, n - c0);       // scalar columns up to a 16-byte boundary
        if (lane < head) {
            const float x = s_v[c0 + lane];
#pragma unroll
            for (int t = 0; t < kSymvRows; ++t) acc[t] = fmaf(__ldg(A + (size_t)rows[t] * n + c0 + lane), x, acc[t]);
        }
        const float4* v4 = reinterpret_cast<const float4*>(s_v);
        // Not unrolled further: a second iteration's loads in flight spill at 64 registers (two CTAs of 512
        // threads an SM), and the other CTA's loads overlap this one's barriers instead.
#pragma unroll 1
        for (int q = (c0 + head) / 4 + lane; q < n / 4; q += 32) {
            const float4 x = v4[q];
#pragma unroll
            for (int t = 0; t < kSymvRows; ++t) {
                const float4 a = __ldg(reinterpret_cast<const float4*>(A + (size_t)rows[t] * n) + q);
                acc[t] = fmaf(a.x, x.x, fmaf(a.y, x.y, fmaf(a.z, x.z, fmaf(a.w, x.w, acc[t]))));
            }
        }
    } else {
#pragma unroll 4
        for (int col = c0 + lane; col < n; col += 32) {
            const float x = s_v[col];
#pragma unroll
            for (int t = 0; t < kSymvRows; ++t) acc[t] = fmaf(__ldg(A + (size_t)rows[t] * n + col), x, acc[t]);
        }
    }
}

// Row i's terms of the panel's V^T v and W^T v: lane l < j adds Vp[i, l] v_i and W[i, l] v_i.
__device__ __forceinline__ void panel_terms(const float* Vp, const float* W, const float* s_v, int i, int j, int lane,
                                            float& vv, float& wv) {
    if (lane < j) {
        const float vi = s_v[i];
        vv = fmaf(Vp[(size_t)i * kPanel + lane], vi, vv);
        wv = fmaf(W[(size_t)i * kPanel + lane], vi, wv);
    }
}

// The stride of the panel kernel's shared vectors: whole tiles in the tiles form (its last tile row and column run
// past n), else 16 bytes (s_v's float4 reads), as before the tiles form existed.
__host__ __device__ constexpr int vector_stride(int n, bool tiles) {
    return tiles ? (n + kSymvTile - 1) / kSymvTile * kSymvTile : (n + 3) & ~3;
}

// The b-th tile index of class m among k, in the snake order 0 1 .. k-1 k-1 .. 1 0 0 1 ..: increasing in b, and each
// class's tile rows (or columns) spread from the top of the triangle to its bottom, so the classes' shares of the
// triangle's tiles nearly balance.
__device__ __forceinline__ int snake_member(int b, int m, int k) { return k * b + ((b & 1) ? k - 1 - m : m); }

// The class among k whose snake order holds tile index t (snake_member's inverse).
__device__ __forceinline__ int snake_owner(int t, int k) { return ((t / k) & 1) ? k - 1 - t % k : t % k; }

// A CTA's share of step 3's tiles: its warps (g, q) are row group group0 + g of `groups` and column class class0 + q
// of `classes`. One CTA: {0, 4, 0, 4}. A cluster of C CTAs: its 16 C warps as 4 Cr row groups x 4 Cc column classes,
// Cr = max(1, C / 4), Cc = C / Cr, rank ra Cc + rb holding groups 4 ra.. and classes 4 rb..: the busiest warp's tiles,
// summed over the columns of n = 2048 at C = 16, are 1.8x the mean's, 3.0x with the tile rows split by rank (Cr = C),
// 1.14x on one CTA (counted on CPU).
struct SymvShare {
    int group0, groups, class0, classes;
};

__device__ __forceinline__ SymvShare symv_share(int rank, int cluster) {
    const int row_ranks = max(1, cluster / 4), column_ranks = cluster / row_ranks;
    return {kSymvGroups * (rank / column_ranks), kSymvGroups * row_ranks, kSymvClasses * (rank % column_ranks),
            kSymvClasses * column_ranks};
}

// Quads s0 .. s0 + S - 1 of a lane's 8 in a tile: rows i0 + r + 4s, columns col .. col + 3, one pointer walked down
// the rows; float4 loads where n % 4 == 0 (16-byte aligned then), else four scalars.
// kEdge: the last tile row when 32 does not divide n. Its rows past n (a suffix of each lane's s) load as 0; its
// columns past n (only in its diagonal tile) as 0 in float4s and as column n - 1 (in bounds) in scalars, values that
// meet s_v's zero padding. Sums of rows and columns past n land in the padding, which step 4 never reads.
template <bool kVec4, bool kEdge, int S>
__device__ __forceinline__ void load_quads(const float* __restrict__ A, int n, int i0, int r, int col, int s0,
                                           float4 (&a)[S]) {
    const float* at = A + (size_t)(i0 + r + 4 * s0) * n + col;
    const size_t four_rows = (size_t)4 * n;
    const int rows = (n - i0 - r + 3) / 4;                  // this lane's rows before n (>= 8 off the edge)
    const int last = kEdge ? n - 1 - col : 3;               // the last column offset in bounds
#pragma unroll
    for (int s = 0; s < S; ++s, at += four_rows) {
        a[s] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (kEdge && s0 + s >= rows) continue;
        if constexpr (kVec4) {
            if (!kEdge || last >= 0) a[s] = __ldg(reinterpret_cast<const float4*>(at));
        } else {
            a[s] = make_float4(__ldg(at + min(0, last)), __ldg(at + min(1, last)), __ldg(at + min(2, last)),
                               __ldg(at + min(3, last)));
        }
    }
}

// One 32 x 32 tile of the trailing matrix, rows i0.., columns j0.., read once: lane l returns the tile's row sum
// (A_IJ v_J)[l] in row_sum and, off the diagonal (i0 > j0), its column sum (A_IJ^T v_I)[l] in col_sum. Lane l = 4h + r
// reads rows i0 + r + 4s (s < 8), columns j0 + 4h .. 4h + 3: each load instruction is 4 whole 128-byte rows, and a lane
// has all 8 (32 floats, 128 bytes) in flight at once where n % 4 == 0; four at a time in scalars (32 scalar loads in
// flight spilled at 64 registers). A diagonal tile is read whole (A is exactly symmetric) for its row sums alone.
template <bool kVec4, bool kEdge, bool kDiagonal>
__device__ __forceinline__ void symv_tile(const float* __restrict__ A, const float* s_v, int n, int i0, int j0,
                                          int lane, float& row_sum, float& col_sum) {
    constexpr int kInFlight = kVec4 ? 8 : 4;
    const int r = lane & 3, h = lane >> 2;
    const float4 vq = *reinterpret_cast<const float4*>(s_v + j0 + 4 * h);
    float rows[8], cols[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s0 = 0; s0 < 8; s0 += kInFlight) {
        float4 a[kInFlight];
        load_quads<kVec4, kEdge>(A, n, i0, r, j0 + 4 * h, s0, a);
#pragma unroll
        for (int s = s0; s < s0 + kInFlight; ++s) {
            const float4 x = a[s - s0];
            rows[s] = fmaf(x.w, vq.w, fmaf(x.z, vq.z, fmaf(x.y, vq.y, x.x * vq.x)));
            if (!kDiagonal) {
                const float vi = s_v[i0 + r + 4 * s];
                cols[0] = fmaf(x.x, vi, cols[0]);
                cols[1] = fmaf(x.y, vi, cols[1]);
                cols[2] = fmaf(x.z, vi, cols[2]);
                cols[3] = fmaf(x.w, vi, cols[3]);
            }
        }
    }
    row_sum = popkit::lanes_transpose_sum<8, 4>(rows, lane);     // over h (lane bits 2..4): entry h, row r + 4h = l
    if (!kDiagonal) col_sum = popkit::lanes_transpose_sum<4, 1>(cols, lane);   // over r (bits 0..1): column 4h + r = l
}

// The tiles of tile row t (from t0) that column class q of `classes` takes (tile columns u <= t, snake order), summed:
// the row sums returned (lane l: row i0 + l), the column sums of the tiles below the diagonal added to col_part.
template <bool kVec4, bool kEdge>
__device__ __forceinline__ float symv_tile_row(const float* __restrict__ A, const float* s_v, float* col_part, int n,
                                               int t0, int t, int q, int classes, int lane) {
    const int i0 = (t0 + t) * kSymvTile;
    float row_total = 0.f, row_sum, col_sum;
#pragma unroll 1
    for (int b = 0, u; (u = snake_member(b, q, classes)) < t; ++b) {
        const int j0 = (t0 + u) * kSymvTile;
        symv_tile<kVec4, kEdge, false>(A, s_v, n, i0, j0, lane, row_sum, col_sum);
        row_total += row_sum;
        col_part[j0 + lane] += col_sum;
    }
    if (snake_member(t / classes, q, classes) == t) {               // the diagonal tile is this class's
        symv_tile<kVec4, kEdge, true>(A, s_v, n, i0, i0, lane, row_sum, col_sum);
        row_total += row_sum;
    }
    return row_total;
}

// Step 3's A22 v in the tiles form: the 32 x 32 tiles on and below the diagonal of the trailing matrix (absolute tile
// indices, from the one holding row c + 1), each read once. Rows and columns <= c of the first tile row and column
// meet v's zeros in s_v (and stay out of the rows step 4 reads). Warp (g, q) takes the tiles of the tile rows of row
// group share.group0 + g and the tile columns of column class share.class0 + q (snake orders), so every partial sum
// has one writer: the row sums of a tile row go to part[q] (stored once: lane l owns row 32 I + l), the column sums to
// part[kSymvClasses + g] (zeroed, then added to tile by tile: lane l owns column 32 J + l). Step 4 adds a row's 8
// partial sums in a fixed order: no atomics, the same sums every run. A CTA of a cluster writes only the tile rows of
// its groups and the tile columns of its classes (cta_partials reads those).
template <bool kVec4>
__device__ __forceinline__ void symv_tiles(const float* __restrict__ A, const float* s_v, float* part, int ld, int n,
                                           int c, int warp, int lane, SymvShare share) {
    const int g = warp / kSymvClasses, q = warp % kSymvClasses;
    const int group = share.group0 + g, cls = share.class0 + q;
    const int t0 = (c + 1) / kSymvTile, tiles = (n + kSymvTile - 1) / kSymvTile - t0;
    float* row_part = part + q * ld;
    float* col_part = part + (kSymvClasses + g) * ld;
    for (int b = 0, u; (u = snake_member(b, cls, share.classes)) < tiles; ++b)
        col_part[(t0 + u) * kSymvTile + lane] = 0.f;
#pragma unroll 1
    for (int b = 0, t; (t = snake_member(b, group, share.groups)) < tiles; ++b) {
        const bool edge = (t0 + t + 1) * kSymvTile > n;
        row_part[(t0 + t) * kSymvTile + lane] =
            edge ? symv_tile_row<kVec4, true>(A, s_v, col_part, n, t0, t, cls, share.classes, lane)
                 : symv_tile_row<kVec4, false>(A, s_v, col_part, n, t0, t, cls, share.classes, lane);
    }
}

// Row i's sum of one cluster CTA's partial vectors: its row sums where it holds tile row i's group, then its column
// sums where it holds tile column i's class, each in the one-CTA order (part 0..7); 0 where it holds neither.
__device__ __forceinline__ float cta_partials(const float* part, int ld, int i, int t0, SymvShare share) {
    const int t = i / kSymvTile - t0;
    float total = 0.f;
    if ((unsigned)(snake_owner(t, share.groups) - share.group0) < (unsigned)kSymvGroups)
        for (int q = 0; q < kSymvClasses; ++q) total += part[q * ld + i];
    if ((unsigned)(snake_owner(t, share.classes) - share.class0) < (unsigned)kSymvClasses)
        for (int g = 0; g < kSymvGroups; ++g) total += part[(kSymvClasses + g) * ld + i];
    return total;
}

// av + the CTA sums of ranks 1..cluster-1 at row i (s_sum: each rank's vector of them), in rank order; kRemoteLoads
// loads of distributed shared memory in flight at once.
__device__ __forceinline__ float add_cluster_sums(float av, float* s_sum, int i, int cluster) {
    const cooperative_groups::cluster_group team = cooperative_groups::this_cluster();
    for (int r0 = 1; r0 < cluster; r0 += kRemoteLoads) {
        float x[kRemoteLoads];
#pragma unroll
        for (int u = 0; u < kRemoteLoads; ++u) x[u] = r0 + u < cluster ? team.map_shared_rank(s_sum, r0 + u)[i] : 0.f;
#pragma unroll
        for (int u = 0; u < kRemoteLoads; ++u)
            if (r0 + u < cluster) av += x[u];
    }
    return av;
}

// Vp and W are written and read back inside the kernel: plain pointers, never the read-only path.
// kCluster (the tiles form's float4 loads, n % 4 == 0: its scalar form spilled 28 bytes at 64 registers): a thread
// block cluster of C CTAs a matrix (grid batch x C). Rank 0, the leader, runs every step as one CTA does; every rank
// takes its SymvShare of step 3's tiles. Per column two cluster barriers: (A) v is in the leader's shared memory,
// which the others copy; (B) each other rank's CTA sums (cta_partials) are in its s_y, which the leader adds in step
// 4. The next column's (A), or the one after the loop, comes after the leader's last reads of them, so no rank
// overwrites (or leaves) what the leader still reads. Every thread of every rank meets every cluster barrier: the
// ranks' loops run the same nb columns, and only whole CTAs skip the leader's steps.
template <bool kVec4, bool kTiles, bool kCluster>
__global__ void __launch_bounds__(kPanelMaxThreads, 2)
reduce_panel_kernel(const float* __restrict__ A, float* __restrict__ d, float* __restrict__ e,
                    float* __restrict__ V, float* __restrict__ T, float* Vp, float* W, int n, int k, int nb) {
    static_assert(!kCluster || (kTiles && kVec4), "a cluster splits the tiles form's float4 product");
    extern __shared__ float4 dynamic_smem[];
    const int ld = vector_stride(n, kTiles);
    float* s_col = reinterpret_cast<float*>(dynamic_smem);
    float* s_v = s_col + ld;
    float* s_y = s_v + ld;                       // a cluster's other ranks: their CTA sums of A22 v
    float* s_sym = s_y + ld;                     // the tiles form's kSymvPartials partial vectors
    __shared__ float s_red[3][kPanelMaxWarps];
    __shared__ float s_part[kPanelMaxWarps][2 * kPanel];   // per warp: V^T v (lanes 0..31), W^T v (32..63)
    __shared__ float s_vw[2 * kPanel];
    __shared__ float s_T[kPanel][kPanel + 1];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // The tiles form always runs kPanelMaxThreads threads: a constant there divides by shifts and spares registers.
    const int threads = kTiles ? kPanelMaxThreads : blockDim.x, warps = threads >> 5;
    const int r = n - 2, p_cols = min(kPanel, r);
    const int cluster = kCluster ? (int)cooperative_groups::this_cluster().num_blocks() : 1;
    const int rank = kCluster ? (int)cooperative_groups::this_cluster().block_rank() : 0;
    const bool leader = rank == 0;
    const SymvShare share = kCluster ? symv_share(rank, cluster) : SymvShare{0, kSymvGroups, 0, kSymvClasses};
    const size_t mat = kCluster ? blockIdx.x / cluster : blockIdx.x;
    A += mat * n * n;
    d += mat * n;
    e += mat * (n - 1);
    V += mat * n * r;
    T += mat * r * p_cols;
    Vp += mat * n * kPanel;
    W += mat * n * kPanel;

    if constexpr (kTiles)
        for (int i = n + tid; i < ld; i += threads) s_v[i] = 0.f;   // the last tile's rows and columns past n
    float coef_prev = 0.f;                       // (tau/2)(p^T v) of the previous column
#pragma unroll 1
    for (int j = 0; j < nb; ++j) {
        const int c = k + j;
        const int first = tid + (c / threads) * threads;        // this thread's first row that may be >= c
        float w_last = 0.f, tau = 0.f;
        if (leader) {
            // 1. Column c as the panel's earlier reflectors left it, rows c..n-1. W[c, j-1] is being written
            //    by its owner since the last barrier: every thread has its value as p_c - coef_prev.
            w_last = j > 0 ? w_entry(s_y[c], coef_prev, 1.f) : 0.f;
            float tail_max = 0.f;
            for (int i = first; i < n; i += threads) {
                if (i < c) continue;
                float x = A[(size_t)c * n + i];                     // row c = column c: A is exactly symmetric
                if (j > 0) {
                    const float s1 = panel_dot(Vp + (size_t)i * kPanel, W + (size_t)c * kPanel, j, true, w_last);
                    const float s2 = panel_dot(W + (size_t)i * kPanel, Vp + (size_t)c * kPanel, j, false, 0.f);
                    x = (x - s1) - s2;
                }
                s_col[i] = x;
                if (i >= c + 2) tail_max = fmaxf(tail_max, fabsf(x));
            }

            // 2. The reflector of column c's rows c+1..: the tail's norm scaled by its largest entry.
            const float largest = block_reduce<true>(tail_max, s_red[0]);
            const bool reflect = largest > 0.f;
            const float unit = reflect ? largest : 1.f;
            float ssq = 0.f;
            for (int i = first; i < n; i += threads) {
                if (i < c + 2) continue;
                const float y = s_col[i] / unit;
                ssq = fmaf(y, y, ssq);
            }
            ssq = block_reduce<false>(ssq, s_red[1]);
            const float alpha = s_col[c + 1];
            const float beta = -copysignf(hypotf(alpha, largest * sqrtf(ssq)), alpha);
            const float denominator = reflect ? alpha - beta : 1.f;
            tau = reflect ? (beta - alpha) / beta : 0.f;
            for (int i = tid; i < n; i += threads) {
                const float v = (i <= c) ? 0.f : (i == c + 1) ? 1.f : s_col[i] / denominator;
                V[(size_t)i * r + c] = v;
                if (kTiles || i > c) s_v[i] = v;                     // the tiles read the zeros up to row c too
                if (i > c) Vp[(size_t)i * kPanel + j] = v;
                if (i == c) d[c] = s_col[c];
            }
            if (tid == 0) e[c] = reflect ? beta : alpha;
        }
        const int t0 = (c + 1) / kSymvTile;                         // the tile row (and column) of row c + 1
        if constexpr (kCluster) {
            cooperative_groups::this_cluster().sync();              // (A)
            if (!leader) {                                          // v from the tile row of c + 1 on, and padding
                const float4* from = reinterpret_cast<const float4*>(
                    cooperative_groups::this_cluster().map_shared_rank(s_v, 0));
                for (int q = t0 * kSymvTile / 4 + tid; q < ld / 4; q += threads)
                    reinterpret_cast<float4*>(s_v)[q] = from[q];
                __syncthreads();
            }
        } else {
            __syncthreads();
        }

        // 3. A22 v (the hot loop), and V^T v, W^T v: in the rows form over the rows each warp has just multiplied,
        //    in the tiles form (partial sums left in s_sym) by a loop of their own.
        float vv = 0.f, wv = 0.f;                                // lane l: entry l of V^T v, W^T v
        if constexpr (kTiles) {
            symv_tiles<kVec4>(A, s_v, s_sym, ld, n, c, warp, lane, share);
            if (leader)
                for (int i = c + 1 + warp; i < n; i += warps) panel_terms(Vp, W, s_v, i, j, lane, vv, wv);
        } else {
            for (int i0 = c + 1 + warp * kSymvRows; i0 < n; i0 += warps * kSymvRows) {
                int rows[kSymvRows];
                float acc[kSymvRows];
#pragma unroll
                for (int t = 0; t < kSymvRows; ++t) {
                    rows[t] = min(i0 + t, n - 1);
                    acc[t] = 0.f;
                }
                row_products<kVec4>(A, s_v, n, c + 1, rows, acc, lane);
#pragma unroll
                for (int t = 0; t < kSymvRows; ++t) {
                    const float total = popkit::warp_sum(acc[t]);
                    const int i = i0 + t;
                    if (i < n) {
                        if (lane == 0) s_y[i] = total;
                        panel_terms(Vp, W, s_v, i, j, lane, vv, wv);
                    }
                }
            }
        }
        if (leader) {
            s_part[warp][lane] = vv;
            s_part[warp][kPanel + lane] = wv;
        }
        __syncthreads();
        if (leader && tid < 2 * kPanel) {
            float total = 0.f;
            for (int w = 0; w < warps; ++w) total += s_part[w][tid];
            s_vw[tid] = total;
        }
        if constexpr (kCluster) {
            if (!leader)
                for (int i = c + 1 + tid; i < n; i += threads) s_y[i] = cta_partials(s_sym, ld, i, t0, share);
            cooperative_groups::this_cluster().sync();              // (B)
            if (!leader) continue;
        } else {
            __syncthreads();
        }

        // 4. p = tau (A22 v - V (W^T v) - W (V^T v)) per owned row, T's column j, then p^T v.
        float pv = 0.f;
        for (int i = first; i < n; i += threads) {
            if (i <= c) continue;
            const float s1 = panel_dot(Vp + (size_t)i * kPanel, s_vw + kPanel, j, false, 0.f);
            const float s2 = panel_dot(W + (size_t)i * kPanel, s_vw, j, false, 0.f);
            float av = kTiles ? 0.f : s_y[i];                   // (A22 v)_i: the rows form's, or the tiles' partial
            if constexpr (kCluster)                              // sums added in a fixed order (a cluster: rank 0's,
                av = add_cluster_sums(cta_partials(s_sym, ld, i, t0, share), s_y, i, cluster);   // then 1, 2, ..)
            else if constexpr (kTiles)
                for (int part = 0; part < kSymvPartials; ++part) av += s_sym[part * ld + i];
            const float p = tau * ((av - s1) - s2);
            s_y[i] = p;
            pv = fmaf(p, s_v[i], pv);
        }
        if (tid < j) {
            float total = 0.f;
            for (int l = tid; l < j; ++l) total = fmaf(s_T[tid][l], s_vw[l], total);
            s_T[tid][j] = -tau * total;
        }
        if (tid == j) s_T[j][j] = tau;
        pv = block_reduce<false>(pv, s_red[2]);

        // 5. W's column j; its row c+1 entry is what every thread recomputes as w_last next column.
        coef_prev = 0.5f * tau * pv;
        for (int i = first; i < n; i += threads)
            if (i > c) W[(size_t)i * kPanel + j] = w_entry(s_y[i], coef_prev, s_v[i]);
    }
    if constexpr (kCluster) {
        cooperative_groups::this_cluster().sync();                  // the leader's last reads of the others' s_y
        if (!leader) return;
    } else {
        __syncthreads();
    }
    for (int idx = tid; idx < nb * p_cols; idx += threads) {
        const int l = idx / p_cols, col = idx % p_cols;
        T[(size_t)(k + l) * p_cols + col] = (col < nb && l <= col) ? s_T[l][col] : 0.f;
    }
}

// A[start:, start:] -= Vp W^T + W Vp^T (rows from start, nb columns), lower tiles computed, both triangles written.
// Thread (ty, tx) computes rows 4 ty .. 4 ty + 3 and columns 4 tx .. 4 tx + 3 of its tile: each l's four factors
// are one float4 load of shared memory each (sixteen scalar loads before, for 32 FMAs: the loads, not the FMAs, set
// the pace). Each entry's sum over l is in the same order as before, so A is the same bit for bit.
__global__ void __launch_bounds__(kUpdateThreads)
update_trailing_kernel(float* __restrict__ A, const float* __restrict__ Vp, const float* __restrict__ W,
                       int n, int start, int nb) {
    constexpr int kLd = kTile + 4;               // rows of a factor 16-byte aligned for the float4 loads
    constexpr int kLdC = kTile + 1;              // the result's transposed reads free of bank conflicts
    __shared__ __align__(16) float smem[4 * kPanel * kLd];   // V, W of the row tile and the column tile; then C
    float* sVI = smem;
    float* sWI = sVI + kPanel * kLd;
    float* sVJ = sWI + kPanel * kLd;
    float* sWJ = sVJ + kPanel * kLd;
    float* sC = smem;                             // kTile x kLdC, once the factors are no longer read

    // Tile (I, J), J <= I, of the lower triangle from the linear index.
    const int q = blockIdx.x;
    int I = (int)((sqrtf(8.f * q + 1.f) - 1.f) * 0.5f);
    while ((I + 1) * (I + 2) / 2 <= q) ++I;
    while (I * (I + 1) / 2 > q) --I;
    const int J = q - I * (I + 1) / 2;
    const int i0 = start + I * kTile, j0 = start + J * kTile;
    const size_t mat = blockIdx.y;
    A += mat * n * n;
    Vp += mat * n * kPanel;
    W += mat * n * kPanel;

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    for (int idx = tid; idx < kTile * kPanel; idx += kUpdateThreads) {
        const int row = idx / kPanel, l = idx % kPanel;
        const bool in_i = i0 + row < n && l < nb, in_j = j0 + row < n && l < nb;
        sVI[l * kLd + row] = in_i ? Vp[(size_t)(i0 + row) * kPanel + l] : 0.f;
        sWI[l * kLd + row] = in_i ? W[(size_t)(i0 + row) * kPanel + l] : 0.f;
        sVJ[l * kLd + row] = in_j ? Vp[(size_t)(j0 + row) * kPanel + l] : 0.f;
        sWJ[l * kLd + row] = in_j ? W[(size_t)(j0 + row) * kPanel + l] : 0.f;
    }
    __syncthreads();

    // The model's order: X = V W^T and Y = W V^T summed over l separately, then A - (X + Y).
    float x[4][4] = {}, y[4][4] = {};
    for (int l = 0; l < nb; ++l) {
        const float4 vi4 = *reinterpret_cast<const float4*>(sVI + l * kLd + 4 * ty);
        const float4 wi4 = *reinterpret_cast<const float4*>(sWI + l * kLd + 4 * ty);
        const float4 vj4 = *reinterpret_cast<const float4*>(sVJ + l * kLd + 4 * tx);
        const float4 wj4 = *reinterpret_cast<const float4*>(sWJ + l * kLd + 4 * tx);
        const float vi[4] = {vi4.x, vi4.y, vi4.z, vi4.w}, wi[4] = {wi4.x, wi4.y, wi4.z, wi4.w};
        const float vj[4] = {vj4.x, vj4.y, vj4.z, vj4.w}, wj[4] = {wj4.x, wj4.y, wj4.z, wj4.w};
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                x[a][b] = fmaf(vi[a], wj[b], x[a][b]);
                y[a][b] = fmaf(wi[a], vj[b], y[a][b]);
            }
    }
    __syncthreads();                             // sC overwrites the factors

#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) sC[(4 * ty + a) * kLdC + 4 * tx + b] = x[a][b] + y[a][b];
    __syncthreads();
    // A's tile and its transpose, A[j0 + a, i0 + b] taking the update of A[i0 + b, j0 + a] (the upper part of a
    // diagonal tile), with 16 consecutive columns a half warp.
    const bool diagonal = I == J;
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const int ra = ty + 16 * a, cb = tx + 16 * b;
            if (i0 + ra < n && j0 + cb < n && (!diagonal || ra >= cb))
                A[(size_t)(i0 + ra) * n + j0 + cb] -= sC[ra * kLdC + cb];
            if (j0 + ra < n && i0 + cb < n && (!diagonal || ra < cb))
                A[(size_t)(j0 + ra) * n + i0 + cb] -= sC[cb * kLdC + ra];
        }
}

// The last two (or fewer) columns need no reflector: reduction_model.finish_last_block, a thread a matrix.
__global__ void finish_last_block_kernel(const float* __restrict__ A, float* __restrict__ d, float* __restrict__ e,
                                         int batch, int n) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= batch) return;
    const float* Ab = A + (size_t)b * n * n;
    for (int i = max(n - 2, 0); i < n; ++i) d[(size_t)b * n + i] = Ab[(size_t)i * n + i];
    if (n >= 2) e[(size_t)b * (n - 1) + n - 2] = Ab[(size_t)(n - 1) * n + n - 2];
}

bool valid_threads(int threads) { return threads >= 32 && threads <= kPanelMaxThreads && threads % 32 == 0; }
// The rows form runs any `threads`; the tiles form's warp layout is fixed at kPanelMaxThreads; a cluster (2, 4, 8 or
// 16 CTAs a matrix) splits the tiles form only, where n % 4 == 0.
bool valid_symv(int symv, int threads, int cluster, int n) {
    const bool tiles = symv == kSymvTilesForm && threads == kPanelMaxThreads;
    if (cluster == 1) return symv == kSymvRowsForm || tiles;
    return tiles && n % 4 == 0 && cluster >= 2 && cluster <= kClusterMax && (cluster & (cluster - 1)) == 0;
}

// One instantiation of the panel kernel: its shared memory allowed (once per new maximum), then launched (a cluster
// of `cluster` CTAs a matrix where kCluster).
template <bool kVec4, bool kTiles, bool kCluster>
cudaError_t launch_panel(int& granted, int smem, int batch, int threads, int cluster, const float* A, float* d,
                         float* e, float* V, float* T, float* Vp, float* W, int n, int k, int nb) {
    const auto kernel = reduce_panel_kernel<kVec4, kTiles, kCluster>;
    cudaError_t err = popkit::allow_dynamic_smem(kernel, smem, granted);
    if (err != cudaSuccess) return err;
    if constexpr (kCluster) {
        static bool nonportable = false;          // 16 CTAs a cluster needs the opt-in (8 is the portable maximum)
        if (cluster > 8 && !nonportable) {
            err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
            if (err != cudaSuccess) return err;
            nonportable = true;
        }
        cudaLaunchConfig_t config = {};           // the default queue, as <<<>>>
        config.gridDim = dim3(batch * cluster);
        config.blockDim = dim3(threads);
        config.dynamicSmemBytes = smem;
        cudaLaunchAttribute attribute = {};
        attribute.id = cudaLaunchAttributeClusterDimension;
        attribute.val.clusterDim.x = cluster;
        attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
        config.attrs = &attribute;
        config.numAttrs = 1;
        err = cudaLaunchKernelEx(&config, kernel, A, d, e, V, T, Vp, W, n, k, nb);
        return err != cudaSuccess ? err : cudaGetLastError();
    } else {
        kernel<<<batch, threads, smem>>>(A, d, e, V, T, Vp, W, n, k, nb);
        return cudaGetLastError();
    }
}

}  // namespace

// Panel k..k+nb-1 (nb <= 32, k + nb <= n - 2) of every matrix: d, e, V at those columns, T's rows k..k+nb-1,
// and the panel's V, W in Vp, W (batch x n x 32, row-major) for eigh_update_trailing. A is only read.
// symv: the form of step 3's A22 v, 0 rows (the reference) or 1 tiles (the lower triangle's tiles, each read once).
// cluster: CTAs a matrix, 1 (one CTA) or, in the tiles form with n % 4 == 0, 2, 4, 8 or 16 (a thread block cluster).
POPKIT_EXPORT int eigh_reduce_panel(const float* A, float* d, float* e, float* V, float* T, float* Vp, float* W,
                                    int batch, int n, int k, int nb, int threads, int symv, int cluster) {
    if (batch < 1 || n < 3 || k < 0 || nb < 1 || nb > kPanel || k + nb > n - 2 || !valid_threads(threads) ||
        !valid_symv(symv, threads, cluster, n) || batch > INT_MAX / cluster)
        return (int)cudaErrorInvalidValue;
    const bool vec4 = n % 4 == 0, tiles = symv == kSymvTilesForm;
    // s_col, s_v, s_y, and the tiles form's 8 partial vectors, each padded to whole tiles there: (3 + 8) x 2048 floats
    // (88 KiB) at n = 2048, 97 KiB a CTA with the static arrays, so two CTAs still fit an SM (a cluster's CTAs too:
    // its other ranks use s_v, s_y and the partials of the same layout).
    const int vectors = 3 + (tiles ? kSymvPartials : 0);
    const int smem = vectors * vector_stride(n, tiles) * (int)sizeof(float);
    using Launch = cudaError_t (*)(int&, int, int, int, int, const float*, float*, float*, float*, float*, float*,
                                   float*, int, int, int);
    static constexpr Launch kLaunch[3][2] = {            // [rows, tiles, tiles in a cluster][vec4]
        {launch_panel<false, false, false>, launch_panel<true, false, false>},
        {launch_panel<false, true, false>, launch_panel<true, true, false>},
        {nullptr, launch_panel<true, true, true>}};      // valid_symv: a cluster needs n % 4 == 0
    static int granted[3][2] = {};
    const int form = tiles + (cluster > 1);
    return (int)kLaunch[form][vec4](granted[form][vec4], smem, batch, threads, cluster, A, d, e, V, T, Vp, W, n, k, nb);
}

// A[start:, start:] -= V W^T + W V^T with the panel's nb columns of Vp, W (eigh_reduce_panel's), both triangles.
POPKIT_EXPORT int eigh_update_trailing(float* A, const float* Vp, const float* W, int batch, int n, int start, int nb) {
    if (batch < 1 || batch > 65535 || n < 1 || start < 0 || start >= n || nb < 1 || nb > kPanel)
        return (int)cudaErrorInvalidValue;
    const int tiles = (n - start + kTile - 1) / kTile;
    update_trailing_kernel<<<dim3(tiles * (tiles + 1) / 2, batch), kUpdateThreads>>>(A, Vp, W, n, start, nb);
    return (int)cudaGetLastError();
}

// The whole reduction of a batch (reduction_model.tridiagonalize_model with panel 32): A (batch x n x n,
// overwritten), d (batch x n), e (batch x n-1), V (batch x n x n-2), T (batch x n-2 x min(32, n-2)),
// Vp, W (batch x n x 32 workspace); panel CTAs of `threads` threads, step 3 in the form `symv`, `cluster` CTAs a
// matrix (eigh_reduce_panel's).
POPKIT_EXPORT int eigh_tridiagonalize(float* A, float* d, float* e, float* V, float* T, float* Vp, float* W,
                                      int batch, int n, int threads, int symv, int cluster) {
    if (batch < 1 || batch > 65535 || n < 1 || !valid_threads(threads) || !valid_symv(symv, threads, cluster, n))
        return (int)cudaErrorInvalidValue;
    for (int k = 0; k < n - 2; k += kPanel) {
        const int nb = min(kPanel, n - 2 - k);
        int err = eigh_reduce_panel(A, d, e, V, T, Vp, W, batch, n, k, nb, threads, symv, cluster);
        if (err == 0) err = eigh_update_trailing(A, Vp, W, batch, n, k + nb, nb);
        if (err != 0) return err;
    }
    finish_last_block_kernel<<<(batch + kFinishThreads - 1) / kFinishThreads, kFinishThreads>>>(A, d, e, batch, n);
    return (int)cudaGetLastError();
}
