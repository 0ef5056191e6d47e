// cholesky, n <= 128: one CTA per matrix (or per diagonal block), the matrix in registers.
//
// Computes L, lower triangular with A = L L^T, by right-looking Cholesky (the spotf2 recurrence: for
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
// to itself and never touches the real entries). Two step loops (tiled_block.cuh):
// Column steps (the plain factorization and the 64-blocks), step k = kb TDIM + kt:
//   1. thread (kt, kt) owns a_kk: floors it, writes l_kk and shares 1 / l_kk = rsqrt(a_kk)
//      (popkit::cholesky_pivot);
//   2. the threads of column k (tx == kt) scale their entries below the diagonal and publish them
//      in a shared vector v (v[r] = l_rk);
//   3. every thread updates its entries with c > k and r >= c: a[i][j] -= v[r_i] v[c_j].
//   With the kb loop unrolled, "c_j > k" and "r_i >= c_j" are compile-time facts except on one tile
//   column and one tile diagonal, so step 3 is TS^2 predicated FMAs from registers plus 2 TS
//   shared-memory reads. Two barriers per step.
//   Inverse (INV, for the blocked route's diagonal blocks): X = inv(L) by column elimination of
//   L X = I in the same loop and layout (x[i][j] = X[ty + TDIM i][tx + TDIM j], X = I at the start):
//   at step k, row k of X is final; its owners (ty == kt) scale it by 1 / l_kk and publish it in a
//   second shared vector w, and every thread updates x[i][j] -= v[r_i] w[c_j] for r > k >= c. The two
//   updates cover complementary parts of the lower triangle (c > k and c <= k), so the inverse costs
//   about as much as the factorization and adds no barrier.
// Grouped steps (tiled::factor_block's GROUPED: this kernel's (16, 8) shape with the inverse, i.e. the
// 128-blocks of the blocked route, and cholesky_lookahead.cu's diagonal role): four columns per step
// (kStep; they lie in one tile column, owned by threads tx = kt .. kt + 3), one barrier per step. At
// the barrier that opens the step at column k, its four columns of the updated matrix (rows r >= k,
// unscaled) sit in shared memory, one float4 per row, and so do the step's four rows of X (columns
// c < k + 4), both published by their owners during the previous step. Then every thread:
//   1. factors the 4 x 4 diagonal block itself (floored pivots as above), the same value in every
//      thread, so nothing is shared back;
//   2. solves its rows' four L values (forward substitution with that block, in the block's own
//      order, so a row inside the block comes out bit-identical); the columns' owners keep theirs;
//   3. applies the rank-4 update to its entries with c >= k + 4 and r >= c (the same solve gives the
//      four L values of each of its columns);
//   4. solves its columns' four X values with the block (the rows' owners keep them) and updates
//      x[i][j] -= L[r, k..k+3] X[k..k+3, c] for r >= k + 4 > c (X = I at the start; the elimination of
//      L X = I);
//   5. if it owns the next step's columns or rows of X, publishes them into the other half of the
//      double-buffered vectors (a thread writing there has passed this step's barrier, so no one
//      still reads that half).
//   The chain is n / 4 steps instead of n: 128 x 128 with the inverse 44 -> 38 us at batch 1, 93 -> 81
//   at batch 264 (H200, de3f7a4). model.right_looking_model(step = 4) and model.inverse_model(step = 4)
//   are this order.
// Halves (the `halves` argument, route.DIAG_HALVES; tiled_block.cuh halves_steps): the (16, 8) block
// with its inverse as two 64-blocks of grouped steps in the same registers (a quarter of this layout is
// a 64-block's), joined by four 64 x 64 x 64 products through 34 KiB of shared memory: 42.9 -> 35.1 us
// at batch 1, 104.8 -> 75.2 at batch 264 (H200, 28c21c4); model.halves_model is this order.
//
// Launch: grid = batch, TDIM^2 threads; (TDIM, TS) = (8, 8) for n <= 64, (16, 8) for n <= 128.
// Shared memory, static: 2 NP floats (v, w), and for (16, 8) with the inverse the halves' 34 KiB (47 of
// the 48 KiB a kernel may have statically).
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
                      int n, int ld, int stride, int halves) {
    const size_t b = blockIdx.x;
    // 128-blocks with the inverse take the grouped steps (16x512 228 against 255 us, H200 at 40c270a),
    // or the halves; 64-blocks keep the column steps (one grouped instantiation less in the cold compile)
    constexpr bool kGrouped = INV && TDIM == 16;
    __shared__ __align__(16) float scratch[kGrouped ? tiled::kHalvesScratch : 1];
    tiled::factor_block<TDIM, TS, INV, kGrouped>(src + b * stride, dst + b * stride, INV ? xinv + b * n * n : nullptr,
                                                 diag_max ? diag_max + b : nullptr, n, ld, kGrouped ? halves : 0,
                                                 scratch);
}

template <int TDIM, int TS>
int launch(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n, int ld, int stride,
           int halves) {
    if (xinv)
        cholesky_tiled_kernel<TDIM, TS, true><<<batch, TDIM * TDIM>>>(src, dst, xinv, diag_max, n, ld, stride, halves);
    else
        cholesky_tiled_kernel<TDIM, TS, false><<<batch, TDIM * TDIM>>>(src, dst, xinv, diag_max, n, ld, stride, 0);
    return (int)cudaGetLastError();
}

}  // namespace

// Factor `batch` n x n blocks (src/dst: leading dimension ld, batch stride `stride` floats; src may
// equal dst). xinv: NULL or batch x n x n for inv(L). diag_max: NULL (the pivot floor comes from
// this block's own diagonal) or max_i a_ii of each block's whole matrix. (tdim, ts): the thread
// grid and tile, tdim * ts >= n: (8, 8) or (16, 8) (each instantiation costs ~1 s of the cold compile).
// halves: with xinv and (16, 8), factor by tiled_block.cuh's halves_steps.
POPKIT_EXPORT int cholesky_tiled(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n,
                                 int ld, int stride, int tdim, int ts, int halves) {
    if (batch < 1 || n < 1 || n > tdim * ts || ld < n || stride < n) return (int)cudaErrorInvalidValue;
    if (tdim == 8 && ts == 8) return launch<8, 8>(src, dst, xinv, diag_max, batch, n, ld, stride, 0);
    if (tdim == 16 && ts == 8) return launch<16, 8>(src, dst, xinv, diag_max, batch, n, ld, stride, halves);
    return (int)cudaErrorInvalidValue;
}
