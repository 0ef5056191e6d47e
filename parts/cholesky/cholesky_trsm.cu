// cholesky, the blocked driver's panel as a triangular solve: L21 = A21 L11^{-T} for a 128-column
// block, one thread per row, so the diagonal block needs no inverse.
//
// Math: row r of L21 is the x with x L11^T = a (a: row r of A21), solved right-looking: for j = 0..127,
// x_j *= 1 / l_jj, then a_i -= x_j l_ij for i > j (plain fp32, no tensor cores: the solve is exact to
// rounding, where the product with inv(L11) carries the inverse's own error).
// Layout: L11^T (rows padded to 132 floats) and 1 / l_jj in shared memory, loaded once per CTA. Each
// thread solves its row in four 32-column blocks: the block's 32 values in registers, first reduced by
// the finished blocks (a runtime loop over their columns, the thread's own finished values read back
// from shared memory, column-major so a warp's reads hit 32 banks), then the 32 x 32 triangular solve
// unrolled; L11's entries come as 16-byte broadcasts. (A fully unrolled 128-column solve took ptxas 13 s.)
// Launch: grid (ceil(m / 64), batch), 64 threads, ~100 KiB of shared memory; rows past m only load.
// Why it is fast: rows are independent, so after the load the CTA never synchronizes: each thread's
// ~8k FMAs run back to back. It replaces the diagonal kernel's fused inverse (~14 us of its 44 at
// batch 1) and the tf32x3 panel product (~7 us) on the look-ahead's chain of diagonal blocks.
#include "device_utils.cuh"
#include "tf32x3.cuh"

namespace {

constexpr int kTrsmW = 128;                        // the block width (the driver's nb)
constexpr int kTrsmLd = kTrsmW + 4;
constexpr int kTrsmThreads = 64;
constexpr int kTrsmSmemBytes = (kTrsmW * kTrsmLd + kTrsmW + kTrsmW * kTrsmThreads) * (int)sizeof(float);

// L21 = A21 L11^{-T} for rows [64 blockIdx.x, +64) of matrix blockIdx.y; a21 and l21 may alias (each
// thread reads its whole row before writing it). mirror: zeros at mirror[c * ld + r] (L21^T's place
// above the diagonal), or NULL.
__global__ void __launch_bounds__(kTrsmThreads, 1)
trsm_panel_kernel(const float* l11, const float* a21, float* l21, float* mirror, int ld, long long stride, int m) {
    extern __shared__ float4 smem4[];
    float* lt = reinterpret_cast<float*>(smem4);           // lt[j * kTrsmLd + i] = l_ij (i >= j)
    float* inv_diag = lt + kTrsmW * kTrsmLd;
    float* done = inv_diag + kTrsmW;                       // done[k * 64 + thread]: the thread's x_k
    const size_t b = blockIdx.y;
    l11 += b * stride;
    for (int idx = threadIdx.x; idx < kTrsmW * kTrsmW; idx += kTrsmThreads) {
        const int i = idx / kTrsmW, j = idx % kTrsmW;
        const float v = j <= i ? l11[(size_t)i * ld + j] : 0.f;
        lt[j * kTrsmLd + i] = v;
        if (i == j) inv_diag[j] = 1.f / v;
    }
    __syncthreads();
    const int r = blockIdx.x * kTrsmThreads + threadIdx.x;
    if (r >= m) return;
    const float* a = a21 + b * stride + (size_t)r * ld;
    float* out = l21 + b * stride + (size_t)r * ld;
#pragma unroll
    for (int cb = 0; cb < kTrsmW / 32; ++cb) {             // column block [32 cb, 32 cb + 32)
        float x[32];
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            const float4 v = *reinterpret_cast<const float4*>(a + 32 * cb + 4 * q);
            x[4 * q] = v.x;
            x[4 * q + 1] = v.y;
            x[4 * q + 2] = v.z;
            x[4 * q + 3] = v.w;
        }
#pragma unroll 4
        for (int k = 0; k < 32 * cb; ++k) {                // x_i -= x_k l_ik over the finished columns
            const float xk = done[k * kTrsmThreads + threadIdx.x];
            const float* row = lt + k * kTrsmLd + 32 * cb;
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                const float4 l = *reinterpret_cast<const float4*>(row + 4 * q);
                x[4 * q] = fmaf(-xk, l.x, x[4 * q]);
                x[4 * q + 1] = fmaf(-xk, l.y, x[4 * q + 1]);
                x[4 * q + 2] = fmaf(-xk, l.z, x[4 * q + 2]);
                x[4 * q + 3] = fmaf(-xk, l.w, x[4 * q + 3]);
            }
        }
#pragma unroll
        for (int j = 0; j < 32; ++j) {                     // the 32 x 32 diagonal part
            x[j] *= inv_diag[32 * cb + j];
            const float* col = lt + (32 * cb + j) * kTrsmLd + 32 * cb;
#pragma unroll
            for (int q = (j + 1) / 4; q < 8; ++q) {
                const float4 l = *reinterpret_cast<const float4*>(col + 4 * q);
                const float lq[4] = {l.x, l.y, l.z, l.w};
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (4 * q + e > j) x[4 * q + e] = fmaf(-x[j], lq[e], x[4 * q + e]);
            }
        }
#pragma unroll
        for (int e = 0; e < 32; ++e) done[(32 * cb + e) * kTrsmThreads + threadIdx.x] = x[e];
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            *reinterpret_cast<float4*>(out + 32 * cb + 4 * q) =
                make_float4(x[4 * q], x[4 * q + 1], x[4 * q + 2], x[4 * q + 3]);
        }
    }
    if (mirror) {
        float* z = mirror + b * stride + r;
#pragma unroll 8
        for (int c = 0; c < kTrsmW; ++c) z[(size_t)c * ld] = 0.f;
    }
}

}  // namespace

// The panel of a 128-column block for `batch` matrices (leading dimension ld, batch stride `stride`
// floats; rows 16-byte aligned): L21 (m x 128) = A21 L11^{-T} with L11 the factored diagonal block
// (lower, read from l11), zeros at mirror (L21^T's place above the diagonal) unless it is NULL; a21 may
// equal l21.
POPKIT_EXPORT int cholesky_trsm_panel(const float* l11, const float* a21, float* l21, float* mirror, int ld,
                                      long long stride, int batch, int m) {
    if (batch < 1 || m < 1 || ld < kTrsmW || !tf32x3::aligned16(a21) || !tf32x3::aligned16(l21) || ld % 4 != 0 ||
        stride % 4 != 0)
        return (int)cudaErrorInvalidValue;
    static int granted = 0;
    const cudaError_t err = popkit::allow_dynamic_smem(trsm_panel_kernel, kTrsmSmemBytes, granted);
    if (err != cudaSuccess) return (int)err;
    trsm_panel_kernel<<<dim3((m + kTrsmThreads - 1) / kTrsmThreads, batch), kTrsmThreads, kTrsmSmemBytes>>>(
        l11, a21, l21, mirror, ld, stride, m);
    return (int)cudaGetLastError();
}
