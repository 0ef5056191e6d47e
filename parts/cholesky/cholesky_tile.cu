// cholesky, one CTA per matrix or per diagonal block: factor an nb x nb block
// on chip, optionally with the inverse of its factor.
//
// The block sits at src/dst with leading dimension ld (floats) and a batch
// stride of `rows` * ld floats, so the same kernel factors a whole matrix
// (ld = nb) or the diagonal block A11 of a larger one (in place, src = dst,
// ld = n). Only the lower triangle of the block is read. It writes
//   dst : L11, lower triangular with A11 = L11 L11^T, strict upper part 0;
//   linv: (when with_inverse; batch x nb x nb row-major) X = inv(L11), lower triangular,
//         so the blocked route's panel solve L21 = A21 L11^-T is a GEMM.
// flags[matrix] = 1 when a pivot is not positive and finite (never cleared).
//
// Math: right-looking Cholesky fused with the forward substitution L X = I.
// At step k, with c = column k of the working array S (the trailing part of
// A for rows >= k, row k of the partly reduced B = I - ... for rows < k) and
// inv = 1 / sqrt(c_k):
//   u_r = c_r * inv (r != k),  u_k = inv      (u_r = l_rk below k, x_kr above)
//   S[r][c] -= u_r * u_c  for c > k and (r >= c: trailing A, or r <= k: X^T)
// S keeps L in its lower triangle and X^T in its strict upper triangle
// (X[i][j] at S[j][i]); the diagonal of X goes to a separate array. The
// elements with k < r < c are skipped: they hold entries of B that no step
// before r may touch. Without the inverse only the r >= c > k part is updated
// (spotf2's order: l_ik = a_ik * (1/l_kk), a_ij -= l_ik l_jk).
//
// Launch: grid = batch, `threads` = 32 * ty threads (ty = 1..32). Thread
// (tx = t % 32, ty = t / 32) owns the elements S[r][c] with r = ty (mod TY)
// and c = tx (mod 32) and is the only thread that ever updates them, so a
// step needs one __syncthreads: the owners of column k copy it to a
// double-buffered vector, then every thread updates its own elements. S is
// row-major with ld = nb + 1 floats; a warp (one r, 32 consecutive c) touches
// 32 distinct banks. Shared memory: (nb (nb + 1) + 3 nb) * 4 bytes (67.5 KiB at
// nb = 128; nb <= ~239 fits the 227 KiB opt-in).
// Why it is fast: the block is read and written once; each step is one barrier
// and a few FMAs per thread with all operands on chip; the inverse comes
// almost free in the same sweep and turns the panel's triangular solve into a
// tensor-core GEMM.
#include "device_utils.cuh"

namespace {

constexpr int kTileMaxThreads = 1024;

// The smallest i >= start with i = owner (mod period): a thread's first element from `start` on.
__device__ __forceinline__ int first_owned(int start, int owner, int period) {
    return start + ((owner - start % period) % period + period) % period;
}

__global__ void __launch_bounds__(kTileMaxThreads)
cholesky_tile_kernel(const float* src, float* dst, float* __restrict__ linv,   // src may equal dst
                     int* __restrict__ flags, int nb, int ld, int rows, bool with_inverse) {
    extern __shared__ float smem[];
    const int lds = nb + 1;
    float* S = smem;                                 // nb x (nb + 1)
    float* buf = S + nb * lds;                       // 2 x nb: column k, double-buffered
    float* xdiag = buf + 2 * nb;                     // diagonal of X
    const int t = threadIdx.x, tx = t & 31, ty = t >> 5, TY = blockDim.x >> 5;
    const size_t base = (size_t)blockIdx.x * rows * ld;

    for (int idx = t; idx < nb * nb; idx += blockDim.x) {
        const int r = idx / nb, c = idx - r * nb;
        S[r * lds + c] = (c <= r) ? src[base + (size_t)r * ld + c] : 0.f;
    }
    __syncthreads();

    bool bad = false;
    for (int k = 0; k < nb; ++k) {
        float* col = buf + (k & 1) * nb;
        if (tx == (k & 31)) {                       // the owners of column k publish it
            for (int r = with_inverse ? ty : first_owned(k, ty, TY); r < nb; r += TY) col[r] = S[r * lds + k];
        }
        __syncthreads();
        const float d = col[k];
        bad |= !(d > 0.f && d < INFINITY);
        const float lkk = sqrtf(d), inv = 1.f / lkk;
        if (tx == (k & 31)) {                       // column k becomes l_rk (r > k) and x_kr (r < k)
            for (int r = with_inverse ? ty : first_owned(k, ty, TY); r < nb; r += TY)
                S[r * lds + k] = (r == k) ? lkk : col[r] * inv;
            if (ty == k % TY) xdiag[k] = inv;
        }
        for (int c = first_owned(k + 1, tx, 32); c < nb; c += 32) {
            const float uc = col[c] * inv;
            if (with_inverse)                        // X^T part: rows r <= k
                for (int r = ty; r <= k; r += TY) S[r * lds + c] -= ((r == k) ? inv : col[r] * inv) * uc;
            for (int r = first_owned(c, ty, TY); r < nb; r += TY) S[r * lds + c] -= (col[r] * inv) * uc;
        }
    }
    __syncthreads();

    for (int idx = t; idx < nb * nb; idx += blockDim.x) {
        const int r = idx / nb, c = idx - r * nb;
        dst[base + (size_t)r * ld + c] = (c <= r) ? S[r * lds + c] : 0.f;
    }
    if (with_inverse) {
        float* X = linv + (size_t)blockIdx.x * nb * nb;
        for (int idx = t; idx < nb * nb; idx += blockDim.x) {
            const int r = idx / nb, c = idx - r * nb;
            X[idx] = (c < r) ? S[c * lds + r] : (c == r) ? xdiag[r] : 0.f;
        }
    }
    if (bad && t == 0) flags[blockIdx.x] = 1;
}

}  // namespace

POPKIT_EXPORT int cholesky_tile_smem_bytes(int nb) { return (nb * (nb + 1) + 3 * nb) * (int)sizeof(float); }

// Factor the nb x nb block at src (leading dimension ld, batch stride rows * ld
// floats) into dst, and inv(L11) into linv when with_inverse != 0 (linv is not touched otherwise).
// flags: batch ints, zeroed by the caller.
POPKIT_EXPORT int cholesky_tile(const float* src, float* dst, float* linv, int* flags,
                                int batch, int nb, int ld, int rows, int threads, int with_inverse) {
    if (batch < 1 || nb < 1 || ld < nb || rows < nb || threads < 32 || threads > kTileMaxThreads || threads % 32)
        return (int)cudaErrorInvalidValue;
    const int smem = cholesky_tile_smem_bytes(nb);
    static int smem_set = 0;               // over 48 KiB of dynamic shared memory needs the opt-in
    if (smem > smem_set) {
        const cudaError_t err = cudaFuncSetAttribute(cholesky_tile_kernel,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return (int)err;
        smem_set = smem;
    }
    cholesky_tile_kernel<<<batch, threads, smem>>>(src, dst, linv, flags, nb, ld, rows, with_inverse != 0);
    return (int)cudaGetLastError();
}
