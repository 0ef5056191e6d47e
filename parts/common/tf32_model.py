"""Torch models of the TF32 tensor-core arithmetic every problem's kernels share
(common/tensor_core_tf32.cuh): the hi + lo split and the tf32x3 product, ~21 bits from three TF32 products;
and the switch of torch's own fp32 matmuls between IEEE fp32 and TF32."""
import contextlib

import torch


def tf32_round(M: torch.Tensor) -> torch.Tensor:
    """M rounded to TF32: mantissa to 10 bits, ties away from zero (add half of the dropped 13-bit field,
    clear it), as tensor_core_tf32.cuh's split_tf32 rounds by integer ops."""
    bits = M.contiguous().view(torch.int32)
    return ((bits + 0x1000) & -0x2000).view(torch.float32)


def tf32_split(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """M = hi + lo with hi = tf32_round(M) and lo = M - hi exact in float32 (|lo| <= 2^-11 |M|);
    TF32 keeps ~11 bits of lo, so the products hi hi^T + hi lo^T + lo hi^T carry ~21 bits (the
    dropped lo lo^T is ~2^-22 relative)."""
    hi = tf32_round(M)
    return hi, M - hi


def tf32_truncate(M: torch.Tensor) -> torch.Tensor:
    """M with its low 13 mantissa bits cleared: what a TF32 tensor-core operand keeps of a float32."""
    return (M.contiguous().view(torch.int32) & -0x2000).view(torch.float32)


def tf32x3_product(P: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """P Q^T as the tf32x3 kernels compute it on tensor cores: both operands split into TF32 hi + lo
    (the tensor core truncates lo to TF32), then lo_P hi_Q^T + hi_P lo_Q^T + hi_P hi_Q^T in float32."""
    Ph, Pl = tf32_split(P)
    Qh, Ql = tf32_split(Q)
    Pl, Ql = tf32_truncate(Pl), tf32_truncate(Ql)
    return Pl @ Qh.mT + Ph @ Ql.mT + Ph @ Qh.mT


@contextlib.contextmanager
def matmul_precision(precision: str):
    """Set torch's CUDA fp32 matmul precision ("ieee" or "tf32") and restore the previous setting.

    The new API (fp32_precision) is read and restored as it was: once it is set,
    reading the legacy allow_tf32 flag (which the grader's check does) raises
    unless the previous value was put back."""
    matmul = torch.backends.cuda.matmul
    try:
        previous = matmul.fp32_precision
    except AttributeError:                      # torch < 2.9: the legacy flag only
        previous = None
    if previous is None:
        legacy = matmul.allow_tf32
        matmul.allow_tf32 = precision == "tf32"
    else:
        matmul.fp32_precision = precision
    try:
        yield
    finally:
        if previous is None:
            matmul.allow_tf32 = legacy
        else:
            matmul.fp32_precision = previous
