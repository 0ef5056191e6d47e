"""What qr_v2's look-ahead graph costs when each call's buffers move (GPU host).

Usage: python3 scripts/qr_lookahead_probe.py BUILT.py [BUILT.py ...]
For each file and each look-ahead shape (2x4096, 8x2048, 60x1024), four ways of calling custom_kernel on one
input, in alternating rounds (checks.timing.alternate), microseconds a call (CUDA events around 5 calls):
  loop  same    route.LOOKAHEAD forced off; each call's outputs dropped before the next (same addresses)
  loop  moved   off; the previous call's outputs kept alive through the next (addresses alternate)
  ahead same    forced on at 132 beside CTAs; same addresses: the graph launches as it is
  ahead moved   on; addresses alternate, so every call rebinds the graph's nodes to the new buffers
and the ratios ahead/loop for each address pattern. Why: sweep_route (same addresses) said look-ahead at
2x4096 was 0.949x the loop, the grader-style diff (fresh buffers a call) said 1.045x; if 'ahead moved' loses
to 'ahead same' by about that much, the rebinds are the loss (bind the graph to one argument block instead).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's checks/, from any folder
from checks.timing import alternate  # noqa: E402
from checks.worker import checker  # noqa: E402
from scripts.command_line import bench_each_built_file, import_built, run_main  # noqa: E402

SHAPES = ((2, 4096), (8, 2048), (60, 1024))
BESIDE_CTAS = 132            # route.LOOKAHEAD's beside CTAs where it is on (512 < n <= 2048)
CALLS = 5                    # calls a sample
ROUNDS = 6                   # samples of each way (alternate: every way in every place)
WAYS = ("loop same", "loop moved", "ahead same", "ahead moved")


def timed_calls(module, A: torch.Tensor, beside: int, keep_outputs: bool) -> float:
    """Microseconds a call over CALLS calls after one untimed call, look-ahead forced to BESIDE (0: off) for
    every shape; KEEP_OUTPUTS holds each call's outputs until the next call has allocated its own."""
    module.LOOKAHEAD = ((1 << 30, 1 << 30, beside),)
    kept = module.custom_kernel(A)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(CALLS):
        if keep_outputs:
            kept = module.custom_kernel(A)
        else:
            kept = None
            module.custom_kernel(A)
    end.record()
    torch.cuda.synchronize()
    del kept
    return start.elapsed_time(end) * 1e3 / CALLS


def ratios(medians: dict[str, float]) -> str:
    """ahead / loop for each address pattern, and what moving the addresses costs look-ahead."""
    same = medians["ahead same"] / medians["loop same"]
    moved = medians["ahead moved"] / medians["loop moved"]
    rebind = medians["ahead moved"] / medians["ahead same"]
    return f"ahead/loop same {same:.3f}x, moved {moved:.3f}x; ahead moved/same {rebind:.3f}x"


def probe(path: str, tag: str) -> None:
    module = import_built(path, tag)
    if not hasattr(module, "LOOKAHEAD"):
        print(f"{tag}: no route.LOOKAHEAD in this build (a qr_v2 build before look-ahead?): skipped", flush=True)
        return
    routed = module.LOOKAHEAD
    try:
        for batch, n in SHAPES:
            A = checker("qr_v2").generate({"batch": batch, "n": n, "cond": 1, "seed": 1}, device="cuda")
            ways = {way: (lambda way=way: timed_calls(module, A, BESIDE_CTAS if way.startswith("ahead") else 0,
                                                      way.endswith("moved")))
                    for way in WAYS}
            samples = alternate(ways, ROUNDS)
            medians = {way: sorted(times)[len(times) // 2] for way, times in samples.items()}
            cells = "  ".join(f"{way} {medians[way]:9.1f}" for way in WAYS)
            print(f"{tag}: {batch}x{n}: {cells} us | {ratios(medians)}", flush=True)
    finally:
        module.LOOKAHEAD = routed


if __name__ == "__main__":
    run_main(lambda: bench_each_built_file(sys.argv[1:], __doc__, probe, "qr_v2"), "qr_lookahead_probe.py")
