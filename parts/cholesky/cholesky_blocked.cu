// cholesky, blocked route in one call: the right-looking loop runs in the library, every step on
// our own kernels, so no Python (and no cuBLAS launch) sits between two steps.
//
// For k0 = 0, nb, 2 nb, ... (w = min(nb, n - k0)):
//   1. cholesky_tiled.cu factors the diagonal block in place and writes X = inv(L11);
//   2. the panel, in place:        L21 = A21 X^T      (a tf32x3 product, overwriting A21)
//   3. the trailing update:        A22 -= L21 L21^T   (a tf32x3 product, lower tiles only)
// The strict upper part keeps A's upper triangle and the diagonal tiles' products; the caller
// zeroes it once (model.blocked_tf32x3_model is the same algorithm in torch).
//
// tf32x3 product, C = P Q^T or C -= P Q^T (P: m x K rows, Q: ncols x K rows, K a multiple of 32):
// every operand is split as x = hi + lo, hi = x rounded to TF32 (10 mantissa bits, ties away from
// zero) and lo = x - hi (which the tensor core truncates to TF32), and the tile accumulates
// lo_P hi_Q + hi_P lo_Q + hi_P hi_Q on tensor cores (mma.sync m16n8k8, fp32 accumulate): ~21 bits
// per product, the dropped lo lo term is ~2^-22 relative (model.tf32x3_product). Plain TF32 (~11
// bits) breaks the lowrank family (docs/priors.md).
// Launch: one CTA per 128 x 128 tile of C (grid.x: every tile, or the T(T+1)/2 tiles on and below
// the diagonal; grid.y: the batch), 256 threads = 8 warps as 2 x 4, each warp 64 x 32 of C (4 x 4
// mma tiles, 64 accumulators). K runs in chunks of 32 staged by cp.async into double-buffered
// shared memory (2 x 2 x 128 x 36 floats, 72 KiB): rows padded to 36 floats so that each fragment
// read (8 rows x 4 columns) hits 32 distinct banks. The panel runs in place: its grid has one
// column tile (w <= 128), so a CTA reads all of its P rows before it writes them.
// Why it is fast: the whole factorization is one call, so no host time sits between steps (the
// Python loop spent ~25 us per step on 5 launches, views and precision switches, more than the GPU
// needed for most steps of a 1 x 4096 matrix); the products run on tensor cores at ~fp32 accuracy
// without materialized split operands, and the trailing update skips the upper tiles. Two CTAs per
// SM (128 registers, none spilled on sm_90a) hide each other's fragment latency. Its limit (H200,
// ncu at 1d92946): ~5 instructions per mma (the split and the fragment loads repeat for every warp
// that reads an element), 0.23 issued per cycle per scheduler, stalls on shared-memory scoreboards.
#include "device_utils.cuh"

// cholesky_tiled.cu's entry point (the same translation unit in the built file).
POPKIT_EXPORT int cholesky_tiled(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n,
                                 int ld, int stride, int tdim, int ts);

namespace {

constexpr int kTile = 128;                 // C tile edge
constexpr int kChunk = 32;                 // K per stage
constexpr int kLds = kChunk + 4;           // padded shared row (floats)
constexpr int kThreads = 256;
constexpr int kStageFloats = 2 * kTile * kLds;                 // P and Q chunks
constexpr int kSmemBytes = 2 * kStageFloats * (int)sizeof(float);  // double-buffered

// x = hi + lo: hi = x rounded to TF32 (10 mantissa bits, ties away from zero) by integer ops, lo = x - hi
// exact in fp32; the tensor core reads lo's top 19 bits (truncation). Two integer ops and a subtract
// instead of two cvt.rna.tf32 conversions per element.
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
    hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Copy VEC floats global -> shared without blocking; rows past the matrix are filled with zeros.
template <int VEC>
__device__ __forceinline__ void copy_async(float* dst, const float* src, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    const int bytes = valid ? VEC * 4 : 0;
    if constexpr (VEC == 4)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(bytes));
}

// Stage columns [k, k + 32) of rows [row0, row0 + 128) of M (rows >= rows read as zeros).
template <int VEC>
__device__ __forceinline__ void stage_rows(float* s, const float* M, int ld, int row0, int rows, int k) {
    constexpr int kPerRow = kChunk / VEC;
#pragma unroll
    for (int i = 0; i < kTile * kPerRow / kThreads; ++i) {
        const int idx = threadIdx.x + kThreads * i;
        const int r = idx / kPerRow, c = (idx % kPerRow) * VEC;
        const bool valid = row0 + r < rows;
        const int offset = valid ? (row0 + r) * ld + k + c : 0;    // 32-bit: the caller keeps n^2 < 2^31
        copy_async<VEC>(s + r * kLds + c, M + offset, valid);
    }
}

// One k8 step's operands of a warp's 64 x 32 block: A rows (4 m16 tiles) from sP, B rows (4 n8 tiles)
// from sQ, both already offset by the lane's (g, t); kk: the step's first column.
__device__ __forceinline__ void load_fragments(float (&fa)[4][4], float (&fb)[4][2], const float* sP,
                                               const float* sQ, int kk) {
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
        const float* a = sP + mi * 16 * kLds + kk;
        fa[mi][0] = a[0];
        fa[mi][1] = a[8 * kLds];
        fa[mi][2] = a[4];
        fa[mi][3] = a[8 * kLds + 4];
    }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
        const float* b = sQ + ni * 8 * kLds + kk;
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
        for (int e = 0; e < 2; ++e) split_tf32(fb[ni][e], bh[ni][e], bl[ni][e]);
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
        unsigned ah[4], al[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) split_tf32(fa[mi][e], ah[e], al[e]);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {                 // small terms first
            mma_tf32(acc[mi][ni], al, bh[ni]);
            mma_tf32(acc[mi][ni], ah, bl[ni]);
            mma_tf32(acc[mi][ni], ah, bh[ni]);
        }
    }
}

// Two CTAs per SM (128 registers) beat one CTA: 1x8192 11.1 vs 13.8 ms, 1x4096 3.23 vs 3.40 (H200,
// 250ac48 variants); one CTA's 8 warps cannot hide the fragment latency.
template <int VEC, bool SUBTRACT, bool LOWER>
__global__ void __launch_bounds__(kThreads, 2)
tf32x3_product_kernel(const float* p, int ldp, long long sp, const float* q, int ldq, long long sq, float* c,
                      int ldc, long long sc, int m, int ncols, int K) {
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    int ti, tj;                                          // this CTA's tile of C
    if constexpr (LOWER) {                               // blockIdx.x = ti (ti + 1) / 2 + tj, tj <= ti
        const int x = blockIdx.x;
        ti = (int)((sqrtf(8.f * x + 1.f) - 1.f) * 0.5f);
        while ((ti + 1) * (ti + 2) / 2 <= x) ++ti;
        while (ti * (ti + 1) / 2 > x) --ti;
        tj = x - ti * (ti + 1) / 2;
    } else {
        const int col_tiles = (ncols + kTile - 1) / kTile;
        ti = blockIdx.x / col_tiles;
        tj = blockIdx.x % col_tiles;
    }
    const int row0 = ti * kTile, col0 = tj * kTile;
    p += blockIdx.y * sp;
    q += blockIdx.y * sq;
    c += blockIdx.y * sc;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;               // the mma fragment coordinates
    const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;
    float acc[4][4][4] = {};

    const int chunks = K / kChunk;
    stage_rows<VEC>(smem, p, ldp, row0, m, 0);
    stage_rows<VEC>(smem + kTile * kLds, q, ldq, col0, ncols, 0);
    asm volatile("cp.async.commit_group;\n" ::);
    for (int kc = 0; kc < chunks; ++kc) {
        if (kc + 1 < chunks) {                           // the next chunk loads while this one computes
            float* next = smem + ((kc + 1) & 1) * kStageFloats;
            stage_rows<VEC>(next, p, ldp, row0, m, (kc + 1) * kChunk);
            stage_rows<VEC>(next + kTile * kLds, q, ldq, col0, ncols, (kc + 1) * kChunk);
        }
        asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group 1;\n" ::);
        __syncthreads();
        const float* sP = smem + (kc & 1) * kStageFloats + (wm + g) * kLds + t;
        const float* sQ = smem + (kc & 1) * kStageFloats + (kTile + wn + g) * kLds + t;
#pragma unroll 1                                 // unrolled or with the next step's fragments
        for (int s = 0; s < kChunk / 8; ++s) {           // prefetched, ptxas spills at 128 registers
            float fa[4][4], fb[4][2];
            load_fragments(fa, fb, sP, sQ, 8 * s);
            multiply_fragments(acc, fa, fb);
        }
        __syncthreads();                                 // this buffer is overwritten two chunks on
    }

#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = row0 + wm + mi * 16 + g + 8 * half;
            if (r >= m) continue;
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const int col = col0 + wn + ni * 8 + 2 * t;          // this lane's pair (col, col + 1)
                const float v0 = acc[mi][ni][2 * half], v1 = acc[mi][ni][2 * half + 1];
                float* dst = c + (size_t)r * ldc + col;
                if (VEC == 4 && col + 1 < ncols && (!LOWER || col + 1 <= r)) {   // 8-byte aligned
                    float2 out = make_float2(v0, v1);
                    if (SUBTRACT) {
                        const float2 old = *reinterpret_cast<const float2*>(dst);
                        out = make_float2(old.x - v0, old.y - v1);
                    }
                    *reinterpret_cast<float2*>(dst) = out;
                    continue;
                }
                if (col < ncols && (!LOWER || col <= r)) dst[0] = SUBTRACT ? dst[0] - v0 : v0;
                if (col + 1 < ncols && (!LOWER || col + 1 <= r)) dst[1] = SUBTRACT ? dst[1] - v1 : v1;
            }
        }
    }
}

template <int VEC, bool SUBTRACT, bool LOWER>
int launch_product(const float* p, int ldp, long long sp, const float* q, int ldq, long long sq, float* c, int ldc,
                   long long sc, int batch, int m, int ncols, int K) {
    static int granted = 0;
    const cudaError_t err =
        popkit::allow_dynamic_smem(tf32x3_product_kernel<VEC, SUBTRACT, LOWER>, kSmemBytes, granted);
    if (err != cudaSuccess) return (int)err;
    const int row_tiles = (m + kTile - 1) / kTile, col_tiles = (ncols + kTile - 1) / kTile;
    const int tiles = LOWER ? row_tiles * (row_tiles + 1) / 2 : row_tiles * col_tiles;
    tf32x3_product_kernel<VEC, SUBTRACT, LOWER><<<dim3(tiles, batch), kThreads, kSmemBytes>>>(
        p, ldp, sp, q, ldq, sq, c, ldc, sc, m, ncols, K);
    return (int)cudaGetLastError();
}

bool aligned16(const void* ptr) { return ((size_t)ptr & 15) == 0; }

// C = P Q^T (SUBTRACT false) or C -= P Q^T on the lower tiles (LOWER: square C, ncols == m).
template <bool SUBTRACT, bool LOWER>
int product(const float* p, int ldp, long long sp, const float* q, int ldq, long long sq, float* c, int ldc,
            long long sc, int batch, int m, int ncols, int K) {
    const bool vec = aligned16(p) && aligned16(q) && aligned16(c) && ldp % 4 == 0 && ldq % 4 == 0 && ldc % 4 == 0 &&
                     sp % 4 == 0 && sq % 4 == 0 && sc % 4 == 0;
    return vec ? launch_product<4, SUBTRACT, LOWER>(p, ldp, sp, q, ldq, sq, c, ldc, sc, batch, m, ncols, K)
               : launch_product<1, SUBTRACT, LOWER>(p, ldp, sp, q, ldq, sq, c, ldc, sc, batch, m, ncols, K);
}

}  // namespace

// Factor `batch` n x n matrices in place in L (A's lower triangle on entry; the strict upper part is
// left for the caller to zero). xinv: batch x nb x nb floats of workspace; diag_max: max_i a_ii per
// matrix (the pivot floor); (tdim, ts): cholesky_tiled.cu's shape for the diagonal blocks (tdim * ts >=
// nb). nb: a multiple of 32, at most 128. n * n < 2^31 (the product kernel's 32-bit row offsets).
POPKIT_EXPORT int cholesky_blocked(float* L, float* xinv, const float* diag_max, int batch, int n, int nb, int tdim,
                                   int ts) {
    if (batch < 1 || n < 1 || (long long)n * n >= (1LL << 31) || nb < kChunk || nb > kTile || nb % kChunk != 0 ||
        tdim * ts < nb || !L || !xinv || !diag_max)
        return (int)cudaErrorInvalidValue;
    const long long stride = (long long)n * n;
    for (int k0 = 0; k0 < n; k0 += nb) {
        const int w = n - k0 < nb ? n - k0 : nb;
        float* block = L + (size_t)k0 * n + k0;
        if (k0 + w == n) return cholesky_tiled(block, block, nullptr, diag_max, batch, w, n, (int)stride, tdim, ts);
        int err = cholesky_tiled(block, block, xinv, diag_max, batch, w, n, (int)stride, tdim, ts);
        if (err) return err;
        const int m = n - k0 - w;
        float* panel = block + (size_t)w * n;
        err = product<false, false>(panel, n, stride, xinv, w, (long long)w * w, panel, n, stride, batch, m, w, w);
        if (err) return err;
        err = product<true, true>(panel, n, stride, panel, n, stride, panel + w, n, stride, batch, m, m, w);
        if (err) return err;
    }
    return (int)cudaSuccess;
}
