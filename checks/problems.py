"""The problems popkit knows: their official case lists, gates and timeouts.

Each problem is described by one YAML file in checks/cases/ (vendored from the
competition's task definition). Adding a problem = adding its YAML file, a
generator family table and a gate function (see checks/generators.py and
checks/gates.py) and a parts folder.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

CASES_DIR = Path(__file__).resolve().parent / "cases"

# Keys of a case spec, in the order the official cases file writes them.
SPEC_KEYS = ("batch", "n", "cond", "seed", "case")
DEFAULT_CASE = {"qr_v2": "dense", "eigh": "dense"}


class ProblemError(ValueError):
    """A problem name or a case spec that popkit cannot use."""


@dataclass(frozen=True)
class Problem:
    name: str
    leaderboard: str
    gpu: str
    tests: list[dict] = field(default_factory=list)
    benchmarks: list[dict] = field(default_factory=list)
    gates: dict = field(default_factory=dict)
    timeouts_s: dict = field(default_factory=dict)


def known_problems() -> list[str]:
    return sorted(p.stem for p in CASES_DIR.glob("*.yml"))


def load_problem(name: str) -> Problem:
    """Load a problem's official description; unknown names raise ProblemError."""
    path = CASES_DIR / f"{name}.yml"
    if not path.is_file():
        raise ProblemError(f"unknown problem {name!r} (known: {', '.join(known_problems())})")
    raw = yaml.safe_load(path.read_text())
    default = DEFAULT_CASE.get(name, "dense")
    return Problem(
        name=name,
        leaderboard=raw["leaderboard"],
        gpu=raw.get("gpu_on_leaderboard", "B200"),
        tests=[normalize_spec(s, default) for s in raw["tests"]],
        benchmarks=[normalize_spec(s, default) for s in raw["benchmarks"]],
        gates=raw.get("gates", {}),
        timeouts_s=raw.get("timeouts_s", {}),
    )


def normalize_spec(spec: dict, default_case: str = "dense") -> dict:
    """Check a spec's keys and types; fill in the default case family."""
    unknown = set(spec) - set(SPEC_KEYS)
    if unknown:
        raise ProblemError(f"unknown key(s) {sorted(unknown)} in case spec {spec}")
    out = {}
    for key in ("batch", "n", "cond", "seed"):
        if key not in spec:
            raise ProblemError(f"case spec {spec} lacks {key!r}")
        try:
            out[key] = int(spec[key])
        except (TypeError, ValueError):
            raise ProblemError(f"case spec {spec}: {key} must be an integer") from None
    if out["batch"] < 1 or out["n"] < 1:
        raise ProblemError(f"case spec {spec}: batch and n must be >= 1")
    out["case"] = str(spec.get("case", default_case))
    return out


def parse_spec(text: str, default_case: str = "dense") -> dict:
    """Parse the official cases-file syntax: 'batch: 640; n: 512; cond: 2; seed: 1029; case: mixed'."""
    spec = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition(":")
        if not sep:
            raise ProblemError(f"bad case spec {text!r}: expected 'key: value' pairs joined by '; '")
        spec[key.strip()] = value.strip()
    return normalize_spec(spec, default_case)


def format_spec(spec: dict) -> str:
    """The inverse of parse_spec, in the official key order."""
    return "; ".join(f"{k}: {spec[k]}" for k in SPEC_KEYS if k in spec)


def short_spec(spec: dict) -> str:
    """A compact label for tables: '640x512 mixed c2'."""
    return f"{spec['batch']}x{spec['n']} {spec['case']} c{spec['cond']}"
