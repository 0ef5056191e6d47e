// qr_v2, blocked route: apply one panel's block reflector to the trailing columns, in one launch, on
// TF32 tensor cores at ~fp32 accuracy (tf32x3, common/tensor_core_tf32.cuh).
//
// With the panel's Vt (w x m, row c = v_c with its zeros and unit made explicit) and T (w x w, upper,
// H_0 ... H_{w-1} = I - V T V^T) from householder_panel.cu, the trailing block C = A[k0:n, k0+w:n]
// (m = n - k0 rows, nc = n - k0 - w columns, leading dimension n) becomes Q_panel^T C:
//   W0 = Vt C            (w x nc, contraction over the m rows)
//   W  = T^T W0          (w x nc, contraction over the w reflectors)
//   C -= V W             (m x nc, contraction over the w reflectors)
// model.apply_block_reflector_tf32x3 is the same arithmetic: every product splits its operands
// x = hi + lo and sums lo hi + hi lo + hi hi.
//
// Launch: one CTA of 128 threads (4 warps) per 64-column tile of C and matrix: grid (ceil(nc / 64), batch),
// three CTAs an SM (four on a row split). The CTA walks C's rows twice in chunks of 32, phase 1 for W0
// (each warp owns 16 columns of W0: w / 16 m16 tiles x 2 n8 tiles) and phase 2 for C -= V W (each warp 16
// rows x 32 columns: 4 n8 tiles). Both phases read the same chunks (C's 32 x 64 and Vt's w x 32), phase 2
// last first, so one pipeline of 2 ceil(m / 32) cp.async copies feeds them, kStages chunks deep: the copies
// run ahead across the phase boundary while W = T^T W0 is formed. Phase 2 takes C's old values from the
// chunk in shared memory and writes the result straight to global memory.
// Row split (S = 2, 4 or 8 CTAs a tile, a thread block cluster): where the batch's tiles leave SMs idle
// (60x1024, 8x2048, 2x4096: a few hundred CTAs or fewer, each walking thousands of rows), the S CTAs of a
// tile take consecutive ranges of its chunks; each forms its partial W0, the cluster adds the S partials
// through distributed shared memory (every CTA in the same order, so all hold the same W0 to the bit),
// and each applies C -= V W to its own rows. The sum's order differs from the one-CTA walk only by
// where the chunks' fp32 partials are added (the model's products are exact sums of the same terms).
// Shared rows are padded (72, 36 and 40 floats) so that fragment reads hit 32 distinct banks
// (phase 2's reads of V are 2-way: the two phases read V's chunk transposed to each other).
// Why it is fast: one launch instead of three, W0 and W never leave the chip, C is read twice (the
// second time mostly from L2) and written once, the copies keep ~27 KB a CTA in flight without
// registers (an earlier version that loaded through registers and read C's old values with plain
// loads stalled on them: 84% of its cycles, 4.2x slower than cuBLAS at 640x512), and the products
// run on tensor cores where cuBLAS's batched SGEMMs of K = 32 or M = 32 run on SIMT units.
#include <cooperative_groups.h>

#include "async_copy.cuh"
#include "device_utils.cuh"
#include "launch.cuh"
#include "tensor_core_tf32.cuh"

namespace {

constexpr int kUpdateThreads = 128;
constexpr int kTileCols = 64;               // columns of C per CTA
constexpr int kChunkRows = 32;              // rows of C per pipeline chunk (the K of W0 = Vt C)
constexpr int kMaxStages = 3;               // chunks in shared memory: one computed, the rest in flight
// A one-CTA tile keeps two chunks in flight (three CTAs an SM); a row split's CTAs keep one, so that four
// fit an SM: its launches are the small ones (run 31d: 8x2048 0.957x, 40x352 0.97x with two stages
// everywhere, 640x512 1.006x).
__host__ __device__ constexpr int pipeline_stages(int S) { return S > 1 ? 2 : 3; }
constexpr int kLdC = kTileCols + 8;         // 72: reads (row t, column g) hit banks 8t + g
constexpr int kLdV = kChunkRows + 4;        // 36: reads (row g, column t) hit banks 4g + t
constexpr int kLdT = 40;                    // reads (row t, column g) hit banks 8t + g

template <int W>
struct Chunk {
    float c[kChunkRows][kLdC];              // C's rows r0 .. r0 + 31, the CTA's 64 columns
    float v[W][kLdV];                       // Vt's columns r0 .. r0 + 31
};

template <int W>
struct UpdateSmem {
    unsigned wh[W][kLdC];                   // W = T^T W0 split into TF32 hi ...
    union {                                 // ... and lo, written over W0 (each warp its own columns)
        float w0[W][kLdC];
        unsigned wl[W][kLdC];
    };
    float t[W][kLdT];                       // T, zero below the diagonal
    Chunk<W> chunk[kMaxStages];             // last: a launch with fewer stages allocates less
};

template <int W>
constexpr int update_smem_bytes(int stages) {
    return (int)(sizeof(UpdateSmem<W>) - (kMaxStages - stages) * sizeof(Chunk<W>));
}

__device__ __forceinline__ void split4(const float (&x)[4], unsigned (&hi)[4], unsigned (&lo)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) popkit::split_tf32(x[e], hi[e], lo[e]);
}

__device__ __forceinline__ void split2(float x0, float x1, unsigned (&hi)[2], unsigned (&lo)[2]) {
    popkit::split_tf32(x0, hi[0], lo[0]);
    popkit::split_tf32(x1, hi[1], lo[1]);
}

// acc[mi][q] += A B for the warp's 16 columns (warp * 16 + q * 8 ..): A is W x K, entry (i, k) given by
// a(i, k), B the rows 0 .. K-1 of a shared tile b; every product tf32x3.
template <int W, int K, typename EntryOfA>
__device__ __forceinline__ void warp_product(float (&acc)[W / 16][2][4], EntryOfA a, const float (*b)[kLdC], int warp,
                                             int g, int t) {
#pragma unroll
    for (int kk = 0; kk < K; kk += 8) {
        unsigned bh[2][2], bl[2][2];
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const int col = warp * 16 + q * 8 + g;
            split2(b[kk + t][col], b[kk + t + 4][col], bh[q], bl[q]);
        }
#pragma unroll
        for (int mi = 0; mi < W / 16; ++mi) {
            const float fa[4] = {a(mi * 16 + g, kk + t), a(mi * 16 + g + 8, kk + t), a(mi * 16 + g, kk + t + 4),
                                 a(mi * 16 + g + 8, kk + t + 4)};
            unsigned ah[4], al[4];
            split4(fa, ah, al);
#pragma unroll
            for (int q = 0; q < 2; ++q) popkit::mma_tf32x3(acc[mi][q], ah, al, bh[q], bl[q]);
        }
    }
}

// f(mi, q, e, row, col) for each entry acc[mi][q][e] this thread holds of a W x 64 product (W0 or W):
// warp `warp` owns columns warp * 16 .., in the m16n8 accumulator layout (row g or g + 8 of an m16
// tile, columns 2t and 2t + 1 of an n8 tile).
template <int W, typename EntryFn>
__device__ __forceinline__ void for_each_entry(int warp, int g, int t, EntryFn f) {
#pragma unroll
    for (int mi = 0; mi < W / 16; ++mi)
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
            for (int e = 0; e < 4; ++e) f(mi, q, e, mi * 16 + g + 8 * (e >> 1), warp * 16 + q * 8 + 2 * t + (e & 1));
}

// Phase 1 on one chunk: acc[mi][q] (W0's rows mi*16.., columns warp*16 + q*8..) += Vt_chunk C_chunk.
// The chunk's products go to a fresh accumulator, added to acc in fp32: the tensor core's own fp32
// accumulation truncates, so summing all m rows inside it let the error grow with m (linearly: a bias),
// 2.4e-5 of C at m = 2048 against cuBLAS's 2.2e-6.
template <int W>
__device__ __forceinline__ void accumulate_w0(float (&acc)[W / 16][2][4], const Chunk<W>& ch, int warp, int g, int t) {
    float part[W / 16][2][4] = {};
    warp_product<W, kChunkRows>(part, [&](int i, int k) { return ch.v[i][k]; }, ch.c, warp, g, t);
    for_each_entry<W>(warp, g, t, [&](int mi, int q, int e, int, int) { acc[mi][q][e] += part[mi][q][e]; });
}

// Between the phases, each warp on its own 16 columns: W0 to shared memory, W = T^T W0 on tensor
// cores, W split into s.wh / s.wl. The caller's __syncthreads then publishes W to every warp.
template <int W>
__device__ __forceinline__ void form_w(UpdateSmem<W>& s, const float (&acc)[W / 16][2][4], int warp, int g, int t) {
    for_each_entry<W>(warp, g, t, [&](int mi, int q, int e, int row, int col) { s.w0[row][col] = acc[mi][q][e]; });
    __syncwarp();
    float w[W / 16][2][4] = {};
    warp_product<W, W>(w, [&](int i, int k) { return s.t[k][i]; }, s.w0, warp, g, t);     // A = T^T
    __syncwarp();                                   // every lane has read W0 before wl overwrites it
    for_each_entry<W>(warp, g, t, [&](int mi, int q, int e, int row, int col) {
        popkit::split_tf32(w[mi][q][e], s.wh[row][col], s.wl[row][col]);
    });
}

// Phase 2 on one chunk: C's rows r0 + wr*16 .., columns j0 + wc*32 .. become old - V_chunk W.
template <int W, int kVec>
__device__ __forceinline__ void subtract_vw(const UpdateSmem<W>& s, const Chunk<W>& ch, float* C, int ldc, int m, int nc,
                                           int r0, int j0, int wr, int wc, int g, int t) {
    float acc[4][4] = {};
#pragma unroll
    for (int kk = 0; kk < W; kk += 8) {           // A = V: A[row][k] = Vt[k][row]
        const float fa[4] = {ch.v[kk + t][wr * 16 + g], ch.v[kk + t][wr * 16 + g + 8],
                             ch.v[kk + t + 4][wr * 16 + g], ch.v[kk + t + 4][wr * 16 + g + 8]};
        unsigned ah[4], al[4];
        split4(fa, ah, al);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const int col = wc * 32 + ni * 8 + g;
            const unsigned bh[2] = {s.wh[kk + t][col], s.wh[kk + t + 4][col]};
            const unsigned bl[2] = {s.wl[kk + t][col], s.wl[kk + t + 4][col]};
            popkit::mma_tf32x3(acc[ni], ah, al, bh, bl);
        }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int rl = wr * 16 + g + 8 * half, r = r0 + rl;
        if (r >= m) continue;
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const int cl = wc * 32 + ni * 8 + 2 * t, col = j0 + cl;
            const float2 old = *reinterpret_cast<const float2*>(&ch.c[rl][cl]);
            const float x0 = old.x - acc[ni][2 * half], x1 = old.y - acc[ni][2 * half + 1];
            float* out = C + (size_t)r * ldc + col;
            if (kVec == 4 && col + 1 < nc) {       // ldc % 4 == 0 and col even: 8-byte aligned
                *reinterpret_cast<float2*>(out) = make_float2(x0, x1);
            } else {
                if (col < nc) out[0] = x0;
                if (col + 1 < nc) out[1] = x1;
            }
        }
    }
}

// After phase 1 on a row split: acc becomes the sum of the S CTAs' partials of W0, added in rank order.
template <int W, int S>
__device__ __forceinline__ void sum_w0_over_cluster(UpdateSmem<W>& s, float (&acc)[W / 16][2][4], int warp, int g,
                                                    int t) {
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    for_each_entry<W>(warp, g, t, [&](int mi, int q, int e, int row, int col) { s.w0[row][col] = acc[mi][q][e]; });
    cluster.sync();                                 // every partial written
    for_each_entry<W>(warp, g, t, [&](int mi, int q, int e, int row, int col) {
        float sum = 0.f;
        for (int r = 0; r < S; ++r) sum += *cluster.map_shared_rank(&s.w0[row][col], r);
        acc[mi][q][e] = sum;
    });
    cluster.sync();                                 // every partial read: form_w may overwrite s.w0
}

// The update of one 64-column tile (tile) of one matrix by the CTA of rank `rank` among the S that
// split its rows (S = 1: the whole tile).
// kVec = 4: C, Vt, ldc, stride and m allow 16-byte copies; 1 otherwise.
template <int W, int kVec, int S>
__device__ __forceinline__ void update_tile(float* __restrict__ Cs, int ldc, int stride, const float* __restrict__ Vt,
                                            const float* __restrict__ T, int m, int nc, int tile, int rank) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    UpdateSmem<W>& s = *reinterpret_cast<UpdateSmem<W>*>(smem_raw);
    constexpr int kStages = pipeline_stages(S);
    const int j0 = tile * kTileCols;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    float* C = Cs + (size_t)blockIdx.y * stride;
    const float* V = Vt + (size_t)blockIdx.y * W * m;
    const float* Tb = T + (size_t)blockIdx.y * W * W;

    // This CTA's chunks: first .. first + chunks - 1 (none where S exceeds the tile's chunks).
    const int all_chunks = (m + kChunkRows - 1) / kChunkRows, per_rank = (all_chunks + S - 1) / S;
    const int first = min(rank * per_rank, all_chunks), chunks = min(all_chunks - first, per_rank);
    const int copies = 2 * chunks;
    // Copy k: chunk first + k into stage k % kStages for phase 1 (k < chunks), then the chunks again
    // last first for phase 2: the chunks phase 1 read last are the likeliest still in L2.
    auto chunk_of = [&](int k) { return first + (k < chunks ? k : copies - 1 - k); };
    // Full chunks of a full-width tile (all but the last chunk, in all but the last tile) by offsets
    // worked out once; the rest piece by piece with bounds.
    const popkit::FullTileCopy<kChunkRows, kTileCols, kUpdateThreads> copy_c(kLdC, ldc);
    const popkit::FullTileCopy<W, kChunkRows, kUpdateThreads> copy_v(kLdV, m);
    const bool full_width = kVec == 4 && j0 + kTileCols <= nc;
    auto issue = [&](int k) {
        if (k < copies) {
            const int r0 = chunk_of(k) * kChunkRows;
            Chunk<W>& ch = s.chunk[k % kStages];
            if (full_width && r0 + kChunkRows <= m) {
                copy_c.issue(&ch.c[0][0], C + (size_t)r0 * ldc + j0);
                copy_v.issue(&ch.v[0][0], V + r0);
            } else {
                popkit::copy_tile_async<kChunkRows, kTileCols, kVec, kUpdateThreads>(
                    &ch.c[0][0], kLdC, C + (size_t)r0 * ldc + j0, ldc, m - r0, nc - j0);
                popkit::copy_tile_async<W, kChunkRows, kVec, kUpdateThreads>(&ch.v[0][0], kLdV, V + r0, m, W,
                                                                             m - r0);
            }
        }
        popkit::commit_async_group();               // empty past the end: the group count stays regular
    };
    // Copy k has landed (everyone's part) and stage (k - 1) % kStages is free for copy k + kStages - 1.
    auto next_chunk = [&](int k) -> const Chunk<W>& {
        popkit::wait_async_groups<kStages - 2>();
        __syncthreads();
        issue(k + kStages - 1);
        return s.chunk[k % kStages];
    };
#pragma unroll
    for (int k = 0; k < kStages - 1; ++k) issue(k);
    for (int idx = threadIdx.x; idx < W * W; idx += kUpdateThreads) {
        const int k = idx / W, i = idx % W;
        s.t[k][i] = k <= i ? Tb[idx] : 0.f;
    }

    float acc[W / 16][2][4] = {};
    int k = 0;
    for (; k < chunks; ++k) accumulate_w0<W>(acc, next_chunk(k), warp, g, t);
    if constexpr (S > 1) sum_w0_over_cluster<W, S>(s, acc, warp, g, t);
    form_w<W>(s, acc, warp, g, t);                  // s.t was written before the first next_chunk's barrier
    for (; k < copies; ++k) {
        const Chunk<W>& ch = next_chunk(k);         // its barrier also publishes s.wh and s.wl
        subtract_vw<W, kVec>(s, ch, C, ldc, m, nc, chunk_of(k) * kChunkRows, j0, warp >> 1, warp & 1, g, t);
    }
}

template <int W, int kVec>
__global__ void __launch_bounds__(kUpdateThreads, 3)
qr_update_kernel(float* __restrict__ Cs, int ldc, int stride, const float* __restrict__ Vt,
                 const float* __restrict__ T, int m, int nc) {
    update_tile<W, kVec, 1>(Cs, ldc, stride, Vt, T, m, nc, blockIdx.x, 0);
}

template <int W, int kVec, int S>
__global__ void __cluster_dims__(S, 1, 1) __launch_bounds__(kUpdateThreads, 4)
qr_update_split_kernel(float* __restrict__ Cs, int ldc, int stride, const float* __restrict__ Vt,
                       const float* __restrict__ T, int m, int nc) {
    update_tile<W, kVec, S>(Cs, ldc, stride, Vt, T, m, nc, blockIdx.x / S, blockIdx.x % S);
}

// CTAs a tile: the fewest of 1, 2, 4, 8 that bring the launch to target_ctas, keeping >= 4 chunks a CTA.
int row_split(int tiles, int chunks, int target_ctas) {
    int split = 1;
    while (split < 8 && tiles * split < target_ctas && chunks >= 8 * split) split *= 2;
    return split;
}

template <int W, int kVec, int S>
cudaError_t launch_update(popkit::Launcher* to, float* C, int ldc, int stride, const float* Vt, const float* T,
                          int batch, int m, int nc) {
    static int granted = 0;
    const int bytes = update_smem_bytes<W>(pipeline_stages(S));
    const dim3 grid((nc + kTileCols - 1) / kTileCols * S, batch);
    if constexpr (S == 1) {
        cudaError_t err = popkit::allow_dynamic_smem(qr_update_kernel<W, kVec>, bytes, granted);
        if (err != cudaSuccess) return err;
        return popkit::launch(to, qr_update_kernel<W, kVec>, grid, kUpdateThreads, bytes, C, ldc, stride, Vt, T, m,
                              nc);
    } else {
        cudaError_t err = popkit::allow_dynamic_smem(qr_update_split_kernel<W, kVec, S>, bytes, granted);
        if (err != cudaSuccess) return err;
        return popkit::launch(to, qr_update_split_kernel<W, kVec, S>, grid, kUpdateThreads, bytes, C, ldc, stride,
                              Vt, T, m, nc);
    }
}

template <int W, int kVec>
int launch_update(popkit::Launcher* to, int split, float* C, int ldc, int stride, const float* Vt, const float* T,
                  int batch, int m, int nc) {
    switch (split) {
        case 2: return (int)launch_update<W, kVec, 2>(to, C, ldc, stride, Vt, T, batch, m, nc);
        case 4: return (int)launch_update<W, kVec, 4>(to, C, ldc, stride, Vt, T, batch, m, nc);
        case 8: return (int)launch_update<W, kVec, 8>(to, C, ldc, stride, Vt, T, batch, m, nc);
        default: return (int)launch_update<W, kVec, 1>(to, C, ldc, stride, Vt, T, batch, m, nc);
    }
}

bool aligned16(const void* p) { return ((size_t)p & 15) == 0; }

}  // namespace

// CTAs a tile (1, 2, 4 or 8) for the update of batch x (m x nc) blocks: its rows split over several CTAs while
// the launch has fewer CTAs than target_ctas (0 or 1: never).
POPKIT_EXPORT int qr_update_split(int batch, int m, int nc, int target_ctas) {
    return row_split(batch * ((nc + kTileCols - 1) / kTileCols), (m + kChunkRows - 1) / kChunkRows, target_ctas);
}

// Q_panel^T applied to C (m x nc: row r, column j of matrix b at C[b stride + r ldc + j]) for every
// matrix, with Vt (batch x w x m) and T (batch x w x w) as qr_panel wrote them; w = 16 or 32, each tile's
// rows on `split` CTAs (1, 2, 4 or 8; else cudaErrorInvalidValue). A column's result depends on split
// (the order of its W0 partials), not on which other columns share the launch. Launched now when `to`
// is null, else recorded in to's graph (launch.cuh).
POPKIT_EXPORT int qr_update_to(popkit::Launcher* to, float* C, int ldc, int stride, const float* Vt, const float* T,
                               int batch, int m, int nc, int w, int split) {
    if (batch < 1 || m < 1 || nc < 1 || ldc < nc || (split != 1 && split != 2 && split != 4 && split != 8))
        return (int)cudaErrorInvalidValue;
    const bool vec = aligned16(C) && aligned16(Vt) && ldc % 4 == 0 && stride % 4 == 0 && m % 4 == 0;
    if (w == 32) return vec ? launch_update<32, 4>(to, split, C, ldc, stride, Vt, T, batch, m, nc)
                            : launch_update<32, 1>(to, split, C, ldc, stride, Vt, T, batch, m, nc);
    if (w == 16) return vec ? launch_update<16, 4>(to, split, C, ldc, stride, Vt, T, batch, m, nc)
                            : launch_update<16, 1>(to, split, C, ldc, stride, Vt, T, batch, m, nc);
    return (int)cudaErrorInvalidValue;
}

// qr_update_to launched now, its split by qr_update_split (route.update_tf32x3_cuda's entry point).
POPKIT_EXPORT int qr_update(float* C, int ldc, int stride, const float* Vt, const float* T, int batch, int m, int nc,
                            int w, int target_ctas) {
    return qr_update_to(nullptr, C, ldc, stride, Vt, T, batch, m, nc, w, qr_update_split(batch, m, nc, target_ctas));
}
