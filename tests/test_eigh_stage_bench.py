"""scripts/eigh_stage_bench.py: its command line (refusals in one line before any import), its measures against the
eigh torch models in float64 (CPU), and every stage run end to end on the CPU with the models standing in for the
kernels: each stage's line, the tables, the JSON, a stage that raises, a lost CUDA context and the budget.
The kernels themselves run only on a GPU host."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from checks.native import native_checker
from checks.problems import load_problem
from parts.eigh import result_check
from parts.eigh import reduction_model as rm
from parts.eigh import tridiagonal_model as tm
from popcorn.errors import PopkitError

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "eigh_stage_bench.py"


@pytest.fixture(scope="module")
def esb(import_module):
    return import_module(SCRIPT, "eigh_stage_bench")


def symmetric(b: int, n: int, dtype=torch.float64, seed: int = 0) -> torch.Tensor:
    X = torch.randn(b, n, n, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return (X + X.mT) / 2


def tridiagonal(b: int, n: int, dtype=torch.float64, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, n, generator=g, dtype=dtype), torch.randn(b, n - 1, generator=g, dtype=dtype)


# ---------------------------------------------------------------- command line

@pytest.mark.parametrize("text, shape", [("640x512", (640, 512)), (" 8X2048 ", (8, 2048)), ("1x33", (1, 33))])
def test_a_shape_is_batch_x_n(esb, text, shape):
    assert esb.parse_shape(text) == shape


@pytest.mark.parametrize("text", ["640", "640x", "x512", "0x512", "-4x176", "4x176x2", "4 176", "4.0x176", ""])
def test_a_malformed_shape_is_one_line_naming_it_and_the_form(esb, text):
    with pytest.raises(PopkitError) as error:
        esb.parse_shape(text)
    assert str(error.value) == f"--shape {text!r}: expected BATCHxN with positive integers, e.g. 640x512"


@pytest.mark.parametrize("flag", ["--shape", "--gate-shape"])
def test_a_shape_the_jacobi_kernel_runs_is_refused(esb, flag):
    # n <= 32 never reaches the route this script is about: custom_kernel sends it to jacobi_small.cu.
    with pytest.raises(PopkitError, match=rf"^{flag} 20x32: n = 32 runs the Jacobi kernel \(n <= 32\), not this "
                                          r"route: give n > 32$"):
        esb.parse_shape("20x32", flag)


def test_the_script_s_small_n_bound_is_the_route_s(esb):
    from parts.eigh import route
    assert esb.SMALL_MAX_N == route.SMALL_MAX_N


def test_stages_run_in_their_own_order_whatever_the_order_given(esb):
    assert esb.parse_stages(None) == list(esb.STAGES)
    assert esb.parse_stages("solver, leaves,reduction") == ["reduction", "leaves", "solver"]
    with pytest.raises(PopkitError, match=r"^--stages 'leaves,merge': unknown merge \(stages: reduction,cusolver,"):
        esb.parse_stages("leaves,merge")
    with pytest.raises(PopkitError, match=r"^--stages ',': no stage"):
        esb.parse_stages(",")


def test_the_default_shapes_are_eighs_benchmark_shapes_above_n_32_each_with_its_first_case(esb):
    specs = esb.default_specs()
    assert [esb.label_of(spec) for spec in specs] == ["40x176", "40x352", "640x512", "60x1024", "8x2048"]
    benchmarks = load_problem("eigh").benchmarks
    firsts = [next(b for b in benchmarks if (b["batch"], b["n"]) == (s["batch"], s["n"])) for s in specs]
    assert specs == firsts                              # the case itself: its family, cond and seed
    assert len(benchmarks) > len(specs) + 1             # 640x512 and 60x1024 come back in other families


def test_benchmarks_are_every_case_above_n_32_each_labelled_with_its_family_and_cond(esb):
    specs = esb.benchmark_specs()
    assert specs == [b for b in load_problem("eigh").benchmarks if b["n"] > 32]
    labels = [esb.label_of(spec, full=True) for spec in specs]
    assert labels[0] == "40x176 dense c1" and "640x512 clustered c0" in labels
    assert len(set(labels)) == len(labels)              # rows and JSON keys stay apart


def test_a_shape_s_input_is_the_dense_family_at_cond_1_seed_1(esb):
    assert esb.shape_spec(4, 176) == {"batch": 4, "n": 176, "cond": 1, "seed": 1, "case": "dense"}


@pytest.mark.parametrize("seconds, repeats", [(0.074, 6), (2.0, 2), (1e-5, 20), (0.0, 20)])
def test_about_half_a_second_of_calls_is_timed(esb, seconds, repeats):
    assert esb.repeats_for(seconds) == repeats


def run_script(esb, argv):
    """main through run_main, as the script runs: its exit code."""
    with pytest.raises(SystemExit) as stop:
        esb.run_main(lambda: esb.main(argv), "eigh_stage_bench.py")
    return stop.value.code


@pytest.mark.parametrize("args, line", [
    (["--shape", "640by512"], "error: --shape '640by512': expected BATCHxN with positive integers, e.g. 640x512"),
    (["--gate-shape", "4x8"], "error: --gate-shape 4x8: n = 8 runs the Jacobi kernel (n <= 32), not this route: "
                              "give n > 32"),
    (["--stages", "all"], "error: --stages 'all': unknown all (stages: reduction,cusolver,leaves,solver,back,"
                          "route,gates)"),
    (["--budget", "0"], "error: --budget 0: a positive number of seconds"),
    (["--budget", "nan"], "error: --budget nan: a positive number of seconds"),
    (["--json", "."], "error: --json .: a folder; name the file to write"),
    (["--benchmarks", "--shape", "4x64"], "error: --benchmarks runs eigh's benchmark cases; --shape names others: "
                                          "give one of them"),
    (["--set", "SYMV=tiles"], "error: --set SYMV=tiles: not JSON (Expecting value: line 1 column 1 (char 0))"),
])
def test_bad_options_are_one_line_and_exit_2_before_the_file_is_looked_at(esb, capsys, args, line):
    # The file does not exist: the options are judged first, so the line names the option, not the file.
    assert run_script(esb, ["missing.py", *args]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.splitlines() == [line]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a CUDA GPU")
def test_without_a_gpu_the_kernel_benches_line_and_exit_2_before_the_import(esb, capsys, tmp_path):
    built = tmp_path / "built.py"
    # a submission that says so if imported (a CUDA compile on a GPU host)
    built.write_text("def custom_kernel(data):\n    return data\n\n\nraise SystemExit('imported')\n")
    assert run_script(esb, [str(built), "--shape", "4x176"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == ["error: a kernel bench times CUDA kernels: this machine has no CUDA GPU "
                                    "(run it on a GPU host)"]


# ---------------------------------------------------------------- measures, against the float64 models

def test_tridiagonal_times_is_the_dense_tridiagonal_product(esb):
    d, e = tridiagonal(3, 9)
    X = torch.randn(3, 9, 4, dtype=torch.float64)
    dense = torch.diag_embed(d) + torch.diag_embed(e, 1) + torch.diag_embed(e, -1)
    torch.testing.assert_close(esb.tridiagonal_times(d, e, X), dense @ X, rtol=0, atol=1e-14)


def test_the_reduction_s_measures_are_rounding_on_the_model_and_large_on_a_wrong_tridiagonal(esb):
    A = symmetric(3, 40)
    d, e, V, T = rm.tridiagonalize_model(A)
    exact = esb.reduction_errors(A, d, e, V, T, rm.apply_q_model)
    assert exact["similarity"] < 1e-14 and exact["orthogonality"] < 1e-14 and exact["finite"]
    single = esb.reduction_errors(A.float(), *rm.tridiagonalize_model(A.float()), rm.apply_q_model)
    assert 1e-9 < single["similarity"] < 2e-6 and single["orthogonality"] < 2e-6    # the H200's kernel: 5-9e-7
    e = e.clone()
    e[1, 7] += 1e-2
    assert esb.reduction_errors(A, d, e, V, T, rm.apply_q_model)["similarity"] > 1e-4


def test_a_nan_in_the_reduction_shows_as_inf_and_not_finite(esb):
    A = symmetric(2, 36)
    d, e, V, T = rm.tridiagonalize_model(A)
    V = V.clone()
    V[0, 5, 2] = float("nan")
    measured = esb.reduction_errors(A, d, e, V, T, rm.apply_q_model)
    assert measured["similarity"] == float("inf") and measured["orthogonality"] == float("inf")
    assert measured["finite"] is False


def test_the_solver_s_measures_are_rounding_on_the_model_and_large_on_swapped_eigenvalues(esb):
    d, e = tridiagonal(2, 70)
    w, Z = tm.tridiagonal_eigh_model(d, e)
    good = esb.eigen_errors(d, e, w, Z)
    assert good["residual"] < 1e-13 and good["orthogonality"] < 1e-13 and good["ascending"] and good["finite"]
    swapped = w.clone()
    swapped[:, [3, 40]] = swapped[:, [40, 3]]
    bad = esb.eigen_errors(d, e, swapped, Z)
    assert bad["residual"] > 0.1 and not bad["ascending"] and bad["orthogonality"] == good["orthogonality"]


def test_the_zero_tridiagonal_allows_only_a_zero_residual(esb):
    d, e = torch.zeros(1, 5, dtype=torch.float64), torch.zeros(1, 4, dtype=torch.float64)
    Z = torch.eye(5, dtype=torch.float64)[None]
    assert esb.eigen_errors(d, e, torch.zeros(1, 5, dtype=torch.float64), Z)["residual"] == 0
    assert esb.eigen_errors(d, e, torch.full((1, 5), 1e-30, dtype=torch.float64), Z)["residual"] == float("inf")


def test_leaves_in_float32_agree_with_the_float64_leaf_model_to_rounding_and_a_shift_shows(esb):
    d, e = tridiagonal(6, 32, torch.float32)
    w, Z = tm.solve_leaf(d, e)
    measured = esb.leaf_errors(d, e, w, Z, tm.solve_leaf)
    assert measured["w_error"] < 1e-6 and measured["residual"] < 1e-6 and measured["orthogonality"] < 1e-5
    scale = torch.maximum(d.abs().amax(1), e.abs().amax(1)).min().item()
    shifted = esb.leaf_errors(d, e, w + 1e-3, Z, tm.solve_leaf)
    assert shifted["w_error"] == pytest.approx(1e-3 / scale, rel=1e-3)


@pytest.mark.parametrize("b, n", [(2, 67), (3, 100), (1, 33), (2, 176)])
def test_the_leaves_are_those_the_recursion_gives_its_leaf_stage(esb, b, n):
    d, e = tridiagonal(b, n)
    seen = []

    def recording_leaf(dl, el):
        seen.append((dl, el))
        return tm.solve_leaf(dl, el)
    tm.tridiagonal_eigh_model(d, e, tm.LEAF_SIZE, recording_leaf)
    batches = esb.leaf_batches(tm.tridiagonal_eigh_model, d, e, tm.LEAF_SIZE)
    assert len(batches) == len(seen)
    for (dl, el), (ds, es) in zip(batches, seen):
        assert torch.equal(dl, ds) and torch.equal(el, es)
    assert sum(dl.shape[0] * dl.shape[1] for dl, _ in batches) == b * n


def test_a_power_of_two_n_is_one_launch_of_batch_x_n_over_32_leaves(esb):
    d, e = tridiagonal(640, 512, torch.float32)
    batches = esb.leaf_batches(tm.tridiagonal_eigh_model, d, e, tm.LEAF_SIZE)
    assert [tuple(dl.shape) for dl, _ in batches] == [(640 * 16, 32)]


def test_gate_summary_counts_the_matrices_that_fail_on_their_own(esb):
    eigh = native_checker("eigh")
    A = eigh.generate({"batch": 4, "n": 40, "cond": 1, "seed": 3})
    Q, L = eigh.baseline(A)
    good = esb.gate_summary(eigh.check_output, A, (Q, L))
    assert good["passed"] and good["failing"] == 0 and good["batch"] == 4
    assert set(good["residuals"]) == {"sorted", "eigen_equation", "orthogonality", "reconstruction"}
    assert all(value <= limit for value, limit in good["residuals"].values())
    Q = Q.clone()
    Q[1] *= 1.01
    Q[3] *= 1.01
    bad = esb.gate_summary(eigh.check_output, A, (Q, L))
    assert not bad["passed"] and bad["failing"] == 2 and bad["message"].startswith("orthogonality: matrix ")
    assert esb.gates_cell(bad) == "FAIL 2/4" and esb.gates_cell(good).startswith("ok 0.0")
    assert esb.gate_summary(eigh.check_output, A, Q)["failing"] == 4           # not a tuple: every matrix fails


def test_route_sets_reduction_for_the_block_and_restores_it_after_an_error(esb):
    class Module:
        REDUCTION = "cusolver"
    with pytest.raises(RuntimeError):
        with esb.route(Module, "ours"):
            assert Module.REDUCTION == "ours"
            raise RuntimeError("kernel failed")
    assert Module.REDUCTION == "cusolver"


# ---------------------------------------------------------------- the stages, end to end on the CPU

class ModelRoute:
    """A built eigh module with the torch models in place of its kernels (what the stages call, on the CPU)."""

    REDUCTION = "cusolver"
    LEAF_SIZE = tm.LEAF_SIZE
    prescale = staticmethod(rm.prescale)
    apply_q_model = staticmethod(rm.apply_q_model)
    tridiagonalize_model = staticmethod(rm.tridiagonalize_model)
    tridiagonalize_cuda = staticmethod(rm.tridiagonalize_model)
    tridiagonal_eigh_model = staticmethod(tm.tridiagonal_eigh_model)
    solve_leaf = staticmethod(tm.solve_leaf)
    solve_leaves_cuda = staticmethod(tm.solve_leaf)
    rejected = staticmethod(result_check.rejected)
    CHECK_PRODUCT = "ieee"

    def __init__(self):
        self.routes = []

    def tridiagonal_eigh_cuda(self, d, e):
        return tm.tridiagonal_eigh_model(d, e, tm.LEAF_SIZE, self.solve_leaves_cuda)

    def reduction_eigh_cuda(self, A):
        return rm.eigh_pipeline_model(A, rm.PANEL, self.tridiagonalize_cuda, self.tridiagonal_eigh_cuda)

    def custom_kernel(self, A):
        self.routes.append(self.REDUCTION)
        if self.REDUCTION == "ours":
            return self.reduction_eigh_cuda(A)
        L, Q = torch.linalg.eigh(A)
        return Q, L


@pytest.fixture
def on_cpu(esb, monkeypatch):
    """The script on the CPU: inputs made there, a live 'context', every timing 1 us (after one call), and
    import_built handing back a ModelRoute."""
    module = ModelRoute()
    monkeypatch.setattr(esb, "DEVICE", "cpu")
    monkeypatch.setattr(esb, "cuda_alive", lambda: True)
    monkeypatch.setattr(esb, "timed_us", lambda launch: (launch(), 1.0)[1])
    monkeypatch.setattr(esb, "import_built", lambda path, name: module)
    monkeypatch.setattr(esb.checker("eigh"), "families", lambda: ["dense", "clustered", "lapack_zero"])
    return module


def bench(esb, tmp_path, stages=None, budget=None, shapes=((2, 40), (2, 67))):
    built = tmp_path / "built.py"
    built.write_text("# a built file stand-in\n")
    run = esb.Run([esb.shape_spec(*shape) for shape in shapes], [(2, 34)], stages or list(esb.STAGES), budget,
                  str(tmp_path / "out.json"))
    run.bench(str(built), "v0:built.py")
    return run, json.loads((tmp_path / "out.json").read_text())


def test_every_stage_runs_on_every_shape_and_prints_its_line_its_tables_and_its_json(esb, on_cpu, tmp_path, capsys):
    run, document = bench(esb, tmp_path)
    out = capsys.readouterr().out
    assert run.failures == 0
    for label in ("2x40", "2x67"):
        for stage, says in [("reduction", "similarity"), ("cusolver", "gates sorted"), ("leaves", "w error"),
                            ("solver", "max|w - L_cuSOLVER|/max|L|"), ("back", "(apply_q_model)"),
                            ("route", "ours/cuSOLVER 1.000; gates sorted")]:
            line = next(line for line in out.splitlines() if line.startswith(f"v0:built.py {label} {stage}: "))
            assert says in line
            assert ("failing 0/2" in line) == ("gates" in says)
            assert ("check rejects 0/2" in line) == (stage == "route")     # the route's own check, unchecked output
    assert "v0:built.py 2x67 leaves: 8 leaves of 16/17 rows in 3 launch(es)" in out    # 67 = 33 + 34, 33 = 16 + 17
    for family in ("dense", "clustered", "lapack_zero"):
        assert f"v0:built.py gates 2x34 {family}: sorted " in out
        assert "check rejects 0/2" in next(line for line in out.splitlines() if f"gates 2x34 {family}:" in line)
    assert "v0:built.py: stages (us a call;" in out and "v0:built.py: gates per family" in out
    table = out[out.index("v0:built.py: stages"):]
    assert table.splitlines()[1].split()[:3] == ["shape", "reduce", "us"]
    assert table.splitlines()[3].startswith("2x40 ") and "ok 0.0" in table.splitlines()[3]
    shapes = document["files"][0]["shapes"]
    assert set(shapes) == {"2x40", "2x67"}
    assert set(shapes["2x40"]) == {"spec", "reduction", "cusolver", "leaves", "solver", "back", "route"}
    assert shapes["2x40"]["reduction"]["similarity"] < 2e-6 and shapes["2x40"]["solver"]["vs_cusolver"] < 1e-5
    assert shapes["2x67"]["route"]["gates"]["passed"] and shapes["2x67"]["route"]["vs_cusolver"] == 1.0
    assert set(document["files"][0]["gates"]["2x34"]) == {"dense", "clustered", "lapack_zero"}
    assert document["files"][0]["reduction_global"] == "cusolver" and document["gpu"] == "cpu"


def test_repeated_shapes_get_full_labels_and_the_table_counts_the_fallback(esb, on_cpu, tmp_path, capsys):
    built = tmp_path / "built.py"
    built.write_text("# a built file stand-in\n")
    specs = [{**esb.shape_spec(2, 40), "case": family} for family in ("dense", "clustered")]
    run = esb.Run(specs, [(2, 34)], ["route"], None, str(tmp_path / "out.json"))
    run.bench(str(built), "v0:built.py")
    out = capsys.readouterr().out
    shapes = json.loads((tmp_path / "out.json").read_text())["files"][0]["shapes"]
    assert set(shapes) == {"2x40 dense c1", "2x40 clustered c1"}
    assert shapes["2x40 clustered c1"]["route"]["fallback"] == 0
    table = out[out.index("v0:built.py: stages"):].splitlines()
    assert "fallback" in table[1].split()
    assert table[3].startswith("2x40 dense c1 ")


def test_the_routes_run_under_the_reduction_each_stage_names_and_the_file_s_comes_back(esb, on_cpu, tmp_path):
    bench(esb, tmp_path, stages=["cusolver", "route"], shapes=((2, 40),))
    assert on_cpu.routes[0] == "cusolver" and "ours" in on_cpu.routes
    assert on_cpu.REDUCTION == "cusolver"


def test_a_stage_that_raises_is_one_line_and_the_others_still_run(esb, on_cpu, tmp_path, capsys):
    def broken(d, e):
        raise RuntimeError("CUDA entry point eigh_tridiagonal_leaves failed with cudaError 9\nmore")
    on_cpu.solve_leaves_cuda = broken
    run, document = bench(esb, tmp_path, stages=["reduction", "leaves", "back"], shapes=((2, 40),))
    out = capsys.readouterr().out
    assert run.failures == 1
    assert ("v0:built.py 2x40 leaves: failed: RuntimeError: CUDA entry point eigh_tridiagonal_leaves failed with "
            "cudaError 9\n") in out
    assert "v0:built.py 2x40 back: 1.00 us" in out
    assert document["files"][0]["shapes"]["2x40"]["leaves"] == {"error": "RuntimeError: CUDA entry point "
                                                                          "eigh_tridiagonal_leaves failed with "
                                                                          "cudaError 9"}
    row = next(line for line in out.splitlines() if line.startswith("2x40 "))
    assert row.split()[4] == "error"                      # the leaves us column


def test_when_the_reduction_kernel_raises_the_later_stages_run_on_the_model_s_reduction(esb, on_cpu, tmp_path,
                                                                                      capsys):
    def broken(A, panel=rm.PANEL):
        raise RuntimeError("CUDA entry point eigh_tridiagonalize failed with cudaError 1")
    on_cpu.tridiagonalize_cuda = broken
    run, document = bench(esb, tmp_path, stages=["reduction", "leaves", "solver"], shapes=((2, 40),))
    out = capsys.readouterr().out
    assert "2x40 reduction: failed: RuntimeError: CUDA entry point eigh_tridiagonalize failed" in out
    for stage in ("leaves", "solver"):
        line = next(line for line in out.splitlines() if line.startswith(f"v0:built.py 2x40 {stage}: "))
        assert line.endswith("[on the model's reduction]")
        assert document["files"][0]["shapes"]["2x40"][stage]["on_model_reduction"] is True


def test_a_lost_context_ends_the_run_after_the_tables_and_the_json(esb, on_cpu, tmp_path, capsys, monkeypatch):
    def fault(d, e):
        monkeypatch.setattr(esb, "cuda_alive", lambda: False)
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    on_cpu.tridiagonal_eigh_cuda = fault
    with pytest.raises(esb.ContextLost, match=r"^the CUDA context is lost after 2x40 solver \(RuntimeError: CUDA "
                                              r"error: an illegal memory access was encountered\): nothing more can "
                                              r"run in this process; rerun with --stages leaving solver out$"):
        bench(esb, tmp_path, stages=["reduction", "solver", "route"], shapes=((2, 40), (2, 67)))
    out = capsys.readouterr().out
    assert "2x67 solver" not in out and "route" not in out.split("v0:built.py: stages")[0]
    assert "v0:built.py: stages" in out
    shapes = json.loads((tmp_path / "out.json").read_text())["files"][0]["shapes"]
    assert shapes["2x40"]["solver"]["error"].startswith("RuntimeError: CUDA error: an illegal memory access")
    assert shapes["2x67"]["reduction"]["similarity"] < 2e-6


def test_past_the_budget_the_stages_left_are_skipped(esb, on_cpu, tmp_path, capsys):
    run, document = bench(esb, tmp_path, stages=["reduction", "back"], budget=1e-9, shapes=((2, 40),))
    out = capsys.readouterr().out
    assert "v0:built.py 2x40 reduction: skipped (--budget spent)" in out and run.failures == 0
    assert document["files"][0]["shapes"]["2x40"]["back"] == {"skipped": "budget"}


def test_each_set_runs_every_file_once_under_its_globals_tagged_with_them(esb, on_cpu, tmp_path, capsys):
    seen = []

    def reduce(A, panel=rm.PANEL):
        seen.append(on_cpu.SYMV)                 # the global as the route reads it, at call time
        return rm.tridiagonalize_model(A, panel)
    on_cpu.SYMV, on_cpu.tridiagonalize_cuda = "rows", reduce
    built = tmp_path / "built.py"
    built.write_text("# a built file stand-in\n")
    run = esb.Run([esb.shape_spec(2, 40)], [(2, 34)], ["reduction"], None, str(tmp_path / "out.json"),
                  [{}, {"SYMV": "tiles"}])
    run.bench(str(built), "v0:built.py")
    out = capsys.readouterr().out
    assert "v0:built.py 2x40 reduction: " in out and "v0:built.py[SYMV=tiles] 2x40 reduction: " in out
    assert seen == ["rows", "rows", "tiles", "tiles"]        # each variant: the checked call, then the timed one
    files = json.loads((tmp_path / "out.json").read_text())["files"]
    assert [(f["tag"], f["globals"]) for f in files] == [("v0:built.py", {}),
                                                          ("v0:built.py[SYMV=tiles]", {"SYMV": "tiles"})]
    with pytest.raises(PopkitError, match=r'^--set \{"SYMVS": "tiles"\}: the built file defines no SYMVS$'):
        esb.Run([esb.shape_spec(2, 40)], [(2, 34)], ["reduction"], None, None, [{"SYMVS": "tiles"}]).bench(
            str(built), "v0:built.py")
