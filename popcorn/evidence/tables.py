"""Plain text for the terminal: tables, numbers, and any text made safe to print (no dependency beyond the
standard library)."""
from __future__ import annotations

import math
import re

# C0, DEL and C1, the characters a terminal acts on; and the bidirectional overrides and isolates, which reorder
# what follows them on the line (a name holding U+202E shows its text, and the columns after it, reversed).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, keep: str = "\n\t") -> str:
    """TEXT as a terminal should show it: each control character (ESC[2J clears the screen, \\r returns over the
    line, \\x9b starts a command; U+202E reverses the rest of the line) as its escape, '\\x1b', '\\u202e', but
    those in KEEP; a CRLF line end as \\n where \\n is kept. Printing it again changes nothing."""
    if "\n" in keep:
        text = text.replace("\r\n", "\n")
    return CONTROL.sub(lambda found: found[0] if found[0] in keep else _escape(found[0]), text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


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


def fmt_counters(counters: dict | None, width: int) -> str:
    """A case's counters as "name delta" pairs in their dict's order, 'resolved 7, calls 12'; '-' for none. Only
    whole pairs are shown: where they do not all fit in WIDTH characters the text ends in '...' after those that do."""
    if not counters:
        return "-"
    pairs = [f"{name} {delta}" for name, delta in counters.items()]
    text = ", ".join(pairs)
    if len(text) <= width:
        return text
    shown = []
    for pair in pairs:
        if len(", ".join(shown + [pair, "..."])) > width:
            break
        shown.append(pair)
    return ", ".join(shown + ["..."])


def render_table(headers: list[str], rows: list[list], right_align: set[int] | None = None) -> str:
    """Columns padded to their widest cell; numeric-looking columns can be right-aligned. A cell shows its
    control characters as escapes (printable), a newline too: the widths count what is shown."""
    right_align = right_align or set()
    cells = [[printable(str(h), keep="") for h in headers]]
    cells += [["-" if c is None else printable(str(c), keep="") for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(c.rjust(w) if i in right_align else c.ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)
