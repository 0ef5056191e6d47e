"""The harness backend: run a competition folder's own eval.py on a submission, the way the runner does.

For each run: a fresh folder assembled from task.yml's `files` (checks/task_folder.py), the pre-run
`python submission.py` (120 s, so a compile at import is cached; it also reports the GPU and torch it
saw), then `python eval.py MODE cases.txt` in a new process with POPCORN_FD (and POPCORN_SEED when
given, POPCORN_GPUS for a multi-GPU task) under the task's timeout for that mode. What eval.py writes to
the pipe (docs/problems.md: the `key: value` protocol) becomes popkit's per-case results: status and
message per test; runs, mean, err, best, worst per benchmark (ns per call in the protocol, us in popkit's
records).
"""
from __future__ import annotations

import ast
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from checks import task_folder
from checks.problems import Problem, format_spec, world_size
from popcorn.errors import ProblemError

PRERUN_TIMEOUT_S = 120
TIMEOUT_EXIT = 114                 # the runner's exit code for a run past its limit
EXIT_MEANINGS = {0: "ok", 111: "no pipe", 112: "validation failed", 113: "bad case file", TIMEOUT_EXIT: "timed out"}
TIMEOUT_KEYS = {"test": "test", "benchmark": "benchmark", "leaderboard": "ranked"}
STDERR_TAIL_LINES = 8
BASELINE_NAME = "reference.ref_kernel"
BASELINE_SOURCE = ('"""The competition folder\'s own reference as a submission (popkit bench --baseline)."""\n'
                   "from reference import ref_kernel as custom_kernel\n")
ENV_MARK = "POPKIT_ENV "
PRERUN_PROBE = f"""
import json, runpy, sys, time
start = time.perf_counter()
runpy.run_path("submission.py", run_name="__main__")
info = {{"compile_s": time.perf_counter() - start, "torch": None, "cuda": None, "gpu": "cpu"}}
torch = sys.modules.get("torch")       # a submission that never imported torch runs on the CPU
if torch is not None:
    info["torch"] = torch.__version__
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        info.update(compile_s=time.perf_counter() - start, cuda=torch.version.cuda,
                    gpu=torch.cuda.get_device_name())
print({ENV_MARK!r} + json.dumps(info))
"""


def remap_seed(seed: int, salt: int) -> int:
    """The grader's POPCORN_SEED remap: a + (a + b)(a + b + 1) / 2."""
    return seed + (seed + salt) * (seed + salt + 1) // 2


def case_seeds_honoured(problem: Problem) -> bool | None:
    """Whether the folder's eval.py applies POPCORN_SEED to each case's seed, read from its source (never run):
    True where it stores a case's "seed" (the newer evals' `test.args["seed"] = _combine(...)`), False where it
    reads POPCORN_SEED but names no "seed" key at all (the older evals only seed the global
    generator with it, so every case keeps its seed), None when the source does not tell (or cannot be read)."""
    main = problem.harness.get("main", "eval.py")
    try:
        folder = task_folder.harness_folder(problem)
        source = next((f["source"] for f in problem.harness.get("files") or [] if f["name"] == main), main)
        return seeds_honoured_in((folder / source).read_bytes())
    except (ProblemError, OSError):
        return None


def seeds_honoured_in(source: bytes | str) -> bool | None:
    """case_seeds_honoured on an eval.py's source."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    stores = [target for node in ast.walk(tree) if isinstance(node, ast.Assign) for target in node.targets]
    if any(isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "seed"
           for t in stores):
        return True
    keywords = any(isinstance(node, ast.keyword) and node.arg == "seed" for node in ast.walk(tree))
    if "POPCORN_SEED" in strings and "seed" not in strings and not keywords:
        return False
    return None


@dataclass
class EvalRun:
    """One eval.py run: what it wrote, how it ended, and what the pre-run saw."""
    mode: str
    specs: list[dict]
    lines: dict
    exit_code: int
    stderr: str
    timeout_s: float
    prerun_error: str | None = None
    env: dict = field(default_factory=dict)
    seed: int | None = None

    @property
    def kind(self) -> str:
        return "test" if self.mode == "test" else "benchmark"

    @property
    def failure(self) -> str | None:
        """Why the run as a whole went wrong, in one line (None when it ended normally)."""
        if self.exit_code == TIMEOUT_EXIT:
            return f"eval.py timed out after {self.timeout_s:g} s (the task's {self.mode} timeout)"
        error = self.lines.get("error")     # the whole run's error, written instead of any case (princeton's)
        if self.exit_code not in (0, 112):
            meaning = EXIT_MEANINGS.get(self.exit_code, "crashed")
            return f"eval.py exit code {self.exit_code} ({meaning}): {error or last_line(self.stderr)}"
        if error:
            return f"eval.py: {error}"
        if not self.lines:
            return f"eval.py wrote nothing to POPCORN_FD (exit code {self.exit_code}): {last_line(self.stderr)}"
        return None

    def stderr_tail(self) -> list[str]:
        return self.stderr.strip().splitlines()[-STDERR_TAIL_LINES:]

    def results(self) -> list[dict]:
        """One popkit result per spec we sent, in order; a case eval.py did not reach fails with the reason."""
        # A bound only, never looped over, and not made an integer: eval.py may write 1e400 or nan.
        count = _number(self.lines.get(f"{self.kind}-count")) or 0
        out = []
        for i, spec in enumerate(self.specs):
            shown = {**spec, "seed": remap_seed(spec["seed"], self.seed)} if self.seed and "seed" in spec else spec
            if i >= count or f"{self.kind}.{i}.spec" not in self.lines:
                reason = self.failure or "eval.py reported no result for this case"
                out.append({"spec": shown, "status": "fail", "error": reason, "residuals": {}})
                continue
            out.append({"spec": shown, "residuals": {}, **self._case(i)})
        return out

    def _case(self, i: int) -> dict:
        get = lambda key: self.lines.get(f"{self.kind}.{i}.{key}")   # noqa: E731
        status, error, message = get("status"), get("error"), get("message")
        if self.kind == "test":
            if status == "pass":
                return {"status": "pass", "error": None, "message": message}
            return {"status": "fail", "error": error or message or self.failure or "eval.py reported no status"}
        if status == "fail" or get("mean") is None:
            return {"status": "fail", "error": error or self.failure or "no timing reported"}
        ns = {key: _number(get(key)) for key in ("mean", "std", "err", "best", "worst")}
        return {"status": "pass", "error": None, "runs": int(_number(get("runs")) or 0),
                **{f"{key}_us": value / 1e3 for key, value in ns.items() if value is not None and key != "std"}}


def run_eval(problem: Problem, submission: Path, mode: str, specs: list[dict], device: str = "cuda",
             seed: int | None = None, progress: Callable[[str], None] = lambda text: None) -> EvalRun:
    """Assemble a run folder, pre-run the submission, run eval.py MODE on specs; failures are reported, not raised."""
    if mode not in TIMEOUT_KEYS:
        raise ProblemError(f"unknown eval.py mode {mode!r} (known: {', '.join(TIMEOUT_KEYS)})")
    timeout_s = float(problem.timeouts_s.get(TIMEOUT_KEYS[mode], task_folder.DEFAULT_TIMEOUT_S))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("POPCORN_SEED", None)
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    if problem.multi_gpu:
        env["POPCORN_GPUS"] = str(gpus_for(problem, specs, device))
    with run_folder(problem, submission) as workdir:
        progress(f"pre-run: python submission.py ({Path(submission).name})")
        prerun_error, info = prerun(workdir, env)
        (workdir / "cases.txt").write_text("".join(format_spec(s) + "\n" for s in specs))
        seed_note = f", POPCORN_SEED={seed}" if seed else ""
        progress(f"eval.py {mode} on {len(specs)} cases{seed_note} (limit {timeout_s:g} s)")
        run_env = {**env, "POPCORN_SEED": str(seed)} if seed else env
        lines, exit_code, stderr = _run_main(workdir, problem.harness.get("main", "eval.py"), mode, timeout_s,
                                             run_env, progress)
    return EvalRun(mode, specs, lines, exit_code, stderr, timeout_s, prerun_error, info, seed)


@contextlib.contextmanager
def run_folder(problem: Problem, submission: Path) -> Iterator[Path]:
    """A fresh folder assembled from task.yml's files, with SUBMISSION as submission.py; removed afterwards."""
    if not problem.harness.get("files"):
        raise ProblemError(f"{problem.name} has no harness files list: run `popkit problem add {problem.name} "
                           "--from DIR --force` to record it from task.yml")
    folder = task_folder.harness_folder(problem)
    with tempfile.TemporaryDirectory(prefix=f"popkit-{problem.name}-") as tmp:
        task_folder.assemble_run_folder(problem.harness["files"], folder, Path(submission), Path(tmp))
        yield Path(tmp)


def visible_gpus(device: str) -> int:
    """The GPUs torch sees here (none for --device cpu, whose runs hide them)."""
    if device == "cpu":
        return 0
    import torch
    return torch.cuda.device_count()


def gpus_for(problem: Problem, specs: list[dict], device: str) -> int:
    """A multi-GPU task's POPCORN_GPUS, as the runner sets it: the GPUs visible here, the size of eval.py's pool
    of rank processes. Fewer than a case's world_size would leave its ranks waiting for each other until the
    timeout, so that is refused before anything runs."""
    gpus = visible_gpus(device)
    ranks = world_size(specs)
    if ranks > gpus:
        raise ProblemError(f"{problem.name} runs each case on world_size GPUs: its cases need {ranks} and {gpus} "
                           "are visible here, so nothing ran; run it on a host with that many")
    return gpus


def prerun(workdir: Path, env: dict) -> tuple[str | None, dict]:
    """Run submission.py once as __main__, as the grader does; (why it failed or None, what it saw)."""
    try:
        done = subprocess.run([sys.executable, "-c", PRERUN_PROBE], cwd=workdir, capture_output=True, text=True,
                              timeout=PRERUN_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return f"timed out after {PRERUN_TIMEOUT_S} s", {}
    info = {}
    for line in done.stdout.splitlines():
        if line.startswith(ENV_MARK):
            info = json.loads(line[len(ENV_MARK):])
    if done.returncode != 0:
        return f"exit code {done.returncode}: {last_line(done.stderr)}", info
    return None, info


def _run_main(workdir: Path, main: str, mode: str, timeout_s: float, env: dict,
              progress: Callable[[str], None]) -> tuple[dict, int, str]:
    """`python MAIN MODE cases.txt` with POPCORN_FD; (its key: value lines, exit code, stderr).

    A thread reads the pipe while the process runs (a large report cannot fill the pipe and deadlock)
    and reports each finished case; past the limit the whole process group is killed and the exit
    code is the runner's 114. eval.py runs in a session of its own (so the kill reaches its children),
    which also keeps Ctrl-C from reaching it: an interrupted popkit kills the group before it stops."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([sys.executable, main, mode, "cases.txt"], cwd=workdir,
                            env={**env, "POPCORN_FD": str(write_fd)}, pass_fds=(write_fd,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    os.close(write_fd)
    lines: dict = {}
    reader = threading.Thread(target=_read_lines, args=(read_fd, lines, progress), daemon=True)
    reader.start()
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
        exit_code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        exit_code = TIMEOUT_EXIT
    except BaseException:
        with contextlib.suppress(ProcessLookupError):     # it may have ended as the interrupt came
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    reader.join(timeout=10)
    return lines, exit_code, stderr.decode(errors="replace")


def _read_lines(fd: int, lines: dict, progress: Callable[[str], None]) -> None:
    with os.fdopen(fd, "r", errors="replace") as pipe:
        for line in pipe:
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key, value = key.strip(), value.strip()
            lines[key] = value
            case, _, field_name = key.rpartition(".")
            if field_name in ("status", "mean"):
                mean = _number(value) if field_name == "mean" else None
                shown = f"{mean / 1e3:,.1f} us" if mean is not None else value
                progress(f"{case} ({lines.get(case + '.spec', '')}): {field_name} {shown}")


def _number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "no output on stderr"


def write_baseline(dest: Path) -> Path:
    """A submission file whose custom_kernel is the folder's reference.ref_kernel."""
    path = dest / "baseline_submission.py"
    path.write_text(BASELINE_SOURCE, encoding="utf-8")
    return path


def run_notes(runs: list[EvalRun]) -> list[str]:
    """One line per thing worth knowing about the runs: a failed pre-run, a crash or timeout with stderr."""
    notes = []
    for run in runs:
        where = f"eval.py {run.mode}" + (f" (POPCORN_SEED={run.seed})" if run.seed else "")
        if run.prerun_error:
            notes.append(f"{where}: pre-run of submission.py failed ({run.prerun_error}); eval.py ran anyway")
        if run.failure:
            notes.append(f"{where}: {run.failure}")
            notes += [f"  stderr: {line}" for line in run.stderr_tail()]
    return notes
