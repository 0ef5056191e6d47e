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

#include "device_utils.cuh"

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
