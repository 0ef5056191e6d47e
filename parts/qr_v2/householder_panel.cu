// qr_v2, blocked route: factor one panel of every matrix and build its
// compact-WY factor T, so the trailing update can run as large GEMMs.
//
// For the panel A[k0:n, k0:k0+w) (m = n - k0 rows, w <= W columns) it computes
// the w reflectors exactly as geqrf does (LAPACK slarfg per column, applied to
// the rest of the panel), writes R and the vector tails back into A and tau,
// and writes
//   Vt (w x m, row-major) : row c = v_c with the implicit 1 and the zeros made
//                            explicit, ready for batched matmuls;
//   T  (w x w, row-major) : the upper-triangular factor with
//                            H_0 H_1 ... H_{w-1} = I - V T V^T  (LAPACK slarft, forward,
//                            column-wise): T[c][c] = tau_c,
//                            T[0:c, c] = -tau_c T[0:c, 0:c] (V[:, 0:c]^T v_c).
// The caller then applies Q_panel^T = I - V T^T V^T to the trailing columns.
//
// One block reduction per column. Column c's reflector is v = [1; x s] with
// x = A[c+1:, c], s = 1 / (alpha - beta). Every number column c needs is an
// entry of one W-vector summed over the rows below c,
//   p_j = sum_{r > c} x_r A[r, j]        (the row r as it is now),
// because row r holds x_j[r] (v_j[r] = s_j x_j[r]) in columns j < c and the
// current entries in columns j >= c:
//   p_c       = ||x||^2                       -> beta, tau, s (slarfg)
//   j > c     : v^T A[:, j] = A[c, j] + s p_j -> the update of column j
//   j < c     : v_j^T v = s_j (x_j[c] + s p_j) -> column c of T (G = V^T V)
// Column c's tail is scaled (and beta put on the diagonal) only when the panel is
// stored: written back at every column, column c took a select chain over the W
// register columns a row (ncu at 20e0644: selects were 22% of the kernel's
// instructions); s_j and beta_j wait in shared memory.
// Row c itself is broadcast through shared memory by its owner. So a column
// costs W FMAs per owned row, a butterfly that leaves lane l with the warp's
// sum of one entry, one __syncthreads, a 16-term cross-warp sum, and W - g0 FMAs
// per owned row for the update (g0: the first column of c's group of 8): the
// barrier count per column is one (the previous kernel had six and walked shared
// memory four times).
// ||x||^2 outside [2^-100, 2^100] (underflow or overflow risk) takes a
// scaled two-pass norm, uniformly for the block; an exactly zero x gives
// tau = 0 as in geqrf.
//
// Launch: one CTA per matrix (grid = batch), at most max_threads (<= 512) threads;
// thread t owns rows t, t + blockDim, ... (R of them, the least of 1, 2, 4, 8
// that covers m) with all W columns in registers: W = 32 for R <= 2, 16 for
// R = 4, 8 for R = 8 (at 512 threads: m <= 1024, 2048, 4096).
// Cluster mode (CL = 2, 4 or 8 CTAs a matrix, a thread block cluster): the team's
// threads split the rows the same way (thread t of rank q owns rows q blockDim + t,
// + CL blockDim, ...); per column each CTA's warp 0 sums its warps' vectors and
// pushes the totals (rank 0: and row c) into every CTA's shared memory (st.async,
// counted on the receiver's mbarrier), so a CTA waits on its own barrier and reads
// its own shared memory (a cluster.sync and remote loads per column took 3 us a
// column at 2x4096, ncu 2026-12-01: barrier and long-scoreboard stalls). Same arithmetic as one
// CTA (the model is model.factor_panel_model either way); a small batch of tall
// panels then uses CL times the SMs and keeps 32 columns (at 512 threads and two
// rows a thread, 8 CTAs hold 8192 rows).
// Why it is fast: the panel is read and written once, lives in registers, and
// each column is one barrier (two with a cluster); the O(n^3) work is left to the
// trailing update.
#include <cooperative_groups.h>

#include "compact_wy.cuh"
#include "panel_team.cuh"
#include "device_utils.cuh"
#include "launch.cuh"

namespace {

constexpr int kPanelThreads = 512;
constexpr int kPanelWarps = kPanelThreads / 32;
constexpr int kStageRows = 128;             // rows of H staged per round of the coalesced store
constexpr int kColumnGroup = 8;             // panel columns a copy of the column loop's body (divides W)

// ||x|| with x scaled by its largest entry (both passes are team-wide); for the rare columns whose
// plain sum of squares left the safe range. x holds this thread's entries of the column below the
// diagonal (zero elsewhere).
template <int R, int CL>
__device__ float careful_norm(const float (&x)[R], float* scratch, float* slot) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) amax = fmaxf(amax, fabsf(x[i]));
    amax = popkit::team_reduce<CL, true>(amax, scratch, slot);
    if (amax == 0.f) return 0.f;
    float ssq = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) { const float y = x[i] / amax; ssq += y * y; }
    return amax * sqrtf(popkit::team_reduce<CL, false>(ssq, scratch, slot));
}

// Whether column c keeps x until the panel is stored (lazy) or takes v and beta at once. VARIANT
__host__ __device__ constexpr bool lazy_scale(int R, int CL) { return CL == 1; }

// The panel of one matrix, factored by a team of CL CTAs (CL = 1: one CTA; else a thread block cluster
// whose CTAs split the rows and add their partial sums through distributed shared memory).
template <int R, int W, int CL>
__device__ __forceinline__ void factor_panel(float* __restrict__ A, float* __restrict__ tau, float* __restrict__ Vt,
                                             float* __restrict__ T, int n, int k0, int w) {
    constexpr int kShift = popkit::entry_shift<W>();
    constexpr bool kLazy = lazy_scale(R, CL);
    static_assert(kShift >= 0, "W must be 8, 16 or 32");
    __shared__ float s_red[2][kPanelWarps][W];   // per-warp partial sums, double-buffered by column
    __shared__ float s_row[2][W];                // row c, broadcast by its owner
    __shared__ float s_coef[kPanelWarps][W];     // the update's coefficients, per warp
    __shared__ float s_G[W][W + 1];              // v_a . v_b for a < b
    __shared__ float s_T[W][W + 1];
    __shared__ float s_tau[W];
    __shared__ float s_scale[W], s_beta[W];      // s_j and beta_j, applied when the panel is stored
    __shared__ float scratch[32];
    __shared__ popkit::ColumnExchange<CL> s_exchange;   // CL > 1: the team's column sums and row c
    __shared__ float s_slot;                     // CL > 1: team_reduce's exchange
    __shared__ float s_stage[kStageRows][W + 1];    // H's rows on their way out
    const int m = n - k0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int entry = lane >> kShift;            // the entry of the reduced vector this lane holds
    const bool entry_lane = (lane & ((1 << kShift) - 1)) == 0;   // the first lane holding its entry
    const int matrix = blockIdx.x / CL, rank = blockIdx.x % CL;  // a cluster's CTAs are consecutive
    const int first = rank * blockDim.x + threadIdx.x, stride = blockDim.x * CL;   // rows first + i stride
    float* Ab = A + (size_t)matrix * n * n + (size_t)k0 * n + k0;
    if constexpr (CL > 1) {                      // before any CTA pushes into another's barriers
        s_exchange.init();
        cooperative_groups::this_cluster().sync();
    }

    float a[R][W];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = first + i * stride;
#pragma unroll
        for (int j = 0; j < W; ++j) a[i][j] = (r < m && j < w) ? Ab[(size_t)r * n + j] : 0.f;
    }

    // The columns go in groups of kColumnGroup: the group loop is unrolled (W / kColumnGroup copies of
    // the body), the column loop inside a group stays rolled. Register arrays need compile-time
    // indices, so column c is picked by a select tree over its group's columns (3 deep) and, not
    // lazy, written back by selects over them only; the update skips the columns left of the group
    // (their coefficients are zero). Fully unrolled (W copies, d147c6d) the object was 2.3 MB and took
    // 42 s to compile; one rolled loop selected over all W columns and updated all W (twice the work).
#pragma unroll
    for (int g0 = 0; g0 < W; g0 += kColumnGroup) {
#pragma unroll 1
        for (int c = g0; c < min(w, g0 + kColumnGroup); ++c) {
            const int buf = c & 1;
            float x[R];                                         // column c below the diagonal, else 0
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const float xc = popkit::select_entry<kColumnGroup>(a[i] + g0, c - g0);
                x[i] = (first + i * stride > c) ? xc : 0.f;    // rows >= m hold zeros
            }
            float p[W];
#pragma unroll
            for (int j = 0; j < W; ++j) p[j] = 0.f;
#pragma unroll
            for (int i = 0; i < R; ++i) {
#pragma unroll
                for (int j = 0; j < W; ++j) p[j] += x[i] * a[i][j];
            }
            const float warp_total = popkit::warp_transpose_sum<W>(p, lane);
            if (entry_lane) s_red[buf][warp][entry] = warp_total;
            if (first == c) {                                   // row c is row 0 of thread c (of rank 0)
#pragma unroll
                for (int j = 0; j < W; ++j) s_row[buf][j] = a[0][j];
            }
            __syncthreads();

            float p_entry = 0.f;                                // this lane's entry, over the whole team
            const float* row_c = s_row[buf];
            if constexpr (CL == 1) {
                for (int src = 0; src < warps; ++src) p_entry += s_red[buf][src][entry];
            } else {
                // Warp 0 pushes this CTA's totals (rank 0, which holds row c < 32: and row c) into every
                // CTA. W = 32 here: every lane holds an entry.
                static_assert(W == 32, "the cluster panel pushes one entry a lane");
                if (warp == 0) {
                    float total = 0.f;
                    for (int src = 0; src < warps; ++src) total += s_red[buf][src][entry];
                    s_exchange.push(c, rank, 0, entry, total, s_row[buf][entry]);
                }
                p_entry = s_exchange.wait_and_sum(c, entry);
                row_c = s_exchange.row_of(c);
            }
            const float alpha = row_c[c];
            const float ssq = __shfl_sync(0xffffffffu, p_entry, c << kShift);
            float xnorm;
            if (popkit::sum_of_squares_safe(ssq)) {
                xnorm = sqrtf(ssq);
            } else {                                            // uniform: every thread has the same ssq
                bool nonzero = false;
#pragma unroll
                for (int i = 0; i < R; ++i) nonzero |= x[i] != 0.f;
                const bool any = popkit::team_reduce<CL, true>(nonzero ? 1.f : 0.f, scratch, &s_slot) > 0.f;
                xnorm = any ? careful_norm<R, CL>(x, scratch, &s_slot) : 0.f;
            }
            const popkit::Reflector ref = popkit::make_reflector(alpha, xnorm);
            // lane's entry j: j > c -> tau v^T A[:, j]; j < c -> v_j^T v (column c of G)
            const float vdot = row_c[entry] + ref.scale * p_entry;
            if (warp == 0 && entry < c && entry_lane) s_G[entry][c] = kLazy ? s_scale[entry] * vdot : vdot;
            if (threadIdx.x == 0) {
                s_tau[c] = ref.tau;
                s_scale[c] = ref.scale;
                s_beta[c] = ref.beta;
            }
            if (entry_lane) s_coef[warp][entry] = (entry > c) ? ref.tau * vdot : 0.f;
            __syncwarp();

            // v: x s below c, 1 at row c, 0 above; column c itself keeps x (and alpha) until the store.
            float v[R];
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const int r = first + i * stride;
                v[i] = (r > c) ? x[i] * ref.scale : (r == c) ? 1.f : 0.f;
                if constexpr (!kLazy) {                          // column c takes v (and beta) now
                    const float stored = (r > c) ? v[i] : ref.beta;
#pragma unroll
                    for (int j = g0; j < g0 + kColumnGroup; ++j) a[i][j] = (j == c && r >= c) ? stored : a[i][j];
                }
            }
#pragma unroll
            for (int j = g0; j < W; ++j) {
                const float coef_j = s_coef[warp][j];           // a broadcast read; zero for j <= c
#pragma unroll
                for (int i = 0; i < R; ++i) a[i][j] -= coef_j * v[i];
            }
        }
    }
    if constexpr (CL == 1) __syncthreads();
    else cooperative_groups::this_cluster().sync();   // no CTA leaves while another reads its shared memory

    popkit::build_compact_wy<W>(s_T, s_G, s_tau, w);

    const size_t vbase = (size_t)matrix * w * m;
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = first + i * stride;
        if (r >= m) continue;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            if (j >= w) break;
            Vt[vbase + (size_t)j * m + r] = (r < j) ? 0.f : (r == j) ? 1.f : kLazy ? a[i][j] * s_scale[j] : a[i][j];
        }
    }
    // H's panel goes out through shared memory, kStageRows rows at a time, so that a warp stores
    // whole rows: written by each thread from its registers, a warp store touched 32 rows (32
    // partial sectors per instruction, W instructions per row). Rows first + i stride of the
    // threads are blockDim.x consecutive rows from row0.
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int row0 = rank * blockDim.x + i * stride;
        for (int base = 0; base < (int)blockDim.x && row0 + base < m; base += kStageRows) {
            const int local = threadIdx.x - base;
            if (local >= 0 && local < kStageRows) {
                const int r = first + i * stride;          // = row0 + base + local
#pragma unroll
                for (int j = 0; j < W; ++j)
                    s_stage[local][j] = (!kLazy || r < j) ? a[i][j] : (r == j) ? s_beta[j] : a[i][j] * s_scale[j];
            }
            __syncthreads();
            for (int idx = threadIdx.x; idx < kStageRows * W; idx += blockDim.x) {
                const int r = idx / W, j = idx % W, row = row0 + base + r;
                if (base + r < (int)blockDim.x && row < m && j < w) Ab[(size_t)row * n + j] = s_stage[r][j];
            }
            __syncthreads();
        }
    }
    __syncthreads();
    if (rank != 0) return;                             // every CTA has T and tau; one writes them
    for (int idx = threadIdx.x; idx < w * w; idx += blockDim.x)
        T[(size_t)matrix * w * w + idx] = s_T[idx / w][idx % w];
    if (threadIdx.x < w) tau[(size_t)matrix * n + k0 + threadIdx.x] = s_tau[threadIdx.x];
}

template <int R, int W>
__global__ void __launch_bounds__(kPanelThreads, R == 1 ? 2 : 1)   // R = 1: 64 registers, two 512-thread CTAs an SM
qr_panel_kernel(float* A, float* tau, float* Vt, float* T, int n, int k0, int w) {
    factor_panel<R, W, 1>(A, tau, Vt, T, n, k0, w);
}

template <int R, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(kPanelThreads)
qr_panel_cluster_kernel(float* A, float* tau, float* Vt, float* T, int n, int k0, int w) {
    factor_panel<R, 32, CL>(A, tau, Vt, T, n, k0, w);
}

// Rows per thread for a panel of m rows on `cluster` CTAs of at most `threads` threads (0: too tall for
// the team's registers). Clusters are compiled for 1 and 2 rows a thread (32-column panels) only.
int rows_per_thread(int m, int threads, int cluster) {
    if (threads < 32 || threads > kPanelThreads || (cluster != 1 && cluster != 2 && cluster != 4 && cluster != 8))
        return 0;
    for (int rows = 1; rows <= (cluster == 1 ? 8 : 2); rows *= 2)
        if (m <= rows * threads * cluster) return rows;
    return 0;
}

template <int R, int W>
cudaError_t launch_panel(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n, int k0,
                         int w) {
    const int threads = ((n - k0 + R - 1) / R + 31) / 32 * 32;
    return popkit::launch(to, qr_panel_kernel<R, W>, batch, threads, 0, A, tau, Vt, T, n, k0, w);
}

template <int R, int CL>
cudaError_t launch_cluster_panel(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n,
                                 int k0, int w) {
    const int threads = ((n - k0 + R * CL - 1) / (R * CL) + 31) / 32 * 32;
    return popkit::launch(to, qr_panel_cluster_kernel<R, CL>, batch * CL, threads, 0, A, tau, Vt, T, n, k0, w);
}

template <int CL>
cudaError_t launch_cluster_panel(popkit::Launcher* to, int rows, float* A, float* tau, float* Vt, float* T, int batch,
                                 int n, int k0, int w) {
    return rows == 1 ? launch_cluster_panel<1, CL>(to, A, tau, Vt, T, batch, n, k0, w)
                     : launch_cluster_panel<2, CL>(to, A, tau, Vt, T, batch, n, k0, w);
}

}  // namespace

// The panel width for a panel of m rows on `cluster` CTAs (1, 2, 4 or 8) of at most max_threads threads:
// what R rows per thread leave room for in registers (0: none fits).
POPKIT_EXPORT int qr_panel_width(int m, int max_threads, int cluster) {
    switch (rows_per_thread(m, max_threads, cluster)) {
        case 1: case 2: return 32;
        case 4: return 16;
        case 8: return 8;
        default: return 0;
    }
}

POPKIT_EXPORT int qr_panel_columns_fits(int m, int cluster);
POPKIT_EXPORT int qr_panel_columns(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n,
                                   int k0, int w, int cluster);

// One panel of every matrix on `cluster` CTAs of at most max_threads threads; a panel of at most
// columns_max_rows rows a CTA goes to householder_panel_columns.cu's kernel (0: never). The kernel is
// launched now when `to` is null, else recorded in to's graph (launch.cuh).
POPKIT_EXPORT int qr_panel_to(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n, int k0,
                              int w, int max_threads, int cluster, int columns_max_rows) {
    const int m = n - k0;
    if (batch < 1 || n < 1 || k0 < 0 || k0 >= n || w < 1 || w > qr_panel_width(m, max_threads, cluster) || w > m)
        return (int)cudaErrorInvalidValue;
    if (m <= cluster * columns_max_rows && qr_panel_columns_fits(m, cluster))
        return qr_panel_columns(to, A, tau, Vt, T, batch, n, k0, w, cluster);
    const int rows = rows_per_thread(m, max_threads, cluster);
    switch (cluster) {
        case 2: return (int)launch_cluster_panel<2>(to, rows, A, tau, Vt, T, batch, n, k0, w);
        case 4: return (int)launch_cluster_panel<4>(to, rows, A, tau, Vt, T, batch, n, k0, w);
        case 8: return (int)launch_cluster_panel<8>(to, rows, A, tau, Vt, T, batch, n, k0, w);
        default: break;
    }
    switch (rows) {
        case 1: return (int)launch_panel<1, 32>(to, A, tau, Vt, T, batch, n, k0, w);
        case 2: return (int)launch_panel<2, 32>(to, A, tau, Vt, T, batch, n, k0, w);
        case 4: return (int)launch_panel<4, 16>(to, A, tau, Vt, T, batch, n, k0, w);
        default: return (int)launch_panel<8, 8>(to, A, tau, Vt, T, batch, n, k0, w);
    }
}

// qr_panel_to, launched now (route.factor_panel_cuda's entry point).
POPKIT_EXPORT int qr_panel(float* A, float* tau, float* Vt, float* T, int batch, int n, int k0, int w,
                           int max_threads, int cluster, int columns_max_rows) {
    return qr_panel_to(nullptr, A, tau, Vt, T, batch, n, k0, w, max_threads, cluster, columns_max_rows);
}
