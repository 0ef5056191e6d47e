"""The random source of one generated case, and the float32 constants the input families use.

Official generators draw everything from one torch.Generator on the target device, seeded with the
case seed; a Draw wraps that generator so each family's draws read in the official order.
"""
from __future__ import annotations

import torch

F32 = torch.float32
EPS = 2.0 ** -23                                   # float32 machine epsilon
ULP = 2 * EPS                                      # LAPACK's ulp (eps * base)
HIGH = torch.finfo(F32).max ** 0.5                 # ~1.8e19: squares just fit in float32
LOW = torch.finfo(F32).tiny ** 0.5                 # ~1.1e-19: squares just stay normal


class Draw:
    """One seeded generator on the target device; every draw is float32 unless stated."""

    def __init__(self, seed: int, device="cpu"):
        self.device = torch.device(device)
        self.gen = torch.Generator(device=self.device)
        self.gen.manual_seed(seed)

    def normal(self, *shape) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen, device=self.device, dtype=F32)

    def uniform(self, low: float, high: float, *shape) -> torch.Tensor:
        """Uniform(low, high), drawn by uniform_ on an empty float32 tensor."""
        return torch.empty(shape, device=self.device, dtype=F32).uniform_(low, high, generator=self.gen)

    def signs(self, *shape) -> torch.Tensor:
        """+-1 from randint(0, 2) (int64), as float32."""
        bits = torch.randint(0, 2, shape, generator=self.gen, device=self.device, dtype=torch.int64)
        return bits.to(F32).mul_(2.0).sub_(1.0)

    def integers(self, low: int, high: int, *shape) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=self.gen, device=self.device)

    def choice(self, weights: list[float], count: int) -> list[int]:
        """count indices drawn with replacement by float32 weights (multinomial)."""
        w = torch.tensor([float(x) for x in weights], dtype=F32, device=self.device)
        return torch.multinomial(w, count, replacement=True, generator=self.gen).tolist()

    # vectors of the arithmetic (no draws), float32 on the same device
    def logspace(self, start: float, end: float, steps: int) -> torch.Tensor:
        return torch.logspace(float(start), float(end), steps, dtype=F32, device=self.device)

    def linspace(self, start: float, end: float, steps: int) -> torch.Tensor:
        return torch.linspace(float(start), float(end), steps, dtype=F32, device=self.device)
