// The tf32x3 product's shared pieces, for its two kernels (cholesky_product_mma.cu on any GPU from
// sm_80, cholesky_product_wgmma.cu on sm_90a): the tile a CTA owns and the epilogue that writes (or
// subtracts) a warp's accumulators (the hi + lo split and the mma: common/tensor_core_tf32.cuh).
//
// Both kernels compute C = P Q^T or C = C_in - P Q^T (struct Product) in kTile x kTile tiles of C:
// grid.x runs over every tile, or over the T (T + 1) / 2 tiles on and below the diagonal (LOWER,
// square C), grid.y over the batch.
#pragma once
#include "async_copy.cuh"
#include "device_utils.cuh"
#include "tensor_core_tf32.cuh"

namespace tf32x3 {

constexpr int kTile = 128;                 // C tile edge
constexpr int kChunk = 32;                 // K per stage

// One product of the blocked driver, for every matrix of the batch (batch strides sp, sq, sc in floats):
// C = P Q^T (kPanel, every tile) or C = C_in - P Q^T (kTrailing, lower tiles of a square C). P: m x K
// rows, Q: ncols x K rows, K a multiple of kChunk; C_in has C's layout (C_in == C updates in place).
// mirror (kPanel, may be null): where C's transpose would sit above the diagonal (C element (r, c) ->
// mirror[c * ldc + r]), written with zeros, so the caller need not clear L's upper triangle. Row offsets
// are 32-bit: the caller keeps n^2 < 2^31.
struct Product {
    const float* p; int ldp; long long sp;
    const float* q; int ldq; long long sq;
    const float* c_in; float* c; int ldc; long long sc;
    float* mirror;
    int m, ncols, K;
};

// Where the look-ahead copies a panel that was computed out of place (cholesky_blocked.cu): L's panel rows
// at dst, their mirror above the diagonal block at mirror, ld floats apart, batch stride `stride`.
struct PanelCopy {
    float* dst; float* mirror;
    int ld; long long stride;
};

// Tile number x's (ti, tj) in C: LOWER numbers the tiles on and below the diagonal row by row,
// x = ti (ti + 1) / 2 + tj with tj <= ti; otherwise row-major over every tile.
template <bool LOWER>
__device__ __forceinline__ void tile_of_block(int x, int ncols, int& ti, int& tj) {
    if constexpr (LOWER) {
        ti = (int)((sqrtf(8.f * x + 1.f) - 1.f) * 0.5f);
        while ((ti + 1) * (ti + 2) / 2 <= x) ++ti;
        while (ti * (ti + 1) / 2 > x) --ti;
        tj = x - ti * (ti + 1) / 2;
    } else {
        const int col_tiles = (ncols + kTile - 1) / kTile;
        ti = x / col_tiles;
        tj = x % col_tiles;
    }
}

// Stage columns [k, k + kChunk) of rows [row0, row0 + kTile) of M (leading dimension ld; rows >= rows
// read as zeros) into shared rows of LDS floats, by THREADS threads.
template <int VEC, int THREADS, int LDS>
__device__ __forceinline__ void stage_rows(float* s, const float* M, int ld, int row0, int rows, int k) {
    constexpr int kPerRow = kChunk / VEC;
#pragma unroll
    for (int i = 0; i < kTile * kPerRow / THREADS; ++i) {
        const int idx = threadIdx.x + THREADS * i;
        const int r = idx / kPerRow, c = (idx % kPerRow) * VEC;
        const bool valid = row0 + r < rows;
        const int offset = valid ? (row0 + r) * ld + k + c : 0;    // 32-bit: the caller keeps n^2 < 2^31
        popkit::copy_async<VEC>(s + r * LDS + c, M + offset, valid ? VEC * 4 : 0);    // zeros past the matrix
    }
}

// Grid of a product launch: every tile of C, or the lower ones.
template <bool LOWER>
inline int tiles_of(int m, int ncols) {
    const int row_tiles = (m + kTile - 1) / kTile, col_tiles = (ncols + kTile - 1) / kTile;
    return LOWER ? row_tiles * (row_tiles + 1) / 2 : row_tiles * col_tiles;
}

// Which of a lane's two columns (col, col + 1) in row r a store touches: none, one or both, and whether
// both go as one 8-byte access (VEC == 4: C's rows are 16-byte aligned and col is even).
struct PairMask { bool first, second, paired; };

template <int VEC, bool LOWER>
__device__ __forceinline__ PairMask pair_mask(int r, int col, int m, int ncols) {
    const bool row_ok = r < m;
    const bool first = row_ok && col < ncols && (!LOWER || col <= r);
    const bool second = row_ok && col + 1 < ncols && (!LOWER || col + 1 <= r);
    return {first, second, VEC == 4 && second};
}

// Write a warp's accumulators in the m16n8 fragment layout (acc[mi][ni]: rows row0 + 16 mi + g and
// + 8, columns col0 + 8 ni + 2 t and + 1; g = lane / 4, t = lane % 4) into C, or C_in minus them;
// rows >= m and columns >= ncols are skipped, and with LOWER so is everything above the diagonal.
// SUBTRACT reads all of a row pair's old values before it writes any: the compiler cannot prove that
// a store and a later load of C differ, so a load-subtract-store loop pays a full memory round trip
// per element.
template <int VEC, bool SUBTRACT, bool LOWER, int MI, int NI>
__device__ __forceinline__ void store_fragments(const float (&acc)[MI][NI][4], const float* c_in, float* c, int ldc,
                                                int row0, int col0, int m, int ncols) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
        float2 old[2][NI];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = row0 + mi * 16 + g + 8 * half;
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                const int col = col0 + ni * 8 + 2 * t;
                const PairMask mask = pair_mask<VEC, LOWER>(r, col, m, ncols);
                const float* src = c_in + (size_t)r * ldc + col;
                old[half][ni] = make_float2(0.f, 0.f);
                if (!SUBTRACT) continue;
                if (mask.paired) {
                    old[half][ni] = *reinterpret_cast<const float2*>(src);
                } else {
                    if (mask.first) old[half][ni].x = src[0];
                    if (mask.second) old[half][ni].y = src[1];
                }
            }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = row0 + mi * 16 + g + 8 * half;
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                const int col = col0 + ni * 8 + 2 * t;
                const PairMask mask = pair_mask<VEC, LOWER>(r, col, m, ncols);
                float* dst = c + (size_t)r * ldc + col;
                const float2 out = SUBTRACT ? make_float2(old[half][ni].x - acc[mi][ni][2 * half],
                                                          old[half][ni].y - acc[mi][ni][2 * half + 1])
                                            : make_float2(acc[mi][ni][2 * half], acc[mi][ni][2 * half + 1]);
                if (mask.paired) {
                    *reinterpret_cast<float2*>(dst) = out;
                } else {
                    if (mask.first) dst[0] = out.x;
                    if (mask.second) dst[1] = out.y;
                }
            }
        }
    }
}

// Zero this CTA's share of a panel's mirror: mirror[c * ldc + r] for c < ncols and r in [row0, row_end),
// by THREADS threads, 16 bytes per store when VEC == 4 (rows of the mirror start 16-byte aligned).
template <int VEC, int THREADS>
__device__ __forceinline__ void zero_mirror(float* mirror, int ldc, int row0, int row_end, int ncols) {
    const int quads = (row_end - row0 + 3) / 4;
    for (int idx = threadIdx.x; idx < ncols * quads; idx += THREADS) {
        const int c = idx / quads, r = row0 + 4 * (idx % quads);
        float* dst = mirror + (size_t)c * ldc + r;
        if (VEC == 4 && r + 3 < row_end) {
            *reinterpret_cast<float4*>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
        } else {
            for (int e = 0; e < 4 && r + e < row_end; ++e) dst[e] = 0.f;
        }
    }
}

// The products the blocked driver runs (struct Product): the panel, the trailing update, and (for the
// look-ahead) one block column of the trailing update, C = C_in - P Q^T over every tile; kPanelSplit is
// the panel with each 128 x 128 tile of C shared by four CTAs instead of two (wgmma only: more CTAs
// where a batch-1 panel leaves most SMs idle).
enum Mode { kPanel = 0, kTrailing = 1, kColumn = 2, kPanelSplit = 3 };

inline bool aligned16(const void* ptr) { return ((size_t)ptr & 15) == 0; }

// Whether every row of P, Q, C, C_in and the mirror starts 16-byte aligned (the kernels' VEC = 4 path).
inline bool rows_aligned16(const Product& op) {
    return aligned16(op.p) && aligned16(op.q) && aligned16(op.c) && aligned16(op.c_in) && aligned16(op.mirror) &&
           op.ldp % 4 == 0 && op.ldq % 4 == 0 && op.ldc % 4 == 0 && op.sp % 4 == 0 && op.sq % 4 == 0 &&
           op.sc % 4 == 0;
}

}  // namespace tf32x3
