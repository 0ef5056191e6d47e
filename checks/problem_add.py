"""`popkit problem add NAME --from DIR`: record a competition problem and scaffold its parts.

Writes checks/cases/NAME.yml from DIR/task.yml (case lists, leaderboard, GPUs, timeouts, ranking, the
runner's files list, the functions eval.py calls) and, where missing, parts/NAME/ with a route whose
custom_kernel calls the folder's own reference (correct from the first build; the user replaces it), or
stubs for a task whose eval.py calls other functions or whose reference.py has no ref_kernel, and a manifest whose packages are the third-party
modules the folder's templates and reference.py import (so the folder's own template builds unchanged).
The folder's path on this machine goes to .popkit/harness.yml, outside git. Everything is validated and rendered before the first write,
and a failure after the first write (or Ctrl-C) removes what this call created and puts the record and
.popkit/harness.yml back as they were, so nothing is left half-written.
"""
from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from checks import packages, problems, task_folder
from checks.preflight import BANNED
from popcorn.errors import Interrupted, ProblemError, parse_error_line
from popcorn.evidence.files import write_atomic

PARTS_DIR = task_folder.PROJECT_ROOT / "parts"
TASK_KEYS = ("leaderboard", "gpu_on_leaderboard", "gpus", "multi_gpu", "entry_points", "timeouts_s", "ranking",
             "harness", "tests", "benchmarks")

ROUTE_TEMPLATE = '''"""{name} routes: which algorithm runs a case.

The starting point calls the competition's reference implementation (reference.py, which the
runner places beside submission.py), so the first build is correct. Replace it with your own
route; put a torch model of each route in model.py so CPU tests can check the algorithm.
"""
from reference import ref_kernel as _reference


def custom_kernel(data):
    return _reference(data)
'''
STUB_ROUTE_TEMPLATE = '''"""{name} routes: the functions the folder's eval.py calls ({entry_list}).

The folder's reference has no ref_kernel to start from, so each one fails until you write it (the
folder's template shows its arguments); put a torch model of each route in model.py.
"""
'''
STUB = '''

def {entry}(*args):
    raise NotImplementedError("{entry} is not written yet: parts/{name}/route.py")
'''
MODEL_TEMPLATE = '''"""{name}: torch models of the routes (the executable specification CPU tests check).

Empty until the first route of our own: write the model of its algorithm here.
"""
'''
MANIFEST_TEMPLATE = '''# What the {name} submission is built from, in order.
problem: {name}
title: {title}
run_folder_imports: [{imports}]   # modules the runner places beside submission.py (task.yml's files)
packages: [{packages}]   # third-party modules the built file may import (the leaderboard's runner has them)
cuda: []
python:
  - {name}/model.py
  - {name}/route.py
'''


@dataclass
class AddResult:
    name: str
    record: Path
    leaderboard: str
    tests: int
    benchmarks: int
    entry_points: list[str]
    packages: list[str]         # third-party modules the folder's own files import
    no_ref_kernel: str | None   # why the folder's reference.py offers no ref_kernel for the route; None: it does
    created: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    replaced: bool = False


def record_for(folder: task_folder.TaskFolder, leaderboard: str | None) -> dict:
    """The task.yml facts a problem record holds, in a stable key order."""
    return {
        "leaderboard": folder.leaderboard if leaderboard is None else leaderboard,
        "gpu_on_leaderboard": folder.gpus[0],
        "gpus": folder.gpus,
        "multi_gpu": folder.task.get("multi_gpu") is True,
        "entry_points": folder.entry_points,
        "timeouts_s": folder.timeouts_s(),
        "ranking": str(folder.task.get("ranking_by", task_folder.DEFAULT_RANKING)),
        "harness": {"folder": folder.relative, "main": folder.main, "files": folder.files},
        "tests": [dict(case) for case in folder.task["tests"]],
        "benchmarks": [dict(case) for case in folder.task["benchmarks"]],
    }


def render_record(name: str, record: dict, previous: str | None, where: Path | None = None) -> str:
    """The record's YAML: the previous file's leading comments and non-task keys survive a --force;
    a previous file that is not YAML is refused rather than replaced (its other keys would be lost)."""
    kept, comments = {}, []
    if previous is not None:
        comments = list(itertools.takewhile(lambda line: line.startswith("#"), previous.splitlines()))
        try:
            old = yaml.safe_load(previous) or {}
        except yaml.YAMLError as exc:
            raise ProblemError(f"{where or name}: not readable YAML ({parse_error_line(exc)}), so --force cannot "
                               "keep its other keys: fix the file, or delete it and add the problem again") from None
        kept = {k: v for k, v in old.items() if k not in TASK_KEYS} if isinstance(old, dict) else {}
    header = comments or [f"# {name}: recorded by `popkit problem add` from the competition's task.yml.",
                          "# Case lists and facts only; the folder itself is found at run time (.popkit/harness.yml)."]
    body = yaml.safe_dump({**{k: v for k, v in record.items() if k not in ("tests", "benchmarks")}, **kept},
                          sort_keys=False, width=120)
    cases = "".join(f"{key}:\n" + "".join(f"- {_flow(case)}\n" for case in record[key])
                    for key in ("tests", "benchmarks"))
    return "\n".join(header) + "\n" + body + cases


def _flow(case: dict) -> str:
    return yaml.safe_dump(case, default_flow_style=True, sort_keys=False, width=10_000).strip()


def placed_modules(files: list[dict], main: str) -> list[str]:
    """The modules the runner places beside submission.py that a submission may import: every Python file of
    task.yml's files but the submission and eval.py (the folders' templates import `task`, the route `reference`)."""
    return sorted(Path(f["name"]).stem for f in files if f["name"].endswith(".py")
                  and f["source"] != task_folder.SUBMISSION_SOURCE and f["name"] != main)


def scaffold_files(name: str, leaderboard: str, source: str, entry_points: list[str],
                   imports: list[str], third_party: list[str], reference_stands_in: bool = True) -> dict[Path, str]:
    """parts/NAME/: a route that calls the folder's reference.ref_kernel where it can stand in (TaskFolder's
    reference_stands_in), or stubs for ENTRY_POINTS where eval.py calls other functions than custom_kernel or the
    reference has no ref_kernel (an import of it would fail the built file at import); the manifest lets the parts
    import IMPORTS, the modules the runner places, and THIRD_PARTY, its packages."""
    folder = PARTS_DIR / name
    # The title goes into the built file: a folder's path holding the banned word is left out of it. Quoted, as
    # a path may hold ': ' or ' #', which YAML reads otherwise.
    title = leaderboard if BANNED.search(source.encode()) else f"{leaderboard} (from {source})"
    values = {"name": name, "title": json.dumps(title, ensure_ascii=False), "entry_list": ", ".join(entry_points),
              "imports": ", ".join(imports), "packages": ", ".join(third_party)}
    route = (ROUTE_TEMPLATE.format(**values) if reference_stands_in else
             STUB_ROUTE_TEMPLATE.format(**values) + "".join(STUB.format(entry=e, **values) for e in entry_points))
    return {folder / "__init__.py": "",
            folder / "manifest.yml": MANIFEST_TEMPLATE.format(**values),
            folder / "model.py": MODEL_TEMPLATE.format(**values),
            folder / "route.py": route}


SHARED_PARTS = ("common",)      # parts/common/: the loader and device helpers every problem's manifest may list


def _refuse_shared_parts_folder(name: str) -> None:
    """parts/NAME/ must be a problem's own folder: not the shared parts/common/, nor, for a problem without a record,
    a folder of other files without a manifest (the scaffold's manifest, model.py and route.py would land among
    them). A recorded problem's folder that lost its manifest is its own: --force scaffolds what is missing."""
    part_folder = PARTS_DIR / name
    own = problems.record_path(name).is_file() or (part_folder / "manifest.yml").exists()
    others = sorted(p.name for p in part_folder.iterdir() if p.name not in ("__init__.py", "__pycache__")) \
        if part_folder.is_dir() and not own else []
    if name in SHARED_PARTS or others:
        what = "the parts every problem shares" if name in SHARED_PARTS else f"{', '.join(others[:3])} and no manifest"
        raise ProblemError(f"problem name {name!r}: parts/{name}/ holds {what}, not a problem's parts: choose another "
                           "name; nothing was added")


def _refuse_another_board(name: str, previous: str | None, board: str, path: Path) -> None:
    """A --force from a folder of another leaderboard than the record's: a wrong --from re-pointed the problem at
    that board and its cases without a word, its parts (written for the first board) kept. --leaderboard moves it.
    A record that is not YAML is left to render_record, which names it."""
    try:
        old = yaml.safe_load(previous) if previous is not None else None
    except yaml.YAMLError:
        return
    old_board = str(old.get("leaderboard", name)) if isinstance(old, dict) else board
    if old_board == board:
        return
    old_folder = (old.get("harness") or {}).get("folder") if isinstance(old.get("harness"), dict) else None
    raise ProblemError(f"problem {name} is recorded for leaderboard {old_board}" + (f" ({old_folder})" if old_folder
                       else "") + f", but {path} is leaderboard {board}'s: --force refreshes a problem from its own "
                       f"folder; check --from, or pass --leaderboard {board} to move {name} to that board (its parts "
                       "are kept); nothing was changed")


def _restore(path: Path, before: bytes | None) -> None:
    """PATH as it was (BEFORE: its bytes, None for no file), written only where it changed: on a read-only mount
    even the unlink of a missing file fails, and that error replaced the one that stopped the add."""
    if before is None:
        if path.exists():
            path.unlink()
    elif not path.is_file() or path.read_bytes() != before:
        write_atomic(path, before)


def add_problem(name: str, source: Path | str, force: bool = False, leaderboard: str | None = None) -> AddResult:
    """Record problem NAME from a competition folder and scaffold parts/NAME/ where it does not exist."""
    if not problems.NAME_PATTERN.match(name or ""):
        like = re.sub(r"[^a-z0-9_]", "_", (name or "").lower())     # fp8-mm, the folder's name, is fp8_mm
        hint = f" (such as {like})" if problems.NAME_PATTERN.match(like) else ""
        raise ProblemError(f"problem name {name!r}: use up to 64 lower-case letters, digits and _, starting with a "
                           f"letter{hint}")
    if BANNED.search(name.encode()):
        raise ProblemError(f"problem name {name!r}: it holds 'stream', which the leaderboard refuses anywhere in a "
                           "submission, and the built file names its problem: choose another name; nothing was added")
    _refuse_shared_parts_folder(name)
    folder = task_folder.read_task_folder(source)
    record_path = problems.record_path(name)
    exists = record_path.is_file()
    if exists and not force:
        raise ProblemError(f"problem {name!r} exists ({record_path}); pass --force to refresh its record "
                           "from the folder (its parts are kept)")
    if leaderboard is None and folder.leaderboard is None:
        unread = "".join(f"{why}, and it may list the folder: fix it; " for why in folder.index_errors)
        raise ProblemError(f"problem {name}: no collection index (problems/*.yaml) names the leaderboard of "
                           f"{folder.path}: pass --leaderboard NAME (as `popkit leaderboards` lists it); {unread}"
                           "nothing was added")
    record = record_for(folder, leaderboard)
    board_error = problems.leaderboard_error(record["leaderboard"])
    if board_error:
        fix = "; pass --leaderboard NAME" if leaderboard is None else ""   # the folder named it
        raise ProblemError(f"problem {name}: {board_error}{fix}; nothing was added")
    if BANNED.search(record["leaderboard"].encode()):
        raise ProblemError(f"problem {name}: leaderboard {record['leaderboard']!r} holds 'stream', which the "
                           "leaderboard refuses anywhere in a submission, and the built file's '#!POPCORN leaderboard' "
                           "line names it: no file could be submitted to it; nothing was added")
    for key in ("tests", "benchmarks"):
        for case in record[key]:
            problems.generic_spec(case)
    previous = record_path.read_text(encoding="utf-8") if exists else None
    if leaderboard is None:
        _refuse_another_board(name, previous, record["leaderboard"], folder.path)
    text = render_record(name, record, previous, record_path)
    third_party = packages.folder_packages(folder.own_sources, {Path(f["name"]).stem for f in folder.files})
    no_ref_kernel = folder.no_ref_kernel
    scaffold = scaffold_files(name, record["leaderboard"], folder.relative or str(folder.path), record["entry_points"],
                              placed_modules(folder.files, folder.main), third_party, folder.reference_stands_in)
    planned = {path: body for path, body in scaffold.items() if not path.exists()}
    result = AddResult(name, record_path, record["leaderboard"], len(record["tests"]), len(record["benchmarks"]),
                       record["entry_points"], third_party, no_ref_kernel,
                       kept=sorted(p for p in scaffold if p.exists()), replaced=exists)
    part_folder = PARTS_DIR / name
    made_folder = not part_folder.exists()
    config = task_folder.LOCAL_CONFIG
    made_config_folder = not config.parent.exists()
    config_before = config.read_bytes() if config.is_file() else None
    try:
        for path, body in planned.items():
            write_atomic(path, body)
            result.created.append(path)
        write_atomic(record_path, text)
        task_folder.remember_path(name, folder.path)
        problems.load_problem(name)     # what we wrote must load back
    except BaseException as exc:
        # Whatever stopped it (a full disk, a record that does not load back, Ctrl-C), nothing is left half-added
        # (Ctrl-C left some parts without the rest, or a record whose folder this machine does not know).
        for path in result.created:
            path.unlink(missing_ok=True)
        if made_folder and part_folder.is_dir() and not any(part_folder.iterdir()):
            part_folder.rmdir()
        _restore(record_path, None if previous is None else previous.encode("utf-8"))
        # The folder's line in .popkit/harness.yml goes too: it stayed after a record that did not load back.
        _restore(config, config_before)
        if made_config_folder and config.parent.is_dir() and not any(config.parent.iterdir()):
            config.parent.rmdir()
        outcome = "nothing was added" if previous is None else "its record is as it was"
        if isinstance(exc, OSError):
            raise ProblemError(f"{exc.filename or name}: cannot write ({exc.strerror or exc}); {outcome}") from None
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(f"interrupted: problem add {name} stopped; {outcome}") from None
        raise
    return result
