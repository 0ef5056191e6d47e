// vectoradd: C = A + B for float16 matrices (a pmpp_v2 warm-up problem, added from its folder).
//
// Math: one add per element, rounded once to float16 (what torch's A + B gives).
// Launch: a grid-stride loop over 8-half (16-byte) packets, 256 threads per CTA, enough CTAs
// to cover the packets up to 16 per SM; a scalar tail handles sizes that are not multiples of 8.
// Why it is fast: the problem is pure bandwidth (6 bytes per element moved); 16-byte loads and
// stores keep every memory transaction full, and __hadd2 adds two halves per instruction.
#include <cuda_fp16.h>
#include "device_utils.cuh"

namespace {

constexpr int kThreads = 256;

__global__ void vector_add_kernel(const uint4* __restrict__ a, const uint4* __restrict__ b, uint4* __restrict__ c,
                                  long long packets) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < packets;
         i += (long long)gridDim.x * blockDim.x) {
        uint4 x = a[i], y = b[i], z;
        const __half2* hx = reinterpret_cast<const __half2*>(&x);
        const __half2* hy = reinterpret_cast<const __half2*>(&y);
        __half2* hz = reinterpret_cast<__half2*>(&z);
#pragma unroll
        for (int k = 0; k < 4; ++k) hz[k] = __hadd2(hx[k], hy[k]);
        c[i] = z;
    }
}

__global__ void vector_add_tail(const __half* a, const __half* b, __half* c, long long start, long long count) {
    const long long i = start + blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < count) c[i] = __hadd(a[i], b[i]);
}

}  // namespace

// A, B, C: device pointers to `count` float16 values each, 16-byte aligned (fresh torch tensors are).
POPKIT_EXPORT int vector_add_f16(const void* A, const void* B, void* C, int rows, int cols) {
    const long long count = (long long)rows * cols, packets = count / 8;
    int device = 0, sms = 132;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (packets > 0) {
        const long long wanted = (packets + kThreads - 1) / kThreads;
        const int blocks = (int)(wanted < 16LL * sms ? wanted : 16LL * sms);
        vector_add_kernel<<<blocks, kThreads>>>(static_cast<const uint4*>(A), static_cast<const uint4*>(B),
                                                static_cast<uint4*>(C), packets);
    }
    const long long tail = count - packets * 8;
    if (tail > 0) {
        vector_add_tail<<<1, kThreads>>>(static_cast<const __half*>(A), static_cast<const __half*>(B),
                                         static_cast<__half*>(C), packets * 8, count);
    }
    return (int)cudaGetLastError();
}
