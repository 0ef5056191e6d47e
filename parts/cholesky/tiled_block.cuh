// cholesky_tiled.cu's factorization of one block (n <= TDIM * TS) by the CTA's TDIM^2 threads, as a
// device function, so that other kernels can run it as one of their roles (cholesky_lookahead.cu): the
// shared load, pivot floor and store, and its two step loops (column steps: one column per step;
// grouped steps: kStep columns per step). The algorithm, layout and costs are in cholesky_tiled.cu's
// outline.
#pragma once
#include "device_utils.cuh"
#include "pivot.cuh"

namespace tiled {

// One diagonal block of each matrix in a batch: at src (leading dimension ld, batch stride `stride`
// floats) into dst (may equal src), X = inv(L) into xinv (batch x n x n) unless it is NULL; diag_max:
// max_i a_ii of each whole matrix (the pivot floor); halves: factor a 128-block by halves_steps.
struct DiagBlock {
    const float* src; float* dst; float* xinv; const float* diag_max;
    int n, ld; long long stride; int halves;
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

// Columns per grouped step (one barrier per step): every thread factors the kStep x kStep diagonal block
// itself, so the chain of dependent steps is n / kStep long instead of n.
constexpr int kStep = 4;

// Select a[i][j] at a runtime (i, j) from compile-time indices (the arrays stay in registers).
template <int R, int C>
__device__ __forceinline__ float pick(const float (&a)[R][C], int i, int j) {
    float value = 0.f;
#pragma unroll
    for (int ii = 0; ii < R; ++ii)
#pragma unroll
        for (int jj = 0; jj < C; ++jj)
            if (ii == i && jj == j) value = a[ii][jj];
    return value;
}

// Forward substitution of one row with the factored diagonal block d (dinv[q] = 1 / d[q][q]):
// out[q] = (p[q] - sum_{s<q} out[s] d[q][s]) dinv[q], in the order of factor_step's own updates, so
// a row inside the block comes out bit-identical to d's entries.
__device__ __forceinline__ void solve_row(const float4& p, const float (&d)[kStep][kStep], const float (&dinv)[kStep],
                                          float (&out)[kStep]) {
    const float in[kStep] = {p.x, p.y, p.z, p.w};
#pragma unroll
    for (int q = 0; q < kStep; ++q) {
        float acc = in[q];
#pragma unroll
        for (int s = 0; s < q; ++s) acc = fmaf(-out[s], d[q][s], acc);
        out[q] = acc * dinv[q];
    }
}

// Publish the next step's inputs (before the barrier that opens it): columns kn .. kn + kStep - 1 of the
// updated matrix (rows r >= kn, unscaled) into v by their owners (tx = kt + q, tile column jb), and with
// INV rows kn .. of X (columns c < kn + kStep, unscaled) into w by their owners (ty = kt + q, tile row
// jb). jb is a compile-time constant at every call (the caller's kb loop is unrolled).
template <int TDIM, int TS, bool INV>
__device__ __forceinline__ void publish_step(const float (&a)[TS][TS], const float (&x)[INV ? TS : 1][INV ? TS : 1],
                                             float4* v, float4* w, int jb, int kt, int kn, int ty, int tx) {
    const int qc = tx - kt, qr = ty - kt;
    if (qc >= 0 && qc < kStep) {
#pragma unroll
        for (int j = 0; j < TS; ++j) {
            if (j != jb) continue;
#pragma unroll
            for (int i = j; i < TS; ++i)
                if (ty + TDIM * i >= kn) reinterpret_cast<float*>(&v[ty + TDIM * i])[qc] = a[i][j];
        }
    }
    if constexpr (INV) {
        if (qr >= 0 && qr < kStep) {
#pragma unroll
            for (int i = 0; i < TS; ++i) {
                if (i != jb) continue;
#pragma unroll
                for (int j = 0; j <= i; ++j)
                    if (tx + TDIM * j < kn + kStep) reinterpret_cast<float*>(&w[tx + TDIM * j])[qr] = x[i][j];
            }
        }
    }
}

// The pivot floor of a block whose registers a hold it (tile layout above): eps * max_i a_ii, with
// max_i a_ii given (diag_max, the whole matrix's) or taken over this block's own diagonal.
template <int TDIM, int TS>
__device__ __forceinline__ float pivot_floor(const float (&a)[TS][TS], const float* __restrict__ diag_max, int n,
                                             int ty, int tx) {
    __shared__ float s_max[TDIM];
    float top;
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
    const float floor = top * 1.1920929e-7f;             // float32 eps
    return floor > 0.f ? floor : 1.17549435e-38f;        // an all-zero diagonal: the smallest normal
}

// Factor a (and with INV form x = inv(L), x = I on entry) in registers, one column per step (cholesky_tiled.cu's
// outline, "column steps").
template <int TDIM, int TS, bool INV>
__device__ __forceinline__ void column_steps(float (&a)[TS][TS], float (&x)[INV ? TS : 1][INV ? TS : 1],
                                             float floor, int n, int ty, int tx) {
    constexpr int NP = TDIM * TS;
    __shared__ float v[NP];                              // column k of L
    __shared__ float w[INV ? NP : 1];                    // row k of X
    __shared__ float s_inv;
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
}

// Factor a (and with INV form x = inv(L), x = I on entry) in registers, kStep columns per step
// (cholesky_tiled.cu's outline, "grouped steps").
template <int TDIM, int TS, bool INV>
__device__ __forceinline__ void grouped_steps(float (&a)[TS][TS], float (&x)[INV ? TS : 1][INV ? TS : 1],
                                              float floor, int n, int ty, int tx) {
    static_assert(TDIM % kStep == 0, "a step's columns lie in one tile column");
    constexpr int NP = TDIM * TS;
    __shared__ float4 v[2][NP];                          // the step's kStep columns at row r (two halves)
    __shared__ float4 w[2][INV ? NP : 1];                // the step's kStep rows of X at column c
    publish_step<TDIM, TS, INV>(a, x, v[0], w[0], 0, 0, 0, ty, tx);
#pragma unroll
    for (int kb = 0; kb < TS; ++kb) {
        if (kb * TDIM >= n) break;
        for (int kt = 0; kt < TDIM; kt += kStep) {
            const int k = kb * TDIM + kt, half = (k / kStep) & 1;
            if (k >= n) break;
            __syncthreads();                             // this step's columns (and rows of X) are published
            const float4* vk = v[half];
            // 1. the kStep x kStep diagonal block, factored by every thread (the same value everywhere)
            float d[kStep][kStep], dinv[kStep];
#pragma unroll
            for (int p = 0; p < kStep; ++p) {
                const float4 row = vk[k + p];
                const float in[kStep] = {row.x, row.y, row.z, row.w};
#pragma unroll
                for (int q = 0; q < kStep; ++q) d[p][q] = in[q];
            }
#pragma unroll
            for (int q = 0; q < kStep; ++q) {
                const popkit::Pivot pivot = popkit::cholesky_pivot(d[q][q], floor);
                d[q][q] = pivot.lkk;
                dinv[q] = pivot.inv;
#pragma unroll
                for (int p = q + 1; p < kStep; ++p) d[p][q] *= pivot.inv;
#pragma unroll
                for (int p = q + 1; p < kStep; ++p)
#pragma unroll
                    for (int s2 = q + 1; s2 <= p; ++s2) d[p][s2] = fmaf(-d[p][q], d[s2][q], d[p][s2]);
            }
            // 2. L's step columns at this thread's rows r >= k (tile rows below kb hold none)
            float lr[TS][kStep];
#pragma unroll
            for (int i = kb; i < TS; ++i) solve_row(vk[ty + TDIM * i], d, dinv, lr[i]);
            const int qc = tx - kt;                      // this thread owns step column k + qc
            if (qc >= 0 && qc < kStep) {
#pragma unroll
                for (int i = kb; i < TS; ++i) {
                    const int p = ty + TDIM * i - k;     // the row's place relative to the step
                    if (p > qc) a[i][kb] = pick(lr, i, qc);
                    else if (p == qc) a[i][kb] = pick(d, qc, qc);
                }
            }
            // 3. the rank-kStep trailing update, c >= k + kStep and r >= c
#pragma unroll
            for (int j = kb; j < TS; ++j) {
                if (j == kb && tx < kt + kStep) continue;
                float lc[kStep];
                solve_row(vk[tx + TDIM * j], d, dinv, lc);
#pragma unroll
                for (int i = j; i < TS; ++i) {
                    if (i == j && ty < tx) continue;     // the diagonal tile: r >= c needs ty >= tx
#pragma unroll
                    for (int q = 0; q < kStep; ++q) a[i][j] = fmaf(-lr[i][q], lc[q], a[i][j]);
                }
            }
            if constexpr (INV) {                         // 4. X's step rows, then its rows r >= k + kStep, c < k + kStep
                const float4* wk = w[half];
                const int qr = ty - kt;                  // this thread owns X's row k + qr
#pragma unroll
                for (int j = 0; j <= kb; ++j) {
                    if (j == kb && tx >= kt + kStep) continue;
                    float xc[kStep];
                    solve_row(wk[tx + TDIM * j], d, dinv, xc);
                    if (qr >= 0 && qr < kStep) {
                        float own = xc[0];
#pragma unroll
                        for (int q = 1; q < kStep; ++q)
                            if (q == qr) own = xc[q];
                        x[kb][j] = own;
                    }
#pragma unroll
                    for (int i = kb; i < TS; ++i) {
                        if (i == kb && ty < kt + kStep) continue;
#pragma unroll
                        for (int q = 0; q < kStep; ++q) x[i][j] = fmaf(-lr[i][q], xc[q], x[i][j]);
                    }
                }
            }
            // 5. the next step's columns into the other half of v (and rows of X into w)
            if (kt + kStep < TDIM)
                publish_step<TDIM, TS, INV>(a, x, v[half ^ 1], w[half ^ 1], kb, kt + kStep, k + kStep, ty, tx);
            else if (kb + 1 < TS)
                publish_step<TDIM, TS, INV>(a, x, v[half ^ 1], w[half ^ 1], kb + 1, 0, k + kStep, ty, tx);
        }
    }
}

// Halves: a 128-block (16 x 16 threads, 8 x 8 entries each) as two 64-blocks. Thread (ty, tx)'s
// entries of a quarter of the block are a[I0 + i][J0 + j], i, j < 4 (the cyclic layout is the same at
// both sizes), so each half is factored by grouped_steps<16, 4> on its quarter of the registers, with
// its inverse, and the halves are joined by four 64 x 64 x 64 products through shared memory:
//   L21 = A21 X11^T, A22 -= L21 L21^T, (A22 factored), X21 = -X22 (L21 X11).
// The chain stays 32 grouped steps, each with a quarter of the work (model.halves_model is this order).
constexpr int kHalf = 64;                                // rows of a half
constexpr int kHalfLd = kHalf + 4;                       // padded staged rows (below)
constexpr int kHalvesScratch = 2 * kHalf * kHalfLd;      // floats of shared memory halves_steps needs

template <int I0, int J0>
__device__ __forceinline__ void get_quarter(const float (&a)[8][8], float (&q)[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) q[i][j] = a[I0 + i][J0 + j];
}

template <int I0, int J0>
__device__ __forceinline__ void set_quarter(float (&a)[8][8], const float (&q)[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) a[I0 + i][J0 + j] = q[i][j];
}

// A product's operands in shared memory (rows of kHalfLd floats): the row operand as rows[r][k], the column
// operand as cols[k][p] with column c = tx + 16 j at p = 4 tx + j, so a thread's four columns are one float4
// read. The padding puts a row pair's float4 reads, and a staging warp's stores, in distinct banks.
__device__ __forceinline__ void stage_rows(const float (&q)[4][4], float* rows, int ty, int tx) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) rows[(ty + 16 * i) * kHalfLd + tx + 16 * j] = q[i][j];
}

// This thread's quarter q (entries r = ty + 16 i, c = tx + 16 j of M) as the column operand M, or with
// TRANSPOSED M^T.
template <bool TRANSPOSED>
__device__ __forceinline__ void stage_cols(const float (&q)[4][4], float* cols, int ty, int tx) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if constexpr (TRANSPOSED) cols[(tx + 16 * j) * kHalfLd + 4 * ty + i] = q[i][j];   // k = c, column r
            else cols[(ty + 16 * i) * kHalfLd + 4 * tx + j] = q[i][j];                        // k = r, column c
        }
}

// Which terms of a product can be nonzero, by the 16-wide segment s of k (k in [16 s, 16 s + 16)) and the
// thread's quarter entry (i, j) (row r = ty + 16 i, column c = tx + 16 j): the operands are triangular, so
// a segment meets only some of a thread's rows or columns; the skipped terms are exact zeros (or, kLower,
// entries above the diagonal that nobody reads). About 10 of 16 terms remain in each product.
enum Terms {
    kColsFromS,     // cols[k][c] = M[c][k], M lower triangular: k <= c, so j >= s
    kColsUpToS,     // cols[k][c] = M[k][c], M lower triangular: k >= c, so j <= s
    kRowsFromS,     // rows[r][k] = M[r][k], M lower triangular: k <= r, so i >= s
    kLower,         // only the lower triangle of the result is used: i >= j
};

template <int TERMS>
__device__ __forceinline__ constexpr bool live_term(int s, int i, int j) {
    return TERMS == kColsFromS ? j >= s : TERMS == kColsUpToS ? j <= s : TERMS == kRowsFromS ? i >= s : i >= j;
}

// acc[i][j] = sum_k rows[r][k] cols[k][c] over k < 64 for this thread's r = ty + 16 i, c = tx + 16 j, the
// terms TERMS says can be nonzero (acc[i][j] of a dead entry is 0 under kLower).
template <int TERMS>
__device__ __forceinline__ void product_quarter(const float* rows, const float* cols, float (&acc)[4][4], int ty,
                                                int tx) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
#pragma unroll 1                                         // unrolled, cholesky_tiled.cu's kernel spilled
        for (int k4 = 4 * s; k4 < 4 * s + 4; ++k4) {
            float4 rv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (live_term<TERMS>(s, i, 0) || live_term<TERMS>(s, i, 3))
                    rv[i] = *reinterpret_cast<const float4*>(rows + (ty + 16 * i) * kHalfLd + 4 * k4);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const float4 v = *reinterpret_cast<const float4*>(cols + (4 * k4 + kk) * kHalfLd + 4 * tx);
                const float cv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float r = kk == 0 ? rv[i].x : kk == 1 ? rv[i].y : kk == 2 ? rv[i].z : rv[i].w;
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (live_term<TERMS>(s, i, j)) acc[i][j] = fmaf(r, cv[j], acc[i][j]);
                }
            }
        }
    }
}

// acc = R C (C^T with TRANSPOSED) through the scratch's rows and cols, the terms TERMS says can be nonzero;
// the caller has freed the scratch (a barrier after its last reads). acc may be R or C.
template <bool TRANSPOSED, int TERMS>
__device__ __forceinline__ void staged_product(const float (&r)[4][4], const float (&c)[4][4], float* scratch,
                                               float (&acc)[4][4], int ty, int tx) {
    float* rows = scratch;
    float* cols = scratch + kHalf * kHalfLd;
    stage_rows(r, rows, ty, tx);
    stage_cols<TRANSPOSED>(c, cols, ty, tx);
    __syncthreads();
    product_quarter<TERMS>(rows, cols, acc, ty, tx);
}

// Factor a 128-block held as factor_block<16, 8> holds it (x = I on entry) by halves (above); scratch:
// kHalvesScratch floats of 16-byte aligned shared memory that no other thread of the CTA still reads.
__device__ __forceinline__ void halves_steps(float (&a)[8][8], float (&x)[8][8], float floor, int n, int ty, int tx,
                                             float* scratch) {
    float q[4][4], y[4][4], acc[4][4];
    get_quarter<0, 0>(a, q);                             // 1. the first half
    get_quarter<0, 0>(x, y);
    grouped_steps<16, 4, true>(q, y, floor, n < kHalf ? n : kHalf, ty, tx);
    set_quarter<0, 0>(a, q);
    set_quarter<0, 0>(x, y);
    if (n <= kHalf) return;
    get_quarter<4, 0>(a, q);                             // 2. L21 = A21 X11^T
    staged_product<true, kColsFromS>(q, y, scratch, acc, ty, tx);
    set_quarter<4, 0>(a, acc);
    __syncthreads();                                     // 3. A22 -= L21 L21^T, its lower part
    staged_product<true, kLower>(acc, acc, scratch, acc, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j <= i; ++j)
            if (i > j || ty >= tx) a[4 + i][4 + j] -= acc[i][j];
    get_quarter<4, 4>(a, q);                             // 4. the second half
    get_quarter<4, 4>(x, y);
    grouped_steps<16, 4, true>(q, y, floor, n - kHalf, ty, tx);
    set_quarter<4, 4>(a, q);
    set_quarter<4, 4>(x, y);
    float l21[4][4], x11[4][4], t[4][4];                 // 5. T = L21 X11
    get_quarter<4, 0>(a, l21);
    get_quarter<0, 0>(x, x11);
    __syncthreads();
    staged_product<false, kColsUpToS>(l21, x11, scratch, t, ty, tx);
    __syncthreads();                                     // 6. X21 = -X22 T
    staged_product<false, kRowsFromS>(y, t, scratch, acc, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) x[4 + i][j] = -acc[i][j];
}

// Factor the n x n block at A (leading dimension ld) into out (A's lower triangle is read; out may equal
// A) and, with INV, X = inv(L) into xinv (n x n, leading dimension n). diag_max: this matrix's max_i a_ii
// (the pivot floor), or NULL for the block's own. halves: (16 x 8 with the inverse, GROUPED) factor by
// halves_steps in scratch (kHalvesScratch floats of shared memory). GROUPED: kStep columns per step, for
// a chain of single blocks (128 x 128 with the inverse at batch 1: 38 against 44 us; at batch 264 81 against 93;
// without the inverse it loses at large batch, 51 against 39: H200, de3f7a4). Each grouped
// instantiation costs ~1.2 s of nvcc here (~3 s of the H200's cold compile; the column steps ~0.3 s),
// so only the 128-blocks with the inverse take them (cholesky_tiled.cu, cholesky_lookahead.cu).
template <int TDIM, int TS, bool INV, bool GROUPED = false>
__device__ __forceinline__ void factor_block(const float* A, float* out, float* __restrict__ xinv,
                                             const float* __restrict__ diag_max, int n, int ld,
                                             int halves = 0, float* scratch = nullptr) {
    constexpr int XS = INV ? TS : 1;                     // the inverse's tile (unused without INV)
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
    const float floor = pivot_floor<TDIM, TS>(a, diag_max, n, ty, tx);
    if constexpr (GROUPED && INV && TDIM == 16 && TS == 8) {
        if (halves)
            halves_steps(a, x, floor, n, ty, tx, scratch);
        else
            grouped_steps<TDIM, TS, INV>(a, x, floor, n, ty, tx);
    } else if constexpr (GROUPED)
        grouped_steps<TDIM, TS, INV>(a, x, floor, n, ty, tx);
    else
        column_steps<TDIM, TS, INV>(a, x, floor, n, ty, tx);
    store_lower_tile<TDIM, TS>(a, out, ld, n, ty, tx);
    if constexpr (INV) store_lower_tile<TDIM, TS>(x, xinv, n, n, ty, tx);
}

}  // namespace tiled
