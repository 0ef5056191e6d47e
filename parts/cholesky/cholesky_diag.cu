// cholesky, a diagonal block of the blocked driver (n <= 128) in 32-column panels: L and X = inv(L),
// one CTA per block, for the small batches where the block's latency is what the matrix waits on.
//
// Math (model.diag_panels_model). The block A is padded to 128 with the identity. For each panel
// [c0, c1 = c0 + 32):
//   1. warp 0 factors the panel's 32 x 32 diagonal block D (already updated by the earlier panels)
//      into L_D and Y = inv(L_D): lane i holds row i of D and of Y in registers, and step j shares
//      the pivot and column j by shuffles (spotf2 order; the inverse by column elimination, as in
//      cholesky_tiled.cu); pivots at or below eps * max_i a_ii of the whole matrix become that floor;
//   2. the CTA forms L21 = A21 Y^T for the rows below, and block row p of X: Y B_p,<c0 left of Y
//      (B = I minus the updates so far);
//   3. the CTA applies A22 -= L21 L21^T (lower part) and B_below -= L21 X_p.
// Layout: the block and B/X in shared memory, rows padded to 132 floats (16-byte reads of 8
// consecutive rows hit distinct banks): 2 x 128 x 132 floats, 132 KiB. Steps 2 and 3 run as 1 x 4
// (step 2) and 4 x 4 (step 3) register tiles spread over all 8 warps.
// Launch: grid = batch, 256 threads; one CTA per SM.
// Why it is fast: cholesky_tiled.cu runs 128 CTA-wide steps of two barriers each (~600 cycles a
// step, mostly latency, at batch 1); here a block takes 17 CTA barriers, and its serial part is four
// 32-step warp chains with no barrier inside, the rest even work for all 256 threads.
#include "device_utils.cuh"

namespace {

constexpr int kDiagN = 128;
constexpr int kPanel = 32;
constexpr int kDiagLd = kDiagN + 4;
constexpr int kDiagThreads = 256;
constexpr int kDiagSmemBytes = (2 * kDiagN * kDiagLd + 4 * kPanel) * (int)sizeof(float);

__device__ __forceinline__ void load_row32(float (&v)[kPanel], const float* row) {
#pragma unroll
    for (int q = 0; q < kPanel / 4; ++q) {
        const float4 f = *reinterpret_cast<const float4*>(row + 4 * q);
        v[4 * q] = f.x;
        v[4 * q + 1] = f.y;
        v[4 * q + 2] = f.z;
        v[4 * q + 3] = f.w;
    }
}

__device__ __forceinline__ void store_row32(float* row, const float (&v)[kPanel]) {
#pragma unroll
    for (int q = 0; q < kPanel / 4; ++q)
        *reinterpret_cast<float4*>(row + 4 * q) = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// acc[e] += sum over 32 k of a[k] * rows[e][k] for the 4 rows rows[e] = b + e * kDiagLd.
__device__ __forceinline__ void dot4x32(float (&acc)[4], const float* a, const float* b) {
#pragma unroll
    for (int q = 0; q < kPanel / 4; ++q) {
        const float4 x = ld4(a + 4 * q);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float4 y = ld4(b + e * kDiagLd + 4 * q);
            acc[e] = fmaf(x.x, y.x, fmaf(x.y, y.y, fmaf(x.z, y.z, fmaf(x.w, y.w, acc[e]))));
        }
    }
}

// acc[a][e] += sum over 32 k of P[a][k] Q[e][k]: P's rows p + a * kDiagLd, Q's rows q + e * kDiagLd.
__device__ __forceinline__ void tile_abt(float (&acc)[4][4], const float* p, const float* q) {
#pragma unroll
    for (int k4 = 0; k4 < kPanel / 4; ++k4) {
        float4 x[4], y[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) x[a] = ld4(p + a * kDiagLd + 4 * k4);
#pragma unroll
        for (int e = 0; e < 4; ++e) y[e] = ld4(q + e * kDiagLd + 4 * k4);
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[a][e] = fmaf(x[a].x, y[e].x, fmaf(x[a].y, y[e].y, fmaf(x[a].z, y[e].z, fmaf(x[a].w, y[e].w, acc[a][e]))));
    }
}

// acc[a][e] += sum over 32 k of P[a][k] Q[k][e]: P's rows p + a * kDiagLd, Q's rows q + k * kDiagLd.
__device__ __forceinline__ void tile_ab(float (&acc)[4][4], const float* p, const float* q) {
#pragma unroll
    for (int k4 = 0; k4 < kPanel / 4; ++k4) {
        float4 x[4], y[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) x[a] = ld4(p + a * kDiagLd + 4 * k4);
#pragma unroll
        for (int j = 0; j < 4; ++j) y[j] = ld4(q + (4 * k4 + j) * kDiagLd);
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const float xa[4] = {x[a].x, x[a].y, x[a].z, x[a].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                acc[a][0] = fmaf(xa[j], y[j].x, acc[a][0]);
                acc[a][1] = fmaf(xa[j], y[j].y, acc[a][1]);
                acc[a][2] = fmaf(xa[j], y[j].z, acc[a][2]);
                acc[a][3] = fmaf(xa[j], y[j].w, acc[a][3]);
            }
        }
    }
}

// Step 1 (warp 0): factor the diagonal block S[c0:c0+32, c0:c0+32] in place and write Y = inv(L_D)
// over X's diagonal block (B there is still the identity). Upper parts stay zero. Step j shares column
// j of L and row j of Y through shared vectors (double-buffered, so one __syncwarp per step): each lane
// reads them as 16-byte broadcasts instead of 32 shuffles.
__device__ __forceinline__ void factor_panel_block(float* S, float* X, float* share, int c0, float floor) {
    const int lane = threadIdx.x & 31;
    float d[kPanel], y[kPanel];
    load_row32(d, S + (c0 + lane) * kDiagLd + c0);
#pragma unroll
    for (int c = 0; c < kPanel; ++c) y[c] = c == lane ? 1.f : 0.f;
#pragma unroll
    for (int j = 0; j < kPanel; ++j) {
        float* col = share + (j & 1) * 2 * kPanel;       // column j of L
        float* yrow = col + kPanel;                      // row j of Y
        const popkit::Pivot pivot = popkit::cholesky_pivot(__shfl_sync(0xffffffffu, d[j], j), floor);
        if (lane == j) {
            d[j] = pivot.lkk;
#pragma unroll
            for (int c = 0; c <= j; ++c) y[c] *= pivot.inv;
            store_row32(yrow, y);
        }
        if (lane > j) d[j] *= pivot.inv;
        const float lij = lane > j ? d[j] : 0.f;
        col[lane] = lij;
        __syncwarp();
#pragma unroll
        for (int k4 = (j + 1) / 4; k4 < kPanel / 4; ++k4) {   // d_ik -= l_ij l_kj for j < k <= i
            const float4 v = ld4(col + 4 * k4);
            const float lk[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int k = 4 * k4 + e;
                if (k > j && k <= lane) d[k] = fmaf(-lij, lk[e], d[k]);
            }
        }
#pragma unroll
        for (int c4 = 0; c4 <= j / 4; ++c4) {            // y_ic -= l_ij y_jc for c <= j < i
            const float4 v = ld4(yrow + 4 * c4);
            const float yc[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int c = 4 * c4 + e;
                if (c <= j && lane > j) y[c] = fmaf(-lij, yc[e], y[c]);
            }
        }
    }
    store_row32(S + (c0 + lane) * kDiagLd + c0, d);
    store_row32(X + (c0 + lane) * kDiagLd + c0, y);
}

template <bool INV>
__global__ void __launch_bounds__(kDiagThreads, 1)
cholesky_diag_kernel(const float* src, float* dst, float* __restrict__ xinv, const float* __restrict__ diag_max,
                     int n, int ld, int stride) {
    extern __shared__ float4 smem4[];
    float* S = reinterpret_cast<float*>(smem4);
    float* X = S + kDiagN * kDiagLd;
    const int tid = threadIdx.x, warp = tid >> 5;
    const float* A = src + (size_t)blockIdx.x * stride;

    for (int i = tid; i < kDiagN * kDiagN; i += kDiagThreads) {
        const int r = i / kDiagN, c = i % kDiagN;
        S[r * kDiagLd + c] = (r < n && c <= r) ? A[(size_t)r * ld + c] : (r == c ? 1.f : 0.f);
        X[r * kDiagLd + c] = r == c ? 1.f : 0.f;         // B = I; the panels' Y land on its diagonal
    }
    float floor = diag_max[blockIdx.x] * 1.1920929e-7f;  // float32 eps
    if (!(floor > 0.f)) floor = 1.17549435e-38f;         // an all-zero diagonal: the smallest normal
    __syncthreads();

    for (int c0 = 0; c0 < kDiagN; c0 += kPanel) {
        const int c1 = c0 + kPanel, rows = kDiagN - c1;
        if (warp == 0) factor_panel_block(S, X, X + kDiagN * kDiagLd, c0, floor);
        __syncthreads();

        // 2. L21 = A21 Y^T (items: a row and 4 columns), X_p = Y B_p,<c0 (a row of the panel, 4 columns)
        constexpr int kMaxItems = 3;                     // 96 rows x 8 quads or 32 rows x 24 quads, / 256
        float l21[kMaxItems][4], xp[kMaxItems][4];
#pragma unroll
        for (int it = 0; it < kMaxItems; ++it) {
            const int idx = tid + kDiagThreads * it;
            if (idx < rows * 8) {
                const int r = c1 + idx / 8, q = idx % 8;
                float acc[4] = {0.f, 0.f, 0.f, 0.f};
                dot4x32(acc, S + r * kDiagLd + c0, X + (c0 + 4 * q) * kDiagLd + c0);
#pragma unroll
                for (int e = 0; e < 4; ++e) l21[it][e] = acc[e];
            }
            if (INV && idx < kPanel * (c0 / 4)) {
                const int i = idx / (c0 / 4), q = idx % (c0 / 4);
                float acc[4] = {0.f, 0.f, 0.f, 0.f};
                const float* yrow = X + (c0 + i) * kDiagLd + c0;
#pragma unroll
                for (int k = 0; k < kPanel; ++k) {
                    const float4 b = ld4(X + (c0 + k) * kDiagLd + 4 * q);
                    const float yk = yrow[k];
                    acc[0] = fmaf(yk, b.x, acc[0]);
                    acc[1] = fmaf(yk, b.y, acc[1]);
                    acc[2] = fmaf(yk, b.z, acc[2]);
                    acc[3] = fmaf(yk, b.w, acc[3]);
                }
#pragma unroll
                for (int e = 0; e < 4; ++e) xp[it][e] = acc[e];
            }
        }
        __syncthreads();                                 // every read of A21 and B_p is done
#pragma unroll
        for (int it = 0; it < kMaxItems; ++it) {
            const int idx = tid + kDiagThreads * it;
            if (idx < rows * 8) {
                const int r = c1 + idx / 8, q = idx % 8;
                *reinterpret_cast<float4*>(S + r * kDiagLd + c0 + 4 * q) =
                    make_float4(l21[it][0], l21[it][1], l21[it][2], l21[it][3]);
            }
            if (INV && idx < kPanel * (c0 / 4)) {
                const int i = idx / (c0 / 4), q = idx % (c0 / 4);
                *reinterpret_cast<float4*>(X + (c0 + i) * kDiagLd + 4 * q) =
                    make_float4(xp[it][0], xp[it][1], xp[it][2], xp[it][3]);
            }
        }
        __syncthreads();

        // 3. A22 -= L21 L21^T (4 x 4 tiles on and below the diagonal), B_below -= L21 X_p (4 x 4 tiles)
        const int t4 = rows / 4, lower_tiles = t4 * (t4 + 1) / 2, x_tiles = INV ? t4 * (c1 / 4) : 0;
        for (int idx = tid; idx < lower_tiles + x_tiles; idx += kDiagThreads) {
            float acc[4][4] = {};
            if (idx < lower_tiles) {
                int ti = (int)((sqrtf(8.f * idx + 1.f) - 1.f) * 0.5f);
                while ((ti + 1) * (ti + 2) / 2 <= idx) ++ti;
                while (ti * (ti + 1) / 2 > idx) --ti;
                const int tj = idx - ti * (ti + 1) / 2, r0 = c1 + 4 * ti, s0 = c1 + 4 * tj;
                tile_abt(acc, S + r0 * kDiagLd + c0, S + s0 * kDiagLd + c0);
#pragma unroll
                for (int a = 0; a < 4; ++a)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (s0 + e <= r0 + a) S[(r0 + a) * kDiagLd + s0 + e] -= acc[a][e];
            } else {
                const int k = idx - lower_tiles, ti = k / (c1 / 4), tj = k % (c1 / 4);
                const int r0 = c1 + 4 * ti, s0 = 4 * tj;
                tile_ab(acc, S + r0 * kDiagLd + c0, X + c0 * kDiagLd + s0);
#pragma unroll
                for (int a = 0; a < 4; ++a)
#pragma unroll
                    for (int e = 0; e < 4; ++e) X[(r0 + a) * kDiagLd + s0 + e] -= acc[a][e];
            }
        }
        __syncthreads();
    }

    float* out = dst + (size_t)blockIdx.x * stride;
    for (int i = tid; i < n * n; i += kDiagThreads) {
        const int r = i / n, c = i % n;
        out[(size_t)r * ld + c] = c <= r ? S[r * kDiagLd + c] : 0.f;
        if (INV) xinv[(size_t)blockIdx.x * n * n + i] = c <= r ? X[r * kDiagLd + c] : 0.f;
    }
}

template <bool INV>
int launch_diag(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n, int ld,
                int stride) {
    static int granted = 0;
    const cudaError_t err = popkit::allow_dynamic_smem(cholesky_diag_kernel<INV>, kDiagSmemBytes, granted);
    if (err != cudaSuccess) return (int)err;
    cholesky_diag_kernel<INV><<<batch, kDiagThreads, kDiagSmemBytes>>>(src, dst, xinv, diag_max, n, ld, stride);
    return (int)cudaGetLastError();
}

}  // namespace

// As cholesky_tiled (cholesky_tiled.cu) for the blocked driver's diagonal blocks: factor `batch` n x n
// blocks (n <= 128; leading dimension ld, batch stride `stride` floats; src may equal dst), pivot floors
// from diag_max (max_i a_ii of each block's whole matrix, required), and X = inv(L) into xinv (batch x n
// x n) unless it is NULL.
POPKIT_EXPORT int cholesky_diag(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n,
                                int ld, int stride) {
    if (batch < 1 || n < 1 || n > kDiagN || ld < n || stride < n || !diag_max) return (int)cudaErrorInvalidValue;
    return xinv ? launch_diag<true>(src, dst, xinv, diag_max, batch, n, ld, stride)
                : launch_diag<false>(src, dst, xinv, diag_max, batch, n, ld, stride);
}
