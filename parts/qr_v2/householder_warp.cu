// qr_v2, n <= 32: the whole Householder QR of a matrix in one warp, several matrices per CTA.
//
// Computes H, tau in torch.geqrf form, as householder_small.cu does. Lane l owns row l of its
// matrix (32 columns in registers, zeros past n). Column c is householder_panel.cu's step (its
// outline has the math): one vector p_j = sum_{r > c} x_r A[r, j], x = A[c+1:, c], gives ||x||^2,
// the update's v^T A[:, j] = A[c, j] + s p_j and nothing else is needed (no T: no trailing update
// follows). popkit::warp_transpose_sum leaves lane l with entry l summed over the warp, which here
// is the whole matrix: a column takes no CTA barrier, only __syncwarp around the per-warp copies
// of row c and of the coefficients in shared memory. ||x||^2 outside [2^-100, 2^100] takes the
// norm scaled by max |x_i| (two warp reductions); an exactly zero x gives tau = 0 as in geqrf.
// Model: model.factor_panel_model(H, tau, 0, n), the same one-reduction step (its T goes unused).
//
// Launch: kWarpMatrices warps per CTA, one matrix each; grid = ceil(batch / kWarpMatrices).
// Why it is fast: ~350 instructions and no CTA barrier per column, where householder_small.cu
// walks shared memory with two __syncthreads per column (64 us at 20x32 on the H200, d11541b).
#include "device_utils.cuh"

namespace {

constexpr int kWarpMaxN = 32;
constexpr int kWarpMatrices = 4;
constexpr int kWarpColumnGroup = 8;         // columns a copy of the column loop's body

__global__ void __launch_bounds__(32 * kWarpMatrices)
qr_warp_kernel(const float* __restrict__ A, float* __restrict__ H, float* __restrict__ tau, int batch, int n) {
    __shared__ float s_row[kWarpMatrices][kWarpMaxN];      // row c of each warp's matrix
    __shared__ float s_coef[kWarpMatrices][kWarpMaxN];     // tau v^T A[:, j] for j > c, else 0
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int matrix = blockIdx.x * kWarpMatrices + warp;
    if (matrix >= batch) return;                           // a whole warp; the kernel has no CTA barrier
    const float* Ab = A + (size_t)matrix * n * n;

    float a[kWarpMaxN];
#pragma unroll
    for (int j = 0; j < kWarpMaxN; ++j) a[j] = (lane < n && j < n) ? Ab[(size_t)lane * n + j] : 0.f;

    // Columns in groups of kWarpColumnGroup, as householder_panel.cu's column loop: the group loop unrolled,
    // the column loop rolled; column c is picked and written back by selects over its group's 8 columns
    // (not all 32), and the update skips the columns left of the group (their coefficients are zero).
#pragma unroll
    for (int g0 = 0; g0 < kWarpMaxN; g0 += kWarpColumnGroup) {
#pragma unroll 1
        for (int c = g0; c < min(n, g0 + kWarpColumnGroup); ++c) {
            float xc = 0.f;                                    // a chain: a select tree spilled 8 bytes here
#pragma unroll
            for (int j = g0; j < g0 + kWarpColumnGroup; ++j) xc = (j == c) ? a[j] : xc;
            const float x = (lane > c) ? xc : 0.f;
            float p[kWarpMaxN];
#pragma unroll
            for (int j = 0; j < kWarpMaxN; ++j) p[j] = x * a[j];
            const float p_lane = popkit::warp_transpose_sum<kWarpMaxN>(p, lane);   // entry `lane`, the matrix
            if (lane == c) {
#pragma unroll
                for (int j = 0; j < kWarpMaxN; ++j) s_row[warp][j] = a[j];
            }
            __syncwarp();
            const float ssq = __shfl_sync(0xffffffffu, p_lane, c);
            float xnorm;
            if (popkit::sum_of_squares_safe(ssq)) {
                xnorm = sqrtf(ssq);
            } else {                                           // uniform over the warp
                const float amax = popkit::warp_max(fabsf(x));
                const float y = amax > 0.f ? x / amax : 0.f;
                xnorm = amax > 0.f ? amax * sqrtf(popkit::warp_sum(y * y)) : 0.f;
            }
            const popkit::Reflector ref = popkit::make_reflector(s_row[warp][c], xnorm);
            s_coef[warp][lane] = (lane > c) ? ref.tau * (s_row[warp][lane] + ref.scale * p_lane) : 0.f;
            if (lane == 0) tau[(size_t)matrix * n + c] = ref.tau;
            __syncwarp();

            // Rows below c take v_r = x_r s, row c takes v_c = 1 (and beta), rows above stay.
            const float v = (lane > c) ? x * ref.scale : (lane == c) ? 1.f : 0.f;
            const float stored = (lane > c) ? v : ref.beta;
#pragma unroll
            for (int j = g0; j < g0 + kWarpColumnGroup; ++j) a[j] = (j == c && lane >= c) ? stored : a[j];
#pragma unroll
            for (int j = g0; j < kWarpMaxN; ++j) a[j] -= s_coef[warp][j] * v;  // zero for j <= c
            __syncwarp();                                      // s_row and s_coef are rewritten next column
        }
    }

    if (lane < n) {
#pragma unroll
        for (int j = 0; j < kWarpMaxN; ++j)
            if (j < n) H[(size_t)matrix * n * n + (size_t)lane * n + j] = a[j];
    }
}

}  // namespace

POPKIT_EXPORT int qr_warp(const float* A, float* H, float* tau, int batch, int n) {
    if (n < 1 || n > kWarpMaxN || batch < 1) return (int)cudaErrorInvalidValue;
    qr_warp_kernel<<<(batch + kWarpMatrices - 1) / kWarpMatrices, 32 * kWarpMatrices>>>(A, H, tau, batch, n);
    return (int)cudaGetLastError();
}
