"""fail_cleanly: the one place where known errors become one line on stderr and exit 1 (Ctrl-C: exit 130);
echo: a line printed with its control characters shown, for text a server or a file supplied;
loads_torch: torch imported before a verb that needs it, so that Ctrl-C during that import counts.

Its own module so that the verb modules import it without importing the group that registers them."""
from __future__ import annotations

import functools
import os
import sys

import click

from popcorn.errors import Interrupted, PopkitError, ProblemError, deferred_interrupt
from popcorn.evidence.tables import printable


def echo(text: str = "", err: bool = False) -> None:
    """click.echo of TEXT as printable shows it: no control character in a server's words reaches the terminal
    (ESC[2J would clear the screen, \\r hide the start of a line); newlines and tabs stay."""
    click.echo(printable(text), err=err)


def fail_cleanly(func):
    """Turn known errors into one line and a non-zero exit instead of a traceback."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (PopkitError, ProblemError) as exc:
            echo(f"error: {exc}", err=True)
            sys.exit(1)
        except Interrupted as exc:        # Ctrl-C in a run: what stopped, and what it left written
            echo(f"\n{exc}", err=True)
            sys.exit(Interrupted.EXIT_CODE)
        except KeyboardInterrupt:         # elsewhere (click's own answer was "Aborted!" and exit 1)
            echo("\ninterrupted", err=True)
            sys.exit(Interrupted.EXIT_CODE)
        except BrokenPipeError:
            # The reader has gone (`popkit problem show qr_v2 | head`): nothing failed, and nothing more can
            # be shown; stdout goes to /dev/null so the interpreter's last flush does not complain either.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""     # os.write's errors name no file
            echo(f"error: {where}{exc.strerror or exc}", err=True)
            sys.exit(1)
    return wrapper


def loads_torch(func):
    """For a verb that imports torch: import it first, with Ctrl-C held until the import ends. torch's C
    initialisation imports numpy and swallows a KeyboardInterrupt raised there, so the verb ran on as if
    Ctrl-C had not been pressed; held, it takes effect right after the import (fail_cleanly's exit 130)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with deferred_interrupt():
            import torch  # noqa: F401
        return func(*args, **kwargs)
    return wrapper
