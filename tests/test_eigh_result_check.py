"""parts/eigh/result_check.py: each matrix of our eigh route accepted on its residuals or solved again.

Its measures must agree with the checker's gates (checks/native/eigh.py, float64) to within the fp32
rounding of the products, accept what torch's eigh gives on every family, and reject each kind of wrong
answer; the fallback must see only the rejected matrices and leave the others as they were."""
import pytest
import torch

from checks.native import native_checker
from parts.eigh.result_check import ACCEPT, accept_or_resolve, fp32_product, rejected, residual_units

CHECKER = native_checker("eigh")
FAMILIES = tuple(CHECKER.FAMILIES)


def solved(family: str, n: int = 48, batch: int = 3, seed: int = 5):
    A = CHECKER.generate({"batch": batch, "n": n, "cond": 2, "seed": seed, "case": family})
    L, Q = torch.linalg.eigh(A.double())
    return A, Q.float(), L.float()


def checker_units(A, Q, L) -> dict:
    """The checker's own per-matrix measures (float64), for the ones result_check computes."""
    measures = CHECKER._measures(A, Q, L)
    return {name: measures[name] for name in ACCEPT}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_good_decomposition_is_accepted_on_every_family(family):
    A, Q, L = solved(family)
    assert not rejected(A, Q, L).any()
    for product in ("ieee", "tf32x3"):
        ours = residual_units(A, Q, L, product)
        for name, units in checker_units(A, Q, L).items():
            # fp32 products against the checker's float64: a few units apart at most (n eps units)
            assert torch.allclose(ours[name].double(), units, atol=4.0, rtol=0.05), (name, ours[name], units)


def test_measures_agree_with_the_checker_near_the_gates():
    A, Q, L = solved("dense", n=64, batch=4)
    noise = torch.randn(Q.shape, generator=torch.Generator().manual_seed(1))
    Q = Q + noise * (60 * 64 * 2.0 ** -23 / 64)        # tens of units of each measure
    L = L + L.abs().amax() * 64 * 2.0 ** -23 * torch.tensor([0.0, 40.0, 80.0, 120.0])[:, None]
    ours = residual_units(A, Q, L)
    for name in ("eigen_equation", "orthogonality"):
        units = checker_units(A, Q, L)[name]
        assert (units > 10).all() and torch.allclose(ours[name].double(), units, rtol=0.02), name


@pytest.mark.parametrize("spoil, measure", [
    ("swap two columns of Q", "eigen_equation"),
    ("scale a column of Q by 1.01", "orthogonality"),
    ("move one eigenvalue by 1e-3 max|L|", "eigen_equation"),
    ("swap two eigenvalues", "sorted"),
    ("a NaN in Q", None),
    ("an inf in L", None),
])
def test_each_kind_of_wrong_answer_is_rejected_for_that_matrix_only(spoil, measure):
    A, Q, L = solved("spectrum", n=40, batch=3)
    Q, L = Q.clone(), L.clone()
    if spoil == "swap two columns of Q":
        Q[1, :, [3, 20]] = Q[1, :, [20, 3]]
    elif spoil == "scale a column of Q by 1.01":
        Q[1, :, 7] *= 1.01
    elif spoil == "move one eigenvalue by 1e-3 max|L|":
        L[1, 10] += 1e-3 * L[1].abs().amax()
    elif spoil == "swap two eigenvalues":
        L[1, [0, 39]] = L[1, [39, 0]]
    elif spoil == "a NaN in Q":
        Q[1, 5, 5] = float("nan")
    else:
        L[1, 2] = float("inf")
    assert rejected(A, Q, L).tolist() == [False, True, False]
    if measure is not None:
        assert residual_units(A, Q, L)[measure][1] >= ACCEPT[measure]


def test_extreme_magnitudes_have_the_units_of_the_scaled_matrix():
    A, Q, L = solved("dense", n=33, batch=2)
    base = residual_units(A, Q, L)
    for k in (60, -60):
        scaled = residual_units(A * 2.0 ** k, Q, L * 2.0 ** k)
        for name in ("eigen_equation", "orthogonality"):
            assert torch.equal(scaled[name], base[name]), (k, name)


def test_a_zero_matrix_accepts_only_exact_zeros():
    A = torch.zeros(2, 8, 8)
    Q = torch.eye(8).expand(2, 8, 8).clone()
    L = torch.zeros(2, 8)
    L[1, 0] = -1e-30                                       # bisection's pivmin leftovers, not exactly zero
    assert rejected(A, Q, L).tolist() == [False, True]


def test_the_fallback_gets_only_the_rejected_matrices_and_replaces_only_them():
    A, Q, L = solved("clustered", n=40, batch=4)
    good_Q, good_L = Q.clone(), L.clone()
    Q[0, :, 0] = 0.0
    Q[2, 3, 3] = float("nan")
    seen = []

    def fallback(subset):
        seen.append(subset)
        values, vectors = torch.linalg.eigh(subset.double())
        return vectors.float(), values.float()

    out_Q, out_L, resolved = accept_or_resolve(A, Q, L, fallback)
    assert resolved == 2 and len(seen) == 1 and torch.equal(seen[0], A[[0, 2]])
    assert torch.equal(out_Q[[1, 3]], good_Q[[1, 3]]) and torch.equal(out_L[[1, 3]], good_L[[1, 3]])
    assert not rejected(A, out_Q, out_L).any()
    assert torch.isnan(Q[2, 3, 3])                          # the caller's tensors are not written


def test_nothing_rejected_calls_no_fallback():
    A, Q, L = solved("psd", n=36, batch=2)

    def fallback(subset):
        raise AssertionError("called")

    out_Q, out_L, resolved = accept_or_resolve(A, Q, L, fallback)
    assert resolved == 0 and out_Q is Q and out_L is L


def test_the_products_are_fp32_accurate_and_an_unknown_one_is_refused():
    P = torch.randn(2, 30, 30, generator=torch.Generator().manual_seed(2))
    exact = P.double() @ P.double().mT
    for product in ("ieee", "tf32x3"):
        error = (fp32_product(P, P.mT, product).double() - exact).abs().amax() / exact.abs().amax()
        assert error < 2e-6, product
    with pytest.raises(ValueError, match="'fp16'"):
        fp32_product(P, P, "fp16")


def test_the_route_counts_what_its_fallback_re_solved(monkeypatch):
    from parts.eigh import route
    A, Q, L = solved("band", n=40, batch=3)
    Q[2] = Q[2].flip(-1)                                    # eigenvectors out of step with L
    monkeypatch.setattr(route, "reduction_eigh_cuda", lambda data: (Q.clone(), L.clone()))
    monkeypatch.setattr(route, "BATCHED_SYEV", lambda subset: tuple(x.float() for x in
                                                                     torch.linalg.eigh(subset.double())[::-1]))
    monkeypatch.setattr(route, "ROUTE_COUNTERS", {"calls": 0, "matrices": 0, "resolved": 0})
    out_Q, out_L = route.ours_checked_cuda(A)
    assert route.ROUTE_COUNTERS == {"calls": 1, "matrices": 3, "resolved": 1}
    assert not rejected(A, out_Q, out_L).any()
