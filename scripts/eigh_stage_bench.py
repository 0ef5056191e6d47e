"""Check and time eigh's own route (issue 10, route.REDUCTION = "ours") stage by stage beside cuSOLVER (GPU host).

Usage: python3 scripts/eigh_stage_bench.py BUILT.py [BUILT.py ...] [--shape BxN ... | --benchmarks]
                                           [--gate-shape BxN ...] [--stages LIST] [--set JSON ...]
                                           [--budget SECONDS] [--json OUT]
Each BUILT.py is `popkit build eigh -o FILE.py` (whatever its route.REDUCTION: the script sets the module's
REDUCTION global itself, "ours" or "cusolver", around each call of custom_kernel). Shapes: --shape BATCHxN
(n > 32, repeatable; input: the dense family, cond 1, seed 1), else eigh's benchmark shapes with n > 32 (40x176,
40x352, 640x512, 60x1024, 8x2048), each on the input of its first benchmark case; --benchmarks: every benchmark
case with n > 32 on its own input (family, cond and seed; `--benchmarks --stages route` says how often the route's
fallback fires on each, which issue 10 asks). The stages, in this order, each
over every shape before the next stage starts (so a stage that fails, or kills the CUDA context, costs only
itself and what follows):
  reduction  tridiagonalize_cuda on the prescaled input: max|Q T Q^T - A| / max|A| and max|Q^T Q - I| (Q from
             V, T by the model's apply_q_model; float64 measures), V/T/d/e finite, and its time alone
  cusolver   the cuSOLVER route (custom_kernel, REDUCTION "cusolver"): its time and the eigh gates
  leaves     solve_leaves_cuda on the leaves of the recursion of the reduction's (d, e) against
             tridiagonal_model.solve_leaf in float64: max|w - w64| / ||T_leaf||, the kernel's max|T z - w z| /
             ||T_leaf||, max|Z^T Z - I|; and the leaf launches' time
  solver     tridiagonal_eigh_cuda on the reduction's (d, e): max|T Z - Z diag(w)| / ||T||, max|Z^T Z - I|,
             w ascending, max|w - L_cuSOLVER| / max|L| (cuSOLVER on the same prescaled input); its time
  back       the back-transform apply_q_model(V, T, Z) alone (time; its cost does not depend on Z's values)
  route      the whole "ours" route: the eigh gates on the shape's input of its unchecked output
             (reduction_eigh_cuda) and how many matrices result_check.py rejects there (each re-solved by
             cuSOLVER in custom_kernel); the time of custom_kernel (REDUCTION "ours": check and fallback
             included) and of the unchecked route, and ours / cuSOLVER (the cusolver stage's time, same run)
  gates      the unchecked "ours" route (and cuSOLVER's, for scale) through the eigh checker's gates on every
             input family at each --gate-shape (default 3x37 and 4x176): each gate's worst value / its limit,
             how many matrices fail, and how many the route's check rejects (a failing matrix it accepts is a
             hole in the check)
A stage whose reduction kernel raised runs on the model's reduction (tridiagonalize_model) and says so.
Times: microseconds a call, CUDA events around back-to-back calls after a warm-up (checks.timing.per_launch_us;
about 0.5 s of calls, 2 to 20 of them). One line per stage and shape as it finishes (stdout, flushed; each
stage's start on stderr, so a hang shows where), then per file a table of the shapes and one of the gates.
Every stage runs in its own try: an error is one line and the run goes on; if the CUDA context is lost (an
illegal address), the tables so far are printed and the run ends (rerun with --stages leaving that stage out).
--set JSON sets module globals on each built file as it is imported, e.g. '{"SYMV": "tiles"}' (a name the file does
not define is refused); repeated, every file runs once per --set, in order, tagged with it (v0:FILE[SYMV=tiles]): one
build compares its route's forms in one run, e.g. --stages reduction --set '{}' --set '{"SYMV": "tiles"}'.
--budget SECONDS skips the stages left once that much time has passed since the start (a stage running then
finishes). --json OUT writes every number, rewritten after each stage. Exit 0 when every stage ran, 1 when
one raised, 2 on bad arguments, a missing file, a machine without a CUDA GPU or a lost CUDA context.
Compare only numbers from one run.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's checks/, from any folder
from checks.problems import load_problem  # noqa: E402
from checks.timing import per_launch_us  # noqa: E402
from checks.worker import checker, environment, error_line  # noqa: E402
from popcorn.errors import PopkitError  # noqa: E402
from popcorn.evidence import logs  # noqa: E402
from popcorn.evidence.files import write_atomic  # noqa: E402
from popcorn.evidence.tables import fmt_us, render_table  # noqa: E402
from scripts.command_line import (argument_parser, bench_each_built_file, import_built, json_output,  # noqa: E402
                                  route_globals, run_main, set_globals)

STAGES = ("reduction", "cusolver", "leaves", "solver", "back", "route", "gates")
SMALL_MAX_N = 32                 # route.SMALL_MAX_N: n <= 32 runs the Jacobi kernel, not this route
GATE_SHAPES = ("3x37", "4x176")  # 37: odd tears (leaves of 18 and 19), 2 panels; 176: a benchmark n, 6 panels
GATE_SEED = 7001                 # family i of --gate-shape gets seed GATE_SEED + i (cond 1)
CHUNK_ELEMENTS = 2 ** 24         # float64 elements per n x n work array, as checks/native/gate_tools.py
TIMING_TARGET_S = 0.5
DEVICE = "cuda"                  # where inputs are made (tests run the stages on the CPU, models for the kernels)
# What the stages call in the built module (inlined from parts/eigh/*.py).
NEEDED = ("REDUCTION", "custom_kernel", "prescale", "tridiagonalize_cuda", "tridiagonalize_model", "apply_q_model",
          "tridiagonal_eigh_model", "tridiagonal_eigh_cuda", "solve_leaves_cuda", "solve_leaf", "LEAF_SIZE",
          "reduction_eigh_cuda", "rejected", "CHECK_PRODUCT")


# ---------------------------------------------------------------- command line

def parse_shape(text: str, flag: str = "--shape") -> tuple[int, int]:
    """'640x512' -> (640, 512); else a PopkitError in one line (n must exceed SMALL_MAX_N: below, the route is
    the Jacobi kernel's)."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not match or int(match.group(1)) < 1:
        raise PopkitError(f"{flag} {text!r}: expected BATCHxN with positive integers, e.g. 640x512")
    batch, n = int(match.group(1)), int(match.group(2))
    if n <= SMALL_MAX_N:
        raise PopkitError(f"{flag} {text}: n = {n} runs the Jacobi kernel (n <= {SMALL_MAX_N}), not this route: "
                          f"give n > {SMALL_MAX_N}")
    return batch, n


def parse_stages(text: str | None) -> list[str]:
    """'leaves,solver' -> the named stages in run order; None -> all; an unknown name is a PopkitError."""
    if text is None:
        return list(STAGES)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in STAGES]
    if unknown or not names:
        raise PopkitError(f"--stages {text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'no stage'} "
                          f"(stages: {','.join(STAGES)})")
    return [name for name in STAGES if name in names]


def shape_spec(batch: int, n: int) -> dict:
    """A --shape's case: the dense family, cond 1, seed 1 (as qr_kernel_bench.py makes its inputs)."""
    return {"batch": batch, "n": n, "cond": 1, "seed": 1, "case": "dense"}


def default_specs() -> list[dict]:
    """The first of eigh's benchmark cases of each shape with n > SMALL_MAX_N, in the list's order
    (checks/cases/eigh.yml: the dense case of each shape; its other families come to the gates stage)."""
    shapes: dict = {}
    for spec in load_problem("eigh").benchmarks:
        if spec["n"] > SMALL_MAX_N:
            shapes.setdefault((spec["batch"], spec["n"]), spec)
    return list(shapes.values())


def benchmark_specs() -> list[dict]:
    """Every one of eigh's benchmark cases with n > SMALL_MAX_N, in the list's order."""
    return [spec for spec in load_problem("eigh").benchmarks if spec["n"] > SMALL_MAX_N]


def label_of(spec: dict, full: bool = False) -> str:
    """BATCHxN, and with full the family and cond too (benchmark cases share shapes)."""
    shape = f"{spec['batch']}x{spec['n']}"
    return f"{shape} {spec.get('case', 'dense')} c{spec['cond']}" if full else shape


def repeats_for(seconds_per_call: float, target_s: float = TIMING_TARGET_S, least: int = 2, most: int = 20) -> int:
    """How many back-to-back calls to time: about target_s of them, within least..most."""
    return max(least, min(most, int(target_s / max(seconds_per_call, 1e-9))))


# ---------------------------------------------------------------- measures (pure torch: CPU in the tests)

def _chunks(b: int, n: int) -> list[slice]:
    step = max(1, CHUNK_ELEMENTS // max(n * n, 1))
    return [slice(start, start + step) for start in range(0, b, step)]


def _max_abs(X: torch.Tensor) -> torch.Tensor:
    """Per matrix (first dimension) the largest |entry|, NaN as inf (a NaN must not hide in a max)."""
    X = X.flatten(1).abs()
    return torch.where(X.isnan(), torch.inf, X).amax(dim=1) if X.shape[1] else X.new_zeros(X.shape[0])


def _ratio(residual: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """residual / scale per matrix; a zero scale (a zero matrix) allows only a zero residual."""
    ok = scale > 0
    return torch.where(ok, residual / torch.where(ok, scale, 1.0), torch.where(residual == 0, 0.0, torch.inf))


def _worst(values: list[torch.Tensor]) -> float:
    return float(torch.cat(values).amax()) if values else 0.0


def tridiagonal_times(d: torch.Tensor, e: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """tridiag(e, d, e) @ X per matrix (d: b x n, e: b x n-1, X: b x n x k) without forming the n x n matrix."""
    Y = d[:, :, None] * X
    Y[:, 1:] += e[:, :, None] * X[:, :-1]
    Y[:, :-1] += e[:, :, None] * X[:, 1:]
    return Y


def _finite(*tensors: torch.Tensor) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def reduction_errors(A, d, e, V, T, apply_q: Callable) -> dict:
    """The reduction's accuracy: Q = apply_q(V, T, I) in A's dtype (as the route forms Q Z), then in float64 the
    worst max|Q tridiag(e, d, e) Q^T - A| / max|A| ("similarity") and max|Q^T Q - I| over the batch."""
    b, n, _ = A.shape
    Q = apply_q(V, T, torch.eye(n, dtype=A.dtype, device=A.device).expand(b, n, n))
    similarity, orthogonality = [], []
    eye = torch.eye(n, dtype=torch.float64, device=A.device)
    for part in _chunks(b, n):
        Q64, A64 = Q[part].double(), A[part].double()
        rebuilt = Q64 @ tridiagonal_times(d[part].double(), e[part].double(), Q64.mT)
        similarity.append(_ratio(_max_abs(rebuilt - A64), _max_abs(A64)))
        orthogonality.append(_max_abs(Q64.mT @ Q64 - eye))
    return {"similarity": _worst(similarity), "orthogonality": _worst(orthogonality), "finite": _finite(d, e, V, T)}


def eigen_errors(d, e, w, Z) -> dict:
    """(w, Z) as the eigenpairs of tridiag(e, d, e), in float64: the worst max|T Z - Z diag(w)| / max(|d|, |e|)
    ("residual") and max|Z^T Z - I| over the batch, whether every w is ascending, and whether w, Z are finite."""
    b, n = d.shape
    residual, orthogonality = [], []
    eye = torch.eye(n, dtype=torch.float64, device=d.device)
    for part in _chunks(b, n):
        d64, e64, w64, Z64 = d[part].double(), e[part].double(), w[part].double(), Z[part].double()
        R = tridiagonal_times(d64, e64, Z64) - Z64 * w64[:, None, :]
        residual.append(_ratio(_max_abs(R), torch.maximum(_max_abs(d64), _max_abs(e64))))
        orthogonality.append(_max_abs(Z64.mT @ Z64 - eye))
    return {"residual": _worst(residual), "orthogonality": _worst(orthogonality),
            "ascending": bool((w[:, 1:] >= w[:, :-1]).all()), "finite": _finite(w, Z)}


def leaf_errors(d, e, w, Z, solve_leaf: Callable) -> dict:
    """A batch of leaves' (w, Z) against solve_leaf in float64: max|w - w64| / max(|d|, |e|) per leaf ("w_error",
    the worst), and eigen_errors of (w, Z) themselves (the vectors are compared through their residual, since
    clustered eigenvalues leave them free within their invariant subspace)."""
    w64, _ = solve_leaf(d.double(), e.double())
    scale = torch.maximum(_max_abs(d.double()), _max_abs(e.double()))
    return {"w_error": float(_ratio(_max_abs(w.double() - w64), scale).amax()), **eigen_errors(d, e, w, Z)}


def leaf_batches(tridiagonal_eigh_model: Callable, d, e, leaf_size: int) -> list[tuple]:
    """The (d, e) of every leaf_stage call tridiagonal_eigh_model makes on (d, e) (its scaling and tears, in its
    order), without solving anything: the leaves a route's leaf kernel gets."""
    batches = []

    def leaf(dl, el):
        batches.append((dl, el))
        b, m = dl.shape
        return dl.clone(), dl.new_zeros(()).expand(b, m, m)

    def merge(w1, Z1, w2, Z2, beta):
        b, n = w1.shape[0], w1.shape[1] + w2.shape[1]
        return torch.cat([w1, w2], dim=1), w1.new_zeros(()).expand(b, n, n)

    tridiagonal_eigh_model(d, e, leaf_size, leaf, merge)
    return batches


def gate_summary(check_output: Callable, A: torch.Tensor, output) -> dict:
    """An output through a checker's check_output: passed, the first failure's line, each gate's [worst value,
    limit], and how many matrices fail on their own (checked one by one only when the batch fails)."""
    report = check_output(A, output)
    b = A.shape[0]
    failing = 0
    if not report.passed:
        if isinstance(output, tuple) and all(isinstance(x, torch.Tensor) and x.shape[:1] == (b,) for x in output):
            failing = sum(not check_output(A[i:i + 1], tuple(x[i:i + 1] for x in output)).passed for i in range(b))
        else:
            failing = b
    return {"passed": report.passed, "message": report.message, "residuals": report.residuals,
            "failing": failing, "batch": b}


SHORT_GATES = {"eigen_equation": "eigen", "orthogonality": "orth", "reconstruction": "recon"}


def worst_fraction(summary: dict) -> float | None:
    """The largest gate value over its limit (None where no gate was measured: a structure failure)."""
    fractions = [value / limit + 0.0 for value, limit in summary["residuals"].values() if limit]   # no -0
    return max(fractions) if fractions else None


def gates_text(summary: dict) -> str:
    """'sorted 0/100, eigen 1.3/200, orth 0.9/100, recon 0.41/400, failing 0/4' (and the first failure's line)."""
    cells = [f"{SHORT_GATES.get(name, name)} {value + 0.0:.3g}/{limit:g}"
             for name, (value, limit) in summary["residuals"].items()]
    counts = [f"failing {summary['failing']}/{summary['batch']}"]
    if "rejected" in summary:
        counts.append(f"check rejects {summary['rejected']}/{summary['batch']}")
    text = ", ".join(cells + counts)
    return text if summary["passed"] else f"{text} ({summary['message']})"


def gates_cell(summary: dict | None) -> str:
    """A table cell: 'ok 0.013' (the worst fraction of a limit) or 'FAIL 3/640'."""
    if summary is None:
        return "-"
    if "error" in summary or "skipped" in summary:
        return "error" if "error" in summary else "skipped"
    if summary["passed"]:
        return f"ok {worst_fraction(summary):.3f}"
    return f"FAIL {summary['failing']}/{summary['batch']}"


# ---------------------------------------------------------------- the run

class ContextLost(PopkitError):
    """The CUDA context is unusable (a kernel hit an illegal address): nothing more can run in this process."""


def cuda_alive() -> bool:
    try:
        torch.cuda.synchronize()
        return torch.ones(1, device="cuda").add_(1).item() == 2.0
    except Exception:       # noqa: BLE001 - any error here means the context is gone
        return False


def timed_us(launch: Callable[[], object]) -> float:
    """per_launch_us with about TIMING_TARGET_S of calls: one wall-timed call says how many."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    launch()
    torch.cuda.synchronize()
    return per_launch_us(launch, repeats_for(time.perf_counter() - start))


@contextlib.contextmanager
def route(module, name: str):
    """module.REDUCTION = name for the block (route code is inlined into the built module), restored after."""
    before = module.REDUCTION
    module.REDUCTION = name
    try:
        yield
    finally:
        module.REDUCTION = before


def fmt_e(value) -> str:
    return "-" if value is None else f"{value:.1e}"


@dataclass
class Case:
    """One shape: its spec, its input (made once) and its reduction (made once, by whichever stage needs it)."""

    spec: dict
    label: str
    A: torch.Tensor | None = None
    reduced: tuple | None = None          # (prescaled A, d, e, V, T, source)
    results: dict = field(default_factory=dict)

    def input(self) -> torch.Tensor:
        if self.A is None:
            self.A = checker("eigh").generate(self.spec, device=DEVICE)
        return self.A


def reduce_case(module, case: Case) -> tuple:
    """(prescaled A, d, e, V, T, source): tridiagonalize_cuda's, or where it raises the model's (source says)."""
    if case.reduced is None:
        scaled = module.prescale(case.input())[0]
        try:
            d, e, V, T = module.tridiagonalize_cuda(scaled)
            source = "kernel"
        except Exception as exc:      # noqa: BLE001 - the stages after it run on the model's reduction
            if not cuda_alive():
                raise
            d, e, V, T = module.tridiagonalize_model(scaled)
            source = f"model (the reduction kernel raised {error_line(exc)})"
        case.reduced = (scaled, d, e, V, T, source)
    return case.reduced


def on_model(source: str) -> str:
    return "" if source == "kernel" else " [on the model's reduction]"


def stage_reduction(module, case: Case):
    if case.reduced is None or case.reduced[-1] != "kernel":      # the kernel's own error fails this stage
        scaled = module.prescale(case.input())[0]
        case.reduced = (scaled, *module.tridiagonalize_cuda(scaled), "kernel")
    scaled, d, e, V, T, _ = case.reduced
    result = reduction_errors(scaled, d, e, V, T, module.apply_q_model)
    result["us"] = timed_us(lambda: module.tridiagonalize_cuda(scaled))
    return result, (f"{fmt_us(result['us'])} us, similarity {fmt_e(result['similarity'])}, orthogonality "
                    f"{fmt_e(result['orthogonality'])}, finite {'yes' if result['finite'] else 'NO'}")


def stage_cusolver(module, case: Case):
    A = case.input()
    with route(module, "cusolver"):
        summary = gate_summary(checker("eigh").check_output, A, module.custom_kernel(A.clone()))
        us = timed_us(lambda: module.custom_kernel(A))
    return {"us": us, "gates": summary}, f"{fmt_us(us)} us; gates {gates_text(summary)}"


def stage_leaves(module, case: Case):
    _, d, e, _, _, source = reduce_case(module, case)
    batches = leaf_batches(module.tridiagonal_eigh_model, d, e, module.LEAF_SIZE)
    worst: dict = {}
    for dl, el in batches:
        w, Z = module.solve_leaves_cuda(dl, el)
        for key, value in leaf_errors(dl, el, w, Z, module.solve_leaf).items():   # the worst over the launches
            worst[key] = (value and worst.get(key, True)) if isinstance(value, bool) else max(worst.get(key, 0), value)
    us = sum(timed_us(lambda dl=dl, el=el: module.solve_leaves_cuda(dl, el)) for dl, el in batches)
    sizes = sorted({dl.shape[1] for dl, _ in batches})
    result = {"us": us, "launches": len(batches), "leaves": sum(dl.shape[0] for dl, _ in batches), "sizes": sizes,
              "on_model_reduction": source != "kernel", **worst}
    return result, (f"{result['leaves']} leaves of {'/'.join(map(str, sizes))} rows in {len(batches)} launch(es): "
                    f"{fmt_us(us)} us, w error {fmt_e(worst['w_error'])}, residual {fmt_e(worst['residual'])}, "
                    f"orthogonality {fmt_e(worst['orthogonality'])}, finite {'yes' if worst['finite'] else 'NO'}"
                    f"{on_model(source)}")


def stage_solver(module, case: Case):
    scaled, d, e, _, _, source = reduce_case(module, case)
    w, Z = module.tridiagonal_eigh_cuda(d, e)
    result = {**eigen_errors(d, e, w, Z), "on_model_reduction": source != "kernel"}
    try:
        with route(module, "cusolver"):
            _, L = module.custom_kernel(scaled)       # cuSOLVER's eigenvalues of the same prescaled matrices
        result["vs_cusolver"] = float(_ratio(_max_abs(w.double() - L.double()), _max_abs(L.double())).amax())
    except Exception as exc:          # noqa: BLE001 - the comparison is extra; the solver's own measures stand
        result["vs_cusolver_error"] = error_line(exc)
    result["us"] = timed_us(lambda: module.tridiagonal_eigh_cuda(d, e))
    versus = fmt_e(result.get("vs_cusolver")) if "vs_cusolver" in result else result["vs_cusolver_error"]
    return result, (f"{fmt_us(result['us'])} us, residual {fmt_e(result['residual'])}, orthogonality "
                    f"{fmt_e(result['orthogonality'])}, ascending {'yes' if result['ascending'] else 'NO'}, finite "
                    f"{'yes' if result['finite'] else 'NO'}, max|w - L_cuSOLVER|/max|L| {versus}{on_model(source)}")


def stage_back(module, case: Case):
    _, _, _, V, T, source = reduce_case(module, case)
    b, n = V.shape[0], V.shape[1]
    Z = torch.eye(n, dtype=V.dtype, device=V.device).expand(b, n, n).contiguous()
    us = timed_us(lambda: module.apply_q_model(V, T, Z))
    return {"us": us}, f"{fmt_us(us)} us (apply_q_model){on_model(source)}"


def unchecked_gates(module, check_output: Callable, A: torch.Tensor) -> dict:
    """Our route's output before its check (reduction_eigh_cuda) through the gates, with how many matrices
    the route's check (result_check.rejected) would send to the fallback."""
    Q, L = module.reduction_eigh_cuda(A.clone())
    summary = gate_summary(check_output, A, (Q, L))
    summary["rejected"] = int(module.rejected(A, Q, L, module.CHECK_PRODUCT).sum())
    return summary


def stage_route(module, case: Case):
    A = case.input()
    summary = unchecked_gates(module, checker("eigh").check_output, A)
    unchecked_us = timed_us(lambda: module.reduction_eigh_cuda(A))
    with route(module, "ours"):
        us = timed_us(lambda: module.custom_kernel(A))
    cusolver = case.results.get("cusolver", {}).get("us")
    ratio = us / cusolver if cusolver else None
    versus = f", ours/cuSOLVER {ratio:.3f}" if ratio else " (no cuSOLVER time in this run)"
    return ({"us": us, "unchecked_us": unchecked_us, "gates": summary, "vs_cusolver": ratio,
             "fallback": summary["rejected"]},
            f"{fmt_us(us)} us (unchecked {fmt_us(unchecked_us)}){versus}; gates {gates_text(summary)}")


STAGE_FUNCTIONS = {"reduction": stage_reduction, "cusolver": stage_cusolver, "leaves": stage_leaves,
                   "solver": stage_solver, "back": stage_back, "route": stage_route}


def variant_label(overrides: dict) -> str:
    """'' for a file as built, else its --set globals as a tag suffix: '[SYMV=tiles]'."""
    return f"[{','.join(f'{key}={value}' for key, value in overrides.items())}]" if overrides else ""


class Run:
    """The whole run: options, the JSON document, and one try per stage."""

    def __init__(self, specs: list[dict], gate_shapes: list[tuple[int, int]], stages: list[str],
                 budget: float | None, json_path: str | None, variants: list[dict] | None = None):
        self.specs, self.gate_shapes, self.stages = specs, gate_shapes, stages
        self.variants = variants or [{}]              # module globals to set, one run of every file each
        self.deadline = None if budget is None else time.monotonic() + budget
        self.json_path = json_path
        self.failures = 0
        self.lost: ContextLost | None = None
        self.document = {"script": "eigh_stage_bench.py", "time": logs.utc_now(), "commit": logs.git_commit(),
                         "stages": stages, "budget_s": budget, "files": []}

    def save(self) -> None:
        if self.json_path:
            write_atomic(self.json_path, json.dumps(logs.strict_json(self.document), indent=1))

    def attempt(self, tag: str, where: str, stage: str, fn: Callable[[], tuple[dict, str]]) -> dict:
        """fn's result dict, its line printed; an error as one line and {'error': ...}; past the budget, skipped.
        An error that leaves the CUDA context unusable also sets self.lost (stop_if_lost raises it)."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            print(f"{tag} {where}: skipped (--budget spent)", flush=True)
            return {"skipped": "budget"}
        print(f"  .. {where}", file=sys.stderr, flush=True)
        try:
            result, line = fn()
        except Exception as exc:      # noqa: BLE001 - every stage on its own: one line, and the run goes on
            self.failures += 1
            line = error_line(exc)
            print(f"{tag} {where}: failed: {line}", flush=True)
            if not cuda_alive():
                self.lost = ContextLost(f"the CUDA context is lost after {where} ({line}): nothing more can run in "
                                        f"this process; rerun with --stages leaving {stage} out")
            else:
                torch.cuda.empty_cache()           # an out-of-memory error leaves its cache behind
            return {"error": line}
        print(f"{tag} {where}: {line}", flush=True)
        return result

    def stop_if_lost(self) -> None:
        """After a stage's result is stored and saved: end the run if that stage lost the CUDA context."""
        if self.lost is not None:
            raise self.lost

    def bench(self, path: str, tag: str) -> None:
        """Every stage of the built file at PATH, once per variant (its --set globals)."""
        for overrides in self.variants:
            self.bench_variant(path, tag + variant_label(overrides), overrides)

    def bench_variant(self, path: str, tag: str, overrides: dict) -> None:
        module = import_built(path, f"eigh_stages_{len(self.document['files'])}")
        set_globals(module, overrides, f"--set {json.dumps(overrides)}")
        entry = {"file": path, "tag": tag, "sha256": logs.file_sha256(path), "globals": overrides,
                 "reduction_global": getattr(module, "REDUCTION", None), "shapes": {}, "gates": {}}
        if not self.document["files"]:
            self.document.update(environment(DEVICE))
        self.document["files"].append(entry)
        missing = [name for name in NEEDED if not hasattr(module, name)]
        print(f"{tag}: REDUCTION is {entry['reduction_global']!r} in the file; the stages set it themselves"
              + (f"; missing (their stages fail): {', '.join(missing)}" if missing else ""), flush=True)
        full = len({label_of(spec) for spec in self.specs}) < len(self.specs)    # shapes repeat: say the family
        cases = [Case(spec, label_of(spec, full)) for spec in self.specs]
        for case in cases:
            entry["shapes"][case.label] = {"spec": case.spec, **case.results}
        try:
            for stage in self.stages:
                if stage == "gates":
                    self.run_gates(module, tag, entry)
                    continue
                for case in cases:
                    case.results[stage] = self.attempt(tag, f"{case.label} {stage}", stage,
                                                       lambda: STAGE_FUNCTIONS[stage](module, case))
                    entry["shapes"][case.label][stage] = case.results[stage]
                    self.save()
                    self.stop_if_lost()
        finally:
            print_tables(tag, cases, entry["gates"])
            self.save()
            for case in cases:
                case.A = case.reduced = None
            if cuda_alive():
                torch.cuda.empty_cache()

    def run_gates(self, module, tag: str, entry: dict) -> None:
        eigh = checker("eigh")
        for batch, n in self.gate_shapes:
            table = entry["gates"].setdefault(f"{batch}x{n}", {})
            for i, family in enumerate(eigh.families()):
                spec = {"batch": batch, "n": n, "cond": 1, "seed": GATE_SEED + i, "case": family}

                def one(spec=spec):
                    A = eigh.generate(spec, device=DEVICE)
                    ours = unchecked_gates(module, eigh.check_output, A)
                    with route(module, "cusolver"):
                        theirs = gate_summary(eigh.check_output, A, module.custom_kernel(A.clone()))
                    scale = worst_fraction(theirs)
                    return ({"ours": ours, "cusolver": theirs},
                            f"{gates_text(ours)}; cuSOLVER worst {'-' if scale is None else f'{scale:.2g}'}")

                table[family] = self.attempt(tag, f"gates {batch}x{n} {family}", "gates", one)
                self.save()
                self.stop_if_lost()


def stage_cell(case: Case, stage: str, key: str, fmt: Callable) -> str | None:
    """A stage's number for the table: formatted, 'error' where the stage raised, None (shown '-') where absent."""
    result = case.results.get(stage, {})
    if "error" in result:
        return "error"
    value = result.get(key)
    return None if value is None else fmt(value)


def print_tables(tag: str, cases: list[Case], gates: dict) -> None:
    """The file's two tables: one row a shape (each stage's time and measures; fallback: how many of the batch
    the route's check sends to cuSOLVER), one row a gate family."""
    columns = [("reduce us", "reduction", "us", fmt_us), ("similarity", "reduction", "similarity", fmt_e),
               ("orth Q", "reduction", "orthogonality", fmt_e), ("leaves us", "leaves", "us", fmt_us),
               ("leaf w err", "leaves", "w_error", fmt_e), ("solve us", "solver", "us", fmt_us),
               ("T resid", "solver", "residual", fmt_e), ("orth Z", "solver", "orthogonality", fmt_e),
               ("back us", "back", "us", fmt_us), ("ours us", "route", "us", fmt_us),
               ("cuSOLVER us", "cusolver", "us", fmt_us), ("ours/cuS", "route", "vs_cusolver", lambda x: f"{x:.3f}"),
               ("fallback", "route", "fallback", str)]
    rows = []
    for case in cases:
        row = [case.label] + [stage_cell(case, stage, key, fmt) for _, stage, key, fmt in columns]
        for stage in ("route", "cusolver"):
            result = case.results.get(stage)
            row.append(gates_cell(None if result is None else result.get("gates", result)))
        rows.append(row)
    print(f"\n{tag}: stages (us a call; similarity max|QTQ^T-A|/max|A|; T resid max|TZ-Zw|/||T||; "
          "orth max|X^TX-I|)")
    print(render_table(["shape"] + [name for name, *_ in columns] + ["ours gates", "cuS gates"], rows,
                       right_align=set(range(1, len(columns) + 1))), flush=True)
    if not gates:
        return
    shapes = list(gates)
    families = list(dict.fromkeys(family for table in gates.values() for family in table))
    rows = []
    for family in families:
        row = [family]
        for shape in shapes:
            cell = gates[shape].get(family)
            row += [None if cell is None else gates_cell(cell.get(who, cell)) for who in ("ours", "cusolver")]
        rows.append(row)
    print(f"\n{tag}: gates per family (ok: worst gate value / its limit; FAIL: matrices failing / batch)")
    print(render_table(["family"] + [f"{who} {shape}" for shape in shapes for who in ("ours", "cuS")], rows),
          flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("files", nargs="+", metavar="BUILT.py", help="built eigh files (popkit build eigh -o FILE)")
    parser.add_argument("--shape", action="append", default=[], metavar="BxN",
                        help="a shape to run (repeatable; default: eigh's benchmark cases with n > 32)")
    parser.add_argument("--benchmarks", action="store_true",
                        help="every benchmark case with n > 32 on its own input, not the first of each shape")
    parser.add_argument("--gate-shape", action="append", default=[], metavar="BxN",
                        help=f"a shape for the gates stage (repeatable; default {' and '.join(GATE_SHAPES)})")
    parser.add_argument("--stages", metavar="LIST", help=f"comma-separated stages to run (default all: "
                                                         f"{','.join(STAGES)})")
    parser.add_argument("--set", action="append", default=[], metavar="JSON",
                        help="module globals to set on each built file, a JSON object (repeatable: every file runs "
                             "once per --set)")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="skip the stages left after this many seconds (default: no limit)")
    parser.add_argument("--json", metavar="OUT", help="every number as JSON, rewritten after each stage")
    args = parser.parse_args(argv)
    # Everything that can be judged before a file is imported (on a GPU host: a CUDA compile).
    if args.benchmarks and args.shape:
        raise PopkitError("--benchmarks runs eigh's benchmark cases; --shape names others: give one of them")
    specs = ([shape_spec(*shape) for shape in dict.fromkeys(map(parse_shape, args.shape))]
             or (benchmark_specs() if args.benchmarks else default_specs()))
    gate_shapes = list(dict.fromkeys(parse_shape(text, "--gate-shape") for text in args.gate_shape or GATE_SHAPES))
    stages = parse_stages(args.stages)
    variants = [route_globals(text, "--set") for text in args.set]
    if args.budget is not None and not args.budget > 0:       # 'not >' refuses nan too
        raise PopkitError(f"--budget {args.budget:g}: a positive number of seconds")
    json_output(args.json)
    run = Run(specs, gate_shapes, stages, args.budget, args.json, variants)
    bench_each_built_file(args.files, __doc__, run.bench, "eigh")
    return 1 if run.failures else 0


if __name__ == "__main__":
    run_main(main, os.path.basename(__file__))
