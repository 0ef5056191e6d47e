"""`popkit report`: the evidence log as one static HTML page with PNG charts, and a terminal summary.

load (data) -> draw each section that has data (charts) -> render (html).
A section without data gets a note in place of its chart; so does a chart that fails to draw,
so a strange log never stops the rest of the page.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from popcorn.errors import PopkitError
from popcorn.evidence.files import is_null_device
from popcorn.evidence.logs import DEFAULT_LOG, ROOT
from popcorn.evidence.tables import fmt_us, render_table
from popcorn.report import charts as draw
from popcorn.report.data import Evidence, ProblemEvidence, load_evidence
from popcorn.report.html import fmt_time, write_page

DEFAULT_OUT = ROOT / "report"


PAGE = "index.html"
UNSAFE_IN_FILE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass
class Report:
    page: Path | None            # None when OUT_DIR was the null device: made, shown, not kept
    evidence: Evidence
    charts: dict[str, dict[str, str]]  # problem -> section -> PNG file name
    notes: dict[str, dict[str, str]]   # problem -> section -> why there is no chart


def build_report(log: Path | str = DEFAULT_LOG, out_dir: Path | str = DEFAULT_OUT,
                 problem: str | None = None, include_cpu: bool = False, all_cases: bool = False) -> Report:
    """Write OUT_DIR/index.html and one PNG per drawable section; PROBLEM limits it to one problem.
    Only GPU runs of the full official lists count unless include_cpu / all_cases.

    The page and its charts are made in a folder of their own and move into OUT_DIR only once all are
    written (index.html last), so a failure or Ctrl-C leaves OUT_DIR as it was. OUT_DIR is made when its
    parent exists; /dev/null (the null device) makes the report as always and keeps none of it."""
    out_dir = Path(out_dir)
    discard = is_null_device(out_dir)
    if not discard:
        require_out_dir(out_dir)
    evidence = load_evidence(log, problem, include_cpu, all_cases)
    try:
        with _staged(out_dir, discard) as stage:
            charts, notes = _draw_charts(evidence, stage)
            write_page(evidence, charts, notes, stage / PAGE)
    except OSError as exc:   # named after the folder asked for, not the staging folder
        raise PopkitError(f"{out_dir}: the report could not be written ({exc.strerror or exc}); nothing in it "
                          "was changed") from None
    return Report(None if discard else out_dir / PAGE, evidence, charts, notes)


def require_out_dir(out_dir: Path) -> None:
    """OUT_DIR is a folder, or can be made as one in a folder that exists; else one line naming the problem."""
    if out_dir.is_symlink() and not out_dir.exists():
        raise PopkitError(f"-o {out_dir}: a link to {os.readlink(out_dir)}, which does not exist; nothing was written")
    if out_dir.exists():
        if not out_dir.is_dir():
            raise PopkitError(f"-o {out_dir}: {_kind(out_dir)}, not a folder; the report is a folder (index.html "
                              "and its charts): name a folder, or /dev/null to print the summary alone")
        return
    parent = out_dir.parent
    if not parent.exists():
        raise PopkitError(f"-o {out_dir}: no such folder {parent} (the report makes its own folder, not the ones "
                          "above it); nothing was written")
    if not parent.is_dir():
        raise PopkitError(f"-o {out_dir}: {parent} is {_kind(parent)}, not a folder; nothing was written")


def _kind(path: Path) -> str:
    mode = path.stat().st_mode
    for test, name in ((stat.S_ISREG, "a file"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


@contextlib.contextmanager
def _staged(out_dir: Path, discard: bool):
    """A fresh folder to write the report in. When the block ends well its files replace OUT_DIR's (index.html
    last), or it becomes OUT_DIR when there was none; when it fails (Ctrl-C too) it is removed, and OUT_DIR is
    as it was. discard: a temporary folder, removed either way."""
    if discard:
        with tempfile.TemporaryDirectory(prefix="popkit-report-") as tmp:
            yield Path(tmp)
        return
    existed = out_dir.is_dir()
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name or 'report'}.", dir=out_dir if existed else out_dir.parent))
    try:
        yield stage
        if existed:
            for item in sorted(stage.iterdir(), key=lambda p: p.name == PAGE):
                os.replace(item, out_dir / item.name)
            stage.rmdir()
        else:
            umask = os.umask(0)
            os.umask(umask)
            stage.chmod(0o777 & ~umask)      # as a plain mkdir would make it (mkdtemp's is 0700)
            stage.rename(out_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _draw_charts(evidence: Evidence, folder: Path) -> tuple[dict, dict]:
    """Each problem's drawable sections as PNGs in FOLDER: (problem -> section -> file name, problem -> section ->
    why there is no chart)."""
    charts, notes = {}, {}
    for ev in evidence.problems:
        charts[ev.name], notes[ev.name] = {}, ev.notes()
        for section, chart in _chart_makers(ev).items():
            if section in notes[ev.name]:
                continue
            # The problem comes from the log: a '/' in it named a file in another folder (or none).
            name = f"{UNSAFE_IN_FILE_NAME.sub('_', ev.name)}-{section}.png"
            try:
                chart(folder / name)
            except OSError:           # the disk, not the log: the whole report fails, and nothing is kept
                raise
            except Exception as exc:  # a log we did not foresee must not cost the whole page
                notes[ev.name][section] = f"The {section} chart failed: {type(exc).__name__}: {exc}"
                continue
            charts[ev.name][section] = name
    return charts, notes


def _chart_makers(ev: ProblemEvidence) -> dict:
    """section -> function(path) that draws it (called only for sections with data)."""
    name = ev.name
    return {
        "cases": lambda path: draw.cases_chart(
            ev.bench, f"{name}: benchmark cases on {ev.bench.gpu} ({ev.bench.runs} bench runs)", path),
        "frontier": lambda path: draw.frontier_chart(
            ev.frontier, f"{name}: best-so-far geomean per source and GPU", path),
        "diff": lambda path: draw.diff_chart(
            ev.diff, f"{name}: newest diff ({fmt_time(ev.diff.time)})", path),
        "check": lambda path: draw.check_chart(
            ev.check, f"{name}: newest check ({fmt_time(ev.check.time)})", path),
    }


def summary(report: Report) -> str:
    """The page's headline numbers as plain text for the terminal."""
    out = []
    for ev in report.evidence.problems:
        counts = ", ".join(f"{mode} {n}" for mode, n in sorted(ev.counts.items())) or "no records"
        out.append(f"== {ev.name} ({counts})")
        if ev.hidden_line():
            out.append(ev.hidden_line())
        if ev.bench:
            out.append(f"bench on {ev.bench.gpu or 'an unknown GPU'}: {ev.bench.runs} run(s), newest geomean "
                       f"{_us(ev.bench.geomean_us)} (baseline {_us(ev.bench.baseline_geomean_us)})")
            rows = [[c.label, fmt_us(c.first_us), fmt_us(c.best_us), fmt_time(c.best_time),
                     fmt_us(c.newest_us), fmt_us(c.baseline_us)] for c in ev.bench.cases]
            out.append(render_table(["case", "first us", "best us", "best since", "newest us",
                                     "baseline us"], rows, right_align={1, 2, 4, 5}))
        for line in ev.frontier:
            out.append(f"frontier {line.label}: best geomean {_us(line.best_us[-1])} "
                       f"since {fmt_time(line.since)}")
        if ev.frontier_skipped_line():
            out.append(ev.frontier_skipped_line())
        if ev.diff:
            verdicts = [c.verdict or "no verdict" for c in ev.diff.cases]
            tally = ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts))
            outcome = {True: "passed", False: "did not pass", None: "no verdict"}[ev.diff.passed]
            out.append(f"newest diff {fmt_time(ev.diff.time)}: {outcome} ({tally or 'no cases'})")
        if ev.check:
            out.append(f"newest check {fmt_time(ev.check.time)}: {_check_line(ev)}")
        if ev.submissions:
            s = ev.submissions[0]
            what = ", ".join(str(part) for part in (s.run_mode, s.gpu, s.cases) if part)
            out.append(f"newest submission {s.submission_id} ({what}) "
                       f"{fmt_time(s.time)}: public {_us(s.public_us)}, secret {_us(s.secret_us)}")
        out += [f"note: {text}" for text in report.notes[ev.name].values()]
    if not report.evidence.problems:
        out.append(f"no records in {report.evidence.log}")
    out.append(f"report: {report.page}" if report.page else "report: not kept (-o names the null device)")
    return "\n".join(out)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{fmt_us(value)} us"


def _check_line(ev: ProblemEvidence) -> str:
    """How many cases passed, and the case and gate closest to its limit."""
    cases = ev.check.cases
    passed = sum(c.status == "pass" for c in cases)
    closest = max(((f, g, c.label) for c in cases for g, f in c.fractions.items() if f is not None),
                  default=None)
    tightest = (f", tightest: {closest[1]} at {closest[0]:.2g} of its limit on {closest[2]}"
                if closest else "")
    return f"{passed}/{len(cases)} cases pass{tightest}"
