// cholesky_tiled.cu's factorization of one block (n <= TDIM * TS) by the CTA's TDIM^2 threads, as a
// device function, so that other kernels can run it as one of their roles (cholesky_lookahead.cu). The
// algorithm, layout and costs are in cholesky_tiled.cu's outline.
#pragma once
#include "device_utils.cuh"

namespace tiled {

// One diagonal block of each matrix in a batch: at src (leading dimension ld, batch stride `stride`
// floats) into dst (may equal src), X = inv(L) into xinv (batch x n x n) unless it is NULL; diag_max:
// max_i a_ii of each whole matrix (the pivot floor).
struct DiagBlock {
    const float* src; float* dst; float* xinv; const float* diag_max;
    int n, ld; long long stride;
};

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

// Factor the n x n block at A (leading dimension ld) into out (A's lower triangle is read; out may equal
// A) and, with INV, X = inv(L) into xinv (n x n, leading dimension n). diag_max: this matrix's max_i a_ii
// (the pivot floor), or NULL for the block's own.
template <int TDIM, int TS, bool INV>
__device__ __forceinline__ void factor_block(const float* A, float* out, float* __restrict__ xinv,
                                             const float* __restrict__ diag_max, int n, int ld) {
    constexpr int NP = TDIM * TS;
    constexpr int XS = INV ? TS : 1;                     // the inverse's tile (unused without INV)
    __shared__ float v[NP];                              // column k of L
    __shared__ float w[INV ? NP : 1];                    // row k of X
    __shared__ float s_max[TDIM];
    __shared__ float s_inv;
    const int tx = threadIdx.x % TDIM, ty = threadIdx.x / TDIM;

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
        top = *diag_max;
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
    if constexpr (INV) store_lower_tile<TDIM, TS>(x, xinv, n, n, ty, tx);
}

}  // namespace tiled
