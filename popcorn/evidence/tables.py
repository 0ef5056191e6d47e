"""Plain-text tables for the terminal (no dependency beyond the standard library)."""
from __future__ import annotations

import math


def fmt_us(value: float | None) -> str:
    """Microseconds with sensible precision; '-' for missing."""
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_sig(value: float | None, digits: int = 2) -> str:
    """A number with DIGITS significant digits, never rounded to zero: 0.0016, 0.31, 1.4, 123; '-' for missing."""
    if value is None:
        return "-"
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= digits - 1:
        return f"{value:,.0f}"
    if magnitude < -4:
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits - 1 - magnitude}f}"


def fmt_speedup(ratio: float) -> str:
    """A speedup with 3 significant digits: 41.3x, 117x, 0.00250x (a CPU run of a GPU route beside torch read
    0.00x at two decimals)."""
    return f"{fmt_sig(ratio, 3)}x"


def render_table(headers: list[str], rows: list[list], right_align: set[int] | None = None) -> str:
    """Columns padded to their widest cell; numeric-looking columns can be right-aligned."""
    right_align = right_align or set()
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(c.rjust(w) if i in right_align else c.ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)
