"""scripts/folders_on_gpu.py: which folders a host skips and why, the newcomer path each other folder gets (the verbs
asked of an injected stage runner), a run that goes on past a failure, the budget, and what DIR and its archive hold;
one run of the real verbs on the toy folder (CPU)."""
from __future__ import annotations

import json
import os
import shutil
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "folders_on_gpu.py"
TOY = ROOT / "tests" / "toy_reference"

H200 = dict(vendor="nvidia", gpus=1, capability=(9, 0), name="NVIDIA H200")
B200x8 = dict(vendor="nvidia", gpus=8, capability=(10, 0), name="NVIDIA B200")
MI300 = dict(vendor="amd", gpus=1, capability=None, name="AMD Instinct MI300X")

# Shaped like problems/pmpp_v2: eval.py and utils.py beside the folders, task.yml naming them with ../
EVAL = "import os\nimport sys\n\nfrom reference import check_implementation, generate_input\nfrom utils import seed\n"
UTILS = "import random\n\n\ndef seed(value):\n    random.seed(value)\n"
TASK = """\
files:
  - {{"name": "submission.py", "source": "@SUBMISSION@"}}
  - {{"name": "task.py", "source": "task.py"}}
  - {{"name": "utils.py", "source": "../utils.py"}}
  - {{"name": "reference.py", "source": "reference.py"}}
  - {{"name": "eval.py", "source": "../eval.py"}}
lang: "{lang}"
{extra}
tests:
  - {{"size": 127, "seed": 4242}}
benchmarks:
  - {{"size": 1024, "seed": 5{case}}}
  - {{"size": 4096, "seed": 6}}
"""
REFERENCE = "import torch\n{imports}\n\ndef generate_input(size, seed):\n    return torch.zeros(size)\n\n\n" \
            "def ref_kernel(data):\n    return data + 1\n\n\ndef check_implementation(data, output):\n" \
            "    return True, ''\n"


def make_folder(root: Path, rel: str, board: str | None, gpus: list[str], lang="py", extra="", case="", imports="",
                reference=None, template=None) -> Path:
    """A problem folder ROOT/problems/REL in the pmpp_v2 layout, listed as BOARD on GPUS by its collection's index
    (none for BOARD None)."""
    collection, _ = rel.split("/", 1)
    folder = root / "problems" / rel
    folder.mkdir(parents=True)
    (folder.parent / "eval.py").write_text(EVAL)
    (folder.parent / "utils.py").write_text(UTILS)
    (folder / "task.yml").write_text(TASK.format(lang=lang, extra=extra, case=case))
    (folder / "task.py").write_text("input_t = output_t = object\n")
    (folder / "reference.py").write_text(reference or REFERENCE.format(imports=imports))
    if template:
        (folder / "submission.py").write_text(template)
    if board:
        index = root / "problems" / f"{collection}.yaml"
        entries = (index.read_text() if index.exists() else "name: test\nproblems:\n")
        index.write_text(entries + f"  - directory: {rel}\n    name: {board}\n    gpus: [{', '.join(gpus)}]\n")
    return folder


@pytest.fixture
def fog(import_module):
    return import_module(SCRIPT, "folders_on_gpu")


@pytest.fixture
def tree(tmp_path):
    """A fake reference-kernels checkout with one folder of each kind the script decides on."""
    root = tmp_path / "rk"
    make_folder(root, "pmpp_v2/add_py", "add_v2", ["B200", "H100", "A100"])
    make_folder(root, "amd/ident", "amd-identity", ["MI300"])
    make_folder(root, "dist/all2all", "dist-all2all", ["H100"], extra="multi_gpu: true", case=', "world_size": 4')
    make_folder(root, "needs/pkg", "needs-pkg", ["B200"], imports="import popkit_absent_pkg_for_tests.ops")
    make_folder(root, "nvfp4/gemv", "nvfp4_gemv", ["B200"],
                imports="FP4 = torch.float4_e2m1fn_x2     # only generate_input uses it, on sm_100")
    make_folder(root, "cu/add_cu", "add-cu", ["H100"], lang="cu")
    return root


class Verbs:
    """A stage runner that runs nothing: it records each call and answers pass, or what OUTCOMES says for a
    (problem, stage); each call moves CLOCK on by STEP seconds."""

    def __init__(self, outcomes=None, clock=None, step=1.0):
        self.calls, self.outcomes, self.clock, self.step = [], outcomes or {}, clock, step

    def __call__(self, stage, argv, cwd, env, timeout_s, output):
        name = argv[2] if stage == "add" else argv[1]
        self.calls.append({"stage": stage, "name": name, "argv": argv, "cwd": cwd, "env": env, "timeout_s": timeout_s,
                           "top": sorted(p.name for p in cwd.iterdir()),
                           "parts": sorted(p.name for p in (cwd / "parts").iterdir())})
        status, text = self.outcomes.get((name, stage), ("pass", f"{stage} {name}: ok\n"))
        output.write_text(text)
        if self.clock is not None:
            self.clock.now += self.step
        return self.fog.Stage(stage, status, self.step, None if status == "pass" else f"exit 1: {text.strip()}")

    def stages(self, name):
        return [c["stage"] for c in self.calls if c["name"] == name]

    def argv(self, name, stage):
        return next(c["argv"] for c in self.calls if c["name"] == name and c["stage"] == stage)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def run(fog, root, out, host, verbs, *args, clock=None):
    verbs.fog = fog
    return fog.main([str(root), "-o", str(out), *args], runner=verbs, host=fog.Host(**host),
                    clock=clock or time.monotonic)


def summary(out: Path) -> dict:
    return {row["folder"]: row for row in json.loads((out / "summary.json").read_text())["folders"]}


def test_an_h200_runs_the_nvidia_folders_it_can_and_says_why_it_skips_the_others(fog, tree, tmp_path):
    verbs = Verbs()
    assert run(fog, tree, tmp_path / "out", H200, verbs) == 0
    rows = summary(tmp_path / "out")
    assert {f: r["verdict"] for f, r in rows.items()} == {
        "amd/ident": "skip", "cu/add_cu": "skip", "dist/all2all": "skip", "needs/pkg": "skip", "nvfp4/gemv": "skip",
        "pmpp_v2/add_py": "pass"}
    assert rows["amd/ident"]["reason"] == "made for MI300: this host has NVIDIA H200 (1 GPU, sm_90)"
    assert rows["dist/all2all"]["reason"] == "a case runs on 4 GPUs (multi_gpu): this host has 1"
    assert rows["needs/pkg"]["reason"] == "its reference.py imports popkit_absent_pkg_for_tests, not installed here"
    assert rows["nvfp4/gemv"]["reason"] == ("its reference.py uses NVFP4 tensors (float4_e2m1fn_x2), which need "
                                            "sm_100: this GPU is sm_90")
    assert "lang 'cu': popkit builds Python submissions only" in rows["cu/add_cu"]["reason"]
    assert [c["name"] for c in verbs.calls] == ["add_v2"] * 4         # nothing else was asked to run
    assert verbs.stages("add_v2") == ["add", "build", "check", "bench"]


def test_a_host_with_the_gpus_and_the_arch_runs_what_the_h200_skips(fog, tree, tmp_path):
    verbs = Verbs()
    run(fog, tree, tmp_path / "out", B200x8, verbs)
    rows = summary(tmp_path / "out")
    assert rows["dist/all2all"]["verdict"] == rows["nvfp4/gemv"]["verdict"] == "pass"
    assert rows["amd/ident"]["verdict"] == rows["needs/pkg"]["verdict"] == "skip"


def test_an_amd_host_runs_the_amd_folder_and_skips_the_nvidia_only_ones(fog, tree, tmp_path):
    verbs = Verbs()
    run(fog, tree, tmp_path / "out", MI300, verbs, "--folder", "amd/*", "--folder", "pmpp_v2/*")
    rows = summary(tmp_path / "out")
    assert set(rows) == {"amd/ident", "pmpp_v2/add_py"}                    # --folder picks
    assert rows["amd/ident"]["verdict"] == "pass" and verbs.stages("amd_identity") == ["add", "build", "check", "bench"]
    assert rows["pmpp_v2/add_py"]["reason"] == "made for B200, H100, A100: this host has AMD Instinct MI300X (1 GPU)"


def test_each_stage_is_the_newcomers_verb_in_a_scratch_copy_with_the_records_in_dir(fog, tree, tmp_path, monkeypatch):
    monkeypatch.setenv("POPKIT_COMMIT", "abc1234")
    monkeypatch.setenv("POPKIT_HARNESS_ADD_V2", "/somewhere/else")
    verbs = Verbs()
    out = tmp_path / "out"
    run(fog, tree, out, H200, verbs, "--folder", "pmpp_v2/*")
    folder = tree / "problems" / "pmpp_v2" / "add_py"
    built, log = str(out / "builds" / "add_v2.py"), str(out / "performance.jsonl")
    assert verbs.argv("add_v2", "add") == ["problem", "add", "add_v2", "--from", str(folder)]
    assert verbs.argv("add_v2", "build") == ["build", "add_v2", "-o", built]
    assert verbs.argv("add_v2", "check") == ["check", "add_v2", "--submission", built, "--log", log]
    assert verbs.argv("add_v2", "bench") == ["bench", "add_v2", "--submission", built, "--log", log,
                                             "--case", "size: 1024; seed: 5"]        # the first benchmark only
    call = verbs.calls[0]
    assert call["cwd"] != ROOT and {"build.py", "checks", "parts", "popcorn", "templates"} <= set(call["top"])
    assert not {".git", ".venv", "logs", "vendor"} & set(call["top"])
    assert not call["cwd"].exists()                                        # removed at the end
    assert call["env"]["POPKIT_COMMIT"] == "abc1234" and call["env"]["POPKIT_REFERENCE_KERNELS"] == str(tree)
    assert "POPKIT_HARNESS_ADD_V2" not in call["env"]                      # it would name another folder
    assert [c["timeout_s"] for c in verbs.calls] == [120, 120, 300, 300]
    assert (out / "out" / "add_v2" / "bench.txt").read_text() == "bench add_v2: ok\n"


def test_a_problem_popkit_knows_is_added_with_force_over_a_fresh_scaffold_and_checked_by_its_eval(fog, tmp_path):
    # qr_v2 is native: our checker would judge it, so check and bench ask for the folder's eval.py; its own parts
    # (our solution) leave the scratch copy, so that the add scaffolds the route that calls the reference.
    root = tmp_path / "rk"
    make_folder(root, "linalg/qr_v2", "qr_v2", ["B200"])
    verbs = Verbs()
    run(fog, root, tmp_path / "out", H200, verbs)
    assert verbs.argv("qr_v2", "add")[-1] == "--force"
    assert "qr_v2" not in verbs.calls[0]["parts"] and "cholesky" in verbs.calls[0]["parts"]
    assert verbs.argv("qr_v2", "check")[-2:] == verbs.argv("qr_v2", "bench")[-2:] == ["--harness", "official"]
    assert (ROOT / "parts" / "qr_v2" / "route.py").is_file()                 # this tree keeps its own


def test_a_folder_no_index_names_is_added_under_its_own_name_as_leaderboard(fog, tmp_path):
    root = tmp_path / "rk"
    make_folder(root, "extra/Fast-Add", None, [])
    verbs = Verbs()
    run(fog, root, tmp_path / "out", H200, verbs)                           # task.yml names no gpus: B200
    assert verbs.argv("fast_add", "add")[-2:] == ["--leaderboard", "fast_add"]


def test_a_folder_whose_reference_cannot_stand_in_gets_add_and_build_only(fog, tmp_path):
    # princeton/cross_entropy_py: eval.py calls cross_entropy_forward and _backward; the scaffold is stubs.
    root = tmp_path / "rk"
    make_folder(root, "princeton/ce_py", "princeton_ce", ["A100"],
                reference="def generate_input(size, seed):\n    pass\n",
                template="def forward(logits):\n    pass\n\n\ndef backward(logits):\n    pass\n")
    verbs = Verbs()
    assert run(fog, root, tmp_path / "out", H200, verbs) == 0
    row = summary(tmp_path / "out")["princeton/ce_py"]
    assert verbs.stages("princeton_ce") == ["add", "build"]
    assert row["verdict"] == "skip" and row["reason"].startswith("add and build only: eval.py calls forward, backward,")
    assert [s["stage"] for s in row["stages"]] == ["add", "build"]


def test_a_failed_stage_ends_its_folder_and_the_next_folder_runs(fog, tree, tmp_path, capsys):
    make_folder(tree, "pmpp_v2/sub_py", "sub_v2", ["H100"])
    make_folder(tree, "pmpp_v2/mul_py", "mul_v2", ["H100"])
    verbs = Verbs({("add_v2", "build"): ("fail", "error: parts/add_v2/route.py: a syntax error\n"),
                   ("sub_v2", "check"): ("timeout", "")}, Clock())
    assert run(fog, tree, tmp_path / "out", H200, verbs, "--folder", "pmpp_v2/*", clock=verbs.clock) == 1
    rows = summary(tmp_path / "out")
    assert verbs.stages("add_v2") == ["add", "build"] and verbs.stages("sub_v2") == ["add", "build", "check"]
    assert verbs.stages("mul_v2") == ["add", "build", "check", "bench"]
    assert (rows["pmpp_v2/add_py"]["verdict"], rows["pmpp_v2/add_py"]["stage"]) == ("fail", "build")
    assert rows["pmpp_v2/add_py"]["reason"] == "exit 1: error: parts/add_v2/route.py: a syntax error"
    assert (rows["pmpp_v2/sub_py"]["verdict"], rows["pmpp_v2/sub_py"]["stage"]) == ("timeout", "check")
    assert rows["pmpp_v2/sub_py"]["reason"] == "stopped after its limit of 300 s (--timeout check=SECONDS)"
    assert (rows["pmpp_v2/mul_py"]["verdict"], rows["pmpp_v2/mul_py"]["stage"]) == ("pass", None)
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")] == [
        "[1/3] pmpp_v2/add_py: add 1.0 s, build 1.0 s fail, fail (exit 1: error: parts/add_v2/route.py: a syntax "
        "error) in 2.0 s",
        "[2/3] pmpp_v2/mul_py: add 1.0 s, build 1.0 s, check 1.0 s, bench 1.0 s, pass in 4.0 s",
        "[3/3] pmpp_v2/sub_py: add 1.0 s, build 1.0 s, check 1.0 s timeout, timeout (stopped after its limit of 300 s "
        "(--timeout check=SECONDS)) in 3.0 s"]


def test_the_first_line_names_the_host_and_counts_the_folders_in_good_english(fog, tree, tmp_path, capsys):
    run(fog, tree, tmp_path / "out", H200, Verbs(), "--folder", "pmpp_v2/*")          # it said "1 folders"
    assert capsys.readouterr().out.splitlines()[0] == (f"host: NVIDIA H200 (1 GPU, sm_90); 1 folder of {tree}; "
                                                       f"output in {tmp_path / 'out'}")


def test_the_budget_caps_each_stage_and_starts_no_folder_that_would_not_finish(fog, tree, tmp_path):
    make_folder(tree, "pmpp_v2/sub_py", "sub_v2", ["H100"])
    verbs = Verbs(clock=Clock(), step=100.0)
    run(fog, tree, tmp_path / "out", H200, verbs, "--budget", "500", clock=verbs.clock)
    rows = summary(tmp_path / "out")
    assert [c["timeout_s"] for c in verbs.calls] == [120, 120, 300, 200]      # bench: the 200 s left
    assert rows["pmpp_v2/add_py"]["verdict"] == "pass" and rows["pmpp_v2/add_py"]["seconds"] == 400
    assert verbs.stages("sub_v2") == []
    assert rows["pmpp_v2/sub_py"] == {"folder": "pmpp_v2/sub_py", "name": None, "verdict": "skip", "stage": None,
                                      "reason": "not started: 100 s of the budget left, and a folder took 400 s",
                                      "seconds": 0.0, "stages": []}
    assert rows["amd/ident"]["reason"].startswith("made for MI300")           # the host's reasons still come first


def test_a_stage_cut_by_the_budget_is_a_timeout_that_says_so(fog, tree, tmp_path):
    verbs = Verbs({("add_v2", "check"): ("timeout", "")}, Clock(), step=100.0)
    assert run(fog, tree, tmp_path / "out", H200, verbs, "--budget", "350", clock=verbs.clock) == 1
    assert [c["timeout_s"] for c in verbs.calls] == [120, 120, 150]
    row = summary(tmp_path / "out")["pmpp_v2/add_py"]
    assert (row["verdict"], row["stage"]) == ("timeout", "check")
    assert row["reason"] == "stopped at the budget (150 s were left)"


def archived(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_the_summary_and_the_archive_are_rewritten_after_each_folder(fog, tree, tmp_path):
    # A call killed at its limit keeps what finished: the archive a run leaves holds every folder done before.
    make_folder(tree, "pmpp_v2/sub_py", "sub_v2", ["H100"])
    archive = tmp_path / "back" / "folders.tgz"
    seen = {}

    class Peek(Verbs):
        def __call__(self, stage, argv, cwd, env, timeout_s, output):
            if stage == "add":
                held = archived(archive) if archive.exists() else {}
                seen[argv[2]] = (json.loads(held["summary.json"]) if held else None, sorted(held))
            return super().__call__(stage, argv, cwd, env, timeout_s, output)

    run(fog, tree, tmp_path / "out", H200, Peek(), "-a", str(archive))
    first, files = seen["add_v2"]              # after the five folders skipped before pmpp_v2/add_py
    assert first["folders_done"] == first["skip"] == 5 and first["folders_total"] == 7
    assert [row["folder"] for row in first["folders"]] == ["amd/ident", "cu/add_cu", "dist/all2all", "needs/pkg",
                                                           "nvfp4/gemv"]
    second, files = seen["sub_v2"]
    assert second["folders_done"] == 6 and second["folders"][-1]["verdict"] == "pass"
    assert {"out/add_v2/add.txt", "out/add_v2/bench.txt", "summary.txt"} <= set(files)
    held = archived(archive)
    assert held["out/sub_v2/check.txt"] == b"check sub_v2: ok\n"
    table = held["summary.txt"].decode()
    assert (tmp_path / "out" / "summary.txt").read_text() == table
    assert "folders: 7 of 7 done: 2 pass, 0 fail, 0 timeout, 5 skip" in table
    assert any(line.split()[:3] == ["pmpp_v2/sub_py", "sub_v2", "pass"] for line in table.splitlines())
    stages = json.loads(held["summary.json"])["folders"][-1]["stages"]
    assert [(s["stage"], s["status"], s["output"]) for s in stages] == [
        (stage, "pass", f"out/sub_v2/{stage}.txt") for stage in ("add", "build", "check", "bench")]
    assert not archive.with_name("folders.tgz.partial").exists()


def test_ctrl_c_sums_up_the_folder_in_progress_in_the_summary_and_the_archive(fog, tree, tmp_path, capsys):
    # Ctrl-C (or a device call's SIGTERM) during a folder's check left no summary and no archive at all when it was
    # the first folder to run, and the last archive without it otherwise: the transport brought back nothing of it.
    make_folder(tree, "pmpp_v2/sub_py", "sub_v2", ["H100"])
    archive = tmp_path / "back" / "folders.tgz"

    class CtrlC(Verbs):
        def __call__(self, stage, argv, cwd, env, timeout_s, output):
            done = super().__call__(stage, argv, cwd, env, timeout_s, output)
            if stage == "check":          # run_verb stops the verb, then lets Ctrl-C go on
                raise KeyboardInterrupt
            return done

    verbs = CtrlC(clock=Clock())
    with pytest.raises(KeyboardInterrupt):
        run(fog, tree, tmp_path / "out", H200, verbs, "-a", str(archive), clock=verbs.clock)
    assert verbs.stages("sub_v2") == []                               # the next folder never starts
    held = archived(archive)
    facts = json.loads(held["summary.json"])
    assert (facts["folders_done"], facts["interrupted"], facts["skip"]) == (6, 1, 5)
    row = facts["folders"][-1]
    assert (row["folder"], row["verdict"], row["stage"]) == ("pmpp_v2/add_py", "interrupted", "check")
    assert row["reason"] == "stopped by Ctrl-C or SIGTERM"
    assert [(s["stage"], s["status"]) for s in row["stages"]] == [("add", "pass"), ("build", "pass"),
                                                                  ("check", "interrupted")]
    assert held["out/add_v2/check.txt"] == b"check add_v2: ok\n"       # what the verb printed before it stopped
    assert (tmp_path / "out" / "summary.json").read_bytes() == held["summary.json"]
    assert capsys.readouterr().out.splitlines()[-1] == ("[6/7] pmpp_v2/add_py: add 1.0 s, build 1.0 s, check 1.0 s "
                                                        "interrupted, interrupted (stopped by Ctrl-C or SIGTERM) in "
                                                        "3.0 s")


def test_an_archive_cut_by_ctrl_c_while_written_leaves_the_last_one_and_no_partial_file(fog, tmp_path, monkeypatch):
    out, archive = tmp_path / "out", tmp_path / "folders.tgz"
    out.mkdir()
    (out / "summary.txt").write_text("first\n")
    fog.write_archive(out, archive)

    def ctrl_c(self, *args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(tarfile.TarFile, "add", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        fog.write_archive(out, archive)
    assert archived(archive) == {"summary.txt": b"first\n"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folders.tgz", "out"]


@pytest.mark.parametrize("args, says", [
    (["--folder", "nvidia/*"], "--folder nvidia/* matches no folder under"),
    (["--timeout", "check=0"], "--timeout check=0: give STAGE=SECONDS, STAGE one of add, build, check, bench"),
    (["--timeout", "lint=5"], "--timeout lint=5: give STAGE=SECONDS"),
    (["--budget", "0"], "--budget 0: a positive number of seconds"),
    (["-a", "out.zip"], "name the archive FILE.tgz"),
    (["-a", "{out}/back.tgz"], "put the archive outside DIR"),
    (["-a", "{file}/back.tgz"], "file/back.tgz: cannot write it there"),
])
def test_bad_arguments_are_refused_before_anything_runs(fog, tree, tmp_path, args, says):
    (tmp_path / "file").write_text("")
    verbs = Verbs()
    with pytest.raises(fog.PopkitError, match=says.replace("*", r"\*").replace(".", r"\.")):
        run(fog, tree, tmp_path / "out", H200, verbs, *[a.format(out=tmp_path / "out", file=tmp_path / "file") for a in args])
    assert verbs.calls == [] and not (tmp_path / "out").exists()


def test_plan_says_what_a_run_would_do_for_the_host_given_and_runs_and_writes_nothing(fog, tree, tmp_path, capsys):
    # On a machine without a GPU every folder is a skip: a device call was planned blind.
    make_folder(tree, "stubs/xent_py", "xent", ["H100"], template="def train_step(model, data):\n    pass\n")
    verbs = Verbs()
    assert run(fog, tree, tmp_path / "out", H200, verbs, "--plan", "--host", "nvidia:8:sm_100") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("plan for NVIDIA (8 GPUs, sm_100): 7 folders of ")
    assert "dist/all2all: run (add, build, check, bench)" in lines
    assert "nvfp4/gemv: run (add, build, check, bench)" in lines
    assert "amd/ident: skip (made for MI300: this host has NVIDIA (8 GPUs, sm_100))" in lines
    assert "stubs/xent_py: add and build only (its reference cannot stand in for the functions eval.py calls)" in lines
    assert lines[-1] == "3 run; 1 add and build only; 3 skip; 0 fail"
    assert verbs.calls == [] and not (tmp_path / "out").exists()


def test_plan_without_host_plans_for_this_one(fog, tree, tmp_path, capsys):
    run(fog, tree, tmp_path / "out", H200, Verbs(), "--plan", "--folder", "nvfp4/*")
    assert capsys.readouterr().out.splitlines()[1] == ("nvfp4/gemv: skip (its reference.py uses NVFP4 tensors "
                                                       "(float4_e2m1fn_x2), which need sm_100: this GPU is sm_90)")


@pytest.mark.parametrize("args, says", [
    (["--plan", "--host", "nvidia:1"], "--host nvidia:1: say VENDOR:GPUS[:sm_XY]"),
    (["--plan", "--host", "amd:0"], "--host amd:0: say VENDOR:GPUS[:sm_XY]"),
    (["--plan", "--host", "intel:1:sm_90"], "--host intel:1:sm_90: say VENDOR:GPUS[:sm_XY]"),
    (["--host", "amd:8"], "--host amd:8: only with --plan"),
])
def test_a_bad_or_misplaced_host_is_refused(fog, tree, tmp_path, args, says):
    with pytest.raises(fog.PopkitError, match=says.replace("[", r"\[").replace("]", r"\]")):
        run(fog, tree, tmp_path / "out", H200, Verbs(), *args)


@pytest.mark.parametrize("left", ["summary.json", "performance.jsonl"])
def test_a_dir_that_holds_a_run_is_refused(fog, tree, tmp_path, left):
    # A warm GPU host keeps /tmp between calls: a second run would mix its records and tables with the first's.
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / left).write_text("{}\n")
    with pytest.raises(fog.PopkitError, match="already holds a run"):
        run(fog, tree, tmp_path / "out", H200, Verbs())


@pytest.mark.parametrize("out, says", [("file", "-o {out}: a file; give -o a folder"),
                                       ("file/out", "-o {out}: cannot make the folder (Not a directory)")])
def test_a_dir_that_cannot_be_a_folder_is_refused_before_anything_runs(fog, tree, tmp_path, out, says):
    # mkdir's FileExistsError or NotADirectoryError, as a traceback.
    (tmp_path / "file").write_text("")
    verbs = Verbs()
    with pytest.raises(fog.PopkitError) as refused:
        run(fog, tree, tmp_path / out, H200, verbs)
    assert str(refused.value) == says.format(out=tmp_path / out) and verbs.calls == []


def test_a_root_without_problems_is_refused(fog, tmp_path):
    with pytest.raises(fog.PopkitError, match="not a reference-kernels checkout"):
        run(fog, tmp_path, tmp_path / "out", H200, Verbs())


def test_a_root_that_is_not_there_says_where_the_default_comes_from_and_what_to_do(fog, tmp_path, monkeypatch):
    monkeypatch.delenv("POPKIT_REFERENCE_KERNELS", raising=False)
    monkeypatch.setattr(fog.task_folder, "VENDOR_ROOT", tmp_path / "vendor" / "reference-kernels")
    with pytest.raises(fog.PopkitError) as refused:
        fog.main(["-o", str(tmp_path / "out")], runner=Verbs(), host=fog.Host(**H200))
    assert str(refused.value) == (f"{tmp_path / 'vendor' / 'reference-kernels'}: no such folder (ROOT, else "
                                  "$POPKIT_REFERENCE_KERNELS, else vendor/reference-kernels): `git clone "
                                  "https://github.com/gpu-mode/reference-kernels` and pass its path")


def fake_popcorn(folder: Path, body: str) -> Path:
    """FOLDER with a popcorn package whose `python -m popcorn` runs BODY: what run_verb starts there."""
    (folder / "popcorn").mkdir(parents=True)
    (folder / "popcorn" / "__init__.py").write_text("")          # a package, as the real one is: found first
    (folder / "popcorn" / "__main__.py").write_text(textwrap.dedent(body))
    return folder


def test_run_verb_keeps_the_output_and_words_a_failure_by_its_first_error_line(fog, tmp_path):
    cwd = fake_popcorn(tmp_path / "cwd", """\
        import sys
        print("check x on cuda (import+compile 2.1 s)")
        print("size=3  11  fail  RuntimeError: CUDA error: no kernel image is available")
        print("FAIL")
        sys.exit(1)
        """)
    done = fog.run_verb("check", ["check", "x"], cwd, dict(os.environ), 60, tmp_path / "check.txt")
    assert (done.stage, done.status) == ("check", "fail")
    assert done.error == "exit 1: size=3  11  fail  RuntimeError: CUDA error: no kernel image is available"
    assert (tmp_path / "check.txt").read_text().endswith("FAIL\n")
    fake = fake_popcorn(tmp_path / "ok", "import sys\nprint(sys.argv[1:])\n")
    assert fog.run_verb("add", ["problem", "add"], fake, dict(os.environ), 60, tmp_path / "add.txt").status == "pass"
    assert (tmp_path / "add.txt").read_text() == "['problem', 'add']\n"


@pytest.mark.parametrize("ignores_ctrl_c", [False, True])
def test_run_verb_stops_a_verb_past_its_limit_with_ctrl_c_then_a_kill(fog, tmp_path, monkeypatch, ignores_ctrl_c):
    # Ctrl-C first: popkit then ends the eval.py it runs in a session of its own; a kill alone would orphan it.
    monkeypatch.setattr(fog, "STOP_GRACE_S", 1.0)
    cwd = fake_popcorn(tmp_path / "cwd", f"""\
        import os, signal, time
        {"signal.signal(signal.SIGINT, signal.SIG_IGN)" if ignores_ctrl_c else ""}
        open("pid", "w").write(str(os.getpid()))
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            open("interrupted", "w").write("yes")
            raise
        """)
    start = time.monotonic()
    done = fog.run_verb("check", ["check", "x"], cwd, dict(os.environ), 2, tmp_path / "check.txt")
    assert (done.status, done.error) == ("timeout", None) and time.monotonic() - start < 20
    assert (cwd / "interrupted").exists() != ignores_ctrl_c
    with pytest.raises(ProcessLookupError):
        os.kill(int((cwd / "pid").read_text()), 0)


@pytest.mark.parametrize("text, line", [
    ("  .. pre-run\nerror: no competition folder for x on this machine\nTraceback\n",
     "error: no competition folder for x on this machine"),
    ("case  status  error / message\nsize=3  fail  ValueError: shapes differ\nFAIL\n",
     "size=3  fail  ValueError: shapes differ"),
    ("case  status  error / message\nsize=3  fail  wrong value at index 0\nFAIL\n",
     "size=3  fail  wrong value at index 0"),
    ("note: something\nlast words\n", "last words"),
    ("", "(no output)"),
])
def test_first_error_is_the_line_that_says_what_went_wrong(fog, text, line):
    assert fog.first_error(text) == line


def test_the_real_verbs_run_the_toy_folder_end_to_end_and_leave_this_tree_alone(fog, tmp_path, monkeypatch, capsys):
    # The toy folder's GPUs are CPU (tests/toy_reference): the real popkit verbs, as a GPU host runs them.
    shutil.copytree(TOY, tmp_path / "rk")
    monkeypatch.setenv("POPKIT_COMMIT", "e2e1234")
    out, archive = tmp_path / "out", tmp_path / "folders.tgz"
    before = sorted(p.name for p in (ROOT / "checks" / "cases").iterdir())
    assert fog.main([str(tmp_path / "rk"), "-o", str(out), "-a", str(archive)],
                    host=fog.Host(None, 0, None, "no GPU")) == 0
    row = summary(out)["toy/addone_py"]
    assert (row["name"], row["verdict"]) == ("addone_v1", "pass")
    assert [(s["stage"], s["status"]) for s in row["stages"]] == [(s, "pass") for s in fog.STAGES]
    records = [json.loads(line) for line in (out / "performance.jsonl").read_text().splitlines()]
    assert [(r["mode"], r["problem"], r["commit"], r["passed"]) for r in records] == [
        ("check", "addone_v1", "e2e1234", True), ("bench", "addone_v1", "e2e1234", True)]
    assert len(records[0]["cases"]) == 3 and [c["spec"] for c in records[1]["cases"]] == [{"size": 100, "seed": 21}]
    assert (out / "builds" / "addone_v1.py").read_text().startswith("#!POPCORN leaderboard addone_v1\n")
    assert {"performance.jsonl", "builds/addone_v1.py", "out/addone_v1/check.txt"} <= set(archived(archive))
    assert "toy/addone_py: add" in capsys.readouterr().out
    assert sorted(p.name for p in (ROOT / "checks" / "cases").iterdir()) == before
    assert not (ROOT / "parts" / "addone_v1").exists()


def test_a_folder_popkit_refuses_fails_at_the_folder_and_the_run_goes_on(fog, tmp_path):
    root = tmp_path / "rk"
    bad = make_folder(root, "pmpp_v2/bad_py", "bad_v2", ["H100"])
    (bad / "task.yml").write_text((bad / "task.yml").read_text().split("benchmarks:")[0])
    make_folder(root, "pmpp_v2/good_py", "good_v2", ["H100"])
    verbs = Verbs()
    assert run(fog, root, tmp_path / "out", H200, verbs) == 1
    row = summary(tmp_path / "out")["pmpp_v2/bad_py"]
    assert (row["verdict"], row["stage"], row["stages"]) == ("fail", "folder", [])
    assert row["reason"].endswith("task.yml: no benchmarks list (a problem needs tests and benchmarks)")
    assert [c["name"] for c in verbs.calls] == ["good_v2"] * 4
