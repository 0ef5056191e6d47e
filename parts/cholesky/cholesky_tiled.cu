// cholesky, n <= 128: one CTA per matrix (or per diagonal block), the matrix in registers.
//
// Computes L, lower triangular with A = L L^T, by right-looking Cholesky (spotf2 order: for
// k = 0..n-1, l_kk = sqrt(a_kk), l_rk = a_rk / l_kk, a_rj -= l_rk l_jk for k < j <= r), and
// optionally X = inv(L). Pivot floor: a pivot d <= f, f = eps * max_i a_ii of the matrix (the
// caller passes max_i a_ii for a diagonal block of a larger matrix), becomes f. An SPD matrix
// meets such a pivot only through roundoff (a numerically singular matrix); flooring perturbs A
// by at most ~2 f, far inside the 20 n eps ||A||_1 gate, and keeps L finite without a host-side
// check (a NaN pivot stays NaN). A truly indefinite input still gives a finite L that the
// reconstruction gate rejects.
// The block sits at src with leading dimension ld and a batch stride of `stride` floats (whole
// matrices: ld = n, stride = n * n; a diagonal block of an N x N matrix: ld = N, stride = N * N).
//
// Layout: a TDIM x TDIM grid of threads; thread (ty, tx) holds the TS x TS elements
//   a[i][j] = A[ty + TDIM i][tx + TDIM j]      (cyclic, so every thread keeps working to the end)
// of the padded NP x NP matrix (NP = TDIM * TS >= n; the padding is the identity, which factors
// to itself and never touches the real entries). Step k = kb TDIM + kt:
//   1. thread (kt, kt) owns a_kk: floors it, writes l_kk and shares 1 / l_kk = rsqrt(a_kk)
//      (popkit::cholesky_pivot);
//   2. the threads of column k (tx == kt) scale their entries below the diagonal and publish them
//      in a shared vector v (v[r] = l_rk);
//   3. every thread updates its entries with c > k and r >= c: a[i][j] -= v[r_i] v[c_j].
// With the kb loop unrolled, "c_j > k" and "r_i >= c_j" are compile-time facts except on one tile
// column and one tile diagonal, so step 3 is TS^2 predicated FMAs from registers plus 2 TS
// shared-memory reads. Two barriers per step.
// Inverse (INV, for the blocked route's diagonal blocks): X = inv(L) by column elimination of
// L X = I in the same loop and the same layout (x[i][j] = X[ty + TDIM i][tx + TDIM j], X = I at
// the start): at step k, row k of X is final; its owners (ty == kt) scale it by 1 / l_kk and
// publish it in a second shared vector w, and every thread updates x[i][j] -= v[r_i] w[c_j] for
// r > k >= c. The two updates cover complementary parts of the lower triangle (c > k and c <= k),
// so the inverse costs about as much as the factorization and adds no barrier.
//
// Launch: grid = batch, TDIM^2 threads; (TDIM, TS) in {(8, 4), (8, 8), (16, 4), (16, 8)}.
// Shared memory: 2 NP floats (v, w), static.
// Why it is fast: the arithmetic runs from registers (shared memory carries one or two vectors per
// step, not the matrix); global memory is read and written once, 16-float row segments per
// half-warp; one CTA per matrix keeps hundreds of matrices in flight on 132 SMs. The inverse's
// earlier version (each thread forward-substituting one column from shared memory) was a serial
// chain of n^2 / 2 dependent FMAs: ~85 of the ~110 us of a 128 x 128 diagonal block. A variant
// with one barrier per step (a column's threads as lanes of one warp, sharing the pivot by
// shuffle) was slower (H200, c17ca65: 1x4096's diagonal blocks 1.84 ms against 1.61): its
// column-major thread order made every global access touch 16 rows.
#include "device_utils.cuh"

namespace {

// Write a thread's TS x TS cyclic tile (entry (ty + TDIM i, tx + TDIM j)) of an n x n lower-triangular
// result, zeros above the diagonal.
template <int TDIM, int TS>
__device__ __forceinline__ void store_lower_tile(const float (&t)[TS][TS], float* dst, int ld, int n, int ty,
                                                 int tx) {
#pragma unroll
    for (int i = 0; i < TS; ++i) {
        const int r = ty + TDIM * i;
#pragma unroll
        for (int j = 0; j < TS; ++j) {
            const int c = tx + TDIM * j;
            if (r < n && c < n) dst[(size_t)r * ld + c] = (c <= r) ? t[i][j] : 0.f;
        }
    }
}

template <int TDIM, int TS, bool INV>
__global__ void __launch_bounds__(TDIM * TDIM)
cholesky_tiled_kernel(const float* src, float* dst, float* __restrict__ xinv, const float* __restrict__ diag_max,
                      int n, int ld, int stride) {
    constexpr int NP = TDIM * TS;
    constexpr int XS = INV ? TS : 1;                     // the inverse's tile (unused without INV)
    __shared__ float v[NP];                              // column k of L
    __shared__ float w[INV ? NP : 1];                    // row k of X
    __shared__ float s_max[TDIM];
    __shared__ float s_inv;
    const int tx = threadIdx.x % TDIM, ty = threadIdx.x / TDIM;
    const float* A = src + (size_t)blockIdx.x * stride;
    float* out = dst + (size_t)blockIdx.x * stride;

    float a[TS][TS], x[XS][XS];
#pragma unroll
    for (int i = 0; i < TS; ++i) {
        const int r = ty + TDIM * i;
#pragma unroll
        for (int j = 0; j < TS; ++j) {
            const int c = tx + TDIM * j;
            a[i][j] = (r < n && c <= r) ? A[(size_t)r * ld + c] : (r == c ? 1.f : 0.f);
            if constexpr (INV) x[i][j] = (r == c) ? 1.f : 0.f;
        }
    }

    float top;                                           // max_i a_ii: given, or of this block
    if (diag_max) {
        top = diag_max[blockIdx.x];
    } else {
        if (ty == tx) {
            float m = 0.f;
#pragma unroll
            for (int i = 0; i < TS; ++i)
                if (ty + TDIM * i < n) m = fmaxf(m, a[i][i]);
            s_max[ty] = m;
        }
        __syncthreads();
        top = 0.f;
        for (int q = 0; q < TDIM; ++q) top = fmaxf(top, s_max[q]);
    }
    float floor = top * 1.1920929e-7f;                   // float32 eps
    if (!(floor > 0.f)) floor = 1.17549435e-38f;         // an all-zero diagonal: the smallest normal

#pragma unroll
    for (int kb = 0; kb < TS; ++kb) {
        if (kb * TDIM >= n) break;
        for (int kt = 0; kt < TDIM; ++kt) {
            const int k = kb * TDIM + kt;
            if (k >= n) break;
            if (ty == kt && tx == kt) {                  // 1. the pivot
                const popkit::Pivot pivot = popkit::cholesky_pivot(a[kb][kb], floor);
                a[kb][kb] = pivot.lkk;
                s_inv = pivot.inv;
            }
            __syncthreads();
            const float inv = s_inv;
            if (tx == kt) {                              // 2. column k of L below the diagonal
#pragma unroll
                for (int i = 0; i < TS; ++i) {
                    const int r = ty + TDIM * i;
                    if (r > k) {
                        a[i][kb] *= inv;
                        v[r] = a[i][kb];
                    }
                }
            }
            if constexpr (INV) {                         //    and row k of X, columns c <= k
                if (ty == kt) {
#pragma unroll
                    for (int j = 0; j <= kb; ++j) {
                        if (j == kb && tx > kt) continue;
                        x[kb][j] *= inv;
                        w[tx + TDIM * j] = x[kb][j];
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
            if constexpr (INV) {                         //    and X's rows r > k, columns c <= k
#pragma unroll
                for (int j = 0; j <= kb; ++j) {
                    if (j == kb && tx > kt) continue;
                    const float wc = w[tx + TDIM * j];
#pragma unroll
                    for (int i = kb; i < TS; ++i) {
                        if (i == kb && ty <= kt) continue;
                        x[i][j] = fmaf(-lr[i], wc, x[i][j]);
                    }
                }
            }
        }
    }

    store_lower_tile<TDIM, TS>(a, out, ld, n, ty, tx);
    if constexpr (INV) store_lower_tile<TDIM, TS>(x, xinv + (size_t)blockIdx.x * n * n, n, n, ty, tx);
}

template <int TDIM, int TS>
int launch(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n, int ld, int stride) {
    if (xinv)
        cholesky_tiled_kernel<TDIM, TS, true><<<batch, TDIM * TDIM>>>(src, dst, xinv, diag_max, n, ld, stride);
    else
        cholesky_tiled_kernel<TDIM, TS, false><<<batch, TDIM * TDIM>>>(src, dst, xinv, diag_max, n, ld, stride);
    return (int)cudaGetLastError();
}

}  // namespace

// Factor `batch` n x n blocks (src/dst: leading dimension ld, batch stride `stride` floats; src may
// equal dst). xinv: NULL or batch x n x n for inv(L). diag_max: NULL (the pivot floor comes from
// this block's own diagonal) or max_i a_ii of each block's whole matrix. (tdim, ts): the thread
// grid and tile, tdim * ts >= n.
POPKIT_EXPORT int cholesky_tiled(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n,
                                 int ld, int stride, int tdim, int ts) {
    if (batch < 1 || n < 1 || n > tdim * ts || ld < n || stride < n) return (int)cudaErrorInvalidValue;
    if (tdim == 8 && ts == 4) return launch<8, 4>(src, dst, xinv, diag_max, batch, n, ld, stride);
    if (tdim == 8 && ts == 8) return launch<8, 8>(src, dst, xinv, diag_max, batch, n, ld, stride);
    if (tdim == 16 && ts == 4) return launch<16, 4>(src, dst, xinv, diag_max, batch, n, ld, stride);
    if (tdim == 16 && ts == 8) return launch<16, 8>(src, dst, xinv, diag_max, batch, n, ld, stride);
    return (int)cudaErrorInvalidValue;
}
