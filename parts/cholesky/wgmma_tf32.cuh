// The tf32x3 product's Hopper pieces (sm_90a), shared by cholesky_product_wgmma.cu and
// cholesky_lookahead.cu: Q's hi/lo planes in the no-swizzle K-major layout wgmma reads (per k8 step of a
// 128-row tile: 8-row x 16-byte core matrices, 128 bytes apart along N, 2048 along K), their
// descriptors, and wgmma m64n128k8 with A from registers.
#pragma once
#include "device_utils.cuh"
#include "tf32x3.cuh"

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
