"""Time cholesky's CUDA entry points alone, for one or more built submissions (GPU host).

Usage: python3 scripts/cholesky_kernel_bench.py BUILT.py [BUILT.py ...]
For each file: cholesky_small on 4096 matrices of n = 32, cholesky_tiled on whole matrices (1024 x 64
and 256 x 128), cholesky_tiled on a 128 x 128 SPD block with and without the inverse (and by halves), at batch 1
(the latency of one diagonal block, what single large matrices wait on) and batch 264 (two per
SM: throughput), cholesky_split on a 1 x 4096 matrix's first panel, and the whole route
(custom_kernel) on the blocked shapes where the driver matters most. Each kernel's result is
checked (max |L L^T - A| / max |A|) so that a fast wrong variant shows. Prints microseconds per
launch (CUDA events over 50 launches after a warm-up), so kernel variants compare in one run.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's checks/, from any folder
from checks.timing import per_launch_us  # noqa: E402
from scripts.command_line import bench_each_built_file, import_built, run_main  # noqa: E402


def spd(batch: int, n: int) -> torch.Tensor:
    X = torch.randn(batch, n, n, device="cuda")
    return X @ X.mT / n + 0.01 * torch.eye(n, device="cuda")


def residual(A: torch.Tensor, L: torch.Tensor) -> float:
    """max |L L^T - A| / max |A| over the batch (lower triangle of L only)."""
    L = L.tril()
    return ((L @ L.mT - A).abs().amax() / A.abs().amax()).item()


def bench(path: str, tag: str) -> None:
    module = import_built(path, tag)
    cuda = module.CUDA
    for batch, n, entry, args in ((4096, 32, "cholesky_small", (8,)), (1024, 64, "cholesky_tiled", (None, None)),
                                  (256, 128, "cholesky_tiled", (None, None))):
        A = spd(batch, n)
        L = torch.empty_like(A)
        if entry == "cholesky_small":
            launch = lambda: cuda.call(entry, A, L, batch, n, *args)  # noqa: E731
        else:
            tdim, ts = (8, 8) if n == 64 else (16, 8)
            launch = lambda: cuda.call(entry, A, L, *args, batch, n, n, n * n, tdim, ts, 0)  # noqa: E731
        t = per_launch_us(launch)
        print(f"{tag}: {entry} {batch}x{n}: {t:8.1f} us, residual {residual(A, L):.1e}")
    for batch in (1, 264):
        A = spd(batch, 128)
        L = torch.empty_like(A)
        X = torch.empty_like(A)
        top = A.diagonal(dim1=1, dim2=2).amax(-1)
        plain = per_launch_us(lambda: cuda.call("cholesky_tiled", A, L, None, top, batch, 128, 128, 128 * 128,
                                                16, 8, 0))
        for halves in (0, 1):
            inverse = per_launch_us(lambda: cuda.call("cholesky_tiled", A, L, X, top, batch, 128, 128, 128 * 128,
                                                      16, 8, halves))
            print(f"{tag}: tiled 16x8 n=128 batch={batch}: factor {plain:8.1f} us, "
                  f"with inverse{' by halves' if halves else ''} {inverse:8.1f} us, residual {residual(A, L):.1e}, "
                  f"inverse error {(X.tril() @ L.tril() - torch.eye(128, device='cuda')).abs().amax().item():.1e}")
    n, w = 4096, 128
    M = torch.randn(1, n, n, device="cuda")
    L21 = torch.randn(1, n - w, w, device="cuda")
    left = torch.empty(1, n - w, 3 * w, device="cuda")
    right = torch.empty_like(left)
    t = per_launch_us(lambda: cuda.call("cholesky_split", L21, M[:, w:, :], left, right, 1, n - w, w, n, n * n))
    print(f"{tag}: split operands 1x{n} w={w}: {t:8.1f} us")
    for batch, n in ((16, 512), (8, 2048), (1, 4096), (2, 4096), (1, 8192)):
        A = spd(batch, n)
        t = per_launch_us(lambda: module.custom_kernel(A), repeats=10)
        print(f"{tag}: custom_kernel {batch}x{n}: {t:10.1f} us, residual {residual(A, module.custom_kernel(A)):.1e}")


if __name__ == "__main__":
    run_main(lambda: bench_each_built_file(sys.argv[1:], __doc__, bench, "cholesky"), "cholesky_kernel_bench.py")
