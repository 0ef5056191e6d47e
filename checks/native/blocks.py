"""Float32 building blocks of the matrix input families, each in the official order of operations."""
from __future__ import annotations

import torch

from checks.native.draw import F32, Draw


def sym(A: torch.Tensor) -> torch.Tensor:
    """0.5 (A + A^T): exactly symmetric in float32, since a + b == b + a."""
    return 0.5 * (A + A.mT)


def band_mask(r: Draw, n: int, width) -> torch.Tensor:
    """|i - j| <= width; width an int or a (b,) tensor (one width per matrix)."""
    i = torch.arange(n, device=r.device)
    dist = (i[:, None] - i[None, :]).abs()
    if isinstance(width, torch.Tensor):
        return dist[None] <= width[:, None, None]
    return dist <= width


def band_width(n: int) -> int:
    """The band families' half-width: max(2, min(32, n // 32))."""
    return max(2, min(32, n // 32))


def kept_rank(n: int) -> int:
    """The kept rank of the rank-deficient families: max(1, 3n // 4); the other n - rank are special."""
    return max(1, (3 * n) // 4)


def orthogonal(r: Draw, b: int, n: int, zero_is_positive: bool = False) -> torch.Tensor:
    """Q of the float32 QR of a fresh gaussian, column j negated unless R_jj > 0 (>= 0 if zero_is_positive)."""
    Q, R = torch.linalg.qr(r.normal(b, n, n))
    diag = R.diagonal(dim1=-2, dim2=-1)
    keep = diag >= 0 if zero_is_positive else diag > 0
    return Q * torch.where(keep, 1.0, -1.0).to(F32)[:, None, :]
