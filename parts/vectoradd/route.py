"""vectoradd routes: C = A + B (float16), written into the given output tensor.

| device | route                                              |
|--------|----------------------------------------------------|
| CUDA   | vector_add.cu: 16-byte packets, grid-stride loop   |
| CPU    | vector_add_model (torch)                           |
"""
import torch

from parts.common.cuda_loader import CUDA  # popkit: inline
from parts.vectoradd.model import vector_add_model  # popkit: inline


def custom_kernel(data):
    A, B, C = data
    if not A.is_cuda:
        return vector_add_model(A, B, C)
    A, B = A.contiguous(), B.contiguous()
    out = C if C.is_contiguous() else torch.empty_like(A)
    CUDA.call("vector_add_f16", A, B, out, A.shape[0], A.numel() // A.shape[0])
    return out
