// TF32 tensor-core pieces shared by every problem's kernels: the hi + lo split of an fp32 value and the
// warp-level m16n8k8 product (mma.sync, sm_80 and later), alone and as the tf32x3 step.
//
// tf32x3: x = hi + lo, hi = x rounded to TF32 (10 mantissa bits), lo = x - hi exact in fp32 (the tensor
// core truncates it to TF32); a product accumulates lo_a hi_b + hi_a lo_b + hi_a hi_b in fp32, ~21 bits
// per product (the dropped lo lo term is ~2^-22 relative). Torch model: common/tf32_model.py.
#pragma once
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
