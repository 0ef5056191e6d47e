// qr_v2, blocked route: apply one panel's block reflector to the trailing columns, in one launch, on
// TF32 tensor cores at ~fp32 accuracy (tf32x3, common/tensor_core_tf32.cuh).
//
// With the panel's Vt (w x m, row c = v_c with its zeros and unit made explicit) and T (w x w, upper,
// H_0 ... H_{w-1} = I - V T V^T) from householder_panel.cu, the trailing block C = A[k0:n, k0+w:n]
// (m = n - k0 rows, nc = n - k0 - w columns, leading dimension n) becomes Q_panel^T C:
//   W0 = Vt C            (w x nc, contraction over the m rows)
//   W  = T^T W0          (w x nc, fp32, T upper so W[i] = sum_{k <= i} T[k][i] W0[k])
//   C -= V W             (m x nc, contraction over the w reflectors)
// the three products blocked_qr runs as cuBLAS calls (model.apply_block_reflector_tf32x3: the same
// arithmetic). Every product splits its operands x = hi + lo and sums lo hi + hi lo + hi hi.
//
// Launch: one CTA of 128 threads (4 warps) per 64-column tile of C and matrix: grid (ceil(nc / 64),
// batch), three CTAs an SM. Phase 1 walks the rows in chunks of 32 (C's chunk and Vt's, staged in
// shared memory, the next chunk's loads in flight during this one's mma): each warp owns 16 columns
// of W0 (W / 16 m16 tiles x 2 n8 tiles). W = T^T W0 then goes to shared memory already split into hi and lo planes.
// Phase 2 walks the rows in chunks of 64, each warp 16 rows x 64 columns (8 n8 tiles), and subtracts
// its accumulators from C (all old values of a row pair read before any is written).
// Shared rows are padded (36 and 72 floats) so that every fragment read hits 32 distinct banks.
// Why it is fast: one launch instead of three, W0 and W never leave the chip, C is read twice (the
// second time mostly from L2: the CTA read its tile moments before) and written once, and the
// products run on tensor cores where cuBLAS's batched SGEMMs of K = 32 or M = 32 run on SIMT units.
#include "device_utils.cuh"
#include "tensor_core_tf32.cuh"

namespace {

constexpr int kUpdateThreads = 128;
constexpr int kTileCols = 64;               // columns of C per CTA
constexpr int kRowsIn = 32;                 // phase 1: rows of C per chunk (the K of W0 = Vt C)
constexpr int kRowsOut = 64;                // phase 2: rows of C per chunk (16 per warp)
constexpr int kLdWide = kTileCols + 8;      // 72: fragment reads (row t, column g) hit banks 8t + g
constexpr int kLdNarrow = kRowsIn + 4;      // 36: fragment reads (row g, column t) hit banks 4g + t

template <int W>
struct UpdateSmem {
    float c[kRowsIn][kLdWide];              // phase 1: C's chunk;   phase 2: Vt's chunk (W x 64 rows)
    float v[W][kLdNarrow];                  // phase 1: Vt's chunk (W x 32 rows)
    float w0[W][kLdWide];                   // W0, then read for W = T^T W0
    unsigned wh[W][kLdWide], wl[W][kLdWide];    // W split into TF32 hi and lo
    float t[W][W + 1];
};

// One m16n8k8 tf32x3 step: acc += A B with A's fragment (4 floats) and B's (2 floats) split here.
__device__ __forceinline__ void mma_split(float (&acc)[4], const float (&fa)[4], const float (&fb)[2]) {
    unsigned ah[4], al[4], bh[2], bl[2];
#pragma unroll
    for (int e = 0; e < 4; ++e) popkit::split_tf32(fa[e], ah[e], al[e]);
#pragma unroll
    for (int e = 0; e < 2; ++e) popkit::split_tf32(fb[e], bh[e], bl[e]);
    popkit::mma_tf32x3(acc, ah, al, bh, bl);
}

// Three CTAs an SM (166 registers at W = 32, no spill; four would spill): 12 warps to hide the loads.
template <int W>
__global__ void __launch_bounds__(kUpdateThreads, 3)
qr_update_kernel(float* __restrict__ Cs, int ldc, int stride, const float* __restrict__ Vt,
                 const float* __restrict__ T, int m, int nc) {
    constexpr int kMi = W / 16;                              // phase 1: m16 tiles of W0 per warp
    constexpr int kLoadC = kRowsIn * kTileCols / kUpdateThreads;     // 16 floats a thread
    constexpr int kLoadV = W * kRowsIn / kUpdateThreads;             // 8 or 4
    constexpr int kLoadV2 = W * kRowsOut / kUpdateThreads;           // 16 or 8
    __shared__ UpdateSmem<W> s;
    const int j0 = blockIdx.x * kTileCols;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    float* C = Cs + (size_t)blockIdx.y * stride;
    const float* V = Vt + (size_t)blockIdx.y * W * m;

    for (int idx = threadIdx.x; idx < W * W; idx += kUpdateThreads)
        s.t[idx / W][idx % W] = T[(size_t)blockIdx.y * W * W + idx];

    // ---- phase 1: W0 = Vt C over row chunks of 32
    float acc1[kMi][2][4] = {};
    float rc[kLoadC], rv[kLoadV];
    auto load_chunk = [&](int r0) {
#pragma unroll
        for (int i = 0; i < kLoadC; ++i) {
            const int idx = threadIdx.x + i * kUpdateThreads, r = r0 + idx / kTileCols, col = j0 + idx % kTileCols;
            rc[i] = (r < m && col < nc) ? C[(size_t)r * ldc + col] : 0.f;
        }
#pragma unroll
        for (int i = 0; i < kLoadV; ++i) {
            const int idx = threadIdx.x + i * kUpdateThreads, c = idx / kRowsIn, r = r0 + idx % kRowsIn;
            rv[i] = (r < m) ? V[(size_t)c * m + r] : 0.f;
        }
    };
    load_chunk(0);
    for (int r0 = 0; r0 < m; r0 += kRowsIn) {
#pragma unroll
        for (int i = 0; i < kLoadC; ++i) {
            const int idx = threadIdx.x + i * kUpdateThreads;
            s.c[idx / kTileCols][idx % kTileCols] = rc[i];
        }
#pragma unroll
        for (int i = 0; i < kLoadV; ++i) {
            const int idx = threadIdx.x + i * kUpdateThreads;
            s.v[idx / kRowsIn][idx % kRowsIn] = rv[i];
        }
        __syncthreads();
        if (r0 + kRowsIn < m) load_chunk(r0 + kRowsIn);      // in flight during this chunk's products
#pragma unroll
        for (int kk = 0; kk < kRowsIn; kk += 8) {
#pragma unroll
            for (int mi = 0; mi < kMi; ++mi) {
                const float fa[4] = {s.v[mi * 16 + g][kk + t], s.v[mi * 16 + g + 8][kk + t],
                                     s.v[mi * 16 + g][kk + t + 4], s.v[mi * 16 + g + 8][kk + t + 4]};
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    const int col = (2 * warp + q) * 8 + g;
                    const float fb[2] = {s.c[kk + t][col], s.c[kk + t + 4][col]};
                    mma_split(acc1[mi][q], fa, fb);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const int col = (2 * warp + q) * 8 + 2 * t;
            s.w0[mi * 16 + g][col] = acc1[mi][q][0];
            s.w0[mi * 16 + g][col + 1] = acc1[mi][q][1];
            s.w0[mi * 16 + g + 8][col] = acc1[mi][q][2];
            s.w0[mi * 16 + g + 8][col + 1] = acc1[mi][q][3];
        }
    __syncthreads();

    // ---- W = T^T W0, stored split
    for (int idx = threadIdx.x; idx < W * kTileCols; idx += kUpdateThreads) {
        const int i = idx / kTileCols, col = idx % kTileCols;
        float sum = 0.f;
        for (int k = 0; k <= i; ++k) sum += s.t[k][i] * s.w0[k][col];
        popkit::split_tf32(sum, s.wh[i][col], s.wl[i][col]);
    }

    // ---- phase 2: C -= V W over row chunks of 64
    const int wrow = warp * 16;
    float rv2[kLoadV2];
    auto load_v = [&](int r0) {
#pragma unroll
        for (int i = 0; i < kLoadV2; ++i) {
            const int idx = threadIdx.x + i * kUpdateThreads, c = idx / kRowsOut, r = r0 + idx % kRowsOut;
            rv2[i] = (r < m) ? V[(size_t)c * m + r] : 0.f;
        }
    };
    float (*sv2)[kLdWide] = s.c;                             // phase 1's C chunk holds Vt's W x 64 chunk
    static_assert(W <= kRowsIn, "Vt's phase-2 chunk must fit in phase 1's C chunk");
    load_v(0);
    for (int r0 = 0; r0 < m; r0 += kRowsOut) {
        __syncthreads();                                     // the previous chunk's reads (and W's stores) done
#pragma unroll
        for (int i = 0; i < kLoadV2; ++i) {
            const int idx = threadIdx.x + i * kUpdateThreads;
            sv2[idx / kRowsOut][idx % kRowsOut] = rv2[i];
        }
        __syncthreads();
        if (r0 + kRowsOut < m) load_v(r0 + kRowsOut);
        float acc[8][4] = {};
#pragma unroll
        for (int kk = 0; kk < W; kk += 8) {
            float fa[4] = {sv2[kk + t][wrow + g], sv2[kk + t][wrow + g + 8],
                           sv2[kk + t + 4][wrow + g], sv2[kk + t + 4][wrow + g + 8]};
            unsigned ah[4], al[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) popkit::split_tf32(fa[e], ah[e], al[e]);
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
                const unsigned bh[2] = {s.wh[kk + t][ni * 8 + g], s.wh[kk + t + 4][ni * 8 + g]};
                const unsigned bl[2] = {s.wl[kk + t][ni * 8 + g], s.wl[kk + t + 4][ni * 8 + g]};
                popkit::mma_tf32x3(acc[ni], ah, al, bh, bl);
            }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = r0 + wrow + g + 8 * half;
            float old[8][2];
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
                const int col = j0 + ni * 8 + 2 * t;
                old[ni][0] = (r < m && col < nc) ? C[(size_t)r * ldc + col] : 0.f;
                old[ni][1] = (r < m && col + 1 < nc) ? C[(size_t)r * ldc + col + 1] : 0.f;
            }
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
                const int col = j0 + ni * 8 + 2 * t;
                if (r < m && col < nc) C[(size_t)r * ldc + col] = old[ni][0] - acc[ni][2 * half];
                if (r < m && col + 1 < nc) C[(size_t)r * ldc + col + 1] = old[ni][1] - acc[ni][2 * half + 1];
            }
        }
    }
}

}  // namespace

// Q_panel^T applied to C (m x nc: row r, column j of matrix b at C[b stride + r ldc + j]) for every
// matrix, with Vt (batch x w x m) and T (batch x w x w) as qr_panel wrote them; w = 16 or 32 (else
// cudaErrorInvalidValue).
POPKIT_EXPORT int qr_update(float* C, int ldc, int stride, const float* Vt, const float* T, int batch, int m, int nc,
                            int w) {
    if (batch < 1 || m < 1 || nc < 1 || ldc < nc) return (int)cudaErrorInvalidValue;
    const dim3 grid((nc + kTileCols - 1) / kTileCols, batch);
    if (w == 32) qr_update_kernel<32><<<grid, kUpdateThreads>>>(C, ldc, stride, Vt, T, m, nc);
    else if (w == 16) qr_update_kernel<16><<<grid, kUpdateThreads>>>(C, ldc, stride, Vt, T, m, nc);
    else return (int)cudaErrorInvalidValue;
    return (int)cudaGetLastError();
}
