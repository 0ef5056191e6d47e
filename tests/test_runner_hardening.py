"""Runs that hang or crash, and bad options (issue 11, items 4-7 and 10), on CPU with the native qr_v2 checker."""
from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from checks import problems, runner
from popcorn.cli import main
from popcorn.errors import Interrupted, PopkitError, ProblemError

SPEC = "batch: 2; n: 8; cond: 1; seed: 3; case: dense"
SLEEPY = '''

import time as _time

_model_kernel = custom_kernel


def custom_kernel(data):
    if data.shape[-1] == 13:
        _time.sleep(120)
    return _model_kernel(data)
'''


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def with_timeouts(monkeypatch, **timeouts_s):
    """qr_v2 with short task timeouts, as the runner sees it."""
    real = problems.load_problem

    def load(name, cases_dir=None):
        prob = real(name, cases_dir)
        return dataclasses.replace(prob, timeouts_s={**prob.timeouts_s, **timeouts_s})
    monkeypatch.setattr(runner, "load_problem", load)


def test_a_hanging_case_is_named_and_the_run_stops_there(built, tmp_path, monkeypatch):
    with_timeouts(monkeypatch, test=1)        # x CPU_TIMEOUT_FACTOR on the CPU path: 10 s, waited out in full
    sleepy = tmp_path / "sleepy.py"
    sleepy.write_text(built["qr_v2"].read_text() + SLEEPY)
    specs = [SPEC, "batch: 1; n: 13; cond: 1; seed: 4; case: dense", "batch: 1; n: 5; cond: 1; seed: 5; case: dense"]
    outcome = runner.check("qr_v2", sleepy, specs, device="cpu", log_path=None)
    statuses = [(c["status"], c["error"] or "") for c in outcome.record["cases"]]
    assert statuses[0] == ("pass", "")
    assert statuses[1][0] == "fail" and "1x13 dense" in statuses[1][1]
    assert "timed out after 10 s (the task's 1 s limit x 10 on the CPU)" in statuses[1][1]
    assert statuses[2][0] == "fail" and statuses[2][1].startswith("not run")


@pytest.mark.parametrize("run_it, limit_s", [
    (lambda sub: runner.check("qr_v2", sub, [SPEC], device="cpu", log_path=None), 240),
    (lambda sub: runner.check("qr_v2", sub, [SPEC], seeds=2, device="cpu", log_path=None), 3 * 240),
    (lambda sub: runner.check("qr_v2", sub, [SPEC], seeds=1, device="cpu", log_path=None, robust=True), 4 * 240),
    (lambda sub: runner.bench("qr_v2", sub, True, [SPEC], device="cpu", log_path=None), 2 * 480),
    (lambda sub: runner.diff("qr_v2", sub, sub, 5, [SPEC], device="cpu", log_path=None), 10 * 480),
], ids=["check", "seeds", "robust", "baseline", "diff"])
def test_the_tasks_limit_holds_once_per_pass_over_the_cases(tmp_path, monkeypatch, run_it, limit_s):
    # The grader's limit bounds one pass over the cases; every pass popkit adds (--seeds, --robust, a baseline, a
    # diff's two sides and rounds) ran in the same worker under that one limit: `diff --rounds 20` timed out.
    limits = []
    monkeypatch.setattr(runner, "run_worker", lambda job, progress, timeout_s, name: limits.append(timeout_s) or (
        {}, [{"spec": spec, "status": "pass", "error": None, "residuals": {}} for spec in job["specs"]]))
    sub = tmp_path / "s.py"
    sub.write_text("def custom_kernel(data):\n    return data\n")
    run_it(sub)
    assert limits == [limit_s * runner.CPU_TIMEOUT_FACTOR]


def test_a_submission_that_does_not_import_is_one_line_and_no_record(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def custom_kernel(data)\n    return data\n")
    log = tmp_path / "perf.jsonl"
    result = run("check", "qr_v2", "--submission", bad, "--case", SPEC, "--device", "cpu", "--log", log)
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "bad.py" in errors[0] and "SyntaxError" in errors[0]
    assert "Traceback" not in result.output and "on None" not in result.output
    assert not log.exists()


@pytest.mark.parametrize("body, why", [("raise RuntimeError('boom')", "RuntimeError: boom"),
                                       ("import sys\nsys.exit(0)", "SystemExit: 0")])
def test_an_incumbent_that_raises_or_exits_at_import_is_named_alone(tmp_path, body, why):
    # The line named both files ('a.py, b.py: RuntimeError: boom'), and one that exited read 'worker died (exit
    # code 0)'.
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text("def custom_kernel(data):\n    return data\n")
    bad.write_text(body + "\n\n\ndef custom_kernel(data):\n    return data\n")
    with pytest.raises(PopkitError) as error:
        runner.diff("qr_v2", good, bad, 3, [SPEC], device="cpu", log_path=None)
    assert str(error.value) == f"{bad.resolve()} (the incumbent): it fails at import: {why}"


@pytest.mark.parametrize("verb", ["check", "bench", "diff"])
@pytest.mark.parametrize("path", ["parts/qr_v2/route.py", "parts/qr_v2/model.py", "README.md"])
def test_a_part_or_another_file_is_refused_as_a_submission_in_one_line(built, tmp_path, verb, path):
    # A part ran as if it were a submission (route.py even defines custom_kernel, but without the parts it
    # inlines); README.md reached the worker.
    log = tmp_path / "perf.jsonl"
    result = run(verb, "qr_v2", "--submission", runner.logs.ROOT / path, "--case", SPEC, "--device", "cpu",
                 "--log", log)
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("error: ") and path in line and "not a submission" in line
    assert not log.exists()


def test_a_part_is_refused_as_the_incumbent(built, tmp_path):
    result = run("diff", "qr_v2", "--submission", built["qr_v2"],
                 "--incumbent", runner.logs.ROOT / "parts/qr_v2/route.py", "--case", SPEC, "--device", "cpu",
                 "--log", tmp_path / "perf.jsonl")
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert "parts/qr_v2/route.py" in line and "not a submission" in line


def test_a_hand_written_submission_without_header_still_runs(tmp_path):
    mine = tmp_path / "submission.py"
    mine.write_text("import torch\n\n\ndef custom_kernel(data):\n    return torch.linalg.qr(data[0] if "
                    "isinstance(data, tuple) else data)\n")
    outcome = runner.check("qr_v2", mine, [SPEC], device="cpu", log_path=None)
    assert len(outcome.record["cases"]) == 1


CRASHES = {"segfault": ("import ctypes\nctypes.string_at(0)", "worker died (killed by SIGSEGV)"),
           "exit": ("import os\nos._exit(3)", "worker died (exit code 3)")}


@pytest.mark.parametrize("crash", sorted(CRASHES))
def test_a_worker_that_dies_in_a_case_says_how(tmp_path, crash):
    # Both read "worker died (exit code unknown)": the code was read before the process had ended.
    body, why = CRASHES[crash]
    path = tmp_path / "crash.py"
    path.write_text("import torch\n\n\ndef custom_kernel(data):\n" + "".join(f"    {line}\n" for line in
                                                                           body.splitlines()))
    outcome = runner.check("qr_v2", path, [SPEC], device="cpu", log_path=None)
    assert [(c["status"], c["error"]) for c in outcome.record["cases"]] == [("fail", why)]


@pytest.mark.parametrize("code, text", [(None, "exit code unknown"), (0, "exit code 0"), (-6, "killed by SIGABRT"),
                                        (-200, "killed by signal 200")])
def test_exit_text_names_the_signal(code, text):
    assert runner.exit_text(code) == text


@pytest.mark.parametrize("device, message", [("gpu", "use cuda, cuda:N or cpu"), ("cuda:x", "use cuda")])
def test_device_is_validated(built, tmp_path, device, message):
    result = run("check", "qr_v2", "--submission", built["qr_v2"], "--case", SPEC, "--device", device,
                 "--log", tmp_path / "l")
    assert result.exit_code == 1 and message in result.output


def test_cuda_without_a_gpu_is_one_line(built, tmp_path, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(PopkitError, match="no CUDA GPU is visible"):
        runner.check("qr_v2", built["qr_v2"], [SPEC], device="cuda", log_path=None)


def test_negative_seeds_and_unknown_families_are_refused_up_front(built, tmp_path):
    result = run("check", "qr_v2", "--submission", built["qr_v2"], "--seeds", -1, "--device", "cpu")
    assert result.exit_code == 1 and "--seeds -1" in result.output
    result = run("check", "qr_v2", "--submission", built["qr_v2"], "--case",
                 "batch: 2; n: 8; cond: 1; seed: 3; case: bogus", "--device", "cpu")
    assert result.exit_code == 1 and "unknown qr_v2 family 'bogus'" in result.output


def test_cases_dropped_by_the_cpu_size_limit_say_why(built):
    with pytest.raises(PopkitError, match="no cases to run: no GPU: running the CPU path on 0 of 1"):
        runner.check("qr_v2", built["qr_v2"], ["batch: 640; n: 4096; cond: 1; seed: 3; case: dense"],
                     device="cpu", log_path=None)


@pytest.mark.parametrize("verb", ["bench", "diff"])
def test_native_timing_on_cpu_needs_chosen_cases(built, tmp_path, verb):
    extra = ["--incumbent", built["qr_v2"]] if verb == "diff" else []
    result = run(verb, "qr_v2", "--submission", built["qr_v2"], *extra, "--device", "cpu", "--log", tmp_path / "l")
    assert result.exit_code == 1 and "pass --case SPEC" in result.output and not (tmp_path / "l").exists()


def test_check_builds_the_problem_when_submission_py_is_another_problems(tmp_path, monkeypatch):
    import build
    from popcorn.cli import loop as cli_loop
    other = tmp_path / "submission.py"
    build.build("qr_v2", other)
    monkeypatch.setattr(cli_loop, "DEFAULT_SUBMISSION", other)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    result = run("check", "eigh", "--case", SPEC, "--device", "cpu",
                 "--log", tmp_path / "l")
    assert result.exit_code == 0, result.output
    assert "is not built for eigh: built parts/eigh to" in result.output
    assert [p.name for p in (tmp_path / "popkit-builds").glob("*/eigh.py")] == ["eigh.py"]


def test_two_checkouts_build_into_folders_of_their_own():
    # Both wrote /tmp/popkit-builds/NAME.py: a project and its snapshot on one GPU host took each other's build.
    from popcorn.cli.loop import scratch_build_path
    one, other = scratch_build_path("qr_v2", Path("/work/a")), scratch_build_path("qr_v2", Path("/work/b"))
    assert one != other and one.name == other.name == "qr_v2.py"
    assert scratch_build_path("qr_v2", Path("/work/a")) == one            # the same checkout: the same file


def test_check_says_when_submission_py_is_older_than_the_parts(tmp_path, monkeypatch):
    # A part edited after `popkit build` was checked as the old build, without a word.
    import build
    from popcorn.cli import loop as cli_loop
    built = tmp_path / "submission.py"
    build.build("qr_v2", built)
    monkeypatch.setattr(cli_loop, "DEFAULT_SUBMISSION", built)
    result = run("check", "qr_v2", "--case", SPEC, "--device", "cpu", "--log", tmp_path / "l")
    assert result.exit_code == 0 and "older than" not in result.output, result.output
    text = built.read_text()
    part = "qr_v2/route.py"
    old_hash = hashlib.sha256((build.PARTS / part).read_bytes()).hexdigest()
    built.write_text(text.replace(f"# part {part} sha256 {old_hash}", f"# part {part} sha256 {'0' * 64}"))
    result = run("check", "qr_v2", "--case", SPEC, "--device", "cpu", "--log", tmp_path / "l")
    assert result.exit_code == 0, result.output
    assert (f"warning: {built.name} is older than parts/qr_v2 (changed since its build: {part}): this run is "
            "of the file as built; `popkit build qr_v2` brings the changes in") in result.output.splitlines()


def test_check_of_a_built_submission_py_runs_while_the_manifest_is_broken(tmp_path, monkeypatch):
    import build
    from popcorn.cli import loop as cli_loop
    built = tmp_path / "submission.py"
    build.build("qr_v2", built)
    monkeypatch.setattr(cli_loop, "DEFAULT_SUBMISSION", built)
    parts = tmp_path / "parts"
    shutil.copytree(build.PARTS, parts)
    (parts / "qr_v2" / "manifest.yml").write_text("cuda: [\n")
    monkeypatch.setattr(build, "PARTS", parts)
    result = run("check", "qr_v2", "--case", SPEC, "--device", "cpu", "--log", tmp_path / "l")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith("warning: parts/qr_v2 cannot be read now (")
    assert result.output.splitlines()[0].endswith("): this run is of submission.py as built")


@pytest.mark.parametrize("harness", ["official", "both"])
def test_the_folders_eval_on_the_cpu_is_refused_before_the_run(built, tmp_path, monkeypatch, harness):
    # --harness both ran our checker, then eval.py, which crashed on the CPU ('Torch not compiled with CUDA
    # enabled'): every case failed and the record was logged; --harness official ran eval.py to the same end.
    monkeypatch.setattr(runner, "run_worker", lambda *args, **kwargs: pytest.fail("the run started"))
    monkeypatch.setattr(runner.official, "run_eval", lambda *args, **kwargs: pytest.fail("eval.py ran"))
    log = tmp_path / "l"
    result = run("check", "qr_v2", "--submission", built["qr_v2"], "--case", SPEC, "--device", "cpu",
                 "--harness", harness, "--log", log)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [f"error: --harness {harness} runs the competition folder's eval.py, which "
                                          "makes its inputs on the leaderboard's GPU (B200): nothing ran on the CPU; "
                                          "run it on a GPU host, or --harness native here"]
    with pytest.raises(PopkitError, match="nothing ran on the CPU"):
        runner.check("qr_v2", built["qr_v2"], [SPEC], device="cpu", log_path=None, harness=harness)
    assert not log.exists()


@pytest.mark.parametrize("harness, message", [
    # It named --harness official, an option the user had not given.
    ([], "--incumbent reference runs the competition folder's eval.py, which makes its inputs on the leaderboard's "
         "GPU (B200): nothing ran on the CPU; run it on a GPU host"),
    # Our checker's worker ran the candidate, then failed at the incumbent's `from reference import ref_kernel`.
    (["--harness", "native"], "--incumbent reference is the competition folder's ref_kernel, which only its eval.py "
                              "runs, not --harness native: leave --harness out, or pass --harness official"),
])
def test_diff_against_the_reference_is_refused_where_eval_py_cannot_run_it(built, tmp_path, monkeypatch, harness,
                                                                            message):
    monkeypatch.setattr(runner, "run_worker", lambda *args, **kwargs: pytest.fail("the run started"))
    log = tmp_path / "l"
    result = run("diff", "qr_v2", "--submission", built["qr_v2"], "--incumbent", "reference", "--case", SPEC,
                 "--device", "cpu", *harness, "--log", log)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [f"error: {message}"]
    with pytest.raises(PopkitError, match="^" + re.escape(message)):
        runner.diff("qr_v2", built["qr_v2"], "reference", custom=[SPEC], device="cpu", log_path=None,
                    harness=harness[-1] if harness else None)
    assert not log.exists()


def test_harness_both_looks_for_the_folder_before_our_checker_runs(built, tmp_path, monkeypatch):
    # It ran every case through our checker, then failed on 'no competition folder', the work thrown away.
    from checks import task_folder
    real = problems.load_problem
    monkeypatch.setattr(runner, "load_problem", lambda name, cases_dir=None: dataclasses.replace(
        real(name, cases_dir), gpus=["CPU"]))               # a board that runs on the CPU, so eval.py may run here
    monkeypatch.setattr(task_folder, "LOCAL_CONFIG", tmp_path / "harness.yml")
    monkeypatch.setattr(task_folder, "VENDOR_ROOT", tmp_path / "no-vendor")
    for key in ("POPKIT_REFERENCE_KERNELS", task_folder.env_key("qr_v2")):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(runner, "run_worker", lambda *args, **kwargs: pytest.fail("the run started"))
    with pytest.raises(ProblemError, match="no competition folder for qr_v2 on this machine"):
        runner.check("qr_v2", built["qr_v2"], [SPEC], device="cpu", log_path=None, harness="both")


@pytest.mark.parametrize("verb", ["check", "bench", "diff"])
def test_a_log_that_cannot_be_written_is_refused_before_the_run(built, tmp_path, monkeypatch, verb):
    # It ran every case, then lost the record and the table to one 'No such file or directory' line.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    log = blocker / "logs" / "performance.jsonl"
    monkeypatch.setattr(runner, "run_worker", lambda *args, **kwargs: pytest.fail("the run started"))
    extra = ["--incumbent", built["qr_v2"]] if verb == "diff" else []
    result = run(verb, "qr_v2", "--submission", built["qr_v2"], *extra, "--case", SPEC, "--device", "cpu",
                 "--log", log)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [f"error: {log}: the evidence log cannot be written "
                                          f"(Not a directory): nothing was run"]


def test_a_log_in_a_missing_folder_makes_the_folder_only_with_its_record(tmp_path):
    # Asking whether the log could be written made its folder: a verb refused after that (an unknown problem, a
    # wrong option) left an empty folder behind.
    from popcorn.evidence import files, logs
    log = tmp_path / "new" / "logs" / "perf.jsonl"
    result = run("check", "no_such_problem", "--device", "cpu", "--log", log)
    assert result.exit_code == 1 and "no_such_problem" in result.output, result.output
    logs.require_appendable(log)
    assert files.write_error(log) is None
    assert not (tmp_path / "new").exists() and list(tmp_path.iterdir()) == []       # no probe left either
    logs.append_record(logs.new_record("qr_v2", "check"), log)
    assert len(logs.read_records(log)[0]) == 1


def test_a_log_the_system_will_not_create_is_refused_before_the_run(built, tmp_path, monkeypatch):
    # As root os.access says yes to any folder, also on a read-only mount or in /sys: every case ran, then
    # the record was lost in one 'Permission denied' line.
    log = tmp_path / "perf.jsonl"
    real_open = os.open

    def refusing_open(path, flags, *args):
        if str(path) == str(log) and flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)
    monkeypatch.setattr(os, "open", refusing_open)
    monkeypatch.setattr(runner, "run_worker", lambda *args, **kwargs: pytest.fail("the run started"))
    result = run("check", "qr_v2", "--submission", built["qr_v2"], "--case", SPEC, "--device", "cpu", "--log", log)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [f"error: {log}: the evidence log cannot be written "
                                          f"(Permission denied): nothing was run"]
    assert not log.exists()


def test_a_log_that_is_writable_is_left_as_it_was_by_the_test_before_the_run(tmp_path):
    from popcorn.evidence import logs
    logs.require_appendable(tmp_path / "new.jsonl")
    assert not (tmp_path / "new.jsonl").exists()
    (tmp_path / "old.jsonl").write_text('{"time": "x", "mode": "bench"}\n')
    logs.require_appendable(tmp_path / "old.jsonl")
    assert (tmp_path / "old.jsonl").read_text() == '{"time": "x", "mode": "bench"}\n'


def test_a_record_that_cannot_be_appended_keeps_the_table_and_names_the_log(built, tmp_path, monkeypatch):
    # A full disk (/dev/full as --log) ended the run in 'error: : No space left on device', without its table.
    from popcorn.evidence import logs

    def disk_full(record, path):
        raise OSError(28, "No space left on device")      # os.write's error names no file
    monkeypatch.setattr(logs, "append_record", disk_full)
    log = tmp_path / "perf.jsonl"
    result = run("check", "qr_v2", "--submission", built["qr_v2"], "--case", SPEC, "--device", "cpu", "--log", log)
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert "PASS" in lines and lines.index("PASS") == len(lines) - 2
    assert lines[-1] == (f"error: {log}: the record could not be appended (No space left on device): "
                         "the run above is not logged")


@pytest.mark.parametrize("verb", ["check", "bench", "diff"])
@pytest.mark.parametrize("name, content, why", [
    ("submission.py", None, "its name ends in .py"),
    ("kernel.cu", "", "its name ends in .cu"),
    ("notes", "# not a log\nprint('hello')\n", "none of its 2 non-blank line(s) is a JSON record"),
    # promote's history: JSON records, none of them a run
    ("history.jsonl", '{"time": "2026-12-01T10:00:00Z", "problem": "qr_v2", "sha256": "ab", "evidence": {}, '
                      '"forced": true}\n\n{"time": "2026-12-01T11:00:00Z", "mode": "promote"}\n',
     "none of its 2 record(s) is a check, bench, diff or leaderboard run (no such 'mode')"),
])
def test_a_log_that_is_clearly_not_a_log_is_refused_before_the_run(built, tmp_path, monkeypatch, verb, name,
                                                                     content, why):
    # `check --log submission.py` appended a JSON record to the submission.
    log = tmp_path / name
    if content is not None:
        log.write_text(content)
    monkeypatch.setattr(runner, "run_worker", lambda *args, **kwargs: pytest.fail("the run started"))
    extra = ["--incumbent", built["qr_v2"]] if verb == "diff" else []
    result = run(verb, "qr_v2", "--submission", built["qr_v2"], *extra, "--case", SPEC, "--device", "cpu",
                 "--log", log)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        f"error: {log}: not an evidence log ({why}; a log holds one JSON record per line, like "
        f"logs/performance.jsonl): nothing was run"]
    if content is None:
        assert not log.exists()
    else:
        assert log.read_text() == content


def test_a_wrong_log_is_refused_before_the_problem_is_built(tmp_path, monkeypatch):
    # The default submission is another problem's, so check would build parts/eigh first.
    from popcorn.cli import loop as cli_loop
    monkeypatch.setattr(cli_loop, "DEFAULT_SUBMISSION", tmp_path / "absent.py")
    monkeypatch.setattr("build.build", lambda *args, **kwargs: pytest.fail("built before refusing the log"))
    result = run("check", "eigh", "--case", SPEC, "--device", "cpu", "--log", tmp_path / "route.py")
    assert result.exit_code == 1 and "not an evidence log" in result.output, result.output


@pytest.mark.parametrize("lines", [[], ["", "  "], ['{"time": "x", "mode": "check"}'],
                                   ["torn line", '{"problem": "qr_v2"}', '{"mode": "leaderboard"}']])
def test_a_log_new_empty_or_with_a_record_is_a_log(tmp_path, lines):
    from popcorn.evidence import logs
    log = tmp_path / "perf.jsonl"
    if lines:
        log.write_text("\n".join(lines) + "\n")
    assert logs.not_a_log(log) is None
    logs.require_appendable(log)
    assert logs.not_a_log(tmp_path / "l") is None


# ---- Ctrl-C -------------------------------------------------------------------------------------

def _sigint_ignored(pid: int) -> bool | None:
    """Whether the process ignores SIGINT (Linux's /proc); None where that cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    mask = int(next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
    return bool(mask & (1 << (signal.SIGINT - 1)))


def test_ctrl_c_during_check_is_exit_130_one_line_no_record_and_no_worker_left(built, tmp_path, monkeypatch):
    # Click printed "Aborted!" and exited 1.
    from popcorn.cli import loop as cli_loop
    seen = {}

    def interrupt_at_the_first_case(text):
        if text.startswith("case 1/"):
            (worker,) = multiprocessing.active_children()
            seen["ignores_sigint"] = _sigint_ignored(worker.pid)   # Ctrl-C reaches popkit only, which kills it
            raise KeyboardInterrupt
    monkeypatch.setattr(cli_loop, "_progress", interrupt_at_the_first_case)
    log = tmp_path / "perf.jsonl"
    result = run("check", "qr_v2", "--submission", built["qr_v2"], "--case", SPEC, "--device", "cpu", "--log", log)
    assert result.exit_code == 130, result.output
    assert [line for line in result.output.splitlines() if line] == [
        f"interrupted: check qr_v2 stopped before it finished; nothing was logged ({log} is unchanged)"]
    assert "Aborted" not in result.output
    assert not log.exists()
    assert multiprocessing.active_children() == []
    assert seen["ignores_sigint"] in (True, None)


def test_ctrl_c_during_the_library_run_kills_the_worker(built):
    def interrupt(text):
        if text.startswith("case 1/"):
            raise KeyboardInterrupt
    with pytest.raises(Interrupted, match="interrupted: check qr_v2 stopped before it finished; nothing was logged$"):
        runner.check("qr_v2", built["qr_v2"], [SPEC], device="cpu", progress=interrupt, log_path=None)
    assert multiprocessing.active_children() == []


def test_ctrl_c_while_the_record_is_written_waits_for_it_and_says_it_is_logged(built, tmp_path, monkeypatch):
    from popcorn.evidence import logs
    monkeypatch.setattr(runner, "run_worker", lambda job, *args, **kwargs: (
        {"gpu": "cpu", "torch": "x", "compile_s": 0.1},
        [{"spec": spec, "status": "pass", "residuals": {}} for spec in job["specs"]]))
    real_append = logs.append_record

    def append_with_ctrl_c(record, path):
        os.kill(os.getpid(), signal.SIGINT)          # Ctrl-C as the record is being written
        return real_append(record, path)
    monkeypatch.setattr(logs, "append_record", append_with_ctrl_c)
    log = tmp_path / "perf.jsonl"
    with pytest.raises(Interrupted, match=f"interrupted: check qr_v2 had finished; its record is in {log}$"):
        runner.check("qr_v2", built["qr_v2"], [SPEC], device="cpu", log_path=log)
    (line,) = log.read_text().splitlines()
    assert '"mode": "check"' in line
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# torch's C initialisation imports numpy and swallows a KeyboardInterrupt raised there (found by sending
# SIGINT while `import torch` runs). This stand-in does the same, then hands over to the real torch.
SWALLOWING_TORCH = """
import importlib, os, signal, sys
try:
    os.kill(os.getpid(), signal.SIGINT)        # Ctrl-C while torch imports numpy ...
    sum(range(1000))                           # (the handler runs between bytecodes)
except KeyboardInterrupt:
    pass                                       # ... which swallows it
sys.path.remove(os.path.dirname(os.path.dirname(__file__)))
del sys.modules["torch"]
sys.modules["torch"] = importlib.import_module("torch")
"""


def popkit_process(tmp_path, *args, pythonpath=()):
    """`python -m popcorn ARGS` in a new process from another folder, with PYTHONPATH's folders first."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, pythonpath), str(root)])}
    return subprocess.run([sys.executable, "-m", "popcorn", *map(str, args)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)


def test_ctrl_c_while_torch_is_imported_stops_the_verb(built, tmp_path):
    # The check ran on to PASS, exit 0, and logged its record, as if Ctrl-C had not been pressed.
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(SWALLOWING_TORCH)
    log = tmp_path / "perf.jsonl"
    done = popkit_process(tmp_path, "check", "qr_v2", "--submission", built["qr_v2"], "--case", SPEC,
                          "--device", "cpu", "--log", log, pythonpath=[fake])
    assert done.returncode == 130, done.stdout + done.stderr
    assert done.stdout == "" and done.stderr.split() == ["interrupted"]
    assert not log.exists()


def test_ctrl_c_while_the_verbs_load_is_exit_130_without_a_traceback(tmp_path):
    # A KeyboardInterrupt traceback through click's import, exit 130 from Python itself.
    fake = tmp_path / "fake"
    (fake / "click").mkdir(parents=True)
    (fake / "click" / "__init__.py").write_text("raise KeyboardInterrupt  # Ctrl-C while click loads\n")
    done = popkit_process(tmp_path, "problem", "list", pythonpath=[fake])
    assert done.returncode == 130, done.stderr
    assert done.stdout == "" and done.stderr.split() == ["interrupted"]


def test_ctrl_c_outside_a_run_is_exit_130_not_aborted(monkeypatch):
    import build as builder

    def interrupted_build(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(builder, "build", interrupted_build)
    result = run("build", "qr_v2", "-o", "x.py")
    assert result.exit_code == 130 and [line for line in result.output.splitlines() if line] == ["interrupted"]


def test_an_os_error_that_names_no_file_is_one_line_without_an_empty_name(monkeypatch):
    # 'error: : No space left on device'.
    import build as builder

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(builder, "build", full_disk)
    result = run("build", "qr_v2", "-o", "x.py")
    assert result.exit_code == 1 and result.output.splitlines() == ["error: No space left on device"]


@pytest.mark.parametrize("budget_s, expected", [(100.0, (100.0, "--budget")),
                                                (1e9, (240 * 10, "the task's 240 s limit x 10 on the CPU"))],
                         ids=["budget-binds", "task-limit-binds"])
def test_budget_stops_the_worker_when_it_is_shorter_than_the_tasks_limit(tmp_path, monkeypatch, budget_s, expected):
    # A device call's own limit cut a diff at case 11 of 12 and nothing was logged; --budget stops the worker
    # in time, and the cases it finished keep their results (run_worker's timeout, tested above).
    calls = []
    monkeypatch.setattr(runner, "run_worker", lambda job, progress, timeout_s, name=None: calls.append(
        (timeout_s, name)) or ({}, [{"spec": spec, "status": "pass", "error": None, "residuals": {}}
                                    for spec in job["specs"]]))
    sub = tmp_path / "s.py"
    sub.write_text("def custom_kernel(data):\n    return data\n")
    outcome = runner.check("qr_v2", sub, [SPEC], device="cpu", log_path=None, budget_s=budget_s)
    assert calls == [expected] and outcome.record["budget_s"] == budget_s
    assert not any("--budget" in note for note in outcome.notes)        # nothing was cut


@pytest.mark.parametrize("budget_s, note", [(30, "--budget 30 s ran out: 1 of 3 cases finished"), (1e9, None)],
                         ids=["budget-cut-it", "task-limit-cut-it"])
def test_a_run_cut_by_its_budget_fails_and_says_how_many_cases_finished(tmp_path, monkeypatch, budget_s, note):
    # A run cut by the task's limit under a longer --budget fails too, but its note must not blame the budget.
    def cut(job, progress, timeout_s, name=None):
        first, *rest = job["specs"]
        failure = f"timed out after {timeout_s:g} s {runner._limit_tag(name)} during the second"
        return {}, [{"spec": first, "status": "pass", "error": None, "residuals": {}},
                    {"spec": rest[0], "status": "fail", "error": failure, "residuals": {}},
                    {"spec": rest[1], "status": "fail", "error": f"not run ({failure})", "residuals": {}}]
    monkeypatch.setattr(runner, "run_worker", cut)
    sub = tmp_path / "s.py"
    sub.write_text("def custom_kernel(data):\n    return data\n")
    specs = [SPEC, "batch: 1; n: 13; cond: 1; seed: 4; case: dense", "batch: 1; n: 5; cond: 1; seed: 5; case: dense"]
    outcome = runner.check("qr_v2", sub, specs, device="cpu", log_path=None, budget_s=budget_s)
    assert not outcome.passed and outcome.record["budget_s"] == budget_s
    assert [c["status"] for c in outcome.record["cases"]] == ["pass", "fail", "fail"]
    notes = " ".join(outcome.notes)
    assert (note in notes) if note else "ran out" not in notes


@pytest.mark.parametrize("args, says", [
    (["check", "qr_v2", "--budget", "0"], "--budget 0: a positive number of seconds"),
    (["diff", "qr_v2", "--budget", "inf"], "--budget inf: a positive number of seconds"),
])
def test_a_bad_budget_is_refused_before_any_build(args, says, tmp_path):
    result = run(*args, "--device", "cpu", "--log", tmp_path / "perf.jsonl")
    assert result.exit_code != 0 and says in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("harness", ["official", "both"])
def test_budget_is_for_the_native_checker_only(harness):
    with pytest.raises(PopkitError, match=f"with --harness {harness} eval.py runs under the task's limits"):
        runner.require_options("qr_v2", "check", budget_s=60.0, harness=harness)


def test_a_diff_s_progress_names_the_round(built):
    # A long diff --rounds N said which case it was on, never how far through its rounds.
    lines = []
    runner.diff("qr_v2", built["qr_v2"], built["qr_v2"], 3, [SPEC], device="cpu", progress=lines.append,
                log_path=None)
    timed = [line for line in lines if "repeat" in line]
    for side in ("candidate", "incumbent"):
        assert {f"{side} round {r}/3" for r in (1, 2, 3)} <= {line.split(": repeat")[0][-len(f"{side} round 1/3"):]
                                                              for line in timed}


def test_a_file_far_over_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    # `promote --submission` given a 296 MB log parsed it whole as Python and was killed for memory (rc 137).
    big = tmp_path / "performance.jsonl"
    with big.open("wb") as out:
        out.truncate(runner.SUBMISSION_MAX_READ + 1)      # sparse: no disk spent
    prob = problems.load_problem("qr_v2")
    monkeypatch.setattr(Path, "read_text", lambda *a, **k: pytest.fail("the file was read"))
    with pytest.raises(PopkitError, match=r"is not a submission: 10,000,001 bytes, where the leaderboard takes at "
                                          r"most 1,000,000"):
        runner.require_submission_for(prob, big)
