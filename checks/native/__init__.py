"""Native checkers: checks/native/PROBLEM.py holds one problem's generators, gates, baseline and suites.

A problem is native when a module of its name exists here and defines check_output; such a module
must offer the whole checker interface (INTERFACE), and may add what scripts/peers.py reports beside
it: PEERS (other libraries' solvers, peers.py) and floor_bytes(spec). The shared helpers beside them
(draw, blocks, profiles, matrix_specs, gate_tools, peers) define no check_output. Nothing here lists
problem names: lookup is by module name only.
"""
from __future__ import annotations

import importlib
import re
from types import ModuleType

from popcorn.errors import ProblemError

INTERFACE = ("DEFAULT_CASE", "BASELINE_NAME", "baseline", "normalize_spec", "families", "generate",
             "benchmark_inputs", "check_output", "robustness_specs")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def native_checker(problem: str) -> ModuleType | None:
    """checks.native.<problem> when it is a checker module; None for a harness problem."""
    if not _NAME.match(problem):
        return None
    name = f"{__name__}.{problem}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return None
        raise
    if not hasattr(module, "check_output"):
        return None            # a shared helper module, not a problem
    missing = ", ".join(attr for attr in INTERFACE if not hasattr(module, attr))
    if missing:
        raise ProblemError(f"checks/native/{problem}.py is not a complete native checker (lacks {missing})")
    return module
