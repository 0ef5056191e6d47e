// qr_v2, the blocked route in one CUDA call: for k0 = 0, w, 2w, ... factor the panel (qr_panel,
// householder_panel.cu), then apply it to the trailing columns (qr_update, householder_update.cu):
// model.blocked_qr with update = apply_block_reflector_tf32x3, the same loop. Vt and T live in the
// caller's workspace (batch x 32 x n and batch x 32 x 32 floats), which every panel reuses.
// Why: no Python between the launches and no allocation per panel; at 40x176 the host time between
// launches was about half of the wall time (scripts/profile_route.py at d11541b: wall 0.68 ms, GPU
// busy 0.29 ms).
#include "device_utils.cuh"

POPKIT_EXPORT int qr_panel_width(int m, int max_threads, int cluster);
POPKIT_EXPORT int qr_panel(float* A, float* tau, float* Vt, float* T, int batch, int n, int k0, int w,
                           int max_threads, int cluster, int columns_max_rows);
POPKIT_EXPORT int qr_update(float* C, int ldc, int stride, const float* Vt, const float* T, int batch, int m, int nc,
                            int w, int target_ctas);

// H: the batch's matrices (batch x n x n, a copy of A), factored in place; tau: batch x n; panels on
// `cluster` CTAs of at most max_threads threads (on one CTA, up to columns_max_rows rows by the
// lane-per-column kernel); updates split a tile's rows over several CTAs while they launch fewer than
// update_ctas CTAs (qr_update's target_ctas). n^2 < 2^31. A panel width qr_update lacks (8: past
// m = 2048 rows on one CTA of 512 threads) is cudaErrorInvalidValue, before anything runs.
POPKIT_EXPORT int qr_blocked(float* H, float* tau, float* Vt, float* T, int batch, int n, int max_threads,
                             int cluster, int columns_max_rows, int update_ctas) {
    if (batch < 1 || n < 1 || (long long)n * n >= (1LL << 31)) return (int)cudaErrorInvalidValue;
    for (int k0 = 0; k0 < n;) {                  // every width first: no half-factored batch on a refusal
        const int m = n - k0, width = qr_panel_width(m, max_threads, cluster);
        if (width == 0 || (width < m && width != 16 && width != 32)) return (int)cudaErrorInvalidValue;
        k0 += min(width, m);
    }
    for (int k0 = 0; k0 < n;) {
        const int m = n - k0, w = min(qr_panel_width(m, max_threads, cluster), m);
        int err = qr_panel(H, tau, Vt, T, batch, n, k0, w, max_threads, cluster, columns_max_rows);
        if (err == 0 && k0 + w < n)
            err = qr_update(H + (size_t)k0 * n + k0 + w, n, n * n, Vt, T, batch, m, n - k0 - w, w, update_ctas);
        if (err != 0) return err;
        k0 += w;
    }
    return 0;
}
