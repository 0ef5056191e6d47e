"""Try a route's tunables: time variants of a built submission's globals as `popkit diff` times its two sides.

Usage (GPU host, repository root):
  python3 scripts/sweep_route.py SUBMISSION PROBLEM VARIANTS.json [--case SPEC ...] [--reps K] [--baseline]
                                 [--json OUT]
VARIANTS.json maps a variant name to module globals to set on the built submission, e.g. for cholesky
  {"default": {}, "split": {"TRAILING_PRODUCT": [[1073741824, 4611686018427387904, "split_tf32"]]}}
Every case (the problem's benchmark list unless --case is given; without a GPU, the cases small enough for the
CPU path, as `popkit check --device cpu` picks them) is timed by the checker's own code for a diff case
(checks/worker.py time_rounds): the case's benchmark inputs, made once; K rounds (default 5) in an order that
rotates and reverses (checks.timing.alternate); in each round every variant runs, under its globals, one
grader-style loop as a diff side does (pristine copies; every input called, then checked; repeats of: L2 flush,
events around one call on each input in turn, a re-check of every output; the diff's stop rule, up to 50 repeats
or 1 s of samples; on a CPU the bounded rule). So a sweep costs about what a diff of as many files costs. A cell
is the variant's mean us a call over its rounds (--json adds err_us, best_us, worst_us) and the worst fraction of
a gate's limit on the first input (a variant that spends the margin); after the table, each later variant's ratio
to the first and the diff's verdict on it, case by case (--json: vs_first); a variant that raises or fails a gate shows
"failed", its line below, and sits out the later rounds. --baseline times the problem's torch baseline on the
same inputs after the rounds, as `popkit bench --baseline` does (~: bounded, calls over 1 s). All variants share
one imported module (one CUDA library and its state), where a diff imports two files. Until 2026-12-02 a sample
was one call on a fresh clone of one input, the baseline inside the rotation: twice it disagreed with `popkit
diff` (docs/priors.md, "Toolkit lessons"). Exploration only: a choice it suggests becomes evidence through
`popkit bench` / `popkit diff`. --json OUT writes the rows, rewritten after each case, so a run cut short keeps
the cases it timed. The table goes to stdout; notes (on a CPU: that its timings say nothing of a GPU's) and
progress, as the verbs show it (each case, every 10th repeat of a loop), to stderr.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's checks/, from any folder
from checks import runner, verdicts, worker  # noqa: E402
from checks.problems import load_problem, short_spec  # noqa: E402
from checks.timing import MIN_REPEATS, Stats, cpu_bound_text  # noqa: E402
from popcorn.errors import PopkitError, ProblemError  # noqa: E402
from popcorn.evidence.logs import strict_json  # noqa: E402
from popcorn.evidence.files import write_atomic  # noqa: E402
from scripts.command_line import (argument_parser, as_global, built_file, import_built, json_output,  # noqa: E402
                                  run_main)


def worst_fraction(report) -> float:
    return max((value / limit for value, limit in report.residuals.values() if limit), default=0.0)


def read_variants(path: str) -> dict[str, dict]:
    """VARIANTS.json: an object of variant names, each an object of the globals it sets; else a PopkitError."""
    try:
        variants = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise PopkitError(f"{path}: not a readable JSON file of variants ({exc})") from None
    if not isinstance(variants, dict) or not variants or not all(isinstance(v, dict) for v in variants.values()):
        raise PopkitError(f"{path}: not an object of variants, each an object of the globals it sets "
                          '(e.g. {"default": {}, "nb64": {"BLOCK_NB": [[1073741824, 64]]}})')
    return variants


def unknown_globals(module, variants: dict[str, dict]) -> list[str]:
    """The names the variants set that the built file does not define: a misspelt tunable would time the
    route's default under the variant's name."""
    return sorted({key for overrides in variants.values() for key in overrides if not hasattr(module, key)})


def sweep(module, prob, variants: dict[str, dict], specs: list[dict], rounds: int, device: str = "cuda",
          report: Callable[[dict], None] = lambda row: None, baseline: bool = False,
          progress: Callable[[str], None] = lambda text: None) -> list[dict]:
    """Check and time every variant on every case through worker.time_rounds, `popkit diff`'s timing of a case;
    returns one row per case (each to REPORT as it is done), and says what runs to PROGRESS as the verbs do. The
    module's globals are restored afterwards, whatever happens."""
    defaults = {key: getattr(module, key) for overrides in variants.values() for key in overrides}

    def use(overrides: dict) -> None:
        for key, value in {**defaults, **overrides}.items():
            setattr(module, key, as_global(value))

    def send(message: tuple) -> None:      # the worker's ("progress", text): a case of 5 rounds takes minutes
        progress(message[1])

    rows = []
    try:
        for index, spec in enumerate(specs, 1):
            progress(f"case {index}/{len(specs)}: {short_spec(spec)}")
            inputs = prob.native.benchmark_inputs(spec, device)
            failures: dict[str, str] = {}
            reports, samples = worker.time_rounds(prob.name, {name: module.custom_kernel for name in variants},
                                                  inputs, device, rounds, send, short_spec(spec),
                                                  before=lambda name: use(variants[name]), failures=failures)
            row = {"spec": spec, "baseline_us": None, "variants": {}}
            stats = {name: Stats.from_samples(samples[name]) for name in variants if name not in failures}
            first = next(iter(variants))
            for name in variants:
                if name in failures:
                    row["variants"][name] = {"passed": False, "error": failures[name]}
                    continue
                row["variants"][name] = {"passed": reports[name].passed,
                                         "worst_fraction": worst_fraction(reports[name]), **stats[name].as_us_dict()}
                if name != first and first in stats:      # as the diff would judge it against the first variant
                    verdict = verdicts.case_verdict(stats[name], stats[first])
                    row["variants"][name]["vs_first"] = {"ratio": verdict.ratio, "verdict": verdict.verdict}
            if baseline:
                stats, bounded = worker.time_baseline(prob.name, inputs, device, send, short_spec(spec))
                row.update(baseline_us=stats.mean / 1e3, baseline_bounded=bounded)
            rows.append(row)
            report(row)
            del inputs         # freed before the next case's are made, as the worker's case functions free theirs
    finally:
        use({})
    return rows


CELL = 23     # '     6537.7   ok 0.004': time, status, the worst gate fraction


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("submission", metavar="SUBMISSION", help="a built file (popkit build PROBLEM -o FILE.py)")
    parser.add_argument("problem", metavar="PROBLEM", help="a native problem (qr_v2, eigh, cholesky ...)")
    parser.add_argument("variants", metavar="VARIANTS.json", help="variant names and the globals each sets")
    parser.add_argument("--case", action="append", default=[], metavar="SPEC",
                        help="a case instead of the benchmark list, in popkit's --case form (repeatable)")
    parser.add_argument("--reps", type=int, default=5,
                        help="alternating rounds per case (at least 3; default 5)")
    parser.add_argument("--baseline", action="store_true",
                        help="also time the problem's torch baseline on each case, after the rounds (as bench)")
    parser.add_argument("--json", metavar="OUT", help="the rows as JSON, rewritten after each case")
    args = parser.parse_args(argv)
    gpu = torch.cuda.is_available()
    # Everything that can be judged before the import (on a GPU host: a CUDA compile), as peers.py does.
    try:
        if args.reps < MIN_REPEATS:       # it was raised to the minimum without a word
            raise PopkitError(f"--reps {args.reps}: at least {MIN_REPEATS} alternating rounds a case")
        variants = read_variants(args.variants)
        json_output(args.json)
        prob = load_problem(args.problem)
        if prob.native is None:
            raise PopkitError(f"{prob.name} is a harness problem: sweep_route.py checks each variant against a "
                              f"native checker's gates (checks/native/PROBLEM.py), which {prob.name} has not")
        path = built_file(args.submission, prob)      # another problem's file failed every cell, exit 0
        specs, notes = runner.select_specs(prob, "benchmarks", args.case, 0, "cuda" if gpu else "cpu")
    except (PopkitError, ProblemError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2)
    if not gpu:       # as bench and diff say it on a CPU
        notes.insert(0, f"no GPU: CPU timings say nothing about GPU speed; {cpu_bound_text()}")
    for line in notes:
        print(f"note: {line}", file=sys.stderr)
    module = import_built(path, "swept")
    unknown = unknown_globals(module, variants)
    if unknown:
        print(f"error: {args.variants} sets {', '.join(unknown)}, which {args.submission} does not define: "
              "nothing was timed", file=sys.stderr)
        raise SystemExit(2)
    done: list[dict] = []

    def print_row(row: dict) -> None:        # a variant's cell: CELL characters, under its name
        cells = "".join(f"{'failed':>{CELL}}" if "error" in v else
                        f"{v['mean_us']:>12.1f}   ok {v['worst_fraction']:.3f}" for v in row["variants"].values())
        base = "-" if row["baseline_us"] is None else f"{row['baseline_us']:.1f}" + "~" * row["baseline_bounded"]
        print(f"{short_spec(row['spec']):<22}{base:>14}{cells}", flush=True)
        for name, v in row["variants"].items():
            if "error" in v:
                print(f"  {name} failed: {v['error'][:300]}", flush=True)
        done.append(row)
        if args.json:         # after every case, so a run cut short keeps the cases it timed
            write_atomic(args.json, json.dumps(strict_json(done), indent=1))

    print(f"{'case':<22}{'baseline us':>14}" + "".join(f"{name:>{CELL}}" for name in variants), flush=True)
    rows = sweep(module, prob, variants, specs, args.reps, "cuda" if gpu else "cpu", print_row, args.baseline,
                 lambda text: print(f"  .. {text}", file=sys.stderr, flush=True))
    print_verdicts(rows, list(variants))


def print_verdicts(rows: list[dict], names: list[str]) -> None:
    """Each later variant against the first, case by case, by the diff's rule (ratio and verdict)."""
    if len(names) < 2:
        return
    print(f"\nagainst {names[0]}, as `popkit diff` judges a case (within noise: under 3 combined errors or 0.5%):")
    for row in rows:
        cells = [f"{name} " + (f"{v['vs_first']['ratio']:.3f} {v['vs_first']['verdict']}" if "vs_first" in v else "-")
                 for name, v in ((name, row["variants"][name]) for name in names[1:])]
        print(f"{short_spec(row['spec']):<22}  " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    run_main(main, "sweep_route.py")
