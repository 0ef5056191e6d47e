#!POPCORN leaderboard cholesky
#!POPCORN gpu B200
# Built by popkit from parts/cholesky: do not edit; change the parts and rebuild.
# toolkit commit: 1d638e1
# part common/device_utils.cuh sha256 ebc8d0970f02f1917270f6cb9643dd0484d903709a1d262c85205aaa5779be36
# part cholesky/pivot.cuh sha256 fd29776d31b168dd5db1a4d2e23e9ac9b7a433851b6788a206e6d1e97d4fa458
# part cholesky/cholesky_small.cu sha256 9b8a656953761e31334068669a71a99b610d22a2dcce9f25396df1c001d3a698
# part cholesky/tiled_block.cuh sha256 234a8f68d1fe840f6cc30af79fe1806ab320a2f2b3742f3f03563cc797d52a4f
# part cholesky/cholesky_tiled.cu sha256 d425cb51c560c776ee5297f6bbcb6595a71bbc45777f0537281e23b13bd889db
# part cholesky/cholesky_split.cu sha256 d4dbcff8bb19abad1903230f029164b69d1c60e4f70988439fc1fc5dcadfe80c
# part cholesky/tf32x3.cuh sha256 629a763e893d9e938260f4481c6e2935a79963d3613406022343f94a8a3a9d7d
# part cholesky/cholesky_product_mma.cu sha256 aac5100aa2b1613761441bc8491524d6c160b69d40aeaea02f7d6b75d3343e03
# part cholesky/wgmma_tf32.cuh sha256 71bd5bc190cd9a84a9dafdaf8b5e27cc2d7a84f731da1dcf256c1aebebd444f1
# part cholesky/cholesky_product_wgmma.cu sha256 a5717be62ca2af29db1155550640d2be4f7ba16889371879c4c55c6728aad011
# part cholesky/cholesky_lookahead.cu sha256 af1626325d640cf74d6b3bd1c83de7d96268015b3ed22a0e1e51879a4c52c7a5
# part cholesky/cholesky_blocked.cu sha256 5cfe5cabfb8f7b1de2b25871207ced03cc5be7be88a331302762b6d5b3b783b0
# part common/cuda_loader.py sha256 9873efa2c5adb5794b84e56e361d84f87083f32e94babf39b0e2f0ed826f2b91
# part cholesky/model.py sha256 aa5fcd44b5ae4e6b677d042e0a8db2b2f78677b2bfeaaf53713b0c8b94dcdfd1
# part cholesky/route.py sha256 3be5f3287f328ed0b0a79ae91071fb96e3f20921b95f61cd8b5e56fb5427f4d3
"""cholesky: batched Cholesky factorization (L lower triangular, A = L L^T).

custom_kernel(data) dispatches to the routes below (see the route table in the
last part). CUDA parts are embedded verbatim (CUDA_PARTS) and built once
per machine as a plain shared library (no torch headers), then called through
ctypes: one translation unit per .cu part (CUDA_UNITS), compiled in parallel
and linked together, or, on a machine of under 4 CPUs, every part as one unit.
"""
# The CUDA parts in manifest order, their #includes of each other and #pragma once dropped.
CUDA_PARTS = {
    "common/device_utils.cuh": r'''
// Shared device helpers for every popkit kernel: warp/block reductions, reflectors,
// the C entry-point convention and the shared-memory opt-in.
//
// Entry points are `extern "C"` functions taking raw device pointers and sizes;
// they launch on the default queue (what torch uses unless told otherwise) and
// return cudaGetLastError() as an int so Python can raise a clear error.
#include <cuda_runtime.h>

#define POPKIT_EXPORT extern "C" __attribute__((visibility("default")))

namespace popkit {

// Allow `kernel` `bytes` of dynamic shared memory (over 48 KiB needs the opt-in). `granted` is the
// caller's static record of the largest size already allowed, so the runtime call happens once
// per new maximum, not per launch.
template <typename Kernel>
cudaError_t allow_dynamic_smem(Kernel kernel, int bytes, int& granted) {
    if (bytes <= granted) return cudaSuccess;
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err == cudaSuccess) granted = bytes;
    return err;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the whole block; every thread gets the result. `scratch` holds one
// float per warp (32 is enough for 1024 threads). Contains two __syncthreads().
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < warps; ++w) total += scratch[w];
    __syncthreads();
    return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float best = 0.f;
    for (int w = 0; w < warps; ++w) best = fmaxf(best, scratch[w]);
    __syncthreads();
    return best;
}

// LAPACK slarfg on (alpha, ||x||): returns tau and sets beta (the new diagonal)
// and the factor that scales x into the Householder tail v = x * scale.
// xnorm == 0 gives tau = 0 (H = I), exactly as geqrf does.
struct Reflector { float tau, beta, scale; };

__device__ __forceinline__ Reflector make_reflector(float alpha, float xnorm) {
    if (xnorm == 0.f) return {0.f, alpha, 0.f};
    const float beta = -copysignf(hypotf(alpha, xnorm), alpha);
    return {(beta - alpha) / beta, beta, 1.f / (alpha - beta)};
}

}  // namespace popkit
''',
    "cholesky/pivot.cuh": r'''
// The pivot of every cholesky kernel (cholesky_small.cu, tiled_block.cuh).

namespace popkit {

// A Cholesky pivot: d at or below `floor` (eps * max_i a_ii) becomes floor (NaN compares false
// and stays NaN); inv = 1 / l_kk = rsqrt(d) and l_kk = d * inv. One rsqrtf (<= 2 ulp) instead of
// an IEEE sqrt and divide (tens of instructions) on the factorization's serial chain.
struct Pivot { float lkk, inv; };

__device__ __forceinline__ Pivot cholesky_pivot(float d, float floor) {
    if (d <= floor) d = floor;
    const float inv = rsqrtf(d);
    return {d * inv, inv};
}

}  // namespace popkit
''',
    "cholesky/cholesky_small.cu": r'''
// cholesky, small n (n <= 32): the whole factorization of one matrix in one warp.
//
// Computes L, lower triangular with A = L L^T, by right-looking Cholesky
// (LAPACK spotf2 order): for k = 0..n-1
//   l_kk = sqrt(a_kk),  l_ik = a_ik * (1 / l_kk)            (i > k; 1 / l_kk = rsqrt(a_kk))
//   a_ij -= l_ik * l_jk                                     (k < j <= i)
// reading only the lower triangle of A. Writes the strict upper part of L as 0.
// A pivot at or below f = eps * max_i a_ii becomes f (cholesky_tiled.cu's outline says why:
// a roundoff-level pivot of a numerically singular SPD matrix, floored inside the gate, with no
// host-side check; a NaN pivot stays NaN).
//
// Launch: `warps` warps per CTA (1..kSmallMaxWarps), one matrix per warp;
// grid = ceil(batch / warps). Lane i owns row i in 32 registers. Column k of the partly updated
// matrix sits in a per-warp shared vector (double-buffered, published by every lane at the end
// of step k - 1): each lane derives the pivot from it and reads the l_jk it needs as 16-byte
// broadcast reads, 4 columns per instruction. Each warp stages its matrix through shared memory
// (32 x 33 floats, padded so that the lane-per-row reads hit distinct banks) so that global
// memory is read and written once, coalesced, as the contiguous n*n floats of the matrix.
// Why it is fast: at n <= 32 the work (n^3/6 FMAs) is tiny and the case is memory bound
// (4096 x 32 moves 32 MiB: ~7 us at 4.8 TB/s); no __syncthreads, and many independent warps per
// SM hide the latency of each step. The first version broadcast every l_jk by __shfl_sync: ~528
// shuffles per matrix on the SM's one shuffle/shared-memory pipe, against ~200 shared-memory
// instructions now.

namespace {

constexpr int kSmallMaxN = 32;
constexpr int kSmallMaxWarps = 16;
constexpr int kSmallLd = kSmallMaxN + 1;

__global__ void __launch_bounds__(kSmallMaxWarps * 32)
cholesky_small_kernel(const float* __restrict__ A, float* __restrict__ L, int batch, int n) {
    extern __shared__ float4 s_all4[];                   // per warp: 2 x 32 floats of columns, then
    float* s_all = reinterpret_cast<float*>(s_all4);     // (after every warp's) a 32 x 33 tile
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int matrix = blockIdx.x * warps + warp;
    if (matrix >= batch) return;                         // whole warps only: no block barrier below
    float* s = s_all + warps * 2 * kSmallMaxN + warp * kSmallMaxN * kSmallLd;
    const size_t base = (size_t)matrix * n * n;
    const int nn = n * n;

    for (int idx = lane; idx < nn; idx += 32) {
        const int r = idx / n, c = idx - r * n;
        s[r * kSmallLd + c] = A[base + idx];
    }
    __syncwarp();
    float a[kSmallMaxN];                                 // row `lane`, lower part; zeros elsewhere
#pragma unroll
    for (int j = 0; j < kSmallMaxN; ++j) a[j] = (j <= lane && lane < n) ? s[lane * kSmallLd + j] : 0.f;

    float floor = 0.f;
#pragma unroll
    for (int j = 0; j < kSmallMaxN; ++j)
        if (j == lane) floor = a[j];                     // this lane's diagonal entry (0 beyond n)
    floor = popkit::warp_max(floor) * 1.1920929e-7f;     // eps * max_i a_ii
    if (!(floor > 0.f)) floor = 1.17549435e-38f;         // an all-zero diagonal: the smallest normal

    float* col = s_all + warp * 2 * kSmallMaxN;          // column k of A, double-buffered
    col[lane] = a[0];
    __syncwarp();
#pragma unroll
    for (int k = 0; k < kSmallMaxN; ++k) {
        if (k >= n) break;
        const float* u = col + (k & 1) * kSmallMaxN;     // column k, updated through step k - 1
        const popkit::Pivot pivot = popkit::cholesky_pivot(u[k], floor);
        if (lane == k) a[k] = pivot.lkk;
        else if (lane > k) a[k] *= pivot.inv;
        constexpr int kVec = 4;                          // u[j] for j > k as 16-byte broadcast reads
        float uj[kSmallMaxN];
#pragma unroll
        for (int g = (k + 1) / kVec * kVec; g < kSmallMaxN; g += kVec) {
            const float4 q = *reinterpret_cast<const float4*>(u + g);
            uj[g] = q.x; uj[g + 1] = q.y; uj[g + 2] = q.z; uj[g + 3] = q.w;
        }
#pragma unroll
        for (int j = k + 1; j < kSmallMaxN; ++j) {
            if (j >= n) break;
            if (lane >= j) a[j] -= a[k] * (uj[j] * pivot.inv);    // l_jk = u_j / l_kk, as lane j has it
        }
        if (k + 1 < kSmallMaxN) col[((k + 1) & 1) * kSmallMaxN + lane] = a[k + 1];
        __syncwarp();
    }

    __syncwarp();                                        // every lane is done reading its row of s
    if (lane < n) {
#pragma unroll
        for (int j = 0; j < kSmallMaxN; ++j)
            if (j < n) s[lane * kSmallLd + j] = (j <= lane) ? a[j] : 0.f;
    }
    __syncwarp();
    for (int idx = lane; idx < nn; idx += 32) {
        const int r = idx / n, c = idx - r * n;
        L[base + idx] = s[r * kSmallLd + c];
    }
}

}  // namespace

// L (batch x n x n) from A.
POPKIT_EXPORT int cholesky_small(const float* A, float* L, int batch, int n, int warps) {
    if (batch < 1 || n < 1 || n > kSmallMaxN || warps < 1 || warps > kSmallMaxWarps)
        return (int)cudaErrorInvalidValue;
    const int smem = warps * kSmallMaxN * (kSmallLd + 2) * (int)sizeof(float);
    static int granted = 0;
    const cudaError_t err = popkit::allow_dynamic_smem(cholesky_small_kernel, smem, granted);
    if (err != cudaSuccess) return (int)err;
    cholesky_small_kernel<<<(batch + warps - 1) / warps, warps * 32, smem>>>(A, L, batch, n);
    return (int)cudaGetLastError();
}
''',
    "cholesky/tiled_block.cuh": r'''
// cholesky_tiled.cu's factorization of one block (n <= TDIM * TS) by the CTA's TDIM^2 threads, as a
// device function, so that other kernels can run it as one of their roles (cholesky_lookahead.cu): the
// shared load, pivot floor and store, and its two step loops (column steps: one column per step;
// grouped steps: kStep columns per step). The algorithm, layout and costs are in cholesky_tiled.cu's
// outline.

namespace tiled {

// One diagonal block of each matrix in a batch: at src (leading dimension ld, batch stride `stride`
// floats) into dst (may equal src), X = inv(L) into xinv (batch x n x n) unless it is NULL; diag_max:
// max_i a_ii of each whole matrix (the pivot floor); halves: factor a 128-block by halves_steps.
struct DiagBlock {
    const float* src; float* dst; float* xinv; const float* diag_max;
    int n, ld; long long stride; int halves;
};

// Write a thread's TS x TS cyclic tile (entry (ty + TDIM i, tx + TDIM j)) of an n x n lower-triangular
// result, zeros above the diagonal.
template <int TDIM, int TS>
__device__ __forceinline__ void store_lower_tile(const float (&t)[TS][TS], float* dst, int ld, int n, int ty,
                                                 int tx) {
#pragma unroll
    for (int i = 0; i < TS; ++i) {
        const int r = ty + TDIM * i;
#pragma unroll
        for (int j = 0; j < TS; ++j) {
            const int c = tx + TDIM * j;
            if (r < n && c < n) dst[(size_t)r * ld + c] = (c <= r) ? t[i][j] : 0.f;
        }
    }
}

// Columns per grouped step (one barrier per step): every thread factors the kStep x kStep diagonal block
// itself, so the chain of dependent steps is n / kStep long instead of n.
constexpr int kStep = 4;

// Select a[i][j] at a runtime (i, j) from compile-time indices (the arrays stay in registers).
template <int R, int C>
__device__ __forceinline__ float pick(const float (&a)[R][C], int i, int j) {
    float value = 0.f;
#pragma unroll
    for (int ii = 0; ii < R; ++ii)
#pragma unroll
        for (int jj = 0; jj < C; ++jj)
            if (ii == i && jj == j) value = a[ii][jj];
    return value;
}

// Forward substitution of one row with the factored diagonal block d (dinv[q] = 1 / d[q][q]):
// out[q] = (p[q] - sum_{s<q} out[s] d[q][s]) dinv[q], in the order of factor_step's own updates, so
// a row inside the block comes out bit-identical to d's entries.
__device__ __forceinline__ void solve_row(const float4& p, const float (&d)[kStep][kStep], const float (&dinv)[kStep],
                                          float (&out)[kStep]) {
    const float in[kStep] = {p.x, p.y, p.z, p.w};
#pragma unroll
    for (int q = 0; q < kStep; ++q) {
        float acc = in[q];
#pragma unroll
        for (int s = 0; s < q; ++s) acc = fmaf(-out[s], d[q][s], acc);
        out[q] = acc * dinv[q];
    }
}

// Publish the next step's inputs (before the barrier that opens it): columns kn .. kn + kStep - 1 of the
// updated matrix (rows r >= kn, unscaled) into v by their owners (tx = kt + q, tile column jb), and with
// INV rows kn .. of X (columns c < kn + kStep, unscaled) into w by their owners (ty = kt + q, tile row
// jb). jb is a compile-time constant at every call (the caller's kb loop is unrolled).
template <int TDIM, int TS, bool INV>
__device__ __forceinline__ void publish_step(const float (&a)[TS][TS], const float (&x)[INV ? TS : 1][INV ? TS : 1],
                                             float4* v, float4* w, int jb, int kt, int kn, int ty, int tx) {
    const int qc = tx - kt, qr = ty - kt;
    if (qc >= 0 && qc < kStep) {
#pragma unroll
        for (int j = 0; j < TS; ++j) {
            if (j != jb) continue;
#pragma unroll
            for (int i = j; i < TS; ++i)
                if (ty + TDIM * i >= kn) reinterpret_cast<float*>(&v[ty + TDIM * i])[qc] = a[i][j];
        }
    }
    if constexpr (INV) {
        if (qr >= 0 && qr < kStep) {
#pragma unroll
            for (int i = 0; i < TS; ++i) {
                if (i != jb) continue;
#pragma unroll
                for (int j = 0; j <= i; ++j)
                    if (tx + TDIM * j < kn + kStep) reinterpret_cast<float*>(&w[tx + TDIM * j])[qr] = x[i][j];
            }
        }
    }
}

// The pivot floor of a block whose registers a hold it (tile layout above): eps * max_i a_ii, with
// max_i a_ii given (diag_max, the whole matrix's) or taken over this block's own diagonal.
template <int TDIM, int TS>
__device__ __forceinline__ float pivot_floor(const float (&a)[TS][TS], const float* __restrict__ diag_max, int n,
                                             int ty, int tx) {
    __shared__ float s_max[TDIM];
    float top;
    if (diag_max) {
        top = *diag_max;
    } else {
        if (ty == tx) {
            float m = 0.f;
#pragma unroll
            for (int i = 0; i < TS; ++i)
                if (ty + TDIM * i < n) m = fmaxf(m, a[i][i]);
            s_max[ty] = m;
        }
        __syncthreads();
        top = 0.f;
        for (int q = 0; q < TDIM; ++q) top = fmaxf(top, s_max[q]);
    }
    const float floor = top * 1.1920929e-7f;             // float32 eps
    return floor > 0.f ? floor : 1.17549435e-38f;        // an all-zero diagonal: the smallest normal
}

// Factor a (and with INV form x = inv(L), x = I on entry) in registers, one column per step (cholesky_tiled.cu's
// outline, "column steps").
template <int TDIM, int TS, bool INV>
__device__ __forceinline__ void column_steps(float (&a)[TS][TS], float (&x)[INV ? TS : 1][INV ? TS : 1],
                                             float floor, int n, int ty, int tx) {
    constexpr int NP = TDIM * TS;
    __shared__ float v[NP];                              // column k of L
    __shared__ float w[INV ? NP : 1];                    // row k of X
    __shared__ float s_inv;
#pragma unroll
    for (int kb = 0; kb < TS; ++kb) {
        if (kb * TDIM >= n) break;
        for (int kt = 0; kt < TDIM; ++kt) {
            const int k = kb * TDIM + kt;
            if (k >= n) break;
            if (ty == kt && tx == kt) {                  // 1. the pivot
                const popkit::Pivot pivot = popkit::cholesky_pivot(a[kb][kb], floor);
                a[kb][kb] = pivot.lkk;
                s_inv = pivot.inv;
            }
            __syncthreads();
            const float inv = s_inv;
            if (tx == kt) {                              // 2. column k of L below the diagonal
#pragma unroll
                for (int i = 0; i < TS; ++i) {
                    const int r = ty + TDIM * i;
                    if (r > k) {
                        a[i][kb] *= inv;
                        v[r] = a[i][kb];
                    }
                }
            }
            if constexpr (INV) {                         //    and row k of X, columns c <= k
                if (ty == kt) {
#pragma unroll
                    for (int j = 0; j <= kb; ++j) {
                        if (j == kb && tx > kt) continue;
                        x[kb][j] *= inv;
                        w[tx + TDIM * j] = x[kb][j];
                    }
                }
            }
            __syncthreads();
            float lr[TS], lc[TS];                        // 3. the trailing update from registers
#pragma unroll
            for (int i = 0; i < TS; ++i) lr[i] = v[ty + TDIM * i];
#pragma unroll
            for (int j = 0; j < TS; ++j) lc[j] = v[tx + TDIM * j];
            const bool own_column_k = tx > kt;           // tile column kb: c = tx + TDIM kb > k
#pragma unroll
            for (int i = 0; i < TS; ++i) {
#pragma unroll
                for (int j = 0; j < TS; ++j) {
                    if (j < kb || i < j) continue;       // c < k, or above the diagonal: static
                    if (j == kb && !own_column_k) continue;
                    if (i == j && ty < tx) continue;     // the diagonal tile: r >= c needs ty >= tx
                    a[i][j] = fmaf(-lr[i], lc[j], a[i][j]);
                }
            }
            if constexpr (INV) {                         //    and X's rows r > k, columns c <= k
#pragma unroll
                for (int j = 0; j <= kb; ++j) {
                    if (j == kb && tx > kt) continue;
                    const float wc = w[tx + TDIM * j];
#pragma unroll
                    for (int i = kb; i < TS; ++i) {
                        if (i == kb && ty <= kt) continue;
                        x[i][j] = fmaf(-lr[i], wc, x[i][j]);
                    }
                }
            }
        }
    }
}

// Factor a (and with INV form x = inv(L), x = I on entry) in registers, kStep columns per step
// (cholesky_tiled.cu's outline, "grouped steps").
template <int TDIM, int TS, bool INV>
__device__ __forceinline__ void grouped_steps(float (&a)[TS][TS], float (&x)[INV ? TS : 1][INV ? TS : 1],
                                              float floor, int n, int ty, int tx) {
    static_assert(TDIM % kStep == 0, "a step's columns lie in one tile column");
    constexpr int NP = TDIM * TS;
    __shared__ float4 v[2][NP];                          // the step's kStep columns at row r (two halves)
    __shared__ float4 w[2][INV ? NP : 1];                // the step's kStep rows of X at column c
    publish_step<TDIM, TS, INV>(a, x, v[0], w[0], 0, 0, 0, ty, tx);
#pragma unroll
    for (int kb = 0; kb < TS; ++kb) {
        if (kb * TDIM >= n) break;
        for (int kt = 0; kt < TDIM; kt += kStep) {
            const int k = kb * TDIM + kt, half = (k / kStep) & 1;
            if (k >= n) break;
            __syncthreads();                             // this step's columns (and rows of X) are published
            const float4* vk = v[half];
            // 1. the kStep x kStep diagonal block, factored by every thread (the same value everywhere)
            float d[kStep][kStep], dinv[kStep];
#pragma unroll
            for (int p = 0; p < kStep; ++p) {
                const float4 row = vk[k + p];
                const float in[kStep] = {row.x, row.y, row.z, row.w};
#pragma unroll
                for (int q = 0; q < kStep; ++q) d[p][q] = in[q];
            }
#pragma unroll
            for (int q = 0; q < kStep; ++q) {
                const popkit::Pivot pivot = popkit::cholesky_pivot(d[q][q], floor);
                d[q][q] = pivot.lkk;
                dinv[q] = pivot.inv;
#pragma unroll
                for (int p = q + 1; p < kStep; ++p) d[p][q] *= pivot.inv;
#pragma unroll
                for (int p = q + 1; p < kStep; ++p)
#pragma unroll
                    for (int s2 = q + 1; s2 <= p; ++s2) d[p][s2] = fmaf(-d[p][q], d[s2][q], d[p][s2]);
            }
            // 2. L's step columns at this thread's rows r >= k (tile rows below kb hold none)
            float lr[TS][kStep];
#pragma unroll
            for (int i = kb; i < TS; ++i) solve_row(vk[ty + TDIM * i], d, dinv, lr[i]);
            const int qc = tx - kt;                      // this thread owns step column k + qc
            if (qc >= 0 && qc < kStep) {
#pragma unroll
                for (int i = kb; i < TS; ++i) {
                    const int p = ty + TDIM * i - k;     // the row's place relative to the step
                    if (p > qc) a[i][kb] = pick(lr, i, qc);
                    else if (p == qc) a[i][kb] = pick(d, qc, qc);
                }
            }
            // 3. the rank-kStep trailing update, c >= k + kStep and r >= c
#pragma unroll
            for (int j = kb; j < TS; ++j) {
                if (j == kb && tx < kt + kStep) continue;
                float lc[kStep];
                solve_row(vk[tx + TDIM * j], d, dinv, lc);
#pragma unroll
                for (int i = j; i < TS; ++i) {
                    if (i == j && ty < tx) continue;     // the diagonal tile: r >= c needs ty >= tx
#pragma unroll
                    for (int q = 0; q < kStep; ++q) a[i][j] = fmaf(-lr[i][q], lc[q], a[i][j]);
                }
            }
            if constexpr (INV) {                         // 4. X's step rows, then its rows r >= k + kStep, c < k + kStep
                const float4* wk = w[half];
                const int qr = ty - kt;                  // this thread owns X's row k + qr
#pragma unroll
                for (int j = 0; j <= kb; ++j) {
                    if (j == kb && tx >= kt + kStep) continue;
                    float xc[kStep];
                    solve_row(wk[tx + TDIM * j], d, dinv, xc);
                    if (qr >= 0 && qr < kStep) {
                        float own = xc[0];
#pragma unroll
                        for (int q = 1; q < kStep; ++q)
                            if (q == qr) own = xc[q];
                        x[kb][j] = own;
                    }
#pragma unroll
                    for (int i = kb; i < TS; ++i) {
                        if (i == kb && ty < kt + kStep) continue;
#pragma unroll
                        for (int q = 0; q < kStep; ++q) x[i][j] = fmaf(-lr[i][q], xc[q], x[i][j]);
                    }
                }
            }
            // 5. the next step's columns into the other half of v (and rows of X into w)
            if (kt + kStep < TDIM)
                publish_step<TDIM, TS, INV>(a, x, v[half ^ 1], w[half ^ 1], kb, kt + kStep, k + kStep, ty, tx);
            else if (kb + 1 < TS)
                publish_step<TDIM, TS, INV>(a, x, v[half ^ 1], w[half ^ 1], kb + 1, 0, k + kStep, ty, tx);
        }
    }
}

// Halves: a 128-block (16 x 16 threads, 8 x 8 entries each) as two 64-blocks. Thread (ty, tx)'s
// entries of a quarter of the block are a[I0 + i][J0 + j], i, j < 4 (the cyclic layout is the same at
// both sizes), so each half is factored by grouped_steps<16, 4> on its quarter of the registers, with
// its inverse, and the halves are joined by four 64 x 64 x 64 products through shared memory:
//   L21 = A21 X11^T, A22 -= L21 L21^T, (A22 factored), X21 = -X22 (L21 X11).
// The chain stays 32 grouped steps, each with a quarter of the work (model.halves_model is this order).
constexpr int kHalf = 64;                                // rows of a half
constexpr int kHalfLd = kHalf + 4;                       // padded staged rows (below)
constexpr int kHalvesScratch = 2 * kHalf * kHalfLd;      // floats of shared memory halves_steps needs

template <int I0, int J0>
__device__ __forceinline__ void get_quarter(const float (&a)[8][8], float (&q)[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) q[i][j] = a[I0 + i][J0 + j];
}

template <int I0, int J0>
__device__ __forceinline__ void set_quarter(float (&a)[8][8], const float (&q)[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) a[I0 + i][J0 + j] = q[i][j];
}

// A product's operands in shared memory (rows of kHalfLd floats): the row operand as rows[r][k], the column
// operand as cols[k][p] with column c = tx + 16 j at p = 4 tx + j, so a thread's four columns are one float4
// read. The padding puts a row pair's float4 reads, and a staging warp's stores, in distinct banks.
__device__ __forceinline__ void stage_rows(const float (&q)[4][4], float* rows, int ty, int tx) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) rows[(ty + 16 * i) * kHalfLd + tx + 16 * j] = q[i][j];
}

// This thread's quarter q (entries r = ty + 16 i, c = tx + 16 j of M) as the column operand M, or with
// TRANSPOSED M^T.
template <bool TRANSPOSED>
__device__ __forceinline__ void stage_cols(const float (&q)[4][4], float* cols, int ty, int tx) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if constexpr (TRANSPOSED) cols[(tx + 16 * j) * kHalfLd + 4 * ty + i] = q[i][j];   // k = c, column r
            else cols[(ty + 16 * i) * kHalfLd + 4 * tx + j] = q[i][j];                        // k = r, column c
        }
}

// Which terms of a product can be nonzero, by the 16-wide segment s of k (k in [16 s, 16 s + 16)) and the
// thread's quarter entry (i, j) (row r = ty + 16 i, column c = tx + 16 j): the operands are triangular, so
// a segment meets only some of a thread's rows or columns; the skipped terms are exact zeros (or, kLower,
// entries above the diagonal that nobody reads). About 10 of 16 terms remain in each product.
enum Terms {
    kColsFromS,     // cols[k][c] = M[c][k], M lower triangular: k <= c, so j >= s
    kColsUpToS,     // cols[k][c] = M[k][c], M lower triangular: k >= c, so j <= s
    kRowsFromS,     // rows[r][k] = M[r][k], M lower triangular: k <= r, so i >= s
    kLower,         // only the lower triangle of the result is used: i >= j
};

template <int TERMS>
__device__ __forceinline__ constexpr bool live_term(int s, int i, int j) {
    return TERMS == kColsFromS ? j >= s : TERMS == kColsUpToS ? j <= s : TERMS == kRowsFromS ? i >= s : i >= j;
}

// acc[i][j] = sum_k rows[r][k] cols[k][c] over k < 64 for this thread's r = ty + 16 i, c = tx + 16 j, the
// terms TERMS says can be nonzero (acc[i][j] of a dead entry is 0 under kLower).
template <int TERMS>
__device__ __forceinline__ void product_quarter(const float* rows, const float* cols, float (&acc)[4][4], int ty,
                                                int tx) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
#pragma unroll 1                                         // unrolled, cholesky_tiled.cu's kernel spilled
        for (int k4 = 4 * s; k4 < 4 * s + 4; ++k4) {
            float4 rv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (live_term<TERMS>(s, i, 0) || live_term<TERMS>(s, i, 3))
                    rv[i] = *reinterpret_cast<const float4*>(rows + (ty + 16 * i) * kHalfLd + 4 * k4);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const float4 v = *reinterpret_cast<const float4*>(cols + (4 * k4 + kk) * kHalfLd + 4 * tx);
                const float cv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float r = kk == 0 ? rv[i].x : kk == 1 ? rv[i].y : kk == 2 ? rv[i].z : rv[i].w;
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (live_term<TERMS>(s, i, j)) acc[i][j] = fmaf(r, cv[j], acc[i][j]);
                }
            }
        }
    }
}

// acc = R C (C^T with TRANSPOSED) through the scratch's rows and cols, the terms TERMS says can be nonzero;
// the caller has freed the scratch (a barrier after its last reads). acc may be R or C.
template <bool TRANSPOSED, int TERMS>
__device__ __forceinline__ void staged_product(const float (&r)[4][4], const float (&c)[4][4], float* scratch,
                                               float (&acc)[4][4], int ty, int tx) {
    float* rows = scratch;
    float* cols = scratch + kHalf * kHalfLd;
    stage_rows(r, rows, ty, tx);
    stage_cols<TRANSPOSED>(c, cols, ty, tx);
    __syncthreads();
    product_quarter<TERMS>(rows, cols, acc, ty, tx);
}

// Factor a 128-block held as factor_block<16, 8> holds it (x = I on entry) by halves (above); scratch:
// kHalvesScratch floats of 16-byte aligned shared memory that no other thread of the CTA still reads.
__device__ __forceinline__ void halves_steps(float (&a)[8][8], float (&x)[8][8], float floor, int n, int ty, int tx,
                                             float* scratch) {
    float q[4][4], y[4][4], acc[4][4];
    get_quarter<0, 0>(a, q);                             // 1. the first half
    get_quarter<0, 0>(x, y);
    grouped_steps<16, 4, true>(q, y, floor, n < kHalf ? n : kHalf, ty, tx);
    set_quarter<0, 0>(a, q);
    set_quarter<0, 0>(x, y);
    if (n <= kHalf) return;
    get_quarter<4, 0>(a, q);                             // 2. L21 = A21 X11^T
    staged_product<true, kColsFromS>(q, y, scratch, acc, ty, tx);
    set_quarter<4, 0>(a, acc);
    __syncthreads();                                     // 3. A22 -= L21 L21^T, its lower part
    staged_product<true, kLower>(acc, acc, scratch, acc, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j <= i; ++j)
            if (i > j || ty >= tx) a[4 + i][4 + j] -= acc[i][j];
    get_quarter<4, 4>(a, q);                             // 4. the second half
    get_quarter<4, 4>(x, y);
    grouped_steps<16, 4, true>(q, y, floor, n - kHalf, ty, tx);
    set_quarter<4, 4>(a, q);
    set_quarter<4, 4>(x, y);
    float l21[4][4], x11[4][4], t[4][4];                 // 5. T = L21 X11
    get_quarter<4, 0>(a, l21);
    get_quarter<0, 0>(x, x11);
    __syncthreads();
    staged_product<false, kColsUpToS>(l21, x11, scratch, t, ty, tx);
    __syncthreads();                                     // 6. X21 = -X22 T
    staged_product<false, kRowsFromS>(y, t, scratch, acc, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) x[4 + i][j] = -acc[i][j];
}

// Factor the n x n block at A (leading dimension ld) into out (A's lower triangle is read; out may equal
// A) and, with INV, X = inv(L) into xinv (n x n, leading dimension n). diag_max: this matrix's max_i a_ii
// (the pivot floor), or NULL for the block's own. halves: (16 x 8 with the inverse, GROUPED) factor by
// halves_steps in scratch (kHalvesScratch floats of shared memory). GROUPED: kStep columns per step, for
// a chain of single blocks (128 x 128 with the inverse at batch 1: 38 against 44 us; at batch 264 81 against 93;
// without the inverse it loses at large batch, 51 against 39: H200, de3f7a4). Each grouped
// instantiation costs ~1.2 s of nvcc here (~3 s of the H200's cold compile; the column steps ~0.3 s),
// so only the 128-blocks with the inverse take them (cholesky_tiled.cu, cholesky_lookahead.cu).
template <int TDIM, int TS, bool INV, bool GROUPED = false>
__device__ __forceinline__ void factor_block(const float* A, float* out, float* __restrict__ xinv,
                                             const float* __restrict__ diag_max, int n, int ld,
                                             int halves = 0, float* scratch = nullptr) {
    constexpr int XS = INV ? TS : 1;                     // the inverse's tile (unused without INV)
    const int tx = threadIdx.x % TDIM, ty = threadIdx.x / TDIM;
    float a[TS][TS], x[XS][XS];
#pragma unroll
    for (int i = 0; i < TS; ++i) {
        const int r = ty + TDIM * i;
#pragma unroll
        for (int j = 0; j < TS; ++j) {
            const int c = tx + TDIM * j;
            a[i][j] = (r < n && c <= r) ? A[(size_t)r * ld + c] : (r == c ? 1.f : 0.f);
            if constexpr (INV) x[i][j] = (r == c) ? 1.f : 0.f;
        }
    }
    const float floor = pivot_floor<TDIM, TS>(a, diag_max, n, ty, tx);
    if constexpr (GROUPED && INV && TDIM == 16 && TS == 8) {
        if (halves)
            halves_steps(a, x, floor, n, ty, tx, scratch);
        else
            grouped_steps<TDIM, TS, INV>(a, x, floor, n, ty, tx);
    } else if constexpr (GROUPED)
        grouped_steps<TDIM, TS, INV>(a, x, floor, n, ty, tx);
    else
        column_steps<TDIM, TS, INV>(a, x, floor, n, ty, tx);
    store_lower_tile<TDIM, TS>(a, out, ld, n, ty, tx);
    if constexpr (INV) store_lower_tile<TDIM, TS>(x, xinv, n, n, ty, tx);
}

}  // namespace tiled
''',
    "cholesky/cholesky_tiled.cu": r'''
// cholesky, n <= 128: one CTA per matrix (or per diagonal block), the matrix in registers.
//
// Computes L, lower triangular with A = L L^T, by right-looking Cholesky (the spotf2 recurrence: for
// k = 0..n-1, l_kk = sqrt(a_kk), l_rk = a_rk / l_kk, a_rj -= l_rk l_jk for k < j <= r), and
// optionally X = inv(L). Pivot floor: a pivot d <= f, f = eps * max_i a_ii of the matrix (the
// caller passes max_i a_ii for a diagonal block of a larger matrix), becomes f. An SPD matrix
// meets such a pivot only through roundoff (a numerically singular matrix); flooring perturbs A
// by at most ~2 f, far inside the 20 n eps ||A||_1 gate, and keeps L finite without a host-side
// check (a NaN pivot stays NaN). A truly indefinite input still gives a finite L that the
// reconstruction gate rejects.
// The block sits at src with leading dimension ld and a batch stride of `stride` floats (whole
// matrices: ld = n, stride = n * n; a diagonal block of an N x N matrix: ld = N, stride = N * N).
//
// Layout: a TDIM x TDIM grid of threads; thread (ty, tx) holds the TS x TS elements
//   a[i][j] = A[ty + TDIM i][tx + TDIM j]      (cyclic, so every thread keeps working to the end)
// of the padded NP x NP matrix (NP = TDIM * TS >= n; the padding is the identity, which factors
// to itself and never touches the real entries). Two step loops (tiled_block.cuh):
// Column steps (the plain factorization and the 64-blocks), step k = kb TDIM + kt:
//   1. thread (kt, kt) owns a_kk: floors it, writes l_kk and shares 1 / l_kk = rsqrt(a_kk)
//      (popkit::cholesky_pivot);
//   2. the threads of column k (tx == kt) scale their entries below the diagonal and publish them
//      in a shared vector v (v[r] = l_rk);
//   3. every thread updates its entries with c > k and r >= c: a[i][j] -= v[r_i] v[c_j].
//   With the kb loop unrolled, "c_j > k" and "r_i >= c_j" are compile-time facts except on one tile
//   column and one tile diagonal, so step 3 is TS^2 predicated FMAs from registers plus 2 TS
//   shared-memory reads. Two barriers per step.
//   Inverse (INV, for the blocked route's diagonal blocks): X = inv(L) by column elimination of
//   L X = I in the same loop and layout (x[i][j] = X[ty + TDIM i][tx + TDIM j], X = I at the start):
//   at step k, row k of X is final; its owners (ty == kt) scale it by 1 / l_kk and publish it in a
//   second shared vector w, and every thread updates x[i][j] -= v[r_i] w[c_j] for r > k >= c. The two
//   updates cover complementary parts of the lower triangle (c > k and c <= k), so the inverse costs
//   about as much as the factorization and adds no barrier.
// Grouped steps (tiled::factor_block's GROUPED: this kernel's (16, 8) shape with the inverse, i.e. the
// 128-blocks of the blocked route, and cholesky_lookahead.cu's diagonal role): four columns per step
// (kStep; they lie in one tile column, owned by threads tx = kt .. kt + 3), one barrier per step. At
// the barrier that opens the step at column k, its four columns of the updated matrix (rows r >= k,
// unscaled) sit in shared memory, one float4 per row, and so do the step's four rows of X (columns
// c < k + 4), both published by their owners during the previous step. Then every thread:
//   1. factors the 4 x 4 diagonal block itself (floored pivots as above), the same value in every
//      thread, so nothing is shared back;
//   2. solves its rows' four L values (forward substitution with that block, in the block's own
//      order, so a row inside the block comes out bit-identical); the columns' owners keep theirs;
//   3. applies the rank-4 update to its entries with c >= k + 4 and r >= c (the same solve gives the
//      four L values of each of its columns);
//   4. solves its columns' four X values with the block (the rows' owners keep them) and updates
//      x[i][j] -= L[r, k..k+3] X[k..k+3, c] for r >= k + 4 > c (X = I at the start; the elimination of
//      L X = I);
//   5. if it owns the next step's columns or rows of X, publishes them into the other half of the
//      double-buffered vectors (a thread writing there has passed this step's barrier, so no one
//      still reads that half).
//   The chain is n / 4 steps instead of n: 128 x 128 with the inverse 44 -> 38 us at batch 1, 93 -> 81
//   at batch 264 (H200, de3f7a4). model.right_looking_model(step = 4) and model.inverse_model(step = 4)
//   are this order.
//
// Launch: grid = batch, TDIM^2 threads; (TDIM, TS) = (8, 8) for n <= 64, (16, 8) for n <= 128.
// Shared memory, static: 2 NP floats (v, w).
// Why it is fast: the arithmetic runs from registers (shared memory carries one or two vectors per
// step, not the matrix); global memory is read and written once, 16-float row segments per
// half-warp; one CTA per matrix keeps hundreds of matrices in flight on 132 SMs. The inverse's
// earlier version (each thread forward-substituting one column from shared memory) was a serial
// chain of n^2 / 2 dependent FMAs: ~85 of the ~110 us of a 128 x 128 diagonal block. A variant
// with one barrier per step (a column's threads as lanes of one warp, sharing the pivot by
// shuffle) was slower (H200, c17ca65: 1x4096's diagonal blocks 1.84 ms against 1.61): its
// column-major thread order made every global access touch 16 rows.

namespace {

template <int TDIM, int TS, bool INV>
__global__ void __launch_bounds__(TDIM * TDIM)
cholesky_tiled_kernel(const float* src, float* dst, float* __restrict__ xinv, const float* __restrict__ diag_max,
                      int n, int ld, int stride, int halves) {
    const size_t b = blockIdx.x;
    // 128-blocks with the inverse take the grouped steps (16x512 228 against 255 us, H200 at 40c270a),
    // or the halves; 64-blocks keep the column steps (one grouped instantiation less in the cold compile)
    constexpr bool kGrouped = INV && TDIM == 16;
    __shared__ __align__(16) float scratch[kGrouped ? tiled::kHalvesScratch : 1];
    tiled::factor_block<TDIM, TS, INV, kGrouped>(src + b * stride, dst + b * stride, INV ? xinv + b * n * n : nullptr,
                                                 diag_max ? diag_max + b : nullptr, n, ld, kGrouped ? halves : 0,
                                                 scratch);
}

template <int TDIM, int TS>
int launch(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n, int ld, int stride,
           int halves) {
    if (xinv)
        cholesky_tiled_kernel<TDIM, TS, true><<<batch, TDIM * TDIM>>>(src, dst, xinv, diag_max, n, ld, stride, halves);
    else
        cholesky_tiled_kernel<TDIM, TS, false><<<batch, TDIM * TDIM>>>(src, dst, xinv, diag_max, n, ld, stride, 0);
    return (int)cudaGetLastError();
}

}  // namespace

// Factor `batch` n x n blocks (src/dst: leading dimension ld, batch stride `stride` floats; src may
// equal dst). xinv: NULL or batch x n x n for inv(L). diag_max: NULL (the pivot floor comes from
// this block's own diagonal) or max_i a_ii of each block's whole matrix. (tdim, ts): the thread
// grid and tile, tdim * ts >= n: (8, 8) or (16, 8) (each instantiation costs ~1 s of the cold compile).
// halves: with xinv and (16, 8), factor by tiled_block.cuh's halves_steps.
POPKIT_EXPORT int cholesky_tiled(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n,
                                 int ld, int stride, int tdim, int ts, int halves) {
    if (batch < 1 || n < 1 || n > tdim * ts || ld < n || stride < n) return (int)cudaErrorInvalidValue;
    if (tdim == 8 && ts == 8) return launch<8, 8>(src, dst, xinv, diag_max, batch, n, ld, stride, 0);
    if (tdim == 16 && ts == 8) return launch<16, 8>(src, dst, xinv, diag_max, batch, n, ld, stride, halves);
    return (int)cudaErrorInvalidValue;
}
''',
    "cholesky/cholesky_split.cu": r'''
// cholesky, blocked route with a split-TF32 trailing update: the update's operands, in one pass.
//
// Given L21 (batch x m x w, contiguous: the panel cuBLAS computed as A21 inv(L11)^T), writes it back
// into the panel of L and writes the operands of the split-TF32 trailing update:
//   y = hi + lo, hi = y rounded to TF32 (10 mantissa bits, ties away from zero), lo = y - hi (exact),
//   left = [hi | hi | lo], right = [hi | lo | hi]    (batch x m x 3w each, contiguous),
// so that left right^T = hi hi^T + hi lo^T + lo hi^T = L21 L21^T to ~21 bits in one TF32 GEMM
// (model.panel_model and model.tf32_split are the same arithmetic).
//
// Launch: a grid-stride loop over the batch * m rows, one row per CTA step, 128 threads on its
// columns: every read and each of the 7 writes is coalesced, with one 64-bit division per row.
// Why: one memory-bound launch (4 bytes read, 28 written per element) replaces the copy and ~7
// elementwise and concatenation ops. A kernel that also computed the product in place (SIMT, X in
// shared memory) took 25-30 us per 1 x 4096 panel, slower than cuBLAS plus this pass (H200,
// eb7f279-1455df0); written from per-thread column strips, its stores touched 32 sectors per warp
// store, 7 times per element (1x32768: 247 ms against 218).

namespace {

__device__ __forceinline__ float round_to_tf32(float y) {
    return __int_as_float((__float_as_int(y) + 0x1000) & ~0x1fff);
}

__global__ void cholesky_split_kernel(const float* __restrict__ l21, float* panel, float* __restrict__ left,
                                      float* __restrict__ right, long long rows, int m, int w, int ld,
                                      long long stride) {
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {          // row = b * m + r
        const long long b = row / m;
        const int r = (int)(row - b * m);
        const float* src = l21 + row * w;
        float* dst = panel + b * stride + (long long)r * ld;
        float* lrow = left + row * 3 * w;
        float* rrow = right + row * 3 * w;
        for (int c = threadIdx.x; c < w; c += blockDim.x) {
            const float y = src[c], hi = round_to_tf32(y), lo = y - hi;
            dst[c] = y;
            lrow[c] = hi;
            lrow[w + c] = hi;
            lrow[2 * w + c] = lo;
            rrow[c] = hi;
            rrow[w + c] = lo;
            rrow[2 * w + c] = hi;
        }
    }
}

}  // namespace

// l21: batch x m x w contiguous; panel: its place in L (first element, leading dimension ld, batch
// stride `stride` floats); left, right: batch x m x 3w each.
POPKIT_EXPORT int cholesky_split(const float* l21, float* panel, float* left, float* right, int batch, int m, int w,
                                 int ld, int stride) {
    if (batch < 1 || m < 1 || w < 1 || ld < w || !l21 || !panel || !left || !right) return (int)cudaErrorInvalidValue;
    const long long rows = (long long)batch * m;
    const int grid = (int)(rows < 8192 ? rows : 8192);  // a grid-stride loop: enough CTAs to fill any GPU
    cholesky_split_kernel<<<grid, 128>>>(l21, panel, left, right, rows, m, w, ld, stride);
    return (int)cudaGetLastError();
}
''',
    "cholesky/tf32x3.cuh": r'''
// The tf32x3 product's shared pieces, for its two kernels (cholesky_product_mma.cu on any GPU from
// sm_80, cholesky_product_wgmma.cu on sm_90a): the split of an operand into TF32 hi + lo, the tile a
// CTA owns, and the epilogue that writes (or subtracts) a warp's accumulators.
//
// Both kernels compute C = P Q^T or C = C_in - P Q^T (struct Product) in kTile x kTile tiles of C:
// grid.x runs over every tile, or over the T (T + 1) / 2 tiles on and below the diagonal (LOWER,
// square C), grid.y over the batch.

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

// x = hi + lo: hi = x rounded to TF32 (10 mantissa bits, ties away from zero) by integer ops, lo = x - hi
// exact in fp32; the tensor core reads lo's top 19 bits (truncation). Two integer ops and a subtract
// instead of two cvt.rna.tf32 conversions per element (model.tf32_round, model.tf32_truncate).
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
    hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}

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

// Copy VEC floats global -> shared without blocking (cp.async); a row past the matrix fills with zeros.
template <int VEC>
__device__ __forceinline__ void copy_async(float* dst, const float* src, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    const int bytes = valid ? VEC * 4 : 0;
    if constexpr (VEC == 4)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(bytes));
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
        copy_async<VEC>(s + r * LDS + c, M + offset, valid);
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
''',
    "cholesky/cholesky_product_mma.cu": r'''
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

namespace {

using tf32x3::kChunk;
using tf32x3::kTile;

constexpr int kMmaLds = kChunk + 4;                             // padded shared row (floats)
constexpr int kMmaThreads = 256;
constexpr int kMmaStageFloats = 2 * kTile * kMmaLds;             // P and Q chunks
constexpr int kMmaSmemBytes = 2 * kMmaStageFloats * (int)sizeof(float);  // double-buffered

__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

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
        for (int e = 0; e < 2; ++e) tf32x3::split_tf32(fb[ni][e], bh[ni][e], bl[ni][e]);
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
        unsigned ah[4], al[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) tf32x3::split_tf32(fa[mi][e], ah[e], al[e]);
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
    asm volatile("cp.async.commit_group;\n" ::);
    for (int kc = 0; kc < chunks; ++kc) {
        if (kc + 1 < chunks) {                           // the next chunk loads while this one computes
            float* next = smem + ((kc + 1) & 1) * kMmaStageFloats;
            const int k = (kc + 1) * kChunk;
            tf32x3::stage_rows<VEC, kMmaThreads, kMmaLds>(next, p, ldp, row0, m, k);
            tf32x3::stage_rows<VEC, kMmaThreads, kMmaLds>(next + kTile * kMmaLds, q, ldq, col0, ncols, k);
        }
        asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group 1;\n" ::);
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
''',
    "cholesky/wgmma_tf32.cuh": r'''
// The tf32x3 product's Hopper pieces (sm_90a), shared by cholesky_product_wgmma.cu and
// cholesky_lookahead.cu: Q's hi/lo planes in the no-swizzle K-major layout wgmma reads (per k8 step of a
// 128-row tile: 8-row x 16-byte core matrices, 128 bytes apart along N, 2048 along K), their
// descriptors, and wgmma m64n128k8 with A from registers.

namespace hopper {

using tf32x3::kChunk;
using tf32x3::kTile;

constexpr int kStepWords = 8 * kTile;                        // Q's tile for one k8 step: 1024 floats
constexpr int kPlaneWords = (kChunk / 8) * kStepWords;       // one chunk, hi or lo
constexpr int kStageWords = 2 * kPlaneWords;                 // hi and lo

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ float component(const float4& v, int s) {
    return s == 0 ? v.x : s == 1 ? v.y : s == 2 ? v.z : v.w;
}

constexpr unsigned kKBytes = 4 * kTile * 4;                  // core matrices along K: 2048 bytes apart
constexpr unsigned kNBytes = 8 * 4 * 4;                      // along N: 128 bytes apart

// wgmma's shared-memory descriptor of a plane step (no swizzle): start, K and N core-matrix strides.
__device__ __forceinline__ unsigned long long plane_descriptor(const float* s) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(s);
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)(kKBytes >> 4) << 16) |
           ((unsigned long long)(kNBytes >> 4) << 32);
}

// d += A B^T for a warpgroup's 64 x 128 tile and one k8 step: A from registers, B from the plane.
__device__ __forceinline__ void wgmma_tf32(float (&d)[16][4], const unsigned (&a)[4], unsigned long long b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63},"
        " {%64,%65,%66,%67}, %68, p, 1, 1;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
          "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
          "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
          "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
          "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
          "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
          "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
          "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
          "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
          "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
          "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
          "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
          "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
          "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
          "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// d += A B^T for a warpgroup's 64 x 64 tile (the plane's first 64 rows) and one k8 step.
__device__ __forceinline__ void wgmma_tf32(float (&d)[8][4], const unsigned (&a)[4], unsigned long long b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
        " {%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
          "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
          "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
          "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
          "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
          "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
          "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// Keep the compiler from moving registers that an in-flight wgmma reads or writes.
template <int N>
__device__ __forceinline__ void pin(float (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+f"(r[i][0]), "+f"(r[i][1]), "+f"(r[i][2]), "+f"(r[i][3])::"memory");
}

__device__ __forceinline__ void pin(unsigned (&r)[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
        asm volatile("" : "+r"(r[i][0]), "+r"(r[i][1]), "+r"(r[i][2]), "+r"(r[i][3])::"memory");
}

#endif

}  // namespace hopper
''',
    "cholesky/cholesky_product_wgmma.cu": r'''
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
            tf32x3::split_tf32(component(rb[i], s), h, l);
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
        for (int e = 0; e < 4; ++e) tf32x3::split_tf32(component(ra[e], s), ah[s][e], al[s][e]);
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
''',
    "cholesky/cholesky_lookahead.cu": r'''
// cholesky, one step's trailing update and the next diagonal block's factorization in one launch
// (sm_90a).
//
// Step k of the blocked driver factors block k, forms the panel L21 and updates A22 -= L21 L21^T; block
// k + 1 is A22's first 128 x 128 tile. Here one CTA per lower tile of A22 runs the update, and the CTA
// of tile 0 then factors that tile in place (tiled_block.cuh's grouped steps, with the inverse, ~38 us
// at batch 1), while the other CTAs are still updating theirs: the diagonal block runs under the rest
// of the update instead of after it, and the step costs two launches (panel, this) instead of three.
// The tile's own writes are visible to its CTA after a barrier; no other CTA reads or writes that tile.
// Launch: grid (lower tiles, batch), 256 threads, 208 KiB of dynamic shared memory (the product role's;
// the diagonal role adds 8 KiB of static), one CTA per SM.
// Product role, C = C_in - P Q^T on one 128 x 128 lower tile (tf32x3 as in cholesky_product_wgmma.cu,
// model.tf32x3_product): two warpgroups of 64 rows each (wgmma m64n128k8). All of the tile's P and Q
// rows (K <= 128) are copied into shared memory by cp.async at the start, one group per chunk of 32
// columns, so every global load is in flight at once (rows padded to 144 floats: 16-byte reads by 8
// lanes over two rows hit distinct banks); per chunk each thread splits its own A fragments into
// registers and the CTA splits Q's chunk into hi/lo planes (wgmma_tf32.cuh), double-buffered so that
// one chunk's split runs under the previous chunk's wgmmas. On its own, as a trailing-update kernel,
// it matched cholesky_product_wgmma.cu (H200: 1x8192 7.55 against 7.51 ms), and its 256 threads match
// the diagonal role's 16 x 16.

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

// The product role: lower tile (ti, tj) of C = C_in - P Q^T for matrix blockIdx.y. P's rows stay staged
// in smem (raw rows of kRawLd floats) afterwards.
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
    tf32x3::store_fragments<VEC, true, true>(acc, op.c_in + offset, op.c + offset, op.ldc,
                                             row0 + 16 * (threadIdx.x >> 5), col0, op.m, op.ncols);
}
#endif

// Rows [row0, row0 + rows) of the panel, staged in raw (K columns), into L's panel (ld floats apart) and
// zeros into their mirror above the diagonal block.
__device__ __forceinline__ void copy_panel_rows(const float* raw, const tf32x3::PanelCopy& panel, int row0, int rows, int K) {
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
        copy_panel_rows(reinterpret_cast<const float*>(smem4) + (ti == tj ? 0 : kRawWords), panel, row0, rows, op.K);
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
int launch_lookahead(const tf32x3::Product& op, const tiled::DiagBlock& diag, const tf32x3::PanelCopy& panel, int batch) {
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
POPKIT_EXPORT int cholesky_lookahead_step(tf32x3::Product op, tiled::DiagBlock diag, tf32x3::PanelCopy panel, int batch) {
    if (batch < 1 || op.m < 1 || op.ncols != op.m || diag.n != (op.m < kTile ? op.m : kTile) ||
        diag.src != op.c || diag.dst != op.c || !diag.xinv || !diag.diag_max || op.K < kChunk || op.K > kMaxK ||
        op.K % kChunk != 0 || !panel.dst || !panel.mirror || !tf32x3::aligned16(panel.dst) || panel.ld % 4 ||
        panel.stride % 4)
        return (int)cudaErrorInvalidValue;
    return tf32x3::rows_aligned16(op) ? launch_lookahead<4>(op, diag, panel, batch) : (int)cudaErrorInvalidValue;
}
''',
    "cholesky/cholesky_blocked.cu": r'''
// cholesky, blocked route in one call: the right-looking loop runs in the library, every step on
// our own kernels, so no Python (and no cuBLAS launch) sits between two steps.
//
// For k0 = 0, nb, 2 nb, ... (w = min(nb, n - k0)):
//   1. cholesky_tiled.cu factors the diagonal block and writes X = inv(L11);
//   2. the panel:                  L21 = A21 X^T      (a tf32x3 product)
//   3. the trailing update:        A22 -= L21 L21^T   (a tf32x3 product, lower tiles only)
// Step 0 reads A and writes L; A is neither copied nor changed, and L's upper triangle gets zeros from
// the diagonal kernel (inside each block) and the panel (its mirror), so no pass over the whole matrix
// remains (a clone and a tril_ were ~80 us at 1x4096; model.blocked_tf32x3_model is the algorithm).
//
// The products are tf32x3 (~21 bits on TF32 tensor cores, tf32x3.cuh): cholesky_product_wgmma.cu on a
// compute capability 9.0 GPU (the build targets sm_90a there), cholesky_product_mma.cu elsewhere. From
// step 1 on the panel runs in place: its grid has one column tile (w <= 128), so a CTA reads all of
// its P rows before it writes them. On the H200 the loop has a look-ahead (blocked_lookahead below):
// the next diagonal block is factored in the same launch as the rest of each trailing update, so the
// chain of diagonal blocks (~43 us each at batch 1) runs under the update.
// Why it is fast: the whole factorization is one call, so no host time sits between steps (the
// Python loop spent ~25 us per step on 5 launches, views and precision switches, more than the GPU
// needed for most steps of a 1 x 4096 matrix); the products run on tensor cores at ~fp32 accuracy
// and the trailing update skips the upper tiles.

// The other parts' entry points (the same translation unit in the built file).
POPKIT_EXPORT int cholesky_tiled(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n,
                                 int ld, int stride, int tdim, int ts, int halves);
POPKIT_EXPORT int tf32x3_product_mma(tf32x3::Product op, int batch, int mode);
POPKIT_EXPORT int tf32x3_product_wgmma(tf32x3::Product op, int batch, int mode);
POPKIT_EXPORT int cholesky_lookahead_step(tf32x3::Product op, tiled::DiagBlock diag, tf32x3::PanelCopy panel,
                                          int batch);

namespace {

// max_i a_ii of each matrix (the pivot floor's input): the driver's first launch, one CTA per matrix.
// A NaN on the diagonal is skipped here; it still turns its own pivot into NaN.
__global__ void diagonal_max_kernel(const float* A, float* diag_max, int n) {
    __shared__ float scratch[32];
    const float* a = A + blockIdx.x * (size_t)n * n;
    float top = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) top = fmaxf(top, a[(size_t)i * (n + 1)]);
    top = popkit::block_max(top, scratch);
    if (threadIdx.x == 0) diag_max[blockIdx.x] = top;
}

// Whether the current GPU takes cholesky_product_wgmma.cu (compute capability 9.0; the loader builds for
// the running GPU, so the sm_90a kernels are there).
bool has_wgmma() {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major == 9;
}

// The panel product of a w-column block: L21 = A21 X^T (X = inv(L11) in xinv, w x w), and zeros at
// mirror, where L21^T would sit right of the diagonal block.
tf32x3::Product panel_of(const float* a21, float* l21, float* mirror, const float* xinv, int n, long long stride,
                         int m, int w) {
    return {a21, n, stride, xinv, w, (long long)w * w, a21, l21, n, stride, mirror, m, w, w};
}

// The blocked loop with a look-ahead (cholesky_lookahead.cu; wgmma GPUs, 16 x 16 diagonal blocks, n a
// multiple of 4): per step the panel, then one launch for the trailing update in which the CTA of its
// first tile factors that tile, the next diagonal block, while the others update the rest. The panel is
// written out of place, into `panel` ((n - nb) x nb floats per matrix), and CTAs of the update that
// staged its rows copy it into L: no CTA then reads what another writes, so each panel tile is shared by four CTAs
// (tf32x3::kPanelSplit: H200 sweep at 339906f, us, split / two CTAs per tile: 1x4096 2001 / 2057, 8x2048
// 1327 / 1343, 1x8192 5761 / 5894). Same arguments, result and order of operations as cholesky_blocked
// (model.blocked_tf32x3_model).
int blocked_lookahead(const float* A, float* L, float* xinv, float* panel, const float* diag_max, int batch, int n,
                      int nb, int halves) {
    const long long stride = (long long)n * n;
    const int w0 = n < nb ? n : nb;
    int err = cholesky_tiled(A, L, w0 < n ? xinv : nullptr, diag_max, batch, w0, n, (int)stride, 16, 8, halves);
    for (int k0 = 0; !err && k0 + nb < n; k0 += nb) {    // block k0 is factored, its inverse in xinv
        const int next = k0 + nb, m = n - next, w2 = m < nb ? m : nb;
        const float* src = (k0 == 0 ? A : L) + (size_t)k0 * n + k0;
        float* block = L + (size_t)k0 * n + k0;
        const float* a21 = src + (size_t)nb * n;
        float* l21 = block + (size_t)nb * n;
        const long long panel_stride = (long long)(n - nb) * nb;
        const tf32x3::Product out_of_place = {a21, n, stride, xinv, nb, (long long)nb * nb, a21, panel, nb,
                                              panel_stride, nullptr, m, nb, nb};
        err = tf32x3_product_wgmma(out_of_place, batch, tf32x3::kPanelSplit);
        if (err) break;
        // A22 -= L21 L21^T on the lower tiles, and block `next` (A22's first tile) factored in place
        const tf32x3::Product trailing = {panel, nb, panel_stride, panel, nb, panel_stride, a21 + nb, l21 + nb, n,
                                          stride, nullptr, m, m, nb};
        const tiled::DiagBlock diag = {l21 + nb, l21 + nb, xinv, diag_max, w2, n, stride, halves};
        err = cholesky_lookahead_step(trailing, diag, {l21, block + nb, n, stride}, batch);
    }
    return err;
}

// The blocked loop in two levels (model.blocked_two_level_model; wgmma GPUs): blocks of nb columns
// inside outer panels of `outer` columns. Each block's trailing update reaches only the columns of its
// outer panel (one product over the whole m x cols rectangle; the upper tiles it also writes are
// overwritten later by the diagonal blocks and the panels' mirrors); the rest waits for one update per
// outer panel with K = outer. A step with K = nb reads and writes the whole trailing triangle, ~n^3 /
// (3 nb) x 4 bytes over the run (~0.37 TB at n = 32768, nb = 128): outer = 512 cuts that 4x.
int blocked_two_level(const float* A, float* L, float* xinv, const float* diag_max, int batch, int n, int nb,
                      int outer, int tdim, int ts, int halves, decltype(&tf32x3_product_mma) product) {
    const long long stride = (long long)n * n;
    for (int s0 = 0; s0 < n; s0 += outer) {
        const int s1 = n - s0 < outer ? n : s0 + outer;
        for (int k0 = s0; k0 < s1; k0 += nb) {
            const int w = n - k0 < nb ? n - k0 : nb;
            const float* src = (k0 == 0 ? A : L) + (size_t)k0 * n + k0;
            float* block = L + (size_t)k0 * n + k0;
            if (k0 + w == n) return cholesky_tiled(src, block, nullptr, diag_max, batch, w, n, (int)stride, tdim, ts, 0);
            int err = cholesky_tiled(src, block, xinv, diag_max, batch, w, n, (int)stride, tdim, ts, halves);
            if (err) return err;
            const int m = n - k0 - w, cols = s1 - k0 - w;
            const float* a21 = src + (size_t)w * n;
            float* l21 = block + (size_t)w * n;
            err = product(panel_of(a21, l21, block + w, xinv, n, stride, m, w), batch, tf32x3::kPanel);
            if (err) return err;
            if (cols == 0) continue;
            // the update inside the outer panel: every row below, the outer panel's remaining columns
            const tf32x3::Product inner = {l21, n, stride, l21, n, stride, a21 + w, l21 + w, n, stride,
                                           nullptr, m, cols, w};
            err = product(inner, batch, tf32x3::kColumn);
            if (err) return err;
        }
        // the deferred update right of the outer panel, K = s1 - s0, on the lower tiles
        const float* c_in = (s0 == 0 ? A : L) + (size_t)s1 * n + s1;
        const float* l21s = L + (size_t)s1 * n + s0;
        const tf32x3::Product rest = {l21s, n, stride, l21s, n, stride, c_in, L + (size_t)s1 * n + s1, n, stride,
                                      nullptr, n - s1, n - s1, s1 - s0};
        const int err = product(rest, batch, tf32x3::kTrailing);
        if (err) return err;
    }
    return (int)cudaSuccess;
}

}  // namespace

// Factor `batch` n x n matrices: A (read only; its lower triangle) into L (written whole: the factor
// and zeros above the diagonal). work: batch x (nb x nb + 1) floats of workspace: the diagonal blocks'
// inverses, then max_i a_ii of each matrix, which the driver's first kernel writes (the pivot floor;
// torch's own reduction before the call cost ~10 us of host time, as much as a small step's kernel).
// panel: NULL, or batch x (n - nb) x nb floats where the look-ahead writes each panel out of place.
// (tdim, ts, halves): cholesky_tiled.cu's shape for the diagonal blocks (tdim * ts >= nb) and whether its
// 128-blocks go by halves (tiled_block.cuh halves_steps). nb: a multiple of 32, at most 128. outer: 0, or
// a multiple of nb for blocked_two_level (taken when nb < outer < n);
// otherwise lookahead: take blocked_lookahead where it applies (nb = 128 and a panel buffer).
// portable: use cholesky_product_mma.cu even on a wgmma GPU (to check and time the other GPUs' path).
// n * n < 2^31 (the products' 32-bit row offsets). Step 0 reads A and writes L, later steps work in L,
// so A is never copied; the diagonal kernel writes zeros above its block's diagonal and each panel's
// mirror gets zeros (from the panel kernel, or in the look-ahead from the CTAs that copy the panel),
// which together cover L's upper triangle.
POPKIT_EXPORT int cholesky_blocked(const float* A, float* L, float* work, float* panel, int batch, int n, int nb,
                                   int tdim, int ts, int halves, int lookahead, int outer, int portable) {
    if (batch < 1 || n < 1 || (long long)n * n >= (1LL << 31) || nb < tf32x3::kChunk || nb > tf32x3::kTile ||
        nb % tf32x3::kChunk != 0 || tdim * ts < nb || outer < 0 || (outer && outer % nb != 0) || !A || !L || !work)
        return (int)cudaErrorInvalidValue;
    float* xinv = work;
    float* diag_max = work + (size_t)batch * nb * nb;
    diagonal_max_kernel<<<batch, 256>>>(A, diag_max, n);
    if (const cudaError_t err = cudaGetLastError()) return (int)err;
    const bool wgmma = !portable && has_wgmma();
    const auto product = wgmma ? tf32x3_product_wgmma : tf32x3_product_mma;
    if (outer > nb && outer < n && wgmma)                // kColumn is wgmma-only
        return blocked_two_level(A, L, xinv, diag_max, batch, n, nb, outer, tdim, ts, halves, product);
    if (lookahead && wgmma && tdim == 16 && ts == 8 && n % 4 == 0 && nb == tf32x3::kTile && panel)
        return blocked_lookahead(A, L, xinv, panel, diag_max, batch, n, nb, halves);   // aligned rows
    const long long stride = (long long)n * n;
    for (int k0 = 0; k0 < n; k0 += nb) {
        const int w = n - k0 < nb ? n - k0 : nb;
        const float* src = (k0 == 0 ? A : L) + (size_t)k0 * n + k0;     // this step's input: A, then L
        float* block = L + (size_t)k0 * n + k0;
        if (k0 + w == n) return cholesky_tiled(src, block, nullptr, diag_max, batch, w, n, (int)stride, tdim, ts, 0);
        int err = cholesky_tiled(src, block, xinv, diag_max, batch, w, n, (int)stride, tdim, ts, halves);
        if (err) return err;
        const int m = n - k0 - w;
        const float* a21 = src + (size_t)w * n;
        float* l21 = block + (size_t)w * n;
        err = product(panel_of(a21, l21, block + w, xinv, n, stride, m, w), batch, tf32x3::kPanel);
        if (err) return err;
        // A22 -= L21 L21^T on the lower tiles
        const tf32x3::Product trailing = {l21, n, stride, l21, n, stride, a21 + w, l21 + w, n, stride,
                                          nullptr, m, m, w};
        err = product(trailing, batch, tf32x3::kTrailing);
        if (err) return err;
    }
    return (int)cudaSuccess;
}
''',
}
# The translation units the loader compiles in parallel: every header part, then one .cu part.
CUDA_UNITS = [
    ["common/device_utils.cuh", "cholesky/pivot.cuh", "cholesky/tiled_block.cuh", "cholesky/tf32x3.cuh", "cholesky/wgmma_tf32.cuh", "cholesky/cholesky_small.cu"],
    ["common/device_utils.cuh", "cholesky/pivot.cuh", "cholesky/tiled_block.cuh", "cholesky/tf32x3.cuh", "cholesky/wgmma_tf32.cuh", "cholesky/cholesky_tiled.cu"],
    ["common/device_utils.cuh", "cholesky/pivot.cuh", "cholesky/tiled_block.cuh", "cholesky/tf32x3.cuh", "cholesky/wgmma_tf32.cuh", "cholesky/cholesky_split.cu"],
    ["common/device_utils.cuh", "cholesky/pivot.cuh", "cholesky/tiled_block.cuh", "cholesky/tf32x3.cuh", "cholesky/wgmma_tf32.cuh", "cholesky/cholesky_product_mma.cu"],
    ["common/device_utils.cuh", "cholesky/pivot.cuh", "cholesky/tiled_block.cuh", "cholesky/tf32x3.cuh", "cholesky/wgmma_tf32.cuh", "cholesky/cholesky_product_wgmma.cu"],
    ["common/device_utils.cuh", "cholesky/pivot.cuh", "cholesky/tiled_block.cuh", "cholesky/tf32x3.cuh", "cholesky/wgmma_tf32.cuh", "cholesky/cholesky_lookahead.cu"],
    ["common/device_utils.cuh", "cholesky/pivot.cuh", "cholesky/tiled_block.cuh", "cholesky/tf32x3.cuh", "cholesky/wgmma_tf32.cuh", "cholesky/cholesky_blocked.cu"],
]

# ---- part common/cuda_loader.py ----
"""Compile the embedded CUDA once and call its C entry points through ctypes.

The CUDA sources include no torch headers, so the build is a plain shared
object (is_python_module=False, no torch includes in the source): seconds of
nvcc instead of the ~45 s a torch-header extension costs. The built file hands
over its CUDA parts and translation units (build.assemble_cuda: every header
part, then one .cu part). On a machine of PARALLEL_MIN_CPUS or more CPUs each
unit is a source file of torch.utils.cpp_extension.load, whose ninja build
compiles them in parallel and links them into one library (cold compile about
the slowest unit instead of the sum); elsewhere every part, in manifest order,
is one unit for load_inline. torch's extension cache keys the build by name,
and the name carries a hash of the units' sources and the target architecture
and the unit count, so a second process loads the cached library without
compiling and a one-unit and an N-unit build never share a name. Entry points
take device pointers and ints and return a cudaError_t code; `call` raises on a
non-zero code.
"""
import ctypes
import hashlib
import os
import sys
import time

import torch

PARALLEL_MIN_CPUS = 4                        # fewer CPUs: one unit (ninja's parallel jobs would not pay)
CUDA_FLAGS = ["-O3", "-std=c++17"]


def target_arch() -> str:
    """TORCH_CUDA_ARCH_LIST entry for the running GPU: '9.0a' on H100/H200, '10.0a' on B200."""
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}" + ("a" if major >= 9 else "")


def _raise_cuda_error(entry: str, code: int) -> None:
    if code != 0:
        raise RuntimeError(f"CUDA entry point {entry} failed with cudaError {code}")


def usable_cpus():
    """The CPUs this process may run on (its affinity set: a container pinned to a few of a large host's
    CPUs counts those), os.cpu_count() where the platform has no affinity call, None if unknown."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def extension_directory(name: str) -> str:
    """The folder torch's load would build `name` in (TORCH_EXTENSIONS_DIR, else torch's per-user cache with
    its pyXY_cuXYZ subfolder), created: the unit files are written there, as load_inline writes its one."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is None:
        from torch.utils.cpp_extension import get_default_build_root
        cuda = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
        root = os.path.join(get_default_build_root(), f"py{sys.version_info.major}{sys.version_info.minor}_{cuda}")
    directory = os.path.join(root, name)
    os.makedirs(directory, exist_ok=True)
    return directory


def write_if_changed(path: str, text: str) -> None:
    """Write text unless the file holds it already (ninja rebuilds what is newer), atomically: another process
    importing the same file at the same time must never compile a half-written unit."""
    try:
        with open(path, encoding="utf-8") as existing:
            if existing.read() == text:
                return
    except OSError:
        pass
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temporary, path)


class CudaLibrary:
    """The submission's compiled kernels; configured by the built file with its embedded parts and units."""

    def __init__(self):
        self.name = None
        self.parts = {}
        self.units = []
        self.build_name = None
        self.compile_s = None
        self._lib = None
        self._entries = {}

    def configure(self, name: str, parts: dict, units: list) -> None:
        """parts: {part path: text} in manifest order (the newlines around an embedded text are dropped);
        units: the part paths of each translation unit."""
        self.name, self.units = name, [tuple(unit) for unit in units]
        self.parts = {path: text.strip("\n") for path, text in parts.items()}
        self.build_name, self._lib, self._entries = None, None, {}

    def plan(self, cpus=None) -> list:
        """The units to compile: the per-part units on a machine of PARALLEL_MIN_CPUS or more CPUs (cpus:
        usable_cpus() when not given) if there are two or more, else one unit of every part in order."""
        cpus = usable_cpus() if cpus is None else cpus
        if len(self.units) > 1 and (cpus or 1) >= PARALLEL_MIN_CPUS:
            return list(self.units)
        return [tuple(self.parts)]

    def unit_source(self, unit) -> str:
        """A unit's text: its parts in order, each under a `// ---- part PATH ----` line (as build.py joins them)."""
        return "\n\n".join(f"// ---- part {path} ----\n{self.parts[path]}" for path in unit)

    def name_for(self, arch: str, sources: list) -> str:
        """The extension's name: a hash of the target architecture and every unit's source, and the unit count."""
        digest = hashlib.sha256("\0".join([arch, *sources]).encode()).hexdigest()[:16]
        return f"{self.name}_{digest}_{len(sources)}u"

    def load(self) -> ctypes.CDLL:
        if self._lib is not None:
            return self._lib
        if not self.parts:
            raise RuntimeError("no CUDA source embedded: run the built submission, not the parts")
        from torch.utils.cpp_extension import load, load_inline
        arch = target_arch()
        units = self.plan()
        sources = [self.unit_source(unit) for unit in units]
        self.build_name = self.name_for(arch, sources)
        previous = os.environ.get("TORCH_CUDA_ARCH_LIST")
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
        start = time.perf_counter()
        try:
            if len(sources) == 1:
                path = load_inline(name=self.build_name, cpp_sources="", cuda_sources=sources[0],
                                   is_python_module=False, no_implicit_headers=True, extra_cuda_cflags=CUDA_FLAGS)
            else:
                directory = extension_directory(self.build_name)
                files = []
                for index, (unit, source) in enumerate(zip(units, sources)):
                    # u0_NAME.cu for a unit whose .cu part is NAME.cu (the index keeps the objects apart)
                    stem = os.path.splitext(os.path.basename(unit[-1]))[0]
                    files.append(os.path.join(directory, f"u{index}_{stem}.cu"))
                    write_if_changed(files[-1], source)
                path = load(name=self.build_name, sources=files, build_directory=directory,
                            is_python_module=False, extra_cuda_cflags=CUDA_FLAGS)
        finally:
            if previous is None:
                os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
            else:
                os.environ["TORCH_CUDA_ARCH_LIST"] = previous
        self.compile_s = time.perf_counter() - start
        self._lib = ctypes.CDLL(path)
        return self._lib

    def entry(self, name: str):
        """A C entry point returning int, looked up once (a call then costs a few us of ctypes, not more)."""
        func = self._entries.get(name)
        if func is None:
            func = getattr(self.load(), name)
            func.restype = ctypes.c_int
            self._entries[name] = func
        return func

    def function(self, entry: str, signature: str):
        """The entry point as a typed ctypes function for hot paths: signature has one letter per argument,
        'p' for a pointer (pass tensor.data_ptr() or None) and 'i' for an int; a non-zero return raises.
        Arguments then go to C without `call`'s per-argument conversion (~0.4 us each)."""
        func = self.load()[entry]                        # a new function object, apart from entry()'s
        func.argtypes = [{"p": ctypes.c_void_p, "i": ctypes.c_int}[letter] for letter in signature]
        func.restype = ctypes.c_int
        func.errcheck = lambda code, _func, _args: _raise_cuda_error(entry, code)
        return func

    def call(self, entry: str, *args) -> None:
        """Call an entry point; tensors go as device pointers, None as NULL, ints as C ints."""
        c_args = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor)
                  else ctypes.c_void_p(None) if a is None else ctypes.c_int(a) for a in args]
        _raise_cuda_error(entry, self.entry(entry)(*c_args))

    def query(self, entry: str, *ints: int) -> int:
        """Call an entry point that returns a plain int (a size or a limit)."""
        return self.entry(entry)(*[ctypes.c_int(i) for i in ints])


CUDA = CudaLibrary()

# ---- part cholesky/model.py ----
"""Torch models of the cholesky kernels: the executable specification.

Same algorithm, same blocking and the same float32 operation order as the CUDA parts where torch
allows, vectorized over the batch; CPU tests check them against the gates, and the built
submission runs them on CPU tensors.

- `pivot_floor`: eps * max_i a_ii per matrix. A pivot at or below it becomes it (a
  roundoff-level pivot of a numerically singular SPD matrix; NaN stays NaN): L stays finite with
  no host-side check, and A moves by at most ~2 floor, far inside the gate.
- `right_looking_model`: spotf2-order Cholesky, the arithmetic of cholesky_small.cu (one warp per
  matrix, n <= 32) and of cholesky_tiled.cu (n <= 128); `inverse_model` is cholesky_tiled.cu's
  inverse: column elimination of L X = I beside the factorization. With step = TILED_STEP both are
  tiled_block.cuh's grouped steps (4 columns, one rank-4 update each), which the 128-blocks with the
  inverse take (factor_diag_model says which); `halves_model` is such a block as two 64-blocks.
- `blocked_cholesky`: the blocked right-looking driver with library GEMMs; the diagonal-block
  factor is a parameter, so the GPU route runs this very function with the CUDA block kernel. Its
  trailing update is fp32, or "split TF32" (`tf32_split`): three TF32 tensor-core products whose
  sum carries ~21 bits.
- `blocked_tf32x3_model`: cholesky_blocked.cu, the same loop with our own tensor-core products
  (`tf32x3_product`) for the panel and the trailing update, in one CUDA call (also the H200's
  look-ahead, cholesky_lookahead.cu: the same operations, the next diagonal block factored inside
  the trailing update's launch); `blocked_two_level_model` its two-level order (outer panels with
  one K = outer update each).
"""
import contextlib

import torch

EPS = 1.1920928955078125e-07      # float32 machine epsilon
TINY = 1.1754943508222875e-38     # smallest normal float32: the floor of an all-zero diagonal
TILED_STEP = 4                    # columns per grouped step of cholesky_tiled.cu (tiled_block.cuh kStep)
HALF = 64                         # rows of the first half of a block by halves (tiled_block.cuh kHalf)


def diagonal_max(A: torch.Tensor) -> torch.Tensor:
    """max_i a_ii of each matrix: what the kernels derive their pivot floor from."""
    return A.diagonal(dim1=-2, dim2=-1).amax(dim=-1)


def floor_from_max(top: torch.Tensor) -> torch.Tensor:
    """eps * max_i a_ii (float32, one per matrix), never below the smallest normal."""
    floor = top * EPS
    return torch.where(floor > 0, floor, torch.full_like(floor, TINY))


def pivot_floor(A: torch.Tensor) -> torch.Tensor:
    """The pivot floor of each matrix: eps * max_i a_ii, never below the smallest normal."""
    return floor_from_max(diagonal_max(A))


def right_looking_model(A: torch.Tensor, floors: torch.Tensor | None = None, step: int = 1) -> torch.Tensor:
    """Factor the lower triangle of each n x n matrix; pivots at or below the floor become the floor.
    step = 1: spotf2 order, column by column (cholesky_small.cu). step > 1: cholesky_tiled.cu's order
    (tiled_block.cuh, kStep = 4): per group of `step` columns, the group's diagonal block column by column,
    the rows below it by forward substitution with that block, then one rank-`step` trailing update."""
    n = A.shape[-1]
    floors = pivot_floor(A) if floors is None else floors
    S = torch.tril(A)
    for k0 in range(0, n, step):
        k1 = min(n, k0 + step)
        inverses = []
        for k in range(k0, k1):                 # the group's diagonal block, column by column
            d = S[:, k, k]
            d = torch.where(d <= floors, floors, d)
            inv = torch.rsqrt(d)                # popkit::cholesky_pivot: 1 / l_kk = rsqrt(d), l_kk = d / l_kk
            S[:, k + 1:k1, k] *= inv[:, None]
            S[:, k, k] = d * inv
            column = S[:, k + 1:k1, k]
            S[:, k + 1:k1, k + 1:k1] -= torch.tril(column[:, :, None] * column[:, None, :])
            inverses.append(inv)
        for q, k in enumerate(range(k0, k1)):   # the rows below: forward substitution with the block
            S[:, k1:, k] -= (S[:, k1:, k0:k] * S[:, k, None, k0:k]).sum(-1)
            S[:, k1:, k] *= inverses[q][:, None]
        panel = S[:, k1:, k0:k1]
        S[:, k1:, k1:] -= torch.tril(panel @ panel.mT)
    return torch.tril(S)


def inverse_model(L: torch.Tensor, step: int = 1) -> torch.Tensor:
    """inv(L) by elimination of L X = I in cholesky_tiled.cu's order: per group of `step` rows, those rows of
    X by forward substitution with the group's diagonal block (1 / l_kk as the factor's rsqrt), then
    X[r, :k1] -= L[r, k0:k1] X[k0:k1, :k1] for the rows r below."""
    b, n, _ = L.shape
    X = torch.eye(n, dtype=L.dtype, device=L.device).expand(b, n, n).clone()
    for k0 in range(0, n, step):
        k1 = min(n, k0 + step)
        for k in range(k0, k1):
            X[:, k, :k1] -= (L[:, k, k0:k, None] * X[:, k0:k, :k1]).sum(1)
            X[:, k, :k1] *= (1.0 / L[:, k, k])[:, None]
        X[:, k1:, :k1] -= L[:, k1:, k0:k1] @ X[:, k0:k1, :k1]
    return X


def halves_model(A: torch.Tensor, floors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, inv(L)) of each block (n <= 128) as tiled_block.cuh's halves_steps: the first HALF columns and
    the rest each by grouped steps with their inverses, joined by L21 = A21 X11^T, A22 -= L21 L21^T and
    X21 = -X22 (L21 X11)."""
    n, h = A.shape[-1], min(A.shape[-1], HALF)

    def half(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        L = right_looking_model(M, floors, TILED_STEP)
        return L, inverse_model(L, TILED_STEP)

    A = torch.tril(A)
    L, X = torch.zeros_like(A), torch.zeros_like(A)
    L11, X11 = half(A[:, :h, :h])
    L[:, :h, :h], X[:, :h, :h] = L11, X11
    if n > h:
        L21 = A[:, h:, :h] @ X11.mT
        L22, X22 = half(A[:, h:, h:] - torch.tril(L21 @ L21.mT))
        L[:, h:, :h], L[:, h:, h:] = L21, L22
        X[:, h:, :h], X[:, h:, h:] = -(X22 @ (L21 @ X11)), X22
    return L, X


def factor_diag_model(L: torch.Tensor, k0: int, w: int, top: torch.Tensor, X: torch.Tensor | None,
                      halves: bool = False) -> None:
    """Factor the diagonal block L[:, k0:k0+w, k0:k0+w] in place (pivot floor from each whole
    matrix's max diagonal `top`); write inv(L11) into X unless X is None. halves: the 128-blocks with the
    inverse by halves_model."""
    block = L[:, k0:k0 + w, k0:k0 + w]
    grouped = X is not None and w > 64          # cholesky_tiled.cu: 128-blocks with the inverse
    if grouped and halves:
        L11, X11 = halves_model(block, floor_from_max(top))
        block.copy_(L11)
        X.copy_(X11)
        return
    step = TILED_STEP if grouped else 1
    L11 = right_looking_model(block, floor_from_max(top), step)
    block.copy_(L11)
    if X is not None:
        X.copy_(inverse_model(L11, step))


@contextlib.contextmanager
def matmul_precision(precision: str):
    """Set torch's CUDA fp32 matmul precision ("ieee" or "tf32") and restore the previous setting.

    The new API (fp32_precision) is read and restored as it was: once it is set,
    reading the legacy allow_tf32 flag (which the grader's check does) raises
    unless the previous value was put back."""
    matmul = torch.backends.cuda.matmul
    try:
        previous = matmul.fp32_precision
    except AttributeError:                      # torch < 2.9: the legacy flag only
        previous = None
    if previous is None:
        legacy = matmul.allow_tf32
        matmul.allow_tf32 = precision == "tf32"
    else:
        matmul.fp32_precision = precision
    try:
        yield
    finally:
        if previous is None:
            matmul.allow_tf32 = legacy
        else:
            matmul.fp32_precision = previous


def tf32_round(M: torch.Tensor) -> torch.Tensor:
    """M rounded to TF32: mantissa to 10 bits, ties away from zero (add half of the dropped 13-bit field,
    clear it), as cholesky_split.cu and cholesky_blocked.cu round by integer ops."""
    bits = M.contiguous().view(torch.int32)
    return ((bits + 0x1000) & -0x2000).view(torch.float32)


def tf32_split(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """M = hi + lo with hi = tf32_round(M) and lo = M - hi exact in float32 (|lo| <= 2^-11 |M|);
    TF32 keeps ~11 bits of lo, so the products hi hi^T + hi lo^T + lo hi^T carry ~21 bits (the
    dropped lo lo^T is ~2^-22 relative)."""
    hi = tf32_round(M)
    return hi, M - hi


def tf32_truncate(M: torch.Tensor) -> torch.Tensor:
    """M with its low 13 mantissa bits cleared: what a TF32 tensor-core operand keeps of a float32."""
    return (M.contiguous().view(torch.int32) & -0x2000).view(torch.float32)


def tf32x3_product(P: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """P Q^T as cholesky_blocked.cu computes it on tensor cores: both operands split into TF32 hi + lo
    (the tensor core truncates lo to TF32), then lo_P hi_Q^T + hi_P lo_Q^T + hi_P hi_Q^T in float32."""
    Ph, Pl = tf32_split(P)
    Qh, Ql = tf32_split(Q)
    Pl, Ql = tf32_truncate(Pl), tf32_truncate(Ql)
    return Pl @ Qh.mT + Ph @ Ql.mT + Ph @ Qh.mT


def workspace_size(b: int, n: int, nb: int, split_tf32: bool) -> int:
    """Floats of the per-call workspace: L21 (b x m x nb, m = n - nb at most) and, split, left and right
    (b x m x 3nb each). One allocation per call: per-step temporaries of changing sizes miss the
    allocator's cache under the grader's timing loop (docs/priors.md)."""
    return b * max(n - nb, 0) * nb * (7 if split_tf32 else 1)


def l21_view(workspace: torch.Tensor, b: int, m: int, w: int) -> torch.Tensor:
    """The workspace's first b x m x w floats: L21."""
    return workspace[:b * m * w].view(b, m, w)


def split_views(workspace: torch.Tensor, b: int, m: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The workspace after L21: the split operands left and right, b x m x 3w each."""
    size = b * m * w
    return workspace[size:4 * size].view(b, m, 3 * w), workspace[4 * size:7 * size].view(b, m, 3 * w)


def panel_model(L: torch.Tensor, k0: int, w: int, X: torch.Tensor, split_tf32: bool, workspace: torch.Tensor):
    """L21 = A21 inv(L11)^T in place below the diagonal block; returns the trailing update's operands
    (left, right) as views of the workspace: (L21, L21), or the split pair [hi hi lo], [hi lo hi]
    (cholesky_split.cu's pass)."""
    b, n, _ = L.shape
    m = n - k0 - w
    panel = L[:, k0 + w:, k0:k0 + w]
    L21 = l21_view(workspace, b, m, w)
    torch.matmul(panel, X.mT, out=L21)
    panel.copy_(L21)
    if not split_tf32:
        return L21, L21
    hi, lo = tf32_split(L21)
    left, right = split_views(workspace, b, m, w)
    torch.cat([hi, hi, lo], dim=-1, out=left)
    torch.cat([hi, lo, hi], dim=-1, out=right)
    return left, right


def trailing_update(A22: torch.Tensor, left: torch.Tensor, right: torch.Tensor, chunk_rows: int,
                    tf32: bool = False) -> None:
    """A22 -= left right^T on the lower part only: row chunks of chunk_rows, each up to its own last column.

    Each chunk [r0, r1) updates A22[r0:r1, :r1], so about half the flops of the full square are
    spent (plus a triangle per chunk, left in the unused upper part). tf32: the GEMMs run on
    tensor cores (for the split operands of panel_model)."""
    m = A22.shape[1]
    with matmul_precision("tf32" if tf32 else "ieee"):
        for r0 in range(0, m, chunk_rows):
            r1 = min(m, r0 + chunk_rows)
            A22[:, r0:r1, :r1].baddbmm_(left[:, r0:r1], right[:, :r1].mT, alpha=-1.0)


def factor_blocks(L: torch.Tensor, nb: int, factor_diag=factor_diag_model):
    """Walk L's diagonal blocks in place (L holds A on entry): factor each one, pivot floors from
    A's max diagonal, and yield (k0, w, X = inv(L11)) for every block with a panel below it (the
    last block is factored without an inverse)."""
    b, n, _ = L.shape
    top = diagonal_max(L)
    inverses = torch.empty(b * nb * nb, dtype=L.dtype, device=L.device)
    for k0 in range(0, n, nb):
        w = min(nb, n - k0)
        if k0 + w == n:
            factor_diag(L, k0, w, top, None)
            return
        X = inverses[:b * w * w].view(b, w, w)
        factor_diag(L, k0, w, top, X)
        yield k0, w, X


def blocked_cholesky(A: torch.Tensor, nb: int, chunk_rows: int, factor_diag=factor_diag_model,
                     solve_panel=panel_model, split_tf32: bool = False) -> torch.Tensor:
    """Blocked right-looking Cholesky with library GEMMs.

    Per block column (factor_blocks): L21 = A21 inv(L11)^T in place (solve_panel), then
    A22 -= L21 L21^T (trailing_update; fp32, or split TF32 on tensor cores). The upper part, which
    holds A's upper triangle and the chunked updates' junk, is zeroed once at the end. The
    diagonal and panel steps are parameters, so the GPU route runs this driver with its kernels."""
    if nb < 1 or chunk_rows < 1:
        raise ValueError(f"blocked_cholesky: nb ({nb}) and chunk_rows ({chunk_rows}) must be >= 1")
    L = A.clone()
    b, n, _ = L.shape
    workspace = torch.empty(workspace_size(b, n, nb, split_tf32), dtype=A.dtype, device=A.device)
    for k0, w, X in factor_blocks(L, nb, factor_diag):
        left, right = solve_panel(L, k0, w, X, split_tf32, workspace)
        trailing_update(L[:, k0 + w:, k0 + w:], left, right, chunk_rows, split_tf32)
    return L.tril_()


def blocked_tf32x3_model(A: torch.Tensor, nb: int, factor_diag=factor_diag_model) -> torch.Tensor:
    """cholesky_blocked.cu: blocked right-looking Cholesky whose panel (L21 = A21 inv(L11)^T, in place)
    and trailing update (A22 -= L21 L21^T) are tf32x3 products; the upper part is zeroed at the end
    (the kernels write those zeros as they go, and read A without copying it)."""
    if nb < 1:
        raise ValueError(f"blocked_tf32x3_model: nb ({nb}) must be >= 1")
    L = A.clone()
    for k0, w, X in factor_blocks(L, nb, factor_diag):
        panel = L[:, k0 + w:, k0:k0 + w]
        panel.copy_(tf32x3_product(panel, X))
        L[:, k0 + w:, k0 + w:] -= tf32x3_product(panel, panel)
    return L.tril_()


def blocked_two_level_model(A: torch.Tensor, nb: int, outer: int) -> torch.Tensor:
    """cholesky_blocked.cu's two-level loop (blocked_two_level): nb-column blocks inside outer panels of
    `outer` columns. Each block's trailing update reaches only the columns of its outer panel; the rest
    of the matrix gets one update per outer panel with K = outer (the same sums, grouped differently)."""
    if nb < 1 or outer < nb or outer % nb:
        raise ValueError(f"blocked_two_level_model: outer ({outer}) must be a multiple of nb ({nb}) >= 1")
    L = A.clone()
    b, n, _ = L.shape
    top = diagonal_max(L)
    inverses = torch.empty(b, nb, nb, dtype=L.dtype, device=L.device)
    for s0 in range(0, n, outer):
        s1 = min(n, s0 + outer)
        for k0 in range(s0, s1, nb):
            w = min(nb, n - k0)
            if k0 + w == n:
                factor_diag_model(L, k0, w, top, None)
                return L.tril_()
            X = inverses[:, :w, :w]
            factor_diag_model(L, k0, w, top, X)
            panel = L[:, k0 + w:, k0:k0 + w]
            panel.copy_(tf32x3_product(panel, X))
            L[:, k0 + w:, k0 + w:s1] -= tf32x3_product(panel, panel[:, :s1 - k0 - w])
        if s1 < n:
            left = L[:, s1:, s0:s1]
            L[:, s1:, s1:] -= tf32x3_product(left, left)
    return L.tril_()

# ---- part cholesky/route.py ----
"""cholesky routes: which algorithm factors a batch, by n and by device.

| n         | CUDA route                                                  | CPU (model)              |
|-----------|-------------------------------------------------------------|--------------------------|
| <= 32     | cholesky_small.cu: one warp per matrix, rows in registers   | right_looking_model      |
| <= 128    | cholesky_tiled.cu: one CTA per matrix, in registers         | right_looking_model      |
| larger    | BLOCKED_DRIVER "tf32x3": cholesky_blocked.cu, the whole     | blocked_tf32x3_model     |
|           | blocked loop in one call: cholesky_tiled.cu (+ inverse) per |                          |
|           | diagonal block, our tensor-core products for the panel and  |                          |
|           | the trailing update; on the H200 (LOOKAHEAD) the next       | (the same operations)    |
|           | diagonal block is factored inside each trailing update;     |                          |
|           | above n = 8192 (OUTER_PANEL) blocks in two levels           | blocked_two_level_model  |
|           | "library": blocked_cholesky with cholesky_tiled.cu per      | blocked_cholesky with    |
|           | diagonal block, cuBLAS GEMMs for the panel and the trailing | factor_diag_model and    |
|           | update; cholesky_split.cu writes split-TF32 operands        | panel_model              |

Every route reads the lower triangle of A only. A pivot at or below eps * max_i a_ii becomes that
floor (model.pivot_floor says why), so no route needs a host-side check or a second pass. The
tunables below were measured on the H200 (docs/priors.md).
"""
import functools
from typing import Callable

import torch


SMALL_MAX_N = 32                 # cholesky_small.cu's register tile is 32 rows
SMALL_WARPS_PER_CTA = 8          # matrices per CTA in the small kernel (1..16)
BLOCK_MAX_N = 128                # cholesky_tiled.cu holds up to 128 x 128
# (max n, TDIM, TS) of cholesky_tiled.cu for whole matrices: TDIM^2 threads, TS x TS entries each
TILED_SHAPE = ((64, 8, 8), (1 << 30, 16, 8))
# (max batch, halves) of the 128-blocks with the inverse (the blocked drivers' diagonal blocks): 1 factors
# each as two 64-blocks joined by 64 x 64 products (tiled_block.cuh halves_steps, model.halves_model).
# H200 sweep at 976a2d1, halves / none, us: 1x4096 1927 / 2029, 4x1024 457 / 519, 60x1024 986 / 1114,
# 64x256 105 / 125, 1x16384 26706 / 28311.
DIAG_HALVES = ((1 << 30, 1),)
# (max batch, diagonal block size): 128 lengthens the GEMMs (K = 128) and halves the chain of steps;
# at large batch the GEMMs are already big and 64 keeps more diagonal blocks per SM (H200, 479aad1:
# 128 is 1.3-1.9x faster from 64x256 to 1x8192, 1.4x slower at 640x512)
BLOCK_NB = ((256, 128), (1 << 30, 64))
# (max n, max batch * n, rows per trailing GEMM): one GEMM per step (no chunks, twice the flops)
# when the batch is small (fewer launches: 4x1024 857 -> 754 us, 16x512 403 -> 382) and at n = 2048
# (split operands: 8x2048 2853 -> 2348 against 256-row chunks), 256-row chunks for large batches
# (640x512 3398 vs 3672 unchunked, 60x1024 1944 vs 2235), and 2048 or 4096 rows for single large
# matrices (unchunked is 1.4-3x slower from n = 8192). H200, 368c49a-0c2bdaf.
TRAILING_CHUNK_ROWS = ((1024, 8192, 1 << 30), (1024, 1 << 62, 256), (2048, 1 << 62, 1 << 30),
                       (8192, 1 << 62, 2048), (1 << 30, 1 << 62, 4096))
# (max n, max batch * n, trailing product): "fp32" (SIMT GEMMs), or "split_tf32": three TF32 tensor-core products
# summed in one GEMM of depth 3 nb (model.tf32_split), ~21 bits, with cholesky_split.cu writing the
# operands. Split from n = 2048: 1x32768 437 -> 218 ms, 1x16384 68 -> 39, 1x8192 13.8 -> 10.0,
# 2x4096 5.2 -> 4.1, 8x2048 2.6 -> 2.1 (H200, eb7f279-1b4f48f); below, and at 2x2048 (1.61 fp32
# against 1.94 split, 1b4f48f), its extra work does not pay.
# Plain TF32 (~11 bits) is unsafe at any n: its error exceeds the 1e-3..1e-4 damping of the lowrank
# family, the trailing matrix loses definiteness and L overflows (H200, 7ae5206: 2x1024 and 3x1537
# lowrank failed).
TRAILING_PRODUCT = ((1024, 1 << 62, "fp32"), (2048, 4096, "fp32"), (1 << 30, 1 << 62, "split_tf32"))
# (max n, max batch * n, driver) for n > 128: "tf32x3" (cholesky_blocked.cu: one call, our tensor-core
# products; its row offsets are 32-bit, n <= 46340) or "library" (blocked_cholesky: a Python loop over
# cuBLAS GEMMs, the tables above). The one call removes ~25 us of host time per step and, with the
# wgmma products (H200 sweep at 23aa9a4 + no clone, us, tf32x3 / library): 1x16384 34815/37361;
# with two levels (OUTER_PANEL) it also wins at 1x32768 (H200 sweep at 19a3b0b, ms: 177.6 / 218.1).
BLOCKED_DRIVER = ((46340, 1 << 62, "tf32x3"), (1 << 30, 1 << 62, "library"))
# (max n, look-ahead) of the tf32x3 driver (cholesky_lookahead.cu, H200 only; taken where the diagonal
# blocks are 16 x 16 tiled): the trailing update's launch also factors the next diagonal block. It pays
# where one matrix's chain of diagonal blocks is long. H200 sweep at de3f7a4, 11 rounds (us, on / off):
# 8x2048 1387 / 1484, 1x4096 2132 / 2338, 2x4096 2548 / 2835, 1x8192 6010 / 7539; 2x2048 1058 / 1054;
# up to n = 1024 it costs (64x256 140 / 121, 16x512 290 / 244, 4x1024 548 / 507, 60x1024 1081 / 1065):
# the fused launch runs one CTA per SM against the plain product's three.
LOOKAHEAD = ((1024, 0), (1 << 30, 1))
# (max n, outer panel) of the tf32x3 driver's two-level loop (cholesky_blocked.cu blocked_two_level; 0: one
# level): nb-column blocks inside outer panels, one K = outer trailing update per outer panel (less
# memory traffic for the trailing matrix, read and written once per outer panel instead of once per
# block). H200 sweep at 19a3b0b (ms; one level / outer 256 / 512 / 1024): 1x16384 34.2 / 30.1 / 28.0 /
# 27.3, 1x32768 257.3 / 205.1 / 196.6 / 177.6; at 1x8192 one level with the look-ahead wins (6.33 /
# 6.91 / 6.63 / 6.61).
OUTER_PANEL = ((8192, 0), (1 << 30, 1024))
# "auto": wgmma products on the H200, mma.sync elsewhere; "portable": mma.sync everywhere (the path the
# B200 and other non-Hopper GPUs take, checked and timed on the H200 with a sweep variant).
PRODUCTS = "auto"


def first_row(table, *keys: int):
    """The value of the first (bound, ..., value...) row whose bounds cover every key."""
    for row in table:
        if all(key <= bound for key, bound in zip(keys, row)):
            rest = row[len(keys):]
            return rest[0] if len(rest) == 1 else rest
    raise ValueError(f"cholesky: no table row covers {keys}")


def by_n(table, n: int):
    """The value of the first (max n, value...) row that covers n."""
    return first_row(table, n)


NULL = None   # a missing optional pointer (ctypes passes 0)


def diag_shape(w: int) -> tuple[int, int]:
    """(TDIM, TS) of cholesky_tiled.cu for diagonal blocks of width w: the whole-matrix shape of that width
    (cholesky_tiled.cu builds two shapes, to keep the cold compile short)."""
    return by_n(TILED_SHAPE, w)


def factor_diag_cuda(L: torch.Tensor, k0: int, w: int, top: torch.Tensor, X: torch.Tensor | None) -> None:
    """The tiled kernel on the diagonal block, in place, with the signature of model.factor_diag_model."""
    b, n, _ = L.shape
    block = L[:, k0:, k0:]                      # data_ptr() points at L[:, k0, k0]
    CUDA.call("cholesky_tiled", block, block, X, top, b, w, n, n * n, *diag_shape(w), first_row(DIAG_HALVES, b))


def panel_cuda(L: torch.Tensor, k0: int, w: int, X: torch.Tensor, split_tf32: bool, workspace: torch.Tensor):
    """The panel step with the signature of model.panel_model: cuBLAS's GEMM for L21, then (split)
    cholesky_split.cu writes it back and writes the split operands in one pass instead of ~8 ops."""
    if not split_tf32:
        return panel_model(L, k0, w, X, split_tf32, workspace)
    b, n, _ = L.shape
    m = n - k0 - w
    L21 = l21_view(workspace, b, m, w)
    torch.matmul(L[:, k0 + w:, k0:k0 + w], X.mT, out=L21)
    left, right = split_views(workspace, b, m, w)
    CUDA.call("cholesky_split", L21, L[:, k0 + w:, k0:], left, right, b, m, w, n, n * n)
    return left, right


Run = Callable[[torch.Tensor], torch.Tensor]   # a plan: the contiguous batch in, L out


def launch_plan(entry, *args, keep: tuple = ()) -> Run:
    """A plan that calls entry(A, L, *args) into a fresh L; keep: the tensors args point into (alive with the
    plan)."""
    def run(A: torch.Tensor) -> torch.Tensor:
        L = torch.empty_like(A)
        entry(A.data_ptr(), L.data_ptr(), *args)
        return L
    run.keep = keep
    return run


def small_plan(b: int, n: int) -> Run:
    """cholesky_small.cu, one warp per matrix."""
    return launch_plan(CUDA.function("cholesky_small", "ppiii"), b, n, SMALL_WARPS_PER_CTA)


def tiled_plan(b: int, n: int) -> Run:
    """cholesky_tiled.cu on whole matrices, one CTA per matrix."""
    return launch_plan(CUDA.function("cholesky_tiled", "ppppiiiiiii"), NULL, NULL, b, n, n, n * n,
                       *by_n(TILED_SHAPE, n), 0)


def blocked_tf32x3_plan(b: int, n: int, nb: int, device: torch.device) -> Run:
    """cholesky_blocked.cu: the whole blocked factorization in one call (model.blocked_tf32x3_model), into an
    L it writes whole (the factor and zeros above it). Its workspace (the diagonal blocks' inverses, then
    max_i a_ii) and, where the look-ahead may run, the buffer its panels go to are the plan's, allocated
    once."""
    work = torch.empty(b * nb * nb + b, dtype=torch.float32, device=device)
    lookahead, outer = by_n(LOOKAHEAD, n), by_n(OUTER_PANEL, n)
    panels = lookahead and not outer and nb == 128    # the look-ahead's out-of-place panels
    panel = torch.empty(b * (n - nb) * nb if panels else 0, dtype=torch.float32, device=device)
    return launch_plan(CUDA.function("cholesky_blocked", "ppppiiiiiiiii"), work.data_ptr(),
                       panel.data_ptr() if panels else NULL, b, n, nb, *diag_shape(nb), first_row(DIAG_HALVES, b),
                       lookahead, outer, int(PRODUCTS == "portable"), keep=(work, panel))


def plan(data: torch.Tensor) -> Run:
    """The route for every batch of data's shape, dtype and device, with the tables read once: a function
    of the contiguous batch. Raises ValueError for a batch that is not b x n x n float32."""
    if data.dim() != 3 or data.shape[-1] != data.shape[-2] or data.dtype != torch.float32:
        raise ValueError(f"cholesky: expected a batch x n x n float32 tensor, got {data.dtype} "
                         f"of shape {tuple(data.shape)}")
    batch, n = data.shape[0], data.shape[-1]
    if data.numel() == 0:
        return torch.empty_like
    if n <= BLOCK_MAX_N:
        if not data.is_cuda:
            return right_looking_model
        return small_plan(batch, n) if n <= SMALL_MAX_N else tiled_plan(batch, n)
    nb = by_n(BLOCK_NB, batch)
    factor_diag_cpu = functools.partial(factor_diag_model, halves=bool(first_row(DIAG_HALVES, batch)))
    if first_row(BLOCKED_DRIVER, n, batch * n) == "tf32x3":
        if not data.is_cuda:
            return lambda A: blocked_tf32x3_model(A, nb, factor_diag_cpu)
        return blocked_tf32x3_plan(batch, n, nb, data.device)
    factor_diag, solve_panel = (factor_diag_cuda, panel_cuda) if data.is_cuda else (factor_diag_cpu, panel_model)
    split_tf32 = first_row(TRAILING_PRODUCT, n, batch * n) == "split_tf32"
    chunk_rows = first_row(TRAILING_CHUNK_ROWS, n, batch * n)
    return lambda A: blocked_cholesky(A, nb, chunk_rows, factor_diag, solve_panel, split_tf32)


def tunables() -> tuple:
    """Every table a plan reads (a plan made before one of them changed, as scripts/sweep_route.py
    changes them between variants, is made again)."""
    return (SMALL_WARPS_PER_CTA, TILED_SHAPE, DIAG_HALVES, BLOCK_NB, TRAILING_CHUNK_ROWS, TRAILING_PRODUCT, BLOCKED_DRIVER,
            LOOKAHEAD, OUTER_PANEL, PRODUCTS)


PLANS: dict = {}   # (shape, dtype, device) -> [(tunables(), plan), ...], the latest first
KEPT_PLANS = 4     # per shape: a sweep alternates a few variants, each keeps its plan


def custom_kernel(data: torch.Tensor) -> torch.Tensor:
    """Cholesky factor of a batch of SPD matrices: L lower triangular, positive diagonal, A = L L^T.
    The route's choice, its entry point and workspace are made once per shape (plan): looking them up
    and converting the arguments on every call cost 6-25 us of host time inside the timed call (H200)."""
    key, now = (data.shape, data.dtype, data.device), tunables()
    for made, run in PLANS.get(key, ()):
        if made == now:
            return run(data.contiguous())
    run = plan(data)
    PLANS[key] = [(now, run)] + PLANS.get(key, [])[:KEPT_PLANS - 1]
    return run(data.contiguous())

CUDA.configure("popkit_cholesky", CUDA_PARTS, CUDA_UNITS)
if torch.cuda.is_available():
    CUDA.load()   # at import, so the grader's pre-run (python3 submission.py) pays the compile

if __name__ == "__main__":
    print(f"cholesky: CUDA kernels ready" if CUDA.compile_s is not None else "cholesky: no GPU, CPU models only")
