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

}  // namespace popkit
