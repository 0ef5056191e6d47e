"""The robustness suite: sizes and families the official lists never show.

A submission must be right for any batch >= 1 and any n >= 1, not only at the
official sizes. These cases straddle every power of two (where routes tend to
switch: one-CTA kernels, panel widths, shared-memory limits), run every input
family of the problem at every small size, and one family per large size in
rotation. Batches of 1 and 3 check that nothing
assumes a batch of 2 or more.
"""
from __future__ import annotations

from checks.generators import families

SMALL_SIZES = (1, 2, 3, 5, 8, 16, 17, 31, 32, 33, 63, 64, 65)
LARGE_SIZES = (100, 127, 129, 255, 257, 511, 513, 1023, 1025, 1537, 2047, 2049)
SEED_BASE = 910_000


def robustness_specs(problem: str) -> list[dict]:
    """Every family at each small size (batch 3), one family per large size in turn (batch 1 or 3)."""
    names = families(problem)
    specs = [{"batch": 3, "n": n, "cond": 1, "case": name}
             for n in SMALL_SIZES for name in names]
    specs += [{"batch": 1 + 2 * (i % 2), "n": n, "cond": 1, "case": names[i % len(names)]}
              for i, n in enumerate(LARGE_SIZES)]
    return [{**spec, "seed": SEED_BASE + i} for i, spec in enumerate(specs)]
