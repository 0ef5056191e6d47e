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

template <int TDIM, int TS, int R, bool INV>
__global__ void __launch_bounds__(TDIM * TDIM)
cholesky_tiled_kernel(const float* src, float* dst, float* __restrict__ xinv, const float* __restrict__ diag_max,
                      int n, int ld, int stride) {
    static_assert(TS % R == 0, "a thread's tile holds whole R x R blocks");
    constexpr int NP = TDIM * TS;
    constexpr int XS = INV ? TS : 1;                     // the inverse's tile (unused without INV)
    __shared__ float v[NP][R];                           // columns k0 .. k0 + R - 1 of L, by row
    __shared__ float w[INV ? NP : 1][R];                 // rows k0 .. k0 + R - 1 of X, by column
    __shared__ float s_dinv[R][R];                       // inv(L_D) of the step's diagonal block
    __shared__ float s_max[TDIM];
    const int tx = threadIdx.x % TDIM, ty = threadIdx.x / TDIM;
    const float* A = src + (size_t)blockIdx.x * stride;
    float* out = dst + (size_t)blockIdx.x * stride;

    // register (i, j) holds entry (R (ty + TDIM (i / R)) + i % R, R (tx + TDIM (j / R)) + j % R)
    float a[TS][TS], x[XS][XS];
#pragma unroll
    for (int i = 0; i < TS; ++i) {
        const int r = R * (ty + TDIM * (i / R)) + i % R;
#pragma unroll
        for (int j = 0; j < TS; ++j) {
            const int c = R * (tx + TDIM * (j / R)) + j % R;
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
                if (R * (ty + TDIM * (i / R)) + i % R < n) m = fmaxf(m, a[i][i]);
            s_max[ty] = m;
        }
        __syncthreads();
        top = 0.f;
        for (int q = 0; q < TDIM; ++q) top = fmaxf(top, s_max[q]);
    }
    float floor = top * 1.1920929e-7f;                   // float32 eps
    if (!(floor > 0.f)) floor = 1.17549435e-38f;         // an all-zero diagonal: the smallest normal

#pragma unroll
    for (int sb = 0; sb < TS / R; ++sb) {                // the step's block within a thread's tile
        if (R * TDIM * sb >= n) break;
        for (int st = 0; st < TDIM; ++st) {              // the thread row/column that owns it
            const int s = sb * TDIM + st, k0 = R * s;    // step s: columns k0 .. k0 + R - 1
            if (k0 >= n) break;
            if (ty == st && tx == st) {                  // 1. factor and invert the R x R diagonal block
                float d[R][R], dinv[R][R];
#pragma unroll
                for (int p = 0; p < R; ++p)
#pragma unroll
                    for (int q = 0; q < R; ++q) d[p][q] = a[R * sb + p][R * sb + q];
#pragma unroll
                for (int p = 0; p < R; ++p) {
                    const popkit::Pivot pivot = popkit::cholesky_pivot(d[p][p], floor);
                    d[p][p] = pivot.lkk;
                    dinv[p][p] = pivot.inv;
#pragma unroll
                    for (int rr = p + 1; rr < R; ++rr) d[rr][p] *= pivot.inv;
#pragma unroll
                    for (int rr = p + 1; rr < R; ++rr)
#pragma unroll
                        for (int cc = p + 1; cc <= rr; ++cc) d[rr][cc] = fmaf(-d[rr][p], d[cc][p], d[rr][cc]);
                }
#pragma unroll
                for (int p = 0; p < R; ++p)
#pragma unroll
                    for (int rr = p + 1; rr < R; ++rr) {
                        float t = 0.f;
#pragma unroll
                        for (int q = p; q < rr; ++q) t = fmaf(d[rr][q], dinv[q][p], t);
                        dinv[rr][p] = -t * dinv[rr][rr];
                    }
#pragma unroll
                for (int p = 0; p < R; ++p)
#pragma unroll
                    for (int q = 0; q < R; ++q) {
                        if (q <= p) a[R * sb + p][R * sb + q] = d[p][q];
                        s_dinv[p][q] = (q <= p) ? dinv[p][q] : 0.f;
                    }
            }
            __syncthreads();
            if (tx == st) {                              // 2. L21 = A21 inv(L_D)^T for rows below the block
#pragma unroll
                for (int i = 0; i < TS; i += R) {
                    const int rb = ty + TDIM * (i / R);
                    if (rb <= s) continue;
#pragma unroll
                    for (int p = 0; p < R; ++p) {
                        float y[R];
#pragma unroll
                        for (int q = 0; q < R; ++q) y[q] = a[i + p][R * sb + q];
#pragma unroll
                        for (int c = 0; c < R; ++c) {
                            float t = 0.f;
#pragma unroll
                            for (int q = 0; q <= c; ++q) t = fmaf(y[q], s_dinv[c][q], t);
                            a[i + p][R * sb + c] = t;
                            v[R * rb + p][c] = t;
                        }
                    }
                }
            }
            if constexpr (INV) {                         //    and X's rows k0 .. k0 + R - 1: inv(L_D) X
                if (ty == st) {
#pragma unroll
                    for (int j = 0; j < TS; j += R) {
                        const int cb = tx + TDIM * (j / R);
                        if (cb > s) continue;
#pragma unroll
                        for (int q = 0; q < R; ++q) {
                            float xc[R];
#pragma unroll
                            for (int p = 0; p < R; ++p) xc[p] = x[R * sb + p][j + q];
#pragma unroll
                            for (int p = 0; p < R; ++p) {
                                float t = 0.f;
#pragma unroll
                                for (int p2 = 0; p2 <= p; ++p2) t = fmaf(s_dinv[p][p2], xc[p2], t);
                                x[R * sb + p][j + q] = t;
                                w[R * cb + q][p] = t;
                            }
                        }
                    }
                }
            }
            __syncthreads();
            // 3. rank-R updates from registers: a[r][c] -= sum_q l_rq l_cq for c >= k0 + R, r >= c;
            //    x[r][c] -= sum_q l_rq x_qc for r >= k0 + R, c < k0 + R.
#pragma unroll
            for (int i = 0; i < TS; ++i) {
                const int ib = i / R;
                if (ib < sb) continue;                   // rows of earlier blocks: final
                const int rb = ty + TDIM * ib;
                if (ib == sb && ty <= st) continue;      // the step's own row block or above
                float lr[R];
#pragma unroll
                for (int q = 0; q < R; ++q) lr[q] = v[R * rb + i % R][q];
#pragma unroll
                for (int j = 0; j < TS; ++j) {
                    const int jb = j / R;
                    if (jb < sb || jb > ib) continue;    // c < k0 (x below), or a block above the diagonal
                    if (jb == sb && tx <= st) continue;  // the step's columns (x below)
                    if (jb == ib && (ty < tx || (ty == tx && j % R > i % R))) continue;
                    const int cb = tx + TDIM * jb;
                    float t = a[i][j];
#pragma unroll
                    for (int q = 0; q < R; ++q) t = fmaf(-lr[q], v[R * cb + j % R][q], t);
                    a[i][j] = t;
                }
                if constexpr (INV) {
#pragma unroll
                    for (int j = 0; j < TS; ++j) {
                        const int jb = j / R;
                        if (jb > sb) continue;           // columns beyond the step's block: still zero
                        if (jb == sb && tx > st) continue;
                        const int cb = tx + TDIM * jb;
                        float t = x[i][j];
#pragma unroll
                        for (int q = 0; q < R; ++q) t = fmaf(-lr[q], w[R * cb + j % R][q], t);
                        x[i][j] = t;
                    }
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < TS; ++i) {
        const int r = R * (ty + TDIM * (i / R)) + i % R;
#pragma unroll
        for (int j = 0; j < TS; ++j) {
            const int c = R * (tx + TDIM * (j / R)) + j % R;
            if (r < n && c < n) out[(size_t)r * ld + c] = (c <= r) ? a[i][j] : 0.f;
        }
    }
    if constexpr (INV) {
        float* X = xinv + (size_t)blockIdx.x * n * n;
#pragma unroll
        for (int i = 0; i < TS; ++i) {
            const int r = R * (ty + TDIM * (i / R)) + i % R;
#pragma unroll
            for (int j = 0; j < TS; ++j) {
                const int c = R * (tx + TDIM * (j / R)) + j % R;
                if (r < n && c < n) X[(size_t)r * n + c] = (c <= r) ? x[i][j] : 0.f;
            }
        }
    }
}

template <int TDIM, int TS, int R>
int launch(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n, int ld, int stride) {
    if (xinv)
        cholesky_tiled_kernel<TDIM, TS, R, true><<<batch, TDIM * TDIM>>>(src, dst, xinv, diag_max, n, ld, stride);
    else
        cholesky_tiled_kernel<TDIM, TS, R, false><<<batch, TDIM * TDIM>>>(src, dst, xinv, diag_max, n, ld, stride);
    return (int)cudaGetLastError();
}

}  // namespace

// Factor `batch` n x n blocks (src/dst: leading dimension ld, batch stride `stride` floats; src may
// equal dst). xinv: NULL or batch x n x n for inv(L). diag_max: NULL (the pivot floor comes from
// this block's own diagonal) or max_i a_ii of each block's whole matrix. (tdim, ts): the thread
// grid and tile, tdim * ts >= n; r: columns per step (1, 2 or 4).
POPKIT_EXPORT int cholesky_tiled(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n,
                                 int ld, int stride, int tdim, int ts, int r) {
    if (batch < 1 || n < 1 || n > tdim * ts || ld < n || stride < n) return (int)cudaErrorInvalidValue;
    if (r == 1) {
        if (tdim == 8 && ts == 4) return launch<8, 4, 1>(src, dst, xinv, diag_max, batch, n, ld, stride);
        if (tdim == 8 && ts == 8) return launch<8, 8, 1>(src, dst, xinv, diag_max, batch, n, ld, stride);
        if (tdim == 16 && ts == 4) return launch<16, 4, 1>(src, dst, xinv, diag_max, batch, n, ld, stride);
        if (tdim == 16 && ts == 8) return launch<16, 8, 1>(src, dst, xinv, diag_max, batch, n, ld, stride);
    }
    if (r == 2 && tdim == 16 && ts == 8) return launch<16, 8, 2>(src, dst, xinv, diag_max, batch, n, ld, stride);
    if (r == 4 && tdim == 16 && ts == 8) return launch<16, 8, 4>(src, dst, xinv, diag_max, batch, n, ld, stride);
    return (int)cudaErrorInvalidValue;
}
