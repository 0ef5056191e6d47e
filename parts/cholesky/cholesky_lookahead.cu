// cholesky, one step of the blocked driver in one launch (sm_90a): the trailing update, the next
// diagonal block's factorization and the next panel.
//
// Step k factors block k, forms the panel L21 and updates A22 -= L21 L21^T; block k + 1 is A22's first
// 128 x 128 tile, and panel k + 1 is A22's first block column below it times that block's inverse. One
// launch runs, for each matrix:
//   - one CTA per lower tile of A22: the update. The CTA of tile 0 then factors that tile in place
//     (tiled_block.cuh's grouped steps, with the inverse, ~38 us at batch 1) while the others are still
//     updating theirs, and posts a flag; the CTAs of tiles (ti, 0) post a flag each when written;
//   - after them, one CTA per 128-row tile of panel k + 1: it waits for its rows' flag and the diagonal
//     block's, then forms L21 = A21 X^T in place (the same product role, without the subtraction) and
//     zeroes its mirror above the diagonal.
// So the chain of diagonal blocks (the whole cost of a large single matrix at n = 4096) pays one launch
// per step instead of three (panel, next column, the rest). A waiting CTA always has a higher block
// index than the ones it waits for, and blocks start in index order, so those are already running: no
// deadlock whatever the number of SMs. The tiles each role writes are disjoint (the panel's rows are
// the update's tiles (ti, 0), read only by the CTA that waited for them).
// Launch: grid (lower tiles + panel tiles, batch), 256 threads, 208 KiB of dynamic shared memory (the
// product role's; the diagonal role adds 8 KiB of static), one CTA per SM.
// Product role, C = C_in - P Q^T on one 128 x 128 lower tile (tf32x3 as in cholesky_product_wgmma.cu,
// model.tf32x3_product): two warpgroups of 64 rows each (wgmma m64n128k8). All of the tile's P and Q
// rows (K <= 128) are copied into shared memory by cp.async at the start, one group per chunk of 32
// columns, so every global load is in flight at once (rows padded to 144 floats: 16-byte reads by 8
// lanes over two rows hit distinct banks); per chunk each thread splits its own A fragments into
// registers and the CTA splits Q's chunk into hi/lo planes (wgmma_tf32.cuh), double-buffered so that
// one chunk's split runs under the previous chunk's wgmmas. On its own, as a trailing-update kernel,
// it matched cholesky_product_wgmma.cu (H200: 1x8192 7.55 against 7.51 ms), and its 256 threads match
// the diagonal role's 16 x 16.
#include "device_utils.cuh"
#include "tf32x3.cuh"
#include "tiled_block.cuh"
#include "wgmma_tf32.cuh"

namespace {

using tf32x3::kChunk;
using tf32x3::kTile;
using namespace hopper;

constexpr int kLaThreads = 256;                              // 2 warpgroups; the diagonal role's 16 x 16
constexpr int kMaxK = 128;                                   // the driver's block
constexpr int kRawLd = kMaxK + 16;                           // padded raw row (floats)
constexpr int kRawWords = kTile * kRawLd;                    // one operand's raw rows
constexpr int kLaSmemBytes = (2 * kRawWords + 2 * kStageWords) * (int)sizeof(float);   // 208 KiB

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int kMaxChunks = kMaxK / kChunk;                   // cp.async groups, one per chunk

// Split Q's chunk kc from the raw rows into the hi and lo planes of one stage: each warp covers 8 rows
// x 4 of the 8 column quads per read, and component s of a quad goes to k8 step s.
__device__ __forceinline__ void split_planes(float* stage, const float* raw_q, int kc) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned* hi = reinterpret_cast<unsigned*>(stage);
    unsigned* lo = hi + kPlaneWords;
    constexpr int kReads = kTile * kChunk / 4 / kLaThreads;
#pragma unroll
    for (int i = 0; i < kReads; ++i) {
        const int combo = warp * kReads + i, group = combo >> 1, half = combo & 1;
        const int row = group * 8 + (lane >> 2), quad = half * 4 + (lane & 3);
        const float4 v = *reinterpret_cast<const float4*>(raw_q + row * kRawLd + kc * kChunk + 4 * quad);
        const int base = half * (4 * kTile) + group * 32 + lane;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            unsigned h, l;
            tf32x3::split_tf32(component(v, s), h, l);
            hi[s * kStepWords + base] = h;
            lo[s * kStepWords + base] = l;
        }
    }
}

// This thread's A fragments of chunk kc, split: a0..a3 are rows g, g + 8 and quads t, t + 4 of its
// warp's 16 rows; step s takes component s of each.
__device__ __forceinline__ void split_fragments(const float* raw_p, int kc, unsigned (&ah)[4][4],
                                                unsigned (&al)[4][4]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    float4 v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
        v[e] = *reinterpret_cast<const float4*>(raw_p + (16 * warp + g + 8 * (e & 1)) * kRawLd + kc * kChunk +
                                                4 * t + 16 * (e >> 1));
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int e = 0; e < 4; ++e) tf32x3::split_tf32(component(v[e], s), ah[s][e], al[s][e]);
}

// Wait until at most `pending` of this thread's cp.async groups are in flight (an immediate in PTX;
// the unrolled caller's argument is a constant, so the switch folds away).
__device__ __forceinline__ void cp_async_wait(int pending) {
    switch (pending) {
        case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
        case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
        case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
        default: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    }
}

// The product role on the tile at (row0, col0) of matrix blockIdx.y: C = C_in - P Q^T on and below the
// diagonal (UPDATE), or C = P Q^T and zeros at the tile's mirror (the panel; P may be C: every row of P
// is staged before any of C is written).
template <int VEC, bool UPDATE>
__device__ __forceinline__ void product_tile(const tf32x3::Product& op, int row0, int col0, float* smem) {
    float* raw_p = smem;
    float* raw_q = raw_p + kRawWords;
    float* planes = raw_q + kRawWords;
    const float* p = op.p + blockIdx.y * op.sp;
    const float* q = op.q + blockIdx.y * op.sq;
    const int chunks = op.K / kChunk;

#pragma unroll
    for (int kc = 0; kc < kMaxChunks; ++kc) {            // every load in flight; one group per chunk
        if (kc < chunks) {
            tf32x3::stage_rows<VEC, kLaThreads, kRawLd>(raw_p + kc * kChunk, p, op.ldp, row0, op.m, kc * kChunk);
            tf32x3::stage_rows<VEC, kLaThreads, kRawLd>(raw_q + kc * kChunk, q, op.ldq, col0, op.ncols, kc * kChunk);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }

    float acc[1][16][4] = {};
    unsigned ah[2][4][4], al[2][4][4];                   // this chunk's A fragments and the next's
    pin(acc[0]);                                         // the wgmmas chain on acc; touch it only outside
#pragma unroll
    for (int kc = 0; kc < kMaxChunks; ++kc) {
        if (kc >= chunks) break;
        cp_async_wait(kMaxChunks - 1 - kc);              // chunk kc has landed (groups complete in order)
        __syncthreads();                                 // ... for every thread; chunk kc - 2's wgmmas are done
        float* stage = planes + (kc & 1) * kStageWords;
        split_planes(stage, raw_q, kc);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        split_fragments(raw_p, kc, ah[kc & 1], al[kc & 1]);
        __syncthreads();                                 // the planes are complete
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int s = 0; s < kChunk / 8; ++s) {           // small terms first
            const unsigned long long hi = plane_descriptor(stage + s * kStepWords);
            const unsigned long long lo = plane_descriptor(stage + kPlaneWords + s * kStepWords);
            wgmma_tf32(acc[0], al[kc & 1][s], hi);
            wgmma_tf32(acc[0], ah[kc & 1][s], lo);
            wgmma_tf32(acc[0], ah[kc & 1][s], hi);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");   // chunk kc - 1's are done
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    pin(acc[0]);
    const long long offset = blockIdx.y * op.sc;
    tf32x3::store_fragments<VEC, UPDATE, UPDATE>(acc, op.c_in + offset, op.c + offset, op.ldc,
                                                 row0 + 16 * (threadIdx.x >> 5), col0, op.m, op.ncols);
    if (!UPDATE)
        tf32x3::zero_mirror<VEC, kLaThreads>(op.mirror + offset, op.ldc, row0, min(row0 + kTile, op.m), op.ncols);
}
#endif

// grid.x: the update's lower tiles, then the next panel's row tiles; grid.y: the batch. flags: per
// matrix 1 + row tiles ints (the diagonal block, then the update's tiles (ti, 0)), `epoch` this step's.
template <int VEC>
__global__ void __launch_bounds__(kLaThreads, 1)
lookahead_kernel(const tf32x3::Product op, const tiled::DiagBlock diag, const tf32x3::Product panel,
                 int* flags, int flags_stride, int epoch) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    int* my_flags = flags + blockIdx.y * flags_stride;
    const int update_tiles = tf32x3::tiles_of<true>(op.m, op.ncols);
    if ((int)blockIdx.x < update_tiles) {
        int ti, tj;
        tf32x3::tile_of_block<true>(blockIdx.x, op.ncols, ti, tj);
        product_tile<VEC, true>(op, ti * kTile, tj * kTile, smem);
        if (blockIdx.x == 0) {                           // tile 0 is the next diagonal block of matrix blockIdx.y
            __syncthreads();                             // its update is written (and visible to this CTA)
            const size_t b = blockIdx.y;
            const float* src = diag.src + b * diag.stride;
            float* dst = diag.dst + b * diag.stride;
            tiled::factor_block<16, 8, true, true>(src, dst, diag.xinv + b * diag.n * diag.n, diag.diag_max + b,
                                                   diag.n, diag.ld);
            if (panel.m > 0) popkit::post_flag(my_flags, epoch);
        } else if (tj == 0 && panel.m > 0) {
            popkit::post_flag(my_flags + ti, epoch);     // the next panel's input rows are updated
        }
        return;
    }
    const int r = blockIdx.x - update_tiles;             // the next panel's row tile r: the update's tile (r + 1, 0)
    popkit::wait_flag(my_flags + r + 1, epoch);
    popkit::wait_flag(my_flags, epoch);                  // L11 and its inverse
    product_tile<VEC, false>(panel, r * kTile, 0, smem);
#else
    __trap();                                            // launched only where the build targets sm_90a
#endif
}

template <int VEC>
int launch_lookahead(const tf32x3::Product& op, const tiled::DiagBlock& diag, const tf32x3::Product& panel,
                     int* flags, int flags_stride, int epoch, int batch) {
    static int granted = 0;
    const cudaError_t err = popkit::allow_dynamic_smem(lookahead_kernel<VEC>, kLaSmemBytes, granted);
    if (err != cudaSuccess) return (int)err;
    const int tiles = tf32x3::tiles_of<true>(op.m, op.ncols) + (panel.m + kTile - 1) / kTile;
    lookahead_kernel<VEC><<<dim3(tiles, batch), kLaThreads, kLaSmemBytes>>>(op, diag, panel, flags, flags_stride,
                                                                           epoch);
    return (int)cudaGetLastError();
}

}  // namespace

// One step for `batch` matrices: the trailing product op (C = C_in - P Q^T on the lower tiles of an
// op.m x op.m matrix; K <= 128, a multiple of 32; rows 16-byte aligned: one instantiation keeps the cold
// compile short), the factorization of its first tile, `diag` (diag.n = min(op.m, 128), factored by the
// 16 x 16 tiled shape, in place: diag.src == diag.dst == op.c), always with its inverse (also for the
// last block, where nothing reads it: one instantiation of the diagonal role keeps the compile short),
// and the next step's panel (panel.m == 0: none; else L21 = A21 X^T in place below that block, panel.p ==
// panel.c, Q = diag.xinv, K = ncols = 128 = diag.n, its mirror zeroed). flags: batch x flags_stride ints,
// flags_stride > op.m / 128, zero before the driver's first step; epoch: this step's number, from 1.
// Call it only on a GPU of compute capability 9.0 with the build targeting sm_90a (elsewhere the kernel
// traps).
POPKIT_EXPORT int cholesky_lookahead_step(tf32x3::Product op, tiled::DiagBlock diag, tf32x3::Product panel,
                                          int* flags, int flags_stride, int epoch, int batch) {
    if (batch < 1 || op.m < 1 || op.ncols != op.m || diag.n != (op.m < kTile ? op.m : kTile) ||
        diag.src != op.c || diag.dst != op.c || !diag.xinv || !diag.diag_max || op.K < kChunk || op.K > kMaxK ||
        op.K % kChunk != 0 || panel.m < 0 || epoch < 1)
        return (int)cudaErrorInvalidValue;
    if (panel.m > 0 && (!flags || flags_stride <= op.m / kTile || panel.K != kTile || panel.ncols != kTile ||
                        diag.n != kTile || panel.q != diag.xinv || panel.p != panel.c || !panel.mirror ||
                        !tf32x3::rows_aligned16(panel)))
        return (int)cudaErrorInvalidValue;
    return tf32x3::rows_aligned16(op) ? launch_lookahead<4>(op, diag, panel, flags, flags_stride, epoch, batch)
                                      : (int)cudaErrorInvalidValue;
}
