"""Peers: other libraries' solvers of a problem, to time beside ours (scripts/peers.py).

A native checker may declare `PEERS = {name: peer}`, where peer(A) prepares one input and returns a
call that runs the peer on it to completion. Nothing here is imported by the checker: a peer's library
is imported only when its peer is prepared, so a machine without it (CPU CI, a GPU host without JAX)
loses that column and nothing else.
"""
from __future__ import annotations

import functools
import os
from typing import Callable

import torch


def jax_peer(solve: Callable) -> Callable[[torch.Tensor], Callable[[], object]]:
    """A peer that runs solve(jax, A), jitted, on the input handed to JAX through DLPack without a copy."""
    @functools.cache
    def jitted(jax):                  # one jit per peer (and jax module), so each shape compiles once in a run
        return jax.jit(lambda X: solve(jax, X))

    def peer(A: torch.Tensor) -> Callable[[], object]:
        # torch and JAX share the GPU: JAX's default grab of 75% of its memory up front starves torch's
        # allocator on the largest cases, so JAX allocates as it goes unless the caller chose otherwise.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax
        import jax.dlpack

        if A.device.type == "cuda" and jax.default_backend() != "gpu":
            raise RuntimeError(f"jax runs on {jax.default_backend()} here, not on the GPU (no CUDA jaxlib plugin)")
        X, solve_jitted = jax.dlpack.from_dlpack(A, copy=False), jitted(jax)
        return lambda: jax.block_until_ready(solve_jitted(X))
    return peer
