// cholesky, blocked route with a split-TF32 trailing update: the update's operands, in one pass.
//
// Given L21 (batch x m x w, contiguous: the panel cuBLAS computed as A21 inv(L11)^T), writes it back
// into the panel of L and writes the operands of the split-TF32 trailing update:
//   y = hi + lo, hi = y rounded to TF32 (10 mantissa bits, ties away from zero), lo = y - hi (exact),
//   left = [hi | hi | lo], right = [hi | lo | hi]    (batch x m x 3w each, contiguous),
// so that left right^T = hi hi^T + hi lo^T + lo hi^T = L21 L21^T to ~21 bits in one TF32 GEMM
// (model.panel_model and tf32_model.tf32_split are the same arithmetic).
//
// Launch: a grid-stride loop over the batch * m rows, one row per CTA step, 128 threads on its
// columns: every read and each of the 7 writes is coalesced, with one 64-bit division per row.
// Why: one memory-bound launch (4 bytes read, 28 written per element) replaces the copy and ~7
// elementwise and concatenation ops. A kernel that also computed the product in place (SIMT, X in
// shared memory) took 25-30 us per 1 x 4096 panel, slower than cuBLAS plus this pass (H200,
// eb7f279-1455df0); written from per-thread column strips, its stores touched 32 sectors per warp
// store, 7 times per element (1x32768: 247 ms against 218).
#include "device_utils.cuh"
#include "tensor_core_tf32.cuh"

namespace {

__global__ void cholesky_split_kernel(const float* __restrict__ l21, float* panel, float* __restrict__ left,
                                      float* __restrict__ right, long long rows, int m, int w, int ld,
                                      long long stride) {
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {          // row = b * m + r
        const long long b = row / m;
        const int r = (int)(row - b * m);
        const float* src = l21 + row * w;
        float* dst = panel + b * stride + (long long)r * ld;
        float* lrow = left + row * 3 * w;
        float* rrow = right + row * 3 * w;
        for (int c = threadIdx.x; c < w; c += blockDim.x) {
            const float y = src[c];
            unsigned hi_bits, lo_bits;
            popkit::split_tf32(y, hi_bits, lo_bits);
            const float hi = __uint_as_float(hi_bits), lo = __uint_as_float(lo_bits);
            dst[c] = y;
            lrow[c] = hi;
            lrow[w + c] = hi;
            lrow[2 * w + c] = lo;
            rrow[c] = hi;
            rrow[w + c] = lo;
            rrow[2 * w + c] = hi;
        }
    }
}

}  // namespace

// l21: batch x m x w contiguous; panel: its place in L (first element, leading dimension ld, batch
// stride `stride` floats); left, right: batch x m x 3w each.
POPKIT_EXPORT int cholesky_split(const float* l21, float* panel, float* left, float* right, int batch, int m, int w,
                                 int ld, int stride) {
    if (batch < 1 || m < 1 || w < 1 || ld < w || !l21 || !panel || !left || !right) return (int)cudaErrorInvalidValue;
    const long long rows = (long long)batch * m;
    const int grid = (int)(rows < 8192 ? rows : 8192);  // a grid-stride loop: enough CTAs to fill any GPU
    cholesky_split_kernel<<<grid, 128>>>(l21, panel, left, right, rows, m, w, ld, stride);
    return (int)cudaGetLastError();
}
