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
//   contiguous row dot product per row, as the model's full-square matvec.
//
// Launch shape
//   eigh_reduce_panel: grid = batch (one CTA per matrix), `threads` (a multiple of 32, <= 512) threads,
//     3 n floats of dynamic shared memory (the column, v, A22 v then p). Row i of the per-row work
//     (column update, v, p, W's column) belongs to thread i % threads in every column, so a thread
//     reads back its own writes of V and W without a barrier; the matrix-vector product gives each
//     warp kSymvRows rows at a time. Six barriers a column: the two norms' reductions, v ready, A22 v
//     ready, V^T v and W^T v summed, p^T v.
//     The panel's V and W also go to Vp, W (n x 32 each, row-major): 128-byte aligned rows that the
//     per-row dot products read as float4 and the matrix-vector loop reads one coalesced row a warp.
//   eigh_update_trailing: grid = (lower-triangle 64 x 64 tiles, batch), 256 threads, 4 x 4 entries a
//     thread, fp32 SIMT; a tile off the diagonal is also written, transposed through shared memory,
//     to the upper triangle.
//   eigh_tridiagonalize: the loop over panels (panel, update), then the last 2 x 2 block; one call.
//
// Why it is fast (or meant to be: not yet measured on a GPU)
//   The time is the matrix-vector product: it reads the trailing matrix once per column (n^3/3 floats
//   a matrix) and nothing else can start before it ends. Each warp has one float4 load per lane of
//   each of its kSymvRows rows in flight (2 KB a warp, 32 KB a CTA, two CTAs an SM at <= 64
//   registers), reads the rows as float4 where n % 4 == 0 (scalar otherwise), through the read-only
//   path (A does not change inside a panel), and the products with the panel's V and W ride in the
//   same loop on rows the warp has just touched. Everything else is O(n) a column, in shared memory
//   or L1. The reduction is latency-bound (seeds/000): loads in flight, barriers a column and the
//   bytes per entry (an fp16 copy of A) are the levers to measure next.
#include "device_utils.cuh"

namespace {

constexpr int kPanel = 32;                       // reduction_model.PANEL, and the width of Vp and W
constexpr int kPanelMaxThreads = 512;
constexpr int kPanelMaxWarps = kPanelMaxThreads / 32;
constexpr int kSymvRows = 4;                     // rows a warp multiplies at once: loads in flight
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

// Vp and W are written and read back inside the kernel: plain pointers, never the read-only path.
template <bool kVec4>
__global__ void __launch_bounds__(kPanelMaxThreads, 2)
reduce_panel_kernel(const float* __restrict__ A, float* __restrict__ d, float* __restrict__ e,
                    float* __restrict__ V, float* __restrict__ T, float* Vp, float* W, int n, int k, int nb) {
    extern __shared__ float4 dynamic_smem[];
    const int n4 = (n + 3) & ~3;                 // keeps s_v 16-byte aligned for the float4 reads
    float* s_col = reinterpret_cast<float*>(dynamic_smem);
    float* s_v = s_col + n4;
    float* s_y = s_v + n4;
    __shared__ float s_red[3][kPanelMaxWarps];
    __shared__ float s_part[kPanelMaxWarps][2 * kPanel];   // per warp: V^T v (lanes 0..31), W^T v (32..63)
    __shared__ float s_vw[2 * kPanel];
    __shared__ float s_T[kPanel][kPanel + 1];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int threads = blockDim.x, warps = threads >> 5;
    const int r = n - 2, p_cols = min(kPanel, r);
    const size_t mat = blockIdx.x;
    A += mat * n * n;
    d += mat * n;
    e += mat * (n - 1);
    V += mat * n * r;
    T += mat * r * p_cols;
    Vp += mat * n * kPanel;
    W += mat * n * kPanel;

    float coef_prev = 0.f;                       // (tau/2)(p^T v) of the previous column
#pragma unroll 1
    for (int j = 0; j < nb; ++j) {
        const int c = k + j;
        const int first = tid + (c / threads) * threads;        // this thread's first row that may be >= c

        // 1. Column c as the panel's earlier reflectors left it, rows c..n-1. W[c, j-1] is being written
        //    by its owner since the last barrier: every thread has its value as p_c - coef_prev.
        const float w_last = j > 0 ? w_entry(s_y[c], coef_prev, 1.f) : 0.f;
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
        const float tau = reflect ? (beta - alpha) / beta : 0.f;
        for (int i = tid; i < n; i += threads) {
            const float v = (i <= c) ? 0.f : (i == c + 1) ? 1.f : s_col[i] / denominator;
            V[(size_t)i * r + c] = v;
            if (i > c) {
                s_v[i] = v;
                Vp[(size_t)i * kPanel + j] = v;
            }
            if (i == c) d[c] = s_col[c];
        }
        if (tid == 0) e[c] = reflect ? beta : alpha;
        __syncthreads();

        // 3. A22 v (the hot loop), and V^T v, W^T v over the rows each warp has just multiplied.
        float vv = 0.f, wv = 0.f;                                // lane l: entry l of V^T v, W^T v
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
                    if (lane < j) {
                        const float vi = s_v[i];
                        vv = fmaf(Vp[(size_t)i * kPanel + lane], vi, vv);
                        wv = fmaf(W[(size_t)i * kPanel + lane], vi, wv);
                    }
                }
            }
        }
        s_part[warp][lane] = vv;
        s_part[warp][kPanel + lane] = wv;
        __syncthreads();
        if (tid < 2 * kPanel) {
            float total = 0.f;
            for (int w = 0; w < warps; ++w) total += s_part[w][tid];
            s_vw[tid] = total;
        }
        __syncthreads();

        // 4. p = tau (A22 v - V (W^T v) - W (V^T v)) per owned row, T's column j, then p^T v.
        float pv = 0.f;
        for (int i = first; i < n; i += threads) {
            if (i <= c) continue;
            const float s1 = panel_dot(Vp + (size_t)i * kPanel, s_vw + kPanel, j, false, 0.f);
            const float s2 = panel_dot(W + (size_t)i * kPanel, s_vw, j, false, 0.f);
            const float p = tau * ((s_y[i] - s1) - s2);
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
    __syncthreads();
    for (int idx = tid; idx < nb * p_cols; idx += threads) {
        const int l = idx / p_cols, col = idx % p_cols;
        T[(size_t)(k + l) * p_cols + col] = (col < nb && l <= col) ? s_T[l][col] : 0.f;
    }
}

// A[start:, start:] -= Vp W^T + W Vp^T (rows from start, nb columns), lower tiles computed, both triangles written.
__global__ void __launch_bounds__(kUpdateThreads)
update_trailing_kernel(float* __restrict__ A, const float* __restrict__ Vp, const float* __restrict__ W,
                       int n, int start, int nb) {
    constexpr int kLd = kTile + 1;
    __shared__ float smem[4 * kPanel * kLd];     // V, W of the row tile and the column tile; then the result
    float* sVI = smem;
    float* sWI = sVI + kPanel * kLd;
    float* sVJ = sWI + kPanel * kLd;
    float* sWJ = sVJ + kPanel * kLd;
    float* sC = smem;                             // kTile x kLd, once the factors are no longer read

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
        float vi[4], wi[4], vj[4], wj[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            vi[t] = sVI[l * kLd + ty + 16 * t];
            wi[t] = sWI[l * kLd + ty + 16 * t];
            vj[t] = sVJ[l * kLd + tx + 16 * t];
            wj[t] = sWJ[l * kLd + tx + 16 * t];
        }
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                x[a][b] = fmaf(vi[a], wj[b], x[a][b]);
                y[a][b] = fmaf(wi[a], vj[b], y[a][b]);
            }
    }
    __syncthreads();                             // sC overwrites the factors

    const bool diagonal = I == J;
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const int ra = ty + 16 * a, cb = tx + 16 * b;
            const float update = x[a][b] + y[a][b];
            sC[ra * kLd + cb] = update;
            if (i0 + ra < n && j0 + cb < n && (!diagonal || ra >= cb)) A[(size_t)(i0 + ra) * n + j0 + cb] -= update;
        }
    __syncthreads();
    // The transpose: A[j0 + a, i0 + b] takes the update of A[i0 + b, j0 + a] (the upper part of a diagonal tile).
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const int ra = ty + 16 * a, cb = tx + 16 * b;
            if (j0 + ra < n && i0 + cb < n && (!diagonal || ra < cb)) A[(size_t)(j0 + ra) * n + i0 + cb] -= sC[cb * kLd + ra];
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

}  // namespace

// Panel k..k+nb-1 (nb <= 32, k + nb <= n - 2) of every matrix: d, e, V at those columns, T's rows k..k+nb-1,
// and the panel's V, W in Vp, W (batch x n x 32, row-major) for eigh_update_trailing. A is only read.
POPKIT_EXPORT int eigh_reduce_panel(const float* A, float* d, float* e, float* V, float* T, float* Vp, float* W,
                                    int batch, int n, int k, int nb, int threads) {
    if (batch < 1 || n < 3 || k < 0 || nb < 1 || nb > kPanel || k + nb > n - 2 || !valid_threads(threads))
        return (int)cudaErrorInvalidValue;
    const int smem = 3 * ((n + 3) & ~3) * (int)sizeof(float);
    static int granted[2] = {0, 0};
    const bool vec4 = n % 4 == 0;
    cudaError_t err = vec4 ? popkit::allow_dynamic_smem(reduce_panel_kernel<true>, smem, granted[1])
                           : popkit::allow_dynamic_smem(reduce_panel_kernel<false>, smem, granted[0]);
    if (err != cudaSuccess) return (int)err;
    if (vec4) reduce_panel_kernel<true><<<batch, threads, smem>>>(A, d, e, V, T, Vp, W, n, k, nb);
    else reduce_panel_kernel<false><<<batch, threads, smem>>>(A, d, e, V, T, Vp, W, n, k, nb);
    return (int)cudaGetLastError();
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
// Vp, W (batch x n x 32 workspace); panel CTAs of `threads` threads.
POPKIT_EXPORT int eigh_tridiagonalize(float* A, float* d, float* e, float* V, float* T, float* Vp, float* W,
                                      int batch, int n, int threads) {
    if (batch < 1 || batch > 65535 || n < 1 || !valid_threads(threads)) return (int)cudaErrorInvalidValue;
    for (int k = 0; k < n - 2; k += kPanel) {
        const int nb = min(kPanel, n - 2 - k);
        int err = eigh_reduce_panel(A, d, e, V, T, Vp, W, batch, n, k, nb, threads);
        if (err == 0) err = eigh_update_trailing(A, Vp, W, batch, n, k + nb, nb);
        if (err != 0) return err;
    }
    finish_last_block_kernel<<<(batch + kFinishThreads - 1) / kFinishThreads, kFinishThreads>>>(A, d, e, batch, n);
    return (int)cudaGetLastError();
}
