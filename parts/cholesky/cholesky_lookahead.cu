// cholesky, one step's trailing update and the next diagonal block's factorization in one launch
// (sm_90a).
//
// Step k of the blocked driver factors block k, forms the panel L21 and updates A22 -= L21 L21^T; block
// k + 1 is A22's first 128 x 128 tile. Here one CTA per lower tile of A22 runs the update, and the CTA
// of tile 0 then factors that tile in place (tiled_block.cuh's grouped steps, with the inverse, ~38 us
// at batch 1), while the other CTAs are still updating theirs: the diagonal block runs under the rest
// of the update instead of after it, and the step costs two launches (panel, this) instead of three.
// The tile's own writes are visible to its CTA after a barrier; no other CTA reads or writes that tile.
// Launch: grid (lower tiles, batch), 256 threads, 208 KiB of dynamic shared memory (the product role's;
// the diagonal role adds 8 KiB of static), one CTA per SM.
// Product role: C = C_in - P Q^T on one 128 x 128 lower tile, staged_product.cuh's tile product (its
// 256 threads match the diagonal role's 16 x 16).
#include "device_utils.cuh"
#include "tf32x3.cuh"
#include "staged_product.cuh"
#include "tiled_block.cuh"

namespace {

__global__ void __launch_bounds__(staged::kThreads, 1)
lookahead_kernel(const tf32x3::Product op, const tiled::DiagBlock diag) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    int ti, tj;
    tf32x3::tile_of_block<true>(blockIdx.x, op.ncols, ti, tj);
    const size_t b = blockIdx.y;
    staged::product_tile<true, true>(op.p + b * op.sp, op.ldp, op.q + b * op.sq, op.ldq, op.c_in + b * op.sc,
                                     op.c + b * op.sc, op.ldc, ti * tf32x3::kTile, tj * tf32x3::kTile, op.m, op.ncols,
                                     op.K, reinterpret_cast<float*>(smem4));
    if (blockIdx.x == 0) {                               // tile 0 is the next diagonal block of matrix b
        __syncthreads();                                 // its update is written (and visible to this CTA)
        tiled::factor_block<16, 8, true, true>(diag.src + b * diag.stride, diag.dst + b * diag.stride,
                                               diag.xinv + b * diag.n * diag.n, diag.diag_max + b, diag.n, diag.ld);
    }
#else
    __trap();                                            // launched only where the build targets sm_90a
#endif
}

int launch_lookahead(const tf32x3::Product& op, const tiled::DiagBlock& diag, int batch) {
    static int granted = 0;
    const cudaError_t err = popkit::allow_dynamic_smem(lookahead_kernel, staged::kSmemBytes, granted);
    if (err != cudaSuccess) return (int)err;
    lookahead_kernel<<<dim3(tf32x3::tiles_of<true>(op.m, op.ncols), batch), staged::kThreads, staged::kSmemBytes>>>(
        op, diag);
    return (int)cudaGetLastError();
}

}  // namespace

// One step for `batch` matrices: the trailing product op (C = C_in - P Q^T on the lower tiles of an
// op.m x op.m matrix; K <= 128, a multiple of 32; rows 16-byte aligned: one instantiation keeps the cold
// compile short), then the factorization of its first tile, `diag` (diag.n = min(op.m, 128), factored
// by the 16 x 16 tiled shape, in place: diag.src == diag.dst == op.c), always with its inverse (also for
// the last block, where nothing reads it: one instantiation of the diagonal role keeps the compile short).
// Call it only on a GPU of compute capability 9.0 with the build targeting sm_90a (elsewhere the kernel
// traps).
POPKIT_EXPORT int cholesky_lookahead_step(tf32x3::Product op, tiled::DiagBlock diag, int batch) {
    if (batch < 1 || op.m < 1 || op.ncols != op.m || diag.n != (op.m < tf32x3::kTile ? op.m : tf32x3::kTile) ||
        diag.src != op.c || diag.dst != op.c || !diag.xinv || !diag.diag_max || op.K < tf32x3::kChunk || op.K > staged::kMaxK ||
        op.K % tf32x3::kChunk != 0)
        return (int)cudaErrorInvalidValue;
    return tf32x3::rows_aligned16(op) ? launch_lookahead(op, diag, batch) : (int)cudaErrorInvalidValue;
}
