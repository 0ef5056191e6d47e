"""The qr_v2 and eigh native gates: torch's own factorizations pass, corrupted ones fail, values follow the formulas."""
import pytest
import torch

import checks.native.gate_tools as gate_tools
from checks.native import native_checker
from checks.native.gate_tools import EPS
from popcorn.errors import ProblemError

MODULES = {problem: native_checker(problem) for problem in ("qr_v2", "eigh")}


def inputs(problem, case="dense", n=16, batch=4, cond=1, seed=3):
    return MODULES[problem].generate({"batch": batch, "n": n, "cond": cond, "seed": seed, "case": case})


def check_output(problem, A, output):
    return MODULES[problem].check_output(A, output)


def torch_qr(A):
    H, tau = torch.geqrf(A)
    return H.clone(), tau.clone()


def torch_eigh(A):
    L, Q = torch.linalg.eigh(A)
    return Q.clone(), L.clone()


SOLVERS = {"qr_v2": torch_qr, "eigh": torch_eigh}


def solve(problem, A):
    return SOLVERS[problem](A)


def assert_fails(report, gate):
    assert not report.passed
    assert report.message.startswith(f"{gate}:"), report.message


# ---------------------------------------------------------------- torch's own outputs pass

@pytest.mark.parametrize("problem,case", [(p, c) for p in SOLVERS for c in MODULES[p].families()])
def test_torch_outputs_pass_every_family(problem, case):
    A = inputs(problem, case, n=24, batch=3, cond=2)
    report = check_output(problem, A, solve(problem, A))
    assert report.passed, report.message
    assert report.message is None
    assert list(report.residuals) == [g.name for g in MODULES[problem].GATES]
    for value, limit in report.residuals.values():
        assert 0 <= value <= limit


@pytest.mark.parametrize("problem", list(SOLVERS))
@pytest.mark.parametrize("n", [1, 2, 3])
def test_tiny_sizes(problem, n):
    A = inputs(problem, n=n)
    assert check_output(problem, A, solve(problem, A)).passed


def test_qr_reports_leakage_and_reconstruction_as_info():
    A = inputs("qr_v2")
    report = check_output("qr_v2", A, torch_qr(A))
    assert set(report.info) == {"leakage", "reconstruction"}
    assert set(report.residuals) == {"factor", "orthogonality"}
    assert all(0 <= v < 20 for v in report.info.values())


# ---------------------------------------------------------------- corrupted outputs fail

def test_qr_wrong_r_fails_factor_at_the_corrupted_matrix():
    A = inputs("qr_v2")
    H, tau = torch_qr(A)
    H[3, 0, 5] += 1e-3
    report = check_output("qr_v2", A, (H, tau))
    assert_fails(report, "factor")
    assert report.message.startswith("factor: matrix 3 residual ")
    assert report.message.endswith(" > 20 (n eps ||A||_1)")
    assert report.residuals["orthogonality"][0] <= 100


def test_qr_perturbed_tau_breaks_orthogonality():
    A = inputs("qr_v2")
    H, tau = torch_qr(A)
    tau[1, 2] *= 1.001
    report = check_output("qr_v2", A, (H, tau))
    assert not report.passed
    assert report.residuals["orthogonality"][0] > 100
    assert report.residuals["factor"][0] > 20


def test_qr_nonfinite_q():
    A = inputs("qr_v2", n=8)
    H, tau = torch_qr(A)
    H[1], tau[1] = 3e38, 3e38   # finite inputs whose reflectors overflow even float64
    report = check_output("qr_v2", A, (H, tau))
    assert_fails(report, "finite")
    assert "Q of matrix 1" in report.message


def test_eigh_unsorted_values_fail_only_sorted():
    A = inputs("eigh")
    Q, L = torch_eigh(A)
    report = check_output("eigh", A, (Q.flip(-1), L.flip(-1)))
    assert_fails(report, "sorted")
    others = {k: v for k, v in report.residuals.items() if k != "sorted"}
    assert all(value <= limit for value, limit in others.values())


def test_eigh_non_orthogonal_q():
    A = inputs("eigh")
    Q, L = torch_eigh(A)
    report = check_output("eigh", A, (Q * 1.001, L))
    assert not report.passed
    assert report.residuals["orthogonality"][0] > 100


def test_eigh_wrong_values_fail_eigen_equation():
    A = inputs("eigh")
    Q, L = torch_eigh(A)
    L[2] += 1e-3
    report = check_output("eigh", A, (Q, L))
    assert_fails(report, "eigen_equation")
    assert report.message.startswith("eigen_equation: matrix 2 ")


@pytest.mark.parametrize("problem", list(SOLVERS))
@pytest.mark.parametrize("which", [0, 1])
def test_nan_fails(problem, which):
    A = inputs(problem)
    out = list(solve(problem, A))
    out[which][(2,) + (0,) * (out[which].dim() - 1)] = float("nan")
    report = check_output(problem, A, tuple(out))
    assert_fails(report, "finite")
    assert "of matrix 2" in report.message


@pytest.mark.parametrize("problem", list(SOLVERS))
def test_structure(problem):
    A = inputs(problem)
    first, second = solve(problem, A)
    cases = {
        "output": [first, (first,), (first, second, second), (first, "x"), None,
                   [first, second]],                   # the official checker wants a tuple
        "shape": [(first[:, :-1], second), (first, second[:, :-1]), (first, second[:2])],
        "dtype": [(first.double(), second), (first, second.half())],
        "device": [(first.to("meta"), second), (first, second.to("meta"))],
    }
    for gate, outputs in cases.items():
        for output in outputs:
            report = check_output(problem, A, output)
            assert_fails(report, gate)
            assert report.residuals == {}
            assert "\n" not in report.message
    assert check_output(problem, A, (first, second)).passed


def test_bad_input():
    A = inputs("qr_v2")
    with pytest.raises(ProblemError, match="batch x n x n"):
        check_output("qr_v2", A[0], torch_qr(A[0]))
    with pytest.raises(ProblemError, match="batch x n x n"):
        check_output("eigh", A[..., :-1], torch_eigh(A))


# ---------------------------------------------------------------- the zero matrix

def test_zero_matrix_accepts_only_an_exact_zero_residual():
    A = torch.zeros(2, 8, 8)
    assert check_output("qr_v2", A, torch_qr(A)).passed
    assert check_output("eigh", A, torch_eigh(A)).passed
    H, tau = torch_qr(A)
    H[1, 0, 0] = 1e-30
    report = check_output("qr_v2", A, (H, tau))
    assert_fails(report, "factor")
    assert report.residuals["factor"][0] == float("inf")


# ---------------------------------------------------------------- the formulas on hand-built examples

def test_qr_scaled_values_by_hand():
    A = torch.tensor([[[2.0, 0.0], [0.0, 3.0]]])
    H = torch.tensor([[[2.0, 1e-3], [0.0, 3.0]]])   # tau = 0: Q = I, R - Q^T A = 1e-3 at (0, 1)
    report = check_output("qr_v2", A, (H, torch.zeros(1, 2)))
    factor = float(torch.tensor(1e-3, dtype=torch.float32)) / (2 * EPS * 3)
    assert report.residuals["factor"] == [pytest.approx(factor, rel=1e-12), 20.0]
    assert report.residuals["orthogonality"] == [0.0, 100.0]
    assert report.info["reconstruction"] == pytest.approx(factor, rel=1e-12)
    assert report.info["leakage"] == 0.0
    assert not report.passed and report.message.startswith("factor: matrix 0 residual 1.4e+03 > 20")


def test_eigh_scaled_values_by_hand():
    A = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])
    d = 2 ** -10
    Q = torch.tensor([[[1.0, d], [0.0, 1.0]]])     # Q^T Q - I = [[0, d], [d, d^2]]
    L = torch.tensor([[2.0, 1.0]])                  # descends by 1
    report = check_output("eigh", A, (Q, L))
    unit = 2 * EPS * 2                              # n eps ||A||_1
    # A Q - Q diag(L) = [[-1, d - d], [0, 1]]
    assert report.residuals["eigen_equation"][0] == pytest.approx(1 / unit, rel=1e-12)
    assert report.residuals["sorted"][0] == pytest.approx(1 / (2 * EPS * 2), rel=1e-12)
    assert report.residuals["orthogonality"][0] == pytest.approx((d + d * d) / (2 * EPS), rel=1e-12)
    # Q diag(L) Q^T - A = [[1 + d^2, d], [d, -1]]
    assert report.residuals["reconstruction"][0] == pytest.approx((1 + d * d + d) / unit, rel=1e-12)
    assert report.message.startswith("sorted: matrix 0 ")


def test_eigh_sorted_is_decided_in_float32_as_the_official_check():
    # n = 2: the allowance is 100 n eps max(1, max|L|) = 200 eps. The two values descend by a little more
    # than that exactly (float64), but their float32 step rounds to -200 eps, which the official check
    # (float32 steps against a float32 allowance) lets pass. Q = I and A = diag(L) pass every other gate.
    hi, lo = 2.3841905203880742e-05, 4.66254153341783e-11          # float32 values, printed exactly
    L = torch.tensor([[hi, lo]], dtype=torch.float32)
    assert float(L[0, 0].double() - L[0, 1].double()) > 200 * EPS   # over the limit in exact arithmetic
    assert float(L[0, 1] - L[0, 0]) == -200 * EPS                    # on it in float32
    A = torch.diag_embed(L)
    report = check_output("eigh", A, (torch.eye(2).expand(1, 2, 2).contiguous(), L))
    assert report.passed, report.message
    assert report.residuals["sorted"] == [100.0, 100.0]
    # a step one float32 ulp longer (2^-39 at this size) fails, at a value just over the limit
    L2 = torch.tensor([[hi, lo - 2.0 ** -38]], dtype=torch.float32)
    assert float(L2[0, 1] - L2[0, 0]) < -200 * EPS
    report = check_output("eigh", torch.diag_embed(L2), (torch.eye(2).expand(1, 2, 2).contiguous(), L2))
    assert_fails(report, "sorted")
    assert 100 < report.residuals["sorted"][0] < 100 * (1 + 1e-6)


# ---------------------------------------------------------------- chunking

@pytest.mark.parametrize("problem", list(SOLVERS))
def test_chunked_work_gives_the_same_report(problem, monkeypatch):
    A = inputs(problem, n=16, batch=7)
    out = solve(problem, A)
    out[0][5] *= 1.01   # the worst matrix lies in a late chunk
    whole = check_output(problem, A, out)
    monkeypatch.setattr(gate_tools, "CHUNK_ELEMENTS", 2 * 16 * 16)   # chunks of 2 matrices
    chunked = check_output(problem, A, out)
    assert chunked == whole
    assert "matrix 5 " in whole.message


# ---------------------------------------------------------------- as the official checker computes them

def l1(X):
    return X.abs().sum(dim=-2).amax(dim=-1)


def test_qr_q_is_materialized_from_the_float32_factors():
    # official: Q = householder_product(H, tau) on the returned float32 tensors, widened afterwards
    n = 128
    A = torch.randn(3, n, n, generator=torch.Generator().manual_seed(1))
    H, tau = torch.geqrf(A)
    report = check_output("qr_v2", A, (H, tau))
    I = torch.eye(n, dtype=torch.float64)
    for Q, matches in ((torch.linalg.householder_product(H, tau).double(), True),
                       (torch.linalg.householder_product(H.double(), tau.double()), False)):
        orth = (l1(Q.mT @ Q - I) / (n * EPS)).max().item()
        factor = (l1(torch.triu(H).double() - Q.mT @ A.double()) / (n * EPS * l1(A.double()))).max().item()
        assert (report.residuals["orthogonality"][0] == pytest.approx(orth, rel=1e-9)) == matches
        assert (report.residuals["factor"][0] == pytest.approx(factor, rel=1e-9)) == matches


def test_tuple_subclasses_pass():
    A = inputs("qr_v2")
    assert check_output("qr_v2", A, torch.geqrf(A)).passed          # torch.return_types.geqrf is a tuple


def test_a_wrong_output_is_described_without_a_wrong_article():
    # It said "got a int" (and "a EighResult" for a named tuple): no article before a type's name.
    assert gate_tools.describe(3) == "a value of type int"
    assert gate_tools.describe((torch.zeros(1), 2)) == "a tuple of 2 (Tensor, int)"
    assert gate_tools.describe([torch.zeros(1)]) == "a list of 1 (Tensor)"
    assert gate_tools.describe(torch.linalg.eigh(torch.eye(2))) == "a tuple (type linalg_eigh) of 2 (Tensor, Tensor)"
    report = check_output("qr_v2", inputs("qr_v2"), 3)
    assert not report.passed and "got a value of type int" in report.message


def test_qr_diagnostics_are_batch_wide():
    # official: max over the batch of the residual, over n eps times the max over the batch of ||A||_1
    A = torch.tensor([[[2.0, 0.0], [0.0, 3.0]], [[2000.0, 0.0], [0.0, 3000.0]]])
    H = A.clone()
    H[0, 0, 1] = 1e-3                                  # tau = 0: Q = I, so Q R - A = 1e-3 at (0, 1) of matrix 0
    report = check_output("qr_v2", A, (H, torch.zeros(2, 2)))
    expected = float(torch.tensor(1e-3)) / (2 * EPS * 3000)
    assert report.info["reconstruction"] == pytest.approx(expected, rel=1e-12)
    assert report.residuals["factor"][0] == pytest.approx(float(torch.tensor(1e-3)) / (2 * EPS * 3), rel=1e-12)
