// Shared device helpers for every popkit kernel: warp/block reductions (and a warp's or a lane
// group's transposed sum of a register vector), reflectors,
// the C entry-point convention and the shared-memory opt-in.
//
// Entry points are `extern "C"` functions taking raw device pointers and sizes;
// they launch on the default queue (what torch uses unless told otherwise) and
// return cudaGetLastError() as an int so Python can raise a clear error.
#pragma once
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

// a[idx] of N register entries (N a power of two, 0 <= idx < N, every index of `a` a compile-time
// constant once inlined): a tree of N - 1 selects, log2 N deep, by idx's bits from the lowest. The
// chain `x = j == idx ? a[j] : x` over j is N selects one after another, on the critical path of a
// latency-bound column step.
template <int N>
__device__ __forceinline__ float select_entry(const float* a, int idx) {
    static_assert(N >= 1 && (N & (N - 1)) == 0, "N must be a power of two");
    if constexpr (N == 1) {
        return a[0];
    } else {
        float half[N / 2];
#pragma unroll
        for (int k = 0; k < N / 2; ++k) half[k] = (idx & 1) ? a[2 * k + 1] : a[2 * k];
        return select_entry<N / 2>(half, idx >> 1);
    }
}

// One butterfly stage of a transposed sum: p[0:LEN) -> p[0:LEN/2), exchanging across lanes
// `kLow LEN / 2` apart (the lane bit that decides which half this lane keeps); then the next
// stage. Recursion on the template argument keeps every index a compile-time constant (a
// loop over LEN compiled to a runtime loop with select chains over all W registers).
template <int LEN, int W, int kLow = 32 / W>
__device__ __forceinline__ void transpose_sum_stage(float (&p)[W], int lane) {
    if constexpr (LEN > 1) {
        constexpr int kOff = kLow * LEN / 2;
        const bool upper = lane & kOff;
#pragma unroll
        for (int k = 0; k < LEN / 2; ++k) {
            const float send = upper ? p[k] : p[k + LEN / 2];
            const float keep = upper ? p[k + LEN / 2] : p[k];
            p[k] = keep + __shfl_xor_sync(0xffffffffu, send, kOff);
        }
        transpose_sum_stage<LEN / 2, W, kLow>(p, lane);
    }
}

// Sum a W-vector (W a power of two) over the W lanes that differ only in lane bits kLow .. kLow W / 2,
// with W - 1 shuffles: afterwards lane l holds that sum of entry (l / kLow) % W. A warp holding a
// 32 x 32 tile as lane groups (rows by some lane bits, columns by the others) sums its rows and its
// columns this way, each lane left with one whole row or column.
template <int W, int kLow>
__device__ __forceinline__ float lanes_transpose_sum(float (&p)[W], int lane) {
    static_assert(W >= 1 && (W & (W - 1)) == 0 && kLow >= 1 && kLow * W <= 32, "W lanes from bit kLow within a warp");
    transpose_sum_stage<W, W, kLow>(p, lane);
    return p[0];
}

// Sum a W-vector over the warp's lanes with W - 1 + (5 - log2 W) shuffles:
// afterwards every lane l holds the warp's total of entry l >> (5 - log2 W).
template <int W>
__device__ __forceinline__ float warp_transpose_sum(float (&p)[W], int lane) {
    float total = lanes_transpose_sum<W, 32 / W>(p, lane);
#pragma unroll
    for (int off = 16 / W; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
    return total;
}

// log2(32 / W): lane l holds entry l >> entry_shift<W>() after warp_transpose_sum<W> (-1: no such W).
template <int W>
__host__ __device__ constexpr int entry_shift() { return W == 32 ? 0 : W == 16 ? 1 : W == 8 ? 2 : -1; }

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

// Whether ||x||^2 summed in plain float32 kept its bits: in [2^-100, 2^100], neither underflow nor
// overflow can have touched it or the products beside it; outside, take a norm scaled by max |x_i|.
__device__ __forceinline__ bool sum_of_squares_safe(float ssq) {
    return ssq >= 7.8886091e-31f && ssq <= 1.2676506e30f;
}

__device__ __forceinline__ Reflector make_reflector(float alpha, float xnorm) {
    if (xnorm == 0.f) return {0.f, alpha, 0.f};
    const float beta = -copysignf(hypotf(alpha, xnorm), alpha);
    return {(beta - alpha) / beta, beta, 1.f / (alpha - beta)};
}

}  // namespace popkit
