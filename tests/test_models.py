"""The torch models of the kernels (the executable specification), on CPU in float32."""
from __future__ import annotations

import itertools

import pytest
import torch

from checks.native import eigh, qr_v2
from parts.eigh.model import jacobi_eigh_model, tournament_pairs
from parts.qr_v2 import route as qr_route
from parts.qr_v2.model import (apply_block_reflector, apply_block_reflector_tf32x3, blocked_qr, factor_panel_model,
                               householder_qr_model, reflector)

QR_GATE_FAMILIES = ("dense", "rankdef", "clustered", "nearcollinear", "mixed")
# Families whose factorization is unique enough for an elementwise comparison with geqrf
# (near-collinear columns make the trailing reflectors depend on rounding).
QR_AGREE_FAMILIES = ("dense", "rankdef", "clustered")
QR_SIZES = (48, 70)


def qr_input(case: str, n: int, batch: int = 3, seed: int = 5):
    return qr_v2.generate({"batch": batch, "n": n, "cond": 1, "seed": seed, "case": case})


def fixed(width: int):
    return lambda m: width


QR_MODELS = {
    "unblocked": householder_qr_model,
    "blocked-8": lambda A: blocked_qr(A, fixed(8)),
    "blocked-32": lambda A: blocked_qr(A, fixed(32)),
    "blocked-narrowing": lambda A: blocked_qr(A, lambda m: 32 if m <= 40 else 12),   # width varies by panel
    "blocked-16-tf32x3": lambda A: blocked_qr(A, fixed(16), update=apply_block_reflector_tf32x3),
    "blocked-32-tf32x3": lambda A: blocked_qr(A, fixed(32), update=apply_block_reflector_tf32x3),
}


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x - ref).norm() / ref.norm().clamp(min=1e-30))


# ---------------------------------------------------------------- qr_v2

@pytest.mark.parametrize("model", QR_MODELS)
@pytest.mark.parametrize("n", QR_SIZES)
@pytest.mark.parametrize("case", QR_AGREE_FAMILIES)
def test_qr_models_agree_with_geqrf(model, n, case):
    # 48 and 70 are not multiples of 32; 70 is not a multiple of 8 either
    A = qr_input(case, n)
    H, tau = QR_MODELS[model](A)
    H_ref, tau_ref = torch.geqrf(A)
    assert H.dtype == tau.dtype == torch.float32
    assert rel(H, H_ref) < 1e-4
    assert rel(tau, tau_ref) < 1e-4


@pytest.mark.parametrize("model", QR_MODELS)
@pytest.mark.parametrize("n", QR_SIZES)
@pytest.mark.parametrize("case", QR_GATE_FAMILIES)
def test_qr_models_pass_the_gates(model, n, case):
    A = qr_input(case, n)
    report = qr_v2.check_output(A, QR_MODELS[model](A))
    assert report.passed, report.message


@pytest.mark.parametrize("model", QR_MODELS)
def test_qr_models_do_not_modify_their_input(model):
    A = qr_input("dense", 40, batch=2)
    before = A.clone()
    QR_MODELS[model](A)
    assert torch.equal(A, before)


@pytest.mark.parametrize("n", (1, 2, 3))
def test_qr_tiny_matrices(n):
    A = qr_input("dense", n, batch=4)
    for model in QR_MODELS.values():
        H, tau = model(A)
        H_ref, tau_ref = torch.geqrf(A)
        torch.testing.assert_close(H, H_ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(tau, tau_ref, rtol=1e-5, atol=1e-6)


def test_zero_column_gives_tau_zero():
    A = qr_input("dense", 8, batch=2)
    A[:, :, 0] = 0.0
    for model in QR_MODELS.values():
        H, tau = model(A)
        assert torch.all(tau[:, 0] == 0)
        assert torch.all(H[:, :, 0] == 0)
        assert qr_v2.check_output(A, (H, tau)).passed


def test_reflector_extreme_magnitudes_do_not_overflow():
    big = torch.tensor([3e19, 1e-19])
    x = torch.tensor([[4e19, 0.0], [0.0, 1e-19]])
    tau, beta, scale = reflector(big, x)
    assert torch.isfinite(tau).all() and torch.isfinite(beta).all() and torch.isfinite(scale).all()
    torch.testing.assert_close(beta.abs(), torch.tensor([5e19, (2 ** 0.5) * 1e-19]), rtol=1e-5, atol=0)


def householder_product(Vt: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """H_0 H_1 ... H_{w-1} with H_i = I - tau_i v_i v_i^T, built explicitly in float64."""
    b, w, m = Vt.shape
    P = torch.eye(m, dtype=torch.float64).expand(b, m, m).clone()
    for i in range(w):
        v = Vt[:, i, :].double()
        Hi = torch.eye(m, dtype=torch.float64) - tau[:, i, None, None].double() * v[:, :, None] * v[:, None, :]
        P = P @ Hi
    return P


@pytest.mark.parametrize("n,k0,w", [(24, 0, 8), (40, 8, 32), (37, 5, 13), (20, 12, 8), (16, 15, 1)])
def test_factor_panel_T_is_the_compact_wy_factor(n, k0, w):
    A = qr_input("dense", n, batch=3, seed=17)
    H = A.clone()
    tau = torch.zeros(3, n)
    Vt, T = factor_panel_model(H, tau, k0, w)
    m = n - k0
    assert Vt.shape == (3, w, m) and T.shape == (3, w, w)
    # T is upper triangular with tau on the diagonal
    assert torch.equal(T, torch.triu(T))
    torch.testing.assert_close(T.diagonal(dim1=1, dim2=2), tau[:, k0:k0 + w])
    # Vt rows: zeros above the unit diagonal, the stored tails below it
    for c in range(w):
        assert torch.all(Vt[:, c, :c] == 0) and torch.all(Vt[:, c, c] == 1)
        torch.testing.assert_close(Vt[:, c, c + 1:], H[:, k0 + c + 1:, k0 + c])
    # I - V T V^T == H_0 H_1 ... H_{w-1}
    V, Td = Vt.mT.double(), T.double()
    compact = torch.eye(m, dtype=torch.float64) - V @ Td @ V.mT
    torch.testing.assert_close(compact, householder_product(Vt, tau[:, k0:k0 + w]), rtol=0, atol=1e-5)
    # the panel was factored in place: Q_panel^T applied to the original panel gives its R
    panel = A[:, k0:, k0:k0 + w].double()
    R = (compact.mT @ panel)
    torch.testing.assert_close(torch.triu(R[:, :w]), torch.triu(H[:, k0:k0 + w, k0:k0 + w]).double(),
                               rtol=0, atol=1e-4 * float(panel.abs().max()))
    torch.testing.assert_close(R[:, w:], torch.zeros_like(R[:, w:]), rtol=0, atol=1e-4 * float(panel.abs().max()))
    # columns outside the panel are untouched
    assert torch.equal(H[:, :, :k0], A[:, :, :k0]) and torch.equal(H[:, :, k0 + w:], A[:, :, k0 + w:])
    assert torch.equal(H[:, :k0, :], A[:, :k0, :])


# ---------------------------------------------------------------- eigh

@pytest.mark.parametrize("n", (1, 2, 7, 32))
@pytest.mark.parametrize("case", eigh.families())
def test_jacobi_model_passes_the_eigh_gates(case, n):
    A = eigh.generate({"batch": 3, "n": n, "cond": 2, "seed": 9, "case": case})
    Q, L = jacobi_eigh_model(A)
    assert Q.shape == (3, n, n) and L.shape == (3, n) and Q.dtype == L.dtype == torch.float32
    report = eigh.check_output(A, (Q, L))
    assert report.passed, report.message
    assert torch.all(L[:, 1:] >= L[:, :-1]), "eigenvalues not ascending"


def test_jacobi_model_agrees_with_eigvalsh():
    A = eigh.generate({"batch": 4, "n": 20, "cond": 1, "seed": 2, "case": "dense"})
    _, L = jacobi_eigh_model(A)
    torch.testing.assert_close(L.double(), torch.linalg.eigvalsh(A.double()), rtol=0,
                               atol=1e-5 * float(A.abs().max()))


def test_jacobi_model_zero_and_diagonal_matrices_are_exact():
    zero = torch.zeros(2, 5, 5)
    Q, L = jacobi_eigh_model(zero)
    assert torch.equal(L, torch.zeros(2, 5))
    assert torch.equal(Q, torch.eye(5).expand(2, 5, 5))
    d = torch.tensor([[3.0, -1.0, 2.0]])
    Q, L = jacobi_eigh_model(torch.diag_embed(d))
    assert torch.equal(L, torch.tensor([[-1.0, 2.0, 3.0]]))
    assert torch.equal(Q.abs(), torch.eye(3)[:, [1, 2, 0]][None])


@pytest.mark.parametrize("m", (2, 4, 6, 32))
def test_tournament_pairs_cover_every_pair_once_per_sweep(m):
    seen = []
    for r in range(m - 1):
        ps, qs = tournament_pairs(m, r)
        assert len(ps) == len(qs) == m // 2
        assert all(p < q for p, q in zip(ps, qs))
        assert sorted(ps + qs) == list(range(m)), f"round {r} pairs are not disjoint"
        seen.extend(zip(ps, qs))
    assert len(seen) == len(set(seen)) == m * (m - 1) // 2
    assert set(seen) == set(itertools.combinations(range(m), 2))


@pytest.mark.parametrize("scale", [1e-21, 1e-30])
def test_factor_panel_takes_the_scaled_norm_where_the_sum_of_squares_underflows(scale):
    """A column whose ||x||^2 falls below 2^-100 (1e-21: ~1e-40, denormal; 1e-30: 0 in float32) gets
    the largest-entry-scaled norm, so its reflector matches geqrf's; a zero column still gives tau = 0."""
    A = qr_input("dense", 24, batch=2, seed=3)
    A[:, :, 1] *= scale
    A[:, :, 3] = 0.0
    H, tau = A.clone(), torch.zeros(2, 24)
    factor_panel_model(H, tau, 0, 8)
    H_ref, tau_ref = torch.geqrf(A.double())
    torch.testing.assert_close(tau[:, :8].double(), tau_ref[:, :8], rtol=1e-5, atol=0)
    assert torch.all(tau[:, 3] == 0)
    torch.testing.assert_close(H[:, :8, 1].double(), H_ref[:, :8, 1], rtol=1e-4, atol=0)


@pytest.mark.parametrize("w", (16, 32))
def test_the_tf32x3_update_keeps_about_21_bits_of_the_float32_update(w):
    """householder_update.cu's arithmetic (model.apply_block_reflector_tf32x3) against the float64 update:
    within ~2^-19 of C's size where plain TF32 products would be ~2^-11 off."""
    A = qr_input("dense", 90, batch=2, seed=8)
    H, tau = A.clone(), torch.zeros(2, 90)
    Vt, T = factor_panel_model(H, tau, 0, w)
    C = H[:, :, w:]
    exact = C.double() - Vt.mT.double() @ (T.mT.double() @ (Vt.double() @ C.double()))
    fp32, split = C.clone(), C.clone()
    apply_block_reflector(Vt, T, fp32)
    apply_block_reflector_tf32x3(Vt, T, split)
    scale = float(C.abs().max())
    assert float((fp32.double() - exact).abs().max()) / scale < 2.0 ** -19
    assert float((split.double() - exact).abs().max()) / scale < 2.0 ** -17


def warp_qr_model(A: torch.Tensor):
    """householder_warp.cu's algorithm (n <= 32): the panel step over all n columns, T unused."""
    H, tau = A.clone(), torch.zeros(A.shape[0], A.shape[-1])
    factor_panel_model(H, tau, 0, A.shape[-1])
    return H, tau


@pytest.mark.parametrize("n", (1, 2, 5, 17, 31, 32))
@pytest.mark.parametrize("case", QR_GATE_FAMILIES)
def test_the_warp_kernels_model_passes_the_gates_and_agrees_with_geqrf(n, case):
    A = qr_input(case, n, batch=4)
    H, tau = warp_qr_model(A)
    report = qr_v2.check_output(A, (H, tau))
    assert report.passed, report.message
    if case in QR_AGREE_FAMILIES:
        H_ref, tau_ref = torch.geqrf(A)
        assert rel(H, H_ref) < 1e-4 and rel(tau, tau_ref) < 1e-4


def test_a_route_table_value_the_route_does_not_know_is_refused():
    # A misspelt variant ("tf32" for "tf32x3") silently ran the fp32 route under the new name.
    assert qr_route.first_row(((64, "smem"),), 32, ("smem", "warp")) == "smem"
    with pytest.raises(ValueError, match="'tf32' for n = 512"):
        qr_route.first_row(((1 << 30, "tf32"),), 512, ("fp32", "tf32x3", "one_call"))
    with pytest.raises(ValueError, match="None for n = 100"):
        qr_route.first_row(((64, "smem"),), 100, ("smem", "warp"))


def test_panel_threads_takes_256_where_the_batch_fills_the_gpu_or_the_panel_runs_beside_the_lookahead():
    # 256 threads up to n = 512 is two rows a thread at 32 columns; n = 1024 keeps 512 (32-column panels);
    # up to 2048, a 256-thread panel leaves an SM room for the look-ahead's update CTAs beside it.
    assert qr_route.panel_threads(512, 640) == 256
    assert qr_route.panel_threads(512, 40) == qr_route.PANEL_MAX_THREADS
    assert qr_route.panel_threads(1024, 640) == qr_route.PANEL_MAX_THREADS
    assert qr_route.panel_threads(1024, 60) == qr_route.PANEL_MAX_THREADS
    assert qr_route.panel_threads(2048, 8) == 256
    assert qr_route.panel_threads(4096, 2) == qr_route.PANEL_MAX_THREADS


def test_lookahead_runs_above_n_512_on_the_batches_measured_and_a_row_turns_it_on_per_shape(monkeypatch):
    # Look-ahead (qr_blocked_lookahead) gained on the small batches of 512 < n <= 2048 only (runs 33d, 34a).
    for n, batch in ((176, 40), (352, 40), (512, 640), (1024, 640), (4096, 2)):
        assert qr_route.lookahead_ctas(n, batch) == 0
    for n, batch in ((1024, 60), (2048, 8)):
        assert qr_route.lookahead_ctas(n, batch) == 132
    monkeypatch.setattr(qr_route, "LOOKAHEAD", ((4096, 8, 132), (1 << 30, 1 << 30, 0)))
    assert qr_route.lookahead_ctas(4096, 2) == 132 and qr_route.lookahead_ctas(2048, 8) == 132
    assert qr_route.lookahead_ctas(1024, 60) == 0


def _slarft(G: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """The column-by-column recurrence, as LAPACK writes it."""
    b, w = tau.shape
    T = torch.zeros(b, w, w, dtype=tau.dtype)
    for c in range(w):
        T[:, c, c] = tau[:, c]
        T[:, :c, c] = -tau[:, c, None] * (T[:, :c, :c] @ G[:, :c, c, None])[..., 0]
    return T


@pytest.mark.parametrize("w", [1, 5, 8, 9, 13, 16, 20, 31, 32])
def test_the_blocked_compact_wy_factor_is_the_recurrence(w):
    # compact_wy.cuh builds T from diagonal blocks of 8 merged pairwise (the row-by-row chain was a serial tail).
    from parts.qr_v2.model import compact_wy_factor
    V = torch.tril(torch.randn(3, 40, w, dtype=torch.float64), -1) + torch.eye(40, w, dtype=torch.float64)
    tau = 2 / (V * V).sum(dim=1)
    tau[1, w // 2] = 0.0                                     # a zero reflector (a zero column) among them
    G = torch.triu(V.mT @ V, 1) + torch.tril(torch.randn(3, w, w, dtype=torch.float64), -1)   # lower: scratch
    T = compact_wy_factor(G, tau)
    torch.testing.assert_close(T, _slarft(G, tau), atol=1e-12, rtol=0)
    assert torch.equal(torch.tril(T, -1), torch.zeros_like(T))
