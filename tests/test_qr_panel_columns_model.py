"""householder_panel_columns.cu's data flow (parts/qr_v2/panel_columns_model.py: lazy scaling of each
column's tail, row c written out when final, outputs from NaN-filled storage) against the panel model."""
import pytest
import torch

from checks.native import qr_v2
from parts.qr_v2.model import factor_panel_model
from parts.qr_v2.panel_columns_model import factor_panel_columns_replay

FAMILIES = ("dense", "upper", "rankdef", "nearrank", "clustered", "band", "rowscale", "nearcollinear", "mixed")


def family_input(case: str, n: int) -> torch.Tensor:
    return qr_v2.generate({"batch": 3, "n": n, "cond": 2 if case in ("dense", "mixed") else 0, "seed": 5,
                           "case": case}).double()


@pytest.mark.parametrize("case", FAMILIES)
@pytest.mark.parametrize("n, k0, w", [(70, 0, 32), (70, 48, 22), (33, 1, 32), (9, 0, 9)])
def test_the_column_kernels_order_is_the_panel_model_in_float64(case, n, k0, w):
    A = family_input(case, n)
    H_model, tau_model = A.clone(), torch.zeros(3, n, dtype=A.dtype)
    Vt_model, T_model = factor_panel_model(H_model, tau_model, k0, w)
    H, tau = A.clone(), torch.zeros(3, n, dtype=A.dtype)
    Vt, T = factor_panel_columns_replay(H, tau, k0, w)
    tolerance = 64 * torch.finfo(A.dtype).eps * amplification(H_model, k0, w)
    assert tolerance < 1e-5                              # far below what a wrong order gives (order 1)
    for ours, model in ((H, H_model), (tau, tau_model), (Vt, Vt_model), (T, T_model)):
        assert torch.isfinite(ours).all()                # every entry the kernel owns is written
        scale = model.abs().amax().clamp(min=1e-300)
        assert float((ours - model).abs().amax() / scale) < tolerance


def amplification(R: torch.Tensor, k0: int, w: int) -> float:
    """How much a different rounding order may grow: a reflector is its column over the (signed) norm of
    what is left of it, so a column that is nearly dependent on the earlier ones (a small nonzero R_jj)
    magnifies rounding by max|A| / |R_jj|. Exact zeros give tau = 0 in both orders and are left out."""
    diagonal = R.diagonal(dim1=1, dim2=2)[:, k0:k0 + w].abs()
    smallest = diagonal[diagonal > 0].min()
    return max(1.0, float(R.abs().amax() / smallest))


def test_a_zero_column_gives_tau_zero_and_stays_zero():
    A = family_input("dense", 40)
    A[:, 3:, 5] = 0.0                                    # column 5 is zero below the diagonal once 0..4 act
    A[:, :, 5] = 0.0
    H, tau = A.clone(), torch.zeros(3, 40, dtype=A.dtype)
    factor_panel_columns_replay(H, tau, 0, 32)
    assert torch.all(tau[:, 5] == 0) and torch.all(H[:, 6:, 5] == 0)
