// qr_v2, small n (n <= 64): the whole Householder QR of one matrix in one CTA.
//
// Computes H, tau in torch.geqrf form: for k = 0..n-1 the reflector
// H_k = I - tau_k v_k v_k^T (v_k[k] = 1 implicit, tail stored below the
// diagonal) zeroes column k below the diagonal (LAPACK slarfg), and is applied
// to the trailing columns: A[k:, j] -= tau_k v_k (v_k^T A[k:, j]).
//
// Launch: one CTA of 128 threads (4 warps) per matrix; grid = batch.
// The matrix lives in shared memory, column-major with a padded leading
// dimension (n + 1) so that a warp reading a column hits distinct banks.
// Why it is fast: at n <= 64 the factorization is latency bound; keeping the
// matrix on chip makes every step a few shared-memory passes and one
// __syncthreads, with a single coalesced read and write of global memory.
// Column norms are scaled by the column's largest entry, so inputs near the
// float32 range limits neither overflow nor underflow.
#include "device_utils.cuh"

namespace {

constexpr int kSmallMaxN = 64;
constexpr int kSmallThreads = 128;

__global__ void __launch_bounds__(kSmallThreads)
qr_small_kernel(const float* __restrict__ A, float* __restrict__ H, float* __restrict__ tau, int n) {
    extern __shared__ float s[];            // n columns of (n + 1) floats
    __shared__ float s_tau;
    const int ld = n + 1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t base = (size_t)blockIdx.x * n * n;

    for (int idx = threadIdx.x; idx < n * n; idx += blockDim.x) {
        const int i = idx / n, j = idx % n;  // row-major in global memory
        s[j * ld + i] = A[base + idx];
    }
    __syncthreads();

    for (int k = 0; k < n; ++k) {
        float* col = s + k * ld;
        if (warp == 0) {                     // reflector for column k
            float amax = 0.f;
            for (int i = k + 1 + lane; i < n; i += 32) amax = fmaxf(amax, fabsf(col[i]));
            amax = popkit::warp_max(amax);
            float ssq = 0.f;
            if (amax > 0.f)
                for (int i = k + 1 + lane; i < n; i += 32) { const float x = col[i] / amax; ssq += x * x; }
            ssq = popkit::warp_sum(ssq);
            const popkit::Reflector r = popkit::make_reflector(col[k], amax * sqrtf(ssq));
            if (lane == 0) { s_tau = r.tau; col[k] = r.beta; tau[(size_t)blockIdx.x * n + k] = r.tau; }
            __syncwarp();
            for (int i = k + 1 + lane; i < n; i += 32) col[i] *= r.scale;
        }
        __syncthreads();
        const float t = s_tau;
        if (t != 0.f) {                      // apply H_k to columns k+1.., one warp per column
            for (int j = k + 1 + warp; j < n; j += kSmallThreads / 32) {
                float* cj = s + j * ld;
                float dot = (lane == 0) ? cj[k] : 0.f;
                for (int i = k + 1 + lane; i < n; i += 32) dot += col[i] * cj[i];
                dot = t * popkit::warp_sum(dot);
                if (lane == 0) cj[k] -= dot;
                for (int i = k + 1 + lane; i < n; i += 32) cj[i] -= dot * col[i];
            }
        }
        __syncthreads();
    }

    for (int idx = threadIdx.x; idx < n * n; idx += blockDim.x) {
        const int i = idx / n, j = idx % n;
        H[base + idx] = s[j * ld + i];
    }
}

}  // namespace

POPKIT_EXPORT int qr_small(const float* A, float* H, float* tau, int batch, int n) {
    if (n < 1 || n > kSmallMaxN || batch < 1) return (int)cudaErrorInvalidValue;
    const size_t smem = (size_t)n * (n + 1) * sizeof(float);
    qr_small_kernel<<<batch, kSmallThreads, smem>>>(A, H, tau, n);
    return (int)cudaGetLastError();
}

POPKIT_EXPORT int qr_small_max_n() { return kSmallMaxN; }
