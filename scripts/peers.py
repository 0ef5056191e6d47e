"""Ours beside the problem's baseline and its peers (JAX, ...) on every benchmark case, all timed one way.

Usage (GPU host, any folder):
  python3 scripts/peers.py BUILT.py PROBLEM [--case SPEC ...] [--reps N] [--budget S] [--json OUT]
The cases and their inputs are `popkit bench`'s: the benchmark list (or the --case specs), a native
problem's benchmark inputs from its checker, a harness problem's from the folder's generate_input in a
run folder assembled as the runner does. The candidates: ours (the built file's custom_kernel), the
baseline `bench --baseline` times (the checker's torch function, or the folder's reference.ref_kernel)
and each peer the problem's checker declares (PEERS in checks/native/PROBLEM.py); a peer whose library
this machine lacks shows as "not installed".
A peer such as JAX runs on its own queue, where torch's CUDA events cannot see it, so every candidate is
timed the same way: host wall time of one call to its completion, after a synchronize and a 64 MiB write
that flushes L2 (neither timed). Each candidate gets inputs of its own (an in-place write cannot reach
another) and one untimed call (JIT compiles, first loads); then rounds alternate the candidates
(checks.timing.alternate) until each has N samples or has spent its share of S seconds per case (a call
slower than its share is timed once, so a slow peer costs the case about two of its calls); the table
shows each median. Where the checker states floor_bytes(spec), the floor column is those bytes at the
rate of a 1 GiB device copy timed the same way (its best of 5). Compare only numbers from one run.
--json OUT writes the run's data, rewritten after each case, so a run cut short keeps the cases it timed.
"""
from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's checks/, from any folder
from checks import harness, runner  # noqa: E402
from checks.problems import Problem, load_problem, short_spec  # noqa: E402
from checks.timing import MIN_REPEATS, alternate  # noqa: E402
from checks.worker import environment, sync  # noqa: E402
from popcorn.errors import PopkitError, ProblemError  # noqa: E402
from popcorn.evidence import logs  # noqa: E402
from popcorn.evidence.files import write_atomic  # noqa: E402
from popcorn.evidence.tables import fmt_us, render_table  # noqa: E402
from scripts.command_line import argument_parser, built_file, import_built, json_output, run_main  # noqa: E402

FLUSH_BYTES = 64 << 20          # over the L2 of the GPUs we time on (H200: 50 MiB)
COPY_BYTES = 1 << 30            # the copy whose rate prices the floor column
METHOD = "host wall time of a call to completion after a synchronize and a 64 MiB L2 flush; median"

Call = Callable[[], object]


@dataclass
class Subject:
    """What a run times: ours and the baseline on a case's inputs, the checker's peers, its floor."""
    kernel: Callable
    baseline: Callable
    baseline_name: str
    inputs: Callable[[dict], list]                           # a case's inputs, freshly made
    peers: dict[str, Callable[[object], Call]]               # name -> prepare(input) -> call
    floor_bytes: Callable[[dict], int] | None = None

    def preparers(self) -> dict[str, Callable[[object], Call]]:
        """Every candidate as name -> prepare(input) -> call, ours and the baseline first."""
        return {"ours": lambda x: lambda: self.kernel(x), "baseline": lambda x: lambda: self.baseline(x),
                **self.peers}


def sampler(calls: list[Call], flush: Callable[[], None], device: str,
            clock: Callable[[], float] = time.perf_counter) -> Callable[[], float]:
    """One sample: flush L2, synchronize, then the seconds the next call (inputs in turn) takes to complete."""
    turn = itertools.count()

    def sample() -> float:
        flush()
        sync(device)
        start = clock()
        calls[next(turn) % len(calls)]()
        sync(device)
        return clock() - start
    return sample


def one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def prepare(preparers: dict[str, Callable[[object], Call]], inputs_of: Callable[[], list],
            device: str) -> tuple[dict[str, list[Call]], dict[str, dict]]:
    """Each candidate's calls on inputs of its own, each called once untimed; (calls, cells of the candidates
    that could not run: {'missing': why} for a library this machine lacks, {'error': why} for a failure)."""
    calls, cells = {}, {}
    for name, prep in preparers.items():
        try:
            calls[name] = [prep(x) for x in inputs_of()]
            calls[name][0]()
            sync(device)
        except ImportError as exc:
            calls.pop(name, None)
            cells[name] = {"missing": f"not installed ({exc})"}
        except Exception as exc:  # one candidate's failure is its cell; the others still run
            calls.pop(name, None)
            cells[name] = {"error": one_line(exc)}
    return calls, cells


def time_calls(calls: dict[str, list[Call]], reps: int, budget_s: float, flush: Callable[[], None], device: str,
               clock: Callable[[], float] = time.perf_counter) -> dict[str, dict]:
    """Alternating rounds of one sample per candidate; a candidate stops at reps samples or once its samples
    sum past its share of budget_s (after one at least). Returns a cell per candidate: {'us': median, 'runs'},
    or {'error': why} for one whose call raised."""
    if not calls:                    # every candidate of the case missing or failed: nothing to alternate
        return {}
    share = budget_s / len(calls)
    spent = dict.fromkeys(calls, 0.0)
    errors: dict[str, str] = {}

    def budgeted(name: str, sample: Callable[[], float]) -> Callable[[], float | None]:
        def one() -> float | None:
            if name in errors or spent[name] >= share:
                return None
            try:
                seconds = sample()
            except Exception as exc:  # reported in the candidate's cell
                errors[name] = one_line(exc)
                return None
            spent[name] += seconds
            return seconds
        return one
    samples = alternate({name: budgeted(name, sampler(c, flush, device, clock)) for name, c in calls.items()},
                        max(reps, MIN_REPEATS))
    cells = {}
    for name, times in samples.items():
        times = [t for t in times if t is not None]
        cells[name] = {"error": errors[name]} if name in errors else {"us": statistics.median(times) * 1e6,
                                                                       "runs": len(times)}
    return cells


def copy_rate(device: str, flush: Callable[[], None], nbytes: int = COPY_BYTES,
              clock: Callable[[], float] = time.perf_counter) -> float:
    """Bytes per second of a device copy (each byte read and written), the best of 5 timed as the candidates are."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    sample = sampler([lambda: dst.copy_(src)], flush, device, clock)
    sample()
    return 2 * nbytes / min(sample() for _ in range(5))


def run_cases(subject: Subject, specs: list[dict], reps: int, budget_s: float, device: str,
              flush: Callable[[], None], rate: float | None, report: Callable[[dict], None] = lambda row: None,
              clock: Callable[[], float] = time.perf_counter) -> list[dict]:
    """Time every candidate on every case: one row per case, its floor priced at rate bytes/s (None: no floor)."""
    rows = []
    for spec in specs:
        calls, cells = prepare(subject.preparers(), lambda: subject.inputs(spec), device)
        cells.update(time_calls(calls, reps, budget_s, flush, device, clock))
        floor = subject.floor_bytes(spec) if subject.floor_bytes and rate else None
        rows.append({"spec": spec, "candidates": {name: cells[name] for name in subject.preparers()},
                     "floor_bytes": floor, "floor_us": floor / rate * 1e6 if floor is not None else None})
        del calls
        if device.startswith("cuda"):
            torch.cuda.empty_cache()     # the next case's inputs (and a peer's own pool) need the room
        report(rows[-1])
    return rows


def table(rows: list[dict], names: list[str]) -> str:
    """case, each candidate's median us ('-' where it did not run), and the floor when the problem states one."""
    floor = any(row["floor_us"] is not None for row in rows)
    headers = ["case"] + [f"{name} us" for name in names] + (["floor us"] if floor else [])
    body = [[short_spec(row["spec"])] + [fmt_us(row["candidates"][name].get("us")) for name in names]
            + ([fmt_us(row["floor_us"])] if floor else []) for row in rows]
    return render_table(headers, body, right_align=set(range(1, len(headers))))


def notes(rows: list[dict]) -> list[str]:
    """What the table's '-' cells mean: a library not installed (once per candidate), each failure."""
    lines = {}
    for row in rows:
        for name, cell in row["candidates"].items():
            if "missing" in cell:
                lines.setdefault(f"{name}: {cell['missing']}", None)
            elif "error" in cell:
                lines.setdefault(f"{name} on {short_spec(row['spec'])}: {cell['error']}", None)
    return list(lines)


def progress_line(row: dict) -> str:
    cells = ", ".join(f"{name} {fmt_us(cell['us'])} us" if "us" in cell else f"{name} -"
                      for name, cell in row["candidates"].items())
    return f"{short_spec(row['spec'])}: {cells}"


@contextlib.contextmanager
def subject_of(prob: Problem, built: str, device: str) -> Iterator[Subject]:
    """The subject of a run: for a native problem, its checker's inputs, baseline, peers and floor; for a harness
    problem, the folder's generate_input and ref_kernel, imported from a run folder beside the built file."""
    native = prob.native
    if native is not None:
        kernel = import_built(built, "peers_ours").custom_kernel
        yield Subject(kernel, native.baseline, native.BASELINE_NAME, lambda spec: native.benchmark_inputs(spec, device),
                      getattr(native, "PEERS", {}), getattr(native, "floor_bytes", None))
        return
    with harness.run_folder(prob, Path(built)) as folder:
        sys.path.insert(0, str(folder))      # the submission and reference import the run folder's modules
        try:
            kernel = import_built(str(folder / "submission.py"), "peers_ours").custom_kernel
            reference = importlib.import_module("reference")
            # eval.py's benchmark mode times one generate_input(**spec) per case
            yield Subject(kernel, reference.ref_kernel, harness.BASELINE_NAME,
                          lambda spec: [reference.generate_input(**spec)], {})
        finally:                             # names such as `reference` mean this folder's files only here
            sys.path.remove(str(folder))
            for name, module in list(sys.modules.items()):
                if str(getattr(module, "__file__", None) or "").startswith(str(folder)):
                    del sys.modules[name]


def refuse_harness_limits(prob: Problem, device: str) -> None:
    """What a harness problem must allow for its inputs to be made and timed here (the bench verb's own rules)."""
    if prob.native is not None:
        return
    runner.require_device_for(prob, device)
    runner.require_reference_kernel(prob)
    if prob.multi_gpu:
        raise PopkitError(f"{prob.name} runs each case on world_size GPUs: this script times one process on one GPU")


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("submission", metavar="BUILT.py")
    parser.add_argument("problem")
    parser.add_argument("--case", action="append", default=[], metavar="SPEC")
    parser.add_argument("--reps", type=int, default=20, help="samples per candidate and case (at least 3; default 20)")
    parser.add_argument("--budget", type=float, default=10.0,
                        help="seconds of samples per case, shared by the candidates (default 10)")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        if args.reps < MIN_REPEATS or not args.budget > 0:      # 'not >' refuses nan too
            raise PopkitError(f"--reps {args.reps} --budget {args.budget:g}: at least {MIN_REPEATS} samples and "
                              "a positive budget")
        json_output(args.json)
        prob = load_problem(args.problem)
        refuse_harness_limits(prob, device)
        specs, more = runner.select_specs(prob, "ranked_benchmarks", args.case, 0, device, False,
                                          "native" if prob.native is not None else "official")
        built_file(args.submission, prob)
    except (PopkitError, ProblemError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows: list[dict] = []          # the cases timed so far, in order
    with subject_of(prob, args.submission, device) as subject:
        flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device).zero_
        rate = copy_rate(device, flush) if subject.floor_bytes else None
        head = {"problem": prob.name, "submission": args.submission,
                "submission_sha256": logs.file_sha256(args.submission), "commit": logs.git_commit(),
                **environment(device), "baseline": subject.baseline_name, "method": METHOD, "reps": args.reps,
                "budget_s": args.budget, "copy_bytes_per_s": rate, "notes": more}
        for line in more:
            print(line, file=sys.stderr)

        def report(row: dict) -> None:
            rows.append(row)
            print(progress_line(row), file=sys.stderr, flush=True)
            if args.json:
                write_atomic(args.json, json.dumps(logs.strict_json({**head, "rows": rows}), indent=1))
        run_cases(subject, specs, args.reps, args.budget, device, flush, rate, report)
        names = list(subject.preparers())
    print(f"# {prob.name} on {head['gpu']}: {METHOD}; baseline {subject.baseline_name}"
          + (f"; floor: the bytes a call must move at {rate / 1e9:,.0f} GB/s (a device copy's)" if rate else ""))
    print(table(rows, names))
    for line in notes(rows):
        print(line)
    return 1 if any("error" in cell for row in rows for cell in row["candidates"].values()) else 0


if __name__ == "__main__":
    run_main(main, "peers.py")
