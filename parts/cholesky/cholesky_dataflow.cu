// cholesky, the whole blocked factorization of a few matrices in one persistent launch (sm_90a): tasks
// on 128 x 128 tiles, taken from one queue by every CTA in an order that respects their dependencies.
//
// Algorithm: blocked right-looking Cholesky with nb = 128, the operations of model.blocked_tf32x3_model
// (tf32x3 tile products, tiled_block.cuh's diagonal blocks with their inverses), as tasks on a T x T
// tiling (tile (i, j), i >= j; A_ij below means tile (i, j) with the updates of the steps before k,
// read from A at step 0 and from L after):
//   DIAG i:       i = 0: factor tile (0, 0) of A and X_0 = inv(L_00);
//                 i > 0, k = i - 1: L_ik = A_ik X_k^T (the panel's first tile), A_ii -= L_ik L_ik^T,
//                 then factor tile (i, i) and X_i: a whole step of the chain, in one CTA;
//   PANEL i, k:   L_ik = A_ik X_k^T for i >= k + 2 (and zeros in its mirror, tile (k, i));
//   UPDATE i,j,k: A_ij -= L_ik L_jk^T for k < j <= i, except tile (k + 1, k + 1) (DIAG k + 1's).
// The queue is model.dataflow_tasks; model.dataflow_model runs it in order and checks every wait below.
// Dependencies are counters per matrix in global memory: x_ready[i] (X_i written), l_ready[i][k] (L_ik
// written) and updates[i][j] (how many steps tile (i, j) has had). A task's thread 0 polls its inputs'
// counters (acquire loads), the CTA runs the task, and thread 0 publishes its output (fence, release
// store) after a barrier. Each CTA takes the next task from a global ticket (atomicAdd). Every task
// comes after the tasks it waits on, so a CTA only ever waits on tasks that running CTAs hold: no
// deadlock, however many CTAs are resident. The chain's DIAG tasks sit right after their own inputs,
// ahead of the bulk of the updates of the step before, so the chain runs while the bulk fills the GPU.
// Data that other CTAs wrote is read through L2 only (cp.async.cg, __ldcg): an SM's L1 does not see
// other SMs' writes.
// Launch: one CTA of 256 threads per SM (208 KiB of dynamic shared memory: staged_product.cuh's tile
// product; the diagonal role adds 8 KiB of static), after a small kernel that writes max_i a_ii of
// each matrix and zeroes the counters.
// Why it is fast: at batch 1 a step of the launch-per-step driver (cholesky_lookahead.cu) waits for the
// panel launch, the first tile's update and two launch boundaries beside its diagonal block (~61 us a
// step at 1x4096); here a step of the chain is one CTA's DIAG task, its two tile products on chip next
// to the factorization, with no launch in between.
#include "device_utils.cuh"
#include "staged_product.cuh"
#include "tf32x3.cuh"
#include "tiled_block.cuh"

namespace {

using tf32x3::kTile;

enum TaskKind { kDiag = 0, kPanel = 1, kUpdate = 2 };

// One call: `tasks` holds (kind + 4 b, i, j, k) per task, in queue order; counters: the ticket, then per
// matrix x_ready[T], l_ready[T][T] and updates[T][T].
struct Dataflow {
    const float* a; float* l; float* xinv; const float* diag_max;
    int* counters; const int4* tasks;
    int ntasks, n, tiles;
};

__device__ __forceinline__ int load_acquire(const int* counter) {
    int value;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(value) : "l"(counter) : "memory");
    return value;
}

// Thread 0 waits until *counter >= target (the caller's barrier then holds the whole CTA).
__device__ __forceinline__ void await(const int* counter, int target) {
    if (threadIdx.x == 0)
        while (load_acquire(counter) < target) __nanosleep(32);
}

// After every thread's writes of the task: counter = value, visible GPU-wide after those writes.
__device__ __forceinline__ void publish(int* counter, int value) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(counter), "r"(value) : "memory");
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// L_ik = A_ik X_k^T in place (src: A at step 0, else L) and zeros in the mirror tile (k, i) of L.
__device__ __forceinline__ void panel_tile(const float* src, float* l, const float* xk, int n, int i, int k,
                                           float* smem) {
    staged::product_tile<false, false>(src + k * kTile, n, xk, kTile, nullptr, l + k * kTile, n, i * kTile, 0, n,
                                       kTile, kTile, smem);
    tf32x3::zero_mirror<4, staged::kThreads>(l + (size_t)k * kTile * n, n, i * kTile, min(i * kTile + kTile, n),
                                             kTile);
}
#endif

__global__ void __launch_bounds__(staged::kThreads, 1) dataflow_kernel(const Dataflow job) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    __shared__ int s_ticket;
    const int n = job.n, T = job.tiles;
    for (;;) {
        __syncthreads();                                 // the last task is done with s_ticket
        if (threadIdx.x == 0) s_ticket = atomicAdd(job.counters, 1);
        __syncthreads();
        if (s_ticket >= job.ntasks) return;
        const int4 task = __ldg(job.tasks + s_ticket);
        const int kind = task.x & 3, b = task.x >> 2, i = task.y, j = task.z, k = task.w;
        const size_t offset = (size_t)b * n * n;
        const float* a = job.a + offset;
        float* l = job.l + offset;
        const float* src = k <= 0 ? a : l;               // tiles as step k reads them
        int* x_ready = job.counters + 1 + (size_t)b * (T + 2 * T * T);
        int* l_ready = x_ready + T;
        int* updates = l_ready + T * T;
        float* x_of = job.xinv + (size_t)b * T * kTile * kTile;   // X_i at x_of + i * kTile^2
        if (kind == kDiag) {
            if (i > 0) {
                await(x_ready + k, 1);
                await(updates + i * T + k, k);
                __syncthreads();
                panel_tile(src, l, x_of + (size_t)k * kTile * kTile, n, i, k, smem);
                publish(l_ready + i * T + k, 1);
                await(updates + i * T + i, k);
                __syncthreads();                         // also: L_ik's writes are visible to the CTA
                staged::product_tile<true, true>(l + k * kTile, n, l + k * kTile, n, src, l, n, i * kTile, i * kTile,
                                                 n, n, kTile, smem);
                __syncthreads();
            }
            const size_t corner = (size_t)i * kTile * (n + 1);
            tiled::factor_block<16, 8, true, true>((i == 0 ? a : l) + corner, l + corner,
                                                   x_of + (size_t)i * kTile * kTile, job.diag_max + b,
                                                   min(kTile, n - i * kTile), n);
            publish(x_ready + i, 1);
        } else if (kind == kPanel) {
            await(x_ready + k, 1);
            await(updates + i * T + k, k);
            __syncthreads();
            panel_tile(src, l, x_of + (size_t)k * kTile * kTile, n, i, k, smem);
            publish(l_ready + i * T + k, 1);
        } else {
            await(l_ready + i * T + k, 1);
            await(l_ready + j * T + k, 1);
            await(updates + i * T + j, k);
            __syncthreads();
            staged::product_tile<true, true>(l + k * kTile, n, l + k * kTile, n, src, l, n, i * kTile, j * kTile, n, n,
                                             kTile, smem);
            publish(updates + i * T + j, k + 1);
        }
    }
#else
    __trap();                                            // launched only where the build targets sm_90a
#endif
}

// max_i a_ii of matrix blockIdx.x, and its counters (and, in CTA 0, the ticket) set to zero.
__global__ void prepare_kernel(const float* A, float* diag_max, int* counters, int n, int per_matrix) {
    const float top = tiled::diagonal_max(A + blockIdx.x * (size_t)n * n, n);
    if (threadIdx.x == 0) diag_max[blockIdx.x] = top;
    int* mine = counters + 1 + (size_t)blockIdx.x * per_matrix;
    for (int e = threadIdx.x; e < per_matrix; e += blockDim.x) mine[e] = 0;
    if (blockIdx.x == 0 && threadIdx.x == 0) counters[0] = 0;
}

}  // namespace

// Factor `batch` n x n matrices (n > 128, n % 4 == 0, n * n < 2^31): A (read only; its lower triangle)
// into L (written whole: the factor and zeros above the diagonal), T = ceil(n / 128) tiles a side.
// work: batch x (T x 128 x 128 + 1) floats (every X_i, then max_i a_ii of each matrix); counters:
// 1 + batch x (T + 2 T^2) ints; tasks: ntasks x 4 ints from model.dataflow_tasks (16-byte aligned).
// Call it only on a GPU of compute capability 9.0 with the build targeting sm_90a (elsewhere the kernel
// traps).
POPKIT_EXPORT int cholesky_dataflow(const float* A, float* L, float* work, int* counters, const int* tasks,
                                    int ntasks, int batch, int n) {
    if (batch < 1 || n <= kTile || n % 4 != 0 || (long long)n * n >= (1LL << 31) || ntasks < 1 || !A || !L ||
        !work || !counters || !tasks || ((size_t)tasks & 15) || !tf32x3::aligned16(A) || !tf32x3::aligned16(L) ||
        !tf32x3::aligned16(work))
        return (int)cudaErrorInvalidValue;
    const int T = (n + kTile - 1) / kTile;
    float* diag_max = work + (size_t)batch * T * kTile * kTile;
    prepare_kernel<<<batch, 256>>>(A, diag_max, counters, n, T + 2 * T * T);
    if (const cudaError_t err = cudaGetLastError()) return (int)err;
    static int granted = 0;
    cudaError_t err = popkit::allow_dynamic_smem(dataflow_kernel, staged::kSmemBytes, granted);
    if (err != cudaSuccess) return (int)err;
    int device = 0, sms = 0;
    if ((err = cudaGetDevice(&device)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
        return (int)err;
    const Dataflow job = {A, L, work, diag_max, counters, reinterpret_cast<const int4*>(tasks), ntasks, n, T};
    dataflow_kernel<<<sms < ntasks ? sms : ntasks, staged::kThreads, staged::kSmemBytes>>>(job);
    return (int)cudaGetLastError();
}
