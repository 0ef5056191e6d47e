// qr_v2, blocked route: factor one panel of every matrix and build its
// compact-WY factor T, so the trailing update can run as tensor-core GEMMs.
//
// For the panel A[k0:n, k0:k0+w) (m = n - k0 rows, w <= 32 columns) it computes
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
// Launch: one CTA of 512 threads per matrix; grid = batch. The panel sits in
// shared memory column-major with an odd leading dimension (bank-conflict-free
// both when loading rows from global memory and when a warp walks a column),
// m * w * 4 bytes (64 KiB at n = 512, w = 32).
// Why it is fast: the panel is read and written once; each column costs two
// block reductions and one pass over the remaining panel columns, all on chip;
// the O(n^3) work is left to cuBLAS in the trailing update.
#include "device_utils.cuh"

namespace {

constexpr int kPanelThreads = 512;
constexpr int kPanelMaxW = 32;

__global__ void __launch_bounds__(kPanelThreads)
qr_panel_kernel(float* __restrict__ A, float* __restrict__ tau, float* __restrict__ Vt,
                float* __restrict__ T, int n, int k0, int w) {
    extern __shared__ float s[];                          // w columns of ld floats
    __shared__ float s_G[kPanelMaxW][kPanelMaxW + 1];     // V^T V, strictly upper part
    __shared__ float s_T[kPanelMaxW][kPanelMaxW + 1];
    __shared__ float s_tau[kPanelMaxW];
    __shared__ float scratch[32];
    const int m = n - k0, ld = m | 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = kPanelThreads / 32;
    float* Ab = A + (size_t)blockIdx.x * n * n;

    for (int idx = threadIdx.x; idx < m * w; idx += blockDim.x) {
        const int r = idx / w, c = idx % w;
        s[c * ld + r] = Ab[(size_t)(k0 + r) * n + k0 + c];
    }
    __syncthreads();

    for (int c = 0; c < w; ++c) {
        float* col = s + c * ld;
        // Reflector for panel column c (local rows c..m-1), norm scaled by the largest entry.
        float amax = 0.f;
        for (int r = c + 1 + threadIdx.x; r < m; r += blockDim.x) amax = fmaxf(amax, fabsf(col[r]));
        amax = popkit::block_max(amax, scratch);
        float ssq = 0.f;
        if (amax > 0.f)
            for (int r = c + 1 + threadIdx.x; r < m; r += blockDim.x) { const float x = col[r] / amax; ssq += x * x; }
        ssq = popkit::block_sum(ssq, scratch);
        const popkit::Reflector ref = popkit::make_reflector(col[c], amax * sqrtf(ssq));
        for (int r = c + 1 + threadIdx.x; r < m; r += blockDim.x) col[r] *= ref.scale;
        __syncthreads();                                  // col[c] still holds alpha until here
        if (threadIdx.x == 0) { col[c] = ref.beta; s_tau[c] = ref.tau; }
        __syncthreads();
        if (ref.tau != 0.f) {                             // apply to panel columns c+1..w-1, a warp each
            for (int j = c + 1 + warp; j < w; j += warps) {
                float* cj = s + j * ld;
                float dot = (lane == 0) ? cj[c] : 0.f;
                for (int r = c + 1 + lane; r < m; r += 32) dot += col[r] * cj[r];
                dot = ref.tau * popkit::warp_sum(dot);
                if (lane == 0) cj[c] -= dot;
                for (int r = c + 1 + lane; r < m; r += 32) cj[r] -= dot * col[r];
            }
        }
        __syncthreads();
    }

    // G[a][b] = v_a . v_b for a < b (v_b is zero above row b and 1 at row b).
    for (int pair = warp; pair < w * w; pair += warps) {
        const int a = pair / w, b = pair % w;
        if (a >= b) continue;
        float dot = (lane == 0) ? s[a * ld + b] : 0.f;
        for (int r = b + 1 + lane; r < m; r += 32) dot += s[a * ld + r] * s[b * ld + r];
        dot = popkit::warp_sum(dot);
        if (lane == 0) s_G[a][b] = dot;
    }
    __syncthreads();
    // T column by column; thread j < c computes row j of column c.
    for (int c = 0; c < w; ++c) {
        const int j = threadIdx.x;
        if (j < c) {
            float acc = 0.f;
            for (int l = j; l < c; ++l) acc += s_T[j][l] * s_G[l][c];
            s_T[j][c] = -s_tau[c] * acc;
        } else if (j < w) {
            s_T[j][c] = (j == c) ? s_tau[c] : 0.f;
        }
        __syncthreads();
    }

    const size_t vbase = (size_t)blockIdx.x * w * m;
    for (int idx = threadIdx.x; idx < m * w; idx += blockDim.x) {
        const int r = idx / w, c = idx % w;
        const float v = s[c * ld + r];
        Ab[(size_t)(k0 + r) * n + k0 + c] = v;
    }
    for (int idx = threadIdx.x; idx < w * m; idx += blockDim.x) {
        const int c = idx / m, r = idx % m;
        Vt[vbase + idx] = (r < c) ? 0.f : (r == c) ? 1.f : s[c * ld + r];
    }
    for (int idx = threadIdx.x; idx < w * w; idx += blockDim.x)
        T[(size_t)blockIdx.x * w * w + idx] = s_T[idx / w][idx % w];
    if (threadIdx.x < w) tau[(size_t)blockIdx.x * n + k0 + threadIdx.x] = s_tau[threadIdx.x];
}

}  // namespace

POPKIT_EXPORT int qr_panel_smem_bytes(int m, int w) { return (int)((size_t)(m | 1) * w * sizeof(float)); }

// The widest panel (32, 16 or 8 columns) whose m rows fit in one CTA's shared
// memory on this GPU; 0 when none does.
POPKIT_EXPORT int qr_panel_width(int m) {
    static int budget = -1;
    if (budget < 0) {
        int device = 0, optin = 0;
        cudaFuncAttributes attr;
        if (cudaGetDevice(&device) != cudaSuccess ||
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
            cudaFuncGetAttributes(&attr, qr_panel_kernel) != cudaSuccess)
            return 0;
        budget = optin - (int)attr.sharedSizeBytes;
    }
    for (int w = kPanelMaxW; w >= 8; w /= 2)
        if (qr_panel_smem_bytes(m, w) <= budget) return w;
    return 0;
}

POPKIT_EXPORT int qr_panel(float* A, float* tau, float* Vt, float* T, int batch, int n, int k0, int w) {
    if (batch < 1 || n < 1 || k0 < 0 || k0 >= n || w < 1 || w > kPanelMaxW || w > n - k0)
        return (int)cudaErrorInvalidValue;
    const int smem = qr_panel_smem_bytes(n - k0, w);
    static int granted = 0;                // dynamic + static shared memory over 48 KiB needs the opt-in
    const cudaError_t err = popkit::allow_dynamic_smem(qr_panel_kernel, smem, granted);
    if (err != cudaSuccess) return (int)err;
    qr_panel_kernel<<<batch, kPanelThreads, smem>>>(A, tau, Vt, T, n, k0, w);
    return (int)cudaGetLastError();
}
