"""scripts/: the refusals that come before anything is built or run, from any folder (sweep_route itself:
test_sweep_route.py; peers: test_peers.py)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_session.sh"


def session(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_run_from_another_folder_says_where_to_run_it(tmp_path):
    # It made DIR, warned of a missing git and nvidia-smi, then failed in 'No module named popcorn' (or ran
    # whatever popcorn the interpreter found elsewhere).
    done = session(tmp_path, "-o", str(tmp_path / "out"), "check qr_v2")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: run scripts/gpu_session.sh from the repository root: cd {ROOT}"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_prints_the_usage_from_any_folder(tmp_path, flag):
    # It said: error: "--help": only check, bench and diff write records (got '--help').
    done = session(tmp_path, flag)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines()[0] == "Run a batch of popkit verbs on a GPU host and write their records and " \
                                          "tables to one folder."
    assert "scripts/gpu_session.sh [-o DIR]" in done.stdout and "#" not in done.stdout


def test_help_says_a_host_without_nvidia_smi_gets_no_gpu_txt(tmp_path):
    # It said only 'DIR/gpu.txt names the GPU'; without nvidia-smi the script warns and writes no gpu.txt.
    assert "without nvidia-smi, a warning and no gpu.txt" in " ".join(session(tmp_path, "--help").stdout.split())


def test_an_option_before_the_problem_is_refused_before_anything_is_made(tmp_path):
    # The option was taken for the problem: `popkit build --device` failed ('No such option') and left DIR/builds/,
    # so the same -o was then refused as a folder holding another run.
    done = session(ROOT, "-o", str(tmp_path / "out"), "check --device cpu qr_v2")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ['error: "check --device cpu qr_v2": put the problem right after the verb '
                                        "(check PROBLEM --device ...)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("out, command, line", [
    ("out", "check qr_v2 --case 'batch: 1", "error: \"check qr_v2 --case 'batch: 1\": a quote is not closed"),
    ("file", "check qr_v2", "error: -o {tmp}/file: a file; give -o a folder"),
])
def test_a_batch_it_cannot_run_is_refused_before_anything_is_built(tmp_path, out, command, line):
    # An unclosed quote failed the verb in eval once every problem was built; -o naming a file, in mkdir.
    (tmp_path / "file").write_text("")
    done = session(ROOT, "-o", str(tmp_path / out), command)
    assert done.returncode == 2 and done.stderr.splitlines() == [line.format(tmp=tmp_path)]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("made", [True, False])
def test_a_failed_build_leaves_the_folder_as_it_was_found(tmp_path, made):
    # DIR/builds/ stayed after the build failed and nothing ran: the fixed batch's same -o was refused as a folder
    # holding another run.
    out = tmp_path / "out"
    if not made:
        out.mkdir()
    done = session(ROOT, "-o", str(out), "check nosuch")
    assert done.returncode == 1 and "unknown problem 'nosuch'" in done.stderr
    assert (not out.exists()) if made else list(out.iterdir()) == []


@pytest.mark.parametrize("left", ["performance.jsonl", "builds"])
def test_a_folder_that_holds_another_run_is_refused(tmp_path, left):
    # On a warm GPU host /tmp outlives the call: -o /tmp/s/gs appended this run's records to the last run's
    # log and wrote its tables over the last run's 01-, 02-, ... names, which merge then refused.
    out = tmp_path / "out"
    out.mkdir()
    (out / left).mkdir() if left == "builds" else (out / left).write_text('{"time": "earlier"}\n')
    done = session(ROOT, "-o", str(out), "check qr_v2")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (f"error: {out} already holds a run (performance.jsonl or builds/): "
                                            "give -o a new folder")
    assert sorted(p.name for p in out.iterdir()) == [left]


STAND_IN = """#!{python}
# Stands in for the interpreter: `-m popcorn build ...` succeeds at once; a verb says it started, then
# waits for Ctrl-C and ends as popkit does (its one line, exit 130).
import sys, time
if sys.argv[3] == "build":
    raise SystemExit(0)
print("started", *sys.argv[3:5], flush=True)
try:
    time.sleep(10)
except KeyboardInterrupt:
    print("interrupted:", *sys.argv[3:5], file=sys.stderr, flush=True)
    raise SystemExit(130)
"""


def stand_in_python(tmp_path: Path, source: str) -> Path:
    """An executable that gpu_session.sh runs as $PYTHON: SOURCE with this interpreter on its #! line."""
    python = tmp_path / "python"
    python.write_text(source.format(python=sys.executable))
    python.chmod(0o755)
    return python


def test_ctrl_c_stops_the_batch_and_keeps_the_verbs_line_in_its_table(tmp_path):
    # Ctrl-C stopped the verb running (exit 130) and the batch went on with the next verb; the pipe's grep
    # and tee died of the same Ctrl-C, so the verb's 'interrupted' line reached neither screen nor table.
    python = stand_in_python(tmp_path, STAND_IN)
    out = tmp_path / "out"
    proc = subprocess.Popen(["bash", str(SCRIPT), "-o", str(out), "check qr_v2", "bench qr_v2"], cwd=ROOT,
                            env={**os.environ, "PYTHON": str(python)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    table = out / "01-check-qr_v2.txt"
    deadline = time.monotonic() + 30
    while "started" not in (table.read_text() if table.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)          # what a terminal's Ctrl-C does: the whole foreground group
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "interrupted: check qr_v2" in table.read_text()
    assert not (out / "02-bench-qr_v2.txt").exists() and "started bench" not in stdout
    assert stderr.splitlines()[-1] == (f'interrupted during "check qr_v2": 0 of 2 commands finished; the records '
                                       f"and tables so far are in {out}")


QUICK = """#!{python}
# Stands in for the interpreter: `-m popcorn build ...` succeeds; `check` passes, `bench` fails (exit 1), and each
# appends a record to its --log; a --case of 'refused' ends the verb before that, as popkit refuses a bad one.
import sys
args = sys.argv[3:]
if args[0] == "build":
    raise SystemExit(0)
if "refused" in args:
    print("error: case spec refused", file=sys.stderr)
    raise SystemExit(1)
open(args[args.index("--log") + 1], "a").write('{{"mode": "%s"}}\\n' % args[0])
print("ran", *args[:2], flush=True)
raise SystemExit(1 if args[0] == "bench" else 0)
"""


def test_each_verb_ends_with_its_outcome_and_seconds_and_the_batch_with_its_total(tmp_path):
    # A device call's limit is planned from how long each verb took: the batch said neither.
    python = stand_in_python(tmp_path, QUICK)
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), "-o", str(out), "check qr_v2", "bench qr_v2"], cwd=ROOT,
                          env={**os.environ, "PYTHON": str(python)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"=== check qr_v2: ok in \d+ s", lines[lines.index("ran check qr_v2") + 1])
    assert re.fullmatch(r"=== bench qr_v2: failed \(exit 1\) in \d+ s", lines[lines.index("ran bench qr_v2") + 1])
    assert re.fullmatch(rf"=== 2 commands, 1 failed, \d+ s in all; records and tables in {re.escape(str(out))}",
                        lines[-2])


def test_the_last_line_says_how_to_merge_the_folder_and_its_archive(tmp_path):
    python = stand_in_python(tmp_path, QUICK)
    out, packed = tmp_path / "out", tmp_path / "back" / "s.tgz"
    done = subprocess.run(["bash", str(SCRIPT), "-o", str(out), "-a", str(packed), "check qr_v2"], cwd=ROOT,
                          env={**os.environ, "PYTHON": str(python)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (f"merge them where you keep logs/: popkit merge {out}/performance.jsonl "
                                            f"--tables {out} (or: popkit merge {packed.parent.resolve() / 's.tgz'})")
    assert re.fullmatch(r"=== 1 command, 0 failed, \d+ s in all; .*", done.stdout.splitlines()[-2])   # not "1 commands"


def test_a_batch_whose_verbs_logged_nothing_says_there_is_nothing_to_merge(tmp_path):
    # Every verb refused before it ran: the last line named a merge of DIR/performance.jsonl, which is not there.
    python = stand_in_python(tmp_path, QUICK)
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), "-o", str(out), "check qr_v2 --case refused"], cwd=ROOT,
                          env={**os.environ, "PYTHON": str(python)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and not (out / "performance.jsonl").exists()
    assert done.stdout.splitlines()[-1] == (f"no verb logged a record (each one's table in {out} says why): nothing "
                                            "to merge")


WRITES = """#!{python}
# Stands in for the interpreter: `-m popcorn build` writes the built file; a verb appends a record to its --log
# and prints a table; `bench` then hangs, as a verb killed at a device call's limit would.
import sys, time
args = sys.argv[3:]
if args[0] == "build":
    open(args[args.index("-o") + 1], "w").write("# built\\n")
    raise SystemExit(0)
open(args[args.index("--log") + 1], "a").write('{{"mode": "%s"}}\\n' % args[0])
print("table of", args[0], flush=True)
if args[0] == "bench":
    time.sleep(60)
"""


def test_an_archive_holds_the_verbs_that_finished_when_the_batch_is_killed(tmp_path):
    # A device tool that returns 8 files a call dropped performance.jsonl from a 13-file DIR, and a call killed
    # at its limit returned nothing of DIR: -a keeps one archive, written anew after each verb.
    python = stand_in_python(tmp_path, WRITES)
    out, archive = tmp_path / "out", tmp_path / "back" / "s.tgz"
    proc = subprocess.Popen(["bash", str(SCRIPT), "-o", str(out), "-a", str(archive), "check qr_v2", "bench qr_v2"],
                            cwd=ROOT, env={**os.environ, "PYTHON": str(python)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    while "bench" not in ((out / "performance.jsonl").read_text() if (out / "performance.jsonl").exists() else "") \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)          # what a device call's limit does
    proc.communicate(timeout=30)
    with tarfile.open(archive) as tar:
        names = sorted(tar.getnames())
        log = tar.extractfile("out/performance.jsonl").read().decode()
    assert "out/builds/qr_v2.py" in names and "out/01-check-qr_v2.txt" in names
    assert log == '{"mode": "check"}\n'          # the archive of the last finished verb, not a partial one
    assert not (tmp_path / "back" / "s.tgz.partial").exists()


def test_an_archive_is_named_tgz(tmp_path):
    done = session(ROOT, "-o", str(tmp_path / "out"), "-a", str(tmp_path / "s.zip"), "check qr_v2")
    assert done.returncode == 2 and not (tmp_path / "out").exists()
    assert done.stderr.splitlines() == [f"error: -a {tmp_path / 's.zip'}: name the archive FILE.tgz (or .tar.gz)"]
CACHE_USER = """#!{python}
# Stands in for the interpreter: a verb compiles into the batch's extension cache, as a CUDA import does.
import os, pathlib, sys
if sys.argv[3] != "build":
    (pathlib.Path(os.environ["TORCH_EXTENSIONS_DIR"]) / "built.so").write_text("x")
"""


def test_the_batch_removes_its_extension_cache(tmp_path):
    # Each batch's fresh cache stayed in TMPDIR with its compiled libraries, one more folder per batch.
    python = stand_in_python(tmp_path, CACHE_USER)
    temp = tmp_path / "temp"
    temp.mkdir()
    done = subprocess.run(["bash", str(SCRIPT), "-o", str(tmp_path / "out"), "check qr_v2"], cwd=ROOT,
                          env={**os.environ, "PYTHON": str(python), "TMPDIR": str(temp)}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert list(temp.iterdir()) == []


def script(cwd: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


# A submission to every problem's checks (it defines custom_kernel) that says so if a script imports it.
IMPORTED = "def custom_kernel(data):\n    return data\n\n\nraise SystemExit('imported')\n"
PY_SCRIPTS = ["profile_route.py", "sweep_route.py", "cholesky_kernel_bench.py", "qr_kernel_bench.py", "peers.py",
              "same_outputs.py", "folders_on_gpu.py", "qr_lookahead_probe.py", "eigh_stage_bench.py"]


@pytest.mark.parametrize("name", PY_SCRIPTS)
def test_help_from_another_folder_prints_the_usage(tmp_path, name):
    # profile_route: a TypeError traceback; cholesky_kernel_bench: FileNotFoundError: '--help'; from another
    # folder each imported `checks` from wherever the interpreter found one, or failed to.
    done = script(tmp_path, name, "--help")
    assert done.returncode == 0 and done.stderr == "" and "usage" in done.stdout.lower(), done.stderr


@pytest.mark.parametrize("name, says", [("profile_route.py", "--timeline also lists every launch"),
                                        ("same_outputs.py", "Exit 0 when every case")])
def test_help_prints_the_whole_docstring(tmp_path, name, says):
    # Only its first line: not what a line of output means, the options' forms or the exit codes.
    done = script(tmp_path, name, "--help")
    assert says in done.stdout, done.stdout


@pytest.mark.parametrize("name, default", [("peers.py", "--reps REPS samples per candidate and case (at least 3; default 20)"),
                                           ("sweep_route.py", "--reps REPS alternating rounds per case (at least 3; default 5)")])
def test_help_names_the_default_of_reps(tmp_path, name, default):
    # Neither said how many samples or rounds --reps takes when it is not given.
    done = script(tmp_path, name, "--help")
    assert default in " ".join(done.stdout.split()), done.stdout


@pytest.mark.parametrize("name, args", [
    ("profile_route.py", ["missing.py", "cholesky", "batch: 1; n: 8; cond: 1; seed: 1"]),
    ("sweep_route.py", ["missing.py", "cholesky", "variants.json"]),
    ("cholesky_kernel_bench.py", ["missing.py"]),
    ("qr_kernel_bench.py", ["ok.py", "missing.py"]),
    ("qr_lookahead_probe.py", ["ok.py", "missing.py"]),
    ("eigh_stage_bench.py", ["ok.py", "missing.py", "--shape", "4x176"]),
    ("peers.py", ["missing.py", "cholesky"]),
])
def test_a_missing_submission_is_one_line(tmp_path, name, args):
    # A FileNotFoundError traceback from importlib.
    (tmp_path / "variants.json").write_text('{"default": {}}')
    (tmp_path / "ok.py").write_text(IMPORTED)      # every file is checked before any runs
    done = script(tmp_path, name, *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == ["error: missing.py: no such file (build one: popkit build PROBLEM -o FILE.py)"]


@pytest.mark.parametrize("name", ["profile_route.py", "cholesky_kernel_bench.py", "qr_kernel_bench.py",
                                  "qr_lookahead_probe.py", "eigh_stage_bench.py"])
def test_without_arguments_the_usage_is_the_error(tmp_path, name):
    # profile_route: a TypeError traceback; cholesky_kernel_bench: nothing at all, exit 0.
    done = script(tmp_path, name)
    assert done.returncode == 2 and done.stderr.startswith("usage: ") and "Traceback" not in done.stderr


@pytest.mark.parametrize("args, line", [
    (["nope"], "error: unknown problem 'nope' (known: "),
    (["cholesky", "--case", "batch: 2; n: 8"], "error: case spec {'batch': 2, 'n': 8} lacks 'cond', 'seed' "),
    (["cholesky", "--reps", "2"], "error: --reps 2 --budget 10: at least 3 samples and a positive budget"),
    (["cholesky", "--budget", "nan"], "error: --reps 20 --budget nan: at least 3 samples and a positive budget"),
    (["cholesky", "--json", "."], "error: --json .: a folder; name the file to write"),
    # a traceback once the first case was timed
    (["cholesky", "--json", "built.py/out.json"], "error: --json built.py/out.json: cannot write it there (Not a dir"),
])
def test_peers_refuses_a_problem_or_case_it_cannot_run_in_one_line(tmp_path, args, line):
    # Refused before the built file is imported (on a GPU host: a CUDA compile), which here would exit 'imported'.
    (tmp_path / "built.py").write_text(IMPORTED)
    done = script(tmp_path, "peers.py", "built.py", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(line), done.stderr


KERNEL_BENCHES = ["cholesky_kernel_bench.py", "qr_kernel_bench.py", "qr_lookahead_probe.py", "eigh_stage_bench.py"]


@pytest.mark.parametrize("name", KERNEL_BENCHES)
def test_a_kernel_bench_refuses_a_file_that_is_no_submission_before_any_import(tmp_path, name):
    # On a GPU host: every file before it compiled and ran, then an AttributeError traceback.
    (tmp_path / "ok.py").write_text(IMPORTED)
    (tmp_path / "log.txt").write_text("raise SystemExit('imported')\n")
    done = script(tmp_path, name, "ok.py", "log.txt")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: log.txt is not a submission (defines no custom_kernel") and \
        len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.parametrize("name, args, line", [
    ("cholesky_kernel_bench.py", ["ok.py", "--help"], None),
    ("qr_kernel_bench.py", ["ok.py", "--json", "out.json"],
     "error: --json: not an option: this script takes built files only (--help says more)"),
])
def test_a_kernel_bench_knows_an_option_from_a_file(tmp_path, name, args, line):
    # "--help: no such file" after a file; "--json: no such file" for an option it does not have.
    (tmp_path / "ok.py").write_text(IMPORTED)
    done = script(tmp_path, name, *args)
    if line is None:
        assert done.returncode == 0 and done.stdout.startswith("Time cholesky's CUDA entry points"), done.stderr
    else:
        assert done.returncode == 2 and done.stderr.splitlines() == [line]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a CUDA GPU")
@pytest.mark.parametrize("name", KERNEL_BENCHES)
def test_a_kernel_bench_without_a_gpu_is_one_line(tmp_path, name):
    # It imported the built file (a CUDA compile on a GPU host) and failed in torch's device code.
    (tmp_path / "ok.py").write_text(IMPORTED)
    done = script(tmp_path, name, "ok.py")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == ["error: a kernel bench times CUDA kernels: this machine has no CUDA GPU "
                                        "(run it on a GPU host)"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a CUDA GPU")
def test_profile_route_without_a_gpu_is_one_line(tmp_path):
    # It imported the built file and died in torch's CUDA generator with a traceback.
    (tmp_path / "ok.py").write_text(IMPORTED)
    done = script(tmp_path, "profile_route.py", "ok.py", "qr_v2", "batch: 2; n: 32; cond: 1; seed: 3")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == ["error: profile_route.py profiles CUDA kernels: this machine has no CUDA GPU "
                                        "(run it on a GPU host)"]


SNAPSHOT = ROOT / "scripts" / "snapshot.sh"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A repository with two commits: a.txt 'one', then 'two' and an untracked scratch file."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / "a.txt").write_text("one\n")
    git(root, "add", "a.txt")
    git(root, "commit", "-qm", "first")
    (root / "a.txt").write_text("two\n")
    git(root, "commit", "-qam", "second")
    (root / "scratch.txt").write_text("not tracked\n")
    return root


def snapshot(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SNAPSHOT), *args], cwd=repo, capture_output=True, text=True, timeout=60)


def test_a_snapshot_is_the_commits_tracked_files_and_its_hash_without_git(repo):
    done = snapshot(repo, "vendor/head", "HEAD~1")
    assert done.returncode == 0, done.stderr
    dest = repo / "vendor" / "head"
    assert (dest / "a.txt").read_text() == "one\n"
    assert (dest / "COMMIT").read_text().strip() == git(repo, "rev-parse", "--short", "HEAD~1")
    assert not (dest / ".git").exists() and not (dest / "scratch.txt").exists()
    again = snapshot(repo, "vendor/head")                  # an earlier snapshot is replaced
    assert again.returncode == 0 and (dest / "a.txt").read_text() == "two\n"


@pytest.mark.parametrize("args, message", [
    (("elsewhere", "nope"), "error: nope is not a commit of"),
    (("a.txt",), "error: a.txt exists and is not an earlier snapshot (no COMMIT file): not replacing it"),
    ((".",), "error: . exists and is not an earlier snapshot (no COMMIT file): not replacing it"),
])
def test_a_snapshot_refuses_a_bad_commit_or_a_folder_it_did_not_write(repo, args, message):
    done = snapshot(repo, *args)
    assert done.returncode == 2 and done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1
    assert (repo / "a.txt").read_text() == "two\n" and (repo / "scratch.txt").exists()
    assert not (repo / "elsewhere").exists()


def test_a_snapshot_outside_a_repository_is_one_line(tmp_path):
    done = subprocess.run(["bash", str(SNAPSHOT), "out"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.splitlines() == [f"error: run it inside the repository (here: {tmp_path})"]


def test_a_snapshot_without_logs_leaves_logs_out(repo):
    # Every candidate's snapshot was followed by rm -rf DEST/logs by hand (15 MB each; a call carries 64 MiB).
    (repo / "logs").mkdir()
    (repo / "logs" / "performance.jsonl").write_text("{}\n")
    (repo / "b_logs.txt").write_text("kept\n")
    (repo / "sub" / "logs").mkdir(parents=True)
    (repo / "sub" / "logs" / "x.txt").write_text("kept\n")
    git(repo, "add", "logs", "b_logs.txt", "sub")
    git(repo, "commit", "-qm", "logs")
    done = snapshot(repo, "--without-logs", "vendor/cand")
    assert done.returncode == 0, done.stderr
    dest = repo / "vendor" / "cand"
    assert not (dest / "logs").exists() and (dest / "a.txt").exists() and (dest / "b_logs.txt").exists()
    assert (dest / "sub" / "logs" / "x.txt").exists()          # only the top-level logs/ is left out
    assert snapshot(repo, "vendor/full").returncode == 0 and (repo / "vendor" / "full" / "logs").is_dir()
    help_text = snapshot(repo, "--help").stdout
    assert "--without-logs" in help_text and "#" not in help_text


@pytest.mark.parametrize("args, line", [
    # taken for DEST: rm and mkdir failed on it as their own option, in lines of theirs
    (["--without-log"], "error: --without-log: not an option (snapshot.sh takes --without-logs and --help); a "
                        "DEST may not begin with -"),
    (["a", "b", "c"], None),
])
def test_a_snapshot_s_bad_usage_goes_to_stderr_and_writes_nothing(repo, args, line):
    done = snapshot(repo, *args)
    assert done.returncode == 2 and done.stdout == ""       # the usage went to stdout, with exit 2
    assert done.stderr.splitlines() == [line] if line else done.stderr.startswith("Write a copy")
    assert sorted(p.name for p in repo.iterdir()) == [".git", "a.txt", "scratch.txt"]
