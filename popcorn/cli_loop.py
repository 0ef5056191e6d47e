"""The core loop's verbs: build, check, bench, diff, promote."""


def register(main):
    """Add this module's verbs to the `popkit` group."""
