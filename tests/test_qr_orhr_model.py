"""parts/qr_v2/orhr_panel_model.py: panels by CholeskyQR2 and Householder reconstruction, with a per-matrix
fallback to the Householder panel."""
import pytest
import torch

from checks.native import qr_v2
from parts.qr_v2.model import blocked_qr, compact_wy_factor, factor_panel_model
from parts.qr_v2.orhr_panel_model import cholesky_qr2, householder_reconstruction, orhr_panel_model


def _orhr_qr(A):
    return blocked_qr(A, lambda m: 32, orhr_panel_model)


@pytest.mark.parametrize("case", sorted(qr_v2.PROFILES) + ["mixed"])
def test_blocked_qr_with_orhr_panels_passes_the_gates_on_every_family(case):
    A = qr_v2.CASES.generate({"batch": 3, "n": 96, "cond": 2, "seed": 5, "case": case})
    report = qr_v2.check_output(A, _orhr_qr(A))
    assert report.passed, report.message
    factor, orthogonality = report.residuals["factor"][0], report.residuals["orthogonality"][0]
    assert factor < 0.5 and orthogonality < 5      # the Householder panel's margins are 0.01-0.1 and 0.2-1


def test_reconstruction_gives_reflectors_whose_first_columns_are_q_times_the_signs():
    Q = torch.linalg.qr(torch.randn(4, 80, 16, dtype=torch.float64)).Q
    V, tau, s = householder_reconstruction(Q)
    assert torch.equal(torch.triu(V[:, :16]), torch.eye(16, dtype=V.dtype).expand(4, 16, 16))
    T = compact_wy_factor(V.mT @ V, tau)
    first = torch.eye(80, 16, dtype=Q.dtype) - V @ T @ V[:, :16].mT
    torch.testing.assert_close(first, Q * s[:, None, :], atol=1e-12, rtol=0)
    torch.testing.assert_close(tau, 2 / (V * V).sum(dim=1), atol=1e-12, rtol=0)   # genuine reflectors


def test_cholesky_qr2_refuses_zero_collinear_and_non_finite_panels_per_matrix():
    good = torch.randn(1, 64, 8)
    collinear = torch.randn(1, 64, 1).expand(1, 64, 8) + 1e-6 * torch.randn(1, 64, 8)
    infinite = good.clone().index_fill_(1, torch.tensor([3]), float("inf"))
    P = torch.cat([good, torch.zeros(1, 64, 8), collinear, infinite])
    Q, R, ok = cholesky_qr2(P)
    assert ok.tolist() == [True, False, False, False]
    torch.testing.assert_close(Q[0] @ R[0], P[0], atol=1e-5, rtol=1e-5)
    assert (Q[0].mT @ Q[0] - torch.eye(8)).abs().max() < 1e-5


def test_a_refused_matrix_gets_exactly_the_householder_panel_and_the_rest_the_reconstruction():
    A = torch.randn(2, 64, 64)
    A[1, :, :32] = 0.0                                  # matrix 1's first panel: CholeskyQR2 breaks down
    H, tau = A.clone(), torch.zeros(2, 64)
    Vt, T = orhr_panel_model(H, tau, 0, 32)
    H_ref, tau_ref = A.clone(), torch.zeros(2, 64)
    Vt_ref, T_ref = factor_panel_model(H_ref, tau_ref, 0, 32)
    assert torch.equal(H[1], H_ref[1]) and torch.equal(tau[1], tau_ref[1]) and torch.equal(Vt[1], Vt_ref[1])
    assert not torch.allclose(H[0, :, :32], H_ref[0, :, :32])   # matrix 0 took the other algorithm ...
    R = torch.triu(H[0, :32, :32])
    Q = torch.eye(64, 32) - Vt[0].mT @ T[0] @ Vt[0, :, :32]
    torch.testing.assert_close(Q @ R, A[0, :, :32], atol=1e-5, rtol=1e-5)   # ... and factors the panel
