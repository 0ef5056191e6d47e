// qr_v2, the blocked route in one CUDA call: for k0 = 0, w, 2w, ... factor the panel (qr_panel,
// householder_panel.cu), then apply it to the trailing columns (qr_update, householder_update.cu):
// model.blocked_qr with update = apply_block_reflector_tf32x3, the same loop. Vt and T live in the
// caller's workspace (batch x 32 x n and batch x 32 x 32 floats), which every panel reuses.
// Why: no Python between the launches and no allocation per panel; at 40x176 the host time between
// launches was about half of the wall time (scripts/profile_route.py at d11541b: wall 0.68 ms, GPU
// busy 0.29 ms).
//
// Look-ahead (qr_blocked_lookahead, route.LOOKAHEAD): panel k's update is two launches, (a) on the next
// panel's columns only and (b) on the rest; panel k + 1 waits for (a) alone and runs beside (b), which
// touches other columns of the same rows. (a) and (b) of panel k + 1 wait for panel k + 1 and for (b) of
// panel k (their columns must hold panel k's update first). Vt and T alternate between two buffers by
// panel parity (the workspace is twice the one-level loop's): panel k + 2 overwrites panel k's buffer
// only after (a) of k + 1, which follows both readers of panel k's. The launches are nodes of a CUDA
// graph with exactly these dependencies (launch.cuh), launched on the default queue: concurrency on one
// device without naming a queue. Launch shape: the same kernels, grids and blocks as the loop; the rest
// (b) picks its row split at target beside_ctas instead of update_ctas, so that fewer of its CTAs leave
// SMs free for the panel beside it.
// Same arithmetic: a column's update depends on the panel's Vt and T and on the row split of its launch,
// not on which columns share the launch; both parts take the split the whole trailing update would have
// (qr_update_split on all nc columns), so at beside_ctas == update_ctas the outputs are bitwise those of
// qr_blocked (the order of independent launches is all that changes). A lower beside_ctas changes the
// rest's split, hence the order of its fp32 partial sums (same products: model.blocked_qr either way).
// Why faster where the batch is small: there a panel keeps a few dozen CTAs busy and the latency-bound
// update leaves SMs idle; with the panel beside the bulk of the update, the critical path is roughly
// panel + narrow update per panel. H200, grader-style diff (run 34a): 60x1024 0.96x, 8x2048 0.95x; but
// 2x4096 1.045x slower (route.LOOKAHEAD keeps the loop there; why is open, docs/priors.md).
// The graph is built and instantiated once per shape and route parameters (and alignment of H and Vt,
// which picks kernels), then kept; a call with other buffers rebinds its nodes' arguments
// (cudaGraphExecKernelNodeSetParams, node by node in launch order) instead of building it again.
#include "device_utils.cuh"
#include "launch.cuh"

POPKIT_EXPORT int qr_panel_width(int m, int max_threads, int cluster);
POPKIT_EXPORT int qr_panel_to(popkit::Launcher* to, float* A, float* tau, float* Vt, float* T, int batch, int n, int k0,
                              int w, int max_threads, int cluster, int columns_max_rows);
POPKIT_EXPORT int qr_update_split(int batch, int m, int nc, int target_ctas);
POPKIT_EXPORT int qr_update_to(popkit::Launcher* to, float* C, int ldc, int stride, const float* Vt, const float* T,
                               int batch, int m, int nc, int w, int split);

namespace {

constexpr int kMaxWidth = 32;                   // the widest panel: Vt and T buffers are sized for it

// One factorization's buffers and route parameters (the arguments of qr_blocked_lookahead).
struct Factorization {
    float *H, *tau, *Vt, *T;
    int batch, n, max_threads, cluster, columns_max_rows, update_ctas, beside_ctas;
};

// The width of the panel at column k0 (0: past the end).
int panel_width(int n, int k0, int max_threads, int cluster) {
    return k0 < n ? min(qr_panel_width(n - k0, max_threads, cluster), n - k0) : 0;
}

// Whether every panel gets a width qr_update takes (8, past m = 2048 rows on one CTA of 512 threads, and
// none at all are refused), checked before anything runs: no half-factored batch on a refusal.
bool widths_fit(int batch, int n, int max_threads, int cluster) {
    if (batch < 1 || n < 1 || (long long)n * n >= (1LL << 31)) return false;
    for (int k0 = 0; k0 < n;) {
        const int m = n - k0, width = qr_panel_width(m, max_threads, cluster);
        if (width == 0 || (width < m && width != 16 && width != 32)) return false;
        k0 += min(width, m);
    }
    return true;
}

// Every launch of the look-ahead factorization into `to` (build or rebind: the same walk either way).
int add_lookahead(popkit::Launcher& to, const Factorization& f) {
    const size_t vt_buffer = (size_t)f.batch * kMaxWidth * f.n, t_buffer = (size_t)f.batch * kMaxWidth * kMaxWidth;
    cudaGraphNode_t narrow = nullptr, rest = nullptr;       // the previous panel's update parts (a) and (b)
    for (int k0 = 0, parity = 0; k0 < f.n; parity ^= 1) {
        const int m = f.n - k0, w = panel_width(f.n, k0, f.max_threads, f.cluster);
        const int next = panel_width(f.n, k0 + w, f.max_threads, f.cluster);
        float* Vt = f.Vt + parity * vt_buffer;
        float* T = f.T + parity * t_buffer;
        to.after({narrow});
        int err = qr_panel_to(&to, f.H, f.tau, Vt, T, f.batch, f.n, k0, w, f.max_threads, f.cluster,
                              f.columns_max_rows);
        if (err != 0 || next == 0) return err;
        const cudaGraphNode_t panel = to.last();
        const int nc = f.n - k0 - w;
        float* C = f.H + (size_t)k0 * f.n + k0 + w;
        to.after({panel, rest});
        err = qr_update_to(&to, C, f.n, f.n * f.n, Vt, T, f.batch, m, next, w,
                           qr_update_split(f.batch, m, nc, f.update_ctas));
        if (err != 0) return err;
        narrow = to.last();
        rest = nullptr;
        if (nc > next) {
            err = qr_update_to(&to, C + next, f.n, f.n * f.n, Vt, T, f.batch, m, nc - next, w,
                               qr_update_split(f.batch, m, nc, f.beside_ctas));
            if (err != 0) return err;
            rest = to.last();
        }
        k0 += w;
    }
    return 0;
}

// Same kernels, grids and dependencies: everything but the buffers (H's and Vt's alignment picks kernels).
bool same_plan(const Factorization& a, const Factorization& b) {
    return a.batch == b.batch && a.n == b.n && a.max_threads == b.max_threads && a.cluster == b.cluster &&
           a.columns_max_rows == b.columns_max_rows && a.update_ctas == b.update_ctas &&
           a.beside_ctas == b.beside_ctas && ((size_t)a.H & 15) == ((size_t)b.H & 15) &&
           ((size_t)a.Vt & 15) == ((size_t)b.Vt & 15);
}

bool same_buffers(const Factorization& a, const Factorization& b) {
    return a.H == b.H && a.tau == b.tau && a.Vt == b.Vt && a.T == b.T;
}

// The latest shape's graph, its nodes bound to the latest call's buffers. Never destroyed at exit: the
// process's end frees it, and a destructor at static destruction could run after the driver's teardown.
struct LookaheadGraph {
    Factorization f = {};
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    popkit::Launcher launcher;

    void release() {
        if (exec != nullptr) cudaGraphExecDestroy(exec);
        if (graph != nullptr) cudaGraphDestroy(graph);
        exec = nullptr, graph = nullptr;
    }

    // The graph for f, built or rebound as needed (a failure leaves none).
    int prepare(const Factorization& next) {
        if (exec != nullptr && same_plan(f, next)) {
            if (same_buffers(f, next)) return 0;
            launcher.rebind(exec);
            int err = add_lookahead(launcher, next);
            if (err == 0 && !launcher.rebound_all()) err = (int)cudaErrorInvalidValue;
            if (err != 0) release();
            else f = next;
            return err;
        }
        release();
        int err = (int)cudaGraphCreate(&graph, 0);
        if (err == 0) {
            launcher.build(graph);
            err = add_lookahead(launcher, next);
        }
        cudaGraphExec_t built = nullptr;
        if (err == 0) err = (int)cudaGraphInstantiate(&built, graph, 0);
        if (err != 0) {
            release();
            return err;
        }
        exec = built, f = next;
        return 0;
    }
};

}  // namespace

// H: the batch's matrices (batch x n x n, a copy of A), factored in place; tau: batch x n; panels on
// `cluster` CTAs of at most max_threads threads (on one CTA, up to columns_max_rows rows by the
// lane-per-column kernel); updates split a tile's rows over several CTAs while they launch fewer than
// update_ctas CTAs (qr_update's target_ctas). n^2 < 2^31. A panel width qr_update lacks (8: past
// m = 2048 rows on one CTA of 512 threads) is cudaErrorInvalidValue, before anything runs.
POPKIT_EXPORT int qr_blocked(float* H, float* tau, float* Vt, float* T, int batch, int n, int max_threads,
                             int cluster, int columns_max_rows, int update_ctas) {
    if (!widths_fit(batch, n, max_threads, cluster)) return (int)cudaErrorInvalidValue;
    for (int k0 = 0; k0 < n;) {
        const int m = n - k0, w = panel_width(n, k0, max_threads, cluster);
        int err = qr_panel_to(nullptr, H, tau, Vt, T, batch, n, k0, w, max_threads, cluster, columns_max_rows);
        if (err == 0 && k0 + w < n)
            err = qr_update_to(nullptr, H + (size_t)k0 * n + k0 + w, n, n * n, Vt, T, batch, m, n - k0 - w, w,
                               qr_update_split(batch, m, n - k0 - w, update_ctas));
        if (err != 0) return err;
        k0 += w;
    }
    return 0;
}

// qr_blocked with look-ahead (the outline above): the same arguments, plus beside_ctas, the row-split
// target of the update that runs beside the next panel; Vt and T hold two buffers each (2 x batch x 32
// x n and 2 x batch x 32 x 32 floats). One graph launch on the default queue.
POPKIT_EXPORT int qr_blocked_lookahead(float* H, float* tau, float* Vt, float* T, int batch, int n, int max_threads,
                                       int cluster, int columns_max_rows, int update_ctas, int beside_ctas) {
    if (!widths_fit(batch, n, max_threads, cluster)) return (int)cudaErrorInvalidValue;
    static LookaheadGraph cached;
    const Factorization f = {H, tau, Vt, T, batch, n, max_threads, cluster, columns_max_rows, update_ctas,
                             beside_ctas};
    int err = cached.prepare(f);
    if (err == 0) err = (int)cudaGraphLaunch(cached.exec, 0);
    if (err != 0) {
        cached.release();
        return err;
    }
    return (int)cudaGetLastError();
}
