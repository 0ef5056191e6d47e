#!POPCORN leaderboard eigh
#!POPCORN gpu B200
# Built by popkit from parts/eigh: do not edit; change the parts and rebuild.
# toolkit commit: a74e6fe
# part common/device_utils.cuh sha256 862f3902f12d351ab656702749e9877726d099b269fcc90dc2a67cb7fae0d517
# part eigh/jacobi_small.cu sha256 609790b5b5abd3b41e8b422944df532e4bd41718746bfef62465703cb9576509
# part eigh/tridiagonal_reduction.cu sha256 2f4a02614d06cdb866984864930fc25441237dd6c417fafe6b67c526fe3c4d9e
# part eigh/tridiagonal_leaf.cu sha256 44e26474d27ec1c10cb2699e0066e057d33a74aea8d26abdb42ba2cb357814f1
# part eigh/tridiagonal_merge.cu sha256 8be38bf8dd41c40a4c4f663c95c2151df7fb469abe24c8004ab2c752f795417f
# part common/cuda_loader.py sha256 9873efa2c5adb5794b84e56e361d84f87083f32e94babf39b0e2f0ed826f2b91
# part common/tf32_model.py sha256 d6983f5a4e5234072fce81d8d7533ccfa1818f1358ea7c6d0f0169f5f43f2e30
# part eigh/model.py sha256 fe3fa2c293bcce408de8af3ce3c78a22958cea63335838e4dce6264939957b6c
# part eigh/cusolver_batched.py sha256 1be2e70e1ef14ac1451bc640cdf7e7f15b12ac76ae668327872b3a46f95e8b2e
# part eigh/tridiagonal_model.py sha256 f8bbc20abf112ed7c2af2d33a579f4791d55bd0817f263bafa58482bdf1f30e1
# part eigh/reduction_model.py sha256 7c1e8c7271468614aaac925705cb408e3bb280ca6ea69f197ca3f6c956454257
# part eigh/tridiagonal_route.py sha256 d6598faebdfb2541e5823b84c0f91062c96c3febdc5b1012a5b7260a43e66e97
# part eigh/reduction_route.py sha256 a0b819215d25e1019be92eda3fa84de682dedd89bc0b25781359cb6e99bef7c1
# part eigh/result_check.py sha256 f2723b4d8de9b48d95eef532a48851a2d72766859a319771d5919353d5e98c69
# part eigh/route.py sha256 1c785cb61f7822a5a7006b11f7f9575a3dbefb5a244f14b59449ada4f4066dfd
"""eigh: batched symmetric eigendecomposition ((Q, L), L ascending).

custom_kernel(data) dispatches to the routes below (see the route table in the
last part). CUDA parts are embedded verbatim (CUDA_PARTS) and built once
per machine as a plain shared library (no torch headers), then called through
ctypes: one translation unit per .cu part (CUDA_UNITS), compiled in parallel
and linked together, or, on a machine of under 4 CPUs, every part as one unit.
"""
# The CUDA parts in manifest order, their #includes of each other and #pragma once dropped.
CUDA_PARTS = {
    "common/device_utils.cuh": r'''
// Shared device helpers for every popkit kernel: warp/block reductions (and a warp's or a lane
// group's transposed sum of a register vector), reflectors,
// the C entry-point convention and the shared-memory opt-in.
//
// Entry points are `extern "C"` functions taking raw device pointers and sizes;
// they launch on the default queue (what torch uses unless told otherwise) and
// return cudaGetLastError() as an int so Python can raise a clear error.
#include <cuda_runtime.h>

#define POPKIT_EXPORT extern "C" __attribute__((visibility("default")))

namespace popkit {

// Allow `kernel` `bytes` of dynamic shared memory (over 48 KiB needs the opt-in). `granted` is the
// caller's static record of the largest size already allowed, so the runtime call happens once
// per new maximum, not per launch.
template <typename Kernel>
cudaError_t allow_dynamic_smem(Kernel kernel, int bytes, int& granted) {
    if (bytes <= granted) return cudaSuccess;
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err == cudaSuccess) granted = bytes;
    return err;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// a[idx] of N register entries (N a power of two, 0 <= idx < N, every index of `a` a compile-time
// constant once inlined): a tree of N - 1 selects, log2 N deep, by idx's bits from the lowest. The
// chain `x = j == idx ? a[j] : x` over j is N selects one after another, on the critical path of a
// latency-bound column step.
template <int N>
__device__ __forceinline__ float select_entry(const float* a, int idx) {
    static_assert(N >= 1 && (N & (N - 1)) == 0, "N must be a power of two");
    if constexpr (N == 1) {
        return a[0];
    } else {
        float half[N / 2];
#pragma unroll
        for (int k = 0; k < N / 2; ++k) half[k] = (idx & 1) ? a[2 * k + 1] : a[2 * k];
        return select_entry<N / 2>(half, idx >> 1);
    }
}

// One butterfly stage of a transposed sum: p[0:LEN) -> p[0:LEN/2), exchanging across lanes
// `kLow LEN / 2` apart (the lane bit that decides which half this lane keeps); then the next
// stage. Recursion on the template argument keeps every index a compile-time constant (a
// loop over LEN compiled to a runtime loop with select chains over all W registers).
template <int LEN, int W, int kLow = 32 / W>
__device__ __forceinline__ void transpose_sum_stage(float (&p)[W], int lane) {
    if constexpr (LEN > 1) {
        constexpr int kOff = kLow * LEN / 2;
        const bool upper = lane & kOff;
#pragma unroll
        for (int k = 0; k < LEN / 2; ++k) {
            const float send = upper ? p[k] : p[k + LEN / 2];
            const float keep = upper ? p[k + LEN / 2] : p[k];
            p[k] = keep + __shfl_xor_sync(0xffffffffu, send, kOff);
        }
        transpose_sum_stage<LEN / 2, W, kLow>(p, lane);
    }
}

// Sum a W-vector (W a power of two) over the W lanes that differ only in lane bits kLow .. kLow W / 2,
// with W - 1 shuffles: afterwards lane l holds that sum of entry (l / kLow) % W. A warp holding a
// 32 x 32 tile as lane groups (rows by some lane bits, columns by the others) sums its rows and its
// columns this way, each lane left with one whole row or column.
template <int W, int kLow>
__device__ __forceinline__ float lanes_transpose_sum(float (&p)[W], int lane) {
    static_assert(W >= 1 && (W & (W - 1)) == 0 && kLow >= 1 && kLow * W <= 32, "W lanes from bit kLow within a warp");
    transpose_sum_stage<W, W, kLow>(p, lane);
    return p[0];
}

// Sum a W-vector over the warp's lanes with W - 1 + (5 - log2 W) shuffles:
// afterwards every lane l holds the warp's total of entry l >> (5 - log2 W).
template <int W>
__device__ __forceinline__ float warp_transpose_sum(float (&p)[W], int lane) {
    float total = lanes_transpose_sum<W, 32 / W>(p, lane);
#pragma unroll
    for (int off = 16 / W; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
    return total;
}

// log2(32 / W): lane l holds entry l >> entry_shift<W>() after warp_transpose_sum<W> (-1: no such W).
template <int W>
__host__ __device__ constexpr int entry_shift() { return W == 32 ? 0 : W == 16 ? 1 : W == 8 ? 2 : -1; }

// Sum over the whole block; every thread gets the result. `scratch` holds one
// float per warp (32 is enough for 1024 threads). Contains two __syncthreads().
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < warps; ++w) total += scratch[w];
    __syncthreads();
    return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float best = 0.f;
    for (int w = 0; w < warps; ++w) best = fmaxf(best, scratch[w]);
    __syncthreads();
    return best;
}

// LAPACK slarfg on (alpha, ||x||): returns tau and sets beta (the new diagonal)
// and the factor that scales x into the Householder tail v = x * scale.
// xnorm == 0 gives tau = 0 (H = I), exactly as geqrf does.
struct Reflector { float tau, beta, scale; };

// Whether ||x||^2 summed in plain float32 kept its bits: in [2^-100, 2^100], neither underflow nor
// overflow can have touched it or the products beside it; outside, take a norm scaled by max |x_i|.
__device__ __forceinline__ bool sum_of_squares_safe(float ssq) {
    return ssq >= 7.8886091e-31f && ssq <= 1.2676506e30f;
}

__device__ __forceinline__ Reflector make_reflector(float alpha, float xnorm) {
    if (xnorm == 0.f) return {0.f, alpha, 0.f};
    const float beta = -copysignf(hypotf(alpha, xnorm), alpha);
    return {(beta - alpha) / beta, beta, 1.f / (alpha - beta)};
}

}  // namespace popkit
''',
    "eigh/jacobi_small.cu": r'''
// eigh, small n (n <= 32): parallel two-sided Jacobi, one CTA per matrix.
//
// Computes A = V diag(d) V^T. Each sweep visits every pair (p, q) once in
// m - 1 rounds of m/2 disjoint pairs (round-robin "tournament" order, m = n
// rounded up to even; a padded index has a zero row and column and never
// rotates). For each pair the rotation J = [[c, s], [-s, c]] with
//   theta = (a_qq - a_pp) / (2 a_pq),  t = sign(theta) / (|theta| + sqrt(theta^2 + 1)),
//   c = 1 / sqrt(t^2 + 1),  s = t c
// zeroes a_pq in J^T A J (Golub & Van Loan, sym.schur2). Disjoint pairs
// commute, so a round applies all row rotations, then all column rotations
// (to A and to V), storing a_pq = a_qp = 0 exactly. Sweeps stop when the off-diagonal Frobenius norm is below
// m eps ||A||_F (float32 rounding keeps it from going much lower; the gates
// allow residuals of 200 n eps ||A||_1), at most kMaxSweeps. Finally the eigenpairs are sorted
// ascending by rank (each thread counts the values smaller than its own).
//
// The matrix is prescaled by its largest entry, so the lapack high/low
// magnitude cases (entries near 1.8e19 or 1e-19) neither overflow nor
// underflow; the zero matrix keeps scale 1.
//
// Launch: one CTA of 256 threads per matrix; grid = batch. A and V live in
// shared memory (2 x 32 x 33 floats). Why it is fast: at n <= 32 the problem
// is pure latency; Jacobi's rounds are wide (16 pairs x 32 columns of
// independent updates) and need only three barriers each, with no global
// memory traffic between the first read and the final write.

namespace {

constexpr int kJacobiMaxN = 32;
constexpr int kJacobiThreads = 256;
constexpr int kMaxSweeps = 20;
constexpr int kLd = kJacobiMaxN + 1;

__device__ __forceinline__ void tournament_pair(int k, int round, int m, int& p, int& q) {
    const int a = (k == 0) ? 0 : ((k - 1 + round) % (m - 1)) + 1;
    const int b = ((m - 2 - k + round) % (m - 1)) + 1;
    p = min(a, b);
    q = max(a, b);
}

__global__ void __launch_bounds__(kJacobiThreads)
jacobi_small_kernel(const float* __restrict__ A, float* __restrict__ Q, float* __restrict__ L, int n) {
    __shared__ float a[kJacobiMaxN][kLd];
    __shared__ float v[kJacobiMaxN][kLd];
    __shared__ float rot_c[kJacobiMaxN / 2], rot_s[kJacobiMaxN / 2];
    __shared__ int rot_p[kJacobiMaxN / 2], rot_q[kJacobiMaxN / 2];
    __shared__ float scratch[32];
    const int m = n + (n & 1), pairs = m / 2;
    const size_t base = (size_t)blockIdx.x * n * n;

    float amax = 0.f;
    for (int idx = threadIdx.x; idx < n * n; idx += blockDim.x) amax = fmaxf(amax, fabsf(A[base + idx]));
    amax = popkit::block_max(amax, scratch);
    const float scale = (amax > 0.f) ? amax : 1.f;
    for (int idx = threadIdx.x; idx < m * m; idx += blockDim.x) {
        const int i = idx / m, j = idx % m;
        a[i][j] = (i < n && j < n) ? A[base + (size_t)i * n + j] / scale : 0.f;
        v[i][j] = (i == j) ? 1.f : 0.f;
    }
    __syncthreads();

    for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
        float off = 0.f, total = 0.f;
        for (int idx = threadIdx.x; idx < m * m; idx += blockDim.x) {
            const float x = a[idx / m][idx % m];
            total += x * x;
            if (idx / m != idx % m) off += x * x;
        }
        off = popkit::block_sum(off, scratch);
        total = popkit::block_sum(total, scratch);
        const float tol = m * 1.1920929e-7f;              // m eps, eps = 2^-23
        if (off <= tol * tol * total || m < 2) break;

        for (int round = 0; round < m - 1; ++round) {
            if (threadIdx.x < pairs) {
                int p, q;
                tournament_pair(threadIdx.x, round, m, p, q);
                const float apq = a[p][q];
                float c = 1.f, s = 0.f;
                if (apq != 0.f) {
                    const float theta = (a[q][q] - a[p][p]) / (2.f * apq);
                    const float t = copysignf(1.f, theta) / (fabsf(theta) + sqrtf(fmaf(theta, theta, 1.f)));
                    c = rsqrtf(fmaf(t, t, 1.f));
                    s = t * c;
                }
                rot_p[threadIdx.x] = p; rot_q[threadIdx.x] = q;
                rot_c[threadIdx.x] = c; rot_s[threadIdx.x] = s;
            }
            __syncthreads();
            for (int idx = threadIdx.x; idx < pairs * m; idx += blockDim.x) {    // rows: J^T A
                const int k = idx / m, j = idx % m, p = rot_p[k], q = rot_q[k];
                const float c = rot_c[k], s = rot_s[k], ap = a[p][j], aq = a[q][j];
                a[p][j] = c * ap - s * aq;
                a[q][j] = s * ap + c * aq;
            }
            __syncthreads();
            for (int idx = threadIdx.x; idx < pairs * m; idx += blockDim.x) {    // columns: (J^T A) J, V J
                const int k = idx / m, i = idx % m, p = rot_p[k], q = rot_q[k];
                const float c = rot_c[k], s = rot_s[k];
                const float ap = a[i][p], aq = a[i][q];
                // a_pq and a_qp are zero by construction; storing the rounded value would
                // break symmetry and stall convergence.
                a[i][p] = (i == q) ? 0.f : c * ap - s * aq;
                a[i][q] = (i == p) ? 0.f : s * ap + c * aq;
                const float vp = v[i][p], vq = v[i][q];
                v[i][p] = c * vp - s * vq;
                v[i][q] = s * vp + c * vq;
            }
            __syncthreads();
        }
    }

    // Sort ascending: thread i finds the rank of eigenvalue i and writes its pair there.
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float di = a[i][i];
        int rank = 0;
        for (int j = 0; j < n; ++j) {
            const float dj = a[j][j];
            rank += (dj < di) || (dj == di && j < i);
        }
        L[(size_t)blockIdx.x * n + rank] = di * scale;
        for (int r = 0; r < n; ++r) Q[base + (size_t)r * n + rank] = v[r][i];
    }
}

}  // namespace

POPKIT_EXPORT int eigh_jacobi_small(const float* A, float* Q, float* L, int batch, int n) {
    if (n < 1 || n > kJacobiMaxN || batch < 1) return (int)cudaErrorInvalidValue;
    jacobi_small_kernel<<<batch, kJacobiThreads>>>(A, Q, L, n);
    return (int)cudaGetLastError();
}

POPKIT_EXPORT int eigh_jacobi_small_max_n() { return kJacobiMaxN; }
''',
    "eigh/tridiagonal_reduction.cu": r'''
// eigh, stage 1: blocked Householder tridiagonalisation (LAPACK ssytrd / slatrd, lower, panels of
// 32 columns), reduction_model.py's tridiagonalize_model in CUDA: same d, e, V, T, same panel algorithm.
//
// What it computes (per matrix of the batch, A symmetric n x n, prescaled by the caller)
//   d (n), e (n-1): the tridiagonal Q1^T A Q1 = tridiag(e, d, e), Q1 = H_0 ... H_{n-3};
//   V (n x r, r = n-2): reflector c in column c (zero in rows 0..c, 1 in row c+1);
//   T (r x p, p = min(32, r)): rows k..k+nb-1 hold the panel's upper-triangular compact-WY factor.
//   A is overwritten with the trailing matrices as the panels leave them (scratch for the caller).
//
// The math (reduction_model.reduce_panel, per column c = k + j of the panel starting at k)
//   column  = A[c:, c] - V[c:, :j] W[c, :j] - W[c:, :j] V[c, :j]   (A stale since the panel began)
//   d_c = column_0; (v, tau, beta) = slarfg(column_1..) with the tail's norm taken of the tail divided
//   by its largest entry (finding 2 in docs/priors.md); e_c = beta;
//   p = tau (A22 v - V (W^T v) - W (V^T v)),  W[:, j] = p - (tau/2)(p^T v) v,
//   T[:j, j] = -tau T[:j, :j] (V^T v),  T[j, j] = tau;
//   after the panel A22 -= V W^T + W V^T (the rank-2k update, its own kernel).
//   A is kept as a full symmetric square, exactly symmetric: the update computes each lower tile once
//   and writes it to both triangles. So column c is read as row c (coalesced), and A22 v is one
//   contiguous row dot product per row, as the model's full-square matvec ("rows", the reference), or
//   ("tiles", the candidate: `symv` picks at run time) a symmetric product over 32 x 32 tiles at absolute
//   indices on and below the diagonal: a tile below it read once for both y_I += A_IJ v_J and
//   y_J += A_IJ^T v_I, a diagonal tile read whole for y_I += A_II v_I; rows and columns <= c meet v's
//   zeros (reduction_kernel_model.symv_tiles replays it).
//
// Launch shape
//   eigh_reduce_panel: grid = batch (one CTA per matrix), `threads` (a multiple of 32, <= 512; tiles:
//     512) threads, 3 n floats of dynamic shared memory (the column, v, A22 v then p; tiles: 11 n, n
//     rounded up to 32, with 8 partial vectors of A22 v). Row i of the per-row work
//     (column update, v, p, W's column) belongs to thread i % threads in every column, so a thread
//     reads back its own writes of V and W without a barrier. The matrix-vector product, rows: each
//     warp takes kSymvRows rows at a time; tiles: the 16 warps as 4 row groups x 4 column classes, warp
//     (g, q) the tiles whose tile row is g's and tile column q's, lane 4h + r reading rows r + 4s
//     (s < 8), columns 4h..4h+3 of a tile (8 float4 loads, 4 whole rows a load instruction); row sums
//     and column sums leave the lanes by transposed shuffle sums (7 + 3 shuffles a tile), each into a
//     partial vector of its own writer (row sums: one a class, column sums: one a group), which the
//     row's owner adds in a fixed order: deterministic, no atomics. Six barriers a column either way:
//     the two norms' reductions, v ready, A22 v ready, V^T v and W^T v summed, p^T v.
//     The panel's V and W also go to Vp, W (n x 32 each, row-major): 128-byte aligned rows that the
//     per-row dot products read as float4 and the matrix-vector loop reads one coalesced row a warp.
//   eigh_update_trailing: grid = (lower-triangle 64 x 64 tiles, batch), 256 threads, 4 x 4 entries a
//     thread, fp32 SIMT; a tile off the diagonal is also written, transposed through shared memory,
//     to the upper triangle.
//   eigh_tridiagonalize: the loop over panels (panel, update), then the last 2 x 2 block; one call.
//
// Why it is fast (rows: measured, 2026-12-02; tiles: meant to be, not yet measured on a GPU)
//   The time is the matrix-vector product: it reads the trailing matrix once per column (n^3/3 floats
//   a matrix) and nothing else can start before it ends. Rows: each warp has one float4 load per lane
//   of each of its kSymvRows rows in flight (2 KB a warp, 32 KB a CTA, two CTAs an SM at <= 64
//   registers), reads the rows as float4 where n % 4 == 0 (scalar otherwise), through the read-only
//   path (A does not change inside a panel), and the products with the panel's V and W ride in the
//   same loop on rows the warp has just touched. Measured 74.5 ms at 640 x 512 (~3x the ~24 ms its
//   bytes take at HBM speed), 66-75% of the route: latency-bound, one wave of 4 loads after another.
//   Tiles: half the bytes (the upper triangle is never read off the diagonal tiles) and up to 8 float4
//   loads a lane a wave (4 KB a warp; ptxas issues 5, then 3 as the first land, at 64 registers, no
//   spills), so about 3x fewer waves of loads a column; its V^T v, W^T v take a short loop of their own.
//   Everything else is O(n) a column, in shared memory or L1. Levers to measure next: an L2 prefetch
//   of a warp's next tile (loads in flight without registers), barriers a column, an fp16 copy of A.

namespace {

constexpr int kPanel = 32;                       // reduction_model.PANEL, and the width of Vp and W
constexpr int kPanelMaxThreads = 512;
constexpr int kPanelMaxWarps = kPanelMaxThreads / 32;
constexpr int kSymvRows = 4;                     // rows a warp multiplies at once: loads in flight
constexpr int kSymvTile = 32;                    // the tiles form's square tile, and its shared vectors' padding
constexpr int kSymvRowsForm = 0, kSymvTilesForm = 1;   // eigh_reduce_panel's `symv`
// The tiles form's 16 warps (it runs kPanelMaxThreads threads) as 4 row groups x 4 column classes: 4 + 4 partial
// vectors, where one a warp would take 16 (n = 2048 would then not fit two CTAs' shared memory).
constexpr int kSymvGroups = 4, kSymvClasses = kPanelMaxWarps / kSymvGroups;
constexpr int kSymvPartials = kSymvGroups + kSymvClasses;
constexpr int kTile = 64;                        // the update's tile
constexpr int kUpdateThreads = 256;              // 16 x 16, each 4 x 4 entries of a tile
constexpr int kFinishThreads = 128;

// A CTA-wide sum (or max, of values >= 0) in one barrier: each warp leaves its partial in `slot`,
// then every thread combines them. The panel kernel gives its three reductions three slots, so a
// slot is written again only two barriers after its last read.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float x, float* slot) {
    x = kMax ? popkit::warp_max(x) : popkit::warp_sum(x);
    if ((threadIdx.x & 31) == 0) slot[threadIdx.x >> 5] = x;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total = kMax ? fmaxf(total, slot[w]) : total + slot[w];
    return total;
}

// sum_{l < j} x[l] y[l] over a 32-float row x (Vp or W: 16-byte aligned) and y, in order of l.
// Entries l >= j are not read as products (they may hold another panel's values, or nothing yet).
// y_last replaces y[j - 1]: the row-c entry of W that its owner is writing in this very column.
__device__ __forceinline__ float panel_dot(const float* x, const float* y, int j, bool replace_last, float y_last) {
    float total = 0.f;
    for (int q = 0; 4 * q < j; ++q) {
        const float4 a = reinterpret_cast<const float4*>(x)[q];
        const float xs[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const int l = 4 * q + t;
            const float yl = (replace_last && l == j - 1) ? y_last : (l < j) ? y[l] : 0.f;
            total = fmaf(l < j ? xs[t] : 0.f, yl, total);
        }
    }
    return total;
}

// W's entry p - coef v: one expression for the stored entry and for the copy every thread computes.
__device__ __forceinline__ float w_entry(float p, float coef, float v) { return p - coef * v; }

// acc[t] += A[row t, c0:n] . v[c0:n] (each lane a partial sum), rows clamped to n - 1 by the caller.
template <bool kVec4>
__device__ __forceinline__ void row_products(const float* __restrict__ A, const float* s_v, int n, int c0,
                                             const int (&rows)[kSymvRows], float (&acc)[kSymvRows], int lane) {
    if constexpr (kVec4) {
        const int head = min((4 - (c0 & 3)) & 3, n - c0);       // scalar columns up to a 16-byte boundary
        if (lane < head) {
            const float x = s_v[c0 + lane];
#pragma unroll
            for (int t = 0; t < kSymvRows; ++t) acc[t] = fmaf(__ldg(A + (size_t)rows[t] * n + c0 + lane), x, acc[t]);
        }
        const float4* v4 = reinterpret_cast<const float4*>(s_v);
        // Not unrolled further: a second iteration's loads in flight spill at 64 registers (two CTAs of 512
        // threads an SM), and the other CTA's loads overlap this one's barriers instead.
#pragma unroll 1
        for (int q = (c0 + head) / 4 + lane; q < n / 4; q += 32) {
            const float4 x = v4[q];
#pragma unroll
            for (int t = 0; t < kSymvRows; ++t) {
                const float4 a = __ldg(reinterpret_cast<const float4*>(A + (size_t)rows[t] * n) + q);
                acc[t] = fmaf(a.x, x.x, fmaf(a.y, x.y, fmaf(a.z, x.z, fmaf(a.w, x.w, acc[t]))));
            }
        }
    } else {
#pragma unroll 4
        for (int col = c0 + lane; col < n; col += 32) {
            const float x = s_v[col];
#pragma unroll
            for (int t = 0; t < kSymvRows; ++t) acc[t] = fmaf(__ldg(A + (size_t)rows[t] * n + col), x, acc[t]);
        }
    }
}

// Row i's terms of the panel's V^T v and W^T v: lane l < j adds Vp[i, l] v_i and W[i, l] v_i.
__device__ __forceinline__ void panel_terms(const float* Vp, const float* W, const float* s_v, int i, int j, int lane,
                                            float& vv, float& wv) {
    if (lane < j) {
        const float vi = s_v[i];
        vv = fmaf(Vp[(size_t)i * kPanel + lane], vi, vv);
        wv = fmaf(W[(size_t)i * kPanel + lane], vi, wv);
    }
}

// The stride of the panel kernel's shared vectors: whole tiles in the tiles form (its last tile row and column run
// past n), else 16 bytes (s_v's float4 reads), as before the tiles form existed.
__host__ __device__ constexpr int vector_stride(int n, bool tiles) {
    return tiles ? (n + kSymvTile - 1) / kSymvTile * kSymvTile : (n + 3) & ~3;
}

// The b-th tile index of class m among k, in the snake order 0 1 .. k-1 k-1 .. 1 0 0 1 ..: increasing in b, and each
// class's tile rows (or columns) spread from the top of the triangle to its bottom, so the classes' shares of the
// triangle's tiles nearly balance.
__device__ __forceinline__ int snake_member(int b, int m, int k) { return k * b + ((b & 1) ? k - 1 - m : m); }

// Quads s0 .. s0 + S - 1 of a lane's 8 in a tile: rows i0 + r + 4s, columns col .. col + 3, one pointer walked down
// the rows; float4 loads where n % 4 == 0 (16-byte aligned then), else four scalars.
// kEdge: the last tile row when 32 does not divide n. Its rows past n (a suffix of each lane's s) load as 0; its
// columns past n (only in its diagonal tile) as 0 in float4s and as column n - 1 (in bounds) in scalars, values that
// meet s_v's zero padding. Sums of rows and columns past n land in the padding, which step 4 never reads.
template <bool kVec4, bool kEdge, int S>
__device__ __forceinline__ void load_quads(const float* __restrict__ A, int n, int i0, int r, int col, int s0,
                                           float4 (&a)[S]) {
    const float* at = A + (size_t)(i0 + r + 4 * s0) * n + col;
    const size_t four_rows = (size_t)4 * n;
    const int rows = (n - i0 - r + 3) / 4;                  // this lane's rows before n (>= 8 off the edge)
    const int last = kEdge ? n - 1 - col : 3;               // the last column offset in bounds
#pragma unroll
    for (int s = 0; s < S; ++s, at += four_rows) {
        a[s] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (kEdge && s0 + s >= rows) continue;
        if constexpr (kVec4) {
            if (!kEdge || last >= 0) a[s] = __ldg(reinterpret_cast<const float4*>(at));
        } else {
            a[s] = make_float4(__ldg(at + min(0, last)), __ldg(at + min(1, last)), __ldg(at + min(2, last)),
                               __ldg(at + min(3, last)));
        }
    }
}

// One 32 x 32 tile of the trailing matrix, rows i0.., columns j0.., read once: lane l returns the tile's row sum
// (A_IJ v_J)[l] in row_sum and, off the diagonal (i0 > j0), its column sum (A_IJ^T v_I)[l] in col_sum. Lane l = 4h + r
// reads rows i0 + r + 4s (s < 8), columns j0 + 4h .. 4h + 3: each load instruction is 4 whole 128-byte rows, and a lane
// has all 8 (32 floats, 128 bytes) in flight at once where n % 4 == 0; four at a time in scalars (32 scalar loads in
// flight spilled at 64 registers). A diagonal tile is read whole (A is exactly symmetric) for its row sums alone.
template <bool kVec4, bool kEdge, bool kDiagonal>
__device__ __forceinline__ void symv_tile(const float* __restrict__ A, const float* s_v, int n, int i0, int j0,
                                          int lane, float& row_sum, float& col_sum) {
    constexpr int kInFlight = kVec4 ? 8 : 4;
    const int r = lane & 3, h = lane >> 2;
    const float4 vq = *reinterpret_cast<const float4*>(s_v + j0 + 4 * h);
    float rows[8], cols[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s0 = 0; s0 < 8; s0 += kInFlight) {
        float4 a[kInFlight];
        load_quads<kVec4, kEdge>(A, n, i0, r, j0 + 4 * h, s0, a);
#pragma unroll
        for (int s = s0; s < s0 + kInFlight; ++s) {
            const float4 x = a[s - s0];
            rows[s] = fmaf(x.w, vq.w, fmaf(x.z, vq.z, fmaf(x.y, vq.y, x.x * vq.x)));
            if (!kDiagonal) {
                const float vi = s_v[i0 + r + 4 * s];
                cols[0] = fmaf(x.x, vi, cols[0]);
                cols[1] = fmaf(x.y, vi, cols[1]);
                cols[2] = fmaf(x.z, vi, cols[2]);
                cols[3] = fmaf(x.w, vi, cols[3]);
            }
        }
    }
    row_sum = popkit::lanes_transpose_sum<8, 4>(rows, lane);     // over h (lane bits 2..4): entry h, row r + 4h = l
    if (!kDiagonal) col_sum = popkit::lanes_transpose_sum<4, 1>(cols, lane);   // over r (bits 0..1): column 4h + r = l
}

// The tiles of tile row t (from t0) that warp column class q takes (tile columns u <= t, snake order), summed: the
// row sums returned (lane l: row i0 + l), the column sums of the tiles below the diagonal added to col_part.
template <bool kVec4, bool kEdge>
__device__ __forceinline__ float symv_tile_row(const float* __restrict__ A, const float* s_v, float* col_part, int n,
                                               int t0, int t, int q, int lane) {
    const int i0 = (t0 + t) * kSymvTile;
    float row_total = 0.f, row_sum, col_sum;
#pragma unroll 1
    for (int b = 0, u; (u = snake_member(b, q, kSymvClasses)) < t; ++b) {
        const int j0 = (t0 + u) * kSymvTile;
        symv_tile<kVec4, kEdge, false>(A, s_v, n, i0, j0, lane, row_sum, col_sum);
        row_total += row_sum;
        col_part[j0 + lane] += col_sum;
    }
    if (snake_member(t / kSymvClasses, q, kSymvClasses) == t) {     // the diagonal tile is this class's
        symv_tile<kVec4, kEdge, true>(A, s_v, n, i0, i0, lane, row_sum, col_sum);
        row_total += row_sum;
    }
    return row_total;
}

// Step 3's A22 v in the tiles form: the 32 x 32 tiles on and below the diagonal of the trailing matrix (absolute tile
// indices, from the one holding row c + 1), each read once. Rows and columns <= c of the first tile row and column
// meet v's zeros in s_v (and stay out of the rows step 4 reads). Warp (g, q) takes the tiles of the tile rows of row
// group g and the tile columns of column class q (snake orders), so every partial sum has one writer: the row sums of
// a tile row go to part[q] (stored once: lane l owns row 32 I + l), the column sums to part[kSymvClasses + g]
// (zeroed, then added to tile by tile: lane l owns column 32 J + l). Step 4 adds a row's 8 partial sums in a fixed
// order: no atomics, the same sums every run.
template <bool kVec4>
__device__ __forceinline__ void symv_tiles(const float* __restrict__ A, const float* s_v, float* part, int ld, int n,
                                           int c, int warp, int lane) {
    const int g = warp / kSymvClasses, q = warp % kSymvClasses;
    const int t0 = (c + 1) / kSymvTile, tiles = (n + kSymvTile - 1) / kSymvTile - t0;
    float* row_part = part + q * ld;
    float* col_part = part + (kSymvClasses + g) * ld;
    for (int b = 0, u; (u = snake_member(b, q, kSymvClasses)) < tiles; ++b) col_part[(t0 + u) * kSymvTile + lane] = 0.f;
#pragma unroll 1
    for (int b = 0, t; (t = snake_member(b, g, kSymvGroups)) < tiles; ++b) {
        const bool edge = (t0 + t + 1) * kSymvTile > n;
        row_part[(t0 + t) * kSymvTile + lane] =
            edge ? symv_tile_row<kVec4, true>(A, s_v, col_part, n, t0, t, q, lane)
                 : symv_tile_row<kVec4, false>(A, s_v, col_part, n, t0, t, q, lane);
    }
}

// Vp and W are written and read back inside the kernel: plain pointers, never the read-only path.
template <bool kVec4, bool kTiles>
__global__ void __launch_bounds__(kPanelMaxThreads, 2)
reduce_panel_kernel(const float* __restrict__ A, float* __restrict__ d, float* __restrict__ e,
                    float* __restrict__ V, float* __restrict__ T, float* Vp, float* W, int n, int k, int nb) {
    extern __shared__ float4 dynamic_smem[];
    const int ld = vector_stride(n, kTiles);
    float* s_col = reinterpret_cast<float*>(dynamic_smem);
    float* s_v = s_col + ld;
    float* s_y = s_v + ld;
    float* s_sym = s_y + ld;                     // the tiles form's kSymvPartials partial vectors
    __shared__ float s_red[3][kPanelMaxWarps];
    __shared__ float s_part[kPanelMaxWarps][2 * kPanel];   // per warp: V^T v (lanes 0..31), W^T v (32..63)
    __shared__ float s_vw[2 * kPanel];
    __shared__ float s_T[kPanel][kPanel + 1];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // The tiles form always runs kPanelMaxThreads threads: a constant there divides by shifts and spares registers.
    const int threads = kTiles ? kPanelMaxThreads : blockDim.x, warps = threads >> 5;
    const int r = n - 2, p_cols = min(kPanel, r);
    const size_t mat = blockIdx.x;
    A += mat * n * n;
    d += mat * n;
    e += mat * (n - 1);
    V += mat * n * r;
    T += mat * r * p_cols;
    Vp += mat * n * kPanel;
    W += mat * n * kPanel;

    if constexpr (kTiles)
        for (int i = n + tid; i < ld; i += threads) s_v[i] = 0.f;   // the last tile's rows and columns past n
    float coef_prev = 0.f;                       // (tau/2)(p^T v) of the previous column
#pragma unroll 1
    for (int j = 0; j < nb; ++j) {
        const int c = k + j;
        const int first = tid + (c / threads) * threads;        // this thread's first row that may be >= c

        // 1. Column c as the panel's earlier reflectors left it, rows c..n-1. W[c, j-1] is being written
        //    by its owner since the last barrier: every thread has its value as p_c - coef_prev.
        const float w_last = j > 0 ? w_entry(s_y[c], coef_prev, 1.f) : 0.f;
        float tail_max = 0.f;
        for (int i = first; i < n; i += threads) {
            if (i < c) continue;
            float x = A[(size_t)c * n + i];                     // row c = column c: A is exactly symmetric
            if (j > 0) {
                const float s1 = panel_dot(Vp + (size_t)i * kPanel, W + (size_t)c * kPanel, j, true, w_last);
                const float s2 = panel_dot(W + (size_t)i * kPanel, Vp + (size_t)c * kPanel, j, false, 0.f);
                x = (x - s1) - s2;
            }
            s_col[i] = x;
            if (i >= c + 2) tail_max = fmaxf(tail_max, fabsf(x));
        }

        // 2. The reflector of column c's rows c+1..: the tail's norm scaled by its largest entry.
        const float largest = block_reduce<true>(tail_max, s_red[0]);
        const bool reflect = largest > 0.f;
        const float unit = reflect ? largest : 1.f;
        float ssq = 0.f;
        for (int i = first; i < n; i += threads) {
            if (i < c + 2) continue;
            const float y = s_col[i] / unit;
            ssq = fmaf(y, y, ssq);
        }
        ssq = block_reduce<false>(ssq, s_red[1]);
        const float alpha = s_col[c + 1];
        const float beta = -copysignf(hypotf(alpha, largest * sqrtf(ssq)), alpha);
        const float denominator = reflect ? alpha - beta : 1.f;
        const float tau = reflect ? (beta - alpha) / beta : 0.f;
        for (int i = tid; i < n; i += threads) {
            const float v = (i <= c) ? 0.f : (i == c + 1) ? 1.f : s_col[i] / denominator;
            V[(size_t)i * r + c] = v;
            if (kTiles || i > c) s_v[i] = v;                     // the tiles read the zeros up to row c too
            if (i > c) Vp[(size_t)i * kPanel + j] = v;
            if (i == c) d[c] = s_col[c];
        }
        if (tid == 0) e[c] = reflect ? beta : alpha;
        __syncthreads();

        // 3. A22 v (the hot loop), and V^T v, W^T v: in the rows form over the rows each warp has just multiplied,
        //    in the tiles form (partial sums left in s_sym) by a loop of their own.
        float vv = 0.f, wv = 0.f;                                // lane l: entry l of V^T v, W^T v
        if constexpr (kTiles) {
            symv_tiles<kVec4>(A, s_v, s_sym, ld, n, c, warp, lane);
            for (int i = c + 1 + warp; i < n; i += warps) panel_terms(Vp, W, s_v, i, j, lane, vv, wv);
        } else {
            for (int i0 = c + 1 + warp * kSymvRows; i0 < n; i0 += warps * kSymvRows) {
                int rows[kSymvRows];
                float acc[kSymvRows];
#pragma unroll
                for (int t = 0; t < kSymvRows; ++t) {
                    rows[t] = min(i0 + t, n - 1);
                    acc[t] = 0.f;
                }
                row_products<kVec4>(A, s_v, n, c + 1, rows, acc, lane);
#pragma unroll
                for (int t = 0; t < kSymvRows; ++t) {
                    const float total = popkit::warp_sum(acc[t]);
                    const int i = i0 + t;
                    if (i < n) {
                        if (lane == 0) s_y[i] = total;
                        panel_terms(Vp, W, s_v, i, j, lane, vv, wv);
                    }
                }
            }
        }
        s_part[warp][lane] = vv;
        s_part[warp][kPanel + lane] = wv;
        __syncthreads();
        if (tid < 2 * kPanel) {
            float total = 0.f;
            for (int w = 0; w < warps; ++w) total += s_part[w][tid];
            s_vw[tid] = total;
        }
        __syncthreads();

        // 4. p = tau (A22 v - V (W^T v) - W (V^T v)) per owned row, T's column j, then p^T v.
        float pv = 0.f;
        for (int i = first; i < n; i += threads) {
            if (i <= c) continue;
            const float s1 = panel_dot(Vp + (size_t)i * kPanel, s_vw + kPanel, j, false, 0.f);
            const float s2 = panel_dot(W + (size_t)i * kPanel, s_vw, j, false, 0.f);
            float av = kTiles ? 0.f : s_y[i];                   // (A22 v)_i: the rows form's, or the tiles' partial
            if constexpr (kTiles)                                // sums added in a fixed order
                for (int part = 0; part < kSymvPartials; ++part) av += s_sym[part * ld + i];
            const float p = tau * ((av - s1) - s2);
            s_y[i] = p;
            pv = fmaf(p, s_v[i], pv);
        }
        if (tid < j) {
            float total = 0.f;
            for (int l = tid; l < j; ++l) total = fmaf(s_T[tid][l], s_vw[l], total);
            s_T[tid][j] = -tau * total;
        }
        if (tid == j) s_T[j][j] = tau;
        pv = block_reduce<false>(pv, s_red[2]);

        // 5. W's column j; its row c+1 entry is what every thread recomputes as w_last next column.
        coef_prev = 0.5f * tau * pv;
        for (int i = first; i < n; i += threads)
            if (i > c) W[(size_t)i * kPanel + j] = w_entry(s_y[i], coef_prev, s_v[i]);
    }
    __syncthreads();
    for (int idx = tid; idx < nb * p_cols; idx += threads) {
        const int l = idx / p_cols, col = idx % p_cols;
        T[(size_t)(k + l) * p_cols + col] = (col < nb && l <= col) ? s_T[l][col] : 0.f;
    }
}

// A[start:, start:] -= Vp W^T + W Vp^T (rows from start, nb columns), lower tiles computed, both triangles written.
// Thread (ty, tx) computes rows 4 ty .. 4 ty + 3 and columns 4 tx .. 4 tx + 3 of its tile: each l's four factors
// are one float4 load of shared memory each (sixteen scalar loads before, for 32 FMAs: the loads, not the FMAs, set
// the pace). Each entry's sum over l is in the same order as before, so A is the same bit for bit.
__global__ void __launch_bounds__(kUpdateThreads)
update_trailing_kernel(float* __restrict__ A, const float* __restrict__ Vp, const float* __restrict__ W,
                       int n, int start, int nb) {
    constexpr int kLd = kTile + 4;               // rows of a factor 16-byte aligned for the float4 loads
    constexpr int kLdC = kTile + 1;              // the result's transposed reads free of bank conflicts
    __shared__ __align__(16) float smem[4 * kPanel * kLd];   // V, W of the row tile and the column tile; then C
    float* sVI = smem;
    float* sWI = sVI + kPanel * kLd;
    float* sVJ = sWI + kPanel * kLd;
    float* sWJ = sVJ + kPanel * kLd;
    float* sC = smem;                             // kTile x kLdC, once the factors are no longer read

    // Tile (I, J), J <= I, of the lower triangle from the linear index.
    const int q = blockIdx.x;
    int I = (int)((sqrtf(8.f * q + 1.f) - 1.f) * 0.5f);
    while ((I + 1) * (I + 2) / 2 <= q) ++I;
    while (I * (I + 1) / 2 > q) --I;
    const int J = q - I * (I + 1) / 2;
    const int i0 = start + I * kTile, j0 = start + J * kTile;
    const size_t mat = blockIdx.y;
    A += mat * n * n;
    Vp += mat * n * kPanel;
    W += mat * n * kPanel;

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    for (int idx = tid; idx < kTile * kPanel; idx += kUpdateThreads) {
        const int row = idx / kPanel, l = idx % kPanel;
        const bool in_i = i0 + row < n && l < nb, in_j = j0 + row < n && l < nb;
        sVI[l * kLd + row] = in_i ? Vp[(size_t)(i0 + row) * kPanel + l] : 0.f;
        sWI[l * kLd + row] = in_i ? W[(size_t)(i0 + row) * kPanel + l] : 0.f;
        sVJ[l * kLd + row] = in_j ? Vp[(size_t)(j0 + row) * kPanel + l] : 0.f;
        sWJ[l * kLd + row] = in_j ? W[(size_t)(j0 + row) * kPanel + l] : 0.f;
    }
    __syncthreads();

    // The model's order: X = V W^T and Y = W V^T summed over l separately, then A - (X + Y).
    float x[4][4] = {}, y[4][4] = {};
    for (int l = 0; l < nb; ++l) {
        const float4 vi4 = *reinterpret_cast<const float4*>(sVI + l * kLd + 4 * ty);
        const float4 wi4 = *reinterpret_cast<const float4*>(sWI + l * kLd + 4 * ty);
        const float4 vj4 = *reinterpret_cast<const float4*>(sVJ + l * kLd + 4 * tx);
        const float4 wj4 = *reinterpret_cast<const float4*>(sWJ + l * kLd + 4 * tx);
        const float vi[4] = {vi4.x, vi4.y, vi4.z, vi4.w}, wi[4] = {wi4.x, wi4.y, wi4.z, wi4.w};
        const float vj[4] = {vj4.x, vj4.y, vj4.z, vj4.w}, wj[4] = {wj4.x, wj4.y, wj4.z, wj4.w};
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                x[a][b] = fmaf(vi[a], wj[b], x[a][b]);
                y[a][b] = fmaf(wi[a], vj[b], y[a][b]);
            }
    }
    __syncthreads();                             // sC overwrites the factors

#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) sC[(4 * ty + a) * kLdC + 4 * tx + b] = x[a][b] + y[a][b];
    __syncthreads();
    // A's tile and its transpose, A[j0 + a, i0 + b] taking the update of A[i0 + b, j0 + a] (the upper part of a
    // diagonal tile), with 16 consecutive columns a half warp.
    const bool diagonal = I == J;
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const int ra = ty + 16 * a, cb = tx + 16 * b;
            if (i0 + ra < n && j0 + cb < n && (!diagonal || ra >= cb))
                A[(size_t)(i0 + ra) * n + j0 + cb] -= sC[ra * kLdC + cb];
            if (j0 + ra < n && i0 + cb < n && (!diagonal || ra < cb))
                A[(size_t)(j0 + ra) * n + i0 + cb] -= sC[cb * kLdC + ra];
        }
}

// The last two (or fewer) columns need no reflector: reduction_model.finish_last_block, a thread a matrix.
__global__ void finish_last_block_kernel(const float* __restrict__ A, float* __restrict__ d, float* __restrict__ e,
                                         int batch, int n) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= batch) return;
    const float* Ab = A + (size_t)b * n * n;
    for (int i = max(n - 2, 0); i < n; ++i) d[(size_t)b * n + i] = Ab[(size_t)i * n + i];
    if (n >= 2) e[(size_t)b * (n - 1) + n - 2] = Ab[(size_t)(n - 1) * n + n - 2];
}

bool valid_threads(int threads) { return threads >= 32 && threads <= kPanelMaxThreads && threads % 32 == 0; }
// The rows form runs any `threads`; the tiles form's warp layout is fixed at kPanelMaxThreads.
bool valid_symv(int symv, int threads) {
    return symv == kSymvRowsForm || (symv == kSymvTilesForm && threads == kPanelMaxThreads);
}

// One instantiation of the panel kernel: its shared memory allowed (once per new maximum), then launched.
template <bool kVec4, bool kTiles>
cudaError_t launch_panel(int& granted, int smem, int batch, int threads, const float* A, float* d, float* e, float* V,
                         float* T, float* Vp, float* W, int n, int k, int nb) {
    const cudaError_t err = popkit::allow_dynamic_smem(reduce_panel_kernel<kVec4, kTiles>, smem, granted);
    if (err != cudaSuccess) return err;
    reduce_panel_kernel<kVec4, kTiles><<<batch, threads, smem>>>(A, d, e, V, T, Vp, W, n, k, nb);
    return cudaGetLastError();
}

}  // namespace

// Panel k..k+nb-1 (nb <= 32, k + nb <= n - 2) of every matrix: d, e, V at those columns, T's rows k..k+nb-1,
// and the panel's V, W in Vp, W (batch x n x 32, row-major) for eigh_update_trailing. A is only read.
// symv: the form of step 3's A22 v, 0 rows (the reference) or 1 tiles (the lower triangle's tiles, each read once).
POPKIT_EXPORT int eigh_reduce_panel(const float* A, float* d, float* e, float* V, float* T, float* Vp, float* W,
                                    int batch, int n, int k, int nb, int threads, int symv) {
    if (batch < 1 || n < 3 || k < 0 || nb < 1 || nb > kPanel || k + nb > n - 2 || !valid_threads(threads) ||
        !valid_symv(symv, threads))
        return (int)cudaErrorInvalidValue;
    const bool vec4 = n % 4 == 0, tiles = symv == kSymvTilesForm;
    // s_col, s_v, s_y, and the tiles form's 8 partial vectors, each padded to whole tiles there: (3 + 8) x 2048 floats
    // (88 KiB) at n = 2048, 97 KiB a CTA with the static arrays, so two CTAs still fit an SM.
    const int vectors = 3 + (tiles ? kSymvPartials : 0);
    const int smem = vectors * vector_stride(n, tiles) * (int)sizeof(float);
    static int granted[2][2] = {};                // [tiles][vec4]
    int& allowed = granted[tiles][vec4];
    const cudaError_t err =
        tiles ? (vec4 ? launch_panel<true, true>(allowed, smem, batch, threads, A, d, e, V, T, Vp, W, n, k, nb)
                      : launch_panel<false, true>(allowed, smem, batch, threads, A, d, e, V, T, Vp, W, n, k, nb))
              : (vec4 ? launch_panel<true, false>(allowed, smem, batch, threads, A, d, e, V, T, Vp, W, n, k, nb)
                      : launch_panel<false, false>(allowed, smem, batch, threads, A, d, e, V, T, Vp, W, n, k, nb));
    return (int)err;
}

// A[start:, start:] -= V W^T + W V^T with the panel's nb columns of Vp, W (eigh_reduce_panel's), both triangles.
POPKIT_EXPORT int eigh_update_trailing(float* A, const float* Vp, const float* W, int batch, int n, int start, int nb) {
    if (batch < 1 || batch > 65535 || n < 1 || start < 0 || start >= n || nb < 1 || nb > kPanel)
        return (int)cudaErrorInvalidValue;
    const int tiles = (n - start + kTile - 1) / kTile;
    update_trailing_kernel<<<dim3(tiles * (tiles + 1) / 2, batch), kUpdateThreads>>>(A, Vp, W, n, start, nb);
    return (int)cudaGetLastError();
}

// The whole reduction of a batch (reduction_model.tridiagonalize_model with panel 32): A (batch x n x n,
// overwritten), d (batch x n), e (batch x n-1), V (batch x n x n-2), T (batch x n-2 x min(32, n-2)),
// Vp, W (batch x n x 32 workspace); panel CTAs of `threads` threads, step 3 in the form `symv` (eigh_reduce_panel's).
POPKIT_EXPORT int eigh_tridiagonalize(float* A, float* d, float* e, float* V, float* T, float* Vp, float* W,
                                      int batch, int n, int threads, int symv) {
    if (batch < 1 || batch > 65535 || n < 1 || !valid_threads(threads) || !valid_symv(symv, threads))
        return (int)cudaErrorInvalidValue;
    for (int k = 0; k < n - 2; k += kPanel) {
        const int nb = min(kPanel, n - 2 - k);
        int err = eigh_reduce_panel(A, d, e, V, T, Vp, W, batch, n, k, nb, threads, symv);
        if (err == 0) err = eigh_update_trailing(A, Vp, W, batch, n, k + nb, nb);
        if (err != 0) return err;
    }
    finish_last_block_kernel<<<(batch + kFinishThreads - 1) / kFinishThreads, kFinishThreads>>>(A, d, e, batch, n);
    return (int)cudaGetLastError();
}
''',
    "eigh/tridiagonal_leaf.cu": r'''
// eigh, stage 2 (leaves): the leaves of the tridiagonal divide and conquer, tridiagonal_model.solve_leaf in
// CUDA: same bisection, shifts, inverse iteration and Gram-Schmidt.
//
// What it computes (per leaf: a symmetric tridiagonal of m <= 32 rows, d (m), e (m-1))
//   w (m): the eigenvalues ascending; Z (m x m, row-major): eigenvector j in column j, Z = x^T with x the
//   lanes' vectors (tridiagonal_model.inverse_iteration's layout).
//
// The math (tridiagonal_model.py, "Leaves")
//   Bisection: eigenvalue j is where the Sturm count (negative pivots of the LDL^T of T - x I, a pivot
//   under pivmin = tiny max(1, max e^2) replaced by -pivmin) passes j; the Gershgorin interval widened by
//   2 m eps ||T|| + 2 pivmin, halved 26 times (bisection_steps(eps) in float32).
//   Shifts (cluster_shifts): a chain of eigenvalues whose consecutive gaps are all <= 8 eps ||T|| forms a
//   group; a group of two or more shares one shift 2 eps ||T|| outside it on the side of its wider outer
//   gap (max + 2 eps ||T|| or min - 2 eps ||T||), every other lane shifts by its w. Lane l's vector is
//   column l of Z, except in a group shifted from above: lane first + i there holds column last - i
//   (the group's eigenvalues nearest its shift are taken by its first lanes).
//   Inverse iteration, 3 times: solve (T - shift I) x = x by LU with partial pivoting (slagtf; a final
//   pivot under eps ||T|| is replaced by eps ||T|| with its sign, slagts), scale x by its largest entry,
//   then classical Gram-Schmidt twice of the leaf's vectors in lane order, each normalised.
//   The start vectors are tridiagonal_model.start_vectors' integer hash of (lane, row).
//
// Launch shape
//   One warp per leaf, one lane per eigenvalue (lanes >= m idle but in every shuffle), kLeafWarps warps a
//   CTA, grid = ceil(leaves / kLeafWarps). Per warp in shared memory: d, e, e^2, the vectors x[row][lane]
//   (stride 33: lane i walking its own vector and lane k walking row k of every vector are both free of
//   bank conflicts) and the LU's diagonal and first superdiagonal [row][lane]. The LU's multipliers are
//   used as they are made (the forward elimination rides in the factorisation, which is redone every
//   iteration: O(m) a lane), the second superdiagonal is e where a row was swapped (one bit a row).
//
// Why it is fast (not yet measured on a GPU)
//   Everything after the first load is in registers and shared memory of one warp: no barrier but
//   __syncwarp, O(m^2) work a lane for bisection (26 Sturm counts of m steps), O(m) a solve and O(m^2)
//   a Gram-Schmidt. At 640 x 512 the level has 10240 leaves: ~80 warps an SM.
#include <cfloat>


namespace {

constexpr int kLeafMax = 32;                     // tridiagonal_model.LEAF_SIZE: one lane per eigenvalue
constexpr int kLeafWarps = 2;                    // 2 x 12.6 KB of static shared memory a CTA
constexpr int kStride = kLeafMax + 1;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kBisectionSteps = 26;              // tridiagonal_model.bisection_steps(FLT_EPSILON)
constexpr int kInverseIterations = 3;            // tridiagonal_model.INVERSE_ITERATIONS
constexpr float kClusterGap = 8.f;               // tridiagonal_model.CLUSTER_GAP
constexpr float kClusterOffset = 2.f;            // tridiagonal_model.CLUSTER_OFFSET

struct LeafSmem {
    float x[kLeafMax][kStride];                  // x[row][lane]: entry `row` of lane's vector
    float diag[kLeafMax][kLeafMax];              // the LU's diagonal, [row][lane]
    float u1[kLeafMax][kLeafMax];                // its first superdiagonal, [row][lane]
    float d[kLeafMax], e[kLeafMax], e2[kLeafMax];
};

// tridiagonal_model.sturm_count for one shift: how many eigenvalues lie below x.
__device__ __forceinline__ int sturm_count(const LeafSmem& s, int m, float x, float pivmin) {
    int count = 0;
    float q = 1.f;
    for (int i = 0; i < m; ++i) {
        q = i == 0 ? s.d[0] - x : (s.d[i] - x) - s.e2[i - 1] / q;
        if (fabsf(q) < pivmin) q = -pivmin;
        count += q < 0.f;
    }
    return count;
}

// tridiagonal_model.start_vectors' entry (lane, row) of a leaf of m rows.
__device__ __forceinline__ float start_entry(int lane, int row, int m) {
    unsigned h = (unsigned)(lane * m + row + 1);
    for (int round = 0; round < 2; ++round) h = ((h >> 16) ^ h) * 0x45D9F3Bu;
    h = (h >> 16) ^ h;
    return (float)h / 4294967296.f - 0.5f;
}

// One lane's (T - shift I) x = x in place in its column of s.x: tridiagonal_model.factor_shifted and
// solve_factored, the forward elimination applied as each multiplier is made.
__device__ __forceinline__ void solve_shifted(LeafSmem& s, int lane, int m, float shift, float pivtol) {
    float pivot = s.d[0] - shift, upper = s.e[0];
    float y = s.x[0][lane];                      // the right-hand side's current row i, not yet final
    unsigned swaps = 0;
    for (int i = 0; i < m - 1; ++i) {
        const float below = s.e[i], below_diag = s.d[i + 1] - shift;
        const float below_upper = i + 1 < m - 1 ? s.e[i + 1] : 0.f;
        const bool swapped = fabsf(below) > fabsf(pivot);
        const float top = swapped ? below : pivot, other = swapped ? pivot : below;
        const float factor = other / (top == 0.f ? 1.f : top);   // top == 0 only when other == 0 too
        s.diag[i][lane] = top;
        s.u1[i][lane] = swapped ? below_diag : upper;
        swaps |= (unsigned)swapped << i;
        const float next_pivot = swapped ? upper - factor * below_diag : below_diag - factor * upper;
        upper = swapped ? -factor * below_upper : below_upper;
        pivot = next_pivot;
        const float y_next = s.x[i + 1][lane];
        const float y_top = swapped ? y_next : y;
        s.x[i][lane] = y_top;
        y = (swapped ? y : y_next) - factor * y_top;
    }
    s.x[m - 1][lane] = y;
    s.diag[m - 1][lane] = pivot;
    float x1 = 0.f, x2 = 0.f;                    // x[i + 1], x[i + 2]
    for (int i = m - 1; i >= 0; --i) {
        float acc = s.x[i][lane];
        if (i + 1 < m) acc = acc - s.u1[i][lane] * x1;
        if (i + 2 < m) {
            const float u2 = ((swaps >> i) & 1u) && i + 1 < m - 1 ? s.e[i + 1] : 0.f;
            acc = acc - u2 * x2;
        }
        float pivot_i = s.diag[i][lane];
        if (fabsf(pivot_i) < pivtol) pivot_i = copysignf(pivtol, pivot_i);
        const float xi = acc / pivot_i;
        s.x[i][lane] = xi;
        x2 = x1;
        x1 = xi;
    }
    float largest = 0.f;
    for (int i = 0; i < m; ++i) largest = fmaxf(largest, fabsf(s.x[i][lane]));
    for (int i = 0; i < m; ++i) s.x[i][lane] = s.x[i][lane] / largest;
}

// tridiagonal_model.orthonormalize_rows: vector j minus its projections on vectors 0..j-1 (twice), then
// normalised. Lane i < j forms the coefficient x_i . x_j, lane k the new entry k; the sums run in index order.
__device__ __forceinline__ void gram_schmidt(LeafSmem& s, int lane, int m) {
    const bool row = lane < m;
    for (int j = 0; j < m; ++j) {
        for (int pass = 0; pass < (j > 0 ? 2 : 0); ++pass) {
            float coefficient = 0.f;
            if (lane < j)
                for (int k = 0; k < m; ++k) coefficient = fmaf(s.x[k][lane], s.x[k][j], coefficient);
            float projection = 0.f;
            for (int i = 0; i < j; ++i) {
                const float c = __shfl_sync(kFull, coefficient, i);
                if (row) projection = fmaf(c, s.x[lane][i], projection);
            }
            __syncwarp();                        // every coefficient read x_j before it changes
            if (row) s.x[lane][j] = s.x[lane][j] - projection;
            __syncwarp();
        }
        const float v = row ? s.x[lane][j] : 0.f;
        const float norm = sqrtf(popkit::warp_sum(v * v));
        if (row) s.x[lane][j] = v / norm;
        __syncwarp();
    }
}

__global__ void __launch_bounds__(kLeafWarps * 32)
leaf_kernel(const float* __restrict__ d, const float* __restrict__ e, float* __restrict__ w,
            float* __restrict__ Z, int leaves, int m) {
    __shared__ LeafSmem smem[kLeafWarps];
    const int lane = threadIdx.x & 31;
    const size_t leaf = (size_t)blockIdx.x * kLeafWarps + (threadIdx.x >> 5);
    if (leaf >= (size_t)leaves) return;          // the whole warp: no shuffle is left waiting
    LeafSmem& s = smem[threadIdx.x >> 5];
    d += leaf * m;
    e += leaf * (m - 1);
    w += leaf * m;
    Z += leaf * m * m;
    if (m == 1) {
        if (lane == 0) {
            w[0] = d[0];
            Z[0] = 1.f;
        }
        return;
    }
    const bool row = lane < m;
    const float di = row ? d[lane] : 0.f;
    const float ei = lane < m - 1 ? e[lane] : 0.f;
    s.d[lane] = di;
    s.e[lane] = ei;
    s.e2[lane] = ei * ei;
    __syncwarp();

    // Gershgorin interval, pivmin and the widened bracket (tridiagonal_model.solve_leaf, bisect_leaf).
    const float e_before = __shfl_up_sync(kFull, ei, 1);
    const float radius = lane > 0 ? fabsf(ei) + fabsf(e_before) : fabsf(ei);
    const float lo = -popkit::warp_max(row ? radius - di : -INFINITY);
    const float hi = popkit::warp_max(row ? di + radius : -INFINITY);
    const float tnorm = fmaxf(fabsf(lo), fabsf(hi));
    const float pivmin = FLT_MIN * fmaxf(popkit::warp_max(ei * ei), 1.f);
    const float widen = (2.f * m * FLT_EPSILON) * tnorm + 2.f * pivmin;
    float below_lo = lo - widen, below_hi = hi + widen;
    for (int step = 0; step < kBisectionSteps; ++step) {
        const float mid = 0.5f * (below_lo + below_hi);
        if (sturm_count(s, m, mid, pivmin) > lane) below_hi = mid;
        else below_lo = mid;
    }
    const float wj = 0.5f * (below_lo + below_hi);

    // cluster_shifts: the group is the chain between the nearest wide gaps at or below this lane and above
    // it (gap bits by ballot); its shift and this lane's column from the chain's ends and outer gaps.
    const float w_before = __shfl_up_sync(kFull, wj, 1);
    const bool apart = lane > 0 && row && (wj - w_before) > (kClusterGap * FLT_EPSILON) * tnorm;
    const unsigned gaps = __ballot_sync(kFull, apart);
    const unsigned through = (2u << lane) - 1u;  // lanes 0..lane (all 32 at lane 31: 2u << 31 wraps to 0)
    const int first = (gaps & through) ? 31 - __clz(gaps & through) : 0;
    const int last = (gaps & ~through) ? __ffs(gaps & ~through) - 2 : m - 1;
    const float w_first = __shfl_sync(kFull, wj, first);
    const float w_below = __shfl_sync(kFull, wj, first > 0 ? first - 1 : 0);
    const float w_last = __shfl_sync(kFull, wj, last);
    const float w_above = __shfl_sync(kFull, wj, last < m - 1 ? last + 1 : last);
    const float gap_below = first > 0 ? w_first - w_below : INFINITY;
    const float gap_above = last < m - 1 ? w_above - w_last : INFINITY;
    const bool up = gap_above >= gap_below;
    const float offset = (kClusterOffset * FLT_EPSILON) * tnorm;
    const bool shared = last > first;
    const float shift = shared ? (up ? w_last + offset : w_first - offset) : wj;
    const int column = shared && up ? first + last - lane : lane;
    const float pivtol = fmaxf(FLT_EPSILON * tnorm, FLT_MIN);

    if (row)
        for (int i = 0; i < m; ++i) s.x[i][lane] = start_entry(lane, i, m);
    for (int iteration = 0; iteration < kInverseIterations; ++iteration) {
        if (row) solve_shifted(s, lane, m, shift, pivtol);
        __syncwarp();
        gram_schmidt(s, lane, m);
    }
    if (row) {
        w[lane] = wj;
        for (int i = 0; i < m; ++i) Z[(size_t)i * m + column] = s.x[i][lane];
    }
}

}  // namespace

// The eigenpairs of `leaves` tridiagonals of m <= 32 rows: d (leaves x m), e (leaves x m-1) in, w (leaves x m,
// ascending) and Z (leaves x m x m, eigenvectors in columns) out (tridiagonal_model.solve_leaf's outputs).
POPKIT_EXPORT int eigh_tridiagonal_leaves(const float* d, const float* e, float* w, float* Z, int leaves, int m) {
    if (leaves < 1 || m < 1 || m > kLeafMax) return (int)cudaErrorInvalidValue;
    const unsigned blocks = (unsigned)((leaves + kLeafWarps - 1) / kLeafWarps);
    leaf_kernel<<<blocks, kLeafWarps * 32>>>(d, e, w, Z, leaves, m);
    return (int)cudaGetLastError();
}
''',
    "eigh/tridiagonal_merge.cu": r'''
// eigh, stage 2 (merges): one level of the tridiagonal divide and conquer up to its GEMM,
// tridiagonal_model.merge without the back-multiplication: same z, deflation, secular roots and vectors.
//
// What it computes (per matrix: the halves' eigenpairs (w1, Z1) of n1 rows, (w2, Z2) of n2, the coupling beta)
//   values (n): the eigenvalues of T ascending; S (n x n, row-major) with T's eigenvectors
//   Z = [Z1 S[:n1]; Z2 S[n1:]] (the caller's GEMM: tridiagonal_model.back_multiply).
//
// The math (tridiagonal_model.merge, deflate, solve_secular, secular_vectors)
//   z = (last row of Z1, sign(beta) first row of Z2) / sqrt(2), rho = 2 |beta|, D = (w1, w2) sorted (stable);
//   slaed2's deflation scan (tolerance 4 eps max(|D|, |z|)) leaves k live poles, rotations in S's rows
//   and deflated poles that are eigenvalues already; root i < k of 1 + rho sum_j z_j^2 / (d_j - lam) is
//   kept as pole origin_i + offset tau_i, found by the bracketed two-pole rational iteration; Gu-Eisenstat's
//   z_hat_j^2 = prod_i (lam_i - d_j) / (...) and u_i = (z_hat_j / (d_j - lam_i))_j / norm. S is U with its
//   rows taken back through the compression, the rotations (last first) and the sort, and its columns
//   sorted by eigenvalue (stable).
//
// Launch shape
//   One CTA of kMergeThreads per matrix, grid = batch; 13 n words of dynamic shared memory (n <= 4096).
//   Phases, a barrier between each: load D and z; each element's rank in the stable sort (a thread per
//   element, O(n) comparisons); the deflation scan and the compression (one thread: the scan is serial);
//   the secular roots (a thread per root, O(k) a step); z_hat (a thread per pole, O(k)); each root's norm
//   and its column's rank among the values; S's columns (a thread per column: it writes the whole column
//   in the halves' row order, then applies the rotations to its own column, so no barrier is needed).
//
// Why it is fast (not yet measured on a GPU)
//   Everything but S's store is in shared memory, O(n^2) work a matrix spread over the CTA; S's rows are
//   stored by consecutive columns' threads (coalesced). The serial deflation scan (O(n) by one thread)
//   and one CTA a matrix (8 CTAs at 8 x 2048's top level) are the known limits.
#include <cfloat>


namespace {

constexpr int kMergeThreads = 512;
constexpr int kMergeMaxN = 4096;                 // 13 n words of shared memory must fit in 227 KB
constexpr int kMergeArrays = 13;
constexpr float kDeflationTol = 4.f;             // tridiagonal_model.DEFLATION_TOL
constexpr float kSecularTermError = 1.f;         // tridiagonal_model.SECULAR_TERM_ERROR
constexpr int kSecularMaxSteps = 64;             // tridiagonal_model.SECULAR_MAX_STEPS
constexpr float kSqrtHalf = 0.70710678118654752f;

// f and its pieces at root i's point d[origin] + tau (tridiagonal_model.secular_terms for one root),
// live poles j < k only, summed in index order.
struct Terms { float f, psi, phi, dpsi, dphi, here, next; };

__device__ __forceinline__ Terms secular_terms(const float* d, const float* z, float rho, int k, int n, int i,
                                               int origin, float tau) {
    const float base = d[origin];
    Terms t{0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int j = 0; j < k; ++j) {
        const float delta = (d[j] - base) - tau;
        const float weight = z[j] * z[j];
        const float term = weight / delta, slope = weight / (delta * delta);
        if (j <= i) {
            t.psi += term;
            t.dpsi += slope;
        } else {
            t.phi += term;
            t.dphi += slope;
        }
    }
    t.f = 1.f + rho * (t.psi + t.phi);
    t.here = (d[i] - base) - tau;
    t.next = i + 1 < n ? (d[i + 1] - base) - tau : t.here;
    return t;
}

// tridiagonal_model.rational_step: Li's middle way between the poles here and next (the last root: one pole).
__device__ __forceinline__ float rational_step(const Terms& t, float rho, bool last) {
    const float dl = t.here, dr = t.next;
    if (last) return dl * t.f / (t.f - rho * t.dpsi * dl);
    const float C = t.f - rho * (t.dpsi * dl + t.dphi * dr);
    const float B = C * (dl + dr) + rho * (t.dpsi * dl * dl + t.dphi * dr * dr);
    const float product = t.f * dl * dr;
    const float q = 0.5f * (B + copysignf(sqrtf(fmaxf(B * B - 4.f * C * product, 0.f)), B));
    const float first = q / C, second = product / q;
    return (first > dl && first < dr) ? first : second;
}

// tridiagonal_model.solve_secular for root i < k: (origin, tau) with the root at d[origin] + tau.
__device__ __forceinline__ void solve_root(const float* d, const float* z, float rho, float weight_sum, int k, int n,
                                           int i, int& origin_out, float& tau_out) {
    const bool last = i == k - 1;
    const int nxt = min(i + 1, n - 1);
    const float gap = d[nxt] - d[i], mid = 0.5f * gap;
    const bool left = last || secular_terms(d, z, rho, k, n, i, i, mid).f >= 0.f;
    const int origin = left ? i : nxt;
    float lo = left ? 0.f : mid - gap;
    float hi = last ? rho * weight_sum : left ? mid : 0.f;
    float tau = left ? hi : lo;
    for (int step = 0; step < kSecularMaxSteps; ++step) {
        const Terms t = secular_terms(d, z, rho, k, n, i, origin, tau);
        if (t.f < 0.f) lo = tau;
        if (t.f > 0.f) hi = tau;
        const float noise = kSecularTermError * (t.phi - t.psi) + fabsf(tau) * (t.dpsi + t.dphi);
        const float bound = FLT_EPSILON * (1.f + rho * noise);
        if (!(fabsf(t.f) > bound)) break;
        float candidate = tau + rational_step(t, rho, last);
        if (!(candidate > lo && candidate < hi)) candidate = 0.5f * (lo + hi);
        if (!(candidate > lo && candidate < hi)) break;   // the bracket is two adjacent floats
        tau = candidate;
    }
    origin_out = origin;
    tau_out = tau;
}

// Position of x[i] in the stable ascending sort of x[0:n): the smaller entries, and the equal ones before it.
__device__ __forceinline__ int stable_rank(const float* x, int n, int i) {
    const float xi = x[i];
    int rank = 0;
    for (int l = 0; l < n; ++l) rank += x[l] < xi || (x[l] == xi && l < i);
    return rank;
}

// slaed2's deflation scan (tridiagonal_model.deflate) on the sorted D, z, then the compression (live poles
// first, each group ascending: tridiagonal_model.merge's `order`). One thread. Returns k, the live count.
__device__ int deflate_and_compress(float* D, float* z, int* deflated, int* partner, float* cosine, float* sine,
                                    int* order, float* dc, float* zc, float rho, float tol, int n) {
    int pending = -1;
    for (int j = 0; j < n; ++j) {
        const float zj = z[j], dj = D[j];
        const bool small = rho * fabsf(zj) <= tol;
        deflated[j] = small;
        partner[j] = j;
        cosine[j] = 1.f;
        sine[j] = 0.f;
        if (!small && pending >= 0) {
            const int p = pending;
            const float zp = z[p], dp = D[p];
            const float r = hypotf(zp, zj);
            const float c = zj / r, s = zp / r;
            if (fabsf((dj - dp) * c * s) <= tol) {
                D[p] = dp * c * c + dj * s * s;
                D[j] = dp * s * s + dj * c * c;
                z[p] = 0.f;
                z[j] = r;
                deflated[p] = 1;
                partner[j] = p;
                cosine[j] = c;
                sine[j] = s;
            }
        }
        if (!small) pending = j;
    }
    int k = 0;
    for (int j = 0; j < n; ++j) k += !deflated[j];
    int live = 0, dead = k;
    for (int j = 0; j < n; ++j) {
        const int r = deflated[j] ? dead++ : live++;
        order[r] = j;
        dc[r] = D[j];
        zc[r] = deflated[j] ? 0.f : z[j];
    }
    return k;
}

__global__ void __launch_bounds__(kMergeThreads)
merge_kernel(const float* __restrict__ w1, const float* __restrict__ Z1, const float* __restrict__ w2,
             const float* __restrict__ Z2, const float* __restrict__ beta, float* __restrict__ values,
             float* __restrict__ S, int n1, int n2) {
    extern __shared__ float smem[];
    __shared__ float scratch[32];
    __shared__ int s_k;
    const int n = n1 + n2, tid = threadIdx.x, threads = blockDim.x;
    float* dc = smem;                            // the halves' D, then the compressed poles
    float* zc = dc + n;                          // the halves' z, then the compressed weights
    float* D = zc + n;                           // sorted (and deflated) poles, then z_hat
    float* z = D + n;                            // sorted (and deflated) weights, then each root's norm
    float* cosine = z + n;
    float* sine = cosine + n;
    float* tau = sine + n;
    float* value = tau + n;
    int* partner = reinterpret_cast<int*>(value + n);
    int* deflated = partner + n;                 // then each root's output column
    int* order = deflated + n;                   // compressed position -> sorted position
    int* perm = order + n;                       // sorted position -> the halves' row
    int* origin = perm + n;
    float* z_hat = D;
    float* norm = z;
    int* column = deflated;

    const size_t mat = blockIdx.x;
    w1 += mat * n1;
    w2 += mat * n2;
    Z1 += mat * n1 * n1;
    Z2 += mat * n2 * n2;
    values += mat * n;
    S += mat * n * n;
    const float b = beta[mat], rho = 2.f * fabsf(b), sign = b < 0.f ? -1.f : 1.f;

    for (int i = tid; i < n; i += threads) {
        dc[i] = i < n1 ? w1[i] : w2[i - n1];
        zc[i] = (i < n1 ? Z1[(size_t)(n1 - 1) * n1 + i] : sign * Z2[i - n1]) * kSqrtHalf;
    }
    __syncthreads();
    float largest = 0.f;
    for (int i = tid; i < n; i += threads) {
        const int r = stable_rank(dc, n, i);
        D[r] = dc[i];
        z[r] = zc[i];
        perm[r] = i;
        largest = fmaxf(largest, fmaxf(fabsf(dc[i]), fabsf(zc[i])));
    }
    const float tol = (kDeflationTol * FLT_EPSILON) * popkit::block_max(largest, scratch);   // its barriers order D, z
    if (tid == 0) s_k = deflate_and_compress(D, z, deflated, partner, cosine, sine, order, dc, zc, rho, tol, n);
    __syncthreads();
    const int k = s_k;
    float weight = 0.f;
    for (int i = tid; i < n; i += threads) weight = fmaf(zc[i], zc[i], weight);
    const float weight_sum = popkit::block_sum(weight, scratch);

    for (int i = tid; i < n; i += threads) {
        int o = i;
        float t = 0.f;
        if (i < k) solve_root(dc, zc, rho, weight_sum, k, n, i, o, t);
        origin[i] = o;
        tau[i] = t;
        value[i] = i < k ? dc[o] + t : dc[i];
    }
    __syncthreads();
    // z_hat_j (tridiagonal_model.secular_vectors): the product of (lam_i - d_j) / (partner - d_j) over live i.
    for (int j = tid; j < k; j += threads) {
        float product = 1.f;
        for (int i = 0; i < k; ++i) {
            const float delta = (dc[j] - dc[origin[i]]) - tau[i];
            const float partner_pole = i < j ? dc[i] : dc[min(i + 1, n - 1)];
            const float denominator = i == k - 1 ? rho : partner_pole - dc[j];
            product *= -delta / denominator;
        }
        z_hat[j] = copysignf(sqrtf(product), zc[j]);
    }
    __syncthreads();
    for (int i = tid; i < n; i += threads) {
        if (i < k) {
            float sum = 0.f;
            for (int j = 0; j < k; ++j) {
                const float u = z_hat[j] / ((dc[j] - dc[origin[i]]) - tau[i]);
                sum = fmaf(u, u, sum);
            }
            norm[i] = fmaxf(sqrtf(sum), FLT_MIN);
        }
        column[i] = stable_rank(value, n, i);
    }
    __syncthreads();
    // Column i of U -> S's column column[i]: rows through order and perm, then the rotations, last first.
    for (int i = tid; i < n; i += threads) {
        const int q = column[i];
        for (int r = 0; r < n; ++r) {
            const float u = i < k ? (r < k ? (z_hat[r] / ((dc[r] - dc[origin[i]]) - tau[i])) / norm[i] : 0.f)
                                  : (r == i ? 1.f : 0.f);
            S[(size_t)perm[order[r]] * n + q] = u;
        }
        for (int j = n - 1; j >= 0; --j) {
            const int p = partner[j];
            if (p == j) continue;
            float* Sp = S + (size_t)perm[p] * n + q;
            float* Sj = S + (size_t)perm[j] * n + q;
            const float xp = *Sp, xj = *Sj, c = cosine[j], s = sine[j];
            *Sp = c * xp + s * xj;
            *Sj = -s * xp + c * xj;
        }
        values[q] = value[i];
    }
}

}  // namespace

// One merge level of `batch` matrices: w1 (batch x n1), Z1 (batch x n1 x n1), w2, Z2 (n2), beta (batch) in;
// values (batch x n, ascending) and S (batch x n x n) out, n = n1 + n2 <= 4096, with Z = [Z1 S[:n1]; Z2 S[n1:]].
POPKIT_EXPORT int eigh_tridiagonal_merge(const float* w1, const float* Z1, const float* w2, const float* Z2,
                                         const float* beta, float* values, float* S, int batch, int n1, int n2) {
    if (batch < 1 || n1 < 1 || n2 < 1 || n1 + n2 > kMergeMaxN) return (int)cudaErrorInvalidValue;
    const int smem = kMergeArrays * (n1 + n2) * (int)sizeof(float);
    static int granted = 0;
    const cudaError_t err = popkit::allow_dynamic_smem(merge_kernel, smem, granted);
    if (err != cudaSuccess) return (int)err;
    merge_kernel<<<batch, kMergeThreads, smem>>>(w1, Z1, w2, Z2, beta, values, S, n1, n2);
    return (int)cudaGetLastError();
}
''',
}
# The translation units the loader compiles in parallel: every header part, then one .cu part.
CUDA_UNITS = [
    ["common/device_utils.cuh", "eigh/jacobi_small.cu"],
    ["common/device_utils.cuh", "eigh/tridiagonal_reduction.cu"],
    ["common/device_utils.cuh", "eigh/tridiagonal_leaf.cu"],
    ["common/device_utils.cuh", "eigh/tridiagonal_merge.cu"],
]

# ---- part common/cuda_loader.py ----
"""Compile the embedded CUDA once and call its C entry points through ctypes.

The CUDA sources include no torch headers, so the build is a plain shared
object (is_python_module=False, no torch includes in the source): seconds of
nvcc instead of the ~45 s a torch-header extension costs. The built file hands
over its CUDA parts and translation units (build.assemble_cuda: every header
part, then one .cu part). On a machine of PARALLEL_MIN_CPUS or more CPUs each
unit is a source file of torch.utils.cpp_extension.load, whose ninja build
compiles them in parallel and links them into one library (cold compile about
the slowest unit instead of the sum); elsewhere every part, in manifest order,
is one unit for load_inline. torch's extension cache keys the build by name,
and the name carries a hash of the units' sources and the target architecture
and the unit count, so a second process loads the cached library without
compiling and a one-unit and an N-unit build never share a name. Entry points
take device pointers and ints and return a cudaError_t code; `call` raises on a
non-zero code.
"""
import ctypes
import hashlib
import os
import sys
import time

import torch

PARALLEL_MIN_CPUS = 4                        # fewer CPUs: one unit (ninja's parallel jobs would not pay)
CUDA_FLAGS = ["-O3", "-std=c++17"]


def target_arch() -> str:
    """TORCH_CUDA_ARCH_LIST entry for the running GPU: '9.0a' on H100/H200, '10.0a' on B200."""
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}" + ("a" if major >= 9 else "")


def _raise_cuda_error(entry: str, code: int) -> None:
    if code != 0:
        raise RuntimeError(f"CUDA entry point {entry} failed with cudaError {code}")


def usable_cpus():
    """The CPUs this process may run on (its affinity set: a container pinned to a few of a large host's
    CPUs counts those), os.cpu_count() where the platform has no affinity call, None if unknown."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def extension_directory(name: str) -> str:
    """The folder torch's load would build `name` in (TORCH_EXTENSIONS_DIR, else torch's per-user cache with
    its pyXY_cuXYZ subfolder), created: the unit files are written there, as load_inline writes its one."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is None:
        from torch.utils.cpp_extension import get_default_build_root
        cuda = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
        root = os.path.join(get_default_build_root(), f"py{sys.version_info.major}{sys.version_info.minor}_{cuda}")
    directory = os.path.join(root, name)
    os.makedirs(directory, exist_ok=True)
    return directory


def write_if_changed(path: str, text: str) -> None:
    """Write text unless the file holds it already (ninja rebuilds what is newer), atomically: another process
    importing the same file at the same time must never compile a half-written unit."""
    try:
        with open(path, encoding="utf-8") as existing:
            if existing.read() == text:
                return
    except OSError:
        pass
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temporary, path)


class CudaLibrary:
    """The submission's compiled kernels; configured by the built file with its embedded parts and units."""

    def __init__(self):
        self.name = None
        self.parts = {}
        self.units = []
        self.build_name = None
        self.compile_s = None
        self._lib = None
        self._entries = {}

    def configure(self, name: str, parts: dict, units: list) -> None:
        """parts: {part path: text} in manifest order (the newlines around an embedded text are dropped);
        units: the part paths of each translation unit."""
        self.name, self.units = name, [tuple(unit) for unit in units]
        self.parts = {path: text.strip("\n") for path, text in parts.items()}
        self.build_name, self._lib, self._entries = None, None, {}

    def plan(self, cpus=None) -> list:
        """The units to compile: the per-part units on a machine of PARALLEL_MIN_CPUS or more CPUs (cpus:
        usable_cpus() when not given) if there are two or more, else one unit of every part in order."""
        cpus = usable_cpus() if cpus is None else cpus
        if len(self.units) > 1 and (cpus or 1) >= PARALLEL_MIN_CPUS:
            return list(self.units)
        return [tuple(self.parts)]

    def unit_source(self, unit) -> str:
        """A unit's text: its parts in order, each under a `// ---- part PATH ----` line (as build.py joins them)."""
        return "\n\n".join(f"// ---- part {path} ----\n{self.parts[path]}" for path in unit)

    def name_for(self, arch: str, sources: list) -> str:
        """The extension's name: a hash of the target architecture and every unit's source, and the unit count."""
        digest = hashlib.sha256("\0".join([arch, *sources]).encode()).hexdigest()[:16]
        return f"{self.name}_{digest}_{len(sources)}u"

    def load(self) -> ctypes.CDLL:
        if self._lib is not None:
            return self._lib
        if not self.parts:
            raise RuntimeError("no CUDA source embedded: run the built submission, not the parts")
        from torch.utils.cpp_extension import load, load_inline
        arch = target_arch()
        units = self.plan()
        sources = [self.unit_source(unit) for unit in units]
        self.build_name = self.name_for(arch, sources)
        previous = os.environ.get("TORCH_CUDA_ARCH_LIST")
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
        start = time.perf_counter()
        try:
            if len(sources) == 1:
                path = load_inline(name=self.build_name, cpp_sources="", cuda_sources=sources[0],
                                   is_python_module=False, no_implicit_headers=True, extra_cuda_cflags=CUDA_FLAGS)
            else:
                directory = extension_directory(self.build_name)
                files = []
                for index, (unit, source) in enumerate(zip(units, sources)):
                    # u0_NAME.cu for a unit whose .cu part is NAME.cu (the index keeps the objects apart)
                    stem = os.path.splitext(os.path.basename(unit[-1]))[0]
                    files.append(os.path.join(directory, f"u{index}_{stem}.cu"))
                    write_if_changed(files[-1], source)
                path = load(name=self.build_name, sources=files, build_directory=directory,
                            is_python_module=False, extra_cuda_cflags=CUDA_FLAGS)
        finally:
            if previous is None:
                os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
            else:
                os.environ["TORCH_CUDA_ARCH_LIST"] = previous
        self.compile_s = time.perf_counter() - start
        self._lib = ctypes.CDLL(path)
        return self._lib

    def entry(self, name: str):
        """A C entry point returning int, looked up once (a call then costs a few us of ctypes, not more)."""
        func = self._entries.get(name)
        if func is None:
            func = getattr(self.load(), name)
            func.restype = ctypes.c_int
            self._entries[name] = func
        return func

    def function(self, entry: str, signature: str):
        """The entry point as a typed ctypes function for hot paths: signature has one letter per argument,
        'p' for a pointer (pass tensor.data_ptr() or None) and 'i' for an int; a non-zero return raises.
        Arguments then go to C without `call`'s per-argument conversion (~0.4 us each)."""
        func = self.load()[entry]                        # a new function object, apart from entry()'s
        func.argtypes = [{"p": ctypes.c_void_p, "i": ctypes.c_int}[letter] for letter in signature]
        func.restype = ctypes.c_int
        func.errcheck = lambda code, _func, _args: _raise_cuda_error(entry, code)
        return func

    def call(self, entry: str, *args) -> None:
        """Call an entry point; tensors go as device pointers, None as NULL, ints as C ints."""
        c_args = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor)
                  else ctypes.c_void_p(None) if a is None else ctypes.c_int(a) for a in args]
        _raise_cuda_error(entry, self.entry(entry)(*c_args))

    def query(self, entry: str, *ints: int) -> int:
        """Call an entry point that returns a plain int (a size or a limit)."""
        return self.entry(entry)(*[ctypes.c_int(i) for i in ints])


CUDA = CudaLibrary()

# ---- part common/tf32_model.py ----
"""Torch models of the TF32 tensor-core arithmetic every problem's kernels share
(common/tensor_core_tf32.cuh): the hi + lo split and the tf32x3 product, ~21 bits from three TF32 products;
and the switch of torch's own fp32 matmuls between IEEE fp32 and TF32."""
import contextlib

import torch


def tf32_round(M: torch.Tensor) -> torch.Tensor:
    """M rounded to TF32: mantissa to 10 bits, ties away from zero (add half of the dropped 13-bit field,
    clear it), as tensor_core_tf32.cuh's split_tf32 rounds by integer ops."""
    bits = M.contiguous().view(torch.int32)
    return ((bits + 0x1000) & -0x2000).view(torch.float32)


def tf32_split(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """M = hi + lo with hi = tf32_round(M) and lo = M - hi exact in float32 (|lo| <= 2^-11 |M|);
    TF32 keeps ~11 bits of lo, so the products hi hi^T + hi lo^T + lo hi^T carry ~21 bits (the
    dropped lo lo^T is ~2^-22 relative)."""
    hi = tf32_round(M)
    return hi, M - hi


def tf32_truncate(M: torch.Tensor) -> torch.Tensor:
    """M with its low 13 mantissa bits cleared: what a TF32 tensor-core operand keeps of a float32."""
    return (M.contiguous().view(torch.int32) & -0x2000).view(torch.float32)


def tf32x3_product(P: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """P Q^T as the tf32x3 kernels compute it on tensor cores: both operands split into TF32 hi + lo
    (the tensor core truncates lo to TF32), then lo_P hi_Q^T + hi_P lo_Q^T + hi_P hi_Q^T in float32."""
    Ph, Pl = tf32_split(P)
    Qh, Ql = tf32_split(Q)
    Pl, Ql = tf32_truncate(Pl), tf32_truncate(Ql)
    return Pl @ Qh.mT + Ph @ Ql.mT + Ph @ Qh.mT


@contextlib.contextmanager
def matmul_precision(precision: str):
    """Set torch's CUDA fp32 matmul precision ("ieee" or "tf32") and restore the previous setting.

    The new API (fp32_precision) is read and restored as it was: once it is set,
    reading the legacy allow_tf32 flag (which the grader's check does) raises
    unless the previous value was put back."""
    matmul = torch.backends.cuda.matmul
    try:
        previous = matmul.fp32_precision
    except AttributeError:                      # torch < 2.9: the legacy flag only
        previous = None
    if previous is None:
        legacy = matmul.allow_tf32
        matmul.allow_tf32 = precision == "tf32"
    else:
        matmul.fp32_precision = precision
    try:
        yield
    finally:
        if previous is None:
            matmul.allow_tf32 = legacy
        else:
            matmul.fp32_precision = previous

# ---- part eigh/model.py ----
"""Torch model of the eigh Jacobi kernel (jacobi_small.cu): the executable specification.

Same prescaling, round-robin pair order, rotation formulas, stopping rule and
rank sort as the kernel, vectorized over the batch and the pairs of a round.
CPU tests check it against the gates; the built submission uses it on CPU.
"""
import torch

EPS32 = 2.0 ** -23
MAX_SWEEPS = 20


def tournament_pairs(m: int, round_index: int):
    """The m/2 disjoint pairs (p < q) of one round of the round-robin order over m (even) indices."""
    ps, qs = [], []
    for k in range(m // 2):
        a = 0 if k == 0 else (k - 1 + round_index) % (m - 1) + 1
        b = (m - 2 - k + round_index) % (m - 1) + 1
        ps.append(min(a, b))
        qs.append(max(a, b))
    return ps, qs


def _rotations(a: torch.Tensor, p, q):
    """(c, s) per matrix and pair that zero a[p, q] in J^T a J (sym.schur2)."""
    app, aqq, apq = a[:, p, p], a[:, q, q], a[:, p, q]
    nonzero = apq != 0
    theta = (aqq - app) / (2 * torch.where(nonzero, apq, torch.ones_like(apq)))
    t = torch.copysign(torch.ones_like(theta), theta) / (theta.abs() + torch.sqrt(theta * theta + 1))
    c = torch.rsqrt(t * t + 1)
    s = t * c
    return torch.where(nonzero, c, torch.ones_like(c)), torch.where(nonzero, s, torch.zeros_like(s))


def _rotate(x: torch.Tensor, p, q, c, s, dim: int) -> None:
    """Apply the pair rotations to rows (dim=1) or columns (dim=2) p, q of x, in place."""
    xp, xq = x.index_select(dim, torch.tensor(p)), x.index_select(dim, torch.tensor(q))
    shape = (x.shape[0], len(p), 1) if dim == 1 else (x.shape[0], 1, len(p))
    c, s = c.reshape(shape), s.reshape(shape)
    x.index_copy_(dim, torch.tensor(p), c * xp - s * xq)
    x.index_copy_(dim, torch.tensor(q), s * xp + c * xq)


def jacobi_eigh_model(A: torch.Tensor):
    """Eigendecomposition by parallel cyclic Jacobi: returns (Q, L), L ascending."""
    b, n, _ = A.shape
    m = n + (n % 2)
    amax = A.abs().amax(dim=(1, 2))
    scale = torch.where(amax > 0, amax, torch.ones_like(amax))
    a = torch.zeros(b, m, m, dtype=A.dtype, device=A.device)
    a[:, :n, :n] = A / scale[:, None, None]
    v = torch.eye(m, dtype=A.dtype, device=A.device).expand(b, m, m).clone()
    tol = m * EPS32
    for _ in range(MAX_SWEEPS):
        total = (a * a).sum(dim=(1, 2))
        off = ((a - torch.diag_embed(a.diagonal(dim1=1, dim2=2))) ** 2).sum(dim=(1, 2))
        if m < 2 or bool((off <= tol * tol * total).all()):
            break
        for r in range(m - 1):
            p, q = tournament_pairs(m, r)
            c, s = _rotations(a, p, q)
            _rotate(a, p, q, c, s, dim=1)
            _rotate(a, p, q, c, s, dim=2)
            a[:, p, q] = 0.0                       # exactly zero by construction; rounding says otherwise
            a[:, q, p] = 0.0
            _rotate(v, p, q, c, s, dim=2)
    d = a.diagonal(dim1=1, dim2=2)[:, :n]
    order = torch.argsort(d, dim=1, stable=True)
    L = torch.gather(d, 1, order) * scale[:, None]
    Q = torch.gather(v[:, :n, :n], 2, order[:, None, :].expand(b, n, n))
    return Q.contiguous(), L.contiguous()

# ---- part eigh/cusolver_batched.py ----
"""eigh for n > 32: cuSOLVER's batched symmetric eigensolver (cusolverDnXsyevBatched), through ctypes.

torch.linalg.eigh loops over the batch above n = 32 (one syevd per matrix);
the batched call solves the whole batch in one go (about 60x faster at
640 x 512 on an H200, ../shared/docs/speed.md). cuSOLVER is already loaded by
torch, so its path is read from the process's memory map; no header or link
step is needed. A symmetric row-major matrix is its own column-major copy;
the eigenvectors come back column-major, i.e. Q^T in row-major terms.

Each matrix is prescaled by its largest entry (extreme magnitudes), and a
matrix whose `info` reports no convergence is re-solved with torch.linalg.eigh.
"""
import ctypes

import torch

EIG_MODE_VECTOR = 1     # cusolverEigMode_t
FILL_MODE_LOWER = 0     # cublasFillMode_t
R_32F = 0               # cudaDataType


def _loaded_library_path(stem: str):
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if stem in path.rsplit("/", 1)[-1]:
                return path
    return None


class BatchedSyev:
    """A cuSOLVER handle and parameter object, created on first use."""

    def __init__(self):
        self._lib = None
        self._handle = ctypes.c_void_p()
        self._params = ctypes.c_void_p()

    def _load(self):
        if self._lib is None:
            path = _loaded_library_path("libcusolver.so")
            if path is None:       # torch loads cuSOLVER lazily on some builds: make it load
                torch.linalg.eigh(torch.eye(2, device="cuda"))
                path = _loaded_library_path("libcusolver.so")
            lib = ctypes.CDLL(path) if path else None
            if lib is None or not hasattr(lib, "cusolverDnXsyevBatched"):
                raise RuntimeError("cusolverDnXsyevBatched is not available in this process's cuSOLVER")
            self._check(lib.cusolverDnCreate(ctypes.byref(self._handle)), "cusolverDnCreate")
            self._check(lib.cusolverDnCreateParams(ctypes.byref(self._params)), "cusolverDnCreateParams")
            self._lib = lib
        return self._lib

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed with cusolverStatus {status}")

    def __call__(self, A: torch.Tensor):
        """(Q, L) of a contiguous symmetric float32 batch on the GPU."""
        lib = self._load()
        b, n, _ = A.shape
        amax = A.abs().amax(dim=(1, 2))
        scale = torch.where(amax > 0, amax, torch.ones_like(amax))
        work = A / scale[:, None, None]                      # overwritten by the eigenvectors
        L = torch.empty(b, n, dtype=A.dtype, device=A.device)
        info = torch.empty(b, dtype=torch.int32, device=A.device)
        dev_bytes, host_bytes = ctypes.c_size_t(), ctypes.c_size_t()
        common = (self._handle, self._params, EIG_MODE_VECTOR, FILL_MODE_LOWER, ctypes.c_int64(n),
                  R_32F, ctypes.c_void_p(work.data_ptr()), ctypes.c_int64(n),
                  R_32F, ctypes.c_void_p(L.data_ptr()), R_32F)
        self._check(lib.cusolverDnXsyevBatched_bufferSize(*common, ctypes.byref(dev_bytes),
                                                          ctypes.byref(host_bytes), ctypes.c_int64(b)),
                    "cusolverDnXsyevBatched_bufferSize")
        dev_work = torch.empty(max(1, dev_bytes.value), dtype=torch.uint8, device=A.device)
        host_work = ctypes.create_string_buffer(max(1, host_bytes.value))
        self._check(lib.cusolverDnXsyevBatched(*common, ctypes.c_void_p(dev_work.data_ptr()), dev_bytes,
                                               host_work, host_bytes, ctypes.c_void_p(info.data_ptr()),
                                               ctypes.c_int64(b)),
                    "cusolverDnXsyevBatched")
        Q = work.mT
        L = L * scale[:, None]
        failed = torch.nonzero(info).flatten()
        if failed.numel():                                  # no convergence: re-solve those matrices
            L_fix, Q_fix = torch.linalg.eigh(A[failed])
            Q = Q.clone()
            Q[failed], L[failed] = Q_fix, L_fix
        return Q, L


BATCHED_SYEV = BatchedSyev()

# ---- part eigh/tridiagonal_model.py ----
"""Torch model of our symmetric tridiagonal eigensolver (issue 10, eigh): the executable specification.

What it computes
    For a batch of real symmetric tridiagonal matrices T (diagonal d: batch x n, off-diagonal e:
    batch x n-1), the eigenvalues w ascending and orthonormal eigenvectors Z (in columns) with
    T = Z diag(w) Z^T. It is stage 2 of the three-stage eigh (tridiagonalise, solve T, back-transform).

The math: Cuppen's divide and conquer
    Tear T at its middle k with the coupling beta = e[k-1]:
        T = diag(T1', T2') + rho v v^T,  v = (e_{k-1} + sign(beta) e_k) / sqrt(2),  rho = 2 |beta|,
    where T1', T2' are T's diagonal blocks with |beta| taken off their touching diagonal entries.
    With Ti' = Zi diag(wi) Zi^T, the merge solves the rank-one update of a diagonal matrix
        diag(D) + rho z z^T,  D = (w1, w2),  z = diag(Z1, Z2)^T v = (last row of Z1, ±first row of Z2)/sqrt(2),
    whose eigenvalues are the roots of the secular equation f(lam) = 1 + rho sum_j z_j^2 / (D_j - lam),
    one in each gap of the sorted D and the last in (D_max, D_max + rho |z|^2]. With the roots lam_i,
    Gu and Eisenstat's (Loewner) formula gives the z_hat for which they are exact,
        z_hat_j^2 = prod_i (lam_i - D_j) / (rho prod_{l != j} (D_l - D_j)),
    and the eigenvectors u_i = (z_hat_j / (D_j - lam_i))_j / norm, orthogonal to working precision
    because every D_j - lam_i is computed to high relative accuracy (each root is kept as
    origin pole + offset tau). The eigenvectors of T are diag(Z1, Z2) @ S, S holding the u_i.

Recursion shape
    Split at n // 2 until a block has at most `leaf_size` rows (default 32). Every matrix of a
    batch has the same n, so the tree is the same for all of them; halves of equal size are solved
    as one batch, so each tree level is one batched call (one kernel launch per level on the GPU).

CUDA kernels (one row per stage; tridiagonal_route.py runs them through this recursion)
    leaf kernel     tridiagonal_leaf.cu, `solve_leaf`: one warp per leaf, one lane per eigenvalue. Bisection on Sturm
                    counts, the lane's shift (`cluster_shifts`: a ballot and shuffles), then inverse
                    iteration (a tridiagonal LU solve per lane) and Gram-Schmidt of the leaf's vectors.
    merge kernel    tridiagonal_merge.cu, `merge_factors`: z, sort, `deflate` (a serial scan: one thread),
                    `solve_secular` (one thread per root), `secular_vectors` (a thread per
                    column), then the deflation rotations and permutations applied to S.
    GEMM            `back_multiply`, Z = [Z1 @ S[:n1]; Z2 @ S[n1:]]: torch matmuls for now (to come: tensor
                    cores at fp32 accuracy); LAPACK additionally skips S's deflated columns.

Numerical safeguards
    - Each matrix is scaled by a power of two (exact) to max |entry| in [0.5, 1): no overflow
      in e^2 or z^2 (inputs reach 1.8e19), and every tolerance below is relative to 1.
    - Sturm counts replace a pivot smaller than pivmin by -pivmin (LAPACK's slaebz), so an
      exact zero pivot never divides.
    - Inverse iteration perturbs tiny LU pivots (slagts), gives the lanes of a chain of eigenvalues that
      bisection cannot tell apart one shared shift just outside the chain (`cluster_shifts`:
      without it, clusters such as d = 1 with couplings near eps lose orthogonality entirely),
      normalises by the largest entry before Gram-Schmidt (no overflow in the dot products),
      and orthogonalises every leaf vector against all earlier ones.
    - Deflation (slaed2's two tests, tolerance DEFLATION_TOL) leaves poles strictly separated and
      every z_j away from zero, so the secular roots are strictly interlaced.
    - The secular iteration is bracketed: a two-pole rational step is taken only when it lands
      strictly inside the current bracket, otherwise the bracket is bisected.

All arithmetic is in the input's dtype (float32 in production); nothing needs float64.
"""
import math

import torch

LEAF_SIZE = 32
# slaed2: TOL = 8 * slamch('Epsilon') * max(|D|_max, |z|_max); slamch('Epsilon') is the unit
# roundoff eps/2, so 8 of those are 4 machine epsilons. A pole whose rho |z_j| is below it, or
# a pair whose coupling after a Givens rotation is below it, is left where it is.
DEFLATION_TOL = 4
# Stop once |f| <= eps * (1 + rho * (SECULAR_TERM_ERROR * sum_j |z_j^2 / delta_j| + |tau| f'/rho)):
# the rounding error of evaluating f. slaed4 uses its worst-case bound (a factor 8); in float32
# that left roots ~8 ulps off (measured: eigenvalue errors 2.5x larger), so we stop at the typical
# error instead; where f's noise never gets that small the bracket closes to adjacent floats.
SECULAR_TERM_ERROR = 1
# The rational step converges quadratically (a handful of steps); the cap only bounds the
# bisection fallback, which reaches the adjacent float of tau well within it.
SECULAR_MAX_STEPS = 64
# With eigenvalues accurate to eps ||T||, one solve multiplies the wanted eigenvector by at
# least 1/eps relative to the others' 1/gap; three solves leave (eps/gap)^3-sized contamination,
# whose residual (eps/gap)^3 * gap stays below eps for any gap >= eps. Clusters tighter than
# that are handled by cluster_shifts and Gram-Schmidt, not by more solves.
INVERSE_ITERATIONS = 3
# Bisection leaves each eigenvalue within ~eps ||T|| of the truth (0.7 eps ||T|| measured): chains of
# neighbours closer than CLUSTER_GAP eps ||T|| share one shift, CLUSTER_OFFSET eps ||T|| outside the
# chain (see cluster_shifts). 4 split chains of gaps 1-13 eps ||T|| (the clustered family at n = 512)
# into groups whose shift sat inside the chain: leaf residuals up to 707 n eps ||T||; 8, 12 and 16
# measured alike (<= 6.8 over 2 x 10240 leaves of 640x512 clustered and mixed; 8 has the lowest median).
CLUSTER_GAP = 8
CLUSTER_OFFSET = 2


def tridiagonal_eigh_model(d: torch.Tensor, e: torch.Tensor, leaf_size: int = LEAF_SIZE, leaf_stage=None,
                           merge_stage=None):
    """(w, Z): eigenvalues ascending (batch x n) and eigenvectors in columns (batch x n x n) of tridiag(e, d, e).

    `leaf_stage(d, e) -> (w, Z)` and `merge_stage(w1, Z1, w2, Z2, beta) -> (w, Z)` replace solve_leaf and
    merge (the CUDA route passes its kernels); the scaling and the recursion stay this model's."""
    b, n = d.shape
    if e.shape != (b, max(n - 1, 0)) or leaf_size < 1:
        raise ValueError(f"need d (batch, n), e (batch, n-1) and leaf_size >= 1; got {tuple(d.shape)}, "
                         f"{tuple(e.shape)}, {leaf_size}")
    scale = power_of_two_scale(torch.cat([d, e], dim=1))
    w, Z = divide_and_conquer(d / scale[:, None], e / scale[:, None], leaf_size, leaf_stage or solve_leaf,
                              merge_stage or merge)
    return w * scale[:, None], Z


def power_of_two_scale(entries: torch.Tensor) -> torch.Tensor:
    """Per matrix, the power of two that brings max |entry| into [0.5, 1) (1 for a zero matrix): exact scaling."""
    largest = entries.abs().amax(dim=1)
    _, exponent = torch.frexp(largest)
    return torch.where(largest > 0, torch.ldexp(torch.ones_like(largest), exponent), torch.ones_like(largest))


def divide_and_conquer(d: torch.Tensor, e: torch.Tensor, leaf_size: int, leaf_stage, merge_stage):
    """Eigenpairs of every tridiagonal of the batch: tear at the middle, solve both halves, merge."""
    n = d.shape[1]
    if n <= leaf_size:
        return leaf_stage(d, e)
    half = n // 2
    d1, e1, d2, e2, beta = tear(d, e, half)
    if 2 * half == n:
        w, Z = divide_and_conquer(torch.cat([d1, d2]), torch.cat([e1, e2]), leaf_size, leaf_stage, merge_stage)
        (w1, w2), (Z1, Z2) = w.chunk(2), Z.chunk(2)
    else:
        w1, Z1 = divide_and_conquer(d1, e1, leaf_size, leaf_stage, merge_stage)
        w2, Z2 = divide_and_conquer(d2, e2, leaf_size, leaf_stage, merge_stage)
    return merge_stage(w1, Z1, w2, Z2, beta)


def tear(d: torch.Tensor, e: torch.Tensor, k: int):
    """T = diag(T1', T2') + |beta| (e_{k-1} + sign(beta) e_k)(...)^T with beta = e[k-1]: the two halves and beta."""
    beta = e[:, k - 1]
    d1, d2 = d[:, :k].clone(), d[:, k:].clone()
    d1[:, -1] -= beta.abs()
    d2[:, 0] -= beta.abs()
    return d1, e[:, :k - 1], d2, e[:, k:], beta


# ---------------------------------------------------------------------------------------------
# Leaves: bisection on Sturm counts, then inverse iteration.
# ---------------------------------------------------------------------------------------------

def solve_leaf(d: torch.Tensor, e: torch.Tensor):
    """Eigenpairs of small tridiagonals: eigenvalues by bisection, eigenvectors by inverse iteration."""
    if d.shape[1] == 1:
        return d.clone(), torch.ones_like(d)[:, :, None]
    lo, hi = gershgorin_interval(d, e)
    tnorm = torch.maximum(lo.abs(), hi.abs())
    w = bisect_leaf(d, e, lo, hi, tnorm)
    return w, inverse_iteration(d, e, w, tnorm)


def gershgorin_interval(d: torch.Tensor, e: torch.Tensor):
    """(lo, hi) per matrix enclosing every eigenvalue: min/max of d_i -/+ (|e_{i-1}| + |e_i|)."""
    radius = torch.zeros_like(d)
    radius[:, :-1] += e.abs()
    radius[:, 1:] += e.abs()
    return (d - radius).amin(dim=1), (d + radius).amax(dim=1)


def sturm_count(d: torch.Tensor, e2: torch.Tensor, x: torch.Tensor, pivmin: torch.Tensor) -> torch.Tensor:
    """Per matrix and per shift x (batch x k), how many eigenvalues lie below x.

    The count of negative pivots q_i of the LDL^T factorization of T - x I (Sylvester's inertia):
    q_0 = d_0 - x, q_i = d_i - x - e_{i-1}^2 / q_{i-1}. A pivot smaller than pivmin becomes
    -pivmin (slaebz), so e^2 / q never divides by zero; pivmin = tiny * max(1, max e^2) keeps
    that quotient finite. The count is monotone in x in IEEE arithmetic (Demmel, Dhillon, Ren).
    """
    count = torch.zeros_like(x, dtype=torch.long)
    q = None
    for i in range(d.shape[1]):
        q = d[:, i:i + 1] - x if i == 0 else d[:, i:i + 1] - x - e2[:, i - 1:i] / q
        q = torch.where(q.abs() < pivmin, -pivmin, q)
        count += q < 0
    return count


def bisection_steps(eps: float) -> int:
    """Halvings that take a Gershgorin interval (at most ~2 ||T|| wide) down to eps ||T||, plus 2 for its widening."""
    return math.ceil(math.log2(2 / eps)) + 2


def bisect_leaf(d, e, lo, hi, tnorm) -> torch.Tensor:
    """All eigenvalues of each leaf, ascending, to absolute accuracy eps ||T||: one bisection per index.

    Eigenvalue j is the x where sturm_count(x) passes j; each index keeps its own bracket
    [lo_j, hi_j] with count(lo_j) <= j < count(hi_j), so the indices run independently (a lane each).
    """
    b, m = d.shape
    finfo = torch.finfo(d.dtype)
    e2 = e * e
    pivmin = finfo.tiny * torch.clamp(e2.amax(dim=1, keepdim=True), min=1.0)
    widen = 2 * m * finfo.eps * tnorm[:, None] + 2 * pivmin   # count(lo) = 0 and count(hi) = m despite rounding
    lo = (lo[:, None] - widen).expand(b, m).clone()
    hi = (hi[:, None] + widen).expand(b, m).clone()
    index = torch.arange(m, device=d.device)
    for _ in range(bisection_steps(finfo.eps)):
        mid = 0.5 * (lo + hi)
        below = sturm_count(d, e2, mid, pivmin) > index    # eigenvalue j lies below mid
        hi = torch.where(below, mid, hi)
        lo = torch.where(below, lo, mid)
    return 0.5 * (lo + hi)


def start_vectors(lanes: int, m: int, dtype, device) -> torch.Tensor:
    """Fixed pseudo-random starting vectors (lanes x m) in [-1/2, 1/2): an integer hash of (lane, row),
    so a kernel reproduces them."""
    h = torch.arange(lanes, device=device)[:, None] * m + torch.arange(m, device=device)[None, :] + 1
    for _ in range(2):
        h = (((h >> 16) ^ h) * 0x45D9F3B) & 0xFFFFFFFF
    h = (h >> 16) ^ h
    return h.to(dtype) / 2.0 ** 32 - 0.5


def inverse_iteration(d, e, w, tnorm) -> torch.Tensor:
    """Eigenvectors (columns) of each leaf for its eigenvalues w: INVERSE_ITERATIONS solves with T - sigma_l I
    per lane (sigma from cluster_shifts), each followed by Gram-Schmidt of all the leaf's vectors in lane order;
    lane l's vector is the eigenvector of w[column_l] (cluster_shifts: a group's lanes nearest its shift first).

    Orthogonalising against every earlier vector (not only a cluster of close eigenvalues, as
    LAPACK's stein does) costs m^3/2 per leaf at m <= 32 and removes the eps/gap loss of
    orthogonality between separately computed vectors of moderately close eigenvalues.
    """
    b, m = d.shape
    shift, column = cluster_shifts(w, tnorm)
    pivtol = torch.finfo(d.dtype).eps * tnorm                     # slagts: pivots below eps ||T|| are perturbed
    factors = factor_shifted(d, e, shift, torch.clamp(pivtol, min=torch.finfo(d.dtype).tiny))
    x = start_vectors(m, m, d.dtype, d.device).expand(b, m, m)    # rows: lanes, columns: entries
    for _ in range(INVERSE_ITERATIONS):
        x = solve_factored(factors, x)
        x = x / x.abs().amax(dim=2, keepdim=True)                # a solve grows x by up to 1/pivtol
        x = orthonormalize_rows(x)
    return torch.empty_like(x).scatter_(2, column[:, None, :].expand(b, m, m), x.transpose(1, 2))


def cluster_shifts(w: torch.Tensor, tnorm: torch.Tensor):
    """(shift, column) per lane l of a leaf with eigenvalues w ascending: the shift of lane l's solves and the
    eigenvalue whose vector lane l computes.

    A group is a chain of eigenvalues whose consecutive gaps are all <= CLUSTER_GAP eps ||T||. A lone
    eigenvalue's lane solves with w_l itself, column l. A group of two or more shares one shift
    CLUSTER_OFFSET eps ||T|| outside the chain, on the side of its wider outer gap (above its largest w,
    or below its smallest), and its lanes take its eigenvalues nearest that shift first: above, lane
    first + i computes the vector of w[last - i]; below, lane l computes column l.

    Why one shift per group: lanes of an unresolved group would otherwise solve with (nearly) the same
    shift, which can sit far closer to one of the group's eigenvalues than to the others (1e-16
    against 1e-8 is seen): one solve then favours that direction by more than 1/eps in every lane and
    Gram-Schmidt is left with dependent vectors. From outside the chain every member lies on one side
    of the shift, so the lanes' solves and Gram-Schmidt are a subspace iteration onto the group's
    invariant subspace, and a lane's residual is bounded by the chain's width.
    Why chains, outside, and the wider side (2026-12-02, 640x512 clustered, seed 770004): with gaps
    of 1-13 eps ||T|| a threshold of 4 split one chain into groups whose shift, above each group,
    lay inside the chain, nearer the next group's eigenvalue than its own farthest member. Lanes with
    different shifts on both sides of an eigenvalue (an indefinite operator on the chain) then
    produced a vector lying in the span of the earlier ones: Gram-Schmidt's remainder was 2e-4 to
    4e-7 of it, the rest rounding noise along eigenvalues ||T|| away, leaf residuals up to 707 n eps
    ||T|| and 18 units of the eigen equation's n eps ||A|| at n = 512. Nearest first: the first
    lanes converge onto the members nearest the shift, so each keeps its own eigenvector (median
    leaf residual 1.5 against 4.9 in ascending order).
    """
    b, m = w.shape
    eps = torch.finfo(w.dtype).eps
    gaps = w[:, 1:] - w[:, :-1]
    apart = gaps > CLUSTER_GAP * eps * tnorm[:, None]
    index = torch.arange(m, device=w.device).expand(b, m)
    starts = torch.cat([torch.ones_like(apart[:, :1]), apart], dim=1)         # lane l begins a group
    ends = torch.cat([apart, torch.ones_like(apart[:, :1])], dim=1)           # lane l ends one
    first = torch.where(starts, index, 0).cummax(dim=1).values
    last = torch.where(ends, index, m - 1).flip(1).cummin(dim=1).values.flip(1)
    outside = torch.full_like(w[:, :1], math.inf)
    padded = torch.cat([outside, gaps, outside], dim=1)        # padded[l] = w_l - w_{l-1}, inf past either end
    up = padded.gather(1, last + 1) >= padded.gather(1, first)
    offset = CLUSTER_OFFSET * eps * tnorm[:, None]
    shared = last > first
    shift = torch.where(shared, torch.where(up, w.gather(1, last) + offset, w.gather(1, first) - offset), w)
    return shift, torch.where(shared & up, first + last - index, index)


def factor_shifted(d, e, shift, pivtol):
    """LU with partial pivoting of T - shift_j I for every lane j (slagtf): rows of U (diag, super, super-2),
    the multipliers and the row interchanges, each batch x lanes x m (m-1 for the last three)."""
    m = d.shape[1]
    a = d[:, None, :] - shift[:, :, None]
    sub = e[:, None, :].expand(-1, a.shape[1], -1)
    u0, u1, u2, mult, swap = [], [], [], [], []
    pivot, upper = a[..., 0], sub[..., 0]            # the current pivot row: its diagonal and first super entry
    for i in range(m - 1):
        below, below_diag = sub[..., i], a[..., i + 1]
        below_upper = sub[..., i + 1] if i + 1 < m - 1 else torch.zeros_like(pivot)
        swapped = below.abs() > pivot.abs()
        top = torch.where(swapped, below, pivot)
        other = torch.where(swapped, pivot, below)
        factor = other / torch.where(top == 0, torch.ones_like(top), top)   # top == 0 only when other == 0 too
        u0.append(top)
        u1.append(torch.where(swapped, below_diag, upper))
        u2.append(torch.where(swapped, below_upper, torch.zeros_like(upper)))
        mult.append(factor)
        swap.append(swapped)
        pivot = torch.where(swapped, upper - factor * below_diag, below_diag - factor * upper)
        upper = torch.where(swapped, -factor * below_upper, below_upper)
    u0.append(pivot)
    diag = torch.stack(u0, dim=2)
    tiny = diag.abs() < pivtol[:, None, None]
    diag = torch.where(tiny, torch.copysign(pivtol[:, None, None].expand_as(diag), diag), diag)
    return diag, u1, u2, mult, swap


def solve_factored(factors, rhs: torch.Tensor) -> torch.Tensor:
    """x with (T - shift_j I) x_j = rhs_j for every lane, from factor_shifted's LU: forward, then back substitution."""
    diag, u1, u2, mult, swap = factors
    m = rhs.shape[2]
    y = list(rhs.unbind(dim=2))
    for i in range(m - 1):
        top = torch.where(swap[i], y[i + 1], y[i])
        y[i + 1] = torch.where(swap[i], y[i], y[i + 1]) - mult[i] * top
        y[i] = top
    x = [None] * m
    for i in reversed(range(m)):
        acc = y[i]
        if i + 1 < m:
            acc = acc - u1[i] * x[i + 1]
        if i + 2 < m:
            acc = acc - u2[i] * x[i + 2]
        x[i] = acc / diag[..., i]
    return torch.stack(x, dim=2)


def orthonormalize_rows(x: torch.Tensor) -> torch.Tensor:
    """Gram-Schmidt of each matrix's rows in order, classical and applied twice ("twice is enough"):
    as orthogonal as the modified variant, and each projection is one parallel reduction."""
    x = x.clone()
    for j in range(x.shape[1]):
        v = x[:, j]
        for _ in range(2 if j else 0):
            coefficients = torch.einsum("bim,bm->bi", x[:, :j], v)
            v = v - torch.einsum("bi,bim->bm", coefficients, x[:, :j])
        x[:, j] = v / torch.linalg.vector_norm(v, dim=1, keepdim=True)
    return x


# ---------------------------------------------------------------------------------------------
# Merge: deflation, secular equation, Gu-Eisenstat vectors, back-multiplication.
# ---------------------------------------------------------------------------------------------

def merge(w1, Z1, w2, Z2, beta):
    """Eigenpairs of T from its torn halves' eigenpairs (w1, Z1), (w2, Z2) and the coupling beta."""
    values, S = merge_factors(w1, Z1, w2, Z2, beta)
    return values, back_multiply(Z1, Z2, S)


def back_multiply(Z1: torch.Tensor, Z2: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """T's eigenvectors diag(Z1, Z2) S: the merge's GEMM."""
    n1 = Z1.shape[1]
    return torch.cat([Z1 @ S[:, :n1], Z2 @ S[:, n1:]], dim=1)


def merge_factors(w1, Z1, w2, Z2, beta):
    """(values, S): the merged eigenvalues ascending and the n x n S with T's eigenvectors diag(Z1, Z2) S.

    Both sorts are stable, so ties keep the halves' order (the CUDA merge ranks them the same way)."""
    n = w1.shape[1] + w2.shape[1]
    sign = torch.where(beta < 0, -torch.ones_like(beta), torch.ones_like(beta))
    z = torch.cat([Z1[:, -1, :], sign[:, None] * Z2[:, 0, :]], dim=1) * math.sqrt(0.5)
    rho = 2 * beta.abs()
    D = torch.cat([w1, w2], dim=1)
    D, perm = D.sort(dim=1, stable=True)     # the secular equation wants its poles ascending
    z = z.gather(1, perm)
    D, z, deflated, rotations = deflate(D, z, rho)
    # Live (non-deflated) poles first, each group still ascending: the secular problem is dense in [0, k).
    order = torch.argsort(deflated.to(torch.uint8), dim=1, stable=True)
    live = torch.arange(n, device=D.device) < (~deflated).sum(dim=1, keepdim=True)
    dc, zc = D.gather(1, order), torch.where(live, z.gather(1, order), torch.zeros_like(z))
    origin, tau = solve_secular(dc, zc, rho, live)
    values, U = secular_vectors(dc, zc, rho, live, origin, tau)
    S = torch.empty_like(U).scatter_(1, order[:, :, None].expand_as(U), U)      # rows: back to sorted positions
    S = undo_rotations(S, rotations)                                           # rows: deflation basis -> sorted basis
    S = torch.empty_like(S).scatter_(1, perm[:, :, None].expand_as(S), S)      # rows: sorted -> the halves' order
    values, columns = values.sort(dim=1, stable=True)
    return values, S.gather(2, columns[:, None, :].expand_as(S))


def deflate(D: torch.Tensor, z: torch.Tensor, rho: torch.Tensor):
    """slaed2's deflation of diag(D) + rho z z^T, D ascending; returns (D, z, deflated, rotations).

    One scan over the poles, each matrix keeping a pending candidate p:
    - rho |z_j| <= tol: pole j is an eigenpair already (eigenvalue D_j, eigenvector e_j);
    - else, if a rotation in the (p, j) plane that zeroes z_p leaves a coupling
      |(D_j - D_p) c s| <= tol, apply it: p deflates with D_p c^2 + D_j s^2, j carries on with
      z_j = hypot(z_p, z_j) and D_p s^2 + D_j c^2.
    The survivors are strictly separated (gaps > 2 tol) and have rho |z| > tol. rotations
    (partner p, c, s per step j; p = j, c = 1, s = 0 where none) map the final basis back to the
    sorted one: x_p = c y_p + s y_j, x_j = -s y_p + c y_j, applied last rotation first.
    """
    b, n = D.shape
    tol = DEFLATION_TOL * torch.finfo(D.dtype).eps * torch.maximum(D.abs().amax(dim=1), z.abs().amax(dim=1))
    D, z = D.clone(), z.clone()
    deflated = torch.zeros_like(D, dtype=torch.bool)
    partner = torch.arange(n, device=D.device).expand(b, n).clone()
    cosine, sine = torch.ones_like(D), torch.zeros_like(D)
    pending = torch.full((b,), -1, dtype=torch.long, device=D.device)
    rows = torch.arange(b, device=D.device)
    for j in range(n):
        small = rho * z[:, j].abs() <= tol
        deflated[:, j] = small
        p = pending.clamp(min=0)
        zp, zj, dp, dj = z[rows, p], z[:, j].clone(), D[rows, p], D[:, j].clone()
        r = torch.hypot(zp, zj)
        c, s = zj / r, zp / r                            # r > 0 wherever it is used: j is not small
        close = (pending >= 0) & ~small & (((dj - dp) * c * s).abs() <= tol)
        if bool(close.any()):
            c = torch.where(close, c, torch.ones_like(c))
            s = torch.where(close, s, torch.zeros_like(s))
            D[rows, p] = dp * c * c + dj * s * s
            D[:, j] = torch.where(close, dp * s * s + dj * c * c, dj)
            z[rows, p] = torch.where(close, torch.zeros_like(zp), zp)
            z[:, j] = torch.where(close, r, zj)
            deflated[rows, p] |= close
            partner[:, j] = torch.where(close, p, partner[:, j])
            cosine[:, j], sine[:, j] = c, s
        pending = torch.where(small, pending, torch.full_like(pending, j))
    return D, z, deflated, (partner, cosine, sine)


def undo_rotations(S: torch.Tensor, rotations) -> torch.Tensor:
    """Apply deflate's rotations to the rows of S, last first: vectors in the deflated basis -> the sorted basis."""
    partner, cosine, sine = rotations
    S = S.clone()
    rows = torch.arange(S.shape[0], device=S.device)
    for j in reversed(range(S.shape[1])):
        if not bool((partner[:, j] != j).any()):
            continue
        p, c, s = partner[:, j], cosine[:, j, None], sine[:, j, None]
        Sp, Sj = S[rows, p], S[:, j].clone()
        S[rows, p] = c * Sp + s * Sj                     # where no rotation, p = j and both writes leave S_j
        S[:, j] = -s * Sp + c * Sj
    return S


def solve_secular(d, z, rho, live):
    """Roots of f(lam) = 1 + rho sum_j z_j^2 / (d_j - lam) over the live poles d[:k] (ascending), as (origin, tau):
    root i = d[origin_i] + tau_i, origin_i in {i, i+1} the pole nearer the root, so that
    d_j - root = (d_j - d[origin]) - tau keeps full relative accuracy.

    Root i < k-1 lies in (d_i, d_{i+1}); the sign of f at the gap's midpoint says which half, hence the
    origin. The last root lies in (d_{k-1}, d_{k-1} + rho |z|^2]. Each step evaluates f and brackets the
    root by its sign (f increases between poles), then takes `rational_step` (Li's "middle way": the left
    poles' sum psi and the right poles' sum phi each replaced by one pole matching value and slope)
    when it lands strictly inside the bracket, else the bracket's midpoint. Dead roots (i >= k) stay at 0.
    """
    b, n = d.shape
    eps = torch.finfo(d.dtype).eps
    index = torch.arange(n, device=d.device)
    last = index == live.sum(dim=1, keepdim=True) - 1
    nxt = (index + 1).clamp(max=n - 1).expand(b, n)
    gap = d.gather(1, nxt) - d
    mid = 0.5 * gap
    f_mid = secular_terms(d, z, rho, live, index.expand(b, n), mid)[0]
    left = (f_mid >= 0) | last
    origin = torch.where(left, index, nxt)
    zero = torch.zeros_like(d)
    lo = torch.where(left, zero, mid - gap)
    hi = torch.where(left, mid, zero)
    hi = torch.where(last, rho[:, None] * (z * z).sum(dim=1, keepdim=True), hi)
    tau = torch.where(live, torch.where(left, hi, lo), zero)
    active = live.clone()
    for _ in range(SECULAR_MAX_STEPS):
        f, psi, phi, dpsi, dphi, delta_here, delta_next = secular_terms(d, z, rho, live, origin, tau)
        lo = torch.where(active & (f < 0), tau, lo)
        hi = torch.where(active & (f > 0), tau, hi)
        error_bound = eps * (1 + rho[:, None] * (SECULAR_TERM_ERROR * (phi - psi) + tau.abs() * (dpsi + dphi)))
        active &= f.abs() > error_bound
        if not bool(active.any()):
            break
        candidate = tau + rational_step(f, rho[:, None], dpsi, dphi, delta_here, delta_next, last)
        inside = (candidate > lo) & (candidate < hi)
        candidate = torch.where(inside, candidate, 0.5 * (lo + hi))
        active &= (candidate > lo) & (candidate < hi)     # else the bracket is two adjacent floats: done
        tau = torch.where(active, candidate, tau)
    return origin, tau


def secular_terms(d, z, rho, live, origin, tau):
    """f and its pieces at root i's point d[origin_i] + tau_i, for every root i at once (batch x n each):
    (f, psi, phi, psi', phi', delta_i, delta_{i+1}) with psi the sum over poles j <= i (negative),
    phi over j > i (positive), delta_j = d_j - lam, and delta_i, delta_{i+1} root i's two poles."""
    n = d.shape[1]
    delta = pole_offsets(d, origin) - tau[:, :, None]
    weight = (z * z)[:, None, :]
    dead = ~live[:, None, :]                      # dead poles have z = 0; 0/0 must not leak into the sums
    term = torch.where(dead, torch.zeros_like(delta), weight / delta)
    slope = torch.where(dead, torch.zeros_like(delta), weight / (delta * delta))
    index = torch.arange(n, device=d.device)
    left = index[None, :] <= index[:, None]       # [root i, pole j]: j <= i
    psi, phi = (term * left).sum(dim=2), (term * ~left).sum(dim=2)
    dpsi, dphi = (slope * left).sum(dim=2), (slope * ~left).sum(dim=2)
    f = 1 + rho[:, None] * (psi + phi)
    delta_here = delta.diagonal(dim1=1, dim2=2)
    delta_next = torch.cat([delta.diagonal(offset=1, dim1=1, dim2=2), delta_here[:, -1:]], dim=1)
    return f, psi, phi, dpsi, dphi, delta_here, delta_next


def pole_offsets(d: torch.Tensor, origin: torch.Tensor) -> torch.Tensor:
    """d_j - d[origin_i] for every root i and pole j (batch x n x n): differences of data, no tau in them."""
    return d[:, None, :] - d.gather(1, origin)[:, :, None]


def rational_step(f, rho, dpsi, dphi, delta_here, delta_next, last):
    """Li's middle way: the step eta to the root of C + rho psi' dl^2 / (dl - eta) + rho phi' dr^2 / (dr - eta),
    the model matching f's value and slope with psi on the pole dl = delta_i and phi on dr = delta_{i+1}.

    Cleared of denominators it is C eta^2 - B eta + f dl dr = 0; the wanted root is the one between
    the poles (dl < eta < dr), taken from the cancellation-free pair q / C and f dl dr / q. The last
    root has no right pole: eta = dl f / (f - rho psi' dl).
    """
    dl, dr = delta_here, delta_next
    C = f - rho * (dpsi * dl + dphi * dr)
    B = C * (dl + dr) + rho * (dpsi * dl * dl + dphi * dr * dr)
    product = f * dl * dr
    q = 0.5 * (B + torch.copysign(torch.sqrt(torch.clamp(B * B - 4 * C * product, min=0)), B))
    first, second = q / C, product / q
    between = torch.where((first > dl) & (first < dr), first, second)
    return torch.where(last, dl * f / (f - rho * dpsi * dl), between)


def secular_vectors(d, z, rho, live, origin, tau):
    """(values, U): all n eigenvalues of the deflated problem and its eigenvectors in U's columns.

    Columns i < k: root i, with Gu-Eisenstat's z_hat (exact for the computed roots) and
    u_i = (z_hat_j / delta_ij)_j / norm. The product z_hat_j^2 = prod_i (lam_i - d_j) / (rho prod_{l!=j} (d_l - d_j))
    pairs each root with a neighbouring pole so every factor is a positive ratio of moderate size:
    (lam_i - d_j) / (d_i - d_j) for i < j, (lam_i - d_j) / (d_{i+1} - d_j) for j <= i < k-1, (lam_{k-1} - d_j) / rho.
    Columns i >= k: the deflated pole d_i itself, with the unit vector e_i.
    """
    b, n = d.shape
    delta = pole_offsets(d, origin) - tau[:, :, None]          # [root i, pole j] = d_j - lam_i
    values = torch.where(live, d.gather(1, origin) + tau, d)
    index = torch.arange(n, device=d.device)
    nxt = (index + 1).clamp(max=n - 1)
    last = (index == live.sum(dim=1, keepdim=True) - 1)[:, :, None]
    partner = torch.where(index[:, None] < index[None, :], d[:, :, None], d[:, nxt][:, :, None])
    denominator = torch.where(last, rho[:, None, None].expand(b, n, n), partner - d[:, None, :])
    both = live[:, :, None] & live[:, None, :]
    ratio = torch.where(both, -delta / denominator, torch.ones_like(delta))
    z_hat = torch.copysign(torch.sqrt(ratio.prod(dim=1)), z)
    vectors = torch.where(both, z_hat[:, None, :] / delta, torch.zeros_like(delta))
    vectors = vectors / torch.linalg.vector_norm(vectors, dim=2, keepdim=True).clamp(min=torch.finfo(d.dtype).tiny)
    unit = torch.diag_embed((~live).to(d.dtype))
    return values, vectors.transpose(1, 2) + unit

# ---- part eigh/reduction_model.py ----
"""Torch model of our dense eigh route around the tridiagonal solver (issue 10): the executable specification.

What it computes
    eigh_pipeline_model(A) takes a batch of real symmetric matrices (batch x n x n, float32) and
    returns (Q, L): orthonormal eigenvectors in the columns of Q and the eigenvalues L ascending,
    A = Q diag(L) Q^T, the convention of parts/eigh/route.py's custom_kernel. Four steps:
        1. prescale           A <- A / 2^k per matrix, max |entry| in [0.5, 1) (exact);
        2. tridiagonalize     Q1^T A Q1 = tridiag(e, d, e), Q1 = H_0 H_1 ... H_{n-3} (Householder);
        3. solve T            T = Z diag(w) Z^T (tridiagonal_model.py: divide and conquer);
        4. back-transform     Q = Q1 Z (compact-WY block products), L = 2^k w.

The math: one-stage blocked Householder tridiagonalisation (LAPACK ssytrd / slatrd, lower)
    Reflector c (c = 0 .. n-3) zeroes column c below its subdiagonal: H_c = I - tau_c v_c v_c^T with
    v_c zero in rows 0..c, 1 in row c+1. Applied to both sides of the current trailing matrix A22,
        H A22 H = A22 - v w^T - w v^T,   w = p - (tau/2)(p^T v) v,   p = tau A22 v.
    Unblocked, every column rewrites the whole trailing matrix (rank 2, memory-bound). Blocked,
    the trailing matrix stays as it was at the start of a panel of `panel` columns and the panel's
    reflectors V and their w's (W) are kept beside it: the true trailing matrix is A22 - V W^T - W V^T,
    applied lazily. Within the panel, column c is first brought up to date with the panel's earlier
    reflectors (its entries of V W^T + W V^T), its reflector is built, and
        p = tau (A22 v - V (W^T v) - W (V^T v))
    is the matrix-vector product against the stale A22 corrected by two thin products. After the
    panel, one rank-2k update A22 <- A22 - V W^T - W V^T makes the trailing matrix current.
    The diagonal d_c is column c's updated diagonal entry, the subdiagonal e_c its reflector's beta.
    The panel's reflectors multiply to I - V T V^T (compact WY; T upper triangular, slarft forward
    columnwise): T_jj = tau_j, T_{0:j, j} = -tau_j T_{0:j, 0:j} (V_{:, 0:j}^T v_j), and V^T v_j is
    already computed for p. So Q1 Z = P_0 (P_1 (... (P_last Z))) with P = I - V T V^T per panel:
    per panel three products, Y = V^T Z, Y <- T Y, Z <- Z - V Y.

Storage (what the CUDA kernels exchange)
    d (batch x n), e (batch x n-1): the tridiagonal. V (batch x n x r), r = max(n-2, 0): reflector c
    in column c (zero above row c+1, 1 at row c+1). T (batch x r x p), p = min(panel, r): rows
    k..k+nb-1 hold the nb x nb triangular factor of the panel starting at reflector k (nb = p, the
    last panel possibly fewer); apply_q_model reads the panel width back from T's shape.

Future CUDA kernels
    panel kernel      one CTA (or cluster, for large n and small batch) per matrix, one panel per
                      launch: per column the update from the panel's V, W (two thin GEMVs), the
                      reflector (`householder`: two reductions), the matrix-vector product with the
                      stale trailing matrix (the hot loop; could read an fp16 copy, see the seed
                      write-up) and its two thin corrections, W's column and T's column.
    trailing GEMM     A22 <- A22 - V W^T - W V^T once per panel: a batched rank-2k update (syr2k:
                      only the lower triangle needs it) on tensor cores at fp32 accuracy
                      (3xTF32): its rounding errors are backward errors in A itself.
    back-transform    per panel, last first: Y = V^T Z, Y = T Y, Z -= V Y; batched GEMMs at fp32
                      accuracy (3xTF32 on tensor cores, or sgemm; fp16 operands: see Newton-Schulz below).
    The tridiagonal solver between them has its own kernels (tridiagonal_model.py).

Where the time goes (per matrix; batch x these)
    Reduction 4n^3/3 flops: 2n^3/3 in the panel matrix-vector products, 2n^3/3 in the rank-2k
    updates. The products read the trailing matrix once per column (n^3/3 entries: 4n^3/3 bytes in
    fp32), at 1 flop per 2 bytes, one dependent product after another: the bound is bandwidth and
    latency, not flops. At n = 512, batch 640 that is ~115 GB, ~25 ms at an H200's ~4.8 TB/s.
    Every GEMM of the route together is ~4n^3 flops (rank-2k 2n^3/3, back-transform 2n^3,
    divide-and-conquer merges up to 4n^3/3): 3.4e11 at n = 512, batch 640, a few ms even at fp32
    accuracy (~5 ms at the H200's fp32 SIMT peak, less with 3xTF32); the rest of the tridiagonal
    solver is O(n^2) per merge. So the panel kernel is the route's time, as in the B200 winner's
    profile, and its bytes (fp16 copy, cache residency) and loads in flight are where the later
    CUDA work goes.

Precision and safeguards
    Every step is float32; float64 appears nowhere (the tests widen only to measure).
    - Prescale. The lapack_* high and low magnitude families have entries near 1.8e19 and 1e-19:
      their squares sit at float32's largest value and at the bottom of its normal range, so any
      sum of squares or product of two entries overflows or loses digits, and an fp16 copy of the
      matrix (range 6e-5 .. 65504; the B200 winner's hot-loop bytes) cannot hold them at all. After
      the prescale every matrix has max |entry| in [0.5, 1): the kernels see one range, fixed
      tolerances mean the same thing for every matrix, and the power of two makes it exact. This
      float32 model would pass those families even without it (measured: its only square is the
      max-scaled reflector norm below, and the tridiagonal solver rescales itself); the prescale is
      there for the kernels, and costs the model no accuracy.
    - The reflector's norm is taken of the column divided by its largest entry, so squares of
      entries below ~1e-19 (graded inputs, even after the prescale) neither underflow nor lose
      digits: without it tau and v disagree and H stops being orthogonal (measured on rowscale with
      cond 12: orthogonality 186x to 3950x its gate at n = 33..100). One extra max-reduction per column.

Newton-Schulz: not applied, measured. One step Q <- Q + Q (I - Q^T Q)/2 after the fp32
    back-transform lowered the orthogonality gate's worst value over every checker family at
    n = 17..100 (2 seeds, batch 3) from 1.6% to 0.34% of its limit and left the other gates as
    they were (eigen equation 0.7%, reconstruction 0.2%): it helps, but nothing is near a limit and
    it costs 3n^3 flops, more than the back-transform. It becomes necessary if the back-transform
    GEMMs read fp16 (or TF32, as precise) operands, emulated by rounding V, Z and T V^T Z to fp16:
    orthogonality then measured 28x its limit at n = 17, 10x at n = 100, 2.7-3.6x at n = 512, and
    under 4% everywhere after the step (its Gram product Q^T Q to fp32 accuracy; the correction
    product may read fp16). The eigen equation does not recover, the step only restores
    orthogonality: with fp16 operands and the step it used 295% of its limit at n = 17, 113% at
    n = 64, 90% at n = 100 (every family), 13-17% at n = 256 and 6-9% at n = 512 (dense,
    clustered, lapack_dense_even_spectrum). So: fp32-accurate GEMMs (cuBLAS sgemm or 3xTF32) as
    modelled here, or from about n = 256 up fp16 operands plus the step.
"""
import torch


PANEL = 32


def eigh_pipeline_model(A: torch.Tensor, panel: int = PANEL, tridiagonalize=None, solve_tridiagonal=None):
    """(Q, L) of a symmetric batch: eigenvectors in Q's columns, eigenvalues ascending (batch x n).

    `tridiagonalize(A, panel) -> (d, e, V, T)` replaces step 2 (default tridiagonalize_model) and
    `solve_tridiagonal(d, e) -> (w, Z)` step 3 (default tridiagonal_eigh_model): the CUDA route passes
    its kernels, so the rest of the pipeline is this model's, unchanged."""
    scaled, scale = prescale(A)
    d, e, V, T = (tridiagonalize or tridiagonalize_model)(scaled, panel)
    w, Z = (solve_tridiagonal or tridiagonal_eigh_model)(d, e)
    # A zero matrix has eigenvalues exactly 0, where bisection's pivmin safeguard leaves ~1e-38; the
    # gates measure residuals relative to ||A||_1 = 0 there and accept only exact zeros.
    zero = (A == 0).flatten(1).all(dim=1)
    L = torch.where(zero[:, None], torch.zeros_like(w), w * scale[:, None])
    return apply_q_model(V, T, Z), L


def prescale(A: torch.Tensor):
    """(A / s, s) with s per matrix the power of two that brings max |entry| into [0.5, 1) (1 for zero).

    Why: the lapack_* families reach 1.8e19 and 1e-19, whose squares overflow or go subnormal in
    float32 and which no fp16 copy can hold (see "Precision and safeguards"). A power of two is exact:
    the eigenvalues of A / s are A's divided by s exactly and the eigenvectors are the same.
    """
    scale = power_of_two_scale(A.flatten(1))
    return A / scale[:, None, None], scale


# ---------------------------------------------------------------------------------------------
# Tridiagonalisation: panels of latrd-style columns, one rank-2k update per panel.
# ---------------------------------------------------------------------------------------------

def tridiagonalize_model(A: torch.Tensor, panel: int = PANEL):
    """(d, e, V, T): the diagonal and subdiagonal of Q1^T A Q1, the reflectors and the panels' compact-WY
    factors, with Q1 = apply_q_model(V, T, I) (shapes under "Storage" in the module docstring)."""
    b, n, _ = A.shape
    if A.shape != (b, n, n) or panel < 1:
        raise ValueError(f"need A (batch, n, n) and panel >= 1; got {tuple(A.shape)}, {panel}")
    reflectors = max(n - 2, 0)
    A = A.clone()                     # the trailing matrix, current as of the last panel boundary
    d = torch.empty(b, n, dtype=A.dtype, device=A.device)
    e = torch.empty(b, max(n - 1, 0), dtype=A.dtype, device=A.device)
    V = torch.zeros(b, n, reflectors, dtype=A.dtype, device=A.device)
    T = torch.zeros(b, reflectors, min(panel, reflectors), dtype=A.dtype, device=A.device)
    for k in range(0, reflectors, panel):
        nb = min(panel, reflectors - k)
        W = reduce_panel(A, k, nb, d, e, V[:, :, k:k + nb], T[:, k:k + nb, :nb])
        update_trailing(A, k + nb, V[:, :, k:k + nb], W)
    finish_last_block(A, reflectors, d, e)
    return d, e, V, T


def reduce_panel(A, k, nb, d, e, V, T):
    """Reflectors k .. k+nb-1 against A, stale since the panel began: fills d, e at those columns, the
    panel's V and T (views, written in place), and returns W (batch x n x nb) for the trailing update."""
    W = torch.zeros_like(V)
    for j in range(nb):
        c = k + j
        # Column c as the panel's earlier reflectors left it: A's column minus its entries of V W^T + W V^T.
        column = A[:, c:, c] - matvec(V[:, c:, :j], W[:, c, :j]) - matvec(W[:, c:, :j], V[:, c, :j])
        d[:, c] = column[:, 0]
        v, tau, beta = householder(column[:, 1:])
        e[:, c] = beta
        V[:, c + 1:, j] = v
        below_V, below_W = V[:, c + 1:, :j], W[:, c + 1:, :j]
        Vv = matvec(below_V.mT, v)                          # shared by p's correction and T's column
        Wv = matvec(below_W.mT, v)
        Av = matvec(A[:, c + 1:, c + 1:], v)                # the hot matrix-vector product
        p = tau[:, None] * (Av - matvec(below_V, Wv) - matvec(below_W, Vv))
        W[:, c + 1:, j] = p - (0.5 * tau * (p * v).sum(dim=1))[:, None] * v
        T[:, :j, j] = -tau[:, None] * matvec(T[:, :j, :j], Vv)
        T[:, j, j] = tau
    return W


def matvec(M: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """M x per matrix of the batch (batch x r x s times batch x s)."""
    return (M @ x[..., None])[..., 0]


def householder(x: torch.Tensor):
    """(v, tau, beta) per row of x (batch x m, m >= 2): (I - tau v v^T) x = beta e_1 with v_0 = 1 (slarfg).

    beta = -sign(x_0) ||x|| (no cancellation in x_0 - beta); a row whose tail x_1.. is zero gets
    tau = 0 (H = I) and beta = x_0. The tail's norm is taken of the tail divided by its largest entry.
    """
    alpha, tail = x[:, 0], x[:, 1:]
    largest = tail.abs().amax(dim=1)
    reflect = largest > 0
    unit = torch.where(reflect, largest, torch.ones_like(largest))
    tail_norm = largest * torch.linalg.vector_norm(tail / unit[:, None], dim=1)
    beta = -torch.copysign(torch.hypot(alpha, tail_norm), alpha)
    denominator = torch.where(reflect, alpha - beta, torch.ones_like(beta))
    v = torch.cat([torch.ones_like(alpha[:, None]), tail / denominator[:, None]], dim=1)
    tau = torch.where(reflect, (beta - alpha) / beta, torch.zeros_like(beta))
    return v, tau, torch.where(reflect, beta, alpha)


def update_trailing(A, start, V, W):
    """A[start:, start:] -= V W^T + W V^T over the panel's rows from `start` (the rank-2k GEMM), in place.

    The model keeps the whole square; a kernel may update the lower triangle only (syr2k) and read
    it as a symmetric matrix in the panel's matrix-vector products (symv)."""
    Vt, Wt = V[:, start:], W[:, start:]
    A[:, start:, start:] -= Vt @ Wt.mT + Wt @ Vt.mT


def finish_last_block(A, start, d, e):
    """The last two (or fewer) columns need no reflector: their trailing block is already tridiagonal."""
    n = A.shape[1]
    d[:, start:] = A[:, start:, start:].diagonal(dim1=1, dim2=2)
    if n >= 2:
        e[:, n - 2] = A[:, n - 1, n - 2]


# ---------------------------------------------------------------------------------------------
# Back-transform: Q1 Z as compact-WY block products.
# ---------------------------------------------------------------------------------------------

def apply_q_model(V: torch.Tensor, T: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
    """Q1 Z (batch x n x m) with Q1 = prod over panels of (I - V_k T_k V_k^T), applied last panel first.

    Panel k's reflectors are zero above row k+1, so only Z's rows k+1.. take part in its products.
    """
    panel = max(T.shape[2], 1)
    Z = Z.clone()
    for k in reversed(range(0, V.shape[2], panel)):
        nb = min(panel, V.shape[2] - k)
        Vk, Tk = V[:, k + 1:, k:k + nb], T[:, k:k + nb, :nb]
        Z[:, k + 1:] -= Vk @ (Tk @ (Vk.mT @ Z[:, k + 1:]))
    return Z

# ---- part eigh/tridiagonal_route.py ----
"""Our tridiagonal eigensolver on CUDA (issue 10): tridiagonal_model.tridiagonal_eigh_model with its two
stages replaced by kernels. Not yet run on a GPU.

    scaling, tear, recursion   torch (the model's: a power of two per matrix, one call per tree node shape)
    leaves                     tridiagonal_leaf.cu: one launch per leaf level (warp per leaf)
    merge up to the GEMM       tridiagonal_merge.cu: one launch per merge level (CTA per matrix)
    back-multiplication        torch batched matmuls (tridiagonal_model.back_multiply) between the launches,
                               until a kernel (tensor cores at fp32 accuracy, skipping deflated columns) does it
"""
import torch


LEAF_MAX = 32                     # tridiagonal_leaf.cu: one lane per eigenvalue


def solve_leaves_cuda(d: torch.Tensor, e: torch.Tensor):
    """tridiagonal_model.solve_leaf on tridiagonal_leaf.cu: (w, Z) of a batch of leaves of m <= 32 rows."""
    b, m = d.shape
    d, e = d.contiguous(), e.contiguous()
    w = torch.empty_like(d)
    Z = torch.empty(b, m, m, dtype=d.dtype, device=d.device)
    CUDA.call("eigh_tridiagonal_leaves", d, e, w, Z, b, m)
    return w, Z


def merge_cuda(w1, Z1, w2, Z2, beta):
    """tridiagonal_model.merge on tridiagonal_merge.cu, then the back-multiplication in torch."""
    b, n1 = w1.shape
    n = n1 + w2.shape[1]
    values = torch.empty(b, n, dtype=w1.dtype, device=w1.device)
    S = torch.empty(b, n, n, dtype=w1.dtype, device=w1.device)
    Z1, Z2 = Z1.contiguous(), Z2.contiguous()
    CUDA.call("eigh_tridiagonal_merge", w1.contiguous(), Z1, w2.contiguous(), Z2, beta.contiguous(), values, S,
              b, n1, n - n1)
    return values, back_multiply(Z1, Z2, S)


def tridiagonal_eigh_cuda(d: torch.Tensor, e: torch.Tensor, leaf_size: int = LEAF_SIZE):
    """(w, Z) of tridiag(e, d, e) as tridiagonal_eigh_model, its leaves and merges on our kernels (float32, CUDA)."""
    if d.dtype != torch.float32 or not d.is_cuda or not 1 <= leaf_size <= LEAF_MAX:
        raise ValueError(f"need float32 CUDA tensors and leaf_size in 1..{LEAF_MAX}; got {d.dtype} on {d.device}, "
                         f"{leaf_size}")
    return tridiagonal_eigh_model(d, e, leaf_size, solve_leaves_cuda, merge_cuda)

# ---- part eigh/reduction_route.py ----
"""Our dense eigh route (issue 10), where route.reduction_for(n) says "ours": on the H200 since 2026-12-02.

The pipeline is reduction_model.eigh_pipeline_model with step 2 replaced by tridiagonal_reduction.cu:
    prescale           torch (the model's prescale: an exact power of two per matrix)
    tridiagonalize     tridiagonal_reduction.cu: the panel kernel and the rank-2k update, one call
    solve T            tridiagonal_route.tridiagonal_eigh_cuda: tridiagonal_leaf.cu, tridiagonal_merge.cu and
                       torch batched matmuls for the merges' back-multiplication
    back-transform     apply_q_model, torch batched matmuls in fp32 (placeholder for the compact-WY GEMMs)
"""
import torch


# The panel kernel's CTA size (a multiple of 32, at most 512): a guess to sweep on the GPU
# (512 gives two CTAs an SM at the kernel's <= 64 registers).
PANEL_THREADS = 512
# The form of the panel kernel's matrix-vector product A22 v: "rows" (every trailing row dotted with v, the reference)
# or "tiles" (32 x 32 tiles on and below the diagonal, each read once for its products with v and its transpose's:
# half the bytes, more loads in flight; runs at PANEL_THREADS 512 only). Tiles: 0.64-0.83x the reduction's time at
# every benchmark shape, same similarity (H200, logs/device/20261202T1015Z-aa6375e-eigh_symv_rows_tiles.txt).
SYMV = "tiles"
SYMV_FORMS = {"rows": 0, "tiles": 1}            # tridiagonal_reduction.cu's `symv` argument


def tridiagonalize_cuda(A: torch.Tensor, panel: int = PANEL):
    """tridiagonal_reduction.cu with reduction_model.tridiagonalize_model's signature and outputs (d, e, V, T)."""
    b, n, _ = A.shape
    if A.shape != (b, n, n) or panel != PANEL:
        raise ValueError(f"need A (batch, n, n) and panel {PANEL} (the kernel's); got {tuple(A.shape)}, {panel}")
    if SYMV not in SYMV_FORMS:
        raise ValueError(f"SYMV {SYMV!r}: one of {', '.join(SYMV_FORMS)}")
    reflectors = max(n - 2, 0)
    trailing = A.clone()              # the kernel leaves the trailing matrices in its A
    d = torch.empty(b, n, dtype=A.dtype, device=A.device)
    e = torch.empty(b, max(n - 1, 0), dtype=A.dtype, device=A.device)
    V = torch.empty(b, n, reflectors, dtype=A.dtype, device=A.device)
    T = torch.empty(b, reflectors, min(panel, reflectors), dtype=A.dtype, device=A.device)
    Vp = torch.empty(b, n, panel, dtype=A.dtype, device=A.device)     # the panel's V and W, row-major
    W = torch.empty(b, n, panel, dtype=A.dtype, device=A.device)
    CUDA.call("eigh_tridiagonalize", trailing, d, e, V, T, Vp, W, b, n, PANEL_THREADS, SYMV_FORMS[SYMV])
    return d, e, V, T


def reduction_eigh_cuda(A: torch.Tensor):
    """(Q, L) through our reduction and tridiagonal kernels and the model's back-transform on the GPU."""
    return eigh_pipeline_model(A, PANEL, tridiagonalize_cuda, tridiagonal_eigh_cuda)

# ---- part eigh/result_check.py ----
"""Each matrix of our eigh route accepted on its own residuals, or solved again by a safe route (issue 10).

Why: our route (reduction, divide and conquer, back-transform in fp32, with thresholds for deflation and
cluster shifts) is judged matrix by matrix, and a rare matrix can defeat a threshold that every benchmark
seed passes (seeds/000: a deflation threshold passed both official seeds and failed nearby ones by 2.7x).
So every output is measured on the device that made it, in the units of checks/native/eigh.py's gates,
against ACCEPT, and a matrix over any of them is solved again by the fallback:
    eigen equation   ||A Q - Q diag(L)||_1 / (n eps ||A||_1)                          gate 200, accept < 2
    orthogonality    ||Q^T Q - I||_1 / (n eps)                                        gate 100, accept < 50
    sorted           largest descent L[i] - L[i+1] over n eps max(1, max|L|), x 1    gate 100, accept < 50
    finite           every entry of Q and L
(||X||_1: the largest column sum of |X|). The reconstruction gate is not measured: Q L Q^T - A =
A (Q Q^T - I) - E Q^T with E the eigen equation's residual, so it is small when both measured ones are.

The first two are computed on A / 2^k and L / 2^k (the route's own exact power-of-two prescale: the same
units, and no overflow or subnormals at the lapack_* families' 1e+-19 entries; sorted's unit is not
scale-free and takes L as returned), in fp32 at IEEE accuracy
(PRODUCT "ieee": cuBLAS SGEMM) or as three TF32 tensor-core products ("tf32x3", ~21 bits; the three
products and the split are torch operations). Their rounding is within 4 units of float64 measures (CPU
tests), small against 50 but not against 2: a good matrix (0.03-0.3 units at n = 512 on the H200) rounded over 2
is solved again, which costs time, never accuracy. Cost: two batched n x n x n products (A Q and Q^T Q), ~4 n^3
flops a matrix.
"""
import torch


EPS = 2.0 ** -23
# The eigen equation is accepted under 1% of its gate, the others under half: `popkit diff` (checks/verdicts.py)
# refuses a gate whose share grows past 2x the incumbent's unless both stay under 1%, cuSOLVER's eigen equation
# is at 0.0-0.2%, and ours reached 47 and 63 units on 640x512 mixed and clustered when accepted under 100
# (diff record 2026-12-02T07:18:19Z; under 2: passing diff 07:25:59Z, those two cases then mostly re-solved).
ACCEPT = {"eigen_equation": 2.0, "orthogonality": 50.0, "sorted": 50.0}
PRODUCTS = ("ieee", "tf32x3")


def fp32_product(P: torch.Tensor, Q: torch.Tensor, product: str) -> torch.Tensor:
    """P Q (batched) at fp32 accuracy: one IEEE fp32 product, or three TF32 ones (tf32x3)."""
    if product not in PRODUCTS:
        raise ValueError(f"product {product!r}: expected one of {PRODUCTS}")
    if product == "ieee":
        with matmul_precision("ieee"):
            return P @ Q
    with matmul_precision("tf32"):
        return tf32x3_product(P, Q.mT)               # its split makes the contiguous copies it needs


def column_l1(X: torch.Tensor) -> torch.Tensor:
    """Per matrix: the largest column sum of |X|."""
    return X.abs().sum(dim=-2).amax(dim=-1)


def residual_units(A: torch.Tensor, Q: torch.Tensor, L: torch.Tensor, product: str = "ieee") -> dict:
    """Per matrix, each ACCEPT measure in its gate's units (inf where a unit is zero and the residual is not)."""
    n = A.shape[-1]
    scaled, scale = prescale(A)
    residual = column_l1(fp32_product(scaled, Q, product) - Q * (L / scale[:, None])[:, None, :])
    unit = n * EPS * column_l1(scaled)
    eye = torch.eye(n, dtype=Q.dtype, device=Q.device)
    descent = (L[:, :-1] - L[:, 1:]).amax(dim=-1).clamp(min=0) if n > 1 else torch.zeros_like(unit)
    return {
        "eigen_equation": torch.where(unit > 0, residual / unit.clamp(min=torch.finfo(A.dtype).tiny),
                                      torch.where(residual == 0, 0.0, float("inf"))),
        "orthogonality": column_l1(fp32_product(Q.mT, Q, product) - eye) / (n * EPS),
        "sorted": descent / (n * EPS * L.abs().amax(dim=-1).clamp(min=1.0)),
    }


def rejected(A: torch.Tensor, Q: torch.Tensor, L: torch.Tensor, product: str = "ieee") -> torch.Tensor:
    """Per matrix, True where (Q, L) is not finite or a measure is at or over ACCEPT (a NaN measure too)."""
    finite = torch.isfinite(Q).flatten(1).all(dim=1) & torch.isfinite(L).all(dim=1)
    accepted = finite
    for name, units in residual_units(A, Q, L, product).items():
        accepted = accepted & (units < ACCEPT[name])
    return ~accepted


def accept_or_resolve(A: torch.Tensor, Q: torch.Tensor, L: torch.Tensor, fallback, product: str = "ieee"):
    """(Q, L, resolved): each rejected matrix's Q and L replaced by fallback(A[rejected]) (a batch of the
    rejected matrices, returning (Q, L)); resolved counts them (one host sync a call, to know whether to)."""
    bad = rejected(A, Q, L, product)
    resolved = int(bad.sum())
    if resolved:
        index = bad.nonzero().flatten()
        Q_safe, L_safe = fallback(A[index])
        Q, L = Q.clone(), L.clone()
        Q[index], L[index] = Q_safe, L_safe
    return Q, L, resolved

# ---- part eigh/route.py ----
"""eigh routes: which algorithm decomposes a batch, by n and by device.

| n      | CUDA route                                           | CPU (model)          |
|--------|------------------------------------------------------|----------------------|
| <= 32  | jacobi_small.cu: parallel Jacobi, one CTA/matrix     | jacobi_eigh_model    |
| larger | by reduction_for(n): "cusolver" (cusolver_batched.py:| torch.linalg.eigh    |
|        | one batched call) or "ours" (reduction_route.py:     |                      |
|        | tridiagonal_reduction.cu, tridiagonal_leaf.cu and    |                      |
|        | tridiagonal_merge.cu, torch matmuls between them;    |                      |
|        | each matrix accepted by result_check.py or re-solved |                      |
|        | by cuSOLVER)                                         |                      |

Returns (Q, L): eigenvectors in the columns of Q, eigenvalues ascending.
"""
import torch


SMALL_MAX_N = 32
# How n > SMALL_MAX_N runs on CUDA: "cusolver", "ours", or "by n": ours for OURS_MIN_N <= n <= OURS_MAX_N.
# The range is measured (stage bench, logs/device/20261202T0715Z-eigh_stages.txt): ours/cuSOLVER
# 1.333 at 40x176, 0.347 at 40x352, 0.714 at 640x512, 0.883 at 60x1024, 1.445 at 8x2048, every gate passing.
REDUCTION = "by n"
OURS_MIN_N = 177
OURS_MAX_N = 1024
# "ours": how result_check.py forms A Q and Q^T Q ("ieee" or "tf32x3": a sweep decides).
CHECK_PRODUCT = "ieee"
# How many calls and matrices took "ours" since import, and how many of those matrices its fallback re-solved:
# issue 10 asks how often the fallback fires on each case, and popkit's checker reports each case's increase
# of a ROUTE_COUNTERS dict beside its results (check, bench, diff).
ROUTE_COUNTERS = {"calls": 0, "matrices": 0, "resolved": 0}


def jacobi_small_cuda(A: torch.Tensor):
    b, n, _ = A.shape
    Q = torch.empty_like(A)
    L = torch.empty(b, n, dtype=A.dtype, device=A.device)
    CUDA.call("eigh_jacobi_small", A, Q, L, b, n)
    return Q, L


def ours_checked_cuda(A: torch.Tensor):
    """Our route, each matrix accepted on its residuals or solved again by the batched cuSOLVER call."""
    Q, L = reduction_eigh_cuda(A)
    Q, L, resolved = accept_or_resolve(A, Q, L, BATCHED_SYEV, CHECK_PRODUCT)
    ROUTE_COUNTERS["calls"] += 1
    ROUTE_COUNTERS["matrices"] += A.shape[0]
    ROUTE_COUNTERS["resolved"] += resolved
    return Q, L


def library_eigh(A: torch.Tensor):
    L, Q = torch.linalg.eigh(A)
    return Q, L


def reduction_for(n: int) -> str:
    """The route REDUCTION names for size n: "cusolver" or "ours"."""
    if REDUCTION == "by n":
        return "ours" if OURS_MIN_N <= n <= OURS_MAX_N else "cusolver"
    if REDUCTION not in ("cusolver", "ours"):
        raise ValueError(f"REDUCTION is {REDUCTION!r}: expected 'cusolver', 'ours' or 'by n'")
    return REDUCTION


def custom_kernel(data: torch.Tensor):
    """Symmetric eigendecomposition of a batch: returns (Q, L)."""
    A = data.contiguous()
    n = A.shape[-1]
    if n <= SMALL_MAX_N:
        return jacobi_small_cuda(A) if A.is_cuda else jacobi_eigh_model(A)
    if not A.is_cuda:
        return library_eigh(A)
    return ours_checked_cuda(A) if reduction_for(n) == "ours" else BATCHED_SYEV(A)

CUDA.configure("popkit_eigh", CUDA_PARTS, CUDA_UNITS)
if torch.cuda.is_available():
    CUDA.load()   # at import, so the grader's pre-run (python3 submission.py) pays the compile

if __name__ == "__main__":
    print(f"eigh: CUDA kernels ready" if CUDA.compile_s is not None else "eigh: no GPU, CPU models only")
