// cholesky, blocked route in one call: the right-looking loop runs in the library, every step on
// our own kernels, so no Python (and no cuBLAS launch) sits between two steps.
//
// For k0 = 0, nb, 2 nb, ... (w = min(nb, n - k0)):
//   1. cholesky_tiled.cu factors the diagonal block and writes X = inv(L11);
//   2. the panel:                  L21 = A21 X^T      (a tf32x3 product)
//   3. the trailing update:        A22 -= L21 L21^T   (a tf32x3 product, lower tiles only)
// Step 0 reads A and writes L; A is neither copied nor changed, and L's upper triangle gets zeros from
// the diagonal kernel (inside each block) and the panel (its mirror), so no pass over the whole matrix
// remains (a clone and a tril_ were ~80 us at 1x4096; model.blocked_tf32x3_model is the algorithm).
//
// The products are tf32x3 (~21 bits on TF32 tensor cores, tf32x3.cuh): cholesky_product_wgmma.cu on a
// compute capability 9.0 GPU (the build targets sm_90a there), cholesky_product_mma.cu elsewhere. From
// step 1 on the panel runs in place: its grid has one column tile (w <= 128), so a CTA reads all of
// its P rows before it writes them. On the H200 the loop has a look-ahead (blocked_lookahead below):
// the next diagonal block is factored in the same launch as the rest of each trailing update, so the
// chain of diagonal blocks (~43 us each at batch 1) runs under the update.
// Why it is fast: the whole factorization is one call, so no host time sits between steps (the
// Python loop spent ~25 us per step on 5 launches, views and precision switches, more than the GPU
// needed for most steps of a 1 x 4096 matrix); the products run on tensor cores at ~fp32 accuracy
// and the trailing update skips the upper tiles.
#include "device_utils.cuh"
#include "tf32x3.cuh"
#include "tiled_block.cuh"

// The other parts' entry points (the same translation unit in the built file).
POPKIT_EXPORT int cholesky_tiled(const float* src, float* dst, float* xinv, const float* diag_max, int batch, int n,
                                 int ld, int stride, int tdim, int ts, int halves);
POPKIT_EXPORT int tf32x3_product_mma(tf32x3::Product op, int batch, int mode);
POPKIT_EXPORT int tf32x3_product_wgmma(tf32x3::Product op, int batch, int mode);
POPKIT_EXPORT int cholesky_lookahead_step(tf32x3::Product op, tiled::DiagBlock diag, tf32x3::PanelCopy panel,
                                          int batch);

namespace {

// max_i a_ii of each matrix (the pivot floor's input): the driver's first launch, one CTA per matrix.
// A NaN on the diagonal is skipped here; it still turns its own pivot into NaN.
__global__ void diagonal_max_kernel(const float* A, float* diag_max, int n) {
    __shared__ float scratch[32];
    const float* a = A + blockIdx.x * (size_t)n * n;
    float top = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) top = fmaxf(top, a[(size_t)i * (n + 1)]);
    top = popkit::block_max(top, scratch);
    if (threadIdx.x == 0) diag_max[blockIdx.x] = top;
}

// Whether the current GPU takes cholesky_product_wgmma.cu (compute capability 9.0; the loader builds for
// the running GPU, so the sm_90a kernels are there).
bool has_wgmma() {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major == 9;
}

// The panel product of a w-column block: L21 = A21 X^T (X = inv(L11) in xinv, w x w), and zeros at
// mirror, where L21^T would sit right of the diagonal block.
tf32x3::Product panel_of(const float* a21, float* l21, float* mirror, const float* xinv, int n, long long stride,
                         int m, int w) {
    return {a21, n, stride, xinv, w, (long long)w * w, a21, l21, n, stride, mirror, m, w, w};
}

// The blocked loop with a look-ahead (cholesky_lookahead.cu; wgmma GPUs, 16 x 16 diagonal blocks, n a
// multiple of 4): per step the panel, then one launch for the trailing update in which the CTA of its
// first tile factors that tile, the next diagonal block, while the others update the rest. The panel is
// written out of place, into `panel` ((n - nb) x nb floats per matrix), and CTAs of the update that
// staged its rows copy it into L: no CTA then reads what another writes, so each panel tile is shared by
// four CTAs (tf32x3::kPanelSplit: H200 sweep at 339906f, us, split / two CTAs per tile: 1x4096 2001 /
// 2057, 8x2048 1327 / 1343, 1x8192 5761 / 5894). Same arguments, result and order of operations as
// cholesky_blocked (model.blocked_tf32x3_model).
int blocked_lookahead(const float* A, float* L, float* xinv, float* panel, const float* diag_max, int batch, int n,
                      int nb, int halves) {
    const long long stride = (long long)n * n;
    const int w0 = n < nb ? n : nb;
    int err = cholesky_tiled(A, L, w0 < n ? xinv : nullptr, diag_max, batch, w0, n, (int)stride, 16, 8, halves);
    for (int k0 = 0; !err && k0 + nb < n; k0 += nb) {    // block k0 is factored, its inverse in xinv
        const int next = k0 + nb, m = n - next, w2 = m < nb ? m : nb;
        const float* src = (k0 == 0 ? A : L) + (size_t)k0 * n + k0;
        float* block = L + (size_t)k0 * n + k0;
        const float* a21 = src + (size_t)nb * n;
        float* l21 = block + (size_t)nb * n;
        const long long panel_stride = (long long)(n - nb) * nb;
        const tf32x3::Product out_of_place = {a21, n, stride, xinv, nb, (long long)nb * nb, a21, panel, nb,
                                              panel_stride, nullptr, m, nb, nb};
        err = tf32x3_product_wgmma(out_of_place, batch, tf32x3::kPanelSplit);
        if (err) break;
        // A22 -= L21 L21^T on the lower tiles, and block `next` (A22's first tile) factored in place
        const tf32x3::Product trailing = {panel, nb, panel_stride, panel, nb, panel_stride, a21 + nb, l21 + nb, n,
                                          stride, nullptr, m, m, nb};
        const tiled::DiagBlock diag = {l21 + nb, l21 + nb, xinv, diag_max, w2, n, stride, halves};
        err = cholesky_lookahead_step(trailing, diag, {l21, block + nb, n, stride}, batch);
    }
    return err;
}

// The blocked loop in two levels (model.blocked_two_level_model; wgmma GPUs): blocks of nb columns
// inside outer panels of `outer` columns. Each block's trailing update reaches only the columns of its
// outer panel (one product over the whole m x cols rectangle; the upper tiles it also writes are
// overwritten later by the diagonal blocks and the panels' mirrors); the rest waits for one update per
// outer panel with K = outer. A step with K = nb reads and writes the whole trailing triangle, ~n^3 /
// (3 nb) x 4 bytes over the run (~0.37 TB at n = 32768, nb = 128): outer = 512 cuts that 4x.
int blocked_two_level(const float* A, float* L, float* xinv, const float* diag_max, int batch, int n, int nb,
                      int outer, int tdim, int ts, int halves, decltype(&tf32x3_product_mma) product) {
    const long long stride = (long long)n * n;
    for (int s0 = 0; s0 < n; s0 += outer) {
        const int s1 = n - s0 < outer ? n : s0 + outer;
        for (int k0 = s0; k0 < s1; k0 += nb) {
            const int w = n - k0 < nb ? n - k0 : nb;
            const float* src = (k0 == 0 ? A : L) + (size_t)k0 * n + k0;
            float* block = L + (size_t)k0 * n + k0;
            if (k0 + w == n)
                return cholesky_tiled(src, block, nullptr, diag_max, batch, w, n, (int)stride, tdim, ts, 0);
            int err = cholesky_tiled(src, block, xinv, diag_max, batch, w, n, (int)stride, tdim, ts, halves);
            if (err) return err;
            const int m = n - k0 - w, cols = s1 - k0 - w;
            const float* a21 = src + (size_t)w * n;
            float* l21 = block + (size_t)w * n;
            err = product(panel_of(a21, l21, block + w, xinv, n, stride, m, w), batch, tf32x3::kPanel);
            if (err) return err;
            if (cols == 0) continue;
            // the update inside the outer panel: every row below, the outer panel's remaining columns
            const tf32x3::Product inner = {l21, n, stride, l21, n, stride, a21 + w, l21 + w, n, stride,
                                           nullptr, m, cols, w};
            err = product(inner, batch, tf32x3::kColumn);
            if (err) return err;
        }
        // the deferred update right of the outer panel, K = s1 - s0, on the lower tiles
        const float* c_in = (s0 == 0 ? A : L) + (size_t)s1 * n + s1;
        const float* l21s = L + (size_t)s1 * n + s0;
        const tf32x3::Product rest = {l21s, n, stride, l21s, n, stride, c_in, L + (size_t)s1 * n + s1, n, stride,
                                      nullptr, n - s1, n - s1, s1 - s0};
        const int err = product(rest, batch, tf32x3::kTrailing);
        if (err) return err;
    }
    return (int)cudaSuccess;
}

}  // namespace

// Factor `batch` n x n matrices: A (read only; its lower triangle) into L (written whole: the factor
// and zeros above the diagonal). work: batch x (nb x nb + 1) floats of workspace: the diagonal blocks'
// inverses, then max_i a_ii of each matrix, which the driver's first kernel writes (the pivot floor;
// torch's own reduction before the call cost ~10 us of host time, as much as a small step's kernel).
// panel: NULL, or batch x (n - nb) x nb floats where the look-ahead writes each panel out of place.
// (tdim, ts, halves): cholesky_tiled.cu's shape for the diagonal blocks (tdim * ts >= nb) and whether its
// 128-blocks go by halves (tiled_block.cuh halves_steps). nb: a multiple of 32, at most 128. outer: 0, or
// a multiple of nb for blocked_two_level (taken when nb < outer < n); otherwise lookahead: take
// blocked_lookahead where it applies (nb = 128 and a panel buffer).
// portable: use cholesky_product_mma.cu even on a wgmma GPU (to check and time the other GPUs' path).
// n * n < 2^31 (the products' 32-bit row offsets). Step 0 reads A and writes L, later steps work in L,
// so A is never copied; the diagonal kernel writes zeros above its block's diagonal and each panel's
// mirror gets zeros (from the panel kernel, or in the look-ahead from the CTAs that copy the panel),
// which together cover L's upper triangle.
POPKIT_EXPORT int cholesky_blocked(const float* A, float* L, float* work, float* panel, int batch, int n, int nb,
                                   int tdim, int ts, int halves, int lookahead, int outer, int portable) {
    if (batch < 1 || n < 1 || (long long)n * n >= (1LL << 31) || nb < tf32x3::kChunk || nb > tf32x3::kTile ||
        nb % tf32x3::kChunk != 0 || tdim * ts < nb || outer < 0 || (outer && outer % nb != 0) || !A || !L || !work)
        return (int)cudaErrorInvalidValue;
    float* xinv = work;
    float* diag_max = work + (size_t)batch * nb * nb;
    diagonal_max_kernel<<<batch, 256>>>(A, diag_max, n);
    if (const cudaError_t err = cudaGetLastError()) return (int)err;
    const bool wgmma = !portable && has_wgmma();
    const auto product = wgmma ? tf32x3_product_wgmma : tf32x3_product_mma;
    if (outer > nb && outer < n && wgmma)                // kColumn is wgmma-only
        return blocked_two_level(A, L, xinv, diag_max, batch, n, nb, outer, tdim, ts, halves, product);
    if (lookahead && wgmma && tdim == 16 && ts == 8 && n % 4 == 0 && nb == tf32x3::kTile && panel)
        return blocked_lookahead(A, L, xinv, panel, diag_max, batch, n, nb, halves);   // aligned rows
    const long long stride = (long long)n * n;
    for (int k0 = 0; k0 < n; k0 += nb) {
        const int w = n - k0 < nb ? n - k0 : nb;
        const float* src = (k0 == 0 ? A : L) + (size_t)k0 * n + k0;     // this step's input: A, then L
        float* block = L + (size_t)k0 * n + k0;
        if (k0 + w == n) return cholesky_tiled(src, block, nullptr, diag_max, batch, w, n, (int)stride, tdim, ts, 0);
        int err = cholesky_tiled(src, block, xinv, diag_max, batch, w, n, (int)stride, tdim, ts, halves);
        if (err) return err;
        const int m = n - k0 - w;
        const float* a21 = src + (size_t)w * n;
        float* l21 = block + (size_t)w * n;
        err = product(panel_of(a21, l21, block + w, xinv, n, stride, m, w), batch, tf32x3::kPanel);
        if (err) return err;
        // A22 -= L21 L21^T on the lower tiles
        const tf32x3::Product trailing = {l21, n, stride, l21, n, stride, a21 + w, l21 + w, n, stride,
                                          nullptr, m, m, w};
        err = product(trailing, batch, tf32x3::kTrailing);
        if (err) return err;
    }
    return (int)cudaSuccess;
}
