"""scripts/peers.py and the peers the native checkers declare, on the CPU without JAX: the timing with a fake
clock, the table and its notes, a native problem's and a harness problem's subject, and each JAX peer's call
through a stand-in jax module (its refusals and --help: test_scripts.py)."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from checks import problem_add, problems
from checks.native import cholesky, eigh, peers, qr_v2

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "peers.py"


@pytest.fixture(scope="module")
def script(import_module):
    return import_module(SCRIPT, "peers_script")


class FakeClock:
    """A clock that moves only when a fake call says how long it took; it keeps the order of the calls."""

    def __init__(self):
        self.now, self.order = 0.0, []

    def __call__(self) -> float:
        return self.now

    def call(self, name: str, seconds: float):
        def run():
            self.order.append(name)
            self.now += seconds
        return run


def test_each_candidate_gets_its_median_after_a_flush_before_every_sample(script):
    clock, flushes = FakeClock(), []
    calls = {"ours": [clock.call("ours", 1e-3), clock.call("ours", 3e-3)], "peer": [clock.call("peer", 2e-3)]}
    cells = script.time_calls(calls, 4, 100.0, lambda: flushes.append(clock.now), "cpu", clock)
    assert cells == {"ours": {"us": pytest.approx(2000), "runs": 4}, "peer": {"us": pytest.approx(2000), "runs": 4}}
    assert len(flushes) == 8                                          # one per sample, none timed
    assert clock.order == ["ours", "peer", "peer", "ours", "peer", "ours", "ours", "peer"]   # alternate()


def test_a_slow_candidate_stops_at_its_share_of_the_budget(script):
    clock = FakeClock()
    calls = {"ours": [clock.call("ours", 0.01)], "slow": [clock.call("slow", 5.0)]}
    cells = script.time_calls(calls, 10, 4.0, lambda: None, "cpu", clock)
    assert cells["ours"]["runs"] == 10
    assert cells["slow"] == {"us": pytest.approx(5e6), "runs": 1}    # over its 2 s share after one sample


def test_a_missing_library_and_a_failure_become_cells_and_notes(script):
    def missing(x):
        raise ModuleNotFoundError("No module named 'jax'")

    def broken(x):
        def run():
            raise RuntimeError("CUDA error: out of memory\nmore")
        return run
    preparers = {"ours": lambda x: lambda: x + 1, "jax": missing, "other": broken}
    calls, cells = script.prepare(preparers, lambda: [1, 2], "cpu")
    assert list(calls) == ["ours"] and len(calls["ours"]) == 2
    assert script.time_calls({}, 3, 1.0, lambda: None, "cpu") == {}      # a case none could run
    assert cells == {"jax": {"missing": "not installed (No module named 'jax')"},
                     "other": {"error": "RuntimeError: CUDA error: out of memory"}}
    spec = {"batch": 2, "n": 8, "cond": 1, "seed": 1, "case": "dense"}
    rows = [{"spec": spec, "candidates": {"ours": {"us": 12.5, "runs": 3}, **cells}, "floor_bytes": None,
             "floor_us": None}] * 2
    lines = script.table(rows, ["ours", "jax", "other"]).splitlines()
    assert lines[0].split() == ["case", "ours", "us", "jax", "us", "other", "us"]       # no floor column
    assert lines[2].split() == ["2x8", "dense", "c1", "12.5", "-", "-"]
    assert script.notes(rows) == ["jax: not installed (No module named 'jax')",     # once, not per case
                                  "other on 2x8 dense c1: RuntimeError: CUDA error: out of memory"]


def test_a_native_problem_times_ours_its_baseline_and_its_peers_with_the_floor(script, built, monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)        # as on CPU CI, wherever JAX happens to be installed
    prob = problems.load_problem("qr_v2")
    spec = problems.parse_spec("batch: 2; n: 24; cond: 1; seed: 5", prob)
    seen = []
    with script.subject_of(prob, str(built["qr_v2"]), "cpu") as subject:
        assert list(subject.preparers()) == ["ours", "baseline", "jax"]
        assert subject.baseline_name == "torch.geqrf"
        assert len(subject.inputs(spec)) == 50 and torch.equal(subject.inputs(spec)[0], qr_v2.benchmark_inputs(spec)[0])
        rows = script.run_cases(subject, [spec], 3, 5.0, "cpu", lambda: None, 1e9, seen.append)
    assert rows == seen
    ours, baseline, jax = (rows[0]["candidates"][name] for name in ("ours", "baseline", "jax"))
    assert ours["us"] > 0 and ours["runs"] == 3 and baseline["us"] > 0
    assert jax == {"missing": "not installed (import of jax halted; None in sys.modules)"}
    assert rows[0]["floor_bytes"] == 4 * 2 * (2 * 24 * 24 + 24)
    assert rows[0]["floor_us"] == pytest.approx(rows[0]["floor_bytes"] / 1e9 * 1e6)
    assert script.table(rows, ["ours", "baseline", "jax"]).splitlines()[0].split()[-2:] == ["floor", "us"]


def test_a_harness_problem_times_ours_and_the_folders_reference_only(script, toy, tmp_path):
    problem_add.add_problem("addone", toy)
    prob = problems.load_problem("addone")
    submission = tmp_path / "mine.py"
    submission.write_text("def custom_kernel(data):\n    return [x + 1 for x in data]\n")
    with script.subject_of(prob, str(submission), "cpu") as subject:
        assert subject.baseline_name == "reference.ref_kernel" and subject.floor_bytes is None
        assert subject.inputs(prob.benchmarks[0]) == [toy_input(toy, prob.benchmarks[0])]
        rows = script.run_cases(subject, prob.ranked_benchmarks, 3, 1.0, "cpu", lambda: None, None)
    assert [row["spec"] for row in rows] == prob.benchmarks       # the toy is ranked by all its cases
    for row in rows:
        assert list(row["candidates"]) == ["ours", "baseline"] and row["floor_us"] is None
        assert all(cell["runs"] == 3 for cell in row["candidates"].values())
    # the run folder's modules (reference.py, the submission) and its place on sys.path are gone with it
    assert not any("popkit-addone" in str(getattr(m, "__file__", None)) for m in list(sys.modules.values()))
    assert not any("popkit-addone" in path for path in sys.path)


def toy_input(toy: Path, spec: dict):
    """The toy folder's own generate_input, imported from its file."""
    namespace = {}
    exec((toy / "reference.py").read_text(), namespace)
    return namespace["generate_input"](**spec)


def test_a_device_copy_prices_the_floor_at_its_best_of_five(script):
    # (start, end) per sample: the untimed first copy (9 s, ignored), then 0.3, 0.1, 0.2, 0.4 and 0.5 s
    ticks = iter([0, 9, 10, 10.3, 11, 11.1, 12, 12.2, 13, 13.4, 14, 14.5])
    rate = script.copy_rate("cpu", lambda: None, 1 << 20, lambda: next(ticks))
    assert rate == pytest.approx(2 * (1 << 20) / 0.1)        # each byte read and written


@pytest.fixture
def fake_jax(monkeypatch):
    """A stand-in jax module whose linalg runs torch's, recording what each peer asked of it."""
    asked = []

    def record(name, result):
        def function(A, **kwargs):
            asked.append((name, kwargs))
            return result(A)
        return function
    dlpack = types.SimpleNamespace(from_dlpack=lambda A, copy=None: asked.append(("from_dlpack", {"copy": copy})) or A)
    jax = types.ModuleType("jax")
    jax.default_backend = lambda: "cpu"
    jax.jit = lambda f: f
    jax.block_until_ready = lambda x: x
    jax.dlpack = dlpack
    jax.numpy = types.SimpleNamespace(linalg=types.SimpleNamespace(
        cholesky=record("cholesky", torch.linalg.cholesky), eigh=record("eigh", torch.linalg.eigh)))
    jax.lax = types.SimpleNamespace(linalg=types.SimpleNamespace(geqrf=record("geqrf", torch.geqrf)))
    monkeypatch.setitem(sys.modules, "jax", jax)
    monkeypatch.setitem(sys.modules, "jax.dlpack", dlpack)
    return asked


@pytest.mark.parametrize("module, asked_for", [
    (cholesky, ("cholesky", {"symmetrize_input": False})),    # the lower triangle, as torch's baseline reads it
    (eigh, ("eigh", {"symmetrize_input": False})),
    (qr_v2, ("geqrf", {})),                                   # the task's (H, tau), not jnp.linalg.qr's Q and R
])
def test_each_jax_peer_takes_the_input_without_a_copy_and_runs_its_solver(fake_jax, module, asked_for):
    A = cholesky.generate({"batch": 2, "n": 6, "cond": 1, "seed": 3})
    run = module.PEERS["jax"](A)
    assert fake_jax == [("from_dlpack", {"copy": False})]
    result = run()
    assert fake_jax[1:] == [asked_for]
    expected = {"cholesky": torch.linalg.cholesky, "eigh": torch.linalg.eigh, "geqrf": torch.geqrf}[asked_for[0]](A)
    assert all(torch.equal(a, b) for a, b in zip(torch.utils._pytree.tree_leaves(result),
                                                   torch.utils._pytree.tree_leaves(expected)))


def test_a_jax_without_the_gpu_is_refused_for_a_gpu_input(fake_jax):
    cuda_input = types.SimpleNamespace(device=torch.device("cuda"))
    with pytest.raises(RuntimeError, match="jax runs on cpu here, not on the GPU"):
        peers.jax_peer(lambda jax, A: A)(cuda_input)


@pytest.mark.parametrize("module, per_matrix", [(cholesky, 8 * 9 // 2 + 64), (eigh, 8 * 9 // 2 + 64 + 8),
                                                (qr_v2, 2 * 64 + 8)])
def test_floor_bytes_count_float32_reads_and_writes(module, per_matrix):
    assert module.floor_bytes({"batch": 3, "n": 8, "cond": 1, "seed": 1, "case": "dense"}) == 4 * 3 * per_matrix
