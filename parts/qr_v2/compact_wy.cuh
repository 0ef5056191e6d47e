// qr_v2: the panel's compact-WY factor T from its reflectors' Gram matrix, shared by both panel kernels.
//
// H_0 H_1 ... H_{w-1} = I - V T V^T with T upper triangular (LAPACK slarft, forward, column-wise):
//   T[c][c] = tau_c,   T[0:c, c] = -tau_c T[0:c, 0:c] G[0:c, c],   G[l][c] = v_l^T v_c (l < c).
// Row k of T depends only on its own earlier entries, so thread k builds row k alone.
#pragma once

namespace popkit {

// Threads 0 .. w-1 each fill one row of T (w <= W); the caller synchronizes before and after.
template <int W>
__device__ __forceinline__ void build_compact_wy_rows(float (*T)[W + 1], const float (*G)[W + 1], const float* tau,
                                                      int w) {
    if (threadIdx.x >= w) return;
    const int k = threadIdx.x;
    for (int c = 0; c < k; ++c) T[k][c] = 0.f;
    T[k][k] = tau[k];
    for (int c = k + 1; c < w; ++c) {
        float acc = 0.f;
        for (int l = k; l < c; ++l) acc += T[k][l] * G[l][c];
        T[k][c] = -tau[c] * acc;
    }
}

}  // namespace popkit
