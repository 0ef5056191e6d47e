#!POPCORN leaderboard qr_v2
#!POPCORN gpu B200
# Built by popkit from parts/qr_v2: do not edit; change the parts and rebuild.
# toolkit commit: d317f7ae1e1ca6140596ae71b72a81d20f5b4d42
# part common/device_utils.cuh sha256 862f3902f12d351ab656702749e9877726d099b269fcc90dc2a67cb7fae0d517
# part common/launch.cuh sha256 171fb3c933df7c52317c755137b0d732cb87c7e0abb9a11bd34ce497b1c05240
# part qr_v2/householder_small.cu sha256 c64d5c67f35e0da905eb766b3eb0f80f841cd25e27975ef654c396170c928cb6
# part qr_v2/householder_warp.cu sha256 5f26198a081ed462155fb899b99d14d1a3c4bf3e5f774d3e0dc5601b5dc5adf7
# part qr_v2/compact_wy.cuh sha256 c2e62d67ed853e0c7ec17a0a88307d96dd33719d7a186931fb293ee0835463d5
# part qr_v2/panel_team.cuh sha256 19581a6848c3e2cbe0e166d39c9139f39f26c559fe6d98f2ab516d9606d6b97b
# part qr_v2/householder_panel_columns.cu sha256 d16adecf6cb1afda43c6c9c6716001ab4565e9a613eae68c98dccd4994c77496
# part qr_v2/householder_panel.cu sha256 96a920912a101306f27af92678fdfa58b40d82fa5c394ea20f09d396fa7bddce
# part common/tensor_core_tf32.cuh sha256 c7ed98ed5d3b002b4622e770ff95a23807d184ffb7daa3d364b9b1c9706e1d27
# part common/async_copy.cuh sha256 6b8309532d20ee2ada8fb39eade36e058bb0a2049c1df47f98d72d1d718449b7
# part qr_v2/householder_update.cu sha256 36f40f8060757562ab0c6bcd9cdcbe7ba803454ff068be41208f8d04765fb449
# part qr_v2/householder_blocked.cu sha256 29da4167e17ad921aed2f47d79c0ccf6f0f19357089a843047bedc27cdc5055e
# part common/cuda_loader.py sha256 aed590e3646216e85d3818c09f397ef9cc73323962732406b6e511ef2a3b6e47
# part common/tf32_model.py sha256 d6983f5a4e5234072fce81d8d7533ccfa1818f1358ea7c6d0f0169f5f43f2e30
# part qr_v2/model.py sha256 617280a5e7bc299431d64907a7db089158a1a64ca13d0826691f8f6ec882b27f
# part qr_v2/route.py sha256 4d5d1d97ef880230d3fe7aff23fc72efa32f7305ad550de87393bc22e5d28b07
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
// Shared device helpers for every popkit kernel: warp/block reductions (and a warp's or a lane
// group's transposed sum of a register vector), reflectors,
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
''',
    "common/launch.cuh": r'''
// One way to start a kernel, wherever it goes: popkit::launch(to, kernel, grid, block, smem, args...)
// launches now on the default queue when `to` is null (what <<<grid, block, smem>>> does), and otherwise
// records the launch in a CUDA graph through the Launcher: as a new kernel node after the nodes named by
// Launcher::after (build mode), or as new parameters for the node the same launch added before (rebind
// mode: the graph's launch sequence walked again with other pointers, node i for launch i).
// Why: a launch function (a kernel's grid, block and template choice) is written once and serves both the
// one-call loops and a graph whose independent nodes run side by side on one device, with no queue to name.
// Kernels with compile-time __cluster_dims__ should keep their clusters as nodes: the runtime documents the
// cluster shape as a required attribute of the function (cudaFuncAttributeRequiredClusterWidth, fixed at
// compile time, checked at launch), not of the launch. Seen on the H200 (run 33d): a graph with cluster
// kernels among its nodes gave bitwise the direct launches' outputs on every benchmark case
// (scripts/same_outputs.py; a lost cluster would fault in cluster.sync or change the outputs).
#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <vector>

namespace popkit {

class Launcher {
  public:
    // Build mode: each launch adds a kernel node to `graph` (owned by the caller).
    void build(cudaGraph_t graph) {
        graph_ = graph, exec_ = nullptr;
        nodes_.clear(), deps_.clear();
    }
    // Rebind mode: the launches, in the order they were built, set the parameters of exec's nodes.
    void rebind(cudaGraphExec_t exec) { exec_ = exec, next_ = 0; }
    // The nodes the next launches wait for (null entries skipped: a node that was not needed).
    void after(std::initializer_list<cudaGraphNode_t> nodes) {
        deps_.clear();
        for (cudaGraphNode_t node : nodes)
            if (node != nullptr) deps_.push_back(node);
    }
    // The node of the latest launch.
    cudaGraphNode_t last() const { return exec_ != nullptr ? nodes_[next_ - 1] : nodes_.back(); }
    bool rebound_all() const { return next_ == nodes_.size(); }

    cudaError_t add(const void* kernel, dim3 grid, dim3 block, unsigned smem, void** args) {
        cudaKernelNodeParams params = {};
        params.func = const_cast<void*>(kernel);
        params.gridDim = grid, params.blockDim = block, params.sharedMemBytes = smem, params.kernelParams = args;
        if (exec_ != nullptr) {
            if (next_ == nodes_.size()) return cudaErrorInvalidValue;    // more launches than when built
            return cudaGraphExecKernelNodeSetParams(exec_, nodes_[next_++], &params);
        }
        cudaGraphNode_t node = nullptr;
        const cudaError_t err = cudaGraphAddKernelNode(&node, graph_, deps_.data(), deps_.size(), &params);
        if (err == cudaSuccess) nodes_.push_back(node);
        return err;
    }

  private:
    cudaGraph_t graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
    std::vector<cudaGraphNode_t> nodes_;    // every node built, in launch order
    std::vector<cudaGraphNode_t> deps_;
    std::size_t next_ = 0;                  // rebind: the node the next launch sets
};

template <typename Kernel, typename Values, std::size_t... I>
cudaError_t launch_values(Launcher* to, Kernel kernel, dim3 grid, dim3 block, unsigned smem, Values& values,
                          std::index_sequence<I...>) {
    void* args[] = {&std::get<I>(values)...};
    if (to != nullptr) return to->add(reinterpret_cast<const void*>(kernel), grid, block, smem, args);
    const cudaError_t err = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args, smem);
    const cudaError_t last = cudaGetLastError();
    return err != cudaSuccess ? err : last;
}

// kernel(args...) on grid x block threads with smem bytes of dynamic shared memory: now (to == null) or
// into to's graph. Each argument is converted to the kernel's parameter type first, as <<<>>> does.
template <typename... Params, typename... Args>
cudaError_t launch(Launcher* to, void (*kernel)(Params...), dim3 grid, dim3 block, unsigned smem, Args... args) {
    static_assert(sizeof...(Params) == sizeof...(Args), "one argument a kernel parameter");
    std::tuple<Params...> values(args...);
    return launch_values(to, kernel, grid, block, smem, values, std::index_sequence_for<Params...>{});
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
    "qr_v2/householder_warp.cu": r'''
// qr_v2, n <= 32: the whole Householder QR of a matrix in one warp, several matrices per CTA.
//
// Computes H, tau in torch.geqrf form, as householder_small.cu does. Lane l owns row l of its
// matrix (32 columns in registers, zeros past n). Column c is householder_panel.cu's step (its
// outline has the math): one vector p_j = sum_{r > c} x_r A[r, j], x = A[c+1:, c], gives ||x||^2,
// the update's v^T A[:, j] = A[c, j] + s p_j and nothing else is needed (no T: no trailing update
// follows). popkit::warp_transpose_sum leaves lane l with entry l summed over the warp, which here
// is the whole matrix: a column takes no CTA barrier, only __syncwarp around the per-warp copies
// of row c and of the coefficients in shared memory. ||x||^2 outside [2^-100, 2^100] takes the
// norm scaled by max |x_i| (two warp reductions); an exactly zero x gives tau = 0 as in geqrf.
// Model: model.factor_panel_model(H, tau, 0, n), the same one-reduction step (its T goes unused).
//
// Launch: kWarpMatrices warps per CTA, one matrix each; grid = ceil(batch / kWarpMatrices).
// Why it is fast: ~350 instructions and no CTA barrier per column, where householder_small.cu
// walks shared memory with two __syncthreads per column (64 us at 20x32 on the H200, d11541b).

namespace {

constexpr int kWarpMaxN = 32;
constexpr int kWarpMatrices = 4;
constexpr int kWarpColumnGroup = 8;         // columns a copy of the column loop's body

__global__ void __launch_bounds__(32 * kWarpMatrices)
qr_warp_kernel(const float* __restrict__ A, float* __restrict__ H, float* __restrict__ tau, int batch, int n) {
    __shared__ float s_row[kWarpMatrices][kWarpMaxN];      // row c of each warp's matrix
    __shared__ float s_coef[kWarpMatrices][kWarpMaxN];     // tau v^T A[:, j] for j > c, else 0
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int matrix = blockIdx.x * kWarpMatrices + warp;
    if (matrix >= batch) return;                           // a whole warp; the kernel has no CTA barrier
    const float* Ab = A + (size_t)matrix * n * n;

    float a[kWarpMaxN];
#pragma unroll
    for (int j = 0; j < kWarpMaxN; ++j) a[j] = (lane < n && j < n) ? Ab[(size_t)lane * n + j] : 0.f;

    // Columns in groups of kWarpColumnGroup, as householder_panel.cu's column loop: the group loop unrolled,
    // the column loop rolled; column c is picked and written back by selects over its group's 8 columns
    // (not all 32), and the update skips the columns left of the group (their coefficients are zero).
#pragma unroll
    for (int g0 = 0; g0 < kWarpMaxN; g0 += kWarpColumnGroup) {
#pragma unroll 1
        for (int c = g0; c < min(n, g0 + kWarpColumnGroup); ++c) {
            float xc = 0.f;                                    // a chain: a select tree spilled 8 bytes here
#pragma unroll
            for (int j = g0; j < g0 + kWarpColumnGroup; ++j) xc = (j == c) ? a[j] : xc;
            const float x = (lane > c) ? xc : 0.f;
            float p[kWarpMaxN];
#pragma unroll
            for (int j = 0; j < kWarpMaxN; ++j) p[j] = x * a[j];
            const float p_lane = popkit::warp_transpose_sum<kWarpMaxN>(p, lane);   // entry `lane`, the matrix
            if (lane == c) {
#pragma unroll
                for (int j = 0; j < kWarpMaxN; ++j) s_row[warp][j] = a[j];
            }
            __syncwarp();
            const float ssq = __shfl_sync(0xffffffffu, p_lane, c);
            float xnorm;
            if (popkit::sum_of_squares_safe(ssq)) {
                xnorm = sqrtf(ssq);
            } else {                                           // uniform over the warp
                const float amax = popkit::warp_max(fabsf(x));
                const float y = amax > 0.f ? x / amax : 0.f;
                xnorm = amax > 0.f ? amax * sqrtf(popkit::warp_sum(y * y)) : 0.f;
            }
            const popkit::Reflector ref = popkit::make_reflector(s_row[warp][c], xnorm);
            s_coef[warp][lane] = (lane > c) ? ref.tau * (s_row[warp][lane] + ref.scale * p_lane) : 0.f;
            if (lane == 0) tau[(size_t)matrix * n + c] = ref.tau;
            __syncwarp();

            // Rows below c take v_r = x_r s, row c takes v_c = 1 (and beta), rows above stay.
            const float v = (lane > c) ? x * ref.scale : (lane == c) ? 1.f : 0.f;
            const float stored = (lane > c) ? v : ref.beta;
#pragma unroll
            for (int j = g0; j < g0 + kWarpColumnGroup; ++j) a[j] = (j == c && lane >= c) ? stored : a[j];
#pragma unroll
            for (int j = g0; j < kWarpMaxN; ++j) a[j] -= s_coef[warp][j] * v;  // zero for j <= c
            __syncwarp();                                      // s_row and s_coef are rewritten next column
        }
    }

    if (lane < n) {
#pragma unroll
        for (int j = 0; j < kWarpMaxN; ++j)
            if (j < n) H[(size_t)matrix * n * n + (size_t)lane * n + j] = a[j];
    }
}

}  // namespace

POPKIT_EXPORT int qr_warp(const float* A, float* H, float* tau, int batch, int n) {
    if (n < 1 || n > kWarpMaxN || batch < 1) return (int)cudaErrorInvalidValue;
    qr_warp_kernel<<<(batch + kWarpMatrices - 1) / kWarpMatrices, 32 * kWarpMatrices>>>(A, H, tau, batch, n);
    return (int)cudaGetLastError();
}
''',
    "qr_v2/compact_wy.cuh": r'''
// qr_v2: the panel's compact-WY factor T from its reflectors' Gram matrix, shared by both panel kernels.
//
// H_0 H_1 ... H_{w-1} = I - V T V^T with T upper triangular (LAPACK slarft, forward, column-wise):
//   T[c][c] = tau_c,   T[0:c, c] = -tau_c T[0:c, 0:c] G[0:c, c],   G[l][c] = v_l^T v_c (l < c).
// Row k of T depends on its own earlier entries only, a chain of w - 1 - k steps: built one thread a row
// (the first version), the other warps waited for thread 0's 31 steps at the next barrier, 25% of the column
// panel's stall samples at 40x176 and 16% of the row panel's at 640x512 (ncu, 2026-12-01). So the chain runs
// only inside diagonal blocks of 8, and blocks merge pairwise: for A = [a, a + s) and D = [a + s, a + 2s),
//   T[A, D] = -(T[A, A] G[A, D]) T[D, D]
// (the recurrence started from -T[A, A] G[A, D] instead of zero is that product; no tau is inverted, so a
// zero tau is fine). A merge is two small products over all of the CTA's threads, two barriers each level:
// 8 -> 16 -> 32 is a chain of 7 steps and four barriers. X = T[A, A] G[A, D] waits in G's unused lower
// triangle (X[k][c] at G[c][k], c > k). model.compact_wy_factor computes the same products in this order.

namespace popkit {

constexpr int kWyBlock = 8;     // the diagonal blocks' size: the longest serial chain is kWyBlock - 1 steps

// T (rows and columns 0 .. w-1; zero below the diagonal) from G's strict upper triangle and tau, w <= W. Every
// thread of the CTA calls it (it holds barriers); the caller synchronizes before (G and tau written). G's lower
// triangle is scratch. T is complete, for every thread, on return.
template <int W>
__device__ __forceinline__ void build_compact_wy(float (*T)[W + 1], float (*G)[W + 1], const float* tau, int w) {
    const int k = threadIdx.x;
    if (k < w) {                                        // diagonal blocks, one thread a row
        const int end = min((k / kWyBlock + 1) * kWyBlock, w);
        for (int c = 0; c < w; ++c) T[k][c] = 0.f;
        T[k][k] = tau[k];
        for (int c = k + 1; c < end; ++c) {
            float acc = 0.f;
            for (int l = k; l < c; ++l) acc += T[k][l] * G[l][c];
            T[k][c] = -tau[c] * acc;
        }
    }
    __syncthreads();
    for (int size = kWyBlock; size < w; size *= 2) {    // merge blocks [a, a + size) and [a + size, a + 2 size)
        const int entries = (w + 2 * size - 1) / (2 * size) * size * size;
        for (int idx = threadIdx.x; idx < entries; idx += blockDim.x) {     // X = T[A, A] G[A, D]
            const int a = idx / (size * size) * 2 * size, row = a + idx % (size * size) / size;
            const int col = a + size + idx % size;
            if (col >= w) continue;
            float acc = 0.f;
            for (int l = row; l < a + size; ++l) acc += T[row][l] * G[l][col];
            G[col][row] = acc;
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < entries; idx += blockDim.x) {     // T[A, D] = -X T[D, D]
            const int a = idx / (size * size) * 2 * size, row = a + idx % (size * size) / size;
            const int col = a + size + idx % size;
            if (col >= w) continue;
            float acc = 0.f;
            for (int d = a + size; d <= col; ++d) acc += G[d][row] * T[d][col];
            T[row][col] = -acc;
        }
        __syncthreads();
    }
}

}  // namespace popkit
''',
    "qr_v2/panel_team.cuh": r'''
// qr_v2: reductions over a panel's team (one CTA, or a thread block cluster of CL CTAs sharing the
// panel), shared by both panel kernels.
#include <cooperative_groups.h>


namespace popkit {

// A sum or max over the team: the CTA, or (CL > 1) the cluster of CTAs sharing the panel. Every thread
// of the team must call it (it holds barriers); slot: one float of this CTA's shared memory.
template <int CL, bool MAX>
__device__ __forceinline__ float team_reduce(float v, float* scratch, float* slot) {
    v = MAX ? popkit::block_max(v, scratch) : popkit::block_sum(v, scratch);
    if constexpr (CL > 1) {
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        if (threadIdx.x == 0) *slot = v;
        cluster.sync();
        v = 0.f;                                 // both uses reduce nonnegative values
        for (int q = 0; q < CL; ++q) {
            const float other = *cluster.map_shared_rank(slot, q);
            v = MAX ? fmaxf(v, other) : v + other;
        }
        cluster.sync();                          // the slot is free again
    }
    return v;
}

// Cluster pushes: a CTA stores into a peer's shared memory (st.async) and the store completes bytes on
// the peer's mbarrier, so the peer waits on its own barrier instead of a cluster-wide barrier and then
// reads its own shared memory (a pull through map_shared_rank is a remote load after a cluster.sync).

// The shared::cluster address of `p` (this CTA's shared memory) in the CTA of rank `rank`.
__device__ __forceinline__ unsigned cluster_address(const void* p, int rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(remote) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
    return remote;
}

// One float into a peer's shared memory (addresses from cluster_address), counted on its mbarrier.
__device__ __forceinline__ void push_float(unsigned remote, float v, unsigned remote_barrier) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                 :: "r"(remote), "r"(__float_as_uint(v)), "r"(remote_barrier) : "memory");
}

// Set up an mbarrier for one arrival a phase (the caller's expect_bytes); peers may push once every
// CTA has passed a cluster barrier after this.
__device__ __forceinline__ void init_push_barrier(unsigned long long* barrier) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"((unsigned)__cvta_generic_to_shared(barrier)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// This phase completes once `bytes` have been pushed into this CTA (one thread calls it each phase).
__device__ __forceinline__ void expect_bytes(unsigned long long* barrier, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"((unsigned)__cvta_generic_to_shared(barrier)), "r"(bytes) : "memory");
}

// Wait until the phase of parity `parity` has completed; the pushed data is then visible.
__device__ __forceinline__ void wait_pushes(unsigned long long* barrier, unsigned parity) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(barrier);
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(addr), "r"(parity) : "memory");
    }
}

// A cluster's per-column exchange for the panel kernels (W = 32 column sums a CTA): each CTA's warp 0
// pushes its totals, and the CTA that holds row c pushes that row, into every CTA; a CTA then waits on
// its own barrier for (CL + 1) 32 floats and reads its own shared memory. Double-buffered by column
// parity: a peer pushes column c + 2 only after this CTA's column c + 1 push, which follows every
// thread's reads of column c. Declare it __shared__; init, then a cluster barrier, before the first push.
template <int CL>
struct ColumnExchange {
    float totals[2][CL][32];
    float row[2][32];
    unsigned long long pushed[2];

    __device__ void init() {
        if (threadIdx.x == 0) {
            init_push_barrier(&pushed[0]);
            init_push_barrier(&pushed[1]);
        }
    }

    // Warp 0 of every CTA: lane's total, and (on rank row_rank) lane's entry of row c, to every CTA.
    __device__ void push(int c, int rank, int row_rank, int lane, float total, float row_entry) {
        const int buf = c & 1;
        for (int q = 0; q < CL; ++q) {
            const unsigned barrier = cluster_address(&pushed[buf], q);
            push_float(cluster_address(&totals[buf][rank][lane], q), total, barrier);
            if (rank == row_rank) push_float(cluster_address(&row[buf][lane], q), row_entry, barrier);
        }
    }

    // Every thread: wait for column c's pushes, then the team's sum of `entry` (the ranks in order, so every
    // CTA holds the same bits); row c is row_of(c) afterwards.
    __device__ float wait_and_sum(int c, int entry) {
        const int buf = c & 1;
        if (threadIdx.x == 0) expect_bytes(&pushed[buf], (CL + 1) * 32 * sizeof(float));
        wait_pushes(&pushed[buf], (c >> 1) & 1);
        float sum = 0.f;
        for (int q = 0; q < CL; ++q) sum += totals[buf][q][entry];
        return sum;
    }

    __device__ const float* row_of(int c) const { return row[c & 1]; }
};

}  // namespace popkit
''',
    "qr_v2/householder_panel_columns.cu": r'''
// qr_v2, blocked route: the panel kernel with one lane per column, for panels of at most 512 rows.
//
// It computes what householder_panel.cu computes (the same reflectors as geqrf, R and the vector tails
// in A, tau, Vt and T; model.factor_panel_model), with the panel laid out the other way round: lane j
// of every warp owns column j, warp q owns rows q RW .. q RW + RW - 1 (RW = 8, 16 or 32 rows, all in
// registers). Per column c:
//   x   = column c below the diagonal: lane c of each warp puts its RW entries (zero at and above the
//         diagonal) in shared memory, where its warp reads them, once for p and once for the update
//         (not held in registers: RW more of them spilled at RW = 32); warps wholly above the
//         diagonal sit the column out;
//   p_j = sum_{r > c} x_r A[r, j]: RW FMAs per lane, no butterfly (the lane already owns column j),
//         then the warps' partial sums through shared memory: one __syncthreads per column;
//   p_c = ||x||^2 -> beta, tau, s (slarfg; the scaled two-pass norm when ||x||^2 leaves [2^-100,
//         2^100]); j > c: v^T A[:, j] = A[c, j] + s p_j, the update coefficient; j < c: the Gram
//         entry v_j^T v for T;
//   row c is final after this column (R right of the diagonal, beta on it, the tails of earlier
//         reflectors left of it): the owner warp writes it to A at once, so the row's registers,
//         never read again, need no select chain to update them;
//   A[r, j] -= tau (v^T A[:, j]) s x_r for rows r > c, lanes j > c: one FMA per owned row.
// Lane c keeps its column's tail unscaled (x) with the scale s_c beside it: scaling it in place
// would cost RW instructions a column for one active lane. The stores of V, Vt and the Gram
// entries multiply by it. panel_columns_model.py replays this bookkeeping in torch (tested against
// model.factor_panel_model).
//
// Launch: a team of CL CTAs per matrix (CL = 1, or a thread block cluster of 2, 4 or 8: grid = batch
// CL), each of ceil(m / (CL RW)) warps (at most 16), RW the least of 8, 16, 32 that fits m <= 16 CL RW;
// warp q of rank k owns the rows from (k warps + q) RW. With a cluster, each CTA's column sums go to
// every CTA's shared memory (popkit::ColumnExchange: st.async pushes counted on the receiver's
// mbarrier, no cluster barrier a column), and so does row c from the CTA that holds it.
// Why it is fast: against householder_panel.cu (thread = row, all W columns in registers), a column
// costs each warp ~150 instructions instead of ~430: no W-wide butterfly (31 shuffles and their
// selects), no select chains to pick column c out of registers and write it back, and the update
// touches only the lane's own column; loads and stores of A are whole rows a warp (coalesced).
#include <cooperative_groups.h>


namespace {

constexpr int kColumnsWidth = 32;           // lanes = columns
constexpr int kColumnsMaxWarps = 16;
constexpr int kColumnsMaxRows = kColumnsMaxWarps * 32;
constexpr int kRedLd = kColumnsMaxWarps + 4;    // 20: lane j's 16 partial sums read as float4s, no conflicts

template <int RW, int CL>
__device__ __forceinline__ void factor_panel_columns(float* __restrict__ A, float* __restrict__ tau,
                                                     float* __restrict__ Vt, float* __restrict__ T, int n, int k0,
                                                     int w) {
    constexpr int W = kColumnsWidth;
    __shared__ __align__(16) float s_x[kColumnsMaxWarps][RW];      // column c of each warp's rows
    __shared__ __align__(16) float s_red[2][W][kRedLd];           // p_j's warp partials, by column parity
    __shared__ float s_row[2][W];                                 // row c, by column parity
    __shared__ float s_G[W][W + 1];
    __shared__ float s_T[W][W + 1];
    __shared__ float s_tau[W];
    __shared__ float scratch[32];
    __shared__ popkit::ColumnExchange<CL> s_exchange;             // CL > 1: the team's column sums, row c
    __shared__ float s_slot;                                      // CL > 1: team_reduce's exchange
    const int m = n - k0, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int matrix = blockIdx.x / CL, rank = blockIdx.x % CL;  // a cluster's CTAs are consecutive
    const int team_warp = rank * warps + warp, row0 = team_warp * RW;
    float* Ab = A + (size_t)matrix * n * n + (size_t)k0 * n + k0;

    for (int idx = threadIdx.x; idx < 2 * W * kRedLd; idx += blockDim.x) (&s_red[0][0][0])[idx] = 0.f;
    float a[RW];
#pragma unroll
    for (int i = 0; i < RW; ++i) a[i] = 0.f;
    if (lane < w) {                    // row by row through one running pointer: RW addresses held for
        const float* src = Ab + (size_t)row0 * n + lane;    // the final stores spilled at RW = 32
#pragma unroll
        for (int i = 0; i < RW; ++i, src += n) a[i] = row0 + i < m ? *src : 0.f;
    }
    float my_scale = 1.f;              // this lane's reflector scale once its column is factored
    if constexpr (CL > 1) {            // before any CTA pushes into another's barriers
        s_exchange.init();
        cooperative_groups::this_cluster().sync();
    } else {
        __syncthreads();
    }

#pragma unroll 1
    for (int c = 0; c < w; ++c) {
        const int buf = c & 1, owner = c / RW, local = c - owner * RW;
        const bool below = team_warp >= owner;             // the warp holds rows below the diagonal
        __syncwarp();                                        // the warp's reads of the last column's x done
        if (below && lane == c) {                            // x: zero at and above the diagonal
#pragma unroll
            for (int i = 0; i < RW; i += 4) {
                float4 v = make_float4(a[i], a[i + 1], a[i + 2], a[i + 3]);
                if (team_warp == owner)
                    v = make_float4(i > local ? v.x : 0.f, i + 1 > local ? v.y : 0.f, i + 2 > local ? v.z : 0.f,
                                    i + 3 > local ? v.w : 0.f);
                *reinterpret_cast<float4*>(&s_x[warp][i]) = v;
            }
        }
        __syncwarp();
        float part[4] = {0.f, 0.f, 0.f, 0.f};                // four chains: the FMAs' latency overlaps
        if (below) {
#pragma unroll
            for (int i = 0; i < RW; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&s_x[warp][i]);
                part[0] = fmaf(v.x, a[i], part[0]);
                part[1] = fmaf(v.y, a[i + 1], part[1]);
                part[2] = fmaf(v.z, a[i + 2], part[2]);
                part[3] = fmaf(v.w, a[i + 3], part[3]);
            }
        }
        s_red[buf][lane][warp] = (part[0] + part[1]) + (part[2] + part[3]);
        if (team_warp == owner) s_row[buf][lane] = popkit::select_entry<RW>(a, local);
        __syncthreads();

        float p = 0.f;                                       // p_lane over this CTA's rows below c
#pragma unroll
        for (int q = 0; q < kColumnsMaxWarps; q += 4) {
            const float4 v = *reinterpret_cast<const float4*>(&s_red[buf][lane][q]);
            p += (v.x + v.y) + (v.z + v.w);
        }
        const float* row_c = s_row[buf];
        if constexpr (CL > 1) {                              // ... and over the team's
            if (warp == 0) s_exchange.push(c, rank, owner / warps, lane, p, s_row[buf][lane]);
            p = s_exchange.wait_and_sum(c, lane);
            row_c = s_exchange.row_of(c);
        }
        const float ssq = __shfl_sync(0xffffffffu, p, c);
        float xnorm;
        if (popkit::sum_of_squares_safe(ssq)) {
            xnorm = sqrtf(ssq);
        } else {                                             // uniform: every thread has the same ssq
            float amax = 0.f;                                // lane 0 a warp: the others would repeat it
            if (below && lane == 0) {
                for (int i = 0; i < RW; ++i) amax = fmaxf(amax, fabsf(s_x[warp][i]));
            }
            amax = popkit::team_reduce<CL, true>(amax, scratch, &s_slot);
            float scaled = 0.f;
            if (below && lane == 0 && amax > 0.f) {
                for (int i = 0; i < RW; ++i) scaled += (s_x[warp][i] / amax) * (s_x[warp][i] / amax);
            }
            scaled = popkit::team_reduce<CL, false>(scaled, scratch, &s_slot);
            xnorm = amax > 0.f ? amax * sqrtf(scaled) : 0.f;
        }
        const float alpha = row_c[c], row_entry = row_c[lane];
        const popkit::Reflector ref = popkit::make_reflector(alpha, xnorm);
        const float vdot = row_entry + ref.scale * p;        // j > c: v^T A[:, j]; j < c: v_j^T v / s_j
        if (warp == 0 && lane < c) s_G[lane][c] = my_scale * vdot;
        if (threadIdx.x == 0) s_tau[c] = ref.tau;
        if (team_warp == owner && lane < w)
            Ab[(size_t)c * n + lane] = lane < c ? my_scale * row_entry
                                     : lane == c ? ref.beta : row_entry - ref.tau * vdot;
        if (lane == c) my_scale = ref.scale;
        const float coef = lane > c ? ref.tau * vdot * ref.scale : 0.f;
        if (below) {
#pragma unroll
            for (int i = 0; i < RW; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&s_x[warp][i]);
                a[i] = fmaf(-coef, v.x, a[i]);
                a[i + 1] = fmaf(-coef, v.y, a[i + 1]);
                a[i + 2] = fmaf(-coef, v.z, a[i + 2]);
                a[i + 3] = fmaf(-coef, v.w, a[i + 3]);
            }
        }
    }
    if constexpr (CL == 1) __syncthreads();
    else cooperative_groups::this_cluster().sync();      // no CTA leaves while another reads its shared memory
    popkit::build_compact_wy<W>(s_T, s_G, s_tau, w);

    // Rows w .. m-1 hold only reflector tails (rows below w were written column by column).
    if (lane < w) {
        float* dst = Ab + (size_t)row0 * n + lane;
#pragma unroll
        for (int i = 0; i < RW; ++i, dst += n)
            if (row0 + i >= w && row0 + i < m) *dst = my_scale * a[i];
        float* vt = Vt + (size_t)matrix * w * m + (size_t)lane * m;       // Vt's row j = lane
#pragma unroll
        for (int i = 0; i < RW; ++i) {
            const int r = row0 + i;
            if (r < m) vt[r] = r < lane ? 0.f : r == lane ? 1.f : my_scale * a[i];
        }
    }
    __syncthreads();
    if (rank != 0) return;                               // every CTA has T and tau; one writes them
    for (int idx = threadIdx.x; idx < w * w; idx += blockDim.x)
        T[(size_t)matrix * w * w + idx] = s_T[idx / w][idx % w];
    if (threadIdx.x < w) tau[(size_t)matrix * n + k0 + threadIdx.x] = s_tau[threadIdx.x];
}

template <int RW>
__global__ void __launch_bounds__(kColumnsMaxWarps * 32)
qr_panel_columns_kernel(float* A, float* tau, float* Vt, float* T, int n, int k0, int w) {
    factor_panel_columns<RW, 1>(A, tau, Vt, T, n, k0, w);
}

template <int RW, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(kColumnsMaxWarps * 32)
qr_panel_columns_cluster_kernel(float* A, float* tau, float* Vt, float* T, int n, int k0, int w) {
    factor_panel_columns<RW, CL>(A, tau, Vt, T, n, k0, w);
}

template <int RW, int CL>
int launch_columns(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n, int k0, int w) {
    const int warps = (n - k0 + CL * RW - 1) / (CL * RW);
    if constexpr (CL == 1)
        return (int)popkit::launch(to, qr_panel_columns_kernel<RW>, batch, warps * 32, 0, A, tau, Vt, T, n, k0, w);
    else
        return (int)popkit::launch(to, qr_panel_columns_cluster_kernel<RW, CL>, batch * CL, warps * 32, 0, A, tau,
                                   Vt, T, n, k0, w);
}

template <int CL>
int launch_columns(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n, int k0, int w) {
    const int m = n - k0;
    if (m <= CL * kColumnsMaxWarps * 8) return launch_columns<8, CL>(to, A, tau, Vt, T, batch, n, k0, w);
    if (m <= CL * kColumnsMaxWarps * 16) return launch_columns<16, CL>(to, A, tau, Vt, T, batch, n, k0, w);
    return launch_columns<32, CL>(to, A, tau, Vt, T, batch, n, k0, w);
}

}  // namespace

// Whether qr_panel_columns takes a panel of m rows on `cluster` CTAs.
POPKIT_EXPORT int qr_panel_columns_fits(int m, int cluster) {
    return (cluster == 1 || cluster == 2 || cluster == 4 || cluster == 8) && m >= 1 && m <= cluster * kColumnsMaxRows;
}

// householder_panel.cu's qr_panel for a panel of m = n - k0 <= 512 cluster rows (cluster = 1, 2, 4 or 8
// CTAs a matrix) and w <= 32 columns (else cudaErrorInvalidValue), the same outputs; launched now when `to`
// is null, else recorded in to's graph (launch.cuh).
POPKIT_EXPORT int qr_panel_columns(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n,
                                   int k0, int w, int cluster) {
    const int m = n - k0;
    if (batch < 1 || k0 < 0 || !qr_panel_columns_fits(m, cluster) || w < 1 || w > kColumnsWidth || w > m)
        return (int)cudaErrorInvalidValue;
    switch (cluster) {
        case 1: return launch_columns<1>(to, A, tau, Vt, T, batch, n, k0, w);
        case 2: return launch_columns<2>(to, A, tau, Vt, T, batch, n, k0, w);
        case 4: return launch_columns<4>(to, A, tau, Vt, T, batch, n, k0, w);
        default: return launch_columns<8>(to, A, tau, Vt, T, batch, n, k0, w);
    }
}
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
// because row r holds x_j[r] (v_j[r] = s_j x_j[r]) in columns j < c and the
// current entries in columns j >= c:
//   p_c       = ||x||^2                       -> beta, tau, s (slarfg)
//   j > c     : v^T A[:, j] = A[c, j] + s p_j -> the update of column j
//   j < c     : v_j^T v = s_j (x_j[c] + s p_j) -> column c of T (G = V^T V)
// Column c's tail is scaled (and beta put on the diagonal) only when the panel is
// stored: written back at every column, column c took a select chain over the W
// register columns a row (ncu at 20e0644: selects were 22% of the kernel's
// instructions); s_j and beta_j wait in shared memory.
// Row c itself is broadcast through shared memory by its owner. So a column
// costs W FMAs per owned row, a butterfly that leaves lane l with the warp's
// sum of one entry, one __syncthreads, a 16-term cross-warp sum, and W - g0 FMAs
// per owned row for the update (g0: the first column of c's group of 8): the
// barrier count per column is one (the previous kernel had six and walked shared
// memory four times).
// ||x||^2 outside [2^-100, 2^100] (underflow or overflow risk) takes a
// scaled two-pass norm, uniformly for the block; an exactly zero x gives
// tau = 0 as in geqrf.
//
// Launch: one CTA per matrix (grid = batch), at most max_threads (<= 512) threads;
// thread t owns rows t, t + blockDim, ... (R of them, the least of 1, 2, 4, 8
// that covers m) with all W columns in registers: W = 32 for R <= 2, 16 for
// R = 4, 8 for R = 8 (at 512 threads: m <= 1024, 2048, 4096).
// Cluster mode (CL = 2, 4 or 8 CTAs a matrix, a thread block cluster): the team's
// threads split the rows the same way (thread t of rank q owns rows q blockDim + t,
// + CL blockDim, ...); per column each CTA's warp 0 sums its warps' vectors and
// pushes the totals (rank 0: and row c) into every CTA's shared memory (st.async,
// counted on the receiver's mbarrier), so a CTA waits on its own barrier and reads
// its own shared memory (a cluster.sync and remote loads per column took 3 us a
// column at 2x4096, ncu 2026-12-01: barrier and long-scoreboard stalls). Same arithmetic as one
// CTA (the model is model.factor_panel_model either way); a small batch of tall
// panels then uses CL times the SMs and keeps 32 columns (at 512 threads and two
// rows a thread, 8 CTAs hold 8192 rows).
// Why it is fast: the panel is read and written once, lives in registers, and
// each column is one barrier (two with a cluster); the O(n^3) work is left to the
// trailing update.
#include <cooperative_groups.h>


namespace {

constexpr int kPanelThreads = 512;
constexpr int kPanelWarps = kPanelThreads / 32;
constexpr int kStageRows = 128;             // rows of H staged per round of the coalesced store
constexpr int kColumnGroup = 8;             // panel columns a copy of the column loop's body (divides W)

// ||x|| with x scaled by its largest entry (both passes are team-wide); for the rare columns whose
// plain sum of squares left the safe range. x holds this thread's entries of the column below the
// diagonal (zero elsewhere).
template <int R, int CL>
__device__ float careful_norm(const float (&x)[R], float* scratch, float* slot) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) amax = fmaxf(amax, fabsf(x[i]));
    amax = popkit::team_reduce<CL, true>(amax, scratch, slot);
    if (amax == 0.f) return 0.f;
    float ssq = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) { const float y = x[i] / amax; ssq += y * y; }
    return amax * sqrtf(popkit::team_reduce<CL, false>(ssq, scratch, slot));
}

// Whether column c keeps x until the panel is stored (lazy) or takes v and beta at once. VARIANT
__host__ __device__ constexpr bool lazy_scale(int R, int CL) { return CL == 1; }

// The panel of one matrix, factored by a team of CL CTAs (CL = 1: one CTA; else a thread block cluster
// whose CTAs split the rows and add their partial sums through distributed shared memory).
template <int R, int W, int CL>
__device__ __forceinline__ void factor_panel(float* __restrict__ A, float* __restrict__ tau, float* __restrict__ Vt,
                                             float* __restrict__ T, int n, int k0, int w) {
    constexpr int kShift = popkit::entry_shift<W>();
    constexpr bool kLazy = lazy_scale(R, CL);
    static_assert(kShift >= 0, "W must be 8, 16 or 32");
    __shared__ float s_red[2][kPanelWarps][W];   // per-warp partial sums, double-buffered by column
    __shared__ float s_row[2][W];                // row c, broadcast by its owner
    __shared__ float s_coef[kPanelWarps][W];     // the update's coefficients, per warp
    __shared__ float s_G[W][W + 1];              // v_a . v_b for a < b
    __shared__ float s_T[W][W + 1];
    __shared__ float s_tau[W];
    __shared__ float s_scale[W], s_beta[W];      // s_j and beta_j, applied when the panel is stored
    __shared__ float scratch[32];
    __shared__ popkit::ColumnExchange<CL> s_exchange;   // CL > 1: the team's column sums and row c
    __shared__ float s_slot;                     // CL > 1: team_reduce's exchange
    __shared__ float s_stage[kStageRows][W + 1];    // H's rows on their way out
    const int m = n - k0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int entry = lane >> kShift;            // the entry of the reduced vector this lane holds
    const bool entry_lane = (lane & ((1 << kShift) - 1)) == 0;   // the first lane holding its entry
    const int matrix = blockIdx.x / CL, rank = blockIdx.x % CL;  // a cluster's CTAs are consecutive
    const int first = rank * blockDim.x + threadIdx.x, stride = blockDim.x * CL;   // rows first + i stride
    float* Ab = A + (size_t)matrix * n * n + (size_t)k0 * n + k0;
    if constexpr (CL > 1) {                      // before any CTA pushes into another's barriers
        s_exchange.init();
        cooperative_groups::this_cluster().sync();
    }

    float a[R][W];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = first + i * stride;
#pragma unroll
        for (int j = 0; j < W; ++j) a[i][j] = (r < m && j < w) ? Ab[(size_t)r * n + j] : 0.f;
    }

    // The columns go in groups of kColumnGroup: the group loop is unrolled (W / kColumnGroup copies of
    // the body), the column loop inside a group stays rolled. Register arrays need compile-time
    // indices, so column c is picked by a select tree over its group's columns (3 deep) and, not
    // lazy, written back by selects over them only; the update skips the columns left of the group
    // (their coefficients are zero). Fully unrolled (W copies, d147c6d) the object was 2.3 MB and took
    // 42 s to compile; one rolled loop selected over all W columns and updated all W (twice the work).
#pragma unroll
    for (int g0 = 0; g0 < W; g0 += kColumnGroup) {
#pragma unroll 1
        for (int c = g0; c < min(w, g0 + kColumnGroup); ++c) {
            const int buf = c & 1;
            float x[R];                                         // column c below the diagonal, else 0
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const float xc = popkit::select_entry<kColumnGroup>(a[i] + g0, c - g0);
                x[i] = (first + i * stride > c) ? xc : 0.f;    // rows >= m hold zeros
            }
            float p[W];
#pragma unroll
            for (int j = 0; j < W; ++j) p[j] = 0.f;
#pragma unroll
            for (int i = 0; i < R; ++i) {
#pragma unroll
                for (int j = 0; j < W; ++j) p[j] += x[i] * a[i][j];
            }
            const float warp_total = popkit::warp_transpose_sum<W>(p, lane);
            if (entry_lane) s_red[buf][warp][entry] = warp_total;
            if (first == c) {                                   // row c is row 0 of thread c (of rank 0)
#pragma unroll
                for (int j = 0; j < W; ++j) s_row[buf][j] = a[0][j];
            }
            __syncthreads();

            float p_entry = 0.f;                                // this lane's entry, over the whole team
            const float* row_c = s_row[buf];
            if constexpr (CL == 1) {
                for (int src = 0; src < warps; ++src) p_entry += s_red[buf][src][entry];
            } else {
                // Warp 0 pushes this CTA's totals (rank 0, which holds row c < 32: and row c) into every
                // CTA. W = 32 here: every lane holds an entry.
                static_assert(W == 32, "the cluster panel pushes one entry a lane");
                if (warp == 0) {
                    float total = 0.f;
                    for (int src = 0; src < warps; ++src) total += s_red[buf][src][entry];
                    s_exchange.push(c, rank, 0, entry, total, s_row[buf][entry]);
                }
                p_entry = s_exchange.wait_and_sum(c, entry);
                row_c = s_exchange.row_of(c);
            }
            const float alpha = row_c[c];
            const float ssq = __shfl_sync(0xffffffffu, p_entry, c << kShift);
            float xnorm;
            if (popkit::sum_of_squares_safe(ssq)) {
                xnorm = sqrtf(ssq);
            } else {                                            // uniform: every thread has the same ssq
                bool nonzero = false;
#pragma unroll
                for (int i = 0; i < R; ++i) nonzero |= x[i] != 0.f;
                const bool any = popkit::team_reduce<CL, true>(nonzero ? 1.f : 0.f, scratch, &s_slot) > 0.f;
                xnorm = any ? careful_norm<R, CL>(x, scratch, &s_slot) : 0.f;
            }
            const popkit::Reflector ref = popkit::make_reflector(alpha, xnorm);
            // lane's entry j: j > c -> tau v^T A[:, j]; j < c -> v_j^T v (column c of G)
            const float vdot = row_c[entry] + ref.scale * p_entry;
            if (warp == 0 && entry < c && entry_lane) s_G[entry][c] = kLazy ? s_scale[entry] * vdot : vdot;
            if (threadIdx.x == 0) {
                s_tau[c] = ref.tau;
                s_scale[c] = ref.scale;
                s_beta[c] = ref.beta;
            }
            if (entry_lane) s_coef[warp][entry] = (entry > c) ? ref.tau * vdot : 0.f;
            __syncwarp();

            // v: x s below c, 1 at row c, 0 above; column c itself keeps x (and alpha) until the store.
            float v[R];
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const int r = first + i * stride;
                v[i] = (r > c) ? x[i] * ref.scale : (r == c) ? 1.f : 0.f;
                if constexpr (!kLazy) {                          // column c takes v (and beta) now
                    const float stored = (r > c) ? v[i] : ref.beta;
#pragma unroll
                    for (int j = g0; j < g0 + kColumnGroup; ++j) a[i][j] = (j == c && r >= c) ? stored : a[i][j];
                }
            }
#pragma unroll
            for (int j = g0; j < W; ++j) {
                const float coef_j = s_coef[warp][j];           // a broadcast read; zero for j <= c
#pragma unroll
                for (int i = 0; i < R; ++i) a[i][j] -= coef_j * v[i];
            }
        }
    }
    if constexpr (CL == 1) __syncthreads();
    else cooperative_groups::this_cluster().sync();   // no CTA leaves while another reads its shared memory

    popkit::build_compact_wy<W>(s_T, s_G, s_tau, w);

    const size_t vbase = (size_t)matrix * w * m;
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = first + i * stride;
        if (r >= m) continue;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            if (j >= w) break;
            Vt[vbase + (size_t)j * m + r] = (r < j) ? 0.f : (r == j) ? 1.f : kLazy ? a[i][j] * s_scale[j] : a[i][j];
        }
    }
    // H's panel goes out through shared memory, kStageRows rows at a time, so that a warp stores
    // whole rows: written by each thread from its registers, a warp store touched 32 rows (32
    // partial sectors per instruction, W instructions per row). Rows first + i stride of the
    // threads are blockDim.x consecutive rows from row0.
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int row0 = rank * blockDim.x + i * stride;
        for (int base = 0; base < (int)blockDim.x && row0 + base < m; base += kStageRows) {
            const int local = threadIdx.x - base;
            if (local >= 0 && local < kStageRows) {
                const int r = first + i * stride;          // = row0 + base + local
#pragma unroll
                for (int j = 0; j < W; ++j)
                    s_stage[local][j] = (!kLazy || r < j) ? a[i][j] : (r == j) ? s_beta[j] : a[i][j] * s_scale[j];
            }
            __syncthreads();
            for (int idx = threadIdx.x; idx < kStageRows * W; idx += blockDim.x) {
                const int r = idx / W, j = idx % W, row = row0 + base + r;
                if (base + r < (int)blockDim.x && row < m && j < w) Ab[(size_t)row * n + j] = s_stage[r][j];
            }
            __syncthreads();
        }
    }
    __syncthreads();
    if (rank != 0) return;                             // every CTA has T and tau; one writes them
    for (int idx = threadIdx.x; idx < w * w; idx += blockDim.x)
        T[(size_t)matrix * w * w + idx] = s_T[idx / w][idx % w];
    if (threadIdx.x < w) tau[(size_t)matrix * n + k0 + threadIdx.x] = s_tau[threadIdx.x];
}

template <int R, int W>
__global__ void __launch_bounds__(kPanelThreads, R == 1 ? 2 : 1)   // R = 1: 64 registers, two 512-thread CTAs an SM
qr_panel_kernel(float* A, float* tau, float* Vt, float* T, int n, int k0, int w) {
    factor_panel<R, W, 1>(A, tau, Vt, T, n, k0, w);
}

template <int R, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(kPanelThreads)
qr_panel_cluster_kernel(float* A, float* tau, float* Vt, float* T, int n, int k0, int w) {
    factor_panel<R, 32, CL>(A, tau, Vt, T, n, k0, w);
}

// Rows per thread for a panel of m rows on `cluster` CTAs of at most `threads` threads (0: too tall for
// the team's registers). Clusters are compiled for 1 and 2 rows a thread (32-column panels) only.
int rows_per_thread(int m, int threads, int cluster) {
    if (threads < 32 || threads > kPanelThreads || (cluster != 1 && cluster != 2 && cluster != 4 && cluster != 8))
        return 0;
    for (int rows = 1; rows <= (cluster == 1 ? 8 : 2); rows *= 2)
        if (m <= rows * threads * cluster) return rows;
    return 0;
}

template <int R, int W>
cudaError_t launch_panel(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n, int k0,
                         int w) {
    const int threads = ((n - k0 + R - 1) / R + 31) / 32 * 32;
    return popkit::launch(to, qr_panel_kernel<R, W>, batch, threads, 0, A, tau, Vt, T, n, k0, w);
}

template <int R, int CL>
cudaError_t launch_cluster_panel(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n,
                                 int k0, int w) {
    const int threads = ((n - k0 + R * CL - 1) / (R * CL) + 31) / 32 * 32;
    return popkit::launch(to, qr_panel_cluster_kernel<R, CL>, batch * CL, threads, 0, A, tau, Vt, T, n, k0, w);
}

template <int CL>
cudaError_t launch_cluster_panel(popkit::Launcher* to, int rows, float* A, float* tau, float* Vt, float* T, int batch,
                                 int n, int k0, int w) {
    return rows == 1 ? launch_cluster_panel<1, CL>(to, A, tau, Vt, T, batch, n, k0, w)
                     : launch_cluster_panel<2, CL>(to, A, tau, Vt, T, batch, n, k0, w);
}

}  // namespace

// The panel width for a panel of m rows on `cluster` CTAs (1, 2, 4 or 8) of at most max_threads threads:
// what R rows per thread leave room for in registers (0: none fits).
POPKIT_EXPORT int qr_panel_width(int m, int max_threads, int cluster) {
    switch (rows_per_thread(m, max_threads, cluster)) {
        case 1: case 2: return 32;
        case 4: return 16;
        case 8: return 8;
        default: return 0;
    }
}

POPKIT_EXPORT int qr_panel_columns_fits(int m, int cluster);
POPKIT_EXPORT int qr_panel_columns(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n,
                                   int k0, int w, int cluster);

// One panel of every matrix on `cluster` CTAs of at most max_threads threads; a panel of at most
// columns_max_rows rows a CTA goes to householder_panel_columns.cu's kernel (0: never). The kernel is
// launched now when `to` is null, else recorded in to's graph (launch.cuh).
POPKIT_EXPORT int qr_panel_to(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n, int k0,
                              int w, int max_threads, int cluster, int columns_max_rows) {
    const int m = n - k0;
    if (batch < 1 || n < 1 || k0 < 0 || k0 >= n || w < 1 || w > qr_panel_width(m, max_threads, cluster) || w > m)
        return (int)cudaErrorInvalidValue;
    if (m <= cluster * columns_max_rows && qr_panel_columns_fits(m, cluster))
        return qr_panel_columns(to, A, tau, Vt, T, batch, n, k0, w, cluster);
    const int rows = rows_per_thread(m, max_threads, cluster);
    switch (cluster) {
        case 2: return (int)launch_cluster_panel<2>(to, rows, A, tau, Vt, T, batch, n, k0, w);
        case 4: return (int)launch_cluster_panel<4>(to, rows, A, tau, Vt, T, batch, n, k0, w);
        case 8: return (int)launch_cluster_panel<8>(to, rows, A, tau, Vt, T, batch, n, k0, w);
        default: break;
    }
    switch (rows) {
        case 1: return (int)launch_panel<1, 32>(to, A, tau, Vt, T, batch, n, k0, w);
        case 2: return (int)launch_panel<2, 32>(to, A, tau, Vt, T, batch, n, k0, w);
        case 4: return (int)launch_panel<4, 16>(to, A, tau, Vt, T, batch, n, k0, w);
        default: return (int)launch_panel<8, 8>(to, A, tau, Vt, T, batch, n, k0, w);
    }
}

// qr_panel_to, launched now (route.factor_panel_cuda's entry point).
POPKIT_EXPORT int qr_panel(float* A, float* tau, float* Vt, float* T, int batch, int n, int k0, int w,
                           int max_threads, int cluster, int columns_max_rows) {
    return qr_panel_to(nullptr, A, tau, Vt, T, batch, n, k0, w, max_threads, cluster, columns_max_rows);
}
''',
    "common/tensor_core_tf32.cuh": r'''
// TF32 tensor-core pieces shared by every problem's kernels: the hi + lo split of an fp32 value and the
// warp-level m16n8k8 product (mma.sync, sm_80 and later), alone and as the tf32x3 step.
//
// tf32x3: x = hi + lo, hi = x rounded to TF32 (10 mantissa bits), lo = x - hi exact in fp32 (the tensor
// core truncates it to TF32); a product accumulates lo_a hi_b + hi_a lo_b + hi_a hi_b in fp32, ~21 bits
// per product (the dropped lo lo term is ~2^-22 relative). Torch model: common/tf32_model.py.
#include <cuda_runtime.h>

namespace popkit {

// x = hi + lo: hi rounded to TF32 (ties away from zero) by integer ops, lo = x - hi exact in fp32. Two
// integer ops and a subtract instead of two cvt.rna.tf32 conversions (tf32_model.tf32_round, tf32_truncate).
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
    hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}

// c += a b on one m16n8k8 tile: a (16 x 8, row) as a0 = (g, t), a1 = (g + 8, t), a2 = (g, t + 4),
// a3 = (g + 8, t + 4); b (8 x 8, col) as b0 = (t, g), b1 = (t + 4, g); c as c0, c1 = (g, 2t), (g, 2t + 1),
// c2, c3 = (g + 8, 2t), (g + 8, 2t + 1); g = lane / 4, t = lane % 4.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c += a b at ~21 bits from split operands: the small terms first.
__device__ __forceinline__ void mma_tf32x3(float (&c)[4], const unsigned (&ah)[4], const unsigned (&al)[4],
                                           const unsigned (&bh)[2], const unsigned (&bl)[2]) {
    mma_tf32(c, al, bh);
    mma_tf32(c, ah, bl);
    mma_tf32(c, ah, bh);
}

}  // namespace popkit
''',
    "common/async_copy.cuh": r'''
// Asynchronous global -> shared copies (cp.async, sm_80 and later), shared by every problem's kernels.
//
// A copy is issued and forgotten: the data lands in shared memory while the thread goes on, so a
// kernel keeps several tiles in flight without holding them in registers. Copies are grouped
// (commit_async_group) and waited for by count (wait_async_groups<N>: all but the N newest groups have
// landed, for this thread; a __syncthreads after it makes every thread's copies visible).
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
''',
    "qr_v2/householder_update.cu": r'''
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
''',
    "qr_v2/householder_blocked.cu": r'''
// qr_v2, the blocked route in one CUDA call: for k0 = 0, w, 2w, ... factor the panel (qr_panel,
// householder_panel.cu), then apply it to the trailing columns (qr_update, householder_update.cu):
// model.blocked_qr with update = apply_block_reflector_tf32x3, the same loop. Vt and T live in the
// caller's workspace (batch x 32 x n and batch x 32 x 32 floats), which every panel reuses.
// Why: no Python between the launches and no allocation per panel; at 40x176 the host time between
// launches was about half of the wall time (scripts/profile_route.py at d11541b: wall 0.68 ms, GPU
// busy 0.29 ms).
//
// Look-ahead (qr_blocked_lookahead, route.LOOKAHEAD): panel k's update is two launches, (a) on the next
// panel's columns only and (b) on the rest; panel k + 1 waits for (a) alone and runs beside (b), which
// touches other columns of the same rows. (a) and (b) of panel k + 1 wait for panel k + 1 and for (b) of
// panel k (their columns must hold panel k's update first). Vt and T alternate between two buffers by
// panel parity (the workspace is twice the one-level loop's): panel k + 2 overwrites panel k's buffer
// only after (a) of k + 1, which follows both readers of panel k's. The launches are nodes of a CUDA
// graph with exactly these dependencies (launch.cuh), launched on the default queue: concurrency on one
// device without naming a queue. Launch shape: the same kernels, grids and blocks as the loop; the rest
// (b) picks its row split at target beside_ctas instead of update_ctas, so that fewer of its CTAs leave
// SMs free for the panel beside it.
// Same arithmetic: a column's update depends on the panel's Vt and T and on the row split of its launch,
// not on which columns share the launch; both parts take the split the whole trailing update would have
// (qr_update_split on all nc columns), so at beside_ctas == update_ctas the outputs are bitwise those of
// qr_blocked (the order of independent launches is all that changes). A lower beside_ctas changes the
// rest's split, hence the order of its fp32 partial sums (same products: model.blocked_qr either way).
// Why faster where the batch is small: there a panel keeps a few dozen CTAs busy and the latency-bound
// update leaves SMs idle; with the panel beside the bulk of the update, the critical path is roughly
// panel + narrow update per panel. H200, grader-style diff (run 34a): 60x1024 0.96x, 8x2048 0.95x; but
// 2x4096 1.045x slower (route.LOOKAHEAD keeps the loop there; why is open, docs/priors.md).
// The graph is built and instantiated once per shape and route parameters (and alignment of H and Vt,
// which picks kernels), then kept; a call with other buffers rebinds its nodes' arguments
// (cudaGraphExecKernelNodeSetParams, node by node in launch order) instead of building it again.

POPKIT_EXPORT int qr_panel_width(int m, int max_threads, int cluster);
POPKIT_EXPORT int qr_panel_to(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n, int k0,
                              int w, int max_threads, int cluster, int columns_max_rows);
POPKIT_EXPORT int qr_update_split(int batch, int m, int nc, int target_ctas);
POPKIT_EXPORT int qr_update_to(popkit::Launcher* to, float* C, int ldc, int stride, const float* Vt, const float* T,
                               int batch, int m, int nc, int w, int split);

namespace {

constexpr int kMaxWidth = 32;                   // the widest panel: Vt and T buffers are sized for it

// One factorization's buffers and route parameters (the arguments of qr_blocked_lookahead).
struct Factorization {
    float *H, *tau, *Vt, *T;
    int batch, n, max_threads, cluster, columns_max_rows, update_ctas, beside_ctas;
};

// The width of the panel at column k0 (0: past the end).
int panel_width(int n, int k0, int max_threads, int cluster) {
    return k0 < n ? min(qr_panel_width(n - k0, max_threads, cluster), n - k0) : 0;
}

// Whether every panel gets a width qr_update takes (8, past m = 2048 rows on one CTA of 512 threads, and
// none at all are refused), checked before anything runs: no half-factored batch on a refusal.
bool widths_fit(int batch, int n, int max_threads, int cluster) {
    if (batch < 1 || n < 1 || (long long)n * n >= (1LL << 31)) return false;
    for (int k0 = 0; k0 < n;) {
        const int m = n - k0, width = qr_panel_width(m, max_threads, cluster);
        if (width == 0 || (width < m && width != 16 && width != 32)) return false;
        k0 += min(width, m);
    }
    return true;
}

// Every launch of the look-ahead factorization into `to` (build or rebind: the same walk either way).
int add_lookahead(popkit::Launcher& to, const Factorization& f) {
    const size_t vt_buffer = (size_t)f.batch * kMaxWidth * f.n, t_buffer = (size_t)f.batch * kMaxWidth * kMaxWidth;
    cudaGraphNode_t narrow = nullptr, rest = nullptr;       // the previous panel's update parts (a) and (b)
    for (int k0 = 0, parity = 0; k0 < f.n; parity ^= 1) {
        const int m = f.n - k0, w = panel_width(f.n, k0, f.max_threads, f.cluster);
        const int next = panel_width(f.n, k0 + w, f.max_threads, f.cluster);
        float* Vt = f.Vt + parity * vt_buffer;
        float* T = f.T + parity * t_buffer;
        to.after({narrow});
        int err = qr_panel_to(&to, f.H, f.tau, Vt, T, f.batch, f.n, k0, w, f.max_threads, f.cluster,
                              f.columns_max_rows);
        if (err != 0 || next == 0) return err;
        const cudaGraphNode_t panel = to.last();
        const int nc = f.n - k0 - w;
        float* C = f.H + (size_t)k0 * f.n + k0 + w;
        to.after({panel, rest});
        err = qr_update_to(&to, C, f.n, f.n * f.n, Vt, T, f.batch, m, next, w,
                           qr_update_split(f.batch, m, nc, f.update_ctas));
        if (err != 0) return err;
        narrow = to.last();
        rest = nullptr;
        if (nc > next) {
            err = qr_update_to(&to, C + next, f.n, f.n * f.n, Vt, T, f.batch, m, nc - next, w,
                               qr_update_split(f.batch, m, nc, f.beside_ctas));
            if (err != 0) return err;
            rest = to.last();
        }
        k0 += w;
    }
    return 0;
}

// Same kernels, grids and dependencies: everything but the buffers (H's and Vt's alignment picks kernels).
bool same_plan(const Factorization& a, const Factorization& b) {
    return a.batch == b.batch && a.n == b.n && a.max_threads == b.max_threads && a.cluster == b.cluster &&
           a.columns_max_rows == b.columns_max_rows && a.update_ctas == b.update_ctas &&
           a.beside_ctas == b.beside_ctas && ((size_t)a.H & 15) == ((size_t)b.H & 15) &&
           ((size_t)a.Vt & 15) == ((size_t)b.Vt & 15);
}

bool same_buffers(const Factorization& a, const Factorization& b) {
    return a.H == b.H && a.tau == b.tau && a.Vt == b.Vt && a.T == b.T;
}

// The latest shape's graph, its nodes bound to the latest call's buffers. Never destroyed at exit: the
// process's end frees it, and a destructor at static destruction could run after the driver's teardown.
struct LookaheadGraph {
    Factorization f = {};
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    popkit::Launcher launcher;

    void release() {
        if (exec != nullptr) cudaGraphExecDestroy(exec);
        if (graph != nullptr) cudaGraphDestroy(graph);
        exec = nullptr, graph = nullptr;
    }

    // The graph for f, built or rebound as needed (a failure leaves none).
    int prepare(const Factorization& next) {
        if (exec != nullptr && same_plan(f, next)) {
            if (same_buffers(f, next)) return 0;
            launcher.rebind(exec);
            int err = add_lookahead(launcher, next);
            if (err == 0 && !launcher.rebound_all()) err = (int)cudaErrorInvalidValue;
            if (err != 0) release();
            else f = next;
            return err;
        }
        release();
        int err = (int)cudaGraphCreate(&graph, 0);
        if (err == 0) {
            launcher.build(graph);
            err = add_lookahead(launcher, next);
        }
        cudaGraphExec_t built = nullptr;
        if (err == 0) err = (int)cudaGraphInstantiate(&built, graph, 0);
        if (err != 0) {
            release();
            return err;
        }
        exec = built, f = next;
        return 0;
    }
};

}  // namespace

// H: the batch's matrices (batch x n x n, a copy of A), factored in place; tau: batch x n; panels on
// `cluster` CTAs of at most max_threads threads (on one CTA, up to columns_max_rows rows by the
// lane-per-column kernel); updates split a tile's rows over several CTAs while they launch fewer than
// update_ctas CTAs (qr_update's target_ctas). n^2 < 2^31. A panel width qr_update lacks (8: past
// m = 2048 rows on one CTA of 512 threads) is cudaErrorInvalidValue, before anything runs.
POPKIT_EXPORT int qr_blocked(float* H, float* tau, float* Vt, float* T, int batch, int n, int max_threads,
                             int cluster, int columns_max_rows, int update_ctas) {
    if (!widths_fit(batch, n, max_threads, cluster)) return (int)cudaErrorInvalidValue;
    for (int k0 = 0; k0 < n;) {
        const int m = n - k0, w = panel_width(n, k0, max_threads, cluster);
        int err = qr_panel_to(nullptr, H, tau, Vt, T, batch, n, k0, w, max_threads, cluster, columns_max_rows);
        if (err == 0 && k0 + w < n)
            err = qr_update_to(nullptr, H + (size_t)k0 * n + k0 + w, n, n * n, Vt, T, batch, m, n - k0 - w, w,
                               qr_update_split(batch, m, n - k0 - w, update_ctas));
        if (err != 0) return err;
        k0 += w;
    }
    return 0;
}

// qr_blocked with look-ahead (the outline above): the same arguments, plus beside_ctas, the row-split
// target of the update that runs beside the next panel; Vt and T hold two buffers each (2 x batch x 32
// x n and 2 x batch x 32 x 32 floats). One graph launch on the default queue.
POPKIT_EXPORT int qr_blocked_lookahead(float* H, float* tau, float* Vt, float* T, int batch, int n, int max_threads,
                                       int cluster, int columns_max_rows, int update_ctas, int beside_ctas) {
    if (!widths_fit(batch, n, max_threads, cluster)) return (int)cudaErrorInvalidValue;
    static LookaheadGraph cached;
    const Factorization f = {H, tau, Vt, T, batch, n, max_threads, cluster, columns_max_rows, update_ctas,
                             beside_ctas};
    int err = cached.prepare(f);
    if (err == 0) err = (int)cudaGraphLaunch(cached.exec, 0);
    if (err != 0) {
        cached.release();
        return err;
    }
    return (int)cudaGetLastError();
}
''',
}
# The translation units the loader compiles in parallel: every header part, then one .cu part.
CUDA_UNITS = [
    ["common/device_utils.cuh", "common/launch.cuh", "qr_v2/compact_wy.cuh", "qr_v2/panel_team.cuh", "common/tensor_core_tf32.cuh", "common/async_copy.cuh", "qr_v2/householder_small.cu"],
    ["common/device_utils.cuh", "common/launch.cuh", "qr_v2/compact_wy.cuh", "qr_v2/panel_team.cuh", "common/tensor_core_tf32.cuh", "common/async_copy.cuh", "qr_v2/householder_warp.cu"],
    ["common/device_utils.cuh", "common/launch.cuh", "qr_v2/compact_wy.cuh", "qr_v2/panel_team.cuh", "common/tensor_core_tf32.cuh", "common/async_copy.cuh", "qr_v2/householder_panel_columns.cu"],
    ["common/device_utils.cuh", "common/launch.cuh", "qr_v2/compact_wy.cuh", "qr_v2/panel_team.cuh", "common/tensor_core_tf32.cuh", "common/async_copy.cuh", "qr_v2/householder_panel.cu"],
    ["common/device_utils.cuh", "common/launch.cuh", "qr_v2/compact_wy.cuh", "qr_v2/panel_team.cuh", "common/tensor_core_tf32.cuh", "common/async_copy.cuh", "qr_v2/householder_update.cu"],
    ["common/device_utils.cuh", "common/launch.cuh", "qr_v2/compact_wy.cuh", "qr_v2/panel_team.cuh", "common/tensor_core_tf32.cuh", "common/async_copy.cuh", "qr_v2/householder_blocked.cu"],
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
# POPKIT_CUDA_LINEINFO=1 adds -lineinfo (source lines in the SASS: ncu's per-line stall samples; the code is the
# same). The flags are part of the cache name, so such a build never stands in for a plain one or the reverse.
LINEINFO_ENV = "POPKIT_CUDA_LINEINFO"


def cuda_flags() -> list:
    """nvcc's flags for this process: CUDA_FLAGS, and -lineinfo where LINEINFO_ENV is 1."""
    return CUDA_FLAGS + (["-lineinfo"] if os.environ.get(LINEINFO_ENV) == "1" else [])


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

    def name_for(self, arch: str, sources: list, flags: list = CUDA_FLAGS) -> str:
        """The extension's name: a hash of the target architecture, nvcc's flags and every unit's source, and the
        unit count."""
        digest = hashlib.sha256("\0".join([arch, " ".join(flags), *sources]).encode()).hexdigest()[:16]
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
        flags = cuda_flags()
        self.build_name = self.name_for(arch, sources, flags)
        previous = os.environ.get("TORCH_CUDA_ARCH_LIST")
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
        start = time.perf_counter()
        try:
            if len(sources) == 1:
                path = load_inline(name=self.build_name, cpp_sources="", cuda_sources=sources[0],
                                   is_python_module=False, no_implicit_headers=True, extra_cuda_cflags=flags)
            else:
                directory = extension_directory(self.build_name)
                files = []
                for index, (unit, source) in enumerate(zip(units, sources)):
                    # u0_NAME.cu for a unit whose .cu part is NAME.cu (the index keeps the objects apart)
                    stem = os.path.splitext(os.path.basename(unit[-1]))[0]
                    files.append(os.path.join(directory, f"u{index}_{stem}.cu"))
                    write_if_changed(files[-1], source)
                path = load(name=self.build_name, sources=files, build_directory=directory,
                            is_python_module=False, extra_cuda_cflags=flags)
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

# ---- part common/tf32_model.py ----
"""Torch models of the TF32 tensor-core arithmetic every problem's kernels share
(common/tensor_core_tf32.cuh): the hi + lo split and the tf32x3 product, ~21 bits from three TF32 products;
and the switch of torch's own fp32 matmuls between IEEE fp32 and TF32."""
import contextlib

import torch


def tf32_round(M: torch.Tensor) -> torch.Tensor:
    """M rounded to TF32: mantissa to 10 bits, ties away from zero (add half of the dropped 13-bit field,
    clear it), as tensor_core_tf32.cuh's split_tf32 rounds by integer ops."""
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
    """P Q^T as the tf32x3 kernels compute it on tensor cores: both operands split into TF32 hi + lo
    (the tensor core truncates lo to TF32), then lo_P hi_Q^T + hi_P lo_Q^T + hi_P hi_Q^T in float32."""
    Ph, Pl = tf32_split(P)
    Qh, Ql = tf32_split(Q)
    Pl, Ql = tf32_truncate(Pl), tf32_truncate(Ql)
    return Pl @ Qh.mT + Ph @ Ql.mT + Ph @ Qh.mT


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

# ---- part qr_v2/model.py ----
"""Torch models of the qr_v2 kernels: the executable specification.

Same algorithm, same blocking and the same float32 arithmetic choices as the
CUDA parts, vectorized over the batch; CPU tests check them against the gates,
and the built submission uses them on CPU tensors.

- `reflector`: LAPACK slarfg with a norm scaled by the largest entry (`slarfg` from a given norm).
- `householder_qr_model`: unblocked QR (householder_small.cu).
- `factor_panel_model`: one panel plus its compact-WY factor T, one reduction per column (householder_panel.cu;
  over all n columns of an n <= 32 matrix, householder_warp.cu).
- `blocked_qr`: the blocked algorithm; the panel factorization and the trailing update are
  parameters, so the GPU route runs this very driver with the CUDA kernels.
- `apply_block_reflector` (float32 matmuls) and `apply_block_reflector_tf32x3` (householder_update.cu):
  the trailing update.
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
    v_j^T v = s_j (x_j[c] + s p_j) (j < c: column c of G = V^T V, from which T follows). Column j keeps
    x_j (and alpha_j) until the panel is stored, as the kernel's registers do; then v_j = s_j x_j and beta_j."""
    b = H.shape[0]
    P = H[:, k0:, k0:k0 + w]
    panel = P.clone()
    panel_tau = torch.zeros(b, w, dtype=H.dtype, device=H.device)
    scales = torch.zeros(b, w, dtype=H.dtype, device=H.device)
    betas = torch.zeros(b, w, dtype=H.dtype, device=H.device)
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
        G[:, :c, c] = scales[:, :c] * vdot[:, :c]
        coef = (t[:, None] * vdot)[:, c + 1:]
        v = x * scale[:, None]
        panel[:, c, c + 1:] -= coef
        panel[:, c + 1:, c + 1:] -= v[:, :, None] * coef[:, None, :]
        panel_tau[:, c], scales[:, c], betas[:, c] = t, scale, beta
    below = torch.tril(torch.ones(panel.shape[1], w, dtype=torch.bool, device=H.device), diagonal=-1)
    panel = torch.where(below, panel * scales[:, None, :], panel)
    panel[:, torch.arange(w), torch.arange(w)] = betas
    P.copy_(panel)
    tau[:, k0:k0 + w] = panel_tau
    V = torch.tril(panel, diagonal=-1)
    V.diagonal(dim1=1, dim2=2).fill_(1.0)
    return V.mT.contiguous(), compact_wy_factor(G, panel_tau)


WY_BLOCK = 8   # compact_wy.cuh's kWyBlock


def compact_wy_factor(G: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """T (b, w, w) with H_0 ... H_{w-1} = I - V T V^T, from the strict upper part of G = V^T V and tau
    (LAPACK slarft, forward, column-wise: T[c][c] = tau_c, T[:c, c] = -tau_c T[:c, :c] G[:c, c]), in
    compact_wy.cuh's order: that recurrence inside diagonal blocks of WY_BLOCK, then blocks merged pairwise,
    T[A, D] = -(T[A, A] G[A, D]) T[D, D]."""
    b, w = tau.shape
    T = torch.zeros(b, w, w, dtype=tau.dtype, device=tau.device)
    for k in range(w):
        T[:, k, k] = tau[:, k]
        for c in range(k + 1, min((k // WY_BLOCK + 1) * WY_BLOCK, w)):
            T[:, k, c] = -tau[:, c] * (T[:, k, k:c] * G[:, k:c, c]).sum(dim=1)
    size = WY_BLOCK
    while size < w:
        for a in range(0, w - size, 2 * size):
            A, D = slice(a, a + size), slice(a + size, min(a + 2 * size, w))
            T[:, A, D] = -((T[:, A, A] @ G[:, A, D]) @ T[:, D, D])
        size *= 2
    return T


def apply_block_reflector(Vt: torch.Tensor, T: torch.Tensor, C: torch.Tensor) -> None:
    """C <- Q_panel^T C = C - V (T^T (V^T C)) in place, as three float32 batched matmuls."""
    W = torch.bmm(T.mT, torch.bmm(Vt, C))
    C.baddbmm_(Vt.mT, W, alpha=-1.0)


def apply_block_reflector_tf32x3(Vt: torch.Tensor, T: torch.Tensor, C: torch.Tensor) -> None:
    """The same with householder_update.cu's arithmetic: W0 = Vt C, W = T^T W0 and C -= V W as tf32x3
    products (operands split into TF32 hi + lo, ~21 bits)."""
    W = tf32x3_product(T.mT, tf32x3_product(Vt, C.mT).mT)
    C -= tf32x3_product(Vt.mT, W.mT)


def blocked_qr(A: torch.Tensor, panel_width, factor_panel=factor_panel_model, update=apply_block_reflector):
    """Blocked Householder QR: per panel, factor it, then C -= V (T^T (V^T C)) on the trailing columns.

    panel_width(m) gives the panel width for a panel of m rows (the CUDA panel narrows when a tall
    panel would not fit in its registers); update(Vt, T, C) applies the panel to C in place."""
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
            update(Vt, T, H[:, k0:, k0 + w:])
        k0 += w
    return H, tau

# ---- part qr_v2/route.py ----
"""qr_v2 routes: which algorithm factors a batch, by n and by device.

| n            | CUDA route                                              | CPU (model)          |
|--------------|---------------------------------------------------------|----------------------|
| <= 64        | householder_small.cu: whole QR on chip, one CTA/matrix,  | householder_qr_model |
|              | or (n <= 32, by SMALL_KERNEL) householder_warp.cu: a warp |                      |
| <= 4096      | blocked_qr: householder_panel.cu (a CTA or, by           | blocked_qr (model)   |
|              | PANEL_CLUSTER, a cluster of CTAs per panel) + the        |                      |
|              | trailing update by BLOCKED_VARIANT: cuBLAS fp32,         |                      |
|              | householder_update.cu, or both kernels from one C++ loop |                      |
|              | (householder_blocked.cu); where the first panel would be |                      |
|              | under 16 columns wide (tall, batch over the cluster rows)|                      |
|              | torch.geqrf                                              |                      |
| larger       | torch.geqrf (cuSOLVER)                                   | torch.geqrf          |

Every route is Householder QR with geqrf's reflector convention, so each
matrix is factored on its own merits: rank-deficient, clustered or
near-collinear columns need no detection (a zero column gives tau = 0).
"""
import torch


SMALL_MAX_N = 64
# The n <= SMALL_MAX_N kernel by n (n <= bound -> kernel): "smem" (householder_small.cu) or "warp"
# (householder_warp.cu, n <= 32: a matrix per warp, no CTA barrier). H200, sweep_route at cc0382a
# (logs/device/20261201T1915Z-*): warp against smem at 20x32 1.99x (32.5 against 64.8 us).
SMALL_KERNEL = ((32, "warp"), (64, "smem"))
PANEL_WIDTH = 32
# The panel kernel's CTA size cap (fewer threads own more rows each). 256 up to 512 rows (ec11348)
# lets two CTAs share an SM: 640x512 0.96x, but 40x352 1.04x (40 CTAs leave SMs idle, so fewer
# threads only lengthen each), hence the cap by batch below. 256 above 512
# rows puts 4 rows a thread in 16-column panels (60x1024 1.30x in sweep_route at d11541b).
PANEL_MAX_THREADS = 512
# ... and by n and batch, the first row (max n, min batch, threads) that fits: a batch that fills the
# GPU's SMs twice over takes 256 up to n = 512 (two rows a thread, still 32 columns): 640x512 0.984x
# (sweep_route after the lazy panel scaling, run 31d). At 1024 < n <= 2048 the panel runs beside the
# look-ahead update (LOOKAHEAD) and takes 256, which leaves an SM room for both: with look-ahead at 132,
# against 512-thread panels, 8x2048 0.98x (sweep_route, run 33d, logs/device/20261202T0255Z-*).
PANEL_THREADS_BY_BATCH = ((512, 264, 256), (1024, 1, 512), (2048, 1, 256))


def panel_threads(n: int, batch: int) -> int:
    """The panel kernel's CTA size cap for a batch of n x n matrices."""
    return next((threads for max_n, min_batch, threads in PANEL_THREADS_BY_BATCH
                 if n <= max_n and batch >= min_batch), PANEL_MAX_THREADS)

# Matrices of n <= PANEL_COLUMNS_MAX_N send their panels to householder_panel_columns.cu (lane = column,
# ~1/3 of the instructions a column; panels of at most 512 rows a CTA). H200, sweep_route at f385eb2
# (logs/device/20261201T1900Z-*), every panel of <= 512 rows a CTA against the row kernel: 40x176 1.13x,
# 40x352 1.19x (40 CTAs: a shorter column chain is a shorter factorization), but 640x512 0.93x, 60x1024
# 0.99x, 8x2048 0.98x (with a CTA on every SM, the row kernel's work per column is no longer exposed).
PANEL_COLUMNS_MAX_N = 352
COLUMNS_MAX_ROWS = 512   # the column kernel's limit, rows a CTA
# How the blocked route runs, by n (n <= bound -> variant): "fp32" (a Python loop: the panel kernel, then
# cuBLAS batched SGEMMs), "tf32x3" (the same loop, householder_update.cu on TF32 tensor cores at ~21
# bits) or "one_call" (householder_blocked.cu: that loop in C++, one call a factorization).
# H200, sweep_route at 97f3e52 (logs/device/20261201T1705Z-*): one_call against fp32 at 40x176 3.2x,
# 40x352 2.3x, 640x512 1.26x, 60x1024 1.23x, 8x2048 1.26x (tf32x3 alike but for the host time between
# launches at 40x176); gate fractions 0.002-0.012 of 1 either way.
BLOCKED_VARIANT = ((1 << 30, "one_call"),)
# CTAs per panel by n and batch (n <= bound and batch <= bound -> cluster size 1, 2, 4 or 8): a thread
# block cluster splits a panel's rows and adds its partial sums through distributed shared memory, so
# a small batch of tall panels uses more SMs and keeps 32 columns. H200, sweep_route at 70cadd5
# (logs/device/20261201T1725Z-*): against one CTA a panel, 2x4096 at 8 CTAs 1.90x (against geqrf,
# the route one CTA leaves to it), 8x2048 at 8 CTAs 1.75x, 60x1024 at 2 CTAs 1.07x.
PANEL_CLUSTER = ((512, 1 << 30, 1), (1024, 60, 2), (2048, 8, 8), (4096, 2, 8), (1 << 30, 1 << 30, 1))
BLOCKED_MAX_N = 4096     # above it, or where the panel would narrow below 16 columns: geqrf


def qr_small_cuda(A: torch.Tensor, kernel: str = "smem"):
    """householder_small.cu ("smem") or householder_warp.cu ("warp", n <= 32) on the whole batch."""
    b, n, _ = A.shape
    H = torch.empty_like(A)
    tau = torch.empty(b, n, dtype=A.dtype, device=A.device)
    CUDA.call("qr_warp" if kernel == "warp" else "qr_small", A, H, tau, b, n)
    return H, tau


def panel_cluster(n: int, batch: int) -> int:
    return next(size for max_n, max_batch, size in PANEL_CLUSTER if n <= max_n and batch <= max_batch)


def columns_max_rows(n: int) -> int:
    """Rows a CTA up to which an n x n factorization's panels take the column kernel (0: none)."""
    return COLUMNS_MAX_ROWS if n <= PANEL_COLUMNS_MAX_N else 0


def factor_panel_cuda(H: torch.Tensor, tau: torch.Tensor, k0: int, w: int):
    """The CUDA panel kernel, with the signature of model.factor_panel_model."""
    b, n, _ = H.shape
    Vt = torch.empty(b, w, n - k0, dtype=H.dtype, device=H.device)
    T = torch.empty(b, w, w, dtype=H.dtype, device=H.device)
    CUDA.call("qr_panel", H, tau, Vt, T, b, n, k0, w, panel_threads(n, b), panel_cluster(n, b),
              columns_max_rows(n))
    return Vt, T


UPDATE_WIDTHS = (16, 32)  # the panel widths householder_update.cu is compiled for
# householder_update.cu splits a tile's rows over a cluster of 2, 4 or 8 CTAs while a launch has fewer
# CTAs than this (0: never): a small batch of tall matrices (2x4096: 128 CTAs on the first update, three
# slots an SM on 132 SMs) otherwise leaves most SMs idle. H200, sweep_route at 9fbbaf1 (logs/device/
# 20261201T1940Z-*), against never: 264 (two CTAs an SM) 2x4096 1.08x, 8x2048 1.03x, 60x1024 1.00x;
# 396 1.02x / 1.00x / 0.99x; 792 and up slower (8x2048 0.84x): the split halves each CTA's rows, but
# the W0 sums through distributed shared memory and the cluster scheduling eat most of the gain.
UPDATE_TARGET_CTAS = 264
# Look-ahead (householder_blocked.cu's qr_blocked_lookahead, one CUDA graph a factorization) by n and batch:
# the first row (max n, max batch, beside CTAs) that fits; beside CTAs is the row-split target of the part
# of each update that runs beside the next panel (0: no look-ahead, the one-call loop). At UPDATE_TARGET_CTAS
# the outputs are bitwise the loop's (same_outputs on all 12 benchmark cases, run 33d); lower leaves the
# panel room. H200, sweep_route at 6e03454 (run 33d, logs/device/20261202T0255Z-*), against the loop:
# 132 (about two of the 128-thread update CTAs an SM) with 256-thread panels above n = 1024: 2x4096 0.95x,
# 8x2048 0.97x, 60x1024 0.96x; 264: 1.03x / 1.01x / 0.99x. But the grader-style diff (run 34a, fresh
# inputs a call) gave 60x1024 0.964x, 8x2048 0.949x and 2x4096 1.045x slower: on for 512 < n <= 2048 up
# to the batches measured (60); n <= 512, n > 2048 and larger batches keep the loop.
LOOKAHEAD = ((512, 1 << 30, 0), (2048, 64, 132), (1 << 30, 1 << 30, 0))


def lookahead_ctas(n: int, batch: int) -> int:
    return next(ctas for max_n, max_batch, ctas in LOOKAHEAD if n <= max_n and batch <= max_batch)


def update_tf32x3_cuda(Vt: torch.Tensor, T: torch.Tensor, C: torch.Tensor) -> None:
    """householder_update.cu on C = H[:, k0:, k0 + w:] in place (model.apply_block_reflector's signature)."""
    b, w, m = Vt.shape
    if w in UPDATE_WIDTHS:
        CUDA.call("qr_update", C, C.stride(1), C.stride(0), Vt, T, b, m, C.shape[2], w, UPDATE_TARGET_CTAS)
    else:
        apply_block_reflector(Vt, T, C)


def blocked_one_call_cuda(A: torch.Tensor):
    """householder_blocked.cu: the whole blocked factorization in one call (model.blocked_qr with the
    tf32x3 update); Vt and T in one workspace for every panel, two with look-ahead (by panel parity)."""
    b, n, _ = A.shape
    H = A.clone()
    tau = torch.empty(b, n, dtype=A.dtype, device=A.device)
    beside = lookahead_ctas(n, b)
    buffers, w = (2 if beside else 1), UPDATE_WIDTHS[-1]
    Vt = torch.empty(buffers, b, w, n, dtype=A.dtype, device=A.device)
    T = torch.empty(buffers, b, w, w, dtype=A.dtype, device=A.device)
    common = (H, tau, Vt, T, b, n, panel_threads(n, b), panel_cluster(n, b), columns_max_rows(n), UPDATE_TARGET_CTAS)
    if beside:
        CUDA.call("qr_blocked_lookahead", *common, beside)
    else:
        CUDA.call("qr_blocked", *common)
    return H, tau


def first_row(table, key: int, allowed: tuple[str, ...]) -> str:
    """The value of a route table's first row whose bound is at least key, one of `allowed` (a misspelt
    value would otherwise pick the default route without a word)."""
    value = next((value for bound, value in table if key <= bound), None)
    if value not in allowed:
        raise ValueError(f"route table {table!r} gives {value!r} for n = {key}: expected one of {allowed}")
    return value


def panel_width_cuda(m: int, cluster: int = 1, threads: int = PANEL_MAX_THREADS) -> int:
    return CUDA.query("qr_panel_width", m, threads, cluster)


def fixed_panel_width(m: int) -> int:
    return PANEL_WIDTH


def custom_kernel(data: torch.Tensor):
    """Compact-Householder QR of a batch: returns (H, tau) as torch.geqrf does."""
    A = data.contiguous()
    n = A.shape[-1]
    if not A.is_cuda:
        return householder_qr_model(A) if n <= SMALL_MAX_N else blocked_qr(A, fixed_panel_width)
    if n <= SMALL_MAX_N:
        return qr_small_cuda(A, first_row(SMALL_KERNEL, n, ("smem", "warp")))
    cluster, threads = panel_cluster(n, A.shape[0]), panel_threads(n, A.shape[0])
    if n <= BLOCKED_MAX_N and panel_width_cuda(n, cluster, threads) in UPDATE_WIDTHS:
        variant = first_row(BLOCKED_VARIANT, n, ("fp32", "tf32x3", "one_call"))
        if variant == "one_call":
            return blocked_one_call_cuda(A)
        update = update_tf32x3_cuda if variant == "tf32x3" else apply_block_reflector
        return blocked_qr(A, lambda m: panel_width_cuda(m, cluster, threads), factor_panel_cuda, update)
    return torch.geqrf(A)

CUDA.configure("popkit_qr_v2", CUDA_PARTS, CUDA_UNITS)
if torch.cuda.is_available():
    CUDA.load()   # at import, so the grader's pre-run (python3 submission.py) pays the compile

if __name__ == "__main__":
    print(f"qr_v2: CUDA kernels ready" if CUDA.compile_s is not None else "qr_v2: no GPU, CPU models only")
