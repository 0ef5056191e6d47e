"""The `popkit` command line: a thin click layer over library functions.

Each verb parses options, calls one library function, prints its result and maps
PopkitError (and other known errors) to one line on stderr and exit 1 (failures.fail_cleanly).
The verbs live in modules by topic: loop, problem, leaderboard, report, records.
"""
from __future__ import annotations

import sys

try:
    # Loading click and the verbs takes a few tenths of a second, before fail_cleanly is there to turn
    # Ctrl-C into its one line: here it ends the same way (exit 130), not in a traceback.
    import click

    from popcorn.evidence.logs import ROOT

    # build.py sits at the project root and is not installed as a module (`build` is PyPA's name):
    # the root goes first on the path so the verbs that build import this project's builder.
    if (ROOT / "build.py").is_file() and str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))

    def _print_version(ctx: click.Context, _param, value: bool) -> None:
        # Eager: prints and exits before any verb runs; the commit is what the evidence records would name.
        if not value or ctx.resilient_parsing:
            return
        from popcorn.evidence.logs import NO_COMMIT, git_commit, toolkit_version
        click.echo(f"popkit {toolkit_version()} (commit {git_commit() or 'unknown: ' + NO_COMMIT})")
        ctx.exit()

    @click.group(context_settings={"help_option_names": ["-h", "--help"]})
    @click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
                  help="Print popkit's version and the commit its records would name, and exit.")
    def main():
        """popkit: build, check, time, compare and submit GPU MODE kernel solutions."""

    def _register_all():
        # Each module adds its verbs to `main`; kept in separate files by topic.
        from popcorn.cli import leaderboard, loop, problem, records, report
        for module in (loop, problem, leaderboard, report, records):
            module.register(main)

    _register_all()
except KeyboardInterrupt:
    sys.stderr.write("\ninterrupted\n")
    raise SystemExit(130) from None
