// cholesky, one step's trailing update and the next diagonal block's factorization in one launch
// (sm_90a).
//
// Step k of the blocked driver factors block k, forms the panel L21 and updates A22 -= L21 L21^T; block
// k + 1 is A22's first 128 x 128 tile. Here one CTA per lower tile of A22 runs the update, and the CTA
// of tile 0 then factors that tile in place (tiled_block.cuh, by halves with the inverse, ~35 us at
// batch 1), while the other CTAs are still updating theirs: the diagonal block runs under the rest of
// the update instead of after it, and the step costs two launches (panel, this) instead of three.
// The tile's own writes are visible to its CTA after a barrier; no other CTA reads or writes that tile.
// The panel arrives out of place (cholesky_blocked.cu): the CTAs that staged a panel row tile as Q's
// rows copy it into L, never tile 0's CTA while another tile is there (its factorization is the chain).
// Launch: grid (lower tiles, batch), 256 threads, 208 KiB of dynamic shared memory (the product role's,
// then the halves' scratch; the diagonal role adds 12 KiB of static), one CTA per SM.
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
            popkit::split_tf32(component(v, s), h, l);
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
        for (int e = 0; e < 4; ++e) popkit::split_tf32(component(v[e], s), ah[s][e], al[s][e]);
}

// Wait until at most `pending` of this thread's cp.async groups are in flight (an immediate in PTX;
// the unrolled caller's argument is a constant, so the switch folds away).
__device__ __forceinline__ void cp_async_wait(int pending) {
    switch (pending) {
        case 0: popkit::wait_async_groups<0>(); break;
        case 1: popkit::wait_async_groups<1>(); break;
        case 2: popkit::wait_async_groups<2>(); break;
        default: popkit::wait_async_groups<3>(); break;
    }
}

// The product role: lower tile (ti, tj) of C = C_in - P Q^T for matrix blockIdx.y. P's and Q's rows stay
// staged in smem afterwards (raw rows of kRawLd floats, Q's kRawWords after P's).
template <int VEC>
__device__ __forceinline__ void update_tile(const tf32x3::Product& op, int ti, int tj, float* smem) {
    float* raw_p = smem;
    float* raw_q = raw_p + kRawWords;
    float* planes = raw_q + kRawWords;
    const int row0 = ti * kTile, col0 = tj * kTile;
    const float* p = op.p + blockIdx.y * op.sp;
    const float* q = op.q + blockIdx.y * op.sq;
    const int chunks = op.K / kChunk;

#pragma unroll
    for (int kc = 0; kc < kMaxChunks; ++kc) {            // every load in flight; one group per chunk
        if (kc < chunks) {
            tf32x3::stage_rows<VEC, kLaThreads, kRawLd>(raw_p + kc * kChunk, p, op.ldp, row0, op.m, kc * kChunk);
            tf32x3::stage_rows<VEC, kLaThreads, kRawLd>(raw_q + kc * kChunk, q, op.ldq, col0, op.ncols, kc * kChunk);
        }
        popkit::commit_async_group();
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
    tf32x3::store_fragments<VEC, true, true>(acc, op.c_in + offset, op.c + offset, op.ldc,
                                             row0 + 16 * (threadIdx.x >> 5), col0, op.m, op.ncols);
}
#endif

// Rows [row0, row0 + rows) of the panel, staged in raw (K columns), into L's panel (ld floats apart) and
// zeros into their mirror above the diagonal block.
__device__ __forceinline__ void copy_panel_rows(const float* raw, const tf32x3::PanelCopy& panel, int row0, int rows,
                                                int K) {
    const size_t b = blockIdx.y;
    float* dst = panel.dst + b * panel.stride;
    const int quads = K / 4;
    for (int idx = threadIdx.x; idx < rows * quads; idx += kLaThreads) {
        const int r = idx / quads, c = 4 * (idx % quads);
        *reinterpret_cast<float4*>(dst + (size_t)(row0 + r) * panel.ld + c) =
            *reinterpret_cast<const float4*>(raw + r * kRawLd + c);
    }
    tf32x3::zero_mirror<4, kLaThreads>(panel.mirror + b * panel.stride, panel.ld, row0, row0 + rows, K);
}

template <int VEC>
__global__ void __launch_bounds__(kLaThreads, 1)
lookahead_kernel(const tf32x3::Product op, const tiled::DiagBlock diag, const tf32x3::PanelCopy panel) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    int ti, tj;
    tf32x3::tile_of_block<true>(blockIdx.x, op.ncols, ti, tj);
    update_tile<VEC>(op, ti, tj, reinterpret_cast<float*>(smem4));
    // The panel's row tile t goes into L from the CTA of tile (t + 1, t), which holds it staged as Q's rows,
    // and only the last one from its diagonal tile's CTA (as P's rows): tile 0's CTA, whose factorization
    // is the step's chain, copies nothing while another tile is there.
    const int last = (op.m - 1) / kTile;
    if (ti == tj + 1 || (ti == tj && ti == last)) {
        const int row0 = tj * kTile, rows = min(kTile, op.m - row0);
        const float* staged = reinterpret_cast<const float*>(smem4) + (ti == tj ? 0 : kRawWords);   // P's or Q's
        copy_panel_rows(staged, panel, row0, rows, op.K);
    }
    if (blockIdx.x == 0) {                               // tile 0 is the next diagonal block of matrix blockIdx.y
        __syncthreads();                                 // its update is written (and visible to this CTA)
        const size_t b = blockIdx.y;
        const float* src = diag.src + b * diag.stride;
        float* dst = diag.dst + b * diag.stride;
        tiled::factor_block<16, 8, true, true>(src, dst, diag.xinv + b * diag.n * diag.n, diag.diag_max + b,
                                               diag.n, diag.ld, diag.halves, reinterpret_cast<float*>(smem4));
    }
#else
    __trap();                                            // launched only where the build targets sm_90a
#endif
}

template <int VEC>
int launch_lookahead(const tf32x3::Product& op, const tiled::DiagBlock& diag, const tf32x3::PanelCopy& panel,
                     int batch) {
    static int granted = 0;
    const cudaError_t err = popkit::allow_dynamic_smem(lookahead_kernel<VEC>, kLaSmemBytes, granted);
    if (err != cudaSuccess) return (int)err;
    lookahead_kernel<VEC><<<dim3(tf32x3::tiles_of<true>(op.m, op.ncols), batch), kLaThreads, kLaSmemBytes>>>(
        op, diag, panel);
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
POPKIT_EXPORT int cholesky_lookahead_step(tf32x3::Product op, tiled::DiagBlock diag, tf32x3::PanelCopy panel,
                                          int batch) {
    if (batch < 1 || op.m < 1 || op.ncols != op.m || diag.n != (op.m < kTile ? op.m : kTile) ||
        diag.src != op.c || diag.dst != op.c || !diag.xinv || !diag.diag_max || op.K < kChunk || op.K > kMaxK ||
        op.K % kChunk != 0 || !panel.dst || !panel.mirror || !tf32x3::aligned16(panel.dst) || panel.ld % 4 ||
        panel.stride % 4)
        return (int)cudaErrorInvalidValue;
    return tf32x3::rows_aligned16(op) ? launch_lookahead<4>(op, diag, panel, batch) : (int)cudaErrorInvalidValue;
}
