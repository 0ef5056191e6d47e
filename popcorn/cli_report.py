"""The `report` verb: see issue 4."""


def register(main):
    """Add this module's verbs to the `popkit` group."""
