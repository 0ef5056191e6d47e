"""tridiagonal_leaf.cu's and tridiagonal_merge.cu's plan on CPU (the kernels cannot run here): their data flow
(parts/eigh/tridiagonal_kernel_model.py, every output starting as NaN) against tridiagonal_model.py.

- In float64 the replay must give the model's eigenvalues and vectors elementwise (the orders of its sums
  differ from torch's, so to rounding: FLOAT64_AGREEMENT), with no NaN left: no entry read or returned unwritten.
- In float32 it must meet test_eigh_tridiagonal_model.py's bounds on its hard spectra, and the whole eigh
  pipeline with both kernels' replays (reduction and solver) the official gates on every checker family.
"""
from __future__ import annotations

import pytest
import torch

from checks.native import native_checker
from parts.eigh import tridiagonal_model as model
from parts.eigh.reduction_kernel_model import tridiagonalize_kernel_order
from parts.eigh.reduction_model import PANEL, eigh_pipeline_model
from parts.eigh.tridiagonal_kernel_model import merge_kernel_order, merge_stage_kernel_order, solve_leaf_kernel_order
from tests.test_eigh_tridiagonal_model import HARD, assert_accurate, generator

FLOAT64_AGREEMENT = 1e-12         # measured <= 7e-15 (Z at n = 100); eigenvalues relative to max |T|
GATE_SHARE = 0.1                  # test_eigh_reduction_model.py's share of each official gate
CHECKER = native_checker("eigh")


def kernel_order_solve(d, e, leaf_size=model.LEAF_SIZE):
    """tridiagonal_route.tridiagonal_eigh_cuda with the kernels' replays in place of the kernels."""
    return model.tridiagonal_eigh_model(d, e, leaf_size, solve_leaf_kernel_order, merge_stage_kernel_order)


def assert_agrees(got, expected, scale: float, name: str):
    assert got.shape == expected.shape, name
    assert bool(torch.isfinite(got).all()), f"{name}: an entry read before it was written, or never written"
    assert (got - expected).abs().max().item() <= FLOAT64_AGREEMENT * scale, name


@pytest.mark.parametrize("m", [1, 2, 3, 17, 31, 32])
def test_leaf_kernel_order_is_the_model_elementwise_in_float64(m):
    g = generator(m)
    d, e = torch.randn(3, m, generator=g, dtype=torch.float64), torch.randn(3, m - 1, generator=g, dtype=torch.float64)
    (w, Z), (w_ref, Z_ref) = solve_leaf_kernel_order(d, e), model.solve_leaf(d, e)
    scale = max(d.abs().max().item(), e.abs().max().item() if m > 1 else 0.0)
    assert_agrees(w, w_ref, scale, "w")
    assert_agrees(Z, Z_ref, 1.0, "Z")


def halves_with_deflation(n1: int, n2: int, seed: int):
    """Merge inputs whose deflation takes both paths: D with exact and near ties (rotations), and zero and
    negligible weights in z (poles deflated as they are); Z1, Z2 orthogonal elsewhere."""
    g = generator(seed)
    Z1 = torch.linalg.qr(torch.randn(2, n1, n1, generator=g, dtype=torch.float64))[0]
    Z2 = torch.linalg.qr(torch.randn(2, n2, n2, generator=g, dtype=torch.float64))[0]
    w1 = torch.sort(torch.randn(2, n1, generator=g, dtype=torch.float64), dim=1).values
    w2 = torch.sort(torch.randn(2, n2, generator=g, dtype=torch.float64), dim=1).values
    w2[:, 3] = w1[:, 5]                           # an exact tie across the halves
    w2[:, 7] = w1[:, 9] + 1e-18                   # a near tie
    w1, w2 = w1.sort(dim=1).values, w2.sort(dim=1).values
    Z1[:, -1, 2] = 0                              # zero and negligible weights
    Z2[:, 0, 4] = 1e-20
    return w1, Z1, w2, Z2, torch.tensor([0.7, -0.3], dtype=torch.float64)


@pytest.mark.parametrize("n1, n2", [(1, 1), (16, 16), (16, 17), (25, 25), (32, 31)])
def test_merge_kernel_order_is_the_model_elementwise_in_float64(n1, n2):
    g = generator(100 * n1 + n2)
    cases = [(torch.sort(torch.randn(2, n1, generator=g, dtype=torch.float64), dim=1).values,
              torch.linalg.qr(torch.randn(2, n1, n1, generator=g, dtype=torch.float64))[0],
              torch.sort(torch.randn(2, n2, generator=g, dtype=torch.float64), dim=1).values,
              torch.linalg.qr(torch.randn(2, n2, n2, generator=g, dtype=torch.float64))[0],
              torch.tensor([0.5, -1.5], dtype=torch.float64))]
    if min(n1, n2) >= 10:
        cases.append(halves_with_deflation(n1, n2, n1 + n2))
    for args in cases:
        values, S = merge_kernel_order(*args)
        values_ref, S_ref = model.merge_factors(*args)
        assert_agrees(values, values_ref, values_ref.abs().max().item(), "values")
        assert_agrees(S, S_ref, 1.0, "S")


def test_the_deflation_case_takes_both_deflation_paths():
    """halves_with_deflation must exercise what it is there for: rotations and poles deflated as they are."""
    w1, Z1, w2, Z2, beta = halves_with_deflation(16, 17, 33)
    D, perm = torch.cat([w1, w2], dim=1).sort(dim=1, stable=True)
    z = (torch.cat([Z1[:, -1], torch.sign(beta)[:, None] * Z2[:, 0]], dim=1) * 0.5 ** 0.5).gather(1, perm)
    _, _, deflated, (partner, _, _) = model.deflate(D, z, 2 * beta.abs())
    rotated = partner != torch.arange(33)
    assert bool(rotated.any(dim=1).all())
    assert int(deflated.sum(dim=1).min()) > int(rotated.sum(dim=1).max())


@pytest.mark.parametrize("n", [33, 64, 100])
def test_solver_kernel_order_is_the_model_elementwise_in_float64(n):
    g = generator(n + 7)
    d, e = torch.randn(2, n, generator=g, dtype=torch.float64), torch.randn(2, n - 1, generator=g, dtype=torch.float64)
    (w, Z), (w_ref, Z_ref) = kernel_order_solve(d, e), model.tridiagonal_eigh_model(d, e)
    assert_agrees(w, w_ref, w_ref.abs().max().item(), "w")
    assert_agrees(Z, Z_ref, 1.0, "Z")


@pytest.mark.parametrize("name", list(HARD))
def test_solver_kernel_order_meets_the_bounds_on_hard_spectra(name):
    d, e = HARD[name]()
    assert_accurate(d[None].float(), e[None].float(), model.LEAF_SIZE, kernel_order_solve)


@pytest.mark.parametrize("family", CHECKER.families())
def test_pipeline_with_both_kernel_orders_meets_the_gates_on_every_family(family):
    """The "ours" route's plan: reduction and tridiagonal replays in the pipeline, n = 64 (two leaves, one merge)."""
    A = CHECKER.generate({"batch": 2, "n": 64, "cond": 2, "seed": 5, "case": family})
    report = CHECKER.check_output(A, eigh_pipeline_model(A, PANEL, tridiagonalize_kernel_order,
                                                         lambda d, e: kernel_order_solve(d, e)))
    assert report.passed, report.message
    shares = {gate: value / limit for gate, (value, limit) in report.residuals.items()}
    assert max(shares.values()) <= GATE_SHARE, shares
