// cholesky, blocked route: the panel of one block column, in place, and the trailing update's operands.
//
// Computes, for each matrix of the batch, P <- P X^T where P is the m x w panel below the diagonal
// block (L21 = A21 inv(L11)^T; X = inv(L11) from cholesky_tiled.cu, lower triangular with zeros
// above its diagonal) and, when `left` is given, the operands of the split-TF32 trailing update:
//   y = hi + lo, hi = y rounded to TF32 (10 mantissa bits, ties away from zero), lo = y - hi (exact),
//   left = [hi | hi | lo], right = [hi | lo | hi]    (m x 3w each, contiguous),
// so that left right^T = hi hi^T + hi lo^T + lo hi^T = L21 L21^T to ~21 bits in one TF32 GEMM.
// (model.tf32_split is the same rounding.)
//
// Launch: grid = (batch, ceil(m / ROWS)), 256 threads, ROWS = 16 RPT panel rows per CTA: 64 when
// that fills the GPU twice over, else 16 (one matrix of n = 4096 has only ~32 tiles of 64 rows).
// A CTA stages its rows and X in shared memory ((ROWS + w)(w + 1) floats, 97 KiB at ROWS = 64 and
// w = 128), then thread (tr, tc) computes the outputs (tr + 16 i, tc + 16 j), i < RPT, j < 8:
// 8 RPT accumulators from RPT + 8 shared loads per step of the w-long dot product (rows
// broadcast within a warp; X padded to w + 1 columns, so the 16 columns a warp reads fall in
// 16 banks). Every CTA reads all of its rows before it writes, so the product is in place.
// Why: one launch replaces the panel GEMM, its copy back into L and the split's ~7 elementwise
// and concatenation ops; on single large matrices those host-side launches, not the GPU, bounded
// each block step.
#include "device_utils.cuh"

namespace {

constexpr int PANEL_THREADS = 256;     // 16 x 16: RPT rows x 8 columns of outputs each
constexpr int PANEL_MAX_W = 128;

__device__ __forceinline__ float round_to_tf32(float y) {
    return __int_as_float((__float_as_int(y) + 0x1000) & ~0x1fff);
}

template <int RPT>
__global__ void __launch_bounds__(PANEL_THREADS)
cholesky_panel_kernel(float* panel, const float* __restrict__ xinv, float* __restrict__ left,
                      float* __restrict__ right, int m, int w, int ld, int stride) {
    constexpr int PANEL_ROWS = 16 * RPT;
    extern __shared__ float smem[];
    const int lds = w + 1;
    float* Ps = smem;                              // PANEL_ROWS x lds
    float* Xs = smem + PANEL_ROWS * lds;           // w x lds
    const int b = blockIdx.x, r0 = blockIdx.y * PANEL_ROWS;
    float* P = panel + (size_t)b * stride;
    const float* X = xinv + (size_t)b * w * w;

    for (int idx = threadIdx.x; idx < PANEL_ROWS * w; idx += PANEL_THREADS) {
        const int r = idx / w, c = idx - r * w;
        Ps[r * lds + c] = (r0 + r < m) ? P[(size_t)(r0 + r) * ld + c] : 0.f;
    }
    for (int idx = threadIdx.x; idx < w * w; idx += PANEL_THREADS) {
        const int r = idx / w, c = idx - r * w;
        Xs[r * lds + c] = X[idx];
    }
    __syncthreads();

    const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
    float acc[RPT][8] = {};
    for (int q = 0; q < w; ++q) {
        float p[RPT], x[8];
#pragma unroll
        for (int i = 0; i < RPT; ++i) p[i] = Ps[(tr + 16 * i) * lds + q];
#pragma unroll
        for (int j = 0; j < 8; ++j) x[j] = (tc + 16 * j < w) ? Xs[(tc + 16 * j) * lds + q] : 0.f;
#pragma unroll
        for (int i = 0; i < RPT; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(p[i], x[j], acc[i][j]);
    }

#pragma unroll
    for (int i = 0; i < RPT; ++i) {
        const int r = r0 + tr + 16 * i;
        if (r >= m) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int c = tc + 16 * j;
            if (c >= w) continue;
            const float y = acc[i][j];
            P[(size_t)r * ld + c] = y;
            if (left) {
                const float hi = round_to_tf32(y), lo = y - hi;
                float* lrow = left + ((size_t)b * m + r) * 3 * w;
                float* rrow = right + ((size_t)b * m + r) * 3 * w;
                lrow[c] = hi;
                lrow[w + c] = hi;
                lrow[2 * w + c] = lo;
                rrow[c] = hi;
                rrow[w + c] = lo;
                rrow[2 * w + c] = hi;
            }
        }
    }
}

template <int RPT>
int launch_panel(float* panel, const float* xinv, float* left, float* right, int batch, int m, int w, int ld,
                 int stride) {
    constexpr int rows = 16 * RPT;
    const int smem = (rows + w) * (w + 1) * (int)sizeof(float);
    static int smem_set = 0;                       // over 48 KiB of dynamic shared memory needs the opt-in
    if (smem > smem_set) {
        const cudaError_t err = cudaFuncSetAttribute(cholesky_panel_kernel<RPT>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return (int)err;
        smem_set = smem;
    }
    const dim3 grid(batch, (m + rows - 1) / rows);
    cholesky_panel_kernel<RPT><<<grid, PANEL_THREADS, smem>>>(panel, xinv, left, right, m, w, ld, stride);
    return (int)cudaGetLastError();
}

int multiprocessors() {
    static int count = 0;
    if (count == 0) {
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess ||
            cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
            count = 132;
    }
    return count;
}

}  // namespace

// P <- P X^T for `batch` panels of m x w (panel: first element, leading dimension ld, batch stride
// `stride` floats; xinv: batch x w x w), and the split operands when left/right are not NULL
// (batch x m x 3w each). 1 <= w <= 128.
POPKIT_EXPORT int cholesky_panel(float* panel, const float* xinv, float* left, float* right, int batch, int m,
                                 int w, int ld, int stride) {
    if (batch < 1 || m < 1 || (m + 15) / 16 > 65535 || w < 1 || w > PANEL_MAX_W || ld < w ||
        (left == nullptr) != (right == nullptr))
        return (int)cudaErrorInvalidValue;
    if ((long long)batch * ((m + 63) / 64) >= 2LL * multiprocessors())
        return launch_panel<4>(panel, xinv, left, right, batch, m, w, ld, stride);
    return launch_panel<1>(panel, xinv, left, right, batch, m, w, ld, stride);
}
