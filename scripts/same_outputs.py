"""Do two built submissions return the same outputs, bit for bit? For changes that must not move the arithmetic
(a refactor, a new exchange of the same sums, a launch-shape change), before any timing.

Usage (repository root; GPU host, or CPU for a native problem's CPU path):
  python3 scripts/same_outputs.py A.py B.py PROBLEM [--case SPEC ...] [--device cpu|cuda] [--set-a JSON]
                                  [--set-b JSON]
Both files are imported into one process (A and B may be one file: two imports); every case's input (the problem's
benchmark list unless --case is given; on a CPU, those small enough for its path, as `popkit check --device cpu`
picks them) goes to A's custom_kernel and to B's, each on its own copy. One line a
case: "same", or the first output that differs, where, and the largest absolute difference. Exit 0 when every case
is the same, 1 when one differs, 2 on bad arguments. --set-a / --set-b set module globals on A's or B's import
before it runs, as a sweep_route variant does, e.g. a route's bitwise reference path against its fast path in one
build:
  --set-a '{"UPDATE_RESIDENT": [[1073741824, 1, -4]]}' --set-b '{"UPDATE_RESIDENT": [[1073741824, 1, 4]]}'
Native problems only (a harness problem's inputs come from its folder).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's checks/, from any folder
from checks.problems import load_problem, short_spec  # noqa: E402
from checks import runner  # noqa: E402
from popcorn.errors import PopkitError, ProblemError  # noqa: E402
from scripts.command_line import (argument_parser, built_file, import_built, route_globals, run_main,  # noqa: E402
                                  set_globals)


def as_tensors(output) -> list:
    """A custom_kernel's output as a flat list: a tensor, or the items of a tuple or list of them."""
    return list(output) if isinstance(output, (tuple, list)) else [output]


def bits(x: torch.Tensor) -> torch.Tensor:
    """x's elements as integers of the same width, so that -0.0 and 0.0, or two NaNs, compare by their bits."""
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    return x.detach().contiguous().view(as_int)


def first_difference(a, b) -> str | None:
    """None when the two outputs are the same to the bit (NaNs with the same bits are the same); else a line."""
    a, b = as_tensors(a), as_tensors(b)
    if len(a) != len(b):
        return f"A returned {len(a)} outputs, B {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            if x != y:
                return f"output {i}: {x!r} against {y!r}"
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"output {i}: {tuple(x.shape)} {x.dtype} against {tuple(y.shape)} {y.dtype}"
        differ = bits(x) != bits(y)
        if differ.any():
            where = tuple(int(k) for k in differ.nonzero()[0])
            largest = (x.double() - y.double()).abs().nan_to_num(nan=float("inf")).max().item()
            return f"output {i} differs first at {where}, largest |A - B| {largest:.3g}"
    return None


def compare(kernel_a, kernel_b, inputs, report=print) -> bool:
    """Run both kernels on each (name, input); report one line each; True when all are the same."""
    same = True
    for name, A in inputs:
        difference = first_difference(kernel_a(A.clone()), kernel_b(A.clone()))
        report(f"{name}: {difference or 'same'}")
        same &= difference is None
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("a", metavar="A.py")
    parser.add_argument("b", metavar="B.py")
    parser.add_argument("problem", metavar="PROBLEM")
    parser.add_argument("--case", action="append", default=[], metavar="SPEC")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--set-a", default="{}", metavar="JSON", help="module globals to set on A (a JSON object)")
    parser.add_argument("--set-b", default="{}", metavar="JSON", help="module globals to set on B (a JSON object)")
    args = parser.parse_args(argv)
    try:
        overrides = {"A": route_globals(args.set_a, "--set-a"), "B": route_globals(args.set_b, "--set-b")}
        if args.device == "cuda" and not torch.cuda.is_available():
            raise PopkitError("--device cuda: this machine has no CUDA GPU")
        prob = load_problem(args.problem)
        if prob.native is None:
            raise PopkitError(f"{prob.name} is a harness problem: this script compares native problems' outputs")
        # On a CPU, the cases small enough for its path, as `popkit check --device cpu` picks them: the whole
        # benchmark list made inputs of up to 1 x 8192 x 8192 and ran them for many minutes.
        specs, notes = runner.select_specs(prob, "benchmarks", args.case, 0, args.device)
        built_file(args.a, prob), built_file(args.b, prob)
    except (PopkitError, ProblemError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in notes:
        print(f"note: {line}", file=sys.stderr)
    inputs = [(short_spec(spec), prob.native.generate(spec, args.device)) for spec in specs]
    try:
        kernels = {}
        for side, path in (("A", args.a), ("B", args.b)):
            module = import_built(path, f"same_outputs_{side.lower()}")
            set_globals(module, overrides[side], f"--set-{side.lower()}")
            kernels[side] = module.custom_kernel
    except PopkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if compare(kernels["A"], kernels["B"], inputs, lambda line: print(line, flush=True)) else 1


if __name__ == "__main__":
    run_main(main, "same_outputs.py")
