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
