"""The exception types the CLI turns into a single clear line and an exit code, and deferred_interrupt."""
from __future__ import annotations

import contextlib
import signal
import threading


class PopkitError(Exception):
    """A failure a user can act on; its message is the whole story, shown as one line."""


class ProblemError(ValueError):
    """A problem name or a case spec that popkit cannot use."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the message says what was interrupted and what it left written. A KeyboardInterrupt,
    so every cleanup that handles one still runs; the CLI prints the message and exits 130 (128 + SIGINT)."""
    EXIT_CODE = 130


def parse_error_line(exc: Exception) -> str:
    """A file's parse error in one line. A YAML error says where and what ('line 3, column 5: expected ',' or
    '}', but got ':''): the first line of its message names only the parser's context ('while parsing a flow
    mapping'). Any other error: the first line of its message."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return (str(exc).splitlines() or [type(exc).__name__])[0]


@contextlib.contextmanager
def deferred_interrupt():
    """Ctrl-C during the block takes effect when it ends, as a KeyboardInterrupt (main thread only: elsewhere
    Python cannot set handlers): a record is appended whole, and code that would swallow the interrupt never
    sees it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda *args: caught.append(args))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt
