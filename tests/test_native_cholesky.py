"""The cholesky native checker: inputs bit for bit as the official generator makes them, each family's
defining property, the gates as the official check decides them, and a CPU check run end to end."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

from checks import runner
from checks.native import cholesky, native_checker
from checks.native.draw import EPS
from checks.native.matrix_specs import SMALL_SIZES, benchmark_count
from checks.problems import load_problem
from popcorn.errors import ProblemError

ROOT = Path(__file__).resolve().parent.parent
OFFICIAL = ROOT / "vendor" / "reference-kernels" / "problems" / "linalg" / "cholesky_py"
F64 = torch.float64


def gen(case="dense", n=16, batch=3, cond=2, seed=7):
    return cholesky.generate({"batch": batch, "n": n, "cond": cond, "seed": seed, "case": case})


def eigvals(A):
    return torch.linalg.eigvalsh(A.double())


def assert_fails(report, gate):
    assert not report.passed
    assert report.message.startswith(f"{gate}:"), report.message
    assert "\n" not in report.message


@pytest.fixture(scope="module")
def official():
    """The competition's reference.py (generate_input, check_implementation), imported from vendor/."""
    if not (OFFICIAL / "reference.py").is_file():
        pytest.skip("no vendor/reference-kernels clone (CI has none): nothing official to compare with")
    saved = {name: sys.modules.pop(name) for name in ("task", "reference") if name in sys.modules}
    sys.path.insert(0, str(OFFICIAL))
    try:
        return importlib.import_module("reference")
    finally:
        sys.path.remove(str(OFFICIAL))
        for name in ("task", "reference"):
            sys.modules.pop(name, None)
        sys.modules.update(saved)


# ---------------------------------------------------------------- against the official code (when present)

@pytest.mark.parametrize("case", cholesky.families())
def test_inputs_are_the_official_inputs_bit_for_bit(official, case):
    for n in (1, 2, 3, 8, 33):
        for batch, cond, seed in ((1, 0, 1), (3, 2, 7), (2, 5, 12345)):
            spec = {"batch": batch, "n": n, "cond": cond, "seed": seed, "case": case}
            ours, theirs = cholesky.generate(spec), official.generate_input(**spec)
            assert torch.equal(ours, theirs) and ours.stride() == theirs.stride(), spec


def test_official_test_cases_are_bit_identical(official):
    for spec in load_problem("cholesky").tests:
        assert torch.equal(cholesky.generate(spec), official.generate_input(**spec)), spec


def test_gates_agree_with_the_official_check(official):
    g = torch.Generator().manual_seed(0)
    verdicts = []
    for case in cholesky.families():
        for n in (1, 7, 40):
            A = gen(case, n=n, cond=3, seed=n)
            L = cholesky.baseline(A)
            for magnitude in (0.0, 1e-7, 1e-6, 1e-5, 1e-4):
                E = torch.randn(L.shape, generator=g) * magnitude * L.abs().amax()
                for out in (L + torch.tril(E), L + torch.triu(E, 1), L + E, -L):
                    ours, (theirs, why) = cholesky.check_output(A, out), official.check_implementation(A, out)
                    assert ours.passed == theirs, (case, n, magnitude, ours.message, why)
                    verdicts.append(theirs)
    assert any(verdicts) and not all(verdicts)


def test_a_nan_reconstruction_fails_here_though_the_official_comparison_lets_it_pass(official):
    # finite L whose L L^T has inf - inf = NaN: NaN > limit is False in the official comparison
    A = torch.eye(3).expand(1, 3, 3).contiguous()
    L = torch.tensor([[[1.0, 0.0, 0.0], [1e30, 1e30, 0.0], [1e30, -1e30, 1.0]]])
    assert official.check_implementation(A, L)[0]
    assert_fails(cholesky.check_output(A, L), "reconstruction")


# ---------------------------------------------------------------- every family (no vendor needed)

@pytest.mark.parametrize("case", cholesky.families())
@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_every_family_shape_dtype_determinism_symmetry(case, n):
    A = gen(case, n=n)
    assert A.shape == (3, n, n) and A.dtype == torch.float32 and A.is_contiguous()
    assert torch.isfinite(A).all() and torch.equal(A, A.mT)
    assert torch.equal(A, gen(case, n=n))


@pytest.mark.parametrize("case", cholesky.families())
def test_every_family_is_positive_definite(case):
    A = gen(case, n=48, batch=4, cond=4)
    assert (torch.linalg.cholesky_ex(A.double()).info == 0).all()
    assert (eigvals(A) > 0).all()


def test_seed_changes_every_drawn_family_and_not_the_diagonal():
    for case in ("dense", "spectrum", "lowrank", "rowscale", "tridiagonal"):
        assert not torch.equal(gen(case, seed=1), gen(case, seed=2)), case
    assert torch.equal(gen("diagonal", seed=1), gen("diagonal", seed=2))


def test_default_case_is_dense_and_unknown_families_are_refused():
    spec = {"batch": 2, "n": 8, "cond": 2, "seed": 3}
    assert torch.equal(cholesky.generate(spec), cholesky.generate({**spec, "case": "dense"}))
    with pytest.raises(ProblemError, match="unknown cholesky case family 'mixed' .known: dense, diagonal"):
        cholesky.generate({**spec, "case": "mixed"})


@pytest.mark.parametrize("cond,damping", [(0, 1e-2), (2, 1e-2), (5, 1e-5)])
def test_dense_smallest_eigenvalue_is_the_damping(cond, damping):
    w = eigvals(gen("dense", n=32, cond=cond))
    assert (w[:, 0] > 0.99 * damping).all()
    assert (w[:, 0] < damping + 0.05).all()          # X X^T / n is nearly singular at n = 32


def test_diagonal_is_the_logspace():
    A = gen("diagonal", n=16, cond=3)
    expected = torch.logspace(0, -3, 16, dtype=torch.float32)
    assert torch.equal(A, torch.diag_embed(expected).expand(3, 16, 16))
    assert torch.equal(gen("diagonal", n=4, cond=0)[0].diagonal(), torch.logspace(0, -1, 4))   # max(cond, 1)


def test_spectrum_has_the_planted_eigenvalues():
    w = eigvals(gen("spectrum", n=32, cond=3))
    expected = torch.logspace(-3, 0, 32, dtype=F64).expand(3, -1)
    torch.testing.assert_close(w, expected, rtol=0, atol=1e-6)
    assert gen("spectrum", n=32, cond=3).abs().min() > 0            # dense, not diagonal


@pytest.mark.parametrize("n,rank", [(8, 1), (16, 2), (100, 12), (600, 64)])
def test_lowrank_is_damped_rank_max_1_min_n_8_64(n, rank):
    cond = 4
    w = eigvals(gen("lowrank", n=n, batch=1, cond=cond))[0]
    damping = 10.0 ** -cond
    assert ((w - damping).abs() < 1e-5).sum() == n - rank
    assert (w[n - rank:] > 10 * damping).all()


def test_rowscale_is_a_scaled_damped_dense_matrix():
    n, cond = 32, 6
    A = gen("rowscale", n=n, cond=cond).double()
    d = torch.logspace(0, -cond / 2, n, dtype=F64)
    B = (A - 1e-6 * torch.eye(n, dtype=F64)) / (d[:, None] * d)
    assert (eigvals(B)[:, 0] > 0.99e-3).all()                       # damping 1e-3 before scaling
    assert (B.diagonal(dim1=-2, dim2=-1) > 0.1).all()
    assert A[:, -1, -1].max() < 1e-5                                # the last row is scaled by 10^-cond


def test_tridiagonal_ranges_and_band():
    n = 40
    A = gen("tridiagonal", n=n, batch=8)
    i = torch.arange(n)
    far = (i[:, None] - i[None, :]).abs() > 1
    assert (A[:, far] == 0).all()
    main, off = A.diagonal(dim1=-2, dim2=-1), A.diagonal(offset=1, dim1=-2, dim2=-1)
    assert ((main >= 1.5) & (main <= 2.5)).all() and ((off >= -0.25) & (off <= 0.25)).all()
    assert (off != 0).all()


def test_tridiagonal_draws_the_diagonal_then_the_off_diagonal():
    g = torch.Generator().manual_seed(5)
    main = torch.empty(2, 6).uniform_(1.5, 2.5, generator=g)
    off = torch.empty(2, 5).uniform_(-0.25, 0.25, generator=g)
    A = gen("tridiagonal", n=6, batch=2, seed=5)
    assert torch.equal(A.diagonal(dim1=-2, dim2=-1), main)
    assert torch.equal(A.diagonal(offset=-1, dim1=-2, dim2=-1), off)


# ---------------------------------------------------------------- benchmark inputs and robustness

def test_benchmark_counts_of_the_official_list():
    # max(1, min(50, 256 MiB // (4 batch n^2)))
    expected = {(4096, 32): 16, (1024, 64): 16, (16, 512): 16, (640, 512): 1, (60, 1024): 1, (8, 2048): 2,
                (1, 4096): 4, (2, 4096): 2, (1, 8192): 1, (1, 32768): 1}
    listed = {(s["batch"], s["n"]) for s in load_problem("cholesky").benchmarks}
    assert set(expected) <= listed
    for (batch, n), count in expected.items():
        assert benchmark_count({"batch": batch, "n": n}) == count, (batch, n)


def test_benchmark_inputs_start_at_the_spec_seed_then_add_42():
    spec = {"batch": 64, "n": 64, "cond": 2, "seed": 100, "case": "lowrank"}      # 256 MiB / 1 MiB -> 50
    inputs = cholesky.benchmark_inputs(spec)
    assert len(inputs) == 50
    for i in (0, 1, 49):
        assert torch.equal(inputs[i], cholesky.generate({**spec, "seed": 100 + 42 * i}))


def test_robustness_suite_covers_every_family_and_odd_sizes():
    specs = cholesky.robustness_specs()
    assert {(s["n"], s["case"]) for s in specs if s["n"] in SMALL_SIZES} == \
        {(n, f) for n in SMALL_SIZES for f in cholesky.families()}
    assert {31, 33, 63, 65, 127, 129, 255, 257, 513} <= {s["n"] for s in specs}
    assert {1, 3} == {s["batch"] for s in specs}


# ---------------------------------------------------------------- the gates

def test_cholesky_passes_every_family_with_margin():
    for case in cholesky.families():
        A = gen(case, n=40, cond=4)
        for L in (torch.linalg.cholesky(A), cholesky.baseline(A)):
            report = cholesky.check_output(A, L)
            assert report.passed and report.message is None, (case, report.message)
            assert list(report.residuals) == ["triangular", "reconstruction"]
            assert report.residuals["triangular"] == [0.0, 8.0]
            assert 0 <= report.residuals["reconstruction"][0] < 2
            assert report.info["min_diagonal"] > 0


def test_upper_entries_fail_triangular_at_the_corrupted_matrix():
    A = gen(n=16, batch=4)
    L = torch.linalg.cholesky(A)
    L[2, 3, 9] = 1e-3
    report = cholesky.check_output(A, L)
    assert_fails(report, "triangular")
    assert report.message.startswith("triangular: matrix 2 residual ")
    assert report.message.endswith(" > 8 (n eps ||A||_1)")


def test_tiny_upper_entries_within_the_limit_pass():
    A = gen(n=16, batch=2)
    L = torch.linalg.cholesky(A)
    L[0, 0, 5] = 2 * 16 * EPS * float(torch.linalg.matrix_norm(A[0], ord=1))   # 2 of the 8 allowed
    report = cholesky.check_output(A, L)
    assert report.passed and report.residuals["triangular"][0] == pytest.approx(2, rel=1e-6)


def test_the_gates_are_decided_by_the_float32_comparison_alone():
    # n = 3, ||A||_1 = s = 1 + 2^-23: the triangular allowance 8 n eps s rounds up in float32, so an upper entry
    # equal to it passes the official comparison though it is over the limit in exact arithmetic
    s = torch.tensor(1.0 + 2.0 ** -23)
    allowed = 8 * 3 * EPS * s                                   # float32, as the official check forms it
    assert float(allowed) > 24 * EPS * float(s)
    A = torch.diag_embed(s.expand(1, 3)).contiguous()
    d = float(torch.sqrt(s))
    L = torch.tensor([[[d, 0.0, float(allowed)], [0.0, d, 0.0], [0.0, 0.0, d]]])
    report = cholesky.check_output(A, L)
    assert report.passed, report.message
    assert report.residuals["triangular"] == [8.0, 8.0]
    L[0, 0, 2] = float(torch.nextafter(allowed, torch.tensor(1.0)))   # one float32 step more fails
    report = cholesky.check_output(A, L)
    assert_fails(report, "triangular")
    assert 8 < report.residuals["triangular"][0] < 8 * (1 + 1e-6)


def test_negative_diagonal_fails_only_the_diagonal_gate():
    A = gen(n=8, batch=3)
    L = torch.linalg.cholesky(A)
    L[1, :, 2] *= -1                               # L L^T unchanged, L[2, 2] < 0
    report = cholesky.check_output(A, L)
    assert_fails(report, "diagonal")
    assert report.message.startswith("diagonal: matrix 1 has L[2,2] = -")
    assert report.info["min_diagonal"] < 0
    assert report.residuals["reconstruction"][0] < 20


def test_zero_diagonal_fails():
    A = gen(n=4, batch=1)
    L = torch.linalg.cholesky(A)
    L[0, 3, 3] = 0.0
    assert_fails(cholesky.check_output(A, L), "diagonal")


def test_perturbed_factor_fails_reconstruction():
    A = gen(n=16, batch=4)
    L = torch.linalg.cholesky(A)
    L[3, 10, 4] *= 1.001
    report = cholesky.check_output(A, L)
    assert_fails(report, "reconstruction")
    assert report.message.startswith("reconstruction: matrix 3 ")
    assert report.residuals["triangular"][0] == 0.0


def test_gate_order_is_triangular_diagonal_reconstruction():
    A = gen(n=8, batch=2)
    L = torch.linalg.cholesky(A)
    L[0, 0, 7] = 1.0
    L[1, :, 1] *= -1.5
    assert_fails(cholesky.check_output(A, L), "triangular")
    L[0, 0, 7] = 0.0
    assert_fails(cholesky.check_output(A, L), "diagonal")


def test_structure_failures_are_one_line_and_checked_first():
    A = gen(n=8, batch=2)
    L = torch.linalg.cholesky(A)
    nan = L.clone()
    nan[1, 4, 2] = float("nan")
    cases = {
        "output": [(L,), (L, L), None, [L]],
        "shape": [L[:, :-1], L[:1], L[..., None]],
        "dtype": [L.double(), L.half()],
        "device": [L.to("meta")],
        "finite": [nan, L.masked_fill(L > 0, float("inf"))],
    }
    for gate, outputs in cases.items():
        for out in outputs:
            report = cholesky.check_output(A, out)
            assert_fails(report, gate)
            assert report.residuals == {}
    assert "of matrix 1" in cholesky.check_output(A, nan).message
    assert cholesky.check_output(A, L).passed


def test_bad_input_is_a_problem_error():
    A = gen(n=8)
    with pytest.raises(ProblemError, match="batch x n x n"):
        cholesky.check_output(A[0], torch.linalg.cholesky(A[0]))


def test_scaled_values_by_hand():
    # A = [[4, 2], [2, 5]] = L L^T with L = [[2, 0], [1, 2]]; ||A||_1 = 7, n = 2
    A = torch.tensor([[[4.0, 2.0], [2.0, 5.0]]])
    assert cholesky.check_output(A, torch.tensor([[[2.0, 0.0], [1.0, 2.0]]])).residuals == {
        "triangular": [0.0, 8.0], "reconstruction": [0.0, 20.0]}
    d = 2.0 ** -10
    L = torch.tensor([[[2.0, 0.0], [1.0, 2.0 + d]]])              # (L L^T)_11 = 5 + 4d + d^2, exact in float32
    report = cholesky.check_output(A, L)
    assert report.residuals["reconstruction"][0] == pytest.approx((4 * d + d * d) / (2 * EPS * 7), rel=1e-12)
    assert report.info == {"min_diagonal": 2.0}
    assert_fails(report, "reconstruction")


# ---------------------------------------------------------------- end to end on the CPU path

def submission(tmp_path, body):
    path = tmp_path / "submission.py"
    path.write_text(f"#!POPCORN leaderboard cholesky\nimport torch\n\ndef custom_kernel(A):\n    {body}\n")
    return path


def test_check_runs_every_family_and_a_new_seed_on_cpu(tmp_path):
    cases = [f"batch: 2; n: 24; cond: 3; seed: 5; case: {family}" for family in cholesky.families()]
    outcome = runner.check("cholesky", submission(tmp_path, "return torch.linalg.cholesky(A)"), cases, seeds=1,
                           device="cpu", log_path=None, harness="native")
    specs = [c["spec"] for c in outcome.record["cases"]]
    assert outcome.passed, outcome.table
    assert len(specs) == 12 and {s["case"] for s in specs} == set(cholesky.families())
    assert len({s["seed"] for s in specs}) == 2
    assert "triangular" in outcome.table and "reconstruction" in outcome.table


def test_check_fails_a_wrong_factor_on_cpu(tmp_path):
    sub = submission(tmp_path, "return torch.linalg.cholesky(A).mT.contiguous()")    # upper, not lower
    outcome = runner.check("cholesky", sub, ["batch: 2; n: 8; cond: 2; seed: 1"], device="cpu", log_path=None,
                           harness="native")
    assert not outcome.passed
    assert outcome.record["cases"][0]["error"].startswith("triangular: matrix ")


def test_the_submission_starts_from_the_global_seed_of_the_cholesky_eval(tmp_path):
    # cholesky's eval.py runs cases in its own process after seeding random, numpy and torch with 42 (no
    # POPCORN_SEED); qr_v2's and eigh's run them in a spawned pool worker that keeps torch's default seed
    body = ("assert (torch.initial_seed(), random.random()) == (42, random.Random(42).random()), "
            "torch.initial_seed(); return torch.linalg.cholesky(A)")
    sub = submission(tmp_path, body)
    sub.write_text(sub.read_text().replace("import torch\n", "import random\nimport torch\n", 1))
    outcome = runner.check("cholesky", sub, ["batch: 2; n: 8; cond: 2; seed: 1"], device="cpu", log_path=None,
                           harness="native")
    assert outcome.passed, outcome.record["cases"][0]["error"]
    assert cholesky.GLOBAL_SEED == 42 and not hasattr(native_checker("qr_v2"), "GLOBAL_SEED")


def test_the_problem_record_is_native():
    prob = load_problem("cholesky")
    assert prob.native is native_checker("cholesky") is cholesky
    assert prob.leaderboard == "cholesky" and len(prob.tests) == 17 and len(prob.benchmarks) == 15
    assert prob.tests[0] == {"batch": 16, "n": 32, "cond": 2, "seed": 53124, "case": "dense"}
