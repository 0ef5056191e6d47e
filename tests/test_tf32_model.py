"""The shared TF32 tensor-core arithmetic (parts/common/tensor_core_tf32.cuh) and its torch model
(parts/common/tf32_model.py): the split rounds and keeps what the kernels do, every kernel that splits
uses the one device function, and tf32x3 keeps ~21 bits."""
from pathlib import Path

import torch

from parts.common.tf32_model import tf32_round, tf32_split, tf32_truncate, tf32x3_product

PARTS = Path(__file__).resolve().parents[1] / "parts"


def test_tf32_split_is_exact_and_hi_fits_tf32():
    M = torch.randn(64, 48, generator=torch.Generator().manual_seed(3)) * torch.logspace(-20, 20, 48)
    hi, lo = tf32_split(M)
    assert torch.equal(hi + lo, M)                                              # no rounding in the split
    assert (hi.view(torch.int32) & 0x1FFF).eq(0).all()                          # 10 mantissa bits
    assert (lo.abs() <= M.abs() * 2.0 ** -11).all()                             # rounded to nearest


def test_tf32x3_product_keeps_about_21_bits_where_plain_tf32_keeps_11():
    g = torch.Generator().manual_seed(11)
    P, Q = torch.randn(3, 40, 64, generator=g), torch.randn(3, 50, 64, generator=g)
    exact = P.double() @ Q.double().mT
    scale = P.double().abs() @ Q.double().abs().mT                              # the products' own size
    split_error = ((tf32x3_product(P, Q).double() - exact).abs() / scale).max()
    plain_error = ((tf32_round(P).double() @ tf32_round(Q).double().mT - exact).abs() / scale).max()
    assert split_error < 2.0 ** -19 < 2.0 ** -13 < plain_error


def test_the_device_split_rounds_like_the_model():
    """split_tf32 rounds hi as tf32_round does (add half of the dropped 13-bit field, clear it; ties away
    from zero) and leaves lo = x - hi for the tensor core to truncate (tf32_truncate)."""
    source = (PARTS / "common" / "tensor_core_tf32.cuh").read_text()
    assert "(__float_as_uint(x) + 0x1000u) & 0xffffe000u" in source
    assert "lo = __float_as_uint(x - __uint_as_float(hi))" in source
    M = torch.tensor([1.0 + 2.0 ** -11, 1.0 + 2.0 ** -12, -(1.0 + 3 * 2.0 ** -12), 3.0e-39])
    hi, _ = tf32_split(M)
    assert torch.equal(hi.view(torch.int32), (M.view(torch.int32) + 0x1000) & -0x2000)
    assert hi[0] == 1.0 + 2.0 ** -10 and hi[2] == -(1.0 + 2.0 ** -10)          # a tie and above: away from zero
    assert hi[1] == 1.0                                                          # below half the TF32 ulp: down
    assert tf32_round(M[:2]).tolist() == [1.0 + 2.0 ** -10, 1.0]
    assert tf32_truncate(torch.tensor([1.0 + 2.0 ** -11, -(1.0 + 2.0 ** -11)])).tolist() == [1.0, -1.0]


def test_every_kernel_that_splits_uses_the_shared_split():
    """No kernel carries its own copy of the rounding: each split goes through popkit::split_tf32."""
    splitting = [p for p in PARTS.rglob("*.cu*") if "tf32" in p.read_text() and p.name != "tensor_core_tf32.cuh"]
    for path in splitting:
        source = path.read_text()
        assert "0x1000" not in source, f"{path.name} rounds to TF32 by itself"
    users = [p.name for p in splitting if "popkit::split_tf32" in p.read_text()]
    assert {"cholesky_split.cu", "cholesky_product_mma.cu", "cholesky_product_wgmma.cu"} <= set(users)
