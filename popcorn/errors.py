"""The exception types the CLI turns into a single clear line and an exit code."""


class PopkitError(Exception):
    """A failure a user can act on; its message is the whole story, shown as one line."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the message says what was interrupted and what it left written. A KeyboardInterrupt,
    so every cleanup that handles one still runs; the CLI prints the message and exits 130 (128 + SIGINT)."""
    EXIT_CODE = 130
