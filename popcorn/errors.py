"""The one exception type the CLI turns into a single clear line and a non-zero exit."""


class PopkitError(Exception):
    """A failure a user can act on; its message is the whole story, shown as one line."""
