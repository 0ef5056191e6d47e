"""Run the newcomer path on every competition folder this host can run: problem add, build, check, bench.

Usage (repository root, on a GPU host):
  python3 scripts/folders_on_gpu.py [ROOT] [-o DIR] [-a FILE.tgz] [--folder GLOB ...] [--timeout STAGE=SECONDS ...]
                                    [--budget SECONDS]
  python3 scripts/folders_on_gpu.py [ROOT] [--folder GLOB ...] --plan [--host VENDOR:GPUS[:sm_XY]]
ROOT is a reference-kernels checkout (default: $POPKIT_REFERENCE_KERNELS, else vendor/reference-kernels). Every
folder under ROOT/problems that holds a task.yml (or those whose path under problems/ matches a --folder GLOB,
such as 'pmpp_v2/*') is taken in path order and either skipped, with the reason, where this host cannot run it:
- task.yml's lang is not py (popkit builds Python submissions);
- none of its GPUs (the collection index's, problems/*.yaml, else task.yml's) is of this host's kind: MI300, MI355X
  and MI300x8 are AMD, every other name NVIDIA (CPU: the toy folders of popkit's tests, which run anywhere);
- a multi-GPU task whose cases run on more GPUs (world_size) than this host has;
- a file the runner places beside the submission (eval.py, reference.py, utils.py ...) imports at its top level a
  package this Python lacks (checks/packages.py: nvidia's eval.py imports cutlass, amd_202602's reference.py aiter);
- those files use what needs a newer GPU than this one (NEEDS_CAPABILITY: NVFP4 tensors and tcgen05 need sm_100);
or run in a scratch copy of this tree (its files without .git, .venv, vendor/ and logs/; removed at the end, so
this tree is not changed), as a newcomer would, each verb under its own time limit (--timeout add=120 ...):
  popkit problem add NAME --from FOLDER   (NAME: the folder's leaderboard; one popkit knows is dropped from the
                                           copy's parts/ first and refreshed with --force, so the scaffold runs)
  popkit build NAME -o DIR/builds/NAME.py
  popkit check NAME                       (the folder's eval.py: --harness official for a native problem)
  popkit bench NAME --case FIRST          (the task's first benchmark only, on the scaffold: the reference)
A folder whose eval.py calls functions its reference cannot stand in for (princeton's) gets add and build only,
and is a skip after them: its scaffold is stubs. A stage that fails or runs out of time ends its folder; the next
folder runs. One line a folder (its path, each stage's seconds, the verdict). --budget SECONDS starts no folder
that would not finish in what is left (the longest folder so far as the guess) and cuts a stage at the budget.
DIR (default: a new folder under $TMPDIR or /tmp; one that holds a run is refused) gets performance.jsonl (each
check's and bench's record, the commit from POPKIT_COMMIT or this tree's git), builds/, out/NAME/STAGE.txt (each
verb's output), summary.txt (a table) and summary.json (folder, name, verdict: pass / fail / skip / timeout /
interrupted, the stage that failed, 'folder' where popkit refuses the folder as problem add would, its first error
line or the skip's reason, seconds, each stage), rewritten after each folder; -a FILE.tgz keeps one archive of DIR,
rewritten after each folder, for a transport that returns a few files or a call killed at its limit. Ctrl-C (or
SIGTERM, as a device tool's limit sends it) stops the verb running; its folder goes into the summary and the archive
as interrupted, and the run ends with exit 130. Else exit 0 when no folder failed or timed out, 1 when one did, 2 on
bad arguments.
--plan runs nothing and writes nothing: a line a folder says what a run would do with it on this host, or on the
host --host describes (e.g. nvidia:1:sm_90 for an H200, nvidia:8:sm_100 for eight B200s, amd:8 for MI300x8): plan a
GPU call from a machine without one (where every folder is a skip).
"""
from __future__ import annotations

import contextlib
import datetime
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's checks/, from any folder
from checks import packages, task_folder  # noqa: E402
from checks.native import native_checker  # noqa: E402
from checks.problems import format_spec, record_path, world_size  # noqa: E402
from popcorn.errors import PopkitError, ProblemError  # noqa: E402
from popcorn.evidence.files import folder_error, write_atomic, write_error  # noqa: E402
from popcorn.evidence.logs import NO_COMMIT, git_commit  # noqa: E402
from popcorn.evidence.tables import render_table  # noqa: E402
from scripts.command_line import argument_parser, run_main  # noqa: E402

SOURCE = task_folder.PROJECT_ROOT
STAGES = ("add", "build", "check", "bench")
TIMEOUTS_S = {"add": 120, "build": 120, "check": 300, "bench": 300}
# What the scratch copy leaves out at the top: git, environments, the competition's code, evidence, caches.
LEFT_OUT = {".git", ".venv", "vendor", "logs", ".popkit", ".pytest_cache", ".device", "report", ".whl", "build"}
# Text in the files the runner places that needs a newer NVIDIA GPU than sm_90: (its compute capability, what it is).
NEEDS_CAPABILITY = {"float4_e2m1fn_x2": ((10, 0), "NVFP4 tensors"), "tcgen05": ((10, 0), "tcgen05 instructions")}
STOP_GRACE_S = 15        # after Ctrl-C, popkit ends the eval.py it runs in a session of its own; then a kill


@dataclass(frozen=True)
class Host:
    vendor: str | None                    # "nvidia" or "amd"; None without a GPU
    gpus: int
    capability: tuple[int, int] | None    # an NVIDIA GPU's compute capability
    name: str

    def describe(self) -> str:
        if self.vendor is None:
            return "no GPU"
        arch = f", sm_{self.capability[0]}{self.capability[1]}" if self.capability else ""
        return f"{self.name} ({self.gpus} GPU{'s' if self.gpus != 1 else ''}{arch})"


def this_host() -> Host:
    """The GPUs this Python's torch sees."""
    import torch
    if not torch.cuda.is_available():
        return Host(None, 0, None, "no GPU")
    amd = torch.version.hip is not None
    return Host("amd" if amd else "nvidia", torch.cuda.device_count(),
                None if amd else torch.cuda.get_device_capability(), torch.cuda.get_device_name())


@dataclass
class Stage:
    stage: str                  # add, build, check or bench
    status: str                 # pass, fail, timeout or interrupted
    seconds: float
    error: str | None = None    # what went wrong, in one line
    output: str | None = None   # the verb's output, relative to DIR


@dataclass
class Result:
    folder: str                 # its path under problems/
    name: str | None            # the problem it was added as
    verdict: str                # pass, fail, skip, timeout or interrupted
    reason: str | None = None   # a skip's reason, or the failed stage's error line
    stage: str | None = None    # the stage that failed or ran out of time ('folder': popkit refuses the folder)
    seconds: float = 0.0
    stages: list[Stage] = field(default_factory=list)


# --- which folders, and which this host can run -------------------------------------------------------------------

def find_folders(root: Path, globs: list[str]) -> list[str]:
    """The problem folders under ROOT/problems (paths under it), those matching a glob when any is given."""
    problems = root / "problems"
    found = sorted(p.parent.relative_to(problems).as_posix() for p in problems.rglob("task.yml"))
    if not found:
        raise PopkitError(f"{problems}: no problem folder (a folder that holds task.yml)")
    unmatched = [g for g in globs if not fnmatch.filter(found, g)]
    if unmatched:
        raise PopkitError(f"--folder {unmatched[0]} matches no folder under {problems} (there: {', '.join(found)})")
    return [f for f in found if not globs or any(fnmatch.fnmatch(f, g) for g in globs)]


def gpu_vendor(gpu: str) -> str:
    """The vendor of a GPU name of the indexes: MI300, MI355X, MI300x8 are AMD; 'CPU' is none; the rest NVIDIA."""
    if gpu.upper() == "CPU":
        return "cpu"
    return "amd" if re.match(r"MI\d", gpu, re.IGNORECASE) else "nvidia"


def skip_reasons(folder: task_folder.TaskFolder, host: Host) -> list[str]:
    """Why this host cannot run FOLDER (none when it can), from the folder's own facts."""
    reasons = []
    vendors = {gpu_vendor(g) for g in folder.gpus}
    if "cpu" not in vendors and host.vendor not in vendors:
        reasons.append(f"made for {', '.join(folder.gpus)}: this host has {host.describe()}")
    ranks = world_size(folder.task["tests"] + folder.task["benchmarks"])
    if folder.task.get("multi_gpu") is True and ranks > host.gpus:
        reasons.append(f"a case runs on {ranks} GPUs (multi_gpu): this host has {host.gpus}")
    placed = task_folder.placed_sources(folder.files, folder.path)
    for name, absent in packages.absent_folder_packages(placed).items():
        reasons.append(f"its {name} imports {', '.join(absent)}, not installed here")
    if host.capability is not None:
        for name, path in placed.items():
            text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
            for marker, (needed, what) in NEEDS_CAPABILITY.items():
                if marker in text and host.capability < needed:
                    reasons.append(f"its {name} uses {what} ({marker}), which need sm_{needed[0]}{needed[1]}: "
                                   f"this GPU is sm_{host.capability[0]}{host.capability[1]}")
    return reasons


def task_lang(path: Path) -> str:
    """task.yml's lang ('py' where it says none, or cannot be read: then read_task_folder says why)."""
    try:
        return str((yaml.safe_load((path / "task.yml").read_text(encoding="utf-8")) or {}).get("lang", "py"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
        return "py"


def problem_name(board: str, taken: set[str]) -> str:
    """A problem name for leaderboard BOARD, as `problem add` takes it (amd-identity is amd_identity), not in TAKEN."""
    name = re.sub(r"[^a-z0-9_]", "_", board.lower())
    name = (name if re.match(r"[a-z]", name) else f"p_{name}")[:60]
    unique, n = name, 2
    while unique in taken:
        unique, n = f"{name}_{n}", n + 1
    return unique


# --- running one folder -------------------------------------------------------------------------------------------

Runner = Callable[[str, list[str], Path, dict, float, Path], Stage]


def run_verb(stage: str, argv: list[str], cwd: Path, env: dict, timeout_s: float, output: Path) -> Stage:
    """`python -m popcorn ARGV` in CWD, its stdout and stderr to OUTPUT, stopped after TIMEOUT_S seconds."""
    start = time.monotonic()
    with open(output, "wb") as sink:
        # A session of its own: the stop reaches the verb and its pre-run, and Ctrl-C here is ours to pass on.
        proc = subprocess.Popen([sys.executable, "-m", "popcorn", *argv], cwd=cwd, env=env, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop(proc)
            return Stage(stage, "timeout", time.monotonic() - start)
        except BaseException:
            stop(proc)
            raise
    seconds = time.monotonic() - start
    return Stage(stage, "pass", seconds) if code == 0 else \
        Stage(stage, "fail", seconds, f"exit {code}: {first_error(output.read_text(errors='replace'))}")


def stop(proc: subprocess.Popen) -> None:
    """End a verb: Ctrl-C first, on which popkit kills the eval.py it started in a session of its own (a kill of
    the verb would leave it running on the GPU), then a kill of what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def first_error(text: str) -> str:
    """The line that says what went wrong: popkit's 'error: ...', else the first naming an exception, else the first
    failed case's or verdict's line, else the last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for pattern in (r"^error: ", r"[A-Za-z]+(Error|Exception)\b", r"\b(fail|FAIL|timed out)\b"):
        hit = next((line for line in lines if re.search(pattern, line)), None)
        if hit:
            return hit[:300]
    return lines[-1][:300] if lines else "(no output)"


@dataclass
class Session:
    """What every folder's run shares: where things go, the limits, and how a verb runs."""
    root: Path
    out: Path
    scratch: Path
    env: dict
    timeouts_s: dict
    runner: Runner
    clock: Callable[[], float]
    deadline: float | None              # the clock's time at which the budget runs out
    report: Callable[[str], None]

    def left_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.clock()


def run_folder(session: Session, rel: str, folder: task_folder.TaskFolder, name: str) -> Result:
    """The newcomer path on one folder in the scratch copy, stopping at the first stage that does not pass."""
    built = session.out / "builds" / f"{name}.py"
    log = session.out / "performance.jsonl"
    force = record_path(name, session.scratch / "checks" / "cases").is_file()
    if force:       # a problem popkit knows: its own parts would be built instead of the newcomer's scaffold
        shutil.rmtree(session.scratch / "parts" / name, ignore_errors=True)
    # A native problem's check and bench run our own checker unless told to run the folder's eval.py.
    harness = ["--harness", "official"] if native_checker(name) is not None else []
    first = format_spec(folder.task["benchmarks"][0])
    verbs = {"add": ["problem", "add", name, "--from", str(folder.path)] + (["--force"] if force else [])
             + ([] if folder.leaderboard else ["--leaderboard", name]),
             "build": ["build", name, "-o", str(built)],
             "check": ["check", name, "--submission", str(built), "--log", str(log), *harness],
             "bench": ["bench", name, "--submission", str(built), "--log", str(log), "--case", first, *harness]}
    stubs = not folder.reference_stands_in
    result = Result(rel, name, "pass")
    for stage in STAGES[:2] if stubs else STAGES:
        limit, left = session.timeouts_s[stage], session.left_s()
        output = session.out / "out" / name / f"{stage}.txt"
        output.parent.mkdir(parents=True, exist_ok=True)
        start = session.clock()
        try:
            done = session.runner(stage, verbs[stage], session.scratch, session.env,
                                  limit if left is None else max(1.0, min(limit, left)), output)
        except KeyboardInterrupt:       # Ctrl-C or SIGTERM; the verb is stopped: the folder ends here, summed up
            done = Stage(stage, "interrupted", session.clock() - start, "stopped by Ctrl-C or SIGTERM")
        done.output = output.relative_to(session.out).as_posix()
        if done.status == "timeout":
            cut = left is not None and left < limit
            done.error = (f"stopped at the budget ({left:.0f} s were left)" if cut
                          else f"stopped after its limit of {limit:g} s (--timeout {stage}=SECONDS)")
        result.stages.append(done)
        session.report(f"{stage} {done.seconds:.1f} s{'' if done.status == 'pass' else ' ' + done.status}, ")
        if done.status != "pass":
            result.verdict = done.status         # fail, timeout or interrupted
            result.reason, result.stage = done.error, stage
            return result
    if stubs:
        result.verdict = "skip"
        result.reason = (f"add and build only: eval.py calls {', '.join(folder.entry_points)}, for which the folder's "
                         "reference has no ref_kernel to stand in: the scaffold is stubs that fail until written")
    return result


# --- the whole run ------------------------------------------------------------------------------------------------

def run_folders(session: Session, folders: list[str], host: Host, archive: Path | None = None) -> list[Result]:
    """Each folder skipped or run, a line each; the summary (and the archive) rewritten after each."""
    results, taken, longest = [], set(), 0.0
    for i, rel in enumerate(folders, 1):
        session.report(f"[{i:>{len(str(len(folders)))}}/{len(folders)}] {rel}: ")
        start = session.clock()
        decided = plan(session, rel, host, longest)
        if isinstance(decided, Result):
            result = decided
        else:
            name = problem_name(decided.leaderboard or Path(rel).name, taken)
            taken.add(name)
            result = run_folder(session, rel, decided, name)
            result.seconds = session.clock() - start
            longest = max(longest, result.seconds)
        results.append(result)
        why = f" ({result.reason})" if result.reason else ""
        session.report(f"{result.verdict}{why} in {result.seconds:.1f} s\n")
        write_summary(session, host, results, len(folders))
        if archive is not None:
            write_archive(session.out, archive)
        if result.verdict == "interrupted":     # summed up and archived first: a killed call brings it back
            raise KeyboardInterrupt
    return results


def decide(root: Path, rel: str, host: Host) -> Result | task_folder.TaskFolder:
    """The folder's facts when HOST can run it; else its verdict: a skip with its reasons, or a fail where popkit
    refuses the folder (what `problem add` would say)."""
    path = root / "problems" / rel
    try:
        folder = task_folder.read_task_folder(path)
    except ProblemError as exc:
        lang = task_lang(path)
        return Result(rel, None, "skip", str(exc)) if lang != "py" else Result(rel, None, "fail", str(exc), "folder")
    reasons = skip_reasons(folder, host)
    return Result(rel, None, "skip", "; ".join(reasons)) if reasons else folder


def plan(session: Session, rel: str, host: Host, longest: float) -> Result | task_folder.TaskFolder:
    """decide(), and a skip for a folder the budget's time left would not see finish."""
    decided = decide(session.root, rel, host)
    if isinstance(decided, Result):
        return decided
    left = session.left_s()
    if left is not None and left < longest:
        return Result(rel, None, "skip", f"not started: {max(left, 0):.0f} s of the budget left, and a folder took "
                                         f"{longest:.0f} s")
    return decided


def print_plan(root: Path, folders: list[str], host: Host) -> None:
    """--plan: what a run would do with each folder on HOST, a line each, and the counts; nothing runs."""
    print(f"plan for {host.describe()}: {len(folders)} folder{'s' * (len(folders) != 1)} of {root} (the packages "
          "installed are this Python's)")
    counts = {"run": 0, "add and build only": 0, "skip": 0, "fail": 0}
    for rel in folders:
        decided = decide(root, rel, host)
        if isinstance(decided, Result):
            what, why = decided.verdict, decided.reason
        elif decided.reference_stands_in:
            what, why = "run", "add, build, check, bench"
        else:
            what, why = "add and build only", "its reference cannot stand in for the functions eval.py calls"
        counts[what] += 1
        print(f"{rel}: {what} ({why})")
    print("; ".join(f"{count} {what}" for what, count in counts.items()))


def parse_host(spec: str) -> Host:
    """--host VENDOR:GPUS[:sm_XY]: nvidia needs its arch (sm_90, sm_100 ...), amd takes none."""
    parts = spec.split(":")
    vendor, gpus = parts[0].lower(), parts[1] if len(parts) > 1 else "1"
    arch = re.fullmatch(r"(?:sm_)?(\d+)(\d)", parts[2]) if len(parts) > 2 else None
    wanted = (vendor == "nvidia" and len(parts) == 3 and arch) or (vendor == "amd" and len(parts) <= 2)
    if not wanted or not gpus.isdigit() or int(gpus) < 1:
        raise PopkitError(f"--host {spec}: say VENDOR:GPUS[:sm_XY], e.g. nvidia:1:sm_90 (an H200), nvidia:8:sm_100, "
                          "amd:8")
    capability = (int(arch.group(1)), int(arch.group(2))) if arch else None
    return Host(vendor, int(gpus), capability, {"nvidia": "NVIDIA", "amd": "AMD"}[vendor])


def write_summary(session: Session, host: Host, results: list[Result], total: int) -> None:
    """DIR/summary.json and DIR/summary.txt for the folders done so far, each replaced whole."""
    counts = {v: sum(r.verdict == v for r in results) for v in ("pass", "fail", "timeout", "skip", "interrupted")}
    facts = {"host": asdict(host), "reference_kernels": str(session.root), "commit": session.env.get("POPKIT_COMMIT"),
             "timeouts_s": session.timeouts_s, "folders_total": total, "folders_done": len(results), **counts}
    rows = [{"folder": r.folder, "name": r.name, "verdict": r.verdict, "stage": r.stage, "reason": r.reason,
             "seconds": round(r.seconds, 1),
             "stages": [{**asdict(s), "seconds": round(s.seconds, 1)} for s in r.stages]} for r in results]
    write_atomic(session.out / "summary.json", json.dumps({**facts, "folders": rows}, indent=1) + "\n")
    table = render_table(["folder", "name", "verdict", "stage", "seconds", "reason / first error"],
                         [[r.folder, r.name, r.verdict, r.stage, f"{r.seconds:.1f}", r.reason] for r in results], {4})
    head = (f"host: {host.describe()}\nreference-kernels: {session.root}\ncommit: {facts['commit'] or 'unknown'}\n"
            f"folders: {len(results)} of {total} done: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    write_atomic(session.out / "summary.txt", f"{head}\n\n{table}\n")


def write_archive(out: Path, archive: Path) -> None:
    """DIR as one archive, replaced whole (written to a temporary name, then moved): a kill leaves the last one."""
    partial = archive.with_name(archive.name + ".partial")
    try:
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(out, arcname=out.name)
    except BaseException:       # Ctrl-C half-way left FILE.tgz.partial beside the archive
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, archive)


def scratch_copy(source: Path, dest: Path, leave_out: Path) -> None:
    """SOURCE's files as popkit runs them into DEST, without what LEFT_OUT names, caches and LEAVE_OUT (DIR)."""
    def ignored(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if n == "__pycache__" or n.endswith(".egg-info") or Path(folder, n) == leave_out
                or (Path(folder) == source and n in LEFT_OUT)}
    shutil.copytree(source, dest, ignore=ignored, symlinks=True)


def verb_env(root: Path, scratch: Path, commit: str | None) -> dict:
    """The verbs' environment: the scratch copy's popcorn first, ROOT for every folder (a POPKIT_HARNESS_NAME of
    this shell would name another folder), and the source's commit for the records."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPKIT_HARNESS_")}
    env.update(POPKIT_REFERENCE_KERNELS=str(root), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(scratch), os.environ.get("PYTHONPATH")])))
    if commit:
        env["POPKIT_COMMIT"] = commit
    return env


def parse_timeouts(given: list[str]) -> dict:
    """--timeout STAGE=SECONDS over the defaults (TIMEOUTS_S)."""
    timeouts = dict(TIMEOUTS_S)
    for item in given:
        stage, _, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = 0.0
        if stage not in timeouts or not seconds > 0:
            raise PopkitError(f"--timeout {item}: give STAGE=SECONDS, STAGE one of {', '.join(STAGES)}, SECONDS > 0")
        timeouts[stage] = seconds
    return timeouts


def main(argv: list[str] | None = None, runner: Runner = run_verb, host: Host | None = None,
         clock: Callable[[], float] = time.monotonic) -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("root", nargs="?", type=Path, metavar="ROOT", help="a reference-kernels checkout",
                        default=Path(os.environ.get("POPKIT_REFERENCE_KERNELS") or task_folder.VENDOR_ROOT))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    parser.add_argument("-o", dest="out", type=Path, metavar="DIR", help="where the records and summaries go",
                        default=Path(tempfile.gettempdir()) / f"popkit-folders-{stamp}")
    parser.add_argument("-a", dest="archive", type=Path, metavar="FILE.tgz",
                        help="DIR as one archive, rewritten after each folder")
    parser.add_argument("--folder", action="append", default=[], metavar="GLOB",
                        help="only the folders whose path under problems/ matches (repeatable)")
    defaults = ", ".join(f"{stage}={seconds}" for stage, seconds in TIMEOUTS_S.items())
    parser.add_argument("--timeout", action="append", default=[], metavar="STAGE=SECONDS",
                        help=f"a stage's time limit (repeatable; default {defaults})")
    parser.add_argument("--budget", type=float, metavar="SECONDS", help="the whole run's time")
    parser.add_argument("--plan", action="store_true", help="say what a run would do with each folder; run nothing")
    parser.add_argument("--host", metavar="VENDOR:GPUS[:sm_XY]",
                        help="with --plan: the host to plan for (default: this one), e.g. nvidia:1:sm_90")
    args = parser.parse_args(argv)
    root, out = args.root.expanduser().resolve(), args.out.expanduser().resolve()
    archive = args.archive.expanduser().resolve() if args.archive else None
    if not root.exists():         # the default's path alone did not say where it came from, nor what to do
        raise PopkitError(f"{root}: no such folder (ROOT, else $POPKIT_REFERENCE_KERNELS, else "
                          "vendor/reference-kernels): `git clone https://github.com/gpu-mode/reference-kernels` and "
                          "pass its path")
    if not (root / "problems").is_dir():
        raise PopkitError(f"{root}: not a reference-kernels checkout (no problems/ folder)")
    folders = find_folders(root, args.folder)
    if args.host is not None and not args.plan:
        raise PopkitError(f"--host {args.host}: only with --plan (a run runs on this host)")
    if args.plan:
        print_plan(root, folders, parse_host(args.host) if args.host is not None else host or this_host())
        return 0
    timeouts = parse_timeouts(args.timeout)
    if args.budget is not None and not args.budget > 0:
        raise PopkitError(f"--budget {args.budget:g}: a positive number of seconds")
    if archive is not None and not archive.name.endswith((".tgz", ".tar.gz")):
        raise PopkitError(f"-a {archive}: name the archive FILE.tgz (or .tar.gz)")
    if archive is not None and archive.is_relative_to(out):
        raise PopkitError(f"-a {archive}: put the archive outside DIR ({out}), which it holds")
    if (out / "summary.json").exists() or (out / "performance.jsonl").exists():
        raise PopkitError(f"{out} already holds a run (summary.json or performance.jsonl): give -o a new folder")
    # Each was a traceback from mkdir, or from the first archive once a folder had run.
    if out.exists() and not out.is_dir():
        raise PopkitError(f"-o {out}: a file; give -o a folder")
    why = None if out.exists() else folder_error(out)
    if why is not None:
        raise PopkitError(f"-o {out}: cannot make the folder ({why})")
    why = None if archive is None else write_error(archive)
    if why is not None:
        raise PopkitError(f"-a {archive}: cannot write it there ({why})")
    commit = git_commit(SOURCE)
    if commit is None:
        print(f"warning: {NO_COMMIT}: the records will name no commit", file=sys.stderr)
    host = host or this_host()
    out.mkdir(parents=True, exist_ok=True)
    if archive is not None:
        archive.parent.mkdir(parents=True, exist_ok=True)
    print(f"host: {host.describe()}; {len(folders)} folder{'s' * (len(folders) != 1)} of {root}; output in {out}",
          flush=True)
    start = clock()
    with tempfile.TemporaryDirectory(prefix="popkit-folders-scratch-") as scratch:
        copy = Path(scratch) / "popkit"
        scratch_copy(SOURCE, copy, out)
        session = Session(root, out, copy, verb_env(root, copy, commit), timeouts, runner, clock,
                          None if args.budget is None else start + args.budget,
                          lambda text: print(text, end="", flush=True))
        results = run_folders(session, folders, host, archive)
    print((out / "summary.txt").read_text(), end="")
    print(f"summary: {out / 'summary.txt'}, {out / 'summary.json'}" + (f"; archive: {archive}" if archive else ""))
    return 1 if any(r.verdict in ("fail", "timeout") for r in results) else 0


if __name__ == "__main__":
    # The device tool's limit ends a call with SIGTERM: as Ctrl-C, so the verb running is stopped, not orphaned.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    run_main(main, "folders_on_gpu.py")
