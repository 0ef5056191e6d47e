// cholesky, blocked route: one diagonal block (w <= 128) factored and inverted by one CTA, blocked
// in 32-column panels so that the serial chain runs inside one warp.
//
// Computes L11 (lower, A11 = L11 L11^T) in place and, when xinv is given, X = inv(L11). Per panel
// p (columns c0 = 32 p .. c0 + pw - 1, c1 = c0 + pw):
//   1. warp 0 factors the pw x pw diagonal block D in registers (lane i = row c0 + i; column k
//      by shuffle; popkit::cholesky_pivot with the caller's floor), as cholesky_small.cu does;
//   2. each row r >= c1 of the panel is solved against D by one thread: y = a_r D^-T, column by
//      column (y_k = (a_rk - sum_{j<k} y_j d_kj) / d_kk, as updates y_j -= y_k d_jk);
//   3. the trailing lower part, rows and columns >= c1, gets the rank-pw update
//      S[r][c] -= sum_k L[r][c0 + k] L[c][c0 + k] in 4 x 4 register tiles (a lower-triangle tile
//      index per thread).
// Inverse, by 32 x 32 blocks: warp I inverts the diagonal block L_II (lane c = column c, forward
// substitution x_i = -(sum_{c <= k < i} l_ik x_k) / l_ii); then, level by level (I - J = 1, 2,
// 3), T = sum_{J <= K < I} L_IK X_KJ and X_IJ = -X_II T, each a 32 x 32 product in 4 x 4 tiles.
// The pivot floor is eps * diag_max (the whole matrix's largest diagonal entry, given by the
// caller) or, without it, eps * the block's own largest diagonal entry (cholesky_tiled.cu's
// outline says why pivots are floored).
//
// Launch: grid = batch, 256 threads, dynamic shared memory 2 w (w + 1) + 3 * 32 * 33 + w floats
// (the block, its inverse, the level products and 1 / l_kk): 144 KiB at w = 128.
// Why it is faster than cholesky_tiled.cu on a single block: that kernel runs 128 steps of two CTA
// barriers and ~80 instructions per warp at 0.36 issued per cycle (latency-bound, ncu); here the
// 128 serial steps are warp-synchronous shuffles (4 panels of 32), and the CTA meets ~20
// barriers in all, around parallel work (substitutions, rank-32 updates, block products).
#include "device_utils.cuh"

namespace {

constexpr int PANEL = 32;
constexpr int DIAG_THREADS = 256;
constexpr int DIAG_MAX_W = 128;
constexpr unsigned FULL_MASK = 0xffffffffu;

// 1. warp 0: factor the pw x pw block at (c0, c0) in place; s_inv[c0 + k] = 1 / l_kk.
__device__ void factor_diagonal_panel(float* S, int lds, int c0, int pw, float floor, float* s_inv) {
    const int lane = threadIdx.x & 31;
    float d[PANEL];
#pragma unroll
    for (int j = 0; j < PANEL; ++j) d[j] = (lane < pw && j <= lane) ? S[(c0 + lane) * lds + c0 + j] : 0.f;
#pragma unroll
    for (int k = 0; k < PANEL; ++k) {
        if (k >= pw) break;
        const popkit::Pivot pivot = popkit::cholesky_pivot(__shfl_sync(FULL_MASK, d[k], k), floor);
        if (lane == k) {
            d[k] = pivot.lkk;
            s_inv[c0 + k] = pivot.inv;
        } else if (lane > k) {
            d[k] *= pivot.inv;
        }
#pragma unroll
        for (int j = k + 1; j < PANEL; ++j) {
            if (j >= pw) break;
            const float ljk = __shfl_sync(FULL_MASK, d[k], j);
            if (lane >= j) d[j] = fmaf(-d[k], ljk, d[j]);
        }
    }
    if (lane < pw) {
#pragma unroll
        for (int j = 0; j < PANEL; ++j)
            if (j <= lane) S[(c0 + lane) * lds + c0 + j] = d[j];
    }
}

// 2. rows c1 .. w-1 of the panel: y = a_r D^-T, one thread per row.
__device__ void solve_panel_rows(float* S, int lds, int c0, int pw, int w, const float* s_inv) {
    const int r = c0 + pw + threadIdx.x;
    if (r >= w) return;
    float y[PANEL];
#pragma unroll
    for (int j = 0; j < PANEL; ++j) y[j] = (j < pw) ? S[r * lds + c0 + j] : 0.f;
#pragma unroll
    for (int k = 0; k < PANEL; ++k) {
        if (k >= pw) break;
        y[k] *= s_inv[c0 + k];
#pragma unroll
        for (int j = k + 1; j < PANEL; ++j) {
            if (j >= pw) break;
            y[j] = fmaf(-y[k], S[(c0 + j) * lds + c0 + k], y[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < PANEL; ++j)
        if (j < pw) S[r * lds + c0 + j] = y[j];
}

// The t-th tile (ti, tj), tj <= ti, of a lower triangle of tiles, row by row.
__device__ __forceinline__ void lower_tile(int t, int& ti, int& tj) {
    ti = (int)((sqrtf(8.f * t + 1.f) - 1.f) * 0.5f);
    while ((ti + 1) * (ti + 2) / 2 <= t) ++ti;        // float rounding, either way
    while (ti * (ti + 1) / 2 > t) --ti;
    tj = t - ti * (ti + 1) / 2;
}

// 3. S[r][c] -= sum_{k < pw} S[r][c0 + k] S[c][c0 + k] for c1 <= c <= r < w, in 4 x 4 tiles.
__device__ void update_trailing(float* S, int lds, int c0, int pw, int w) {
    const int c1 = c0 + pw, m = w - c1;
    const int nt = (m + 3) / 4, tiles = nt * (nt + 1) / 2;
    for (int t = threadIdx.x; t < tiles; t += DIAG_THREADS) {
        int ti, tj;
        lower_tile(t, ti, tj);
        const int r0 = c1 + 4 * ti, cc0 = c1 + 4 * tj;
        float acc[4][4] = {};
        for (int k = 0; k < pw; ++k) {
            float a[4], b[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                a[u] = (r0 + u < w) ? S[(r0 + u) * lds + c0 + k] : 0.f;
                b[u] = (cc0 + u < w) ? S[(cc0 + u) * lds + c0 + k] : 0.f;
            }
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int v = 0; v < 4; ++v) acc[u][v] = fmaf(a[u], b[v], acc[u][v]);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int v = 0; v < 4; ++v)
                if (r0 + u < w && cc0 + v < w) S[(r0 + u) * lds + cc0 + v] -= acc[u][v];
    }
}

// Warp I: X_II = inv(L_II), lane c computing column c by forward substitution.
__device__ void invert_diagonal_block(const float* S, float* Xs, int lds, int I, int w, const float* s_inv) {
    const int c = threadIdx.x & 31, base = PANEL * I, pb = min(PANEL, w - base);
    float x[PANEL];
#pragma unroll
    for (int i = 0; i < PANEL; ++i) {
        float xi = 0.f;                                // zero above the diagonal and beyond the block
        if (i < pb && i >= c) {
            float s = 0.f;
#pragma unroll
            for (int k = 0; k < i; ++k) s = fmaf(S[(base + i) * lds + base + k], x[k], s);
            xi = (i == c) ? s_inv[base + i] : -s * s_inv[base + i];
        }
        x[i] = xi;
    }
    if (c < pb) {
#pragma unroll
        for (int i = 0; i < PANEL; ++i)
            if (i < pb) Xs[(base + i) * lds + base + c] = x[i];
    }
}

// Off-diagonal inverse blocks of one level: T_IJ = sum_{J <= K < I} L_IK X_KJ (into T), then
// X_IJ = -X_II T_IJ, for every (I, J = I - level). 4 x 4 tiles, 64 per block.
__device__ void invert_level(const float* S, float* Xs, float* T, int lds, int level, int nblocks, int w) {
    const int count = nblocks - level;
    for (int t = threadIdx.x; t < count * 64; t += DIAG_THREADS) {
        const int J = t / 64, I = J + level, tile = t % 64;
        const int a0 = 4 * (tile / 8), b0 = 4 * (tile % 8);
        float acc[4][4] = {};
        const int kend = min(PANEL * I, w);
        for (int k = PANEL * J; k < kend; ++k) {
            float l[4], x[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int r = PANEL * I + a0 + u, c = PANEL * J + b0 + u;
                l[u] = (r < w) ? S[r * lds + k] : 0.f;
                x[u] = (c < w) ? Xs[k * lds + c] : 0.f;
            }
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int v = 0; v < 4; ++v) acc[u][v] = fmaf(l[u], x[v], acc[u][v]);
        }
        float* TJ = T + J * PANEL * (PANEL + 1);
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int v = 0; v < 4; ++v) TJ[(a0 + u) * (PANEL + 1) + b0 + v] = acc[u][v];
    }
    __syncthreads();
    for (int t = threadIdx.x; t < count * 64; t += DIAG_THREADS) {
        const int J = t / 64, I = J + level, tile = t % 64;
        const int a0 = 4 * (tile / 8), b0 = 4 * (tile % 8);
        const float* TJ = T + J * PANEL * (PANEL + 1);
        float acc[4][4] = {};
        for (int k = 0; k < PANEL; ++k) {
            float xi[4], tk[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int r = PANEL * I + a0 + u;
                xi[u] = (r < w && PANEL * I + k < w) ? Xs[r * lds + PANEL * I + k] : 0.f;
                tk[u] = TJ[k * (PANEL + 1) + b0 + u];
            }
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int v = 0; v < 4; ++v) acc[u][v] = fmaf(xi[u], tk[v], acc[u][v]);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int r = PANEL * I + a0 + u, c = PANEL * J + b0 + v;
                if (r < w && c < w) Xs[r * lds + c] = -acc[u][v];
            }
    }
    __syncthreads();
}

__global__ void __launch_bounds__(DIAG_THREADS)
cholesky_diag_kernel(const float* src, float* dst, float* __restrict__ xinv, const float* __restrict__ diag_max,
                     int w, int ld, int stride) {
    extern __shared__ float smem[];
    const int lds = w + 1;
    float* S = smem;                                   // the block, lower part (upper: junk)
    float* Xs = S + w * lds;                           // its inverse
    float* T = Xs + w * lds;                           // a level's products, 3 blocks of 32 x 33
    float* s_inv = T + 3 * PANEL * (PANEL + 1);        // 1 / l_kk
    __shared__ float s_top;
    const float* A = src + (size_t)blockIdx.x * stride;
    float* out = dst + (size_t)blockIdx.x * stride;

    for (int idx = threadIdx.x; idx < w * w; idx += DIAG_THREADS) {
        const int r = idx / w, c = idx - r * w;
        if (c <= r) S[r * lds + c] = A[(size_t)r * ld + c];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float top = 0.f;
        if (diag_max) {
            top = diag_max[blockIdx.x];
        } else {
            for (int i = 0; i < w; ++i) top = fmaxf(top, S[i * lds + i]);
        }
        s_top = top;
    }
    __syncthreads();
    float floor = s_top * 1.1920929e-7f;               // float32 eps
    if (!(floor > 0.f)) floor = 1.17549435e-38f;       // an all-zero diagonal: the smallest normal

    for (int c0 = 0; c0 < w; c0 += PANEL) {
        const int pw = min(PANEL, w - c0);
        if (threadIdx.x < 32) factor_diagonal_panel(S, lds, c0, pw, floor, s_inv);
        __syncthreads();
        if (c0 + pw >= w) break;
        solve_panel_rows(S, lds, c0, pw, w, s_inv);
        __syncthreads();
        update_trailing(S, lds, c0, pw, w);
        __syncthreads();
    }

    for (int idx = threadIdx.x; idx < w * w; idx += DIAG_THREADS) {
        const int r = idx / w, c = idx - r * w;
        out[(size_t)r * ld + c] = (c <= r) ? S[r * lds + c] : 0.f;
    }
    if (!xinv) return;

    const int nblocks = (w + PANEL - 1) / PANEL;
    if ((int)(threadIdx.x / 32) < nblocks) invert_diagonal_block(S, Xs, lds, threadIdx.x / 32, w, s_inv);
    __syncthreads();
    for (int level = 1; level < nblocks; ++level) invert_level(S, Xs, T, lds, level, nblocks, w);
    float* X = xinv + (size_t)blockIdx.x * w * w;
    for (int idx = threadIdx.x; idx < w * w; idx += DIAG_THREADS) {
        const int r = idx / w, c = idx - r * w;
        X[idx] = (c <= r) ? Xs[r * lds + c] : 0.f;
    }
}

}  // namespace

// Factor `batch` w x w blocks (src/dst: leading dimension ld, batch stride `stride` floats; src may
// equal dst), w <= 128. xinv: NULL or batch x w x w for inv(L). diag_max: NULL (the pivot floor
// comes from the block's own diagonal) or max_i a_ii of each block's whole matrix.
POPKIT_EXPORT int cholesky_diag(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int w,
                                int ld, int stride) {
    if (batch < 1 || w < 1 || w > DIAG_MAX_W || ld < w || stride < w) return (int)cudaErrorInvalidValue;
    const int smem = (2 * w * (w + 1) + 3 * PANEL * (PANEL + 1) + w) * (int)sizeof(float);
    static int smem_set = 0;                           // over 48 KiB of dynamic shared memory needs the opt-in
    if (smem > smem_set) {
        const cudaError_t err = cudaFuncSetAttribute(cholesky_diag_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     smem);
        if (err != cudaSuccess) return (int)err;
        smem_set = smem;
    }
    cholesky_diag_kernel<<<batch, DIAG_THREADS, smem>>>(src, dst, xinv, diag_max, w, ld, stride);
    return (int)cudaGetLastError();
}
