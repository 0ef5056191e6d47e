// cholesky, blocked route with a split-TF32 trailing update: the panel of one block column, in
// place, and the trailing update's operands, in one launch.
//
// Computes, for each matrix of the batch, P <- P X^T where P is the m x w panel below the diagonal
// block (L21 = A21 inv(L11)^T; X = inv(L11) from cholesky_tiled.cu, lower triangular with zeros
// above its diagonal), and the operands of the split-TF32 trailing update:
//   y = hi + lo, hi = y rounded to TF32 (10 mantissa bits, ties away from zero), lo = y - hi (exact),
//   left = [hi | hi | lo], right = [hi | lo | hi]    (m x 3w each, contiguous),
// so that left right^T = hi hi^T + hi lo^T + lo hi^T = L21 L21^T to ~21 bits in one TF32 GEMM.
// (model.panel_model and model.tf32_split are the same arithmetic.)
//
// Launch: grid = (batch, ceil(m / ROWS)), 256 threads, ROWS = 16 RPT panel rows per CTA: 64 when
// that fills the GPU twice over, else 16 (one matrix of n = 4096 has only ~32 tiles of 64 rows).
// A CTA stages its rows and X^T in shared memory (w rounded up to W4, a multiple of 4, rows
// padded by 4 floats: (ROWS + W4)(W4 + 4) floats, 99 KiB at ROWS = 64, w = 128). Thread (tr, tc)
// computes rows tr + 16 i (i < RPT) by columns 8 tc .. 8 tc + 7: per 4 steps of the w-long dot
// product it reads RPT + 8 float4s (its rows' 4 values, broadcast within a half-warp, and 4 rows
// of X^T's 8-column strip) for 32 RPT FMAs. The results go back through shared memory and out
// row by row, consecutive threads on consecutive columns: written straight from the strips, each
// warp store touched 32 sectors for 4 bytes each, 7 stores per element (1x32768 took 247 ms
// against 218, H200, 0c2bdaf). Every CTA reads all of its rows before it writes, so the product
// is in place.
// Why: one launch replaces the panel GEMM, its copy back into L and the split's ~7 elementwise and
// concatenation ops. Its first version (scalar shared loads of a 16-strided column set: 9 loads
// per 8 FMAs) was bound by shared-memory bandwidth, 22 us per 1 x 4096 panel (H200, 459b952).
#include "device_utils.cuh"

namespace {

constexpr int PANEL_THREADS = 256;     // 16 x 16: RPT rows x 8 columns of outputs each
constexpr int PANEL_MAX_W = 128;       // 16 threads x 8 columns

__device__ __forceinline__ float round_to_tf32(float y) {
    return __int_as_float((__float_as_int(y) + 0x1000) & ~0x1fff);
}

template <int RPT>
__global__ void __launch_bounds__(PANEL_THREADS)
cholesky_panel_kernel(float* panel, const float* __restrict__ xinv, float* __restrict__ left,
                      float* __restrict__ right, int m, int w, int ld, int stride) {
    constexpr int ROWS = 16 * RPT;
    extern __shared__ float4 smem4[];
    const int w4 = (w + 3) & ~3, lds = w4 + 4;
    float* Ps = reinterpret_cast<float*>(smem4);   // ROWS x lds: the panel rows
    float* Xt = Ps + ROWS * lds;                   // w4 x lds: Xt[q][c] = X[c][q]
    const int b = blockIdx.x, r0 = blockIdx.y * ROWS;
    float* P = panel + (size_t)b * stride;
    const float* X = xinv + (size_t)b * w * w;

    for (int idx = threadIdx.x; idx < ROWS * w4; idx += PANEL_THREADS) {
        const int r = idx / w4, c = idx - r * w4;
        Ps[r * lds + c] = (r0 + r < m && c < w) ? P[(size_t)(r0 + r) * ld + c] : 0.f;
    }
    for (int idx = threadIdx.x; idx < w4 * w4; idx += PANEL_THREADS) {
        const int c = idx / w4, q = idx - c * w4;
        Xt[q * lds + c] = (c < w && q < w) ? X[c * w + q] : 0.f;
    }
    __syncthreads();

    const int tr = threadIdx.x / 16, c0 = 8 * (threadIdx.x % 16);
    float acc[RPT][8] = {};
    if (c0 < w) {
        for (int q = 0; q < w4; q += 4) {
            float4 p[RPT];
#pragma unroll
            for (int i = 0; i < RPT; ++i) p[i] = *reinterpret_cast<const float4*>(&Ps[(tr + 16 * i) * lds + q]);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const float4 xa = *reinterpret_cast<const float4*>(&Xt[(q + u) * lds + c0]);
                const float4 xb = *reinterpret_cast<const float4*>(&Xt[(q + u) * lds + c0 + 4]);
                const float x[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
                for (int i = 0; i < RPT; ++i) {
                    const float pu = u == 0 ? p[i].x : u == 1 ? p[i].y : u == 2 ? p[i].z : p[i].w;
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(pu, x[j], acc[i][j]);
                }
            }
        }
    }

    __syncthreads();                               // every thread is done reading Ps: results replace it
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
            if (c0 + j < w) Ps[(tr + 16 * i) * lds + c0 + j] = acc[i][j];
    __syncthreads();
    for (int idx = threadIdx.x; idx < ROWS * w; idx += PANEL_THREADS) {   // coalesced: consecutive c
        const int rr = idx / w, c = idx - rr * w, r = r0 + rr;
        if (r >= m) break;
        const float y = Ps[rr * lds + c], hi = round_to_tf32(y), lo = y - hi;
        float* lrow = left + ((size_t)b * m + r) * 3 * w;
        float* rrow = right + ((size_t)b * m + r) * 3 * w;
        P[(size_t)r * ld + c] = y;
        lrow[c] = hi;
        lrow[w + c] = hi;
        lrow[2 * w + c] = lo;
        rrow[c] = hi;
        rrow[w + c] = lo;
        rrow[2 * w + c] = hi;
    }
}

template <int RPT>
int launch_panel(float* panel, const float* xinv, float* left, float* right, int batch, int m, int w, int ld,
                 int stride) {
    constexpr int rows = 16 * RPT;
    const int w4 = (w + 3) & ~3;
    const int smem = (rows + w4) * (w4 + 4) * (int)sizeof(float);
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
// `stride` floats; xinv: batch x w x w) and the split operands left, right (batch x m x 3w each).
// 1 <= w <= 128.
POPKIT_EXPORT int cholesky_panel(float* panel, const float* xinv, float* left, float* right, int batch, int m,
                                 int w, int ld, int stride) {
    if (batch < 1 || m < 1 || (m + 15) / 16 > 65535 || w < 1 || w > PANEL_MAX_W || ld < w || !left || !right)
        return (int)cudaErrorInvalidValue;
    if ((long long)batch * ((m + 63) / 64) >= 2LL * multiprocessors())
        return launch_panel<4>(panel, xinv, left, right, batch, m, w, ld, stride);
    return launch_panel<1>(panel, xinv, left, right, batch, m, w, ld, stride);
}
