// cholesky, n <= 128: one CTA per matrix (or per diagonal block), the matrix in registers.
//
// Computes L, lower triangular with A = L L^T, by right-looking Cholesky (the spotf2 recurrence: for
// k = 0..n-1, l_kk = sqrt(a_kk), l_rk = a_rk / l_kk, a_rj -= l_rk l_jk for k < j <= r, in groups of four
// columns), and
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
// to itself and never touches the real entries). The columns go in steps of kStep = 4 (tiled_block.cuh;
// they lie in one tile column, owned by threads tx = kt .. kt + 3), one barrier per step. At the
// barrier that opens the step at column k, the step's four columns of the updated matrix (rows r >= k,
// unscaled) sit in shared memory, one float4 per row (published by their owners during the previous
// step). Then every thread:
//   1. factors the 4 x 4 diagonal block itself (floored pivots, 1 / l_kk = rsqrt; popkit::cholesky_pivot),
//      the same value in every thread, so nothing is shared back;
//   2. solves its rows' four L values (forward substitution with that block, in the block's own order,
//      so a row inside the block comes out bit-identical), and the columns' owners keep theirs;
//   3. applies the rank-4 update to its entries with c >= k + 4 and r >= c (the same solve gives the
//      four L values of each of its columns);
//   4. if it owns the next step's columns, publishes them into the other half of the double-buffered
//      vector (a thread writing it has passed this step's barrier, so no one still reads that half).
// With the kb loop unrolled, the predicates are compile-time facts except on one tile column and one
// tile diagonal. The chain of dependent steps is n / 4 long: each step's latency (barrier, shared
// read, the 4 x 4 factor, the update) is paid 32 times for a 128 x 128 block instead of 128 (the
// one-column step took ~430 cycles, a cost that more threads or a different owner of the chain did
// not lower; docs/priors.md). model.right_looking_model(step = 4) is this order.
// Inverse (INV, for the blocked route's diagonal blocks): X = inv(L) by elimination of L X = I in the
// same steps and layout (x[i][j] = X[ty + TDIM i][tx + TDIM j], X = I at the start): the step's four
// rows of X (columns c < k + 4) are published beside the columns; every thread solves its columns' four
// X values with the 4 x 4 block (its owners keep them) and updates x[i][j] -= L[r, k..k+3] X[k..k+3, c]
// for r >= k + 4 > c (model.inverse_model(step = 4)). The two updates cover complementary parts of the
// lower triangle, so the inverse adds work but no barrier.
//
// Launch: grid = batch, TDIM^2 threads; (TDIM, TS) in {(8, 4), (8, 8), (16, 4), (16, 8)}.
// Shared memory: 2 x 2 NP float4 (the columns and the rows of X, two halves each), static.
// Why it is fast: the arithmetic runs from registers (shared memory carries one or two vectors per
// step, not the matrix); global memory is read and written once, 16-float row segments per
// half-warp; one CTA per matrix keeps hundreds of matrices in flight on 132 SMs. The inverse's
// earlier version (each thread forward-substituting one column from shared memory) was a serial
// chain of n^2 / 2 dependent FMAs: ~85 of the ~110 us of a 128 x 128 diagonal block. A variant
// with one barrier per step (a column's threads as lanes of one warp, sharing the pivot by
// shuffle) was slower (H200, c17ca65: 1x4096's diagonal blocks 1.84 ms against 1.61): its
// column-major thread order made every global access touch 16 rows.
#include "device_utils.cuh"
#include "tiled_block.cuh"

namespace {

template <int TDIM, int TS, bool INV>
__global__ void __launch_bounds__(TDIM * TDIM)
cholesky_tiled_kernel(const float* src, float* dst, float* __restrict__ xinv, const float* __restrict__ diag_max,
                      int n, int ld, int stride) {
    const size_t b = blockIdx.x;
    tiled::factor_block<TDIM, TS, INV>(src + b * stride, dst + b * stride, INV ? xinv + b * n * n : nullptr,
                                       diag_max ? diag_max + b : nullptr, n, ld);
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
