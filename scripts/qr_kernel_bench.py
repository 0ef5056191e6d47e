"""Time qr_v2's CUDA pieces alone, for one or more built submissions (GPU host).

Usage: python3 scripts/qr_kernel_bench.py BUILT.py [BUILT.py ...]
For each file and each blocked benchmark shape (40x176, 40x352, 640x512, 60x1024, 8x2048): the first
panel (qr_panel at k0 = 0) and its trailing update, as cuBLAS fp32 (model.apply_block_reflector) and as
householder_update.cu (tf32x3) where the file has it, each update checked against the float64 update
(max |C - C_exact| / max |C|: ~1e-7 for fp32, ~1e-6 for tf32x3; a wrong kernel shows as ~1); then the
whole route (custom_kernel). Prints microseconds per launch (CUDA events, back to back after a warm-up),
so variants compare in one run.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's checks/, from any folder
from checks.timing import per_launch_us  # noqa: E402
from checks.worker import checker  # noqa: E402
from scripts.command_line import bench_each_built_file, import_built, run_main  # noqa: E402

SHAPES = ((40, 176), (40, 352), (640, 512), (60, 1024), (8, 2048))


def update_error(update, Vt: torch.Tensor, T: torch.Tensor, C: torch.Tensor) -> float:
    """max |update(C) - exact| / max |C| on a copy of C, the exact update in float64."""
    exact = C.double() - Vt.mT.double() @ (T.mT.double() @ (Vt.double() @ C.double()))
    result = C.clone()
    update(Vt, T, result)
    return ((result.double() - exact).abs().amax() / C.abs().amax()).item()


def bench(path: str, tag: str) -> None:
    module = import_built(path, tag)
    updates = {"fp32": module.apply_block_reflector}
    if hasattr(module, "update_tf32x3_cuda"):
        updates["tf32x3"] = module.update_tf32x3_cuda
    for batch, n in SHAPES:
        A = checker("qr_v2").generate({"batch": batch, "n": n, "cond": 1, "seed": 1}, device="cuda")
        w = module.panel_width_cuda(n)
        H, tau = A.clone(), torch.zeros(batch, n, device="cuda")
        Vt, T = module.factor_panel_cuda(H, tau, 0, w)
        scratch = H.clone()                      # refactoring a factored panel takes the same steps
        panel = per_launch_us(lambda: module.factor_panel_cuda(scratch, tau, 0, w), repeats=20)
        C = H[:, :, w:]
        line = f"{tag}: {batch}x{n} w={w}: panel {panel:8.1f} us"
        for name, update in updates.items():
            error = update_error(update, Vt, T, C)
            scratch = C.clone()
            t = per_launch_us(lambda: update(Vt, T, scratch), repeats=20)
            line += f" | update {name} {t:8.1f} us, error {error:.1e}"
        route = per_launch_us(lambda: module.custom_kernel(A), repeats=5)
        print(f"{line} | custom_kernel {route:10.1f} us", flush=True)


if __name__ == "__main__":
    run_main(lambda: bench_each_built_file(sys.argv[1:], __doc__, bench, "qr_v2"), "qr_kernel_bench.py")
