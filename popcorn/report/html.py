"""The report page: aggregated evidence plus chart file names, rendered into one static HTML file."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from popcorn.evidence.logs import ROOT, utc_now
from popcorn.evidence.tables import fmt_counters, fmt_sig, fmt_us
from popcorn.report.data import Evidence

TEMPLATE = ROOT / "templates" / "report.html.j2"
COUNTERS_WIDTH = 120      # a page's cell wraps; the cut only keeps a runaway dict from widening its table


def fmt_time(value) -> str:
    """'2026-12-01T10:00:00Z' as '2026-12-01 10:00'; other values as they are, '-' for none."""
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    if isinstance(value, str) and len(value) >= 16 and value[10] == "T":
        return f"{value[:10]} {value[11:16]}"
    return "-" if value is None else str(value)


def fmt_number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write_page(evidence: Evidence, charts: dict[str, dict[str, str]],
               notes: dict[str, dict[str, str]], path: Path) -> Path:
    """Render the page; charts and notes map problem -> section -> PNG file name / note text."""
    env = Environment(loader=FileSystemLoader(TEMPLATE.parent), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(us=fmt_us, when=fmt_time, num=fmt_number, sig=fmt_sig,
                       counters=lambda value: fmt_counters(value, COUNTERS_WIDTH))
    html = env.get_template(TEMPLATE.name).render(
        evidence=evidence, charts=charts, notes=notes, generated=utc_now())
    path.write_text(html, encoding="utf-8")      # the page says charset utf-8, whatever the locale's encoding
    return path
