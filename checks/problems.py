"""The problems popkit knows: their case lists, leaderboard facts and timeouts, read from checks/cases/NAME.yml.

A record is written by `popkit problem add NAME --from DIR` from the competition's task.yml (see
checks/task_folder.py), or by hand for the native problems. Two kinds:
- a harness problem is data only: its record (plus parts/NAME/); check, bench and diff run the
  competition folder's own eval.py (checks/harness.py);
- a native problem also has checks/native/NAME.py (generators, gates, baseline), found by module
  name, so no shared file lists problem names.

A case spec is a dict of scalars in the task's key order: {batch, n, cond, seed, case} for the
matrix problems, {size, seed} or {seqlen, bs, dim, ...} elsewhere; a grouped task also gives lists of
integers ({m: [96, 128], g: 2, ...}: per-group sizes, '[96, 128]' in a cases file).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from checks.native import native_checker
from popcorn.errors import ProblemError, parse_error_line

CASES_DIR = Path(__file__).resolve().parent / "cases"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")    # a file name: at most 64 characters
SPEC_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
INTEGER = r"[+-]?[0-9]+"
INTEGER_LIST = re.compile(rf"\[\s*{INTEGER}(\s*,\s*{INTEGER})*\s*\]")
ENTRY_POINT = "custom_kernel"     # what the grader calls in a submission, unless the task's template says otherwise
# The longest limit a task may set, in seconds: the server ends any job after 30 min, and a limit past what a clock
# can wait for (.inf, 10^23) ended add and check in OverflowError tracebacks.
MAX_TIMEOUT_S = 86400


def timeout_error(value) -> str | None:
    """Why VALUE is not a task's time limit (None when it is one): a positive, finite number of seconds, at most
    MAX_TIMEOUT_S."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TIMEOUT_S:
        return f"must be a positive number of seconds up to {MAX_TIMEOUT_S} (a day), not {value!r}"
    return None


@dataclass(frozen=True)
class Problem:
    name: str
    leaderboard: str
    gpu: str                                          # the first GPU the leaderboard lists
    tests: list[dict] = field(default_factory=list)
    benchmarks: list[dict] = field(default_factory=list)
    gates: dict = field(default_factory=dict)
    timeouts_s: dict = field(default_factory=dict)    # test, benchmark, ranked
    gpus: list[str] = field(default_factory=list)
    ranking: str = ""
    harness: dict = field(default_factory=dict)       # folder, main, files (from task.yml)
    multi_gpu: bool = False                           # eval.py runs each case on world_size GPUs
    entry_points: list[str] = field(default_factory=lambda: [ENTRY_POINT])   # what eval.py calls in a submission

    @property
    def ranked_benchmarks(self) -> list[dict]:
        """The benchmark cases the leaderboard times: all, or only the last for a task ranked by its last
        case (the runner then gives eval.py that one line, in benchmark mode too)."""
        return self.benchmarks[-1:] if self.ranking == "last" else self.benchmarks

    @property
    def native(self):
        """The problem's native checker module, or None for a harness problem."""
        return native_checker(self.name)


def world_size(specs: list[dict]) -> int:
    """The most GPUs one of a multi-GPU task's cases runs on (its `world_size` key; 1 without one)."""
    return max((s["world_size"] for s in specs if isinstance(s.get("world_size"), int)), default=1)


BOARD_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]*")    # the platform's names: vectoradd_v2, amd-identity


def leaderboard_error(board: str) -> str | None:
    """Why BOARD cannot be a leaderboard's name (None when it can): the platform's names are lower-case letters,
    digits, '_' and '-' ('../x' or 'a.b' is none), a submission's '#!POPCORN leaderboard' line holds one word, and
    the server looks boards up in lower case (a directive that differs is refused)."""
    if BOARD_PATTERN.fullmatch(board):
        return None
    return (f"{board!r} is not a leaderboard name: lower-case letters, digits, '_' and '-', starting with a letter "
            "or digit, as the platform's names are (a '#!POPCORN leaderboard' line holds one word, and the server "
            "refuses a directive that is not the board's lower-case name)")


def known_problems(cases_dir: Path | None = None) -> list[str]:
    return sorted(p.stem for p in (cases_dir or CASES_DIR).glob("*.yml") if p.is_file())


def record_path(name: str, cases_dir: Path | None = None) -> Path:
    return (cases_dir or CASES_DIR) / f"{name}.yml"


def load_problem(name: str, cases_dir: Path | None = None) -> Problem:
    """Load a problem's record; unknown names and unreadable records raise ProblemError."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ProblemError(f"{name!r} is not a problem name (up to 64 lower-case letters, digits and _, as "
                           f"`popkit problem add` takes); known: {', '.join(known_problems(cases_dir)) or 'none'}")
    path = record_path(name, cases_dir)
    if not path.is_file():
        known = ", ".join(known_problems(cases_dir)) or "none"
        raise ProblemError(f"unknown problem {name!r} (known: {known}; add one with "
                           f"`popkit problem add {name} --from DIR`)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: not a readable problem record ({parse_error_line(exc)})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("tests"), list) or not raw.get("tests") \
            or not isinstance(raw.get("benchmarks"), list) or not raw.get("benchmarks"):
        raise ProblemError(f"{path}: a problem record needs non-empty 'tests' and 'benchmarks' lists")
    odd = record_shape_problem(raw)
    if odd:
        raise ProblemError(f"{path}: {odd}")
    gpus = raw.get("gpus") or [raw.get("gpu_on_leaderboard") or "B200"]
    gpus = [str(g) for g in ([gpus] if isinstance(gpus, str) else gpus)]
    board_error = leaderboard_error(str(raw.get("leaderboard", name)))
    if board_error:
        raise ProblemError(f"{path}: {board_error}")
    problem = Problem(name=name, leaderboard=str(raw.get("leaderboard", name)), gpu=gpus[0], gpus=gpus,
                      gates=raw.get("gates") or {}, timeouts_s=raw.get("timeouts_s") or {},
                      ranking=str(raw.get("ranking") or ""), harness=raw.get("harness") or {},
                      multi_gpu=raw.get("multi_gpu") is True,
                      entry_points=raw.get("entry_points") or [ENTRY_POINT])
    try:
        tests = [normalize(problem, s) for s in raw["tests"]]
        benchmarks = [normalize(problem, s) for s in raw["benchmarks"]]
    except ProblemError as exc:
        raise ProblemError(f"{path}: {exc}") from None
    return Problem(**{**problem.__dict__, "tests": tests, "benchmarks": benchmarks})


def record_shape_problem(raw: dict) -> str | None:
    """What in a record's facts is not of the kind the verbs read (None when all are): gpus a name or a list
    of names, multi_gpu true or false, entry_points a list of function names, timeouts_s and gates mappings
    (timeouts in seconds), harness a mapping with a folder, a main and a list of files {name, source}."""
    gpus = raw.get("gpus")
    if gpus is not None and not isinstance(gpus, str) and not (
            isinstance(gpus, list) and all(isinstance(g, (str, int)) and not isinstance(g, bool) for g in gpus)):
        return f"gpus must be a list of GPU names, not {gpus!r}"
    if not isinstance(raw.get("multi_gpu", False), bool):
        return f"multi_gpu must be true or false, not {raw['multi_gpu']!r}"
    if not _is_name_list(raw.get("entry_points", [ENTRY_POINT])):
        return f"entry_points must be a list of function names, not {raw['entry_points']!r}"
    for key in ("timeouts_s", "gates", "harness"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            return f"{key} must be a mapping, not {raw[key]!r}"
    for key, value in (raw.get("timeouts_s") or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"timeouts_s: {key} must be a number of seconds, not {value!r}"
        if timeout_error(value):
            return f"timeouts_s: {key} {timeout_error(value)}"
    harness = raw.get("harness") or {}
    for key in ("folder", "main"):
        if harness.get(key) is not None and not isinstance(harness[key], str):
            return f"harness: {key} must be a path, not {harness[key]!r}"
    files = harness.get("files")
    if files is not None and not (isinstance(files, list) and all(
            isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("source"), str) for f in files)):
        return "harness: files must be a list of {name, source} entries"
    return None


def _is_name_list(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v.isidentifier() for v in value)


def _raw_records() -> list[tuple[str, dict]]:
    """(name, record) of every record as plain YAML, by name; an unreadable one is skipped (the verbs name it)."""
    found = []
    for path in sorted(CASES_DIR.glob("*.yml")):
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(raw, dict):
            found.append((path.stem, raw))
    return found


def entry_points_of(board: str | None) -> list[str]:
    """What a file for leaderboard BOARD must define: the entry points of the record that names the board,
    else custom_kernel."""
    for _, raw in _raw_records():
        if raw.get("leaderboard") == board and _is_name_list(raw.get("entry_points")):
            return raw["entry_points"]
    return [ENTRY_POINT]


def problems_on(board: str) -> list[str]:
    """The problems whose record names leaderboard BOARD (a record without a board names its own problem's name),
    in name order: several may share one board (a folder added twice)."""
    return [name for name, raw in _raw_records() if str(raw.get("leaderboard", name)) == board]


def normalize(problem: Problem | str, spec: dict) -> dict:
    """A case spec checked by the problem's native module, or by the generic rules of eval.py's grammar."""
    if isinstance(problem, str):
        problem = load_problem(problem)
    checker = problem.native
    return checker.normalize_spec(spec) if checker is not None else generic_spec(spec)


def generic_spec(spec: dict) -> dict:
    """A harness problem's spec: identifier keys, and scalar values (or lists of integers) that fit one
    line of a cases file."""
    if not isinstance(spec, dict) or not spec:
        raise ProblemError(f"a case spec is a non-empty mapping, got {spec!r}")
    for key, value in spec.items():
        if not isinstance(key, str) or not SPEC_KEY.match(key):
            raise ProblemError(f"case spec {spec}: key {key!r} is not an identifier")
        if not (_is_word(value) or _is_integer_list(value)):
            raise ProblemError(f"case spec {spec}: {key} = {value!r} is not a number, a word or a list of integers")
    return dict(spec)


def _is_word(value) -> bool:
    return isinstance(value, (bool, int, float, str)) and re.fullmatch(r"[^\s;:]+", str(value)) is not None


def _is_integer_list(value) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value))


def parse_spec(text: str, problem: Problem | str | None = None) -> dict:
    """Parse the case-file syntax 'batch: 640; n: 512; seed: 1029; case: mixed' (integers become ints,
    '[96, 128]' a list of them)."""
    spec = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = (piece.strip() for piece in part.partition(":"))
        if not sep or not key or not value:
            raise ProblemError(f"bad case spec {text!r}: expected 'key: value' pairs joined by '; ', got {part!r}")
        if key in spec:
            raise ProblemError(f"bad case spec {text!r}: {key} is given twice")
        if re.fullmatch(INTEGER, value):
            spec[key] = int(value)
        elif INTEGER_LIST.fullmatch(value):
            spec[key] = [int(v) for v in value[1:-1].split(",")]
        else:
            spec[key] = value
    if not spec:        # was 'a case spec is a non-empty mapping, got {}': neither the text nor an example
        if isinstance(problem, str):
            problem = load_problem(problem)
        example = f", e.g. {format_spec(problem.tests[0])!r}" if problem is not None else ""
        raise ProblemError(f"bad case spec {text!r}: no 'key: value' pair{example}")
    return normalize(problem, spec) if problem is not None else generic_spec(spec)


def format_spec(spec: dict) -> str:
    """The inverse of parse_spec, in the spec's own key order (one line of eval.py's cases file)."""
    return "; ".join(f"{k}: {v}" for k, v in spec.items())


def short_spec(spec: dict) -> str:
    """A compact label for tables: '640x512 mixed c2' for matrix problems, else 'k=v ...' without the seed."""
    if {"batch", "n", "cond", "case"} <= set(spec):
        return f"{spec['batch']}x{spec['n']} {spec['case']} c{spec['cond']}"
    return " ".join(f"{k}={v}" for k, v in spec.items() if k != "seed") or format_spec(spec)
