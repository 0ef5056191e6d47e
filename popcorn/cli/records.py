"""The `merge` verb: evidence made on another machine (a GPU host) into logs/ (popcorn.evidence.archive.merge_files)."""
from __future__ import annotations

import shlex
from pathlib import Path

import click

from popcorn.cli.failures import fail_cleanly
from popcorn.evidence.archive import BUILDS, merge_files
from popcorn.evidence.logs import DEFAULT_LOG, capped


def register(main):
    """Add this module's verbs to the `popkit` group."""

    @main.command("merge")
    @click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
    @click.option("--tables", type=click.Path(file_okay=False, path_type=Path),
                  help="also copy the run's .txt tables from this folder into device/ beside the log "
                       "(logs/device/; named after the run's first record time)")
    @click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_LOG,
                  show_default=True, help="the evidence log to merge into")
    # No click default: given with performance.jsonl files, whose builds stay in their folder, it is refused.
    @click.option("--builds", type=click.Path(file_okay=False, path_type=Path),
                  help="where an archive's built files go, a folder per run named after its first record time "
                       "(git-ignored by default: promote copies the one it installs into logs/incumbents/)  "
                       f"[default: {BUILDS}]")
    @fail_cleanly
    def merge_cmd(files, tables, log_path, builds):
        """Merge performance.jsonl FILES made on another machine into the evidence log, or a run's archive
        (gpu_session.sh -a FILE.tgz; also .tar.gz, .tar): its records, its tables and its builds in one step.

        Each line must be a strict-JSON record of the evidence contract; bad lines are named and
        skipped, records already in the log are skipped, and the log is replaced in one step."""
        result = merge_files(files, log_path, tables, builds)
        for line in capped([f"skipped {bad}" for bad in result.bad]):
            click.echo(f"warning: {line}", err=True)
        click.echo(f"merged into {log_path}: {result.added} record(s) added, {result.present} already there, "
                   f"{len(result.bad)} bad line(s) skipped (of {result.read} valid record(s) read)")
        for path in result.tables:
            click.echo(f"table: {path}")
        for path in result.builds:
            click.echo(f"build: {path}\n  promote it: {promote_command(path, log_path)}")


def promote_command(build: Path, log_path: Path) -> str:
    """The promote command of a merged BUILD, ready to paste: it reads the log the evidence was merged into (promote
    reads logs/performance.jsonl unless told), and a path with a space stays one argument."""
    argv = ["popkit", "promote", build.stem, "--submission", str(build)]
    if Path(log_path).resolve() != DEFAULT_LOG.resolve():
        argv += ["--log", str(log_path)]
    return shlex.join(argv)
