"""The `popkit` command line: a thin click layer over library functions.

Each verb parses options, calls one library function, prints its result and
maps PopkitError (and other known errors) to one line on stderr and exit 1.
"""
from __future__ import annotations

import functools
import sys

import click

from popcorn.errors import PopkitError
from popcorn.logs import ROOT

# build.py sits at the project root and is not installed as a module (`build` is PyPA's name):
# the root goes first on the path so the verbs that build import this project's builder.
if (ROOT / "build.py").is_file() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def fail_cleanly(func):
    """Turn known errors into one line and a non-zero exit instead of a traceback."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from checks.problems import ProblemError
        try:
            return func(*args, **kwargs)
        except (PopkitError, ProblemError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except OSError as exc:
            click.echo(f"error: {exc.filename or ''}: {exc.strerror or exc}", err=True)
            sys.exit(1)
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """popkit: build, check, time, compare and submit GPU MODE kernel solutions."""


def _register_all():
    # Each module adds its verbs to `main`; kept in separate files by topic.
    from popcorn import cli_loop, cli_leaderboard, cli_problem, cli_records, cli_report
    for module in (cli_loop, cli_problem, cli_leaderboard, cli_report, cli_records):
        module.register(main)


_register_all()
