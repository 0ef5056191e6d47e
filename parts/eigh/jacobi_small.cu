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
#include "device_utils.cuh"

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
