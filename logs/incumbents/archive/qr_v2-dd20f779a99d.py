#!POPCORN leaderboard qr_v2
#!POPCORN gpu B200
# Built by popkit from parts/qr_v2: do not edit; change the parts and rebuild.
# toolkit commit: d11541b
# part common/device_utils.cuh sha256 ebc8d0970f02f1917270f6cb9643dd0484d903709a1d262c85205aaa5779be36
# part qr_v2/householder_small.cu sha256 c64d5c67f35e0da905eb766b3eb0f80f841cd25e27975ef654c396170c928cb6
# part qr_v2/householder_panel.cu sha256 b6d6d839729c0a633bc0c9560abbb4c5d610f164e32aba9f9ce1ff62f3cce9b5
# part common/cuda_loader.py sha256 9873efa2c5adb5794b84e56e361d84f87083f32e94babf39b0e2f0ed826f2b91
# part qr_v2/model.py sha256 a5c13f159dda4a7bce59485165e0fd9312836d4a2da62948ca407a370a0f1d1c
# part qr_v2/route.py sha256 1e3d2f97070c417a11a98ed899c0310a04bf8c554336e0604a95b35e4adfda01
"""qr_v2: batched compact-Householder QR (torch.geqrf form).

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
    "qr_v2/householder_small.cu": r'''
// qr_v2, small n (n <= 64): the whole Householder QR of one matrix in one CTA.
//
// Computes H, tau in torch.geqrf form: for k = 0..n-1 the reflector
// H_k = I - tau_k v_k v_k^T (v_k[k] = 1 implicit, tail stored below the
// diagonal) zeroes column k below the diagonal (LAPACK slarfg), and is applied
// to the trailing columns: A[k:, j] -= tau_k v_k (v_k^T A[k:, j]).
//
// Launch: one CTA of 128 threads (4 warps) per matrix; grid = batch.
// The matrix lives in shared memory, column-major with a padded leading
// dimension (n + 1) so that a warp reading a column hits distinct banks.
// Why it is fast: at n <= 64 the factorization is latency bound; keeping the
// matrix on chip makes every step a few shared-memory passes and one
// __syncthreads, with a single coalesced read and write of global memory.
// Column norms are scaled by the column's largest entry, so inputs near the
// float32 range limits neither overflow nor underflow.

namespace {

constexpr int kSmallMaxN = 64;
constexpr int kSmallThreads = 128;

__global__ void __launch_bounds__(kSmallThreads)
qr_small_kernel(const float* __restrict__ A, float* __restrict__ H, float* __restrict__ tau, int n) {
    extern __shared__ float s[];            // n columns of (n + 1) floats
    __shared__ float s_tau;
    const int ld = n + 1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t base = (size_t)blockIdx.x * n * n;

    for (int idx = threadIdx.x; idx < n * n; idx += blockDim.x) {
        const int i = idx / n, j = idx % n;  // row-major in global memory
        s[j * ld + i] = A[base + idx];
    }
    __syncthreads();

    for (int k = 0; k < n; ++k) {
        float* col = s + k * ld;
        if (warp == 0) {                     // reflector for column k
            float amax = 0.f;
            for (int i = k + 1 + lane; i < n; i += 32) amax = fmaxf(amax, fabsf(col[i]));
            amax = popkit::warp_max(amax);
            float ssq = 0.f;
            if (amax > 0.f)
                for (int i = k + 1 + lane; i < n; i += 32) { const float x = col[i] / amax; ssq += x * x; }
            ssq = popkit::warp_sum(ssq);
            const popkit::Reflector r = popkit::make_reflector(col[k], amax * sqrtf(ssq));
            if (lane == 0) { s_tau = r.tau; col[k] = r.beta; tau[(size_t)blockIdx.x * n + k] = r.tau; }
            __syncwarp();
            for (int i = k + 1 + lane; i < n; i += 32) col[i] *= r.scale;
        }
        __syncthreads();
        const float t = s_tau;
        if (t != 0.f) {                      // apply H_k to columns k+1.., one warp per column
            for (int j = k + 1 + warp; j < n; j += kSmallThreads / 32) {
                float* cj = s + j * ld;
                float dot = (lane == 0) ? cj[k] : 0.f;
                for (int i = k + 1 + lane; i < n; i += 32) dot += col[i] * cj[i];
                dot = t * popkit::warp_sum(dot);
                if (lane == 0) cj[k] -= dot;
                for (int i = k + 1 + lane; i < n; i += 32) cj[i] -= dot * col[i];
            }
        }
        __syncthreads();
    }

    for (int idx = threadIdx.x; idx < n * n; idx += blockDim.x) {
        const int i = idx / n, j = idx % n;
        H[base + idx] = s[j * ld + i];
    }
}

}  // namespace

POPKIT_EXPORT int qr_small(const float* A, float* H, float* tau, int batch, int n) {
    if (n < 1 || n > kSmallMaxN || batch < 1) return (int)cudaErrorInvalidValue;
    const size_t smem = (size_t)n * (n + 1) * sizeof(float);
    qr_small_kernel<<<batch, kSmallThreads, smem>>>(A, H, tau, n);
    return (int)cudaGetLastError();
}

POPKIT_EXPORT int qr_small_max_n() { return kSmallMaxN; }
''',
    "qr_v2/householder_panel.cu": r'''
// qr_v2, blocked route: factor one panel of every matrix and build its
// compact-WY factor T, so the trailing update can run as large GEMMs.
//
// For the panel A[k0:n, k0:k0+w) (m = n - k0 rows, w <= W columns) it computes
// the w reflectors exactly as geqrf does (LAPACK slarfg per column, applied to
// the rest of the panel), writes R and the vector tails back into A and tau,
// and writes
//   Vt (w x m, row-major) : row c = v_c with the implicit 1 and the zeros made
//                            explicit, ready for batched matmuls;
//   T  (w x w, row-major) : the upper-triangular factor with
//                            H_0 H_1 ... H_{w-1} = I - V T V^T  (LAPACK slarft, forward,
//                            column-wise): T[c][c] = tau_c,
//                            T[0:c, c] = -tau_c T[0:c, 0:c] (V[:, 0:c]^T v_c).
// The caller then applies Q_panel^T = I - V T^T V^T to the trailing columns.
//
// One block reduction per column. Column c's reflector is v = [1; x s] with
// x = A[c+1:, c], s = 1 / (alpha - beta). Every number column c needs is an
// entry of one W-vector summed over the rows below c,
//   p_j = sum_{r > c} x_r A[r, j]        (the row r as it is now),
// because row r holds v_j[r] in columns j < c (tails already stored) and the
// current entries in columns j >= c:
//   p_c       = ||x||^2                       -> beta, tau, s (slarfg)
//   j > c     : v^T A[:, j] = A[c, j] + s p_j -> the update of column j
//   j < c     : v_j^T v     = v_j[c] + s p_j  -> column c of T (G = V^T V)
// Row c itself is broadcast through shared memory by its owner. So a column
// costs W FMAs per owned row, a butterfly that leaves lane l with the warp's
// sum of one entry, one __syncthreads, a 16-term cross-warp sum, and W FMAs
// per owned row for the update: the barrier count per column is one (the
// previous kernel had six and walked shared memory four times).
// ||x||^2 outside [2^-100, 2^100] (underflow or overflow risk) takes a
// scaled two-pass norm, uniformly for the block; an exactly zero x gives
// tau = 0 as in geqrf.
//
// Launch: one CTA per matrix (grid = batch), at most max_threads (<= 512) threads;
// thread t owns rows t, t + blockDim, ... (R of them, the least of 1, 2, 4, 8
// that covers m) with all W columns in registers: W = 32 for R <= 2, 16 for
// R = 4, 8 for R = 8 (at 512 threads: m <= 1024, 2048, 4096).
// Why it is fast: the panel is read and written once, lives in registers, and
// each column is one barrier; the O(n^3) work is left to the trailing update.

namespace {

constexpr int kPanelThreads = 512;
constexpr int kPanelWarps = kPanelThreads / 32;
constexpr float kSsqLow = 7.8886091e-31f;    // 2^-100: below it ||x||^2 may have lost bits to underflow
constexpr float kSsqHigh = 1.2676506e30f;    // 2^100: above it the products risk overflow

// One butterfly stage of warp_transpose_sum: p[0:LEN) -> p[0:LEN/2), exchanging across lanes
// `16 LEN / W` apart (the lane bit that decides which half this lane keeps); then the next
// stage. Recursion on the template argument keeps every index a compile-time constant (a
// loop over LEN compiled to a runtime loop with select chains over all W registers).
template <int LEN, int W>
__device__ __forceinline__ void transpose_sum_stage(float (&p)[W], int lane) {
    if constexpr (LEN > 1) {
        constexpr int kOff = 16 * LEN / W;
        const bool upper = lane & kOff;
#pragma unroll
        for (int k = 0; k < LEN / 2; ++k) {
            const float send = upper ? p[k] : p[k + LEN / 2];
            const float keep = upper ? p[k + LEN / 2] : p[k];
            p[k] = keep + __shfl_xor_sync(0xffffffffu, send, kOff);
        }
        transpose_sum_stage<LEN / 2, W>(p, lane);
    }
}

// Sum a W-vector over the warp's lanes with W - 1 + (5 - log2 W) shuffles:
// afterwards every lane l holds the warp's total of entry l >> (5 - log2 W).
template <int W>
__device__ __forceinline__ float warp_transpose_sum(float (&p)[W], int lane) {
    transpose_sum_stage<W, W>(p, lane);
    float total = p[0];
#pragma unroll
    for (int off = 16 / W; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
    return total;
}

template <int W>
__host__ __device__ constexpr int entry_shift() { return W == 32 ? 0 : W == 16 ? 1 : W == 8 ? 2 : -1; }

// ||x|| with x scaled by its largest entry (both passes are block-wide); for
// the rare columns whose plain sum of squares left the safe range. x holds
// this thread's entries of the column below the diagonal (zero elsewhere).
template <int R>
__device__ float careful_norm(const float (&x)[R], float* scratch) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) amax = fmaxf(amax, fabsf(x[i]));
    amax = popkit::block_max(amax, scratch);
    if (amax == 0.f) return 0.f;
    float ssq = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) { const float y = x[i] / amax; ssq += y * y; }
    return amax * sqrtf(popkit::block_sum(ssq, scratch));
}

template <int R, int W>
__global__ void __launch_bounds__(kPanelThreads)
qr_panel_kernel(float* __restrict__ A, float* __restrict__ tau, float* __restrict__ Vt,
                float* __restrict__ T, int n, int k0, int w) {
    constexpr int kShift = entry_shift<W>();
    static_assert(kShift >= 0, "W must be 8, 16 or 32");
    __shared__ float s_red[2][kPanelWarps][W];   // per-warp partial sums, double-buffered by column
    __shared__ float s_row[2][W];                // row c, broadcast by its owner
    __shared__ float s_coef[kPanelWarps][W];     // the update's coefficients, per warp
    __shared__ float s_G[W][W + 1];              // v_a . v_b for a < b
    __shared__ float s_T[W][W + 1];
    __shared__ float s_tau[W];
    __shared__ float scratch[32];
    const int m = n - k0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int entry = lane >> kShift;            // the entry of the reduced vector this lane holds
    float* Ab = A + (size_t)blockIdx.x * n * n + (size_t)k0 * n + k0;

    float a[R][W];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = threadIdx.x + i * blockDim.x;
#pragma unroll
        for (int j = 0; j < W; ++j) a[i][j] = (r < m && j < w) ? Ab[(size_t)r * n + j] : 0.f;
    }

    // The column loop stays rolled: fully unrolled (W copies of the body, d147c6d) the route ran
    // 1.8x slower than the shared-memory panel on the H200, most likely instruction-cache misses.
    // Register arrays need compile-time indices, so
    // column c is picked and written back with select chains over j, and the update runs over
    // all W columns with zero coefficients at j <= c.
#pragma unroll 1
    for (int c = 0; c < w; ++c) {
        const int buf = c & 1;
        float x[R];                                         // column c below the diagonal, else 0
#pragma unroll
        for (int i = 0; i < R; ++i) {
            float xc = 0.f;
#pragma unroll
            for (int j = 0; j < W; ++j) xc = (j == c) ? a[i][j] : xc;
            x[i] = (threadIdx.x + i * blockDim.x > c) ? xc : 0.f;   // rows >= m hold zeros
        }
        float p[W];
#pragma unroll
        for (int j = 0; j < W; ++j) p[j] = 0.f;
#pragma unroll
        for (int i = 0; i < R; ++i) {
#pragma unroll
            for (int j = 0; j < W; ++j) p[j] += x[i] * a[i][j];
        }
        const float warp_total = warp_transpose_sum<W>(p, lane);
        if ((lane & ((1 << kShift) - 1)) == 0) s_red[buf][warp][entry] = warp_total;
        if (threadIdx.x == c) {                             // row c is row 0 of thread c
#pragma unroll
            for (int j = 0; j < W; ++j) s_row[buf][j] = a[0][j];
        }
        __syncthreads();

        float p_entry = 0.f;                                // this lane's entry, over the whole CTA
        for (int src = 0; src < warps; ++src) p_entry += s_red[buf][src][entry];
        const float alpha = s_row[buf][c];
        const float ssq = __shfl_sync(0xffffffffu, p_entry, c << kShift);
        float xnorm;
        if (ssq >= kSsqLow && ssq <= kSsqHigh) {
            xnorm = sqrtf(ssq);
        } else {                                            // uniform: every thread has the same ssq
            bool nonzero = false;
#pragma unroll
            for (int i = 0; i < R; ++i) nonzero |= x[i] != 0.f;
            xnorm = __syncthreads_or(nonzero) ? careful_norm<R>(x, scratch) : 0.f;
        }
        const popkit::Reflector ref = popkit::make_reflector(alpha, xnorm);
        // lane's entry j: j > c -> tau v^T A[:, j]; j < c -> v_j^T v (column c of G)
        const float vdot = s_row[buf][entry] + ref.scale * p_entry;
        if (warp == 0 && entry < c && (lane & ((1 << kShift) - 1)) == 0) s_G[entry][c] = vdot;
        if (threadIdx.x == 0) s_tau[c] = ref.tau;
        if ((lane & ((1 << kShift) - 1)) == 0) s_coef[warp][entry] = (entry > c) ? ref.tau * vdot : 0.f;
        __syncwarp();

        // Rows below c take v_r = x_r s, row c takes v_c = 1 (and beta), rows above stay.
        float v[R];
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const int r = threadIdx.x + i * blockDim.x;
            v[i] = (r > c) ? x[i] * ref.scale : (r == c) ? 1.f : 0.f;
            const float stored = (r > c) ? v[i] : ref.beta;
#pragma unroll
            for (int j = 0; j < W; ++j) a[i][j] = (j == c && r >= c) ? stored : a[i][j];
        }
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const float coef_j = s_coef[warp][j];           // a broadcast read; zero for j <= c
#pragma unroll
            for (int i = 0; i < R; ++i) a[i][j] -= coef_j * v[i];
        }
    }
    __syncthreads();

    // T row by row: row k depends only on its own earlier entries.
    if (threadIdx.x < w) {
        const int k = threadIdx.x;
        for (int c = 0; c < k; ++c) s_T[k][c] = 0.f;
        s_T[k][k] = s_tau[k];
        for (int c = k + 1; c < w; ++c) {
            float acc = 0.f;
            for (int l = k; l < c; ++l) acc += s_T[k][l] * s_G[l][c];
            s_T[k][c] = -s_tau[c] * acc;
        }
    }

    const size_t vbase = (size_t)blockIdx.x * w * m;
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = threadIdx.x + i * blockDim.x;
        if (r >= m) continue;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            if (j >= w) break;
            Ab[(size_t)r * n + j] = a[i][j];
            Vt[vbase + (size_t)j * m + r] = (r < j) ? 0.f : (r == j) ? 1.f : a[i][j];
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < w * w; idx += blockDim.x)
        T[(size_t)blockIdx.x * w * w + idx] = s_T[idx / w][idx % w];
    if (threadIdx.x < w) tau[(size_t)blockIdx.x * n + k0 + threadIdx.x] = s_tau[threadIdx.x];
}

// Rows per thread for a panel of m rows on at most `threads` threads (0: too tall for one CTA's registers).
int rows_per_thread(int m, int threads) {
    if (threads < 32 || threads > kPanelThreads) return 0;
    for (int rows = 1; rows <= 8; rows *= 2)
        if (m <= rows * threads) return rows;
    return 0;
}

template <int R, int W>
cudaError_t launch_panel(float* A, float* tau, float* Vt, float* T, int batch, int n, int k0, int w) {
    const int threads = ((n - k0 + R - 1) / R + 31) / 32 * 32;
    qr_panel_kernel<R, W><<<batch, threads>>>(A, tau, Vt, T, n, k0, w);
    return cudaGetLastError();
}

}  // namespace

// The panel width for a panel of m rows on at most max_threads threads: what R rows per thread
// leave room for in registers (0: none fits).
POPKIT_EXPORT int qr_panel_width(int m, int max_threads) {
    switch (rows_per_thread(m, max_threads)) {
        case 1: case 2: return 32;
        case 4: return 16;
        case 8: return 8;
        default: return 0;
    }
}

POPKIT_EXPORT int qr_panel(float* A, float* tau, float* Vt, float* T, int batch, int n, int k0, int w,
                           int max_threads) {
    const int m = n - k0;
    if (batch < 1 || n < 1 || k0 < 0 || k0 >= n || w < 1 || w > qr_panel_width(m, max_threads) || w > m)
        return (int)cudaErrorInvalidValue;
    switch (rows_per_thread(m, max_threads)) {
        case 1: return (int)launch_panel<1, 32>(A, tau, Vt, T, batch, n, k0, w);
        case 2: return (int)launch_panel<2, 32>(A, tau, Vt, T, batch, n, k0, w);
        case 4: return (int)launch_panel<4, 16>(A, tau, Vt, T, batch, n, k0, w);
        default: return (int)launch_panel<8, 8>(A, tau, Vt, T, batch, n, k0, w);
    }
}
''',
}
# The translation units the loader compiles in parallel: every header part, then one .cu part.
CUDA_UNITS = [
    ["common/device_utils.cuh", "qr_v2/householder_small.cu"],
    ["common/device_utils.cuh", "qr_v2/householder_panel.cu"],
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

# ---- part qr_v2/model.py ----
"""Torch models of the qr_v2 kernels: the executable specification.

Same algorithm, same blocking and the same float32 arithmetic choices as the
CUDA parts, vectorized over the batch; CPU tests check them against the gates,
and the built submission uses them on CPU tensors.

- `reflector`: LAPACK slarfg with a norm scaled by the largest entry (`slarfg` from a given norm).
- `householder_qr_model`: unblocked QR (householder_small.cu).
- `factor_panel_model`: one panel plus its compact-WY factor T, one reduction per column (householder_panel.cu).
- `blocked_qr`: the blocked algorithm; the panel factorization is a parameter,
  so the GPU route runs this very driver with the CUDA panel kernel.
"""
import torch


def slarfg(alpha: torch.Tensor, xnorm: torch.Tensor):
    """slarfg from (alpha, ||x||) per matrix -> tau, beta, scale with v_tail = x * scale; ||x|| = 0 gives tau = 0."""
    beta = -torch.copysign(torch.hypot(alpha, xnorm), alpha)
    zero = xnorm == 0
    tau = torch.where(zero, torch.zeros_like(alpha), (beta - alpha) / beta)
    scale = torch.where(zero, torch.zeros_like(alpha), 1.0 / (alpha - beta))
    beta = torch.where(zero, alpha, beta)
    return tau, beta, scale


def scaled_norm(x: torch.Tensor) -> torch.Tensor:
    """||x|| per row of x (b, m), computed on x divided by its largest entry (no overflow or underflow)."""
    amax = x.abs().amax(dim=1) if x.shape[1] else torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    return amax * torch.linalg.vector_norm(x / safe[:, None], dim=1)


def reflector(alpha: torch.Tensor, x: torch.Tensor):
    """slarfg per matrix: alpha (b,), x (b, m) -> tau (b,), beta (b,), scale (b,) with v_tail = x * scale."""
    return slarfg(alpha, scaled_norm(x))


def _reflect_column(M: torch.Tensor, tau: torch.Tensor, c: int, tau_index: int) -> None:
    """Make the reflector for column c of M (rows c..), store it in place and apply it to columns c+1.."""
    t, beta, scale = reflector(M[:, c, c], M[:, c + 1:, c])
    M[:, c + 1:, c] *= scale[:, None]
    M[:, c, c] = beta
    tau[:, tau_index] = t
    if c + 1 < M.shape[2]:
        v = torch.cat([torch.ones_like(t)[:, None], M[:, c + 1:, c]], dim=1)  # (b, m - c)
        w = torch.einsum("bi,bij->bj", v, M[:, c:, c + 1:]) * t[:, None]
        M[:, c:, c + 1:] -= v[:, :, None] * w[:, None, :]


def householder_qr_model(A: torch.Tensor):
    """Unblocked Householder QR in geqrf form: returns (H, tau)."""
    H = A.clone()
    b, n, _ = H.shape
    tau = torch.zeros(b, n, dtype=H.dtype, device=H.device)
    for k in range(n):
        _reflect_column(H[:, k:, k:], tau, 0, k)
    return H, tau


SSQ_SAFE = (2.0 ** -100, 2.0 ** 100)   # outside it the plain sum of squares may have lost bits


def factor_panel_model(H: torch.Tensor, tau: torch.Tensor, k0: int, w: int):
    """Factor H[:, k0:, k0:k0+w] in place (R and tails), fill tau; return Vt (b, w, m) and T (b, w, w).

    One reduction per column, as householder_panel.cu does it: p = x^T (rows below c), x the column's
    tail, gives ||x||^2 (entry c), v^T A[:, j] = A[c, j] + s p_j (j > c, s = 1/(alpha - beta)) and
    v_j^T v = v_j[c] + s p_j (j < c: column c of G = V^T V, from which T follows)."""
    b = H.shape[0]
    P = H[:, k0:, k0:k0 + w]
    panel = P.clone()
    panel_tau = torch.zeros(b, w, dtype=H.dtype, device=H.device)
    G = torch.zeros(b, w, w, dtype=H.dtype, device=H.device)
    for c in range(w):
        x = panel[:, c + 1:, c].clone()
        p = torch.einsum("br,brj->bj", x, panel[:, c + 1:, :])
        row = panel[:, c, :].clone()
        ssq = p[:, c]
        safe = (ssq >= SSQ_SAFE[0]) & (ssq <= SSQ_SAFE[1])
        xnorm = torch.where(safe, torch.sqrt(ssq), scaled_norm(x))
        t, beta, scale = slarfg(row[:, c], xnorm)
        vdot = row + scale[:, None] * p
        G[:, :c, c] = vdot[:, :c]
        coef = (t[:, None] * vdot)[:, c + 1:]
        v = x * scale[:, None]
        panel[:, c + 1:, c] = v
        panel[:, c, c] = beta
        panel[:, c, c + 1:] -= coef
        panel[:, c + 1:, c + 1:] -= v[:, :, None] * coef[:, None, :]
        panel_tau[:, c] = t
    P.copy_(panel)
    tau[:, k0:k0 + w] = panel_tau
    T = torch.zeros(b, w, w, dtype=H.dtype, device=H.device)
    for c in range(w):
        T[:, c, c] = panel_tau[:, c]
        if c:
            T[:, :c, c] = -panel_tau[:, c, None] * (T[:, :c, :c] @ G[:, :c, c, None])[..., 0]
    V = torch.tril(panel, diagonal=-1)
    V.diagonal(dim1=1, dim2=2).fill_(1.0)
    return V.mT.contiguous(), T


def blocked_qr(A: torch.Tensor, panel_width, factor_panel=factor_panel_model):
    """Blocked Householder QR: per panel, factor it, then C -= V (T^T (V^T C)) on the trailing columns.

    panel_width(m) gives the panel width for a panel of m rows (the CUDA panel
    narrows when a tall panel would not fit in shared memory)."""
    H = A.clone()
    b, n, _ = H.shape
    tau = torch.zeros(b, n, dtype=H.dtype, device=H.device)
    k0 = 0
    while k0 < n:
        w = min(panel_width(n - k0), n - k0)
        if w < 1:
            raise RuntimeError(f"no panel width fits {n - k0} rows")
        Vt, T = factor_panel(H, tau, k0, w)
        if k0 + w < n:
            C = H[:, k0:, k0 + w:]
            W = torch.bmm(T.mT, torch.bmm(Vt, C))
            C.baddbmm_(Vt.mT, W, alpha=-1.0)
        k0 += w
    return H, tau

# ---- part qr_v2/route.py ----
"""qr_v2 routes: which algorithm factors a batch, by n and by device.

| n            | CUDA route                                              | CPU (model)          |
|--------------|---------------------------------------------------------|----------------------|
| <= 64        | householder_small.cu: whole QR on chip, one CTA/matrix   | householder_qr_model |
| <= 2048      | blocked_qr: householder_panel.cu + cuBLAS compact-WY     | blocked_qr (model)   |
| larger       | torch.geqrf (cuSOLVER), until a multi-CTA panel exists   | torch.geqrf          |

Every route is Householder QR with geqrf's reflector convention, so each
matrix is factored on its own merits: rank-deficient, clustered or
near-collinear columns need no detection (a zero column gives tau = 0).
"""
import torch


SMALL_MAX_N = 64
PANEL_WIDTH = 32
PANEL_MAX_THREADS = 512  # the panel kernel's CTA size cap: fewer threads own more rows each
BLOCKED_MAX_N = 2048     # above it one CTA per panel leaves the GPU idle: geqrf is faster


def qr_small_cuda(A: torch.Tensor):
    b, n, _ = A.shape
    H = torch.empty_like(A)
    tau = torch.empty(b, n, dtype=A.dtype, device=A.device)
    CUDA.call("qr_small", A, H, tau, b, n)
    return H, tau


def factor_panel_cuda(H: torch.Tensor, tau: torch.Tensor, k0: int, w: int):
    """The CUDA panel kernel, with the signature of model.factor_panel_model."""
    b, n, _ = H.shape
    Vt = torch.empty(b, w, n - k0, dtype=H.dtype, device=H.device)
    T = torch.empty(b, w, w, dtype=H.dtype, device=H.device)
    CUDA.call("qr_panel", H, tau, Vt, T, b, n, k0, w, PANEL_MAX_THREADS)
    return Vt, T


def panel_width_cuda(m: int) -> int:
    return CUDA.query("qr_panel_width", m, PANEL_MAX_THREADS)


def fixed_panel_width(m: int) -> int:
    return PANEL_WIDTH


def custom_kernel(data: torch.Tensor):
    """Compact-Householder QR of a batch: returns (H, tau) as torch.geqrf does."""
    A = data.contiguous()
    n = A.shape[-1]
    if not A.is_cuda:
        return householder_qr_model(A) if n <= SMALL_MAX_N else blocked_qr(A, fixed_panel_width)
    if n <= SMALL_MAX_N:
        return qr_small_cuda(A)
    if n <= BLOCKED_MAX_N:
        return blocked_qr(A, panel_width_cuda, factor_panel_cuda)
    return torch.geqrf(A)

CUDA.configure("popkit_qr_v2", CUDA_PARTS, CUDA_UNITS)
if torch.cuda.is_available():
    CUDA.load()   # at import, so the grader's pre-run (python3 submission.py) pays the compile

if __name__ == "__main__":
    print(f"qr_v2: CUDA kernels ready" if CUDA.compile_s is not None else "qr_v2: no GPU, CPU models only")
