"""fail_cleanly: the one place where known errors become one line on stderr and exit 1.

Its own module so that the verb modules import it without importing the group that registers them."""
from __future__ import annotations

import functools
import sys

import click

from checks.problems import ProblemError
from popcorn.errors import PopkitError


def fail_cleanly(func):
    """Turn known errors into one line and a non-zero exit instead of a traceback."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (PopkitError, ProblemError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except OSError as exc:
            click.echo(f"error: {exc.filename or ''}: {exc.strerror or exc}", err=True)
            sys.exit(1)
    return wrapper
