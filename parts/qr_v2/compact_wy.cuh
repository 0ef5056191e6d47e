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
#pragma once

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
