"""A competition problem folder (the gpu-mode/reference-kernels layout) and where it lives on this machine.

A folder holds task.yml (case lists, timeouts, ranking, the `files` the runner copies into its run
folder, whose sources are relative to the folder and often outside it: `../eval.py`,
`../../pmpp_v2/utils.py`, `@SUBMISSION@` for the submission), reference.py and friends. popkit never
copies the competition's code into the project: it records the facts of task.yml
(checks/problem_add.py) and runs the user's folder, found at run time by harness_folder().
"""
from __future__ import annotations

import ast
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from checks.preflight import defines
from checks.problems import ENTRY_POINT, Problem, generic_spec, timeout_error
from popcorn.errors import ProblemError, parse_error_line
from popcorn.evidence.files import write_atomic

PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOCAL_CONFIG = PROJECT_ROOT / ".popkit" / "harness.yml"   # git-ignored: paths on this machine
VENDOR_ROOT = PROJECT_ROOT / "vendor" / "reference-kernels"  # a conventional, git-ignored clone
SUBMISSION_SOURCE = "@SUBMISSION@"
DEFAULT_TIMEOUT_S = 180
DEFAULT_RANKING = "last"          # the runner's rule for a task.yml without ranking_by
RANKINGS = ("geom", "mean", "last")   # the server's ranking rules (the score of each, docs: popcorn-api.md)
TEMPLATE_NAMES = ("submission.py", "template.py")   # a folder's own template, where task.yml names none


@dataclass(frozen=True)
class TaskFolder:
    path: Path
    task: dict                  # task.yml as read
    leaderboard: str | None     # from the collection's index (problems/*.yaml); None where none names the folder
    gpus: list[str]
    relative: str | None        # the folder's path relative to its reference-kernels root, when it has one
    index_errors: tuple[str, ...] = ()   # the collection indexes that could not be read, each with why

    @property
    def files(self) -> list[dict]:
        return [{"name": str(f["name"]), "source": str(f["source"])} for f in self.task["files"]]

    @property
    def main(self) -> str:
        return str((self.task.get("config") or {}).get("main", "eval.py"))

    @property
    def entry_points(self) -> list[str]:
        """What eval.py calls in a submission: custom_kernel, unless the folder's Python template defines no
        custom_kernel but other public functions (princeton's cross_entropy_forward and _backward). A template
        that is missing or not Python (helion's has `def kernel(...) -> ...`) leaves custom_kernel."""
        templates = self.task.get("templates")
        named = templates.get("Python") if isinstance(templates, dict) else None
        for template in [self.path / str(named)] if named else [self.path / name for name in TEMPLATE_NAMES]:
            try:
                tree = ast.parse(template.read_bytes())
            except (OSError, SyntaxError, ValueError):
                continue
            functions = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and not node.name.startswith("_")]
            return functions if functions and ENTRY_POINT not in functions else [ENTRY_POINT]
        return [ENTRY_POINT]

    @property
    def no_ref_kernel(self) -> str | None:
        """Why the folder has no ref_kernel for the scaffold's route to import (no_ref_kernel); None: it has one."""
        return no_ref_kernel(self.path, self.files)

    @property
    def reference_stands_in(self) -> bool:
        """Whether the folder's ref_kernel can stand in for a submission: eval.py calls custom_kernel and reference.py
        defines ref_kernel. Then the scaffold's route calls it; else the scaffold is stubs that fail until written."""
        return self.entry_points == [ENTRY_POINT] and self.no_ref_kernel is None

    @property
    def own_sources(self) -> list[Path]:
        """The folder's own Python a submission starts from or calls: every template task.yml names (any
        language), its submission.py and template.py, and reference.py; only the files that are there."""
        templates = self.task.get("templates")
        named = [str(t) for t in templates.values()] if isinstance(templates, dict) else []
        paths = [(self.path / name).resolve() for name in [*named, *TEMPLATE_NAMES, "reference.py"]
                 if name.endswith(".py")]
        return list(dict.fromkeys(p for p in paths if p.is_file()))

    def timeouts_s(self) -> dict:
        return {key: math.ceil(self.task.get(f"{key}_timeout", DEFAULT_TIMEOUT_S))     # 0.5 s is not 0 s
                for key in ("test", "benchmark", "ranked")}


def read_task_folder(path: Path | str) -> TaskFolder:
    """Read and validate a problem folder; anything popkit cannot run raises ProblemError (one line)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ProblemError(f"{path}: no such folder")
    if path.is_file():
        folder = f": pass its folder, {path.parent}" if path.name == "task.yml" else ""
        raise ProblemError(f"{path}: a file, not a problem folder (the folder that holds task.yml){folder}")
    task_yml = path / "task.yml"
    if not path.is_dir() or not task_yml.is_file():
        raise ProblemError(f"{path}: not a problem folder (no task.yml; expected a reference-kernels "
                           "folder such as problems/pmpp_v2/grayscale_py)")
    try:
        task = yaml.safe_load(task_yml.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ProblemError(f"{task_yml}: unreadable ({parse_error_line(exc)})") from None
    if not isinstance(task, dict):
        raise ProblemError(f"{task_yml}: not a mapping of task keys")
    _validate(task, path, task_yml)
    path = path.resolve()
    root = reference_root(path)
    # No guess from task.yml's '# name:' comment or the folder's name: they name the board in few folders
    # ('3_moe' is amd-mixture-of-experts, '"identity"' amd-identity, 'single node all2all' amd-all2all).
    board, gpus, index_errors = collection_entry(path, root)
    own = task.get("gpus") or []
    gpus = gpus or [str(g) for g in ([own] if isinstance(own, str) else own)] or ["B200"]
    return TaskFolder(path, task, board, gpus, path.relative_to(root).as_posix() if root else None,
                      tuple(index_errors) if board is None else ())


def _validate(task: dict, path: Path, task_yml: Path) -> None:
    lang = str(task.get("lang", "py"))
    if lang != "py":
        raise ProblemError(f"{task_yml}: lang {lang!r}: popkit builds Python submissions only (lang: py)")
    for key in ("tests", "benchmarks"):
        cases = task.get(key)
        if not isinstance(cases, list) or not cases:
            raise ProblemError(f"{task_yml}: no {key} list (a problem needs tests and benchmarks)")
        odd = next((i for i, case in enumerate(cases) if not isinstance(case, dict)), None)
        if odd is not None:
            raise ProblemError(f"{task_yml}: {key} entry {odd + 1} is {cases[odd]!r}, not a case (a mapping of "
                               "the task's keys, such as {\"size\": 1024, \"seed\": 5})")
        for index, case in enumerate(cases):
            try:
                generic_spec(case)
            except ProblemError as exc:      # it named neither task.yml nor the entry
                why = str(exc).removeprefix(f"case spec {case}: ")
                raise ProblemError(f"{task_yml}: {key} entry {index + 1}: {why} (popkit writes each case as one "
                                   "'key: value; ...' line of eval.py's cases file, as the runner does)") from None
    _validate_facts(task, task_yml)
    files = task.get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) and "name" in f and "source" in f
                                              for f in files):
        raise ProblemError(f"{task_yml}: no 'files' list of {{name, source}} entries")
    if not any(f["source"] == SUBMISSION_SOURCE for f in files):
        raise ProblemError(f"{task_yml}: no file comes from {SUBMISSION_SOURCE}: popkit cannot place the submission")
    for f in files:
        if f["source"] != SUBMISSION_SOURCE and not (path / str(f["source"])).is_file():
            raise ProblemError(f"{task_yml}: file {f['name']} comes from {f['source']}, which is missing "
                               f"(looked at {(path / str(f['source'])).resolve()})")
    escaping = [str(f["name"]) for f in files if Path(str(f["name"])).is_absolute() or ".." in Path(str(f["name"])).parts]
    if escaping:
        raise ProblemError(f"{task_yml}: file name {escaping[0]!r} lies outside the run folder (a name is a path "
                           "inside the folder the runner assembles, such as utils.py)")
    main = str((task.get("config") or {}).get("main", "eval.py"))
    if main not in {str(f["name"]) for f in files}:
        raise ProblemError(f"{task_yml}: config.main {main!r} is not one of its files")


def _validate_facts(task: dict, task_yml: Path) -> None:
    """The task's scalar facts are of the kind the record keeps: config a mapping, each timeout a positive number
    of seconds, gpus a name or a list of names, multi_gpu true or false, ranking_by one of the runner's rules."""
    if task.get("config") is not None and not isinstance(task["config"], dict):
        raise ProblemError(f"{task_yml}: config must be a mapping (config: {{main: eval.py}}), not {task['config']!r}")
    for key in ("test", "benchmark", "ranked"):
        why = timeout_error(task.get(f"{key}_timeout", DEFAULT_TIMEOUT_S))
        if why:
            raise ProblemError(f"{task_yml}: {key}_timeout {why}")
    gpus = task.get("gpus")
    if gpus is not None and not isinstance(gpus, str) and not (
            isinstance(gpus, list) and all(isinstance(g, (str, int)) and not isinstance(g, bool) for g in gpus)):
        raise ProblemError(f"{task_yml}: gpus must be a GPU name or a list of them, not {gpus!r}")
    multi_gpu = task.get("multi_gpu")
    if multi_gpu is not None and not isinstance(multi_gpu, bool):    # "true" was recorded as false, without a word
        raise ProblemError(f"{task_yml}: multi_gpu must be true or false (a YAML boolean, unquoted), not {multi_gpu!r}")
    ranking = task.get("ranking_by", DEFAULT_RANKING)
    if ranking not in RANKINGS:
        raise ProblemError(f"{task_yml}: ranking_by {ranking!r} is not one of the runner's rules "
                           f"({', '.join(RANKINGS)})")


def no_ref_kernel(folder: Path, files: list[dict]) -> str | None:
    """Why the reference.py the runner places beside the submission (FILES: task.yml's {name, source}, sources
    relative to FOLDER) has no ref_kernel at its top level, or None when it has one. The file is parsed, never
    imported (an import may need the GPU); one that does not parse says so with its line, not that it defines none."""
    sources = [f["source"] for f in files if f["name"] == "reference.py"]
    if not sources:
        return "task.yml places no reference.py"
    try:
        tree = ast.parse((folder / sources[0]).read_bytes())
    except OSError as exc:
        return f"its reference.py cannot be read: {exc.strerror or exc}"
    except (SyntaxError, ValueError) as exc:      # a null byte: a ValueError on older Pythons, with no line
        line = f", line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        return f"its reference.py does not parse{line}: {getattr(exc, 'msg', exc)}"
    return None if defines(tree, "ref_kernel") else "its reference.py defines none"


def reference_root(path: Path) -> Path | None:
    """The reference-kernels root above a folder: the parent of the nearest 'problems' ancestor."""
    for parent in path.parents:
        if parent.name == "problems":
            return parent.parent
    return None


def collection_entry(path: Path, root: Path | None) -> tuple[str | None, list[str], list[str]]:
    """The leaderboard name and GPUs that a collection index (problems/NAME.yaml) gives the folder, and each index
    that could not be read, with why (one of them may list the folder: it was passed over without a word)."""
    if root is None:
        return None, [], []
    problems_dir = root / "problems"
    wanted = path.relative_to(problems_dir).as_posix()
    errors = []
    for index in sorted(problems_dir.glob("*.yaml")):
        try:
            entries = (yaml.safe_load(index.read_text(encoding="utf-8")) or {}).get("problems") or []
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            errors.append(f"{index} is unreadable ({parse_error_line(exc)})")
            continue
        except AttributeError:      # YAML, but not a mapping: not an index
            continue
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("directory") == wanted and entry.get("name"):
                return str(entry["name"]), [str(g) for g in entry.get("gpus") or []], errors
    return None, [], errors


def env_key(name: str) -> str:
    return "POPKIT_HARNESS_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def local_paths() -> dict[str, str]:
    if not LOCAL_CONFIG.is_file():
        return {}
    try:
        data = yaml.safe_load(LOCAL_CONFIG.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ProblemError(f"{LOCAL_CONFIG}: unreadable ({parse_error_line(exc)}): it only says where each added "
                           "problem's folder is on this machine; fix it, or delete it and run `popkit problem add "
                           "NAME --from DIR --force` for each harness problem") from None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def remember_path(name: str, folder: Path) -> None:
    """Record where NAME's folder lives on this machine (relative to the project when inside it)."""
    paths = local_paths()
    folder = folder.resolve()
    try:
        paths[name] = folder.relative_to(PROJECT_ROOT).as_posix()
    except ValueError:
        paths[name] = str(folder)
    write_atomic(LOCAL_CONFIG, "# Where each problem's competition folder lives on this machine (popkit problem add).\n"
                 + yaml.safe_dump(paths, sort_keys=True))     # a failed write leaves no .tmp file behind


def harness_folder(problem: Problem) -> Path:
    """Where a problem's competition folder is, in order: $POPKIT_HARNESS_<NAME>, $POPKIT_REFERENCE_KERNELS
    plus the recorded relative folder, .popkit/harness.yml, vendor/reference-kernels plus the relative folder.
    $POPKIT_HARNESS_<NAME> names the one folder to use: one without task.yml is an error, not passed over."""
    relative = problem.harness.get("folder")
    chosen = os.environ.get(env_key(problem.name))
    if chosen and not (Path(chosen) / "task.yml").is_file():
        # What the user asked for, so not passed over: a typo ran the folder recorded elsewhere without a word.
        raise ProblemError(f"{env_key(problem.name)}={chosen}: not a problem folder (no task.yml there); fix or "
                           "unset it")
    candidates = [chosen]
    if relative and os.environ.get("POPKIT_REFERENCE_KERNELS"):
        candidates.append(str(Path(os.environ["POPKIT_REFERENCE_KERNELS"]) / relative))
    local = local_paths().get(problem.name)
    candidates.append(str(PROJECT_ROOT / local) if local and not Path(local).is_absolute() else local)
    if relative:
        candidates.append(str(VENDOR_ROOT / relative))
    for candidate in filter(None, candidates):
        if (Path(candidate) / "task.yml").is_file():
            return Path(candidate)
    tried = ", ".join(filter(None, candidates)) or "nothing recorded"
    raise ProblemError(f"no competition folder for {problem.name} on this machine (tried: {tried}); set "
                       f"{env_key(problem.name)}=DIR or run `popkit problem add {problem.name} --from DIR --force`")


def placed_sources(files: list[dict], folder: Path) -> dict[str, Path]:
    """The Python files the runner places beside the submission (eval.py, reference.py ...): name -> source file."""
    return {str(f["name"]): folder / str(f["source"]) for f in files
            if f["source"] != SUBMISSION_SOURCE and str(f["name"]).endswith(".py")}


def assemble_run_folder(files: list[dict], folder: Path, submission: Path, dest: Path) -> None:
    """Copy the task's files into dest as the runner does: each source (relative to the folder) under its name."""
    for f in files:
        source = Path(submission) if f["source"] == SUBMISSION_SOURCE else folder / f["source"]
        if not source.is_file():
            raise ProblemError(f"{folder}: the task's file {f['name']} comes from {f['source']}, which is missing")
        target = dest / f["name"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
