"""Our native checkers against the competition's own files, where vendor/reference-kernels holds a copy
(linalg/qr_v2, eigh_py, cholesky_py; skipped without one, as in CI): inputs bit for bit, gate verdicts on
outputs pushed to either side of each limit, the case lists, eval.py's benchmark seeds and input counts,
POPCORN_SEED's remap, its statistics and its repeat loop's stop rule (driven with scripted clocks)."""
from __future__ import annotations

import importlib
import random
import sys
import types
from pathlib import Path

import pytest
import torch
import yaml

from checks import harness, timing
from checks.native import cholesky, eigh, qr_v2
from checks.native.matrix_specs import benchmark_count, benchmark_specs
from checks.problems import load_problem

LINALG = Path(__file__).resolve().parent.parent / "vendor" / "reference-kernels" / "problems" / "linalg"
FOLDERS = {"qr_v2": (qr_v2, "qr_v2"), "eigh": (eigh, "eigh_py"), "cholesky": (cholesky, "cholesky_py")}
MODULE_NAMES = ("task", "reference", "utils", "eval")


def _import(folder: str, name: str):
    """The folder's module NAME, with the folder (and pmpp_v2, whose utils.py the task copies) on the path."""
    if not (LINALG / folder / f"{name}.py").is_file():
        pytest.skip(f"no vendor/reference-kernels copy of linalg/{folder} (CI has none)")
    saved = {m: sys.modules.pop(m) for m in MODULE_NAMES if m in sys.modules}
    sys.path[:0] = [str(LINALG / folder), str(LINALG.parent / "pmpp_v2")]
    try:
        return importlib.import_module(name)
    finally:
        del sys.path[:2]
        for m in MODULE_NAMES:
            sys.modules.pop(m, None)
        sys.modules.update(saved)


def task(folder: str) -> dict:
    path = LINALG / folder / "task.yml"
    if not path.is_file():
        pytest.skip(f"no vendor/reference-kernels copy of linalg/{folder}")
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("problem", list(FOLDERS))
def test_inputs_bit_for_bit_for_every_family_the_task_names(problem):
    module, folder = FOLDERS[problem]
    ref = _import(folder, "reference")
    t = task(folder)
    families = {c.get("case", "dense") for c in t["tests"] + t["benchmarks"]}
    assert families <= set(module.families())
    for case in sorted(set(module.families()) & (families | {"dense", "mixed", "upper", "diagonal", "band"})):
        for n in (1, 2, 3, 5, 8, 17, 33):
            for batch, cond, seed in ((1, 0, 1), (3, 2, 12345), (5, 4, 2 ** 40 + 3)):
                spec = {"batch": batch, "n": n, "cond": cond, "seed": seed, "case": case}
                ours, theirs = module.generate(spec), ref.generate_input(**spec)
                assert torch.equal(ours, theirs) and ours.stride() == theirs.stride(), spec


@pytest.mark.parametrize("problem", list(FOLDERS))
def test_case_lists_and_timeouts_are_the_tasks(problem):
    _, folder = FOLDERS[problem]
    t, prob = task(folder), load_problem(problem)
    assert prob.tests == [{"case": "dense", **c} for c in t["tests"]]
    assert prob.benchmarks == [{"case": "dense", **c} for c in t["benchmarks"]]


def _outputs(problem, A):
    module = FOLDERS[problem][0]
    return module.baseline(A)


def _perturbations(problem, out, g):
    """Ways to spoil an output gradually: f(s) with s >= 0, the exact output at s = 0."""
    if problem == "qr_v2":
        H, tau = out
        E, V = torch.randn(H.shape, generator=g), torch.randn(H.shape, generator=g)
        e = torch.randn(tau.shape, generator=g)
        return [lambda s: (H + torch.triu(E) * s * H.abs().amax(), tau), lambda s: (H, tau + e * s),
                lambda s: (H + torch.tril(V, -1) * s, tau)]
    if problem == "eigh":
        Q, L = out
        e, E = torch.randn(L.shape, generator=g), torch.randn(Q.shape, generator=g)
        top = torch.clamp(L.abs().amax(), min=1.0)

        def descend(s):
            L2 = L.clone()
            L2[:, 0] = L2[:, 1] + s * top
            return Q, L2
        fs = [lambda s: (Q, L + e * s * top), lambda s: (Q + E * s, L)]
        return fs + ([descend] if L.shape[-1] > 1 else [])
    L = out
    E = torch.randn(L.shape, generator=g)

    def diagonal(s):
        L2 = L.clone()
        L2[-1, -1, -1] *= 1 - 2 * s
        return L2
    fs = [lambda s: L + torch.tril(E) * s * L.abs().amax(), diagonal]
    return fs + ([lambda s: L + torch.triu(E, 1) * s * L.abs().amax()] if L.shape[-1] > 1 else [])


@pytest.mark.parametrize("problem", list(FOLDERS))
def test_gate_verdicts_on_both_sides_of_every_limit(problem):
    module, folder = FOLDERS[problem]
    ref = _import(folder, "reference")
    g = torch.Generator().manual_seed(1)
    compared = flips = 0
    for case in module.families()[:12]:
        for n in (1, 5, 16):
            A = module.generate({"batch": 3, "n": n, "cond": 2, "seed": n, "case": case})
            for spoil in _perturbations(problem, _outputs(problem, A), g):
                lo, hi = 0.0, 1e-6
                while ref.check_implementation(A, spoil(hi))[0] and hi < 1e3:
                    hi *= 4
                if not ref.check_implementation(A, spoil(lo))[0] or ref.check_implementation(A, spoil(hi))[0]:
                    continue
                for _ in range(60):          # the official verdict's flip, to float32 resolution
                    mid = (lo + hi) / 2
                    lo, hi = (mid, hi) if ref.check_implementation(A, spoil(mid))[0] else (lo, mid)
                flips += 1
                for s in (lo, hi, hi * 1.01):
                    out = spoil(s)
                    assert module.check_output(A, out).passed == ref.check_implementation(A, out)[0], (case, n, s)
                    compared += 1
    assert flips > 20 and compared == 3 * flips


@pytest.mark.parametrize("problem", list(FOLDERS))
def test_structure_verdicts(problem):
    module, folder = FOLDERS[problem]
    ref = _import(folder, "reference")
    A = module.generate({"batch": 3, "n": 4, "cond": 1, "seed": 1})
    out = _outputs(problem, A)
    first = out[0] if isinstance(out, tuple) else out
    bad = first.contiguous().clone()
    bad.view(-1)[0] = float("nan")
    if isinstance(out, tuple):
        X, v = out
        wrongs = [[X, v], (X, v, v), (X,), (v, X), X, (X.double(), v), (X, v.half()), (X, v[..., None]), (X[:-1], v),
                  (X, v[:, :-1]), (X.to("meta"), v), (bad, v), (X, v.contiguous().fill_(float("inf"))), None,
                  torch.return_types.geqrf((X, v)), (X.mT, v), (torch.nn.Parameter(X.clone()), v)]
    else:
        wrongs = [[out], (out,), out.double(), out[:-1], out.to("meta"), bad, -out, out.mT.contiguous(), None,
                  torch.zeros_like(out), torch.nn.Parameter(out.clone())]
    for w in wrongs:
        with torch.no_grad():
            assert module.check_output(A, w).passed == ref.check_implementation(A, w)[0], type(w)


@pytest.mark.parametrize("problem", list(FOLDERS))
def test_benchmark_inputs_seeds_remap_and_statistics_are_eval_pys(problem):
    module, folder = FOLDERS[problem]
    ev = _import(folder, "eval")
    seen = []
    ev.generate_input = lambda **args: seen.append(args["seed"])
    for batch in (1, 3, 40, 640, 4096):
        for n in (1, 7, 32, 512, 4096, 32768):
            spec = {"batch": batch, "n": n, "cond": 1, "seed": 12345, "case": "dense"}
            case = ev.TestCase(args=dict(spec), spec="")
            count = ev._benchmark_batch_count(case)
            seen.clear()
            ev._make_data_batch(case, count)
            assert count == benchmark_count(spec)
            assert seen == [s["seed"] for s in benchmark_specs(module.normalize_spec(spec), module._BENCH_SEED_FIRST)]
    for a in (7, -3, 770005):
        for b in (0, 1, 2, 5, 2 ** 31):
            assert ev._combine(a, b) == harness.remap_seed(a, b)
    rng = random.Random(0)
    for _ in range(100):
        d = [rng.uniform(1, 1e6) for _ in range(rng.randint(1, 30))]
        o, t = timing.Stats.from_samples(d), ev.calculate_stats(d)
        assert (o.runs, o.mean, o.std, o.err, o.best, o.worst) == (t.runs, t.mean, t.std, t.err, t.best, t.worst)


@pytest.mark.parametrize("problem", ["qr_v2", "cholesky"])     # eigh's loop is qr_v2's
def test_the_repeat_loop_stops_where_eval_pys_does(problem, monkeypatch):
    _, folder = FOLDERS[problem]
    ev = _import(folder, "eval")
    state = {}

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            pass

        def elapsed_time(self, other):                 # ms of the whole pass; wall time moves on with it
            i = state["i"]
            state["i"], state["t"] = i + 1, state["t"] + state["walls"][i]
            return state["samples"][i] * state["count"] / 1e6

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setitem(sys.modules, "submission", types.SimpleNamespace(custom_kernel=lambda x: x))
    monkeypatch.setattr(ev, "generate_input", lambda **args: torch.zeros(1), raising=False)
    monkeypatch.setattr(ev, "check_implementation", lambda data, out: (True, ""), raising=False)
    monkeypatch.setattr(ev, "clear_l2_cache", lambda: None, raising=False)
    monkeypatch.setattr(ev, "time", types.SimpleNamespace(perf_counter_ns=lambda: state["t"]), raising=False)

    class Clock:
        def measure(self, run):
            out, i = run(), state["i"]
            state["i"], state["t"] = i + 1, state["t"] + state["walls"][i]
            return state["samples"][i] * state["count"] / 1e6 * 1e6, out

    rng = random.Random(0)
    for _ in range(60):
        count = rng.choice([1, 3, 50])
        mean = 10 ** rng.uniform(3, 10)
        noise = rng.choice([0, 1e-5, 1e-3, 0.3])
        samples = [mean * (1 + noise * rng.gauss(0, 1)) for _ in range(1001)]
        overhead = 10 ** rng.uniform(3, 8)
        walls = [s * count + overhead for s in samples]
        monkeypatch.setattr(ev, "_benchmark_batch_count", lambda test, count=count: count)
        for repeats, budget_ns in ((200, 10e9), (1000, 30e9), (200, 1e8), (20, 1e8)):
            state.update(i=0, t=0, samples=samples, walls=walls, count=count)
            theirs = ev._run_single_benchmark(ev.TestCase(args={"seed": 1}, spec=""), True, repeats, budget_ns)
            state.update(i=0, t=0)
            rule = timing.StopRule("benchmark", max_repeats=repeats, budget_s=budget_ns / 1e9)
            ours = timing.time_case(lambda x: x, [0] * count, lambda outs: None, Clock(), rule,
                                    wall=lambda: state["t"] / 1e9)
            assert (ours.runs, ours.mean, ours.err) == (theirs.runs, theirs.mean, theirs.err)
