"""Evidence log: logs/performance.jsonl, one JSON record per check/bench/diff run.

The record shape is the contract in ../shared/docs/design.md ("Evidence"):
time, problem, mode, commit, submission_sha256, gpu, torch, cuda, compile_s,
cases[...], geomean_us, baseline_geomean_us, baseline. Extra keys are allowed;
"device" (the torch device a local run used) says, with "gpu", where it ran; a leaderboard
record's "leaderboard" names the board, its "problem" the problem whose file went there (a
record older than that key has the board as its problem).
Records made on another machine come in through merge_logs and merge_runs (archive.py: a run's archive).
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import json
import math
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from popcorn.errors import PopkitError
from popcorn.evidence.files import folder_error, locked, write_atomic, write_error

ROOT = Path(__file__).resolve().parents[2]   # popcorn/evidence/logs.py -> the project root
DEFAULT_LOG = ROOT / "logs" / "performance.jsonl"
MODES = ("check", "bench", "diff", "leaderboard")
CONTRACT = ("time", "problem", "mode", "commit", "submission_sha256", "gpu", "torch", "cuda", "compile_s",
            "cases", "geomean_us", "baseline_geomean_us", "baseline")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
TIME_FORM = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")      # utc_now's


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git_commit(cwd: Path = ROOT) -> str | None:
    """The toolkit's current commit (with '-dirty' when the tree has changes).

    POPKIT_COMMIT, when set, wins: it names the commit a copy of the tree holds on another machine,
    whose git may be absent or stale (a GPU host's copy can carry an older .git of its own). Without
    it: git, but only when this folder is the top of its own work tree (a copy nested in another
    checkout must not report that checkout's commit); else None."""
    if os.environ.get("POPKIT_COMMIT"):
        return os.environ["POPKIT_COMMIT"]
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True,
                             text=True, check=True).stdout.strip()
        if Path(top).resolve() != Path(cwd).resolve():
            return None
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return sha + ("-dirty" if dirty else "")


# Why git_commit found none, in the words of its rule: a copy nested in another checkout has git, but not its own.
NO_COMMIT = "this copy is not the top of a git work tree and POPKIT_COMMIT is unset"


def toolkit_version() -> str:
    """popkit's version: pyproject.toml's beside this tree, else the installed package's, else 'unknown'.

    The tree's own first: a venv installed (editable) from another checkout, as a worktree borrows, named that
    checkout's version beside this tree's commit. The installed package's serves a wheel, which has no pyproject."""
    try:
        import tomllib
        return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    except (ImportError, OSError, ValueError, KeyError):      # Python 3.10, or no pyproject.toml beside the code
        pass
    from importlib import metadata
    try:
        return metadata.version("popkit")
    except metadata.PackageNotFoundError:
        return "unknown"


def file_sha256(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def geomean(values) -> float:
    """Geometric mean of positive values (how the leaderboard ranks a set of cases)."""
    values = list(values)
    if not values:
        raise ValueError("geomean of no values")
    if any(v <= 0 for v in values):
        raise ValueError(f"geomean needs positive values, got {min(values)}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def case_geomean(cases: list[dict], key: str = "mean_us") -> float | None:
    """Geomean of one timing key over a record's cases; None unless every case has a positive value."""
    values = [case.get(key) for case in cases]
    if not values or any(v is None or v <= 0 for v in values):
        return None
    return geomean(values)


def new_record(problem: str, mode: str, **fields) -> dict:
    """A record with the contract's keys; callers fill in the rest via fields."""
    if mode not in MODES:
        raise ValueError(f"unknown log mode {mode!r}")
    record = {
        "time": utc_now(), "problem": problem, "mode": mode, "commit": git_commit(),
        "submission_sha256": None, "gpu": None, "torch": None, "cuda": None, "compile_s": None,
        "cases": [], "geomean_us": None, "baseline_geomean_us": None, "baseline": None, "device": None,
    }
    record.update(fields)
    if record["gpu"] is None and record["device"] == "cpu":
        record["gpu"] = "cpu"     # a run that failed before reporting its environment still says where it ran
    return record


def where_ran(record: dict) -> str | None:
    """'gpu' or 'cpu': its torch device when it names one ('cuda...' a GPU, any other a CPU), else its gpu field
    (a leaderboard record has only the server's GPU name; 'cpu' a CPU); None when neither names one (no device,
    and a gpu that is missing, empty, '?' or not a string): a device unknown, not a CPU."""
    device, gpu = record.get("device"), record.get("gpu")
    if isinstance(device, str) and device:
        return "gpu" if device.startswith("cuda") else "cpu"
    if not isinstance(gpu, str) or gpu.strip() in ("", "?"):
        return None
    return "cpu" if gpu.strip().lower() == "cpu" else "gpu"


def ran_on_gpu(record: dict) -> bool:
    """Whether a record is GPU evidence (where_ran)."""
    return where_ran(record) == "gpu"


def spec_key(spec: dict) -> str:
    """A case spec as a comparable string (key order does not matter)."""
    return json.dumps(spec, sort_keys=True)


def covers(record: dict, specs: list[dict]) -> bool:
    """Whether the record ran every one of specs (a full official list); extra cases do not matter."""
    cases = record.get("cases") if isinstance(record.get("cases"), list) else []
    ran = {spec_key(c["spec"]) for c in cases if isinstance(c, dict) and isinstance(c.get("spec"), dict)}
    return all(spec_key(s) in ran for s in specs)


def record_passed(record: dict) -> bool:
    """The record's own verdict ("passed"); without one, every case (at least one) passed."""
    passed = record.get("passed")
    if isinstance(passed, bool):
        return passed
    cases = record.get("cases")
    return isinstance(cases, list) and bool(cases) and all(
        isinstance(c, dict) and c.get("status") == "pass" for c in cases)


def strict_json(value):
    """The value with non-finite floats (a gate's inf on a failed case) as null: the log stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def append_record(record: dict, path: Path | str = DEFAULT_LOG) -> Path:
    """Append one record as one line, under the log's lock (files.locked). A log whose last line has no end (a
    write cut short, a hand edit) gets one first: the record would join that line and be lost with it."""
    path = Path(path)
    line = json.dumps(strict_json(record), sort_keys=False, allow_nan=False) + "\n"
    with locked(path) as fd:
        size = os.fstat(fd).st_size
        readable = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR    # write-only: appended as it is
        if size and readable and os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line
        os.write(fd, line.encode())
    return path


# Names that are clearly not an evidence log (a submission, a part, a record, a document): a record appended
# to one of them corrupts the file (`check --log submission.py`).
NOT_LOG_SUFFIXES = (".py", ".pyc", ".cu", ".cuh", ".cpp", ".cc", ".c", ".h", ".hpp", ".yml", ".yaml", ".toml",
                    ".md", ".html", ".j2", ".sh", ".png", ".ipynb")


def not_a_log(path: Path | str) -> str | None:
    """Why PATH is clearly not an evidence log (its name ends in a source or document suffix, or it is a
    file with content of which no line is a JSON object, or whose JSON objects are none of them a run: no mode
    of MODES, as in promote's logs/incumbents/history.jsonl); None for a log, a new file or an empty one.
    Reading stops at the first run record, so a real log costs one line."""
    path = Path(path)
    if path.suffix.lower() in NOT_LOG_SUFFIXES:
        return f"its name ends in {path.suffix}"
    if not path.is_file():
        return None
    lines = records = torn = 0
    with open(path, "rb") as handle:
        for raw in handle:
            if not raw.strip():
                continue
            lines += 1
            try:
                value = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                torn += raw.lstrip().startswith(b'{"')
                continue
            if isinstance(value, dict):
                if value.get("mode") in MODES:
                    return None
                records += 1
    if records:
        return (f"none of its {records} record(s) is a {', '.join(MODES[:-1])} or {MODES[-1]} run "
                "(no such 'mode')")
    if lines and torn == lines:       # a log whose records were all cut short (a run killed while writing one)
        return (f"its {lines} non-blank line(s) start as JSON records but none is whole (cut short?): delete "
                "them to use it as a log")
    return f"none of its {lines} non-blank line(s) is a JSON record" if lines else None


def refuse_non_log(path: Path | str, outcome: str) -> None:
    """A PopkitError (ending in OUTCOME, e.g. "nothing was run") when PATH is clearly not an evidence log."""
    why = not_a_log(path)
    if why:
        raise PopkitError(f"{path}: not an evidence log ({why}; a log holds one JSON record per line, like "
                          f"logs/performance.jsonl): {outcome}")


def require_appendable(path: Path | str) -> None:
    """Before a long run: its record can be appended to PATH (its folder exists or can be made, and it or the
    file is writable, and it is not clearly something else, like submission.py); else a PopkitError, so that
    no run ends by losing its record or by writing it into another file."""
    refuse_non_log(path, "nothing was run")
    why = unappendable(path)
    if why:
        raise PopkitError(f"{path}: the evidence log cannot be written ({why}): nothing was run")


def unappendable(path: Path | str) -> str | None:
    """Why no line can be appended to PATH (a folder, not writable ...); None when one can. A missing folder is
    not made now (files.folder_error): the append makes it, with the record."""
    path = Path(path)
    if not path.parent.is_dir():
        return folder_error(path.parent)
    try:
        if path.is_dir():
            return "a folder"
        # Opened as the append will open it: os.access says yes to root on a read-only mount or in /sys.
        # O_NONBLOCK: a FIFO without a reader is refused instead of waiting for one.
        existed = path.exists()
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o644))
        if not existed:
            path.unlink()         # the append creates it with its line
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


WARNINGS_SHOWN = 5      # a log's bad lines shown one by one; the rest as one count (capped)


def capped(lines: list[str], shown: int = WARNINGS_SHOWN) -> list[str]:
    """At most SHOWN of a log's bad-line messages, then one line with how many more there are: a log with a
    few records and thousands of bad lines stays readable wherever it is read (report, merge)."""
    lines = list(lines)
    if len(lines) <= shown:
        return lines
    return lines[:shown] + [f"... and {len(lines) - shown} more bad line(s) ({len(lines)} in all)"]


def read_records(path: Path | str = DEFAULT_LOG) -> tuple[list[dict], list[str]]:
    """All records, plus one message per line that is not a JSON object (with its line number)."""
    path = Path(path)
    records, problems = [], []
    if not path.is_file():
        return records, problems
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            problems.append(f"{path}:{number}: not UTF-8")
            continue
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{number}: not JSON ({exc.msg})")
            continue
        if not isinstance(value, dict):
            problems.append(f"{path}:{number}: not a JSON object")
            continue
        records.append(value)
    return records, problems


# ---- records from another machine -------------------------------------------------------------

def record_problem(record) -> str | None:
    """What keeps a value from being a record under the contract; None when it is one."""
    if not isinstance(record, dict):
        return "not a JSON object"
    missing = [key for key in CONTRACT if key not in record]
    if missing:
        return f"missing {', '.join(missing)}"
    if not isinstance(record["time"], str) or _parse_time(record["time"]) is None:
        return (f"time {record['time']!r} is not an ISO 8601 UTC time in popkit's form (2026-12-01T10:00:00Z, "
                "which sorts as text)")
    if not isinstance(record["problem"], str) or not record["problem"]:
        return "problem is not a name"
    if record["mode"] not in MODES:
        return f"mode {record['mode']!r} is not one of {', '.join(MODES)}"
    sha = record["submission_sha256"]
    if sha is not None and not (isinstance(sha, str) and SHA256.match(sha)):
        return "submission_sha256 is not a sha256"
    for key in ("commit", "gpu", "torch", "cuda", "baseline", "device", "leaderboard"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"{key} is not a string"
    for key in ("compile_s", "geomean_us", "baseline_geomean_us"):
        value = record[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{key} is not a number"
    if not isinstance(record["cases"], list):
        return "cases is not a list"
    for index, case in enumerate(record["cases"]):
        if not isinstance(case, dict) or not isinstance(case.get("spec"), dict):
            return f"case {index} has no spec object"
        if case.get("status") not in ("pass", "fail"):
            return f"case {index} status {case.get('status')!r} is not pass or fail"
    return None


def _parse_time(text: str) -> _dt.datetime | None:
    """The time of a record's TEXT in utc_now's form only: the log is kept in the order of its times' text, and
    other forms that fromisoformat reads ('20261201T100000Z', a space for the T, fractions) sort out of place."""
    if not TIME_FORM.fullmatch(text):
        return None
    try:
        return _dt.datetime.fromisoformat(text[:-1] + "+00:00")
    except ValueError:
        return None


def identity(record: dict) -> tuple:
    """What makes two records the same run: merging a file twice adds nothing."""
    return tuple(record.get(key) for key in ("time", "problem", "mode", "submission_sha256"))


@dataclass
class Merge:
    """What a merge did: records read, added and already present, and each bad line as file:line."""
    read: int = 0
    added: int = 0
    present: int = 0
    bad: list[str] = field(default_factory=list)
    tables: list[Path] = field(default_factory=list)     # the table copies written
    builds: list[Path] = field(default_factory=list)     # where each built file of the runs now lies


@dataclass
class Run:
    """Records made on another machine and the files that came with them, read whole (a run is a few MB): its logs
    as (the name a bad line is shown under, the content), its .txt tables and its built files by file name. WHERE
    names it in a refusal ('--tables DIR', 'FILE.tgz:gs')."""
    logs: list[tuple[str, bytes]]
    where: str
    tables: dict[str, bytes] = field(default_factory=dict)
    builds: dict[str, bytes] = field(default_factory=dict)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not strict JSON")


def read_strict(path: Path) -> tuple[list[dict], list[str]]:
    """The contract records of a file; every other line as 'file:line: why'."""
    return parse_strict(path.read_bytes(), str(path))


def parse_strict(data: bytes, name: str) -> tuple[list[dict], list[str]]:
    """The contract records of DATA, a log's content; every other line as 'NAME:line: why'."""
    records, bad = [], []
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
        except UnicodeDecodeError:
            bad.append(f"{name}:{number}: not UTF-8")
            continue
        except ValueError as exc:      # JSONDecodeError, or NaN / Infinity
            bad.append(f"{name}:{number}: not strict JSON ({getattr(exc, 'msg', exc)})")
            continue
        why = record_problem(value)
        if why:
            bad.append(f"{name}:{number}: {why}")
        else:
            records.append(value)
    return records, bad


def require_sources(paths: list[Path]) -> None:
    """Each of PATHS, files to merge, is there and is not a folder (a PopkitError otherwise)."""
    for path in paths:
        if not path.exists():
            raise PopkitError(f"{path}: no such file")
        if path.is_dir():
            raise PopkitError(f"{path}: a folder, not a log file; nothing merged")


def merge_logs(sources: list[Path | str], target: Path | str = DEFAULT_LOG, tables: Path | str | None = None) -> Merge:
    """Add the valid records of SOURCES (performance.jsonl files made elsewhere) to TARGET, as one run (merge_runs).
    TABLES, the run's folder, also copies its .txt tables to device/ beside TARGET; the builds that ran
    (TABLES/builds/*.py, as gpu_session.sh leaves them) stay where they are and are named in the result, for
    promote."""
    paths = [Path(p) for p in sources]
    require_sources(paths)
    folder = Path(tables) if tables is not None else None
    run = Run([(str(path), path.read_bytes()) for path in paths], f"--tables {folder}",
              _tables_in(folder) if folder is not None else {})
    result = merge_runs([run], target)
    if folder is not None:
        result.builds = sorted(path for path in (folder / "builds").glob("*.py") if path.is_file())
    return result


def _tables_in(folder: Path) -> dict[str, bytes]:
    """The .txt tables of FOLDER (merge --tables) by name. A wrong folder (the one above the run's, say) copied
    nothing, without a word: a folder without a table is refused."""
    if not folder.is_dir():
        raise PopkitError(f"--tables {folder}: no such folder")
    tables = {path.name: path.read_bytes() for path in sorted(folder.glob("*.txt")) if path.is_file()}
    if not tables:
        raise PopkitError(f"--tables {folder}: no .txt table in it (a GPU session writes them beside its "
                          "performance.jsonl, e.g. 01-check-qr_v2.txt); nothing merged")
    return tables


def merge_runs(runs: list[Run], target: Path | str = DEFAULT_LOG, builds: Path | None = None) -> Merge:
    """Add the valid records of RUNS to TARGET, each run's tables to device/ beside it and its builds (if it has
    any: an archive's) to BUILDS.

    Records already in TARGET (same time, problem, mode and submission_sha256) are skipped; the new
    ones join the file in time order, also when they are older than records already there (folders
    merged out of order), because readers take the last record as the newest. The file is replaced
    in one step, so a reader never sees half a merge, and under its lock, so no writer's record is
    lost. Everything is checked before anything is written (PopkitError): logs with bad lines and no valid record
    at all, a table or build that would replace a file of other content (_placed) or whose folder cannot take it.
    Runs without a record leave TARGET as it was (one that did not exist is not made: the lock made it, empty)."""
    target = Path(target)
    refuse_non_log(target, "nothing merged")
    result, incoming, times = Merge(), [], []
    for run in runs:
        times.append([])
        for name, data in run.logs:
            records, bad = parse_strict(data, name)
            result.read += len(records)
            result.bad += bad
            incoming += records
            times[-1] += [r["time"] for r in records]
    if result.bad and not result.read:      # a corrupt or wrong file: say so rather than merge nothing quietly
        names = [name for run in runs for name, _ in run.logs]
        raise PopkitError(f"no valid record in {', '.join(names)}: {len(result.bad)} bad line(s), "
                          f"the first {result.bad[0]}; nothing merged")
    tables, built = _placed(runs, times, target.parent / "device", builds)
    copies = {dest: data for dest, data in {**tables, **built}.items() if not dest.exists()}   # identical: left
    if not incoming:        # nor a table (it needs a record to be named after): a log that was not there stays so
        return result
    # Asked before the log is replaced: a file where device/ or a build's folder should be failed after it, and the
    # error came with the records merged and the builds not.
    for dest in {dest.parent: dest for dest in copies}.values():
        if why := write_error(dest):
            raise PopkitError(f"{dest.parent}: cannot be written ({why}); nothing merged")
    with locked(target):        # held until the file is replaced: a record appended meanwhile would be lost
        # Read and parsed once, keeping only each line's keys: a log of hundreds of MB was read twice, as records.
        old = target.read_bytes().splitlines() if target.is_file() else []
        keys = [_line_keys(line) for line in old]
        seen = {key for _, key in keys if key is not None}
        new = []
        for record in incoming:
            if identity(record) in seen:
                result.present += 1
            else:
                seen.add(identity(record))
                new.append(record)
        if new:
            write_atomic(target, _in_time_order(old, [time for time, _ in keys], new))
        for dest, data in copies.items():
            write_atomic(dest, data)
    result.added, result.tables, result.builds = len(new), [dest for dest in tables if dest in copies], list(built)
    return result


def _placed(runs: list[Run], times: list[list[str]], device: Path, builds: Path | None) -> tuple[dict, dict]:
    """Where each run's tables and builds go, with their content: device/STAMP-NAME and BUILDS/STAMP/NAME, STAMP
    the run's first record time (TIMES, per run), so that the numbered tables of different runs never overwrite
    each other. A file of other content already there, or from another run of the merge, is refused."""
    tables, built = {}, {}
    for run, run_times in zip(runs, times):
        if not (run.tables or run.builds):
            continue
        if not run_times:        # named after the merge's own time, they were copied again at every merge
            raise PopkitError(f"{run.where}: no record in {', '.join(name for name, _ in run.logs)} names the run "
                              "(its tables are named after its first record's time); nothing merged")
        stamp = min(run_times).replace(":", "").replace("-", "")
        _place({device / f"{stamp}-{name}": data for name, data in run.tables.items()}, tables)
        _place({builds / stamp / name: data for name, data in run.builds.items()}, built)
    return tables, built


def _place(files: dict[Path, bytes], placed: dict[Path, bytes]) -> None:
    """Add FILES (destination: content) to PLACED, refusing one whose destination holds other content."""
    for dest, data in files.items():
        if placed.get(dest, data) != data:
            raise PopkitError(f"{dest}: two runs of this merge give it different content: merge them one at a time; "
                              "nothing merged")
        if dest.exists() and dest.read_bytes() != data:
            raise PopkitError(f"{dest} exists with other content: move it away; nothing merged")
        placed[dest] = data


def _line_keys(line: bytes) -> tuple[str | None, tuple | None]:
    """A log line's "time" (None unless a string) and identity; (None, None) for a line that is not a record."""
    try:
        value = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, None
    if not isinstance(value, dict):
        return None, None
    time, key = value["time"] if isinstance(value.get("time"), str) else None, identity(value)
    # A list or an object among its keys (a hand edit) matches no incoming record, which merge validated.
    return time, None if any(isinstance(v, (list, dict)) for v in key) else key


def _in_time_order(old_lines: list[bytes], old_times: list[str | None], incoming: list[dict]) -> bytes:
    """The log's lines (with their times) and the incoming records placed by time: a stable order, old lines
    before new ones of the same time, and a line without a time (a torn or bad line) kept right after the
    line it followed."""
    keyed, previous = [], ""
    for index, (line, time) in enumerate(zip(old_lines, old_times)):
        if not line.strip():
            continue
        previous = time or previous
        keyed.append((previous, 0, index, line))
    for index, record in enumerate(sorted(incoming, key=lambda r: r["time"])):
        keyed.append((record["time"], 1, index, json.dumps(record, allow_nan=False).encode()))
    keyed.sort(key=lambda item: item[:3])
    return b"".join(line + b"\n" for *_, line in keyed)
