// qr_v2: reductions over a panel's team (one CTA, or a thread block cluster of CL CTAs sharing the
// panel), shared by both panel kernels.
#pragma once
#include <cooperative_groups.h>

#include "device_utils.cuh"

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

}  // namespace popkit
