// cholesky, n <= 128: factor a whole matrix, or a diagonal block inside a larger one, on chip;
// optionally also the inverse of the factor.
//
// The block sits at src with leading dimension ld and a batch stride of `stride` floats, so the
// same kernel factors whole matrices (ld = n, stride = n * n) and the diagonal block A11 of a
// blocked factorization (src = dst = &A[k0][k0], ld = stride = N... per matrix N * N). It reads
// the lower triangle only and writes
//   dst : L11, lower triangular, A11 = L11 L11^T, strict upper part 0;
//   xinv: (optional, batch x n x n) X = inv(L11), lower triangular, so the blocked route's panel
//         solve L21 = A21 L11^-T is a GEMM.
//
// Math: right-looking Cholesky (spotf2 order): for k = 0..n-1
//   d = a_kk (floored, below), l_kk = sqrt(d), l_rk = a_rk / l_kk (r > k),
//   a_rj -= l_rk l_jk (k < j <= r).
// Pivot floor: a pivot d <= f, with f = eps * max_i a_ii of the matrix (or the value the caller
// passes), becomes f. An SPD matrix meets such a pivot only through roundoff (a numerically
// singular matrix); flooring it perturbs A by at most ~2 f, far inside the 20 n eps ||A||_1 gate,
// and keeps L finite without a host-side check (a NaN pivot stays NaN). A truly indefinite input
// still gives a finite L that the reconstruction gate rejects.
// Inverse: each thread solves L x = e_c for its own columns c by forward substitution
//   x_c = 1 / l_cc,  x_i = -(sum_{k=c}^{i-1} l_ik x_k) / l_ii  (i > c),
// independent per column, so it needs no barrier.
//
// Launch: P warps per matrix (template, 1..8), `per_cta` matrices per CTA (P = 1 only);
// thread t of a matrix owns rows t, t + 32P, ... A step is two barriers (__syncwarp when P = 1):
// one after column k is scaled, one after the trailing update. Shared memory per matrix:
// n (n + 1) floats (twice that with the inverse); the odd row pitch n + 1 spreads a column's
// entries over distinct banks, and the column entry every thread reads (S[j][k]) is a broadcast.
// Why it is fast: the block is read and written once; a step is a few shared-memory operations
// per owned element with no integer division, issued kChunk columns at a time (the loads of a
// chunk go out before its stores, so they overlap instead of waiting on possible aliasing); with P = 1 many matrices share an SM and only
// warp-level barriers are needed; P > 1 shortens the chain of one large block (the diagonal
// blocks of a single big matrix).
#include "device_utils.cuh"

namespace {

constexpr int kBlockMaxN = 128;
constexpr int kBlockMaxRows = 4;                 // rows per thread at P = 1, n = 128
constexpr int kChunk = 8;                        // trailing-update columns per batch of loads

template <int P>
__device__ __forceinline__ void group_sync() {
    if constexpr (P == 1) __syncwarp(); else __syncthreads();
}

template <int P>
__global__ void __launch_bounds__(256)
cholesky_block_kernel(const float* src, float* dst, float* __restrict__ xinv, const float* __restrict__ floors,
                      int batch, int n, int ld, int stride) {
    extern __shared__ float smem[];
    constexpr int T = 32 * P;
    const int lds = n + 1;
    const int group = threadIdx.x / T, t = threadIdx.x % T;
    const int matrix = blockIdx.x * (blockDim.x / T) + group;
    if (matrix >= batch) return;                   // a whole group leaves: its barriers are its own
    const int per_matrix = n * lds * (xinv ? 2 : 1);
    float* S = smem + group * per_matrix;
    const float* A = src + (size_t)matrix * stride;
    float* out = dst + (size_t)matrix * stride;

    for (int idx = t; idx < n * n; idx += T) {       // consecutive threads, consecutive columns: coalesced
        const int r = idx / n, c = idx - r * n;
        if (c <= r) S[r * lds + c] = A[(size_t)r * ld + c];
    }
    group_sync<P>();

    float floor = 0.f;
    if (floors) {
        floor = floors[matrix];
    } else {
        for (int i = 0; i < n; ++i) floor = fmaxf(floor, S[i * lds + i]);
        floor *= 1.1920929e-7f;                      // float32 eps
    }
    if (!(floor > 0.f)) floor = 1.17549435e-38f;     // an all-zero diagonal: the smallest normal

    for (int k = 0; k < n; ++k) {
        float d = S[k * lds + k];
        if (d <= floor) d = floor;                   // NaN compares false and stays NaN
        const float lkk = sqrtf(d), inv = 1.f / lkk;
        float lrk[kBlockMaxRows];
#pragma unroll
        for (int m = 0; m < kBlockMaxRows; ++m) {
            const int r = t + m * T;
            lrk[m] = 0.f;
            if (r > k && r < n) {
                lrk[m] = S[r * lds + k] * inv;
                S[r * lds + k] = lrk[m];
            }
        }
        group_sync<P>();                             // column k is final
        if (t == k % T) S[k * lds + k] = lkk;        // everyone has read the pivot by now
        for (int j0 = k + 1; j0 < n; j0 += kChunk) {  // kChunk columns at a time: loads before stores
            float lj[kChunk];                        // l_jk: the same address for every thread (broadcast)
#pragma unroll
            for (int u = 0; u < kChunk; ++u) lj[u] = (j0 + u < n) ? S[(j0 + u) * lds + k] : 0.f;
#pragma unroll
            for (int m = 0; m < kBlockMaxRows; ++m) {
                const int r = t + m * T;
                if (r < j0 || r >= n) continue;      // rows above the chunk: nothing to update
                float v[kChunk];
#pragma unroll
                for (int u = 0; u < kChunk; ++u) v[u] = (j0 + u <= r) ? S[r * lds + j0 + u] : 0.f;
#pragma unroll
                for (int u = 0; u < kChunk; ++u)
                    if (j0 + u <= r) S[r * lds + j0 + u] = fmaf(-lrk[m], lj[u], v[u]);
            }
        }
        group_sync<P>();                             // the trailing update is done
    }

    for (int idx = t; idx < n * n; idx += T) {
        const int r = idx / n, c = idx - r * n;
        out[(size_t)r * ld + c] = (c <= r) ? S[r * lds + c] : 0.f;
    }

    if (xinv) {
        float* X = S + n * lds;                      // X[i][c], column c solved by thread c % T
        for (int c = t; c < n; c += T) {
            X[c * lds + c] = 1.f / S[c * lds + c];
            for (int i = c + 1; i < n; ++i) {
                float s = 0.f;
                for (int k = c; k < i; ++k) s = fmaf(S[i * lds + k], X[k * lds + c], s);
                X[i * lds + c] = -s / S[i * lds + i];
            }
        }
        group_sync<P>();
        float* Xout = xinv + (size_t)matrix * n * n;
        for (int idx = t; idx < n * n; idx += T) {
            const int r = idx / n, c = idx - r * n;
            Xout[idx] = (c <= r) ? X[r * lds + c] : 0.f;
        }
    }
}

template <int P>
int launch(const float* src, float* dst, float* xinv, const float* floors, int batch, int n, int ld, int stride,
           int per_cta) {
    const int smem = per_cta * n * (n + 1) * (xinv ? 2 : 1) * (int)sizeof(float);
    static int smem_set = 0;                         // over 48 KiB of dynamic shared memory needs the opt-in
    if (smem > smem_set) {
        const cudaError_t err = cudaFuncSetAttribute(cholesky_block_kernel<P>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return (int)err;
        smem_set = smem;
    }
    cholesky_block_kernel<P><<<(batch + per_cta - 1) / per_cta, 32 * P * per_cta, smem>>>(
        src, dst, xinv, floors, batch, n, ld, stride);
    return (int)cudaGetLastError();
}

}  // namespace

// Shared memory one CTA needs, in bytes (the route checks it against the device limit).
POPKIT_EXPORT int cholesky_block_smem_bytes(int n, int per_cta, int with_inverse) {
    return per_cta * n * (n + 1) * (with_inverse ? 2 : 1) * (int)sizeof(float);
}

// Factor `batch` n x n blocks (src/dst: leading dimension ld, batch stride `stride` floats; src may
// equal dst). xinv: NULL or batch x n x n for inv(L). floors: NULL (eps * max diagonal per block)
// or one pivot floor per block. P = warps per block (1, 2, 4, 8); per_cta > 1 only with P = 1.
POPKIT_EXPORT int cholesky_block(const float* src, float* dst, float* xinv, const float* floors, int batch, int n,
                                 int ld, int stride, int P, int per_cta) {
    if (batch < 1 || n < 1 || n > kBlockMaxN || ld < n || stride < n || per_cta < 1 ||
        (P != 1 && per_cta != 1) || 32 * P * per_cta > 256 || n > kBlockMaxRows * 32 * P)
        return (int)cudaErrorInvalidValue;
    switch (P) {
        case 1: return launch<1>(src, dst, xinv, floors, batch, n, ld, stride, per_cta);
        case 2: return launch<2>(src, dst, xinv, floors, batch, n, ld, stride, per_cta);
        case 4: return launch<4>(src, dst, xinv, floors, batch, n, ld, stride, per_cta);
        case 8: return launch<8>(src, dst, xinv, floors, batch, n, ld, stride, per_cta);
        default: return (int)cudaErrorInvalidValue;
    }
}
