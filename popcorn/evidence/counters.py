"""ROUTE_COUNTERS, a submission's own counts: the one rule of what a counts dict is, for the worker (a live module's
dict) and the report (a logged case's "counters" and "incumbent_counters")."""
from __future__ import annotations

COUNTERS = "ROUTE_COUNTERS"     # the module-level name a submission counts under
NOT_COUNTS = "not a dict of str -> int"


def route_counts(value) -> dict[str, int] | None:
    """VALUE when it is a dict of str -> int; else None. A bool is no count (True is an int to isinstance), so a
    dict holding one is refused whole, as one with any other bad entry: half a dict would read as all of it."""
    if isinstance(value, dict) and all(isinstance(key, str) and isinstance(count, int) and not isinstance(count, bool)
                                       for key, count in value.items()):
        return value
    return None
