// cholesky, n <= 128: one CTA per matrix (or per diagonal block), the matrix in registers.
//
// Computes L, lower triangular with A = L L^T, by right-looking Cholesky (spotf2 order: for
// k = 0..n-1, l_kk = sqrt(a_kk), l_rk = a_rk / l_kk, a_rj -= l_rk l_jk for k < j <= r), and
// optionally X = inv(L). Pivot floor: a pivot d <= f, f = eps * max_i a_ii of the matrix (or the
// value the caller passes), becomes f. An SPD matrix meets such a pivot only through roundoff (a
// numerically singular matrix); flooring perturbs A by at most ~2 f, far inside the
// 20 n eps ||A||_1 gate, and keeps L finite without a host-side check (a NaN pivot stays NaN). A
// truly indefinite input still gives a finite L that the reconstruction gate rejects.
// The block sits at src with leading dimension ld and a batch stride of `stride` floats (whole
// matrices: ld = n, stride = n * n; a diagonal block of an N x N matrix: ld = N, stride = N * N).
//
// Layout: a TDIM x TDIM grid of threads; thread (ty, tx) holds the TS x TS elements
//   a[i][j] = A[ty + TDIM i][tx + TDIM j]      (cyclic, so every thread keeps working to the end)
// of the padded NP x NP matrix (NP = TDIM * TS >= n; the padding is the identity, which factors
// to itself and never touches the real entries). Step k = kb TDIM + kt:
//   1. thread (kt, kt) owns a_kk: floors it, writes l_kk = sqrt(a_kk) and shares 1 / l_kk;
//   2. the threads of column k (tx == kt) scale their entries below the diagonal and publish them
//      in a shared vector v (v[r] = l_rk);
//   3. every thread updates its entries with c > k and r >= c: a[i][j] -= v[r_i] v[c_j].
// With the kb loop unrolled, "c_j > k" and "r_i >= c_j" are compile-time facts except on one tile
// column and one tile diagonal, so step 3 is TS^2 predicated FMAs from registers plus 2 TS
// shared-memory reads. Two barriers per step.
// Inverse (xinv != NULL): L is staged in shared memory and each thread solves L x = e_c for its
// columns by forward substitution (x_c = 1 / l_cc, x_i = -(sum_{c<=k<i} l_ik x_k) / l_ii).
//
// Launch: grid = batch, TDIM^2 threads; (TDIM, TS) in {(8, 4), (8, 8), (16, 4), (16, 8)}.
// Shared memory: NP floats of v (static), plus 2 NP (NP + 1) floats with the inverse.
// Why it is fast: the arithmetic runs from registers (shared memory carries one vector per step,
// not the matrix); global memory is read and written once, 16-float row segments per half-warp;
// one CTA per matrix keeps hundreds of matrices in flight on 132 SMs.
#include "device_utils.cuh"

namespace {

template <int TDIM, int TS>
__global__ void __launch_bounds__(TDIM * TDIM)
cholesky_tiled_kernel(const float* src, float* dst, float* __restrict__ xinv, const float* __restrict__ floors,
                      int n, int ld, int stride) {
    constexpr int NP = TDIM * TS;
    extern __shared__ float smem[];                      // the inverse's work space (dynamic)
    __shared__ float v[NP];
    __shared__ float s_max[TDIM];
    __shared__ float s_inv;
    const int tx = threadIdx.x % TDIM, ty = threadIdx.x / TDIM;
    const float* A = src + (size_t)blockIdx.x * stride;
    float* out = dst + (size_t)blockIdx.x * stride;

    float a[TS][TS];
#pragma unroll
    for (int i = 0; i < TS; ++i) {
        const int r = ty + TDIM * i;
#pragma unroll
        for (int j = 0; j < TS; ++j) {
            const int c = tx + TDIM * j;
            a[i][j] = (r < n && c <= r) ? A[(size_t)r * ld + c] : (r == c ? 1.f : 0.f);
        }
    }

    float floor;
    if (floors) {
        floor = floors[blockIdx.x];
    } else {
        if (ty == tx) {
            float top = 0.f;
#pragma unroll
            for (int i = 0; i < TS; ++i)
                if (ty + TDIM * i < n) top = fmaxf(top, a[i][i]);
            s_max[ty] = top;
        }
        __syncthreads();
        floor = 0.f;
        for (int q = 0; q < TDIM; ++q) floor = fmaxf(floor, s_max[q]);
        floor *= 1.1920929e-7f;                          // float32 eps
    }
    if (!(floor > 0.f)) floor = 1.17549435e-38f;         // an all-zero diagonal: the smallest normal

#pragma unroll
    for (int kb = 0; kb < TS; ++kb) {
        if (kb * TDIM >= n) break;
        for (int kt = 0; kt < TDIM; ++kt) {
            const int k = kb * TDIM + kt;
            if (k >= n) break;
            if (ty == kt && tx == kt) {                  // 1. the pivot
                float d = a[kb][kb];
                if (d <= floor) d = floor;               // NaN compares false and stays NaN
                const float lkk = sqrtf(d);
                a[kb][kb] = lkk;
                s_inv = 1.f / lkk;
            }
            __syncthreads();
            if (tx == kt) {                              // 2. column k below the diagonal
                const float inv = s_inv;
#pragma unroll
                for (int i = 0; i < TS; ++i) {
                    const int r = ty + TDIM * i;
                    if (r > k) {
                        a[i][kb] *= inv;
                        v[r] = a[i][kb];
                    }
                }
            }
            __syncthreads();
            float lr[TS], lc[TS];                        // 3. the trailing update from registers
#pragma unroll
            for (int i = 0; i < TS; ++i) lr[i] = v[ty + TDIM * i];
#pragma unroll
            for (int j = 0; j < TS; ++j) lc[j] = v[tx + TDIM * j];
            const bool own_column_k = tx > kt;           // tile column kb: c = tx + TDIM kb > k
#pragma unroll
            for (int i = 0; i < TS; ++i) {
#pragma unroll
                for (int j = 0; j < TS; ++j) {
                    if (j < kb || i < j) continue;       // c < k, or above the diagonal: static
                    if (j == kb && !own_column_k) continue;
                    if (i == j && ty < tx) continue;     // the diagonal tile: r >= c needs ty >= tx
                    a[i][j] = fmaf(-lr[i], lc[j], a[i][j]);
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < TS; ++i) {
        const int r = ty + TDIM * i;
#pragma unroll
        for (int j = 0; j < TS; ++j) {
            const int c = tx + TDIM * j;
            if (r < n && c < n) out[(size_t)r * ld + c] = (c <= r) ? a[i][j] : 0.f;
        }
    }

    if (xinv) {
        constexpr int lds = NP + 1;
        float* S = smem;                                 // L, staged
        float* X = smem + NP * lds;                      // X[i][c]
#pragma unroll
        for (int i = 0; i < TS; ++i)
#pragma unroll
            for (int j = 0; j < TS; ++j) S[(ty + TDIM * i) * lds + tx + TDIM * j] = a[i][j];
        __syncthreads();
        for (int c = threadIdx.x; c < n; c += TDIM * TDIM) {
            X[c * lds + c] = 1.f / S[c * lds + c];
            for (int i = c + 1; i < n; ++i) {
                float s = 0.f;
                for (int q = c; q < i; ++q) s = fmaf(S[i * lds + q], X[q * lds + c], s);
                X[i * lds + c] = -s / S[i * lds + i];
            }
        }
        __syncthreads();
        float* Xout = xinv + (size_t)blockIdx.x * n * n;
        for (int idx = threadIdx.x; idx < n * n; idx += TDIM * TDIM) {
            const int r = idx / n, c = idx - r * n;
            Xout[idx] = (c <= r) ? X[r * lds + c] : 0.f;
        }
    }
}

template <int TDIM, int TS>
int launch(const float* src, float* dst, float* xinv, const float* floors, int batch, int n, int ld, int stride) {
    constexpr int NP = TDIM * TS;
    const int smem = xinv ? 2 * NP * (NP + 1) * (int)sizeof(float) : 0;
    static int smem_set = 0;                             // over 48 KiB of dynamic shared memory needs the opt-in
    if (smem > smem_set) {
        const cudaError_t err = cudaFuncSetAttribute(cholesky_tiled_kernel<TDIM, TS>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return (int)err;
        smem_set = smem;
    }
    cholesky_tiled_kernel<TDIM, TS><<<batch, TDIM * TDIM, smem>>>(src, dst, xinv, floors, n, ld, stride);
    return (int)cudaGetLastError();
}

}  // namespace

// Factor `batch` n x n blocks (src/dst: leading dimension ld, batch stride `stride` floats; src may
// equal dst). xinv: NULL or batch x n x n for inv(L). floors: NULL (eps * max diagonal per block)
// or one pivot floor per block. (tdim, ts): the thread grid and tile, tdim * ts >= n.
POPKIT_EXPORT int cholesky_tiled(const float* src, float* dst, float* xinv, const float* floors, int batch, int n,
                                 int ld, int stride, int tdim, int ts) {
    if (batch < 1 || n < 1 || n > tdim * ts || ld < n || stride < n) return (int)cudaErrorInvalidValue;
    if (tdim == 8 && ts == 4) return launch<8, 4>(src, dst, xinv, floors, batch, n, ld, stride);
    if (tdim == 8 && ts == 8) return launch<8, 8>(src, dst, xinv, floors, batch, n, ld, stride);
    if (tdim == 16 && ts == 4) return launch<16, 4>(src, dst, xinv, floors, batch, n, ld, stride);
    if (tdim == 16 && ts == 8) return launch<16, 8>(src, dst, xinv, floors, batch, n, ld, stride);
    return (int)cudaErrorInvalidValue;
}
