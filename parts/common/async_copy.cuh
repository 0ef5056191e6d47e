// Asynchronous global -> shared copies (cp.async, sm_80 and later), shared by every problem's kernels.
//
// A copy is issued and forgotten: the data lands in shared memory while the thread goes on, so a
// kernel keeps several tiles in flight without holding them in registers. Copies are grouped
// (commit_async_group) and waited for by count (wait_async_groups<N>: all but the N newest groups have
// landed, for this thread; a __syncthreads after it makes every thread's copies visible).
#pragma once
#include <cuda_runtime.h>

namespace popkit {

// kVec floats (1 or 4) from global to shared; only the first `bytes` are read, the rest of the
// destination is zero-filled. kVec = 4 needs both addresses 16-byte aligned.
template <int kVec>
__device__ __forceinline__ void copy_async(float* dst, const float* src, int bytes) {
    const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
    static_assert(kVec == 1 || kVec == 4, "cp.async copies 4 or 16 bytes here");
    if constexpr (kVec == 4)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(bytes) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ void commit_async_group() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int kPending>
__device__ __forceinline__ void wait_async_groups() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// A kRows x kCols tile, row r at src + r ld_src, to shared row r at dst + r ld_dst, by every one of the
// CTA's kThreads threads in kVec-float pieces; entries in rows >= rows_valid or columns >= cols_valid
// are zero-filled (and not read). Issued only: commit and wait as above.
template <int kRows, int kCols, int kVec, int kThreads>
__device__ __forceinline__ void copy_tile_async(float* dst, int ld_dst, const float* src, size_t ld_src, int rows_valid,
                                                int cols_valid) {
    constexpr int kPiecesPerRow = kCols / kVec, kPieces = kRows * kPiecesPerRow;
    static_assert(kCols % kVec == 0 && kPieces % kThreads == 0, "the tile splits evenly over the threads");
#pragma unroll 4    // fully unrolled, 4-byte pieces hoist 16+ addresses into registers (spills)
    for (int i = 0; i < kPieces / kThreads; ++i) {
        const int idx = threadIdx.x + i * kThreads, r = idx / kPiecesPerRow, c = (idx % kPiecesPerRow) * kVec;
        const int valid = r < rows_valid ? max(0, min(kVec, cols_valid - c)) : 0;
        copy_async<kVec>(dst + r * ld_dst + c, valid > 0 ? src + r * ld_src + c : src, 4 * valid);
    }
}

// The same copy for full tiles only, with each thread's piece offsets worked out once: a kernel that
// copies many tiles of one shape (a pipeline over a matrix's rows) then pays a base pointer a tile,
// where copy_tile_async recomputes every piece's row, column, bounds and 64-bit address (in
// householder_update.cu that was a third of the loop's instructions; ncu at 20e0644). kVec = 4 only:
// 4-byte pieces would hold 16+ offsets in registers.
template <int kRows, int kCols, int kThreads>
struct FullTileCopy {
    static constexpr int kPiecesPerRow = kCols / 4, kPieces = kRows * kPiecesPerRow / kThreads;
    static_assert(kCols % 4 == 0 && (kRows * kPiecesPerRow) % kThreads == 0, "the tile splits evenly");
    int dst_offset[kPieces], src_offset[kPieces];

    // ld_src * kRows must fit in an int.
    __device__ __forceinline__ FullTileCopy(int ld_dst, int ld_src) {
#pragma unroll
        for (int i = 0; i < kPieces; ++i) {
            const int idx = threadIdx.x + i * kThreads, r = idx / kPiecesPerRow, c = (idx % kPiecesPerRow) * 4;
            dst_offset[i] = r * ld_dst + c;
            src_offset[i] = r * ld_src + c;
        }
    }

    // The tile at src (row r at src + r ld_src) to dst (row r at dst + r ld_dst). Issued only.
    __device__ __forceinline__ void issue(float* dst, const float* src) const {
#pragma unroll
        for (int i = 0; i < kPieces; ++i) copy_async<4>(dst + dst_offset[i], src + src_offset[i], 16);
    }
};

}  // namespace popkit
