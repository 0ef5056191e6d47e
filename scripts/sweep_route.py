"""Try a route's tunables on a GPU: time each variant of a built submission beside the problem's baseline.

Usage (GPU host, repository root):
  python3 scripts/sweep_route.py SUBMISSION PROBLEM VARIANTS.json [--case SPEC ...] [--reps K] [--json OUT]
VARIANTS.json maps a variant name to module globals to set on the built submission, e.g.
  {"default": {}, "split": {"TRAILING_PRODUCT": [[1073741824, "split_tf32"]]}}
Every variant runs on the same inputs (the problem's benchmark list unless --case is given): median of
K timed calls (CUDA events, after a warm-up call), and the native gates' worst fraction of each limit,
so a faster variant that spends too much of the margin shows it. This is exploration: a choice it
suggests becomes evidence only through `popkit bench` / `popkit diff`.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

sys.path.insert(0, ".")
from checks.problems import load_problem, parse_spec, short_spec  # noqa: E402
from checks.worker import import_submission  # noqa: E402


def time_call(fn, A, reps: int) -> float:
    """Median microseconds of reps calls, each on a fresh copy of A (the copy is not timed)."""
    fn(A.clone())
    samples = []
    for _ in range(reps):
        X = A.clone()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn(X)
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples)


def worst_fraction(report) -> float:
    return max((value / limit for value, limit in report.residuals.values() if limit), default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submission")
    parser.add_argument("problem")
    parser.add_argument("variants")
    parser.add_argument("--case", action="append", default=[])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    module = import_submission(args.submission, "swept")
    prob = load_problem(args.problem)
    variants = json.loads(open(args.variants).read())
    defaults = {key: getattr(module, key) for v in variants.values() for key in v}
    specs = [parse_spec(text, prob) for text in args.case] or prob.benchmarks
    rows = []
    print(f"{'case':<22}{'baseline us':>14}" + "".join(f"{name:>22}" for name in variants), flush=True)
    for spec in specs:
        A = prob.native.generate(spec, "cuda")
        row = {"spec": spec, "baseline_us": time_call(prob.native.baseline, A, args.reps), "variants": {}}
        for name, overrides in variants.items():
            for key, value in {**defaults, **overrides}.items():
                setattr(module, key, value if not isinstance(value, list) else tuple(map(tuple, value)))
            report = prob.native.check_output(A, module.custom_kernel(A.clone()))
            row["variants"][name] = {"us": time_call(module.custom_kernel, A, args.reps),
                                     "passed": report.passed, "worst_fraction": worst_fraction(report)}
        rows.append(row)
        cells = "".join(f"{v['us']:>12.1f} {'ok' if v['passed'] else 'FAIL':>4} {v['worst_fraction']:.3f}"
                        for v in row["variants"].values())
        print(f"{short_spec(spec):<22}{row['baseline_us']:>14.1f}{cells}", flush=True)
        del A
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
