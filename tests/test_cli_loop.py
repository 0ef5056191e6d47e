"""The core loop through the CLI (click's CliRunner): build, check, bench, diff, on CPU (promote: test_promote.py).

check/bench/diff spawn a worker process, so each of those tests takes a few seconds; there are few.
bench and diff time a "steady" copy of the built qr_v2 file whose custom_kernel pads every call to
1 ms: its timings settle after the minimum number of repeats, which keeps the tests fast and the
A-vs-A diff far from any noise verdict.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import build
from checks import runner
from checks.harness import remap_seed
from checks.problems import load_problem
from checks.runner import select_specs
from popcorn.cli import loop, main
from popcorn.evidence.provenance import changed_parts
from popcorn.evidence.tables import fmt_speedup

SPEC = "batch: 2; n: 8; cond: 1; seed: 3; case: mixed"
TINY = "batch: 1; n: 1; cond: 1; seed: 3; case: dense"
CONTRACT = {"time", "problem", "mode", "commit", "submission_sha256", "gpu", "torch", "cuda", "compile_s",
            "cases", "geomean_us", "baseline_geomean_us", "baseline"}
CASE_CONTRACT = {"spec", "status", "error", "mean_us", "err_us", "best_us", "worst_us", "runs", "baseline_us",
                 "residuals"}
TIMING = ("mean_us", "err_us", "best_us", "worst_us", "runs", "baseline_us")

STEADY = '''

# ---- test wrapper: every call takes 1 ms of wall time, whatever the model needs ----
import time as _time

_model_kernel = custom_kernel


def custom_kernel(data):
    start = _time.perf_counter_ns()
    out = _model_kernel(data)
    while _time.perf_counter_ns() - start < 1_000_000:
        pass
    return out
'''

BROKEN = '''#!POPCORN leaderboard qr_v2
#!POPCORN gpu B200
import torch


def custom_kernel(data):
    b, n, _ = data.shape
    return data.clone() * 3.0, torch.ones(b, n, dtype=data.dtype)
'''


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def strict_lines(path):
    """The log's lines, each parsed as strict JSON (NaN / Infinity are refused)."""
    def refuse(name):
        raise ValueError(f"non-strict JSON constant {name}")
    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def steady(built, tmp_path_factory):
    path = tmp_path_factory.mktemp("steady") / "steady.py"
    path.write_text(built["qr_v2"].read_text() + STEADY)
    return path


# ---------------------------------------------------------------- build

def test_build(tmp_path):
    out = tmp_path / "qr.py"
    result = run("build", "qr_v2", "-o", out)
    assert result.exit_code == 0, result.output
    manifest = build.load_manifest("qr_v2")
    parts = len(manifest["cuda"]) + len(manifest["python"])
    assert re.search(rf"built {re.escape(str(out))} \([\d,]+ bytes, {parts} parts\)", result.output)
    assert result.output.splitlines()[-1] == "preflight: ok"
    assert out.read_text().startswith("#!POPCORN leaderboard qr_v2\n#!POPCORN gpu B200\n")


def test_build_unknown_problem_is_one_error_line(tmp_path):
    result = run("build", "nope", "-o", tmp_path / "x.py")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown problem 'nope'"), result.output
    assert not (tmp_path / "x.py").exists()


def test_build_without_problem_or_check_is_one_error_line():
    result = run("build")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "error: name a problem (popkit build qr_v2) or a file to check (--check FILE)"]


@pytest.mark.parametrize("name", ["out.txt", "x.cu", "x.cpp"])
def test_build_output_must_be_named_py_by_the_rule_submit_uses(tmp_path, name):
    # build -o x.cu wrote a Python file under a .cu name, whose Python checks (syntax, custom_kernel) submit's
    # preflight then skipped. One rule (preflight.name_error) for both: a built file is Python, so .py.
    from checks.preflight import check_rules, name_error
    refused = name_error(name, python=True)
    assert refused == (f"{name}: a built file is Python, so its name must end in .py (the preflight checks "
                       "syntax and custom_kernel only in a .py file)")
    out = tmp_path / name
    result = run("build", "qr_v2", "-o", out)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [f"error: {refused}; nothing built"]
    assert not out.exists()
    # submit still takes a hand-written .cu file (the server does), and refuses what the server refuses
    submit_says = check_rules(build.render("qr_v2", kernelguard=False).text.encode(), name).errors
    assert submit_says == ([] if name != "out.txt" else ["out.txt: file name must end in .py, .cu, .cuh, .cpp"])


def test_submit_checks_as_python_exactly_what_build_may_write():
    from checks.preflight import check_rules, is_python_name, name_error
    broken = b"#!POPCORN leaderboard qr_v2\n#!POPCORN gpu B200\ndef custom_kernel(:\n"
    for name in ("a.py", "a.cu", "a.cpp", "a.cuh"):
        python_checked = any("not valid Python" in e for e in check_rules(broken, name).errors)
        assert python_checked == is_python_name(name) == (name_error(name, python=True) is None)


@pytest.mark.parametrize("where", ["parts", "templates"])
def test_build_output_among_the_sources_is_refused(monkeypatch, tmp_path, where):
    # -o parts/qr_v2/route.py replaced the route's source with the built file (the next build then embedded the
    # whole built file as its route). The sources' folders are stand-ins here: a miss must not touch the real ones.
    folder = tmp_path / where
    monkeypatch.setattr(build, where.upper(), folder)
    part = folder / "qr_v2" / "route.py"
    part.parent.mkdir(parents=True)
    part.write_text("# my route\n")
    result = run("build", "qr_v2", "-o", part)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [f"error: -o {part}: inside {folder}, where the sources the builder reads "
                                          "live; nothing built"]
    assert part.read_text() == "# my route\n"


def _project(root, git: bool):
    """A stand-in project at ROOT: build.py and popcorn/cli/loop.py (tracked when GIT), submission.py (tracked when
    GIT: the default output, a previous build) and an untracked earlier build, candidate.py."""
    for rel in ("build.py", "popcorn/cli/loop.py", "submission.py", "candidate.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# {rel}\n")
    if git:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        subprocess.run(["git", "add", "build.py", "popcorn/cli/loop.py", "submission.py"], cwd=root, check=True)


@pytest.mark.parametrize("git", [True, False], ids=["git", "no-repository"])
@pytest.mark.parametrize("rel", ["build.py", "popcorn/cli/loop.py"])
def test_build_output_naming_a_project_source_is_refused(monkeypatch, tmp_path, git, rel):
    # -o build.py replaced the builder with the built file (and -o of any tracked source, the same). Outside a
    # repository of its own, the known source folders and top-level sources stand in for git's list.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    root = tmp_path / "project"
    _project(root, git)
    monkeypatch.setattr(build, "ROOT", root)
    result = run("build", "qr_v2", "-o", root / rel)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [f"error: -o {root / rel}: a source file of the project, which the built "
                                          "file would replace: name a new file (or submission.py); nothing built"]
    assert (root / rel).read_text() == f"# {rel}\n"


@pytest.mark.parametrize("git", [True, False], ids=["git", "no-repository"])
def test_build_output_outside_the_sources_is_written(monkeypatch, tmp_path, git):
    # the default submission.py (tracked), an untracked earlier build, a new file, a file outside the project
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    root = tmp_path / "project"
    _project(root, git)
    monkeypatch.setattr(build, "ROOT", root)
    for out in (root / "submission.py", root / "candidate.py", root / "new" / "x.py", tmp_path / "x.py"):
        build.build("qr_v2", out)
        assert out.read_text().startswith("#!POPCORN leaderboard qr_v2\n"), out


def test_build_to_an_empty_output_name_says_so(monkeypatch, tmp_path):
    # It printed "error: : file name must end in ...".
    monkeypatch.chdir(tmp_path)
    result = run("build", "qr_v2", "-o", "")
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        "error: an empty output name: name the file to write, e.g. -o submission.py; nothing built"]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(build.PopkitError, match="an empty output name"):
        build.build("qr_v2", "")


def test_build_to_an_impossible_path_is_one_error_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run("build", "qr_v2", "-o", blocker / "sub" / "x.py")
    assert result.exit_code == 1
    assert len(result.output.splitlines()) == 1 and result.output.startswith("error:"), result.output


# ---------------------------------------------------------------- check

def test_check_passes_and_logs_one_contract_record(built, tmp_path):
    log = tmp_path / "perf.jsonl"
    result = run("check", "qr_v2", "--submission", built["qr_v2"], "--case", SPEC, "--device", "cpu", "--log", log)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "PASS"
    records = strict_lines(log)
    assert len(records) == 1
    rec = records[0]
    assert CONTRACT <= set(rec)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rec["time"])
    assert (rec["problem"], rec["mode"], rec["gpu"], rec["cuda"]) == ("qr_v2", "check", "cpu", None)
    assert rec["submission_sha256"] == sha256(built["qr_v2"])
    assert rec["commit"] is None or re.fullmatch(r"[0-9a-f]{40}(-dirty)?", rec["commit"])
    assert isinstance(rec["torch"], str) and rec["torch"]
    assert isinstance(rec["compile_s"], float) and rec["compile_s"] >= 0
    assert rec["geomean_us"] is None and rec["baseline_geomean_us"] is None and rec["baseline"] is None
    assert len(rec["cases"]) == 1
    case = rec["cases"][0]
    assert CASE_CONTRACT <= set(case)
    assert case["spec"] == {"batch": 2, "n": 8, "cond": 1, "seed": 3, "case": "mixed"}
    assert case["status"] == "pass" and case["error"] is None
    assert all(case[k] is None for k in TIMING)
    assert set(case["residuals"]) == {"factor", "orthogonality"}
    for gate, limit in (("factor", 20.0), ("orthogonality", 100.0)):
        value, lim = case["residuals"][gate]
        assert lim == limit and 0 <= value <= limit


def test_check_of_a_broken_submission_fails(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(BROKEN)
    log = tmp_path / "perf.jsonl"
    result = run("check", "qr_v2", "--submission", bad, "--case", SPEC, "--device", "cpu", "--log", log)
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == "FAIL"
    row = next(line for line in result.output.splitlines() if line.startswith("2x8 mixed c1"))
    assert row.split()[3:5] == ["3", "fail"] and "factor:" in row   # seed, status
    (rec,) = strict_lines(log)
    assert rec["passed"] is False
    assert rec["cases"][0]["status"] == "fail" and rec["cases"][0]["error"].startswith("factor:")


def test_check_seeds_doubles_the_cases_with_remapped_seeds(built, tmp_path):
    log = tmp_path / "perf.jsonl"
    other = "batch: 1; n: 5; cond: 1; seed: 7; case: dense"
    result = run("check", "qr_v2", "--submission", built["qr_v2"], "--case", SPEC, "--case", other,
                 "--seeds", 1, "--device", "cpu", "--log", log)
    assert result.exit_code == 0, result.output
    (rec,) = strict_lines(log)
    assert [c["spec"]["seed"] for c in rec["cases"]] == [3, 7, remap_seed(3, 1), remap_seed(7, 1)] == [3, 7, 13, 43]
    assert [c["spec"]["n"] for c in rec["cases"]] == [8, 5, 8, 5]
    assert all(c["status"] == "pass" for c in rec["cases"])


def test_select_specs_adds_k_remapped_copies():
    specs, _ = select_specs(load_problem("qr_v2"), "tests", [SPEC], seeds=2, device="cpu")
    assert [s["seed"] for s in specs] == [3, remap_seed(3, 1), remap_seed(3, 2)]
    assert all({k: v for k, v in s.items() if k != "seed"} == {"batch": 2, "n": 8, "cond": 1, "case": "mixed"}
               for s in specs)


def test_check_runs_a_submission_saved_without_the_py_suffix(built, tmp_path):
    # The grader saves any upload as submission.py; the worker's import said "'NoneType' object has no
    # attribute 'loader'" for a file named, say, candidate.
    candidate = tmp_path / "candidate"
    shutil.copyfile(built["qr_v2"], candidate)
    result = run("check", "qr_v2", "--submission", candidate, "--case", SPEC, "--device", "cpu",
                 "--log", tmp_path / "l")
    assert result.exit_code == 0, result.output


def test_check_errors_before_spawning_are_one_line(tmp_path):
    result = run("check", "nope", "--submission", tmp_path / "x.py", "--device", "cpu", "--log", tmp_path / "l")
    assert result.exit_code == 1 and result.output.startswith("error: unknown problem 'nope'")
    result = run("check", "qr_v2", "--submission", tmp_path / "missing.py", "--case", SPEC, "--device", "cpu",
                 "--log", tmp_path / "l")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"error: {tmp_path / 'missing.py'}: no such submission file (run `popkit build qr_v2` first)"]
    assert not (tmp_path / "l").exists()


# ---------------------------------------------------------------- bench and diff

def test_bench_with_baseline_records_times(steady, tmp_path):
    log = tmp_path / "perf.jsonl"
    result = run("bench", "qr_v2", "--submission", steady, "--case", TINY, "--device", "cpu", "--baseline",
                 "--log", log)
    assert result.exit_code == 0, result.output
    assert "note: no GPU: CPU timings say nothing about GPU speed" in result.output
    (rec,) = strict_lines(log)
    assert CONTRACT <= set(rec) and rec["mode"] == "bench" and rec["baseline"] == "torch.geqrf"
    (case,) = rec["cases"]
    assert case["status"] == "pass"
    # every call of the steady kernel takes at least 1 ms: the mean is of one call, not the sum of the >= 3 runs
    # (under 3 ms; a loaded CI machine stretched the 1 ms busy-wait to 2.02 ms once)
    assert 1000 <= case["mean_us"] < 3000
    assert case["best_us"] <= case["mean_us"] <= case["worst_us"] and case["runs"] >= 3 and case["err_us"] >= 0
    assert 0 < case["baseline_us"] < 1000
    assert rec["geomean_us"] == pytest.approx(case["mean_us"])
    assert rec["baseline_geomean_us"] == pytest.approx(case["baseline_us"])


def test_a_speedup_keeps_three_significant_digits(capsys):
    # A CPU bench of the route beside torch read 'speedup 0.00x' and 'torch.geqrf 10.5 us (0.0x)': no ratio at all.
    spec = {"batch": 2, "n": 8, "cond": 1, "seed": 3, "case": "dense"}
    results = [{"spec": spec, "status": "pass", "residuals": {}, "mean_us": 4000.0, "baseline_us": 10.0}]
    assert runner.results_table(results, "bench").splitlines()[-1].split()[-1] == "0.00250x"
    record = {"geomean_us": 4000.0, "baseline_geomean_us": 10.0, "baseline": "torch.geqrf"}
    loop._print_outcome(SimpleNamespace(notes=[], record=record, table="", passed=True), "bench qr_v2")
    assert "geomean 4,000.0 us; torch.geqrf 10.0 us (0.00250x)" in capsys.readouterr().out
    assert [fmt_speedup(r) for r in (41.3, 116.6, 1.0234)] == ["41.3x", "117x", "1.02x"]


def test_diff_of_two_copies(steady, tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    shutil.copyfile(steady, a)
    shutil.copyfile(steady, b)
    log = tmp_path / "perf.jsonl"
    # 9 rounds, not the default 3: two copies must come out within noise, and with 3 rounds one preempted 1 ms
    # call (+450 us, beside another pytest-xdist worker on 2 CPUs) read as "slower" and failed the diff.
    result = run("diff", "qr_v2", "--submission", a, "--incumbent", b, "--case", TINY, "--device", "cpu",
                 "--rounds", "9", "--log", log)
    assert result.output.splitlines()[-1] == "changed parts: none"
    (rec,) = strict_lines(log)
    (case,) = rec["cases"]
    # Two copies come out within noise on a quiet machine; on a loaded one (another process on the 2 CPUs) one
    # side's sleeps stretch and the diff may call the candidate slower. Whatever it says, the exit code and the
    # record must say the same: a diff fails only on a regression, a "slower" beyond noise and tolerance.
    regression = case["status"] == "fail"
    assert not regression or (case["verdict"] == "slower" and case["error"] == "slower than the incumbent")
    assert result.exit_code == (1 if regression else 0), result.output
    assert CONTRACT <= set(rec) and rec["mode"] == "diff" and rec["passed"] is (not regression)
    assert rec["changed_parts"] == []
    assert rec["incumbent_sha256"] == rec["submission_sha256"] == sha256(a)
    assert case["runs"] == 9                      # one sample per round
    assert case["ratio"] == pytest.approx(case["mean_us"] / case["incumbent_us"], rel=1e-6)
    # Two copies of a sleeping kernel, each side's sample at most 3 repeats on the CPU (timing.cpu_rule): near 1,
    # but a loaded 2-core machine stretches some sleeps (0.81 seen), so only a gross difference fails here.
    assert 0.5 < case["ratio"] < 2.0
    assert case["verdict"] in ("within noise", "faster", "slower")
    assert case["incumbent_us"] >= 1000 and case["mean_us"] >= 1000
    # Both sides' spread, not the candidate's alone: the record has the incumbent's as the candidate's keys with
    # an incumbent_ prefix, and the table shows each side's standard error beside its mean.
    assert case["incumbent_runs"] == 9
    assert case["incumbent_best_us"] <= case["incumbent_us"] <= case["incumbent_worst_us"]
    assert case["incumbent_err_us"] >= 0 and case["err_us"] >= 0
    lines = result.output.splitlines()
    header = next(line for line in lines if line.startswith("case "))
    assert header.split() == ["case", "seed", "status", "factor", "orthogonality", "cand", "us", "err", "us",
                              "incumbent", "us", "err", "us", "ratio", "verdict", "error", "/", "message"]
    row = lines[lines.index(header) + 2][header.index("cand us"):header.index("ratio")].split()
    assert [float(x.replace(",", "")) for x in row] == pytest.approx(
        [case["mean_us"], case["err_us"], case["incumbent_us"], case["incumbent_err_us"]], rel=0.01, abs=0.01)
    assert ("note: err us: the standard error of each side's mean over its 9 rounds; a difference within 3 x their "
            "combined error, or under 0.5% of the incumbent, is within noise") in lines


def test_diff_names_the_side_that_failed(steady, tmp_path):
    # An incumbent that raised (or failed a gate) read "ValueError: boom" (or the gate's message) alone, as if the
    # candidate had: the two are run alike, so the table could not tell.
    raising = tmp_path / "raising.py"
    raising.write_text(steady.read_text() + "\n\ndef custom_kernel(data):\n    raise ValueError('boom')\n")
    broken = tmp_path / "broken.py"
    broken.write_text(BROKEN)
    for incumbent, error in ((raising, "incumbent: ValueError: boom"), (broken, "incumbent: input 1 of 50: factor")):
        result = run("diff", "qr_v2", "--submission", steady, "--incumbent", incumbent, "--case", TINY,
                     "--device", "cpu", "--log", tmp_path / "l")
        assert result.exit_code == 1, result.output
        (rec,) = strict_lines(tmp_path / "l")[-1:]
        (case,) = rec["cases"]
        assert case["status"] == "fail" and case["error"].startswith(error), case["error"]


def test_diff_needs_three_rounds(steady, tmp_path):
    # 'diff needs at least 3 rounds' did not name the option that sets them.
    result = run("diff", "qr_v2", "--submission", steady, "--incumbent", steady, "--rounds", 2, "--case", TINY,
                 "--device", "cpu", "--log", tmp_path / "l")
    assert result.exit_code == 1 and result.output.splitlines() == [
        "error: --rounds 2: diff needs at least 3 alternating rounds per case (the default is 3)"]


def test_diff_without_an_incumbent_says_how_to_get_one(steady, tmp_path):
    # It used to say "no such submission file (run `popkit build qr_v2` first)": building does not make one.
    missing = tmp_path / "incumbents" / "qr_v2.py"
    result = run("diff", "qr_v2", "--submission", steady, "--incumbent", missing, "--case", TINY, "--device", "cpu",
                 "--log", tmp_path / "l")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"error: {missing}: no such incumbent: `popkit promote qr_v2` installs one, or pass --incumbent FILE "
        "(or --incumbent reference, the folder's ref_kernel)"]


def test_diff_with_another_problems_incumbent_names_the_incumbent(built, steady, tmp_path):
    # It said "pass --submission FILE", about the file that was fine.
    result = run("diff", "qr_v2", "--submission", steady, "--incumbent", built["eigh"], "--case", TINY,
                 "--device", "cpu", "--log", tmp_path / "l")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"error: the incumbent {built['eigh']} is built for leaderboard eigh (its #!POPCORN leaderboard line), "
        "not qr_v2: pass --incumbent a file built for qr_v2 (`popkit promote qr_v2` installs one, or --incumbent "
        "reference)"]


def test_changed_parts_names_the_parts_that_differ(built, tmp_path):
    text = built["qr_v2"].read_text()
    old = re.search(r"(?m)^# part qr_v2/route\.py sha256 ([0-9a-f]{64})$", text).group(1)
    other = tmp_path / "other.py"
    other.write_text(text.replace(old, "0" * 64))
    assert changed_parts(built["qr_v2"], built["qr_v2"]) == []
    assert changed_parts(other, built["qr_v2"]) == ["qr_v2/route.py"]
    every = (set(re.findall(r"(?m)^# part (\S+) sha256", text))
             | set(re.findall(r"(?m)^# part (\S+) sha256", built["eigh"].read_text())))
    shared = {"common/device_utils.cuh", "common/cuda_loader.py", "common/tf32_model.py"}    # same bytes in both
    assert changed_parts(built["eigh"], built["qr_v2"]) == sorted(every - shared)


def test_changed_parts_against_a_file_without_part_hashes_are_unknown(built, tmp_path):
    # Against the folder's reference (diff --incumbent reference) or a fetched file, every part of the
    # candidate was listed as changed.
    plain = tmp_path / "reference_submission.py"
    plain.write_text("from reference import ref_kernel as custom_kernel\n")
    assert changed_parts(built["qr_v2"], plain) is None
    assert changed_parts(plain, built["qr_v2"]) is None



def test_output_into_a_closed_pipe_ends_quietly():
    # `popkit problem show qr_v2 | head -2` printed "error: : Broken pipe" once head had read its lines.
    read_end, write_end = os.pipe()
    os.close(read_end)
    done = subprocess.run([sys.executable, "-m", "popcorn", "problem", "show", "qr_v2"], stdout=write_end,
                          stderr=subprocess.PIPE, cwd=build.ROOT, timeout=120)
    os.close(write_end)
    assert done.returncode == 1 and done.stderr == b""


@pytest.mark.parametrize("args, error", [
    (["check", "qr_v2", "--seeds", "-1"], "--seeds -1: the number of extra seeds must be 0 or more"),
    # It sat silently, building a list of ten billion cases.
    (["check", "qr_v2", "--seeds", "1000000000"], "--seeds 1000000000: at most 1000 extra seeds in one run (each "
                                                  "reruns every case); split a larger sweep over several runs"),
    # Each failed in the worker, case by case, with 'ValueError: Overflow when unpacking long long'.
    (["check", "qr_v2", "--case", "batch: 2; n: 8; cond: 1; seed: 99999999999999999999"],
     "case spec {'batch': 2, 'n': 8, 'cond': 1, 'seed': 99999999999999999999}: seed must fit 64 signed bits "
     "(-9223372036854775808 .. 9223372036854775807)"),
    # Each ran twice, and bench counted it twice in the geomean.
    (["bench", "qr_v2", "--case", "batch: 2; n: 8; cond: 1; seed: 3", "--case", "batch: 2; n: 8; cond: 1; seed: 3"],
     "--case 'batch: 2; n: 8; cond: 1; seed: 3' is given twice: a run takes each case once"),
    (["check", "qr_v2", "--case", "batch: 2; n: 8; cond: 1; seed: 3", "--case", "seed: 3; batch: 2; n: 8; cond: 1; "
      "case: dense"], "--case 'seed: 3; batch: 2; n: 8; cond: 1; case: dense' is the same case as --case 'batch: 2; "
                      "n: 8; cond: 1; seed: 3': a run takes each case once"),
    (["check", "qr_v2", "--case", "batch: 2; n: 8; cond: 1; seed: 8589934592", "--seeds", "2"],
     "--seeds 2: 2x8 dense c1's seed 8589934592 becomes 36893488168893939713 under the grader's remap, a seed "
     "qr_v2's generator cannot take; use smaller case seeds or fewer --seeds"),
    (["check", "qr_v2", "--case", "batch 1"],
     "bad case spec 'batch 1': expected 'key: value' pairs joined by '; ', got 'batch 1'"),
    (["bench", "qr_v2", "--harness", "both"], "--harness both compares verdicts: use it with check"),
    (["diff", "qr_v2", "--rounds", "2", "--incumbent", "inc.py"],
     "--rounds 2: diff needs at least 3 alternating rounds per case (the default is 3)"),
])
def test_a_wrong_option_ends_the_verb_before_any_build(args, error, monkeypatch, tmp_path):
    # With no built submission.py for the problem, these built parts/qr_v2 to a temporary file first (seconds, and
    # a 'note: ... built parts/qr_v2 to ...' line) and only then named the wrong option.
    from popcorn.cli import loop
    monkeypatch.setattr(loop, "DEFAULT_SUBMISSION", tmp_path / "submission.py")
    monkeypatch.setattr(build, "build", lambda *a, **k: pytest.fail("built before the options were checked"))
    result = run(*args, "--device", "cpu", "--log", tmp_path / "l.jsonl")
    assert result.exit_code == 1
    assert result.output.splitlines() == [f"error: {error}"]


def test_check_help_names_the_seeds_it_describes():
    # It showed '--seeds INTEGER  repeat every case with K more seeds', K named nowhere.
    shown = CliRunner().invoke(main, ["check", "--help"]).output
    assert re.search(r"--seeds K\s+repeat every case with K more seeds", shown)
