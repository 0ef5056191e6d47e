"""The torch models of the routes of problems added from their folders (vectoradd, trimul), on CPU."""
import math

import torch

from parts.trimul.model import trimul_model
from parts.vectoradd.model import vector_add_model


def test_vector_add_model_writes_the_sum_into_the_output():
    g = torch.Generator().manual_seed(1)
    A, B = (torch.randn(129, 129, generator=g).half() for _ in range(2))
    C = torch.empty_like(A)
    assert vector_add_model(A, B, C) is C
    assert torch.equal(C, A + B)


def triangle_reference(x, mask, w):
    """The module's math written plainly (five projections, an explicit sum over k), in float64."""
    x, w = x.double(), {k: v.double() for k, v in w.items()}
    dim = x.shape[-1]
    x = torch.nn.functional.layer_norm(x, (dim,), w["norm.weight"], w["norm.bias"])
    proj = {name: x @ w[f"{name}.weight"].t() for name in
            ("left_proj", "right_proj", "left_gate", "right_gate", "out_gate")}
    m = mask.double().unsqueeze(-1)
    left = proj["left_proj"] * m * proj["left_gate"].sigmoid()
    right = proj["right_proj"] * m * proj["right_gate"].sigmoid()
    out = torch.einsum("bikd,bjkd->bijd", left, right)
    hidden = out.shape[-1]
    out = torch.nn.functional.layer_norm(out, (hidden,), w["to_out_norm.weight"], w["to_out_norm.bias"])
    return (out * proj["out_gate"].sigmoid()) @ w["to_out.weight"].t()


def weights(dim, hidden, g):
    w = {f"{name}.weight": torch.randn(hidden, dim, generator=g) / math.sqrt(hidden)
         for name in ("left_proj", "right_proj", "left_gate", "right_gate", "out_gate")}
    w.update({"norm.weight": torch.randn(dim, generator=g), "norm.bias": torch.randn(dim, generator=g),
              "to_out_norm.weight": torch.randn(hidden, generator=g),
              "to_out_norm.bias": torch.randn(hidden, generator=g),
              "to_out.weight": torch.randn(dim, hidden, generator=g) / math.sqrt(dim)})
    return w


def test_trimul_model_matches_the_plain_math_with_and_without_a_mask():
    g = torch.Generator().manual_seed(2)
    for masked in (False, True):
        x = torch.randn(2, 12, 12, 16, generator=g)
        mask = torch.randint(0, 2, (2, 12, 12), generator=g) if masked else torch.ones(2, 12, 12)
        w = weights(16, 8, g)
        got = trimul_model(x, mask, w, torch.float32)
        want = triangle_reference(x, mask, w)
        assert got.shape == (2, 12, 12, 16) and got.dtype == torch.float32
        assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-4)


def test_trimul_model_with_a_half_precision_product_stays_inside_the_tasks_tolerance():
    g = torch.Generator().manual_seed(3)
    x = 2 * torch.tan(math.pi * (torch.rand(1, 16, 16, 32, generator=g) - 0.5))   # Cauchy(0, 2): heavy tails
    w = weights(32, 16, g)
    got = trimul_model(x, torch.ones(1, 16, 16), w, torch.bfloat16)   # coarser than float16: a harder test
    want = triangle_reference(x, torch.ones(1, 16, 16), w)
    assert torch.allclose(got.double(), want, rtol=2e-2, atol=2e-2)
