// cholesky, the tf32x3 product on Hopper's warpgroup tensor cores (wgmma, sm_90a): C = P Q^T or
// C -= P Q^T, the blocked driver's panel and trailing update (tf32x3.cuh: tiles and modes).
//
// Math: as cholesky_product_mma.cu, x = hi + lo with hi = x rounded to TF32 and lo = x - hi (the
// tensor core truncates it), and C accumulates lo_P hi_Q + hi_P lo_Q + hi_P hi_Q (fp32 accumulate;
// model.tf32x3_product). The sum over k is taken in a permuted order, the same for P and Q: within a
// chunk of 32 columns, k8 step s reads columns {s, 4 + s, ..., 28 + s}, so that one 16-byte load of 4
// consecutive columns feeds 4 steps.
// Launch: one CTA per 64 x 128 half of a 128 x 128 tile of C (grid.z: the half), 128 threads = one
// warpgroup (wgmma m64n128k8, 64 accumulators per thread), three CTAs per SM (168 registers, 64 KiB
// of shared memory). Per chunk of 32 columns of K:
//   - each thread loads its own A fragments of P from global memory (4 x 16 bytes: rows g and g + 8
//     of its warp's 16, columns 4t..4t+3 and 16+4t..16+4t+3) and splits them in registers, so every
//     element of P is split once per CTA;
//   - the CTA loads Q's 128 x 32 chunk (8 x 16 bytes per thread), splits it and stores hi and lo as
//     two planes in the no-swizzle K-major layout wgmma reads (per k8 step: 8-row x 16-byte core
//     matrices, 128 bytes apart along N, 2048 bytes apart along K; a warp's stores cover 32 banks);
//   - the warpgroup issues 4 steps x 3 wgmmas from its registers (A) and the planes (B).
// Planes are double-buffered (2 x 32 KiB): the next chunk's global loads and Q split run while the
// tensor cores work on this one; the three CTAs of an SM cover each other's load latency.
// Why it is fast: the tensor cores read B from shared memory themselves and the split happens once
// per element, where the mma.sync kernel loads and splits every fragment in every warp that reads it
// (~5 instructions per mma, 0.23 issued per cycle: cholesky_product_mma.cu). H200, same run (device
// run 5 of this session's priors entry): 1x8192 7.51 ms against 8.10 for the mma.sync kernel with the
// same epilogue, 1x4096 2.37 against 2.62. Measured and not kept here: two warpgroups per CTA sharing
// the planes (one CTA per SM: slower than mma.sync at 1x8192), and all of K copied up front by
// cp.async into 208 KiB of shared memory (no faster on its own: 1x8192 7.55 ms; cholesky_lookahead.cu
// uses that variant, where its CTAs need 256 threads).
#include "device_utils.cuh"
#include "tf32x3.cuh"
#include "wgmma_tf32.cuh"

namespace {

using tf32x3::kChunk;
using tf32x3::kTile;
using namespace hopper;

constexpr int kWgThreads = 128;                              // one warpgroup: 64 rows of a C tile
constexpr int kWgRows = 64;
constexpr int kWgSmemBytes = 2 * kStageWords * (int)sizeof(float);   // double-buffered: 64 KiB

// The device code exists only in the sm_90a pass (wgmma); elsewhere the kernel body is a trap.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// 16-byte loads of Q per thread and chunk, for NC rows of Q (columns of C) per CTA
template <int NC>
constexpr int kQLoads = NC * kChunk / 4 / kWgThreads;

// 4 consecutive floats of a row (16-byte aligned when VEC == 4), zeros for a row past the matrix.
template <int VEC>
__device__ __forceinline__ float4 load4(const float* src, bool valid) {
    if (!valid) return make_float4(0.f, 0.f, 0.f, 0.f);
    if constexpr (VEC == 4) return *reinterpret_cast<const float4*>(src);
    else return make_float4(src[0], src[1], src[2], src[3]);
}

// Split Q's chunk (this thread's loads) into the hi and lo planes of one stage (its first NC rows).
template <int NC>
__device__ __forceinline__ void store_planes(float* stage, const float4 (&rb)[kQLoads<NC>]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned* hi = reinterpret_cast<unsigned*>(stage);
    unsigned* lo = hi + kPlaneWords;
#pragma unroll
    for (int i = 0; i < kQLoads<NC>; ++i) {
        const int combo = warp * kQLoads<NC> + i, group = combo >> 1, half = combo & 1;   // 8 rows, 4 of 8 quads
        const int base = half * (4 * kTile) + group * 32 + lane;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            unsigned h, l;
            popkit::split_tf32(component(rb[i], s), h, l);
            hi[s * kStepWords + base] = h;
            lo[s * kStepWords + base] = l;
        }
    }
}

// This thread's loads of one chunk: ra (its A fragments of P) and rb (its share of Q's chunk, NC rows).
template <int VEC, int NC>
__device__ __forceinline__ void load_chunk(float4 (&ra)[4], float4 (&rb)[kQLoads<NC>], const float* p, int ldp,
                                           int arow, int m, const float* q, int ldq, int col0, int ncols, int k) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
#pragma unroll
    for (int e = 0; e < 4; ++e) {                       // a0..a3: rows g, g + 8; quads t, t + 4
        const int r = arow + 8 * (e & 1), col = k + 4 * t + 16 * (e >> 1);
        ra[e] = load4<VEC>(p + (r < m ? r * ldp + col : 0), r < m);     // 32-bit offsets: n^2 < 2^31
    }
#pragma unroll
    for (int i = 0; i < kQLoads<NC>; ++i) {
        const int combo = warp * kQLoads<NC> + i, group = combo >> 1, half = combo & 1;
        const int r = col0 + group * 8 + (lane >> 2), col = k + 4 * (half * 4 + t);
        rb[i] = load4<VEC>(q + (r < ncols ? r * ldq + col : 0), r < ncols);
    }
}

// Split this thread's A fragments: step s takes component s of each load.
__device__ __forceinline__ void split_fragments(const float4 (&ra)[4], unsigned (&ah)[4][4], unsigned (&al)[4][4]) {
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int e = 0; e < 4; ++e) popkit::split_tf32(component(ra[e], s), ah[s][e], al[s][e]);
}
#endif

template <int VEC, bool SUBTRACT, bool LOWER, int NC>
__global__ void __launch_bounds__(kWgThreads, 3)
tf32x3_wgmma_kernel(const tf32x3::Product op) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    int ti, tj;
    const int m = op.m, ncols = op.ncols, ldp = op.ldp, ldq = op.ldq;
    tf32x3::tile_of_block<LOWER>(blockIdx.x, ncols, ti, tj);
    const int part = blockIdx.z / (kTile / kWgRows);     // which NC columns of the tile
    const int row0 = ti * kTile + kWgRows * (blockIdx.z % (kTile / kWgRows)), col0 = tj * kTile + NC * part;
    if (row0 >= m || col0 >= ncols) return;              // the lower half of the last row of tiles, or past C
    const float* p = op.p + blockIdx.y * op.sp;
    const float* q = op.q + blockIdx.y * op.sq;
    const int warp = threadIdx.x >> 5, arow = row0 + 16 * warp + ((threadIdx.x & 31) >> 2);

    float acc[1][NC / 8][4] = {};
    float4 ra[4], rb[kQLoads<NC>];
    unsigned ah[4][4], al[4][4];
    const int chunks = op.K / kChunk;
    load_chunk<VEC, NC>(ra, rb, p, ldp, arow, m, q, ldq, col0, ncols, 0);
    store_planes<NC>(smem, rb);
    split_fragments(ra, ah, al);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    for (int kc = 0; kc < chunks; ++kc) {
        const bool more = kc + 1 < chunks;
        if (more) load_chunk<VEC, NC>(ra, rb, p, ldp, arow, m, q, ldq, col0, ncols, (kc + 1) * kChunk);
        const float* stage = smem + (kc & 1) * kStageWords;
        pin(acc[0]);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int s = 0; s < kChunk / 8; ++s) {           // small terms first
            const unsigned long long hi = plane_descriptor(stage + s * kStepWords);
            const unsigned long long lo = plane_descriptor(stage + kPlaneWords + s * kStepWords);
            wgmma_tf32(acc[0], al[s], hi);
            wgmma_tf32(acc[0], ah[s], lo);
            wgmma_tf32(acc[0], ah[s], hi);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        if (more) {                                      // the next planes fill while the tensor cores run
            store_planes<NC>(smem + ((kc + 1) & 1) * kStageWords, rb);
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        pin(acc[0]);
        pin(ah);
        pin(al);
        if (more) split_fragments(ra, ah, al);
        __syncthreads();                                 // the next planes are complete; this stage is free
    }
    const long long batch_offset = blockIdx.y * op.sc;
    tf32x3::store_fragments<VEC, SUBTRACT, LOWER>(acc, op.c_in + batch_offset, op.c + batch_offset, op.ldc,
                                                  row0 + 16 * warp, col0, m, ncols);
    if (!SUBTRACT && op.mirror && part == 0)
        tf32x3::zero_mirror<VEC, kWgThreads>(op.mirror + batch_offset, op.ldc, row0, min(row0 + kWgRows, m), ncols);
#else
    __trap();                                            // launched only where the build targets sm_90a
#endif
}

template <int VEC, bool SUBTRACT, bool LOWER, int NC = kTile>
int launch_wgmma(const tf32x3::Product& op, int batch) {
    static int granted = 0;
    const cudaError_t err =
        popkit::allow_dynamic_smem(tf32x3_wgmma_kernel<VEC, SUBTRACT, LOWER, NC>, kWgSmemBytes, granted);
    if (err != cudaSuccess) return (int)err;
    const dim3 grid(tf32x3::tiles_of<LOWER>(op.m, op.ncols), batch, (kTile / kWgRows) * (kTile / NC));
    tf32x3_wgmma_kernel<VEC, SUBTRACT, LOWER, NC><<<grid, kWgThreads, kWgSmemBytes>>>(op);
    return (int)cudaGetLastError();
}

}  // namespace

// As tf32x3_product_mma (cholesky_product_mma.cu), on wgmma: call it only on a GPU of compute
// capability 9.0 with the build targeting sm_90a (elsewhere the kernel traps).
POPKIT_EXPORT int tf32x3_product_wgmma(tf32x3::Product op, int batch, int mode) {
    if (op.K < kChunk || op.K % kChunk != 0) return (int)cudaErrorInvalidValue;
    const bool vec = tf32x3::rows_aligned16(op);
    if (mode == tf32x3::kPanel)
        return vec ? launch_wgmma<4, false, false>(op, batch) : launch_wgmma<1, false, false>(op, batch);
    if (mode == tf32x3::kPanelSplit)                     // the look-ahead's aligned panels only
        return vec ? launch_wgmma<4, false, false, kTile / 2>(op, batch) : (int)cudaErrorInvalidValue;
    if (mode == tf32x3::kColumn)
        return vec ? launch_wgmma<4, true, false>(op, batch) : launch_wgmma<1, true, false>(op, batch);
    return vec ? launch_wgmma<4, true, true>(op, batch) : launch_wgmma<1, true, true>(op, batch);
}
