// cholesky, the tf32x3 product on warp-level tensor cores (mma.sync, any GPU from sm_80): C = P Q^T
// or C -= P Q^T, the blocked driver's panel and trailing update (tf32x3.cuh: tiles and modes).
//
// Math: every operand is split as x = hi + lo, hi = x rounded to TF32 (10 mantissa bits) and lo =
// x - hi (which the tensor core truncates to TF32); a tile accumulates lo_P hi_Q + hi_P lo_Q +
// hi_P hi_Q (fp32 accumulate): ~21 bits per product, the dropped lo lo term is ~2^-22 relative
// (model.tf32x3_product). Plain TF32 (~11 bits) breaks the lowrank family (docs/priors.md).
// Launch: one CTA per 128 x 128 tile of C, 256 threads = 8 warps as 2 x 4, each warp 64 x 32 of C
// (4 x 4 mma m16n8k8 tiles, 64 accumulators). K runs in chunks of 32 staged by cp.async into
// double-buffered shared memory (2 x 2 x 128 x 36 floats, 72 KiB): rows padded to 36 floats so
// that each fragment read (8 rows x 4 columns) hits 32 distinct banks; every warp splits the
// fragments it reads.
// Why it is fast: tensor cores at ~fp32 accuracy without materialized split operands. Two CTAs per
// SM (128 registers, none spilled on sm_90a) hide each other's fragment latency. Its limit (H200,
// ncu at 1d92946): ~5 instructions per mma (the split and the fragment loads repeat for every warp
// that reads an element), 0.23 issued per cycle per scheduler, stalls on shared-memory scoreboards;
// on sm_90a cholesky_product_wgmma.cu replaces it.
#include "device_utils.cuh"
#include "tf32x3.cuh"

namespace {

using tf32x3::kChunk;
using tf32x3::kTile;

constexpr int kMmaLds = kChunk + 4;                             // padded shared row (floats)
constexpr int kMmaThreads = 256;
constexpr int kMmaStageFloats = 2 * kTile * kMmaLds;             // P and Q chunks
constexpr int kMmaSmemBytes = 2 * kMmaStageFloats * (int)sizeof(float);  // double-buffered

// One k8 step's operands of a warp's 64 x 32 block: A rows (4 m16 tiles) from sP, B rows (4 n8 tiles)
// from sQ, both already offset by the lane's (g, t); kk: the step's first column.
__device__ __forceinline__ void load_fragments(float (&fa)[4][4], float (&fb)[4][2], const float* sP,
                                               const float* sQ, int kk) {
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
        const float* a = sP + mi * 16 * kMmaLds + kk;
        fa[mi][0] = a[0];
        fa[mi][1] = a[8 * kMmaLds];
        fa[mi][2] = a[4];
        fa[mi][3] = a[8 * kMmaLds + 4];
    }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
        const float* b = sQ + ni * 8 * kMmaLds + kk;
        fb[ni][0] = b[0];
        fb[ni][1] = b[4];
    }
}

// acc += A B^T for one k8 step, each operand split into TF32 hi + lo: lo hi + hi lo + hi hi.
__device__ __forceinline__ void multiply_fragments(float (&acc)[4][4][4], const float (&fa)[4][4],
                                                   const float (&fb)[4][2]) {
    unsigned bh[4][2], bl[4][2];
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) popkit::split_tf32(fb[ni][e], bh[ni][e], bl[ni][e]);
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
        unsigned ah[4], al[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) popkit::split_tf32(fa[mi][e], ah[e], al[e]);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) popkit::mma_tf32x3(acc[mi][ni], ah, al, bh[ni], bl[ni]);
    }
}

// Two CTAs per SM (128 registers) beat one CTA: 1x8192 11.1 vs 13.8 ms, 1x4096 3.23 vs 3.40 (H200,
// 250ac48 variants); one CTA's 8 warps cannot hide the fragment latency.
template <int VEC, bool SUBTRACT, bool LOWER>
__global__ void __launch_bounds__(kMmaThreads, 2)
tf32x3_mma_kernel(const tf32x3::Product op) {
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    int ti, tj;
    const int m = op.m, ncols = op.ncols, ldp = op.ldp, ldq = op.ldq;
    tf32x3::tile_of_block<LOWER>(blockIdx.x, ncols, ti, tj);
    const int row0 = ti * kTile, col0 = tj * kTile;
    const float* p = op.p + blockIdx.y * op.sp;
    const float* q = op.q + blockIdx.y * op.sq;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;               // the mma fragment coordinates
    const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;
    float acc[4][4][4] = {};

    const int chunks = op.K / kChunk;
    tf32x3::stage_rows<VEC, kMmaThreads, kMmaLds>(smem, p, ldp, row0, m, 0);
    tf32x3::stage_rows<VEC, kMmaThreads, kMmaLds>(smem + kTile * kMmaLds, q, ldq, col0, ncols, 0);
    popkit::commit_async_group();
    for (int kc = 0; kc < chunks; ++kc) {
        if (kc + 1 < chunks) {                           // the next chunk loads while this one computes
            float* next = smem + ((kc + 1) & 1) * kMmaStageFloats;
            const int k = (kc + 1) * kChunk;
            tf32x3::stage_rows<VEC, kMmaThreads, kMmaLds>(next, p, ldp, row0, m, k);
            tf32x3::stage_rows<VEC, kMmaThreads, kMmaLds>(next + kTile * kMmaLds, q, ldq, col0, ncols, k);
        }
        popkit::commit_async_group();
        popkit::wait_async_groups<1>();
        __syncthreads();
        const float* sP = smem + (kc & 1) * kMmaStageFloats + (wm + g) * kMmaLds + t;
        const float* sQ = smem + (kc & 1) * kMmaStageFloats + (kTile + wn + g) * kMmaLds + t;
#pragma unroll 1                                 // unrolled or with the next step's fragments
        for (int s = 0; s < kChunk / 8; ++s) {           // prefetched, ptxas spills at 128 registers
            float fa[4][4], fb[4][2];
            load_fragments(fa, fb, sP, sQ, 8 * s);
            multiply_fragments(acc, fa, fb);
        }
        __syncthreads();                                 // this buffer is overwritten two chunks on
    }
    const long long batch_offset = blockIdx.y * op.sc;
    tf32x3::store_fragments<VEC, SUBTRACT, LOWER>(acc, op.c_in + batch_offset, op.c + batch_offset, op.ldc, row0 + wm,
                                                  col0 + wn, m, ncols);
    if (!SUBTRACT && op.mirror)
        tf32x3::zero_mirror<VEC, kMmaThreads>(op.mirror + batch_offset, op.ldc, row0, min(row0 + kTile, m), ncols);
}

template <int VEC, bool SUBTRACT, bool LOWER>
int launch_mma(const tf32x3::Product& op, int batch) {
    static int granted = 0;
    const cudaError_t err = popkit::allow_dynamic_smem(tf32x3_mma_kernel<VEC, SUBTRACT, LOWER>, kMmaSmemBytes, granted);
    if (err != cudaSuccess) return (int)err;
    tf32x3_mma_kernel<VEC, SUBTRACT, LOWER>
        <<<dim3(tf32x3::tiles_of<LOWER>(op.m, op.ncols), batch), kMmaThreads, kMmaSmemBytes>>>(op);
    return (int)cudaGetLastError();
}

}  // namespace

// The product `op` (tf32x3.cuh) for `batch` matrices; mode: tf32x3::kPanel or kTrailing (kColumn, the
// look-ahead's, is wgmma-only: not instantiated here, to keep the cold compile short).
POPKIT_EXPORT int tf32x3_product_mma(tf32x3::Product op, int batch, int mode) {
    if (op.K < kChunk || op.K % kChunk != 0) return (int)cudaErrorInvalidValue;
    const bool vec = tf32x3::rows_aligned16(op);
    if (mode == tf32x3::kPanel)
        return vec ? launch_mma<4, false, false>(op, batch) : launch_mma<1, false, false>(op, batch);
    if (mode == tf32x3::kColumn) return (int)cudaErrorInvalidValue;
    return vec ? launch_mma<4, true, true>(op, batch) : launch_mma<1, true, true>(op, batch);
}
