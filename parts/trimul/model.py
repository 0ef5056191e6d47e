"""trimul: torch model of the route (outgoing triangle multiplicative update, AlphaFold3), runs on CPU and GPU.

Same math as the reference module, restructured:
  x  = LayerNorm(x)                                      (over dim)
  [l, r, gl, gr, go] = x @ [Wl; Wr; Wgl; Wgr; Wgo]^T     (one GEMM instead of five)
  left = l * mask * sigmoid(gl),  right = r * mask * sigmoid(gr)
  out[b, i, j, d] = sum_k left[b, i, k, d] right[b, j, k, d]
                    (one batched GEMM over b*d, operands in float16, accumulated in float32)
  y  = (LayerNorm(out) * sigmoid(go)) @ Wout^T
The float16 triangle product is the one precision choice: after the first LayerNorm and the gates
its operands are moderate, and the check allows rtol = atol = 2e-2.
"""
import torch
import torch.nn.functional as F

PROJECTIONS = ("left_proj", "right_proj", "left_gate", "right_gate", "out_gate")


def trimul_model(x: torch.Tensor, mask: torch.Tensor, weights: dict, product_dtype=torch.float16) -> torch.Tensor:
    b, n, _, dim = x.shape
    hidden = weights["left_proj.weight"].shape[0]
    x = F.layer_norm(x, (dim,), weights["norm.weight"], weights["norm.bias"])
    stacked = torch.cat([weights[f"{name}.weight"] for name in PROJECTIONS], dim=0)      # (5h, dim)
    proj = (x.reshape(-1, dim) @ stacked.t()).reshape(b, n, n, 5, hidden)
    keep = mask.to(x.dtype).unsqueeze(-1)
    left = proj[..., 0, :] * keep * torch.sigmoid(proj[..., 2, :])
    right = proj[..., 1, :] * keep * torch.sigmoid(proj[..., 3, :])
    # (b, d, i, k) @ (b, d, k, j) -> (b, d, i, j)
    lhs = left.permute(0, 3, 1, 2).to(product_dtype)
    rhs = right.permute(0, 3, 2, 1).to(product_dtype)
    out = torch.matmul(lhs, rhs).float().permute(0, 2, 3, 1)
    out = F.layer_norm(out, (hidden,), weights["to_out_norm.weight"], weights["to_out_norm.bias"])
    out = out * torch.sigmoid(proj[..., 4, :])
    return out @ weights["to_out.weight"].t()
