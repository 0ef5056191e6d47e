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
// grid = ceil(batch / warps). Lane i owns row i in 32 registers. Column k of the partly updated
// matrix sits in a per-warp shared vector (double-buffered, published by every lane at the end
// of step k - 1): each lane derives the pivot from it and reads the l_jk it needs as 16-byte
// broadcast reads, 4 columns per instruction. Each warp stages its matrix through shared memory
// (32 x 33 floats, padded so that the lane-per-row reads hit distinct banks) so that global
// memory is read and written once, coalesced, as the contiguous n*n floats of the matrix.
// Why it is fast: at n <= 32 the work (n^3/6 FMAs) is tiny and the case is memory bound
// (4096 x 32 moves 32 MiB: ~7 us at 4.8 TB/s); no __syncthreads, and many independent warps per
// SM hide the latency of each step. The first version broadcast every l_jk by __shfl_sync: ~528
// shuffles per matrix on the SM's one shuffle/shared-memory pipe, against ~200 shared-memory
// instructions now.
#include "device_utils.cuh"
#include "pivot.cuh"

namespace {

constexpr int kSmallMaxN = 32;
constexpr int kSmallMaxWarps = 16;
constexpr int kSmallLd = kSmallMaxN + 1;

__global__ void __launch_bounds__(kSmallMaxWarps * 32)
cholesky_small_kernel(const float* __restrict__ A, float* __restrict__ L, int batch, int n) {
    extern __shared__ float4 s_all4[];                   // per warp: 2 x 32 floats of columns, then
    float* s_all = reinterpret_cast<float*>(s_all4);     // (after every warp's) a 32 x 33 tile
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int matrix = blockIdx.x * warps + warp;
    if (matrix >= batch) return;                         // whole warps only: no block barrier below
    float* s = s_all + warps * 2 * kSmallMaxN + warp * kSmallMaxN * kSmallLd;
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

    float* col = s_all + warp * 2 * kSmallMaxN;          // column k of A, double-buffered
    col[lane] = a[0];
    __syncwarp();
#pragma unroll
    for (int k = 0; k < kSmallMaxN; ++k) {
        if (k >= n) break;
        const float* u = col + (k & 1) * kSmallMaxN;     // column k, updated through step k - 1
        const popkit::Pivot pivot = popkit::cholesky_pivot(u[k], floor);
        if (lane == k) a[k] = pivot.lkk;
        else if (lane > k) a[k] *= pivot.inv;
        constexpr int kVec = 4;                          // u[j] for j > k as 16-byte broadcast reads
        float uj[kSmallMaxN];
#pragma unroll
        for (int g = (k + 1) / kVec * kVec; g < kSmallMaxN; g += kVec) {
            const float4 q = *reinterpret_cast<const float4*>(u + g);
            uj[g] = q.x; uj[g + 1] = q.y; uj[g + 2] = q.z; uj[g + 3] = q.w;
        }
#pragma unroll
        for (int j = k + 1; j < kSmallMaxN; ++j) {
            if (j >= n) break;
            if (lane >= j) a[j] -= a[k] * (uj[j] * pivot.inv);    // l_jk = u_j / l_kk, as lane j has it
        }
        if (k + 1 < kSmallMaxN) col[((k + 1) & 1) * kSmallMaxN + lane] = a[k + 1];
        __syncwarp();
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
    const int smem = warps * kSmallMaxN * (kSmallLd + 2) * (int)sizeof(float);
    static int granted = 0;
    const cudaError_t err = popkit::allow_dynamic_smem(cholesky_small_kernel, smem, granted);
    if (err != cudaSuccess) return (int)err;
    cholesky_small_kernel<<<(batch + warps - 1) / warps, warps * 32, smem>>>(A, L, batch, n);
    return (int)cudaGetLastError();
}
