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

#include "device_utils.cuh"

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
