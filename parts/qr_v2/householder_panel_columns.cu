// qr_v2, blocked route: the panel kernel with one lane per column, for panels of at most 512 rows.
//
// It computes what householder_panel.cu computes (the same reflectors as geqrf, R and the vector tails
// in A, tau, Vt and T; model.factor_panel_model), with the panel laid out the other way round: lane j
// of every warp owns column j, warp q owns rows q RW .. q RW + RW - 1 (RW = 8, 16 or 32 rows, all in
// registers). Per column c:
//   x   = column c below the diagonal: lane c of each warp puts its RW entries (zero at and above the
//         diagonal) in shared memory, where its warp reads them, once for p and once for the update
//         (not held in registers: RW more of them spilled at RW = 32); warps wholly above the
//         diagonal sit the column out;
//   p_j = sum_{r > c} x_r A[r, j]: RW FMAs per lane, no butterfly (the lane already owns column j),
//         then the warps' partial sums through shared memory: one __syncthreads per column;
//   p_c = ||x||^2 -> beta, tau, s (slarfg; the scaled two-pass norm when ||x||^2 leaves [2^-100,
//         2^100]); j > c: v^T A[:, j] = A[c, j] + s p_j, the update coefficient; j < c: the Gram
//         entry v_j^T v for T;
//   row c is final after this column (R right of the diagonal, beta on it, the tails of earlier
//         reflectors left of it): the owner warp writes it to A at once, so the row's registers,
//         never read again, need no select chain to update them;
//   A[r, j] -= tau (v^T A[:, j]) s x_r for rows r > c, lanes j > c: one FMA per owned row.
// Lane c keeps its column's tail unscaled (x) with the scale s_c beside it: scaling it in place
// would cost RW instructions a column for one active lane. The stores of V, Vt and the Gram
// entries multiply by it. panel_columns_model.py replays this bookkeeping in torch (tested against
// model.factor_panel_model).
//
// Launch: a team of CL CTAs per matrix (CL = 1, or a thread block cluster of 2, 4 or 8: grid = batch
// CL), each of ceil(m / (CL RW)) warps (at most 16), RW the least of 8, 16, 32 that fits m <= 16 CL RW;
// warp q of rank k owns the rows from (k warps + q) RW. With a cluster, each CTA's column sums go to
// every CTA's shared memory (popkit::ColumnExchange: st.async pushes counted on the receiver's
// mbarrier, no cluster barrier a column), and so does row c from the CTA that holds it.
// Why it is fast: against householder_panel.cu (thread = row, all W columns in registers), a column
// costs each warp ~150 instructions instead of ~430: no W-wide butterfly (31 shuffles and their
// selects), no select chains to pick column c out of registers and write it back, and the update
// touches only the lane's own column; loads and stores of A are whole rows a warp (coalesced).
#include <cooperative_groups.h>

#include "compact_wy.cuh"
#include "device_utils.cuh"
#include "launch.cuh"
#include "panel_team.cuh"

namespace {

constexpr int kColumnsWidth = 32;           // lanes = columns
constexpr int kColumnsMaxWarps = 16;
constexpr int kColumnsMaxRows = kColumnsMaxWarps * 32;
constexpr int kRedLd = kColumnsMaxWarps + 4;    // 20: lane j's 16 partial sums read as float4s, no conflicts

template <int RW, int CL>
__device__ __forceinline__ void factor_panel_columns(float* __restrict__ A, float* __restrict__ tau,
                                                     float* __restrict__ Vt, float* __restrict__ T, int n, int k0,
                                                     int w) {
    constexpr int W = kColumnsWidth;
    __shared__ __align__(16) float s_x[kColumnsMaxWarps][RW];      // column c of each warp's rows
    __shared__ __align__(16) float s_red[2][W][kRedLd];           // p_j's warp partials, by column parity
    __shared__ float s_row[2][W];                                 // row c, by column parity
    __shared__ float s_G[W][W + 1];
    __shared__ float s_T[W][W + 1];
    __shared__ float s_tau[W];
    __shared__ float scratch[32];
    __shared__ popkit::ColumnExchange<CL> s_exchange;             // CL > 1: the team's column sums, row c
    __shared__ float s_slot;                                      // CL > 1: team_reduce's exchange
    const int m = n - k0, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int matrix = blockIdx.x / CL, rank = blockIdx.x % CL;  // a cluster's CTAs are consecutive
    const int team_warp = rank * warps + warp, row0 = team_warp * RW;
    float* Ab = A + (size_t)matrix * n * n + (size_t)k0 * n + k0;

    for (int idx = threadIdx.x; idx < 2 * W * kRedLd; idx += blockDim.x) (&s_red[0][0][0])[idx] = 0.f;
    float a[RW];
#pragma unroll
    for (int i = 0; i < RW; ++i) a[i] = 0.f;
    if (lane < w) {                    // row by row through one running pointer: RW addresses held for
        const float* src = Ab + (size_t)row0 * n + lane;    // the final stores spilled at RW = 32
#pragma unroll
        for (int i = 0; i < RW; ++i, src += n) a[i] = row0 + i < m ? *src : 0.f;
    }
    float my_scale = 1.f;              // this lane's reflector scale once its column is factored
    if constexpr (CL > 1) {            // before any CTA pushes into another's barriers
        s_exchange.init();
        cooperative_groups::this_cluster().sync();
    } else {
        __syncthreads();
    }

#pragma unroll 1
    for (int c = 0; c < w; ++c) {
        const int buf = c & 1, owner = c / RW, local = c - owner * RW;
        const bool below = team_warp >= owner;             // the warp holds rows below the diagonal
        __syncwarp();                                        // the warp's reads of the last column's x done
        if (below && lane == c) {                            // x: zero at and above the diagonal
#pragma unroll
            for (int i = 0; i < RW; i += 4) {
                float4 v = make_float4(a[i], a[i + 1], a[i + 2], a[i + 3]);
                if (team_warp == owner)
                    v = make_float4(i > local ? v.x : 0.f, i + 1 > local ? v.y : 0.f, i + 2 > local ? v.z : 0.f,
                                    i + 3 > local ? v.w : 0.f);
                *reinterpret_cast<float4*>(&s_x[warp][i]) = v;
            }
        }
        __syncwarp();
        float part[4] = {0.f, 0.f, 0.f, 0.f};                // four chains: the FMAs' latency overlaps
        if (below) {
#pragma unroll
            for (int i = 0; i < RW; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&s_x[warp][i]);
                part[0] = fmaf(v.x, a[i], part[0]);
                part[1] = fmaf(v.y, a[i + 1], part[1]);
                part[2] = fmaf(v.z, a[i + 2], part[2]);
                part[3] = fmaf(v.w, a[i + 3], part[3]);
            }
        }
        s_red[buf][lane][warp] = (part[0] + part[1]) + (part[2] + part[3]);
        if (team_warp == owner) s_row[buf][lane] = popkit::select_entry<RW>(a, local);
        __syncthreads();

        float p = 0.f;                                       // p_lane over this CTA's rows below c
#pragma unroll
        for (int q = 0; q < kColumnsMaxWarps; q += 4) {
            const float4 v = *reinterpret_cast<const float4*>(&s_red[buf][lane][q]);
            p += (v.x + v.y) + (v.z + v.w);
        }
        const float* row_c = s_row[buf];
        if constexpr (CL > 1) {                              // ... and over the team's
            if (warp == 0) s_exchange.push(c, rank, owner / warps, lane, p, s_row[buf][lane]);
            p = s_exchange.wait_and_sum(c, lane);
            row_c = s_exchange.row_of(c);
        }
        const float ssq = __shfl_sync(0xffffffffu, p, c);
        float xnorm;
        if (popkit::sum_of_squares_safe(ssq)) {
            xnorm = sqrtf(ssq);
        } else {                                             // uniform: every thread has the same ssq
            float amax = 0.f;                                // lane 0 a warp: the others would repeat it
            if (below && lane == 0) {
                for (int i = 0; i < RW; ++i) amax = fmaxf(amax, fabsf(s_x[warp][i]));
            }
            amax = popkit::team_reduce<CL, true>(amax, scratch, &s_slot);
            float scaled = 0.f;
            if (below && lane == 0 && amax > 0.f) {
                for (int i = 0; i < RW; ++i) scaled += (s_x[warp][i] / amax) * (s_x[warp][i] / amax);
            }
            scaled = popkit::team_reduce<CL, false>(scaled, scratch, &s_slot);
            xnorm = amax > 0.f ? amax * sqrtf(scaled) : 0.f;
        }
        const float alpha = row_c[c], row_entry = row_c[lane];
        const popkit::Reflector ref = popkit::make_reflector(alpha, xnorm);
        const float vdot = row_entry + ref.scale * p;        // j > c: v^T A[:, j]; j < c: v_j^T v / s_j
        if (warp == 0 && lane < c) s_G[lane][c] = my_scale * vdot;
        if (threadIdx.x == 0) s_tau[c] = ref.tau;
        if (team_warp == owner && lane < w)
            Ab[(size_t)c * n + lane] = lane < c ? my_scale * row_entry
                                     : lane == c ? ref.beta : row_entry - ref.tau * vdot;
        if (lane == c) my_scale = ref.scale;
        const float coef = lane > c ? ref.tau * vdot * ref.scale : 0.f;
        if (below) {
#pragma unroll
            for (int i = 0; i < RW; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&s_x[warp][i]);
                a[i] = fmaf(-coef, v.x, a[i]);
                a[i + 1] = fmaf(-coef, v.y, a[i + 1]);
                a[i + 2] = fmaf(-coef, v.z, a[i + 2]);
                a[i + 3] = fmaf(-coef, v.w, a[i + 3]);
            }
        }
    }
    if constexpr (CL == 1) __syncthreads();
    else cooperative_groups::this_cluster().sync();      // no CTA leaves while another reads its shared memory
    popkit::build_compact_wy<W>(s_T, s_G, s_tau, w);

    // Rows w .. m-1 hold only reflector tails (rows below w were written column by column).
    if (lane < w) {
        float* dst = Ab + (size_t)row0 * n + lane;
#pragma unroll
        for (int i = 0; i < RW; ++i, dst += n)
            if (row0 + i >= w && row0 + i < m) *dst = my_scale * a[i];
        float* vt = Vt + (size_t)matrix * w * m + (size_t)lane * m;       // Vt's row j = lane
#pragma unroll
        for (int i = 0; i < RW; ++i) {
            const int r = row0 + i;
            if (r < m) vt[r] = r < lane ? 0.f : r == lane ? 1.f : my_scale * a[i];
        }
    }
    __syncthreads();
    if (rank != 0) return;                               // every CTA has T and tau; one writes them
    for (int idx = threadIdx.x; idx < w * w; idx += blockDim.x)
        T[(size_t)matrix * w * w + idx] = s_T[idx / w][idx % w];
    if (threadIdx.x < w) tau[(size_t)matrix * n + k0 + threadIdx.x] = s_tau[threadIdx.x];
}

template <int RW>
__global__ void __launch_bounds__(kColumnsMaxWarps * 32)
qr_panel_columns_kernel(float* A, float* tau, float* Vt, float* T, int n, int k0, int w) {
    factor_panel_columns<RW, 1>(A, tau, Vt, T, n, k0, w);
}

template <int RW, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(kColumnsMaxWarps * 32)
qr_panel_columns_cluster_kernel(float* A, float* tau, float* Vt, float* T, int n, int k0, int w) {
    factor_panel_columns<RW, CL>(A, tau, Vt, T, n, k0, w);
}

template <int RW, int CL>
int launch_columns(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n, int k0, int w) {
    const int warps = (n - k0 + CL * RW - 1) / (CL * RW);
    if constexpr (CL == 1)
        return (int)popkit::launch(to, qr_panel_columns_kernel<RW>, batch, warps * 32, 0, A, tau, Vt, T, n, k0, w);
    else
        return (int)popkit::launch(to, qr_panel_columns_cluster_kernel<RW, CL>, batch * CL, warps * 32, 0, A, tau,
                                   Vt, T, n, k0, w);
}

template <int CL>
int launch_columns(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n, int k0, int w) {
    const int m = n - k0;
    if (m <= CL * kColumnsMaxWarps * 8) return launch_columns<8, CL>(to, A, tau, Vt, T, batch, n, k0, w);
    if (m <= CL * kColumnsMaxWarps * 16) return launch_columns<16, CL>(to, A, tau, Vt, T, batch, n, k0, w);
    return launch_columns<32, CL>(to, A, tau, Vt, T, batch, n, k0, w);
}

}  // namespace

// Whether qr_panel_columns takes a panel of m rows on `cluster` CTAs.
POPKIT_EXPORT int qr_panel_columns_fits(int m, int cluster) {
    return (cluster == 1 || cluster == 2 || cluster == 4 || cluster == 8) && m >= 1 && m <= cluster * kColumnsMaxRows;
}

// householder_panel.cu's qr_panel for a panel of m = n - k0 <= 512 cluster rows (cluster = 1, 2, 4 or 8
// CTAs a matrix) and w <= 32 columns (else cudaErrorInvalidValue), the same outputs; launched now when `to`
// is null, else recorded in to's graph (launch.cuh).
POPKIT_EXPORT int qr_panel_columns(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n,
                                   int k0, int w, int cluster) {
    const int m = n - k0;
    if (batch < 1 || k0 < 0 || !qr_panel_columns_fits(m, cluster) || w < 1 || w > kColumnsWidth || w > m)
        return (int)cudaErrorInvalidValue;
    switch (cluster) {
        case 1: return launch_columns<1>(to, A, tau, Vt, T, batch, n, k0, w);
        case 2: return launch_columns<2>(to, A, tau, Vt, T, batch, n, k0, w);
        case 4: return launch_columns<4>(to, A, tau, Vt, T, batch, n, k0, w);
        default: return launch_columns<8>(to, A, tau, Vt, T, batch, n, k0, w);
    }
}
