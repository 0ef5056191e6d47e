#!POPCORN leaderboard eigh
#!POPCORN gpu B200
# Built by popkit from parts/eigh: do not edit; change the parts and rebuild.
# toolkit commit: 30cc8f2585cb948f3d8e87b4f5486853e5680d23
# part common/device_utils.cuh sha256 e817b025aafef6354686e03d29dcaf2af9c6f94c30070159a5ec05ef61d47008
# part eigh/jacobi_small.cu sha256 609790b5b5abd3b41e8b422944df532e4bd41718746bfef62465703cb9576509
# part common/cuda_loader.py sha256 2e829dbfbdc428ba086d0c1006d08b6ac24142e506f9e44192f33ed5252eac28
# part eigh/model.py sha256 fe3fa2c293bcce408de8af3ce3c78a22958cea63335838e4dce6264939957b6c
# part eigh/cusolver_batched.py sha256 1be2e70e1ef14ac1451bc640cdf7e7f15b12ac76ae668327872b3a46f95e8b2e
# part eigh/route.py sha256 bb32b05f73ac16c696522bf2d235a29f2964b73edd0f5067a74ccb74efa2be53
"""eigh: batched symmetric eigendecomposition ((Q, L), L ascending).

custom_kernel(data) dispatches by n and device to the routes below (see the
route table in the last part). CUDA sources are embedded verbatim and built
once per machine with torch.utils.cpp_extension.load_inline as a plain shared
library (no torch headers), then called through ctypes.
"""
EMBEDDED_CUDA = r'''
// ---- part common/device_utils.cuh ----
// Shared device helpers for every popkit kernel: warp/block reductions and the
// C entry-point convention.
//
// Entry points are `extern "C"` functions taking raw device pointers and sizes;
// they launch on the default queue (what torch uses unless told otherwise) and
// return cudaGetLastError() as an int so Python can raise a clear error.
#include <cuda_runtime.h>

#define POPKIT_EXPORT extern "C" __attribute__((visibility("default")))

namespace popkit {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the whole block; every thread gets the result. `scratch` holds one
// float per warp (32 is enough for 1024 threads). Contains two __syncthreads().
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < warps; ++w) total += scratch[w];
    __syncthreads();
    return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float best = 0.f;
    for (int w = 0; w < warps; ++w) best = fmaxf(best, scratch[w]);
    __syncthreads();
    return best;
}

// LAPACK slarfg on (alpha, ||x||): returns tau and sets beta (the new diagonal)
// and the factor that scales x into the Householder tail v = x * scale.
// xnorm == 0 gives tau = 0 (H = I), exactly as geqrf does.
struct Reflector { float tau, beta, scale; };

__device__ __forceinline__ Reflector make_reflector(float alpha, float xnorm) {
    if (xnorm == 0.f) return {0.f, alpha, 0.f};
    const float beta = -copysignf(hypotf(alpha, xnorm), alpha);
    return {(beta - alpha) / beta, beta, 1.f / (alpha - beta)};
}

}  // namespace popkit

// ---- part eigh/jacobi_small.cu ----
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
'''

# ---- part common/cuda_loader.py ----
"""Compile the embedded CUDA once and call its C entry points through ctypes.

The CUDA sources include no torch headers, so the build is a plain shared
object (load_inline with is_python_module=False, no_implicit_headers=True):
about a second of nvcc instead of the ~45 s a torch-header extension costs.
torch's extension cache keys the build by name, and the name carries a hash of
the source and the target architecture, so a second process loads the cached
library without compiling. Entry points take device pointers and ints and
return a cudaError_t code; `call` raises on a non-zero code.
"""
import ctypes
import hashlib
import os
import time

import torch


def target_arch() -> str:
    """TORCH_CUDA_ARCH_LIST entry for the running GPU: '9.0a' on H100/H200, '10.0a' on B200."""
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}" + ("a" if major >= 9 else "")


class CudaLibrary:
    """The submission's compiled kernels; configured by the built file with its embedded source."""

    def __init__(self):
        self.name = None
        self.source = None
        self.compile_s = None
        self._lib = None

    def configure(self, name: str, source: str) -> None:
        self.name, self.source, self._lib = name, source, None

    def load(self) -> ctypes.CDLL:
        if self._lib is not None:
            return self._lib
        if self.source is None:
            raise RuntimeError("no CUDA source embedded: run the built submission, not the parts")
        from torch.utils.cpp_extension import load_inline
        arch = target_arch()
        digest = hashlib.sha256((arch + self.source).encode()).hexdigest()[:16]
        previous = os.environ.get("TORCH_CUDA_ARCH_LIST")
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
        start = time.perf_counter()
        try:
            path = load_inline(name=f"{self.name}_{digest}", cpp_sources="", cuda_sources=self.source,
                               is_python_module=False, no_implicit_headers=True,
                               extra_cuda_cflags=["-O3", "-std=c++17"])
        finally:
            if previous is None:
                os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
            else:
                os.environ["TORCH_CUDA_ARCH_LIST"] = previous
        self.compile_s = time.perf_counter() - start
        self._lib = ctypes.CDLL(path)
        return self._lib

    def call(self, entry: str, *args) -> None:
        """Call an entry point; tensors go as device pointers, ints as C ints."""
        func = getattr(self.load(), entry)
        func.restype = ctypes.c_int
        c_args = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor) else ctypes.c_int(a)
                  for a in args]
        code = func(*c_args)
        if code != 0:
            raise RuntimeError(f"CUDA entry point {entry} failed with cudaError {code}")

    def query(self, entry: str, *ints: int) -> int:
        """Call an entry point that returns a plain int (a size or a limit)."""
        func = getattr(self.load(), entry)
        func.restype = ctypes.c_int
        return func(*[ctypes.c_int(i) for i in ints])


CUDA = CudaLibrary()

# ---- part eigh/model.py ----
"""Torch model of the eigh Jacobi kernel (jacobi_small.cu): the executable specification.

Same prescaling, round-robin pair order, rotation formulas, stopping rule and
rank sort as the kernel, vectorized over the batch and the pairs of a round.
CPU tests check it against the gates; the built submission uses it on CPU.
"""
import torch

EPS32 = 2.0 ** -23
MAX_SWEEPS = 20


def tournament_pairs(m: int, round_index: int):
    """The m/2 disjoint pairs (p < q) of one round of the round-robin order over m (even) indices."""
    ps, qs = [], []
    for k in range(m // 2):
        a = 0 if k == 0 else (k - 1 + round_index) % (m - 1) + 1
        b = (m - 2 - k + round_index) % (m - 1) + 1
        ps.append(min(a, b))
        qs.append(max(a, b))
    return ps, qs


def _rotations(a: torch.Tensor, p, q):
    """(c, s) per matrix and pair that zero a[p, q] in J^T a J (sym.schur2)."""
    app, aqq, apq = a[:, p, p], a[:, q, q], a[:, p, q]
    nonzero = apq != 0
    theta = (aqq - app) / (2 * torch.where(nonzero, apq, torch.ones_like(apq)))
    t = torch.copysign(torch.ones_like(theta), theta) / (theta.abs() + torch.sqrt(theta * theta + 1))
    c = torch.rsqrt(t * t + 1)
    s = t * c
    return torch.where(nonzero, c, torch.ones_like(c)), torch.where(nonzero, s, torch.zeros_like(s))


def _rotate(x: torch.Tensor, p, q, c, s, dim: int) -> None:
    """Apply the pair rotations to rows (dim=1) or columns (dim=2) p, q of x, in place."""
    xp, xq = x.index_select(dim, torch.tensor(p)), x.index_select(dim, torch.tensor(q))
    shape = (x.shape[0], len(p), 1) if dim == 1 else (x.shape[0], 1, len(p))
    c, s = c.reshape(shape), s.reshape(shape)
    x.index_copy_(dim, torch.tensor(p), c * xp - s * xq)
    x.index_copy_(dim, torch.tensor(q), s * xp + c * xq)


def jacobi_eigh_model(A: torch.Tensor):
    """Eigendecomposition by parallel cyclic Jacobi: returns (Q, L), L ascending."""
    b, n, _ = A.shape
    m = n + (n % 2)
    amax = A.abs().amax(dim=(1, 2))
    scale = torch.where(amax > 0, amax, torch.ones_like(amax))
    a = torch.zeros(b, m, m, dtype=A.dtype, device=A.device)
    a[:, :n, :n] = A / scale[:, None, None]
    v = torch.eye(m, dtype=A.dtype, device=A.device).expand(b, m, m).clone()
    tol = m * EPS32
    for _ in range(MAX_SWEEPS):
        total = (a * a).sum(dim=(1, 2))
        off = ((a - torch.diag_embed(a.diagonal(dim1=1, dim2=2))) ** 2).sum(dim=(1, 2))
        if m < 2 or bool((off <= tol * tol * total).all()):
            break
        for r in range(m - 1):
            p, q = tournament_pairs(m, r)
            c, s = _rotations(a, p, q)
            _rotate(a, p, q, c, s, dim=1)
            _rotate(a, p, q, c, s, dim=2)
            a[:, p, q] = 0.0                       # exactly zero by construction; rounding says otherwise
            a[:, q, p] = 0.0
            _rotate(v, p, q, c, s, dim=2)
    d = a.diagonal(dim1=1, dim2=2)[:, :n]
    order = torch.argsort(d, dim=1, stable=True)
    L = torch.gather(d, 1, order) * scale[:, None]
    Q = torch.gather(v[:, :n, :n], 2, order[:, None, :].expand(b, n, n))
    return Q.contiguous(), L.contiguous()

# ---- part eigh/cusolver_batched.py ----
"""eigh for n > 32: cuSOLVER's batched symmetric eigensolver (cusolverDnXsyevBatched), through ctypes.

torch.linalg.eigh loops over the batch above n = 32 (one syevd per matrix);
the batched call solves the whole batch in one go (about 60x faster at
640 x 512 on an H200, ../shared/docs/speed.md). cuSOLVER is already loaded by
torch, so its path is read from the process's memory map; no header or link
step is needed. A symmetric row-major matrix is its own column-major copy;
the eigenvectors come back column-major, i.e. Q^T in row-major terms.

Each matrix is prescaled by its largest entry (extreme magnitudes), and a
matrix whose `info` reports no convergence is re-solved with torch.linalg.eigh.
"""
import ctypes

import torch

EIG_MODE_VECTOR = 1     # cusolverEigMode_t
FILL_MODE_LOWER = 0     # cublasFillMode_t
R_32F = 0               # cudaDataType


def _loaded_library_path(stem: str):
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if stem in path.rsplit("/", 1)[-1]:
                return path
    return None


class BatchedSyev:
    """A cuSOLVER handle and parameter object, created on first use."""

    def __init__(self):
        self._lib = None
        self._handle = ctypes.c_void_p()
        self._params = ctypes.c_void_p()

    def _load(self):
        if self._lib is None:
            path = _loaded_library_path("libcusolver.so")
            if path is None:       # torch loads cuSOLVER lazily on some builds: make it load
                torch.linalg.eigh(torch.eye(2, device="cuda"))
                path = _loaded_library_path("libcusolver.so")
            lib = ctypes.CDLL(path) if path else None
            if lib is None or not hasattr(lib, "cusolverDnXsyevBatched"):
                raise RuntimeError("cusolverDnXsyevBatched is not available in this process's cuSOLVER")
            self._check(lib.cusolverDnCreate(ctypes.byref(self._handle)), "cusolverDnCreate")
            self._check(lib.cusolverDnCreateParams(ctypes.byref(self._params)), "cusolverDnCreateParams")
            self._lib = lib
        return self._lib

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed with cusolverStatus {status}")

    def __call__(self, A: torch.Tensor):
        """(Q, L) of a contiguous symmetric float32 batch on the GPU."""
        lib = self._load()
        b, n, _ = A.shape
        amax = A.abs().amax(dim=(1, 2))
        scale = torch.where(amax > 0, amax, torch.ones_like(amax))
        work = A / scale[:, None, None]                      # overwritten by the eigenvectors
        L = torch.empty(b, n, dtype=A.dtype, device=A.device)
        info = torch.empty(b, dtype=torch.int32, device=A.device)
        dev_bytes, host_bytes = ctypes.c_size_t(), ctypes.c_size_t()
        common = (self._handle, self._params, EIG_MODE_VECTOR, FILL_MODE_LOWER, ctypes.c_int64(n),
                  R_32F, ctypes.c_void_p(work.data_ptr()), ctypes.c_int64(n),
                  R_32F, ctypes.c_void_p(L.data_ptr()), R_32F)
        self._check(lib.cusolverDnXsyevBatched_bufferSize(*common, ctypes.byref(dev_bytes),
                                                          ctypes.byref(host_bytes), ctypes.c_int64(b)),
                    "cusolverDnXsyevBatched_bufferSize")
        dev_work = torch.empty(max(1, dev_bytes.value), dtype=torch.uint8, device=A.device)
        host_work = ctypes.create_string_buffer(max(1, host_bytes.value))
        self._check(lib.cusolverDnXsyevBatched(*common, ctypes.c_void_p(dev_work.data_ptr()), dev_bytes,
                                               host_work, host_bytes, ctypes.c_void_p(info.data_ptr()),
                                               ctypes.c_int64(b)),
                    "cusolverDnXsyevBatched")
        Q = work.mT
        L = L * scale[:, None]
        failed = torch.nonzero(info).flatten()
        if failed.numel():                                  # no convergence: re-solve those matrices
            L_fix, Q_fix = torch.linalg.eigh(A[failed])
            Q = Q.clone()
            Q[failed], L[failed] = Q_fix, L_fix
        return Q, L


BATCHED_SYEV = BatchedSyev()

# ---- part eigh/route.py ----
"""eigh routes: which algorithm decomposes a batch, by n and by device.

| n      | CUDA route                                           | CPU (model)          |
|--------|------------------------------------------------------|----------------------|
| <= 32  | jacobi_small.cu: parallel Jacobi, one CTA/matrix     | jacobi_eigh_model    |
| larger | cusolver_batched.py: one batched cuSOLVER call       | torch.linalg.eigh    |

Returns (Q, L): eigenvectors in the columns of Q, eigenvalues ascending.
"""
import torch


SMALL_MAX_N = 32


def jacobi_small_cuda(A: torch.Tensor):
    b, n, _ = A.shape
    Q = torch.empty_like(A)
    L = torch.empty(b, n, dtype=A.dtype, device=A.device)
    CUDA.call("eigh_jacobi_small", A, Q, L, b, n)
    return Q, L


def library_eigh(A: torch.Tensor):
    L, Q = torch.linalg.eigh(A)
    return Q, L


def custom_kernel(data: torch.Tensor):
    """Symmetric eigendecomposition of a batch: returns (Q, L)."""
    A = data.contiguous()
    n = A.shape[-1]
    if n <= SMALL_MAX_N:
        return jacobi_small_cuda(A) if A.is_cuda else jacobi_eigh_model(A)
    return BATCHED_SYEV(A) if A.is_cuda else library_eigh(A)

CUDA.configure("popkit_eigh", EMBEDDED_CUDA)
if torch.cuda.is_available():
    CUDA.load()   # at import, so the grader's pre-run (python3 submission.py) pays the compile

if __name__ == "__main__":
    print(f"eigh: CUDA kernels ready" if CUDA.compile_s is not None else "eigh: no GPU, CPU models only")
