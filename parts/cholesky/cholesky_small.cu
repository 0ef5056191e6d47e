// cholesky, small n (n <= 32): the whole factorization of one matrix in one warp.
//
// Computes L, lower triangular with A = L L^T, by right-looking Cholesky
// (LAPACK spotf2 order): for k = 0..n-1
//   l_kk = sqrt(a_kk),  l_ik = a_ik * (1 / l_kk)            (i > k; 1 / l_kk = rsqrt(a_kk))
//   a_ij -= l_ik * l_jk                                     (k < j <= i)
// reading only the lower triangle of A. Writes the strict upper part of L as 0.
// A pivot at or below f = eps * max_i a_ii becomes f (cholesky_tiled.cu's outline says why:
// a roundoff-level pivot of a numerically singular SPD matrix, floored inside the gate, with no
// host-side check; a NaN pivot stays NaN).
//
// Launch: `warps` warps per CTA (1..kSmallMaxWarps), one matrix per warp;
// grid = ceil(batch / warps). Lane i owns row i in 32 registers; column k is
// broadcast by __shfl_sync from the lanes that own it. Each warp stages its
// matrix through shared memory (32 x 33 floats, padded so that the lane-per-row
// reads hit distinct banks) so that global memory is read and written once,
// coalesced, as the contiguous n*n floats of the matrix.
// Why it is fast: at n <= 32 the work (n^3/6 FMAs) is tiny and the case is
// memory bound (4096 x 32 moves 32 MiB: ~7 us at 4.8 TB/s); no __syncthreads,
// no shared memory traffic inside the factorization, and many independent
// warps per SM hide the latency of the shuffle chain.
#include "device_utils.cuh"

namespace {

constexpr int kSmallMaxN = 32;
constexpr int kSmallMaxWarps = 16;
constexpr int kSmallLd = kSmallMaxN + 1;

__global__ void __launch_bounds__(kSmallMaxWarps * 32)
cholesky_small_kernel(const float* __restrict__ A, float* __restrict__ L, int batch, int n) {
    extern __shared__ float s_all[];                     // one 32 x 33 tile per warp
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int matrix = blockIdx.x * (blockDim.x >> 5) + warp;
    if (matrix >= batch) return;                         // whole warps only: no block barrier below
    float* s = s_all + warp * kSmallMaxN * kSmallLd;
    const size_t base = (size_t)matrix * n * n;
    const int nn = n * n;

    for (int idx = lane; idx < nn; idx += 32) {
        const int r = idx / n, c = idx - r * n;
        s[r * kSmallLd + c] = A[base + idx];
    }
    __syncwarp();
    float a[kSmallMaxN];                                 // row `lane`, lower part; zeros elsewhere
#pragma unroll
    for (int j = 0; j < kSmallMaxN; ++j) a[j] = (j <= lane && lane < n) ? s[lane * kSmallLd + j] : 0.f;

    float floor = 0.f;
#pragma unroll
    for (int j = 0; j < kSmallMaxN; ++j)
        if (j == lane) floor = a[j];                     // this lane's diagonal entry (0 beyond n)
    floor = popkit::warp_max(floor) * 1.1920929e-7f;     // eps * max_i a_ii
    if (!(floor > 0.f)) floor = 1.17549435e-38f;         // an all-zero diagonal: the smallest normal

#pragma unroll
    for (int k = 0; k < kSmallMaxN; ++k) {
        if (k >= n) break;
        const popkit::Pivot pivot = popkit::cholesky_pivot(__shfl_sync(0xffffffffu, a[k], k), floor);
        if (lane == k) a[k] = pivot.lkk;
        else if (lane > k) a[k] *= pivot.inv;
#pragma unroll
        for (int j = k + 1; j < kSmallMaxN; ++j) {
            if (j >= n) break;
            const float ljk = __shfl_sync(0xffffffffu, a[k], j);
            if (lane >= j) a[j] -= a[k] * ljk;
        }
    }

    __syncwarp();                                        // every lane is done reading its row of s
    if (lane < n) {
#pragma unroll
        for (int j = 0; j < kSmallMaxN; ++j)
            if (j < n) s[lane * kSmallLd + j] = (j <= lane) ? a[j] : 0.f;
    }
    __syncwarp();
    for (int idx = lane; idx < nn; idx += 32) {
        const int r = idx / n, c = idx - r * n;
        L[base + idx] = s[r * kSmallLd + c];
    }
}

}  // namespace

// L (batch x n x n) from A.
POPKIT_EXPORT int cholesky_small(const float* A, float* L, int batch, int n, int warps) {
    if (batch < 1 || n < 1 || n > kSmallMaxN || warps < 1 || warps > kSmallMaxWarps)
        return (int)cudaErrorInvalidValue;
    const int smem = warps * kSmallMaxN * kSmallLd * (int)sizeof(float);
    static int granted = 0;
    const cudaError_t err = popkit::allow_dynamic_smem(cholesky_small_kernel, smem, granted);
    if (err != cudaSuccess) return (int)err;
    cholesky_small_kernel<<<(batch + warps - 1) / warps, warps * 32, smem>>>(A, L, batch, n);
    return (int)cudaGetLastError();
}
