"""The `report` verb: a static HTML dashboard of the evidence log (see popcorn/report/)."""
from __future__ import annotations

from pathlib import Path

import click

from popcorn.cli.failures import fail_cleanly, loads_torch
from popcorn.errors import PopkitError
from popcorn.evidence.logs import DEFAULT_LOG


def register(main):
    """Add this module's verbs to the `popkit` group."""

    @main.command("report")
    @click.argument("problem", required=False)
    # Not click's file_okay=False: its answer was three lines of usage; build_report names a wrong folder in one.
    # Text, not a Path: Path('') is '.', and -o '' filled the current folder with the report.
    @click.option("-o", "--out", "out_dir", type=click.Path(),
                  help="Folder for index.html and its PNG charts, made if its parent exists; /dev/null keeps "
                       "nothing (the summary alone).  [default: report/]")
    # A log named with --log must exist (a typo is an error); the default one may be missing (a fresh
    # project: the page says that no run has written it yet). Hence no click default here.
    @click.option("--log", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                  help="Evidence log to read.  [default: logs/performance.jsonl]")
    @click.option("--include-cpu", is_flag=True, help="also count check, bench and diff runs made on a CPU (or on no known device)")
    @click.option("--all-cases", is_flag=True, help="also count runs of chosen cases (--case), not only the "
                                                    "full official lists")
    @fail_cleanly
    @loads_torch
    def report(problem, out_dir, log, include_cpu, all_cases):
        """Write a dashboard of the evidence log (all problems, or PROBLEM) and print its summary.
        By default only GPU runs of the full official lists count."""
        try:
            from popcorn.report.dashboard import DEFAULT_OUT, build_report, summary  # matplotlib: this verb only
        except ImportError as exc:
            raise PopkitError(f"popkit report draws its charts with matplotlib, which does not import here ({exc}): "
                              "pip install matplotlib") from None

        if out_dir == "":
            raise PopkitError("-o '': an empty folder name; name the report's folder (-o report), or /dev/null for "
                              "the summary alone; nothing was written")
        if Path(out_dir or ".").suffix.lower() in (".html", ".htm") and not Path(out_dir).is_dir():
            # -o report.html made a folder of that name with index.html inside: not what the name promised
            raise PopkitError(f"-o {out_dir}: -o names the report's folder (index.html and its charts go inside): "
                              f"say -o {Path(out_dir).with_suffix('')}; nothing was written")
        result = build_report(log or DEFAULT_LOG, DEFAULT_OUT if out_dir is None else Path(out_dir), problem,
                              include_cpu, all_cases)
        for line in result.evidence.notes:
            click.echo(f"warning: {line}", err=True)
        click.echo(summary(result))
