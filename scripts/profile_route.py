"""Where a route's time goes: torch profiler over one call of a built submission, per case.

Usage (GPU machine):
    python3 scripts/profile_route.py [--timeline] SUBMISSION PROBLEM 'batch: 640; n: 512; cond: 2; seed: 1' ['...' ...]

For each case it prints the wall time of one call (CUDA events, median of a few calls), the sum of
the kernels' GPU time and the kernel count, then the kernels sorted by total GPU time. A wall time
far above the GPU sum means the route waits on the host (launches, Python), not on the GPU.
--timeline also lists every launch of the profiled call in start order: its offset, its duration and
the idle gap before it (the GPU's own timestamps, caches as the run left them: unlike ncu, which
flushes them and serializes launches), then the gaps' total.
"""
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's checks/, from any folder
from checks.problems import format_spec, load_problem  # noqa: E402
from checks.runner import checked_specs  # noqa: E402
from popcorn.errors import PopkitError, ProblemError  # noqa: E402
from scripts.command_line import argument_parser, built_file, import_built, run_main  # noqa: E402


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


def timeline(kernels: list[tuple[str, float, float]]) -> list[str]:
    """(name, start us, end us) per launch -> one line each in start order: offset from the first start,
    duration, idle gap since the previous launch ended (0 when they overlap); then the gaps' total."""
    lines, previous_end, idle = [], None, 0.0
    ordered = sorted(kernels, key=lambda k: k[1])
    for name, start, end in ordered:
        gap = 0.0 if previous_end is None else max(0.0, start - previous_end)
        idle += gap
        previous_end = end if previous_end is None else max(previous_end, end)
        lines.append(f"{start - ordered[0][1]:10.1f} us  {end - start:8.1f} us  gap {gap:6.1f} us  {name[:70]}")
    lines.append(f"{len(ordered)} launches, idle gaps {idle:.1f} us in all")
    return lines


def kernel_spans(prof) -> list[tuple[str, float, float]]:
    """The profiled kernels as (name, start us, end us), from the GPU's own timestamps."""
    return [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


def profile_case(kernel, prob, spec: dict, show_timeline: bool = False) -> None:
    A = prob.native.generate(spec, "cuda")
    for _ in range(2):
        kernel(A)
    wall = wall_ms(kernel, A)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        kernel(A)
        torch.cuda.synchronize()
    events = prof.key_averages()
    gpu_us = sum(self_gpu_us(e) for e in events)
    launches = sum(e.count for e in events if self_gpu_us(e) > 0)
    print(f"== {format_spec(spec)}: wall {wall:.3f} ms, GPU busy {gpu_us / 1000:.3f} ms in {launches} kernels")
    print(events.table(sort_by="cuda_time_total", row_limit=10, max_name_column_width=60))
    if show_timeline:
        print("\n".join(timeline(kernel_spans(prof))))


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--timeline", action="store_true", help="list every launch of the profiled call")
    parser.add_argument("submission", metavar="SUBMISSION")
    parser.add_argument("problem", metavar="PROBLEM")
    parser.add_argument("specs", nargs="+", metavar="SPEC")
    args = parser.parse_args(argv)
    # The file, the problem and every case are judged first: a typo in the last case cost a compile and the
    # earlier cases' profiles, then ended in a traceback.
    try:
        prob = load_problem(args.problem)
        if prob.native is None:
            raise PopkitError(f"{prob.name} is a harness problem: profile_route.py makes its inputs with a native "
                              f"checker's generators (checks/native/PROBLEM.py), which {prob.name} has not")
        specs = checked_specs(prob, args.specs)
        path = built_file(args.submission, prob)
    except (PopkitError, ProblemError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2)
    if not torch.cuda.is_available():
        print("error: profile_route.py profiles CUDA kernels: this machine has no CUDA GPU (run it on a GPU host)",
              file=sys.stderr)
        raise SystemExit(2)
    kernel = import_built(path, "profiled").custom_kernel
    for spec in specs:
        profile_case(kernel, prob, spec, args.timeline)


if __name__ == "__main__":
    run_main(main, "profile_route.py")
