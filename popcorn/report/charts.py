"""The report's PNG charts, one function per section.

Each figure is built with matplotlib's object API on an explicit Agg canvas: no pyplot, no window,
so drawing works headless and in any process, whatever backend the user's settings name.
"""
from __future__ import annotations

import logging
import os
from datetime import timedelta
from pathlib import Path

# Set before matplotlib is imported, which reads both. The charts need no backend, and a bad MPLBACKEND
# would stop the import. matplotlib's own notices (a config folder it cannot write, a font cache being
# built, a bad matplotlibrc line, a missing font) are logged as warnings, which Python prints to stderr
# when nothing handles them; they say nothing about the report, while its errors still show.
os.environ["MPLBACKEND"] = "agg"
logging.getLogger("matplotlib").setLevel(logging.ERROR)

import matplotlib  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from popcorn.evidence.tables import fmt_sig
from popcorn.report.data import Bench, Check, Diff, FrontierLine

MIN_RATIO_SPAN = 0.05     # the diff axis shows at least 1 +- 5%, so run-to-run noise looks small
COLORS = {"first": "#b8b8b8", "best": "#2a9d58", "newest": "#3465a4", "baseline": "#222222",
          "faster": "#2a9d58", "slower": "#cc3333", "within noise": "#9a9a9a", None: "#dddddd"}


def cases_chart(bench: Bench, title: str, path: Path) -> None:
    """A bar per case for the first, best and newest time (log axis), baseline ticks, geomean lines."""
    fig = _figure(max(8.0, 0.75 * len(bench.cases) + 2), 4.8)
    ax = fig.add_subplot()
    xs = range(len(bench.cases))
    for offset, which in ((-0.27, "first"), (0.0, "best"), (0.27, "newest")):
        points = [(x + offset, getattr(c, f"{which}_us")) for x, c in zip(xs, bench.cases)
                  if getattr(c, f"{which}_us")]
        ax.bar([p[0] for p in points], [p[1] for p in points], width=0.27,
               color=COLORS[which], label=which)
    baseline = [(x, c.baseline_us) for x, c in zip(xs, bench.cases) if c.baseline_us]
    if baseline:
        ax.scatter([p[0] for p in baseline], [p[1] for p in baseline], marker="_", s=400,
                   linewidths=2, color=COLORS["baseline"], zorder=3,
                   label=f"baseline ({bench.baseline or 'torch'})")
    if bench.geomean_us:
        ax.axhline(bench.geomean_us, color=COLORS["newest"], linestyle="--",
                   label=f"newest geomean {bench.geomean_us:,.1f} µs")
    if bench.baseline_geomean_us:
        ax.axhline(bench.baseline_geomean_us, color=COLORS["baseline"], linestyle=":",
                   label=f"baseline geomean {bench.baseline_geomean_us:,.1f} µs")
    ax.set_yscale("log")
    ax.set_ylabel("mean time per call (µs, log)")
    ax.set_xticks(list(xs), [c.label for c in bench.cases], rotation=30, ha="right")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(fig, path)


def frontier_chart(lines: list[FrontierLine], title: str, path: Path) -> None:
    """Best-so-far geomean over time, a step line per source and GPU (leaderboard lines dashed)."""
    fig = _figure(8.0, 4.0)
    ax = fig.add_subplot()
    for line in lines:
        dashed = line.source == "leaderboard"
        ax.step(line.times, line.best_us, where="post", marker="s" if dashed else "o",
                linestyle="--" if dashed else "-", label=line.label)
    times = [t for line in lines for t in line.times]
    if times and min(times) == max(times):      # one point: show a day around it, not years
        ax.set_xlim(min(times) - timedelta(hours=12), max(times) + timedelta(hours=12))
    locator = AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    ax.set_yscale("log")
    ax.set_ylabel("best geomean so far (µs, log)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    _save(fig, path)


def diff_chart(diff: Diff, title: str, path: Path) -> None:
    """Candidate/incumbent ratio per case, coloured by verdict, beside each side's tightest gate."""
    fig = _figure(10.0, 1.2 + 0.38 * len(diff.cases))
    ratio_ax, gate_ax = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [3, 2]})
    ys = range(len(diff.cases))
    for y, case in zip(ys, diff.cases):
        if case.ratio:
            ratio_ax.barh(y, case.ratio - 1, left=1, color=COLORS[case.verdict])
            ratio_ax.annotate(f"{case.ratio:.3f}", (case.ratio, y), fontsize=8, va="center",
                              xytext=(3 if case.ratio >= 1 else -3, 0), textcoords="offset points",
                              ha="left" if case.ratio >= 1 else "right")
    ratio_ax.axvline(1, color="black", linewidth=0.8)
    ratio_ax.set_xlabel("candidate / incumbent mean time (< 1 is faster)")
    ratio_ax.set_yticks(list(ys), [c.label for c in diff.cases])
    ratio_ax.invert_yaxis()
    ratio_ax.set_xlim(*ratio_limits([c.ratio for c in diff.cases if c.ratio]))
    for offset, side, color in ((-0.2, "margin", COLORS["newest"]),
                                (0.2, "incumbent_margin", COLORS["first"])):
        points = [(y + offset, getattr(c, side)) for y, c in zip(ys, diff.cases)
                  if getattr(c, side) is not None]
        gate_ax.barh([p[0] for p in points], [p[1] for p in points], height=0.38, color=color,
                     label="candidate" if side == "margin" else "incumbent")
    gate_ax.axvline(1, color=COLORS["slower"], linewidth=1)
    gate_ax.set_xlabel("tightest gate (fraction of its limit)")
    gate_ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(title)
    _save(fig, path)


def ratio_limits(ratios: list[float]) -> tuple[float, float]:
    """An axis centred on 1 that holds every ratio with room for its label, at least 1 +- MIN_RATIO_SPAN
    (cut at 0 below: a ratio is positive)."""
    span = max([MIN_RATIO_SPAN] + [1.3 * abs(r - 1) for r in ratios])
    return max(0.0, 1 - span), 1 + span


CHECK_CHART_CASES = 40   # rows of the check chart: a robust check of 750 cases drew a 29,000-pixel-tall image


def chart_cases(check: Check, most: int = CHECK_CHART_CASES) -> list:
    """The cases the check chart draws, in the record's order: all of them up to MOST, else the failed ones and
    then those closest to a limit (the table beside the chart lists every case)."""
    if len(check.cases) <= most:
        return list(check.cases)

    def tightness(case) -> tuple:
        return (case.status == "fail", max((f for f in case.fractions.values() if f is not None), default=-1.0))
    keep = set(sorted(range(len(check.cases)), key=lambda i: tightness(check.cases[i]), reverse=True)[:most])
    return [c for i, c in enumerate(check.cases) if i in keep]


def check_chart(check: Check, title: str, path: Path) -> None:
    """A case x gate heat map of residual / limit; cells near 1 turn red (a long check: its tightest cases)."""
    cases = chart_cases(check)
    if len(cases) < len(check.cases):
        title += f": the {len(cases)} tightest of {len(check.cases)} cases"
    fig = _figure(max(6.0, 1.6 * len(check.gates) + 4), 1.4 + 0.38 * len(cases))
    ax = fig.add_subplot()
    grid = [[c.fractions[g] for g in check.gates] for c in cases]
    cmap = matplotlib.colormaps["RdYlGn_r"].with_extremes(bad="#eeeeee")
    image = ax.imshow([[float("nan") if v is None else v for v in row] for row in grid],
                      cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    for y, row in enumerate(grid):
        for x, value in enumerate(row):
            if value is not None:
                dark = value < 0.15 or value > 0.8  # the colour map's deep green and red ends
                ax.text(x, y, fmt_sig(value), ha="center", va="center", fontsize=9,
                        color="white" if dark else "black")
    ax.set_xticks(range(len(check.gates)), check.gates)
    ax.set_yticks(range(len(cases)), [c.label + ("  (FAIL)" if c.status == "fail" else "") for c in cases])
    fig.colorbar(image, ax=ax, label="residual / limit")
    ax.set_title(title)
    _save(fig, path)


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=100, bbox_inches="tight")
