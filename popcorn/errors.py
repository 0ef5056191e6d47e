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
