"""Leaderboard verbs (submit, submissions, leaderboards, ranking, ...): see issue 3."""


def register(main):
    """Add this module's verbs to the `popkit` group."""
