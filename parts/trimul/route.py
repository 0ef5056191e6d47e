"""trimul routes: the outgoing triangle multiplicative update.

| device | route                                                         |
|--------|---------------------------------------------------------------|
| any    | trimul_model: fused projections, float16 triangle product     |

The input is (x, mask, weights, config); the output is one tensor [bs, n, n, dim] float32.
"""
import torch

from parts.trimul.model import trimul_model  # popkit: inline


def custom_kernel(data):
    x, mask, weights, _config = data
    # float16 products need a GPU; on CPU the model keeps float32 (same algorithm otherwise)
    return trimul_model(x, mask, weights, torch.float16 if x.is_cuda else torch.float32)
