"""Where a route's time goes: torch profiler over one call of a built submission, per case.

Usage (GPU machine):
    python3 scripts/profile_route.py SUBMISSION PROBLEM 'batch: 640; n: 512; cond: 2; seed: 1' ['...' ...]

For each case it prints the wall time of one call (CUDA events, median of a few calls), the sum of
the kernels' GPU time and the kernel count, then the kernels sorted by total GPU time. A wall time
far above the GPU sum means the route waits on the host (launches, Python), not on the GPU.
"""
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's checks/, from any folder
from checks.problems import load_problem, parse_spec  # noqa: E402
from checks.worker import import_submission  # noqa: E402


def wall_ms(kernel, A, repeats: int = 5) -> float:
    """Median wall time of one call in ms, the grader's way (events around a synchronized call)."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        kernel(A)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def self_gpu_us(event) -> float:
    """An event's own GPU time in us (torch renamed the field from cuda to device)."""
    value = getattr(event, "self_device_time_total", None)
    return event.self_cuda_time_total if value is None else value


def profile_case(kernel, prob, spec_text: str) -> None:
    A = prob.native.generate(parse_spec(spec_text, prob), "cuda")
    for _ in range(2):
        kernel(A)
    wall = wall_ms(kernel, A)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        kernel(A)
        torch.cuda.synchronize()
    events = prof.key_averages()
    gpu_us = sum(self_gpu_us(e) for e in events)
    launches = sum(e.count for e in events if self_gpu_us(e) > 0)
    print(f"== {spec_text}: wall {wall:.3f} ms, GPU busy {gpu_us / 1000:.3f} ms in {launches} kernels")
    print(events.table(sort_by="cuda_time_total", row_limit=10, max_name_column_width=60))


def built_file(path: str) -> str:
    """PATH when it is a file; else one line and exit 2 (importlib's traceback said less)."""
    if not Path(path).is_file():
        print(f"error: {path}: no such file (build one: popkit build PROBLEM -o FILE.py)", file=sys.stderr)
        raise SystemExit(2)
    return path


def main(path: str, problem: str, *specs: str) -> None:
    kernel = import_submission(built_file(path), "profiled").custom_kernel
    prob = load_problem(problem)
    for spec_text in specs:
        profile_case(kernel, prob, spec_text)


if __name__ == "__main__":
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
        raise SystemExit(0)
    if len(sys.argv) < 4:
        print("usage: profile_route.py SUBMISSION PROBLEM 'spec' ['spec' ...] (--help says more)", file=sys.stderr)
        raise SystemExit(2)
    main(*sys.argv[1:])
