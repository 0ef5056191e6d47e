"""Where a route's time goes: torch profiler over one call of a built submission on one case.

Usage (GPU machine): python3 scripts/profile_route.py SUBMISSION PROBLEM 'batch: 640; n: 512; cond: 2; seed: 1'
Prints the kernels sorted by total GPU time, so a change can target the largest one.
"""
import sys

import torch

sys.path.insert(0, ".")
from checks.problems import load_problem, parse_spec  # noqa: E402
from checks.worker import import_submission  # noqa: E402


def main(path: str, problem: str, spec_text: str) -> None:
    kernel = import_submission(path, "profiled").custom_kernel
    prob = load_problem(problem)
    A = prob.native.generate(parse_spec(spec_text, prob), "cuda")
    for _ in range(2):
        kernel(A)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        kernel(A)
        torch.cuda.synchronize()
    print(f"== {problem} {spec_text}")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))


if __name__ == "__main__":
    main(*sys.argv[1:4])
