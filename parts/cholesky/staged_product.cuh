// The staged tile product (sm_90a): one 128 x 128 tile of C = P Q^T or C = C_in - P Q^T computed by a
// CTA of 256 threads, as a device function, for the kernels that run it as one of their roles
// (cholesky_lookahead.cu, cholesky_dataflow.cu).
//
// Math: tf32x3 as in cholesky_product_wgmma.cu (model.tf32x3_product): x = hi + lo, C accumulates
// lo_P hi_Q + hi_P lo_Q + hi_P hi_Q in fp32 on TF32 tensor cores.
// Shape: two warpgroups of 64 rows each (wgmma m64n128k8). All of the tile's P and Q rows (K <= 128)
// are copied into shared memory by cp.async.cg (L2, never a stale L1 line: other CTAs may have written
// them) at the start, one group per chunk of 32 columns, so every global load is in flight at once
// (rows padded to 144 floats: 16-byte reads by 8 lanes over two rows hit distinct banks); per chunk
// each thread splits its own A fragments into registers and the CTA splits Q's chunk into hi/lo planes
// (wgmma_tf32.cuh), double-buffered so that one chunk's split runs under the previous chunk's wgmmas.
// 208 KiB of dynamic shared memory (one CTA per SM). On its own, as a trailing-update kernel, it
// matched cholesky_product_wgmma.cu (H200: 1x8192 7.55 against 7.51 ms).
#pragma once
#include "device_utils.cuh"
#include "tf32x3.cuh"
#include "wgmma_tf32.cuh"

namespace staged {

using tf32x3::kChunk;
using tf32x3::kTile;

constexpr int kThreads = 256;                                // 2 warpgroups (and tiled_block's 16 x 16)
constexpr int kMaxK = 128;                                   // the driver's block
constexpr int kRawLd = kMaxK + 16;                           // padded raw row (floats)
constexpr int kRawWords = kTile * kRawLd;                    // one operand's raw rows
constexpr int kSmemBytes = (2 * kRawWords + 2 * hopper::kStageWords) * (int)sizeof(float);   // 208 KiB

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int kMaxChunks = kMaxK / kChunk;                   // cp.async groups, one per chunk

// Split Q's chunk kc from the raw rows into the hi and lo planes of one stage: each warp covers 8 rows
// x 4 of the 8 column quads per read, and component s of a quad goes to k8 step s.
__device__ __forceinline__ void split_planes(float* stage, const float* raw_q, int kc) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned* hi = reinterpret_cast<unsigned*>(stage);
    unsigned* lo = hi + hopper::kPlaneWords;
    constexpr int kReads = kTile * kChunk / 4 / kThreads;
#pragma unroll
    for (int i = 0; i < kReads; ++i) {
        const int combo = warp * kReads + i, group = combo >> 1, half = combo & 1;
        const int row = group * 8 + (lane >> 2), quad = half * 4 + (lane & 3);
        const float4 v = *reinterpret_cast<const float4*>(raw_q + row * kRawLd + kc * kChunk + 4 * quad);
        const int base = half * (4 * kTile) + group * 32 + lane;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            unsigned h, l;
            tf32x3::split_tf32(hopper::component(v, s), h, l);
            hi[s * hopper::kStepWords + base] = h;
            lo[s * hopper::kStepWords + base] = l;
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
        for (int e = 0; e < 4; ++e) tf32x3::split_tf32(hopper::component(v[e], s), ah[s][e], al[s][e]);
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

// The tile of C at (row0, col0) of one matrix: C = P Q^T, or with SUBTRACT C = C_in - P Q^T; P's rows
// row0.. and Q's rows col0.. (K columns each, K <= 128 a multiple of 32; rows >= m, resp. >= ncols, read
// as zeros and C's are skipped; with LOWER so are C's entries above the diagonal). Pointers and leading
// dimensions as tf32x3::Product's, for one matrix; rows 16-byte aligned (VEC = 4). smem: kSmemBytes.
template <bool SUBTRACT, bool LOWER>
__device__ __forceinline__ void product_tile(const float* p, int ldp, const float* q, int ldq, const float* c_in,
                                             float* c, int ldc, int row0, int col0, int m, int ncols, int K,
                                             float* smem) {
    float* raw_p = smem;
    float* raw_q = raw_p + kRawWords;
    float* planes = raw_q + kRawWords;
    const int chunks = K / kChunk;
#pragma unroll
    for (int kc = 0; kc < kMaxChunks; ++kc) {            // every load in flight; one group per chunk
        if (kc < chunks) {
            tf32x3::stage_rows<4, kThreads, kRawLd>(raw_p + kc * kChunk, p, ldp, row0, m, kc * kChunk);
            tf32x3::stage_rows<4, kThreads, kRawLd>(raw_q + kc * kChunk, q, ldq, col0, ncols, kc * kChunk);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }

    float acc[1][16][4] = {};
    unsigned ah[2][4][4], al[2][4][4];                   // this chunk's A fragments and the next's
    hopper::pin(acc[0]);                                 // the wgmmas chain on acc; touch it only outside
#pragma unroll
    for (int kc = 0; kc < kMaxChunks; ++kc) {
        if (kc >= chunks) break;
        cp_async_wait(kMaxChunks - 1 - kc);              // chunk kc has landed (groups complete in order)
        __syncthreads();                                 // ... for every thread; chunk kc - 2's wgmmas are done
        float* stage = planes + (kc & 1) * hopper::kStageWords;
        split_planes(stage, raw_q, kc);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        split_fragments(raw_p, kc, ah[kc & 1], al[kc & 1]);
        __syncthreads();                                 // the planes are complete
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int s = 0; s < kChunk / 8; ++s) {           // small terms first
            const unsigned long long hi = hopper::plane_descriptor(stage + s * hopper::kStepWords);
            const unsigned long long lo = hopper::plane_descriptor(stage + hopper::kPlaneWords + s * hopper::kStepWords);
            hopper::wgmma_tf32(acc[0], al[kc & 1][s], hi);
            hopper::wgmma_tf32(acc[0], ah[kc & 1][s], lo);
            hopper::wgmma_tf32(acc[0], ah[kc & 1][s], hi);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");   // chunk kc - 1's are done
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    hopper::pin(acc[0]);
    tf32x3::store_fragments<4, SUBTRACT, LOWER>(acc, c_in, c, ldc, row0 + 16 * (threadIdx.x >> 5), col0, m, ncols);
}
#endif

}  // namespace staged
