"""The multi-CTA panel model (parts/qr_v2/panel_model.py: TSQR over row blocks, then Householder
reconstruction) on CPU in float32: the native checker's gates on every input family, torch.geqrf's
output convention, slarfg's tau = 0 cases, and each stage's own contract.

geqrf's sign convention (LAPACK slarfg): R_ii = beta_i = -sign(alpha_i) ||(alpha_i, x_i)|| with sign(0) = +1,
alpha_i the column's updated diagonal entry and x_i its tail below; when x_i is exactly zero, tau_i = 0,
H_i = I and R_ii = alpha_i. The reconstruction makes the same choice (s_i = -sign(pivot)), so R is
compared with geqrf's as it is: no sign normalization."""
from __future__ import annotations

import functools
import math

import pytest
import torch

from checks.native import qr_v2
from checks.native.blocks import kept_rank
from parts.qr_v2.model import factor_panel_model
from parts.qr_v2.panel_model import (FAN_IN, H200_SMS, blocked_qr_multi_cta_model, compact_wy_factor,
                                     factor_panel_tsqr_hr, householder_reconstruction, leaf_rows, tsqr)

EPS = 2.0 ** -23
# cond per family as the official test list uses them (upper: 1, to scale its columns too)
FAMILY_COND = {"dense": 4, "upper": 1, "diagonal": 2, "rankdef": 0, "nearrank": 0, "clustered": 0, "band": 0,
               "nearcollinear": 0, "rowscale": 0, "mixed": 2}
# name -> (n, panel, rows, fan_in): tall panels of many row blocks; n chosen so that rankdef's zero columns
# start inside a panel, and block and node counts that fan_in does not divide
CONFIGS = {
    "w32-rows32-fan2": (200, 32, 32, 2),      # first panel: 7 blocks -> 4 -> 2 -> 1
    "w16-rows24-fan3": (154, 16, 24, 3),      # 7 blocks -> 3 -> 1, the last block 10 rows of 24
    "defaults": (260, 32, None, FAN_IN),      # leaf_rows(260, 3, 32) = 32: 9 blocks -> 3 -> 1
}
UNIQUE_REFLECTORS = ("dense", "upper", "diagonal", "rankdef", "clustered", "band", "rowscale")
FULL_RANK = ("dense", "upper", "diagonal", "band", "rowscale")


def qr_input(case: str, n: int, batch: int = 3, seed: int = 11) -> torch.Tensor:
    return qr_v2.generate({"batch": batch, "n": n, "cond": FAMILY_COND.get(case, 1), "seed": seed, "case": case})


def factor(A: torch.Tensor, config: str):
    _, panel, rows, fan_in = CONFIGS[config]
    return blocked_qr_multi_cta_model(A, panel, rows, fan_in)


@functools.cache
def _factored(case: str, config: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    A = qr_input(case, CONFIGS[config][0])
    return (A, *factor(A, config))


def factored(case: str, config: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(A, H, tau): a family's input at the config's n and its factors, computed once per session (the
    whole-QR tests share them); copies, so no test sees another's changes."""
    return tuple(t.clone() for t in _factored(case, config))


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x - ref).norm() / ref.norm().clamp(min=1e-30))


def householder_product(V: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """H_0 H_1 ... H_{w-1} (H_i = I - tau_i v_i v_i^T, v_i the columns of V), explicitly, in float64."""
    b, m, w = V.shape
    P = torch.eye(m, dtype=torch.float64).repeat(b, 1, 1)
    for i in range(w):
        v = V[:, :, i].double()
        P = P - (P @ v[:, :, None]) * (tau[:, i, None, None].double() * v[:, None, :])
    return P


# ---------------------------------------------------------------- the whole QR

@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("case", qr_v2.families())
def test_every_family_passes_the_native_gates(case, config):
    A, H, tau = factored(case, config)
    report = qr_v2.check_output(A, (H, tau))
    assert report.passed, report.message


@pytest.mark.parametrize("case", qr_v2.families())
def test_r_is_geqrfs_with_its_signs(case):
    A, H, _ = factored(case, "w32-rows32-fan2")
    H_ref, _ = torch.geqrf(A)
    assert rel(torch.triu(H), torch.triu(H_ref)) < 1e-4
    if case in FULL_RANK:
        diag, diag_ref = H.diagonal(dim1=1, dim2=2), H_ref.diagonal(dim1=1, dim2=2)
        assert torch.equal(torch.sign(diag), torch.sign(diag_ref))


@pytest.mark.parametrize("case", UNIQUE_REFLECTORS)
def test_h_and_tau_are_geqrfs(case):
    A, H, tau = factored(case, "w16-rows24-fan3")
    H_ref, tau_ref = torch.geqrf(A)
    assert rel(H, H_ref) < 1e-4
    assert rel(tau, tau_ref) < 1e-4


@pytest.mark.parametrize("case", ("upper", "diagonal"))
def test_triangular_input_is_its_own_factor(case):
    # every tail is exactly zero: slarfg gives tau = 0 everywhere and leaves A as it is; so must TSQR
    A, H, tau = factored(case, "w32-rows32-fan2")
    assert torch.equal(H, A) and torch.equal(tau, torch.zeros_like(tau))


def test_last_tau_is_zero():
    # the last column of a square matrix has an empty tail: geqrf's tau[n-1] is 0
    _, _, tau = factored("dense", "w32-rows32-fan2")
    assert torch.all(tau[:, -1] == 0) and torch.all(tau[:, :-1] >= 1)


@pytest.mark.parametrize("config", CONFIGS)
def test_zero_columns_of_rankdef_get_tau_zero(config):
    n = CONFIGS[config][0]
    rank = kept_rank(n)
    assert rank % CONFIGS[config][1], "the zero columns should start inside a panel"
    _, H, tau = factored("rankdef", config)
    assert torch.all(tau[:, rank:] == 0) and torch.all(H[:, :, rank:] == 0)
    assert torch.all(tau[:, :rank] >= 1)


def test_zero_column_before_a_nonzero_one():
    # slarfg's later reflectors skip the zero column's row: those panels take the one-CTA kernel's path
    A = qr_input("dense", 100)
    A[0, :, 40] = 0.0                  # inside panel 32..63
    A[1, :, 0] = 0.0                   # the very first column
    A[1, :, 70:72] = 0.0               # two, inside panel 64..95
    H, tau = blocked_qr_multi_cta_model(A, 32, 16, 2)
    for b, j in ((0, 40), (1, 0), (1, 70), (1, 71)):
        assert tau[b, j] == 0 and torch.all(H[b, j + 1:, j] == 0)
    H_ref, tau_ref = torch.geqrf(A)
    assert rel(H, H_ref) < 1e-4 and rel(tau, tau_ref) < 1e-4
    assert qr_v2.check_output(A, (H, tau)).passed


def test_zero_matrix():
    A = torch.zeros(2, 70, 70)
    H, tau = blocked_qr_multi_cta_model(A, 32, 16, 2)
    assert torch.equal(H, A) and torch.equal(tau, torch.zeros(2, 70))


@pytest.mark.parametrize("n", (1, 2, 3, 17, 33))
def test_small_and_odd_sizes(n):
    A = qr_input("mixed" if n > 1 else "dense", n)
    H, tau = blocked_qr_multi_cta_model(A, 32, 8, 2)
    assert qr_v2.check_output(A, (H, tau)).passed
    assert torch.all(tau[:, -1] == 0)


# ---------------------------------------------------------------- the stages

@pytest.mark.parametrize("m,w,rows,fan_in", [(300, 16, 24, 3), (257, 32, 32, 2), (64, 32, 40, 4), (16, 16, 16, 2)])
def test_tsqr_is_a_qr_of_the_panel(m, w, rows, fan_in):
    P = torch.randn(3, m, w, generator=torch.Generator().manual_seed(m))
    Q1, R = tsqr(P, rows, fan_in)
    assert Q1.shape == (3, m, w) and torch.equal(R, torch.triu(R))
    Q1d = Q1.double()
    assert float((Q1d.mT @ Q1d - torch.eye(w, dtype=torch.float64)).abs().max()) < 10 * m * EPS
    assert float((Q1d @ R.double() - P.double()).abs().max()) < 10 * m * EPS * float(P.abs().max())


@pytest.mark.parametrize("m,w", [(120, 16), (32, 32), (45, 8)])
def test_reconstruction_gives_householder_vectors_of_q1(m, w):
    Q1, _ = tsqr(torch.randn(2, m, w, generator=torch.Generator().manual_seed(w)), w, 2)
    Y, tau, s = householder_reconstruction(Q1)
    # Y is unit lower trapezoidal, tau is slarfg's range (0 only for the empty tail of a square Q1)
    assert torch.equal(Y, torch.tril(Y)) and torch.all(Y.diagonal(dim1=1, dim2=2) == 1)
    nontrivial = tau[:, :-1] if m == w else tau
    assert torch.all((nontrivial >= 1) & (nontrivial <= 2))
    assert torch.all(s.abs() == 1)
    # H_0 ... H_{w-1} [I; 0] = Q1 diag(s)
    first = householder_product(Y, tau)[:, :, :w]
    assert float((first - Q1.double() * s.double()[:, None, :]).abs().max()) < 10 * m * EPS


@pytest.mark.parametrize("n,k0,w", [(120, 0, 32), (100, 20, 16), (40, 8, 32), (37, 5, 13)])
def test_panel_keeps_the_one_cta_panels_contract(n, k0, w):
    A = qr_input("dense", n)
    H, tau = A.clone(), torch.zeros(3, n)
    Vt, T = factor_panel_tsqr_hr(H, tau, k0, w, rows=16, fan_in=2)
    H_one, tau_one = A.clone(), torch.zeros(3, n)
    factor_panel_model(H_one, tau_one, k0, w)
    m = n - k0
    # the same panel as the one-CTA kernel, in place, nothing else touched
    assert rel(H[:, k0:, k0:k0 + w], H_one[:, k0:, k0:k0 + w]) < 1e-4 and rel(tau, tau_one) < 1e-4
    assert torch.equal(H[:, :, :k0], A[:, :, :k0]) and torch.equal(H[:, :, k0 + w:], A[:, :, k0 + w:])
    assert torch.equal(H[:, :k0], A[:, :k0])
    # Vt: unit rows with the stored tails; T upper triangular with tau on its diagonal, I - V T V^T = Q
    V = Vt.mT
    assert Vt.shape == (3, w, m) and torch.equal(V, torch.tril(V)) and torch.all(V.diagonal(dim1=1, dim2=2) == 1)
    assert torch.equal(torch.tril(V[:, :w], -1), torch.tril(H[:, k0:k0 + w, k0:k0 + w], -1))
    assert torch.equal(V[:, w:], H[:, k0 + w:, k0:k0 + w])
    assert T.shape == (3, w, w) and torch.equal(T, torch.triu(T))
    assert torch.equal(T.diagonal(dim1=1, dim2=2), tau[:, k0:k0 + w])
    Q = householder_product(V, tau[:, k0:k0 + w])
    compact = torch.eye(m, dtype=torch.float64) - V.double() @ T.double() @ V.mT.double()
    assert float((compact - Q).abs().max()) < 1e-5
    # Q^T (the original panel) = [R; 0]
    QtP = Q.mT @ A[:, k0:, k0:k0 + w].double()
    scale = 10 * m * EPS * float(A.abs().max())
    assert float((torch.triu(QtP[:, :w]) - torch.triu(H[:, k0:k0 + w, k0:k0 + w]).double()).abs().max()) < scale
    assert float(torch.tril(QtP, -1).abs().max()) < scale


def test_compact_wy_factor_with_a_zero_tau():
    # a tau = 0 column (H_i = I) must drop out of T entirely
    V = torch.tril(torch.randn(2, 20, 6, generator=torch.Generator().manual_seed(3)), -1) + torch.eye(20, 6)
    tau = 2 / (V * V).sum(dim=1)
    tau[:, 2] = 0
    T = compact_wy_factor(V, tau)
    assert torch.all(T[:, 2, :] == 0) and torch.all(T[:, :, 2] == 0)
    compact = torch.eye(20, dtype=torch.float64) - V.double() @ T.double() @ V.mT.double()
    assert float((compact - householder_product(V, tau)).abs().max()) < 1e-5


@pytest.mark.parametrize("m,batch,w,rows", [(4096, 2, 32, 64), (2048, 2, 32, 32), (2048, 8, 32, 128),
                                            (1024, 60, 32, 512), (512, 640, 32, 512), (30, 3, 30, 32)])
def test_leaf_rows_fill_the_h200_in_one_wave(m, batch, w, rows):
    assert leaf_rows(m, batch, w) == rows
    ctas = batch * math.ceil(m / rows)
    assert ctas <= H200_SMS or rows >= m            # one wave, or one block per matrix (the batch fills it)
    assert rows == w or rows >= m or batch * math.ceil(m / (rows // 2)) > H200_SMS   # and no smaller r would
