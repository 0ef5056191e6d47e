// The pivot of every cholesky kernel (cholesky_small.cu, tiled_block.cuh).
#pragma once

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
