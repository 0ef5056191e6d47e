"""popcorn.promote: an incumbent needs GPU evidence of the very file over the full official lists.

Everything lives under tmp_path: the incumbents folder is passed in (or bound for the CLI), the
log is written here; nothing reads or writes the real logs/.
"""
from __future__ import annotations

import functools
import json

import pytest
from click.testing import CliRunner

from checks.problems import load_problem
from popcorn.cli import main
from popcorn.errors import PopkitError
from popcorn.evidence import logs
import popcorn.promote as promote_mod
from popcorn.promote import promote

QR = load_problem("qr_v2")
CANDIDATE = '''#!POPCORN leaderboard qr_v2
#!POPCORN gpu B200
import torch


def custom_kernel(data):
    return torch.linalg.qr(data)
'''
INCUMBENT = CANDIDATE + "# the incumbent\n"


@pytest.fixture
def candidate(tmp_path):
    path = tmp_path / "candidate.py"
    path.write_text(CANDIDATE)
    return path


@pytest.fixture
def root(tmp_path):
    return tmp_path / "incumbents"


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "perf.jsonl"
    path.write_text("")       # there, without a record yet (a --log that is not there is refused)
    return path


def evidence(log, path, mode, specs=None, device="cuda", gpu="NVIDIA H200", passed=True, time=None, problem="qr_v2",
             against=None):
    """Append one record of MODE for the file at PATH (the full official list unless SPECS); a diff's incumbent
    is the file at AGAINST."""
    specs = specs if specs is not None else (QR.tests if mode == "check" else QR.benchmarks)
    cases = [{"spec": s, "status": "pass" if passed else "fail"} for s in specs]
    extra = {"time": time} if time else {}
    if against is not None:
        extra["incumbent_sha256"] = logs.file_sha256(against)
    record = logs.new_record(problem, mode, submission_sha256=logs.file_sha256(path), gpu=gpu, device=device,
                             cases=cases, passed=passed, **extra)
    logs.append_record(record, log)
    return record


def history(root):
    return [json.loads(line) for line in (root / "history.jsonl").read_text().splitlines()]


def with_incumbent(root):
    root.mkdir()
    target = root / "qr_v2.py"
    target.write_text(INCUMBENT)
    return target


# ---- what is refused, even with --force ----------------------------------------------------------

def test_unknown_problem_is_refused_even_forced(candidate, root, log):
    with pytest.raises(PopkitError, match="unknown problem 'foo'"):
        promote("foo", candidate, root, log, force=True)
    assert not root.exists()


def test_a_file_built_for_another_problem_is_refused_even_forced(candidate, root, log):
    with pytest.raises(PopkitError, match=r"is built for leaderboard qr_v2 .* not eigh"):
        promote("eigh", candidate, root, log, force=True)
    assert not root.exists()


@pytest.mark.parametrize("path", ["parts/qr_v2/route.py", "README.md", "templates/submission.py.j2"])
def test_a_file_that_is_not_a_built_submission_is_refused_even_forced(root, log, path):
    # --force installed a part (or README.md) as the incumbent, which every later diff then ran against.
    with pytest.raises(PopkitError, match="not a submission") as caught:
        promote("qr_v2", logs.ROOT / path, root, log, force=True)
    assert "\n" not in str(caught.value)
    assert not root.exists()


def test_a_file_without_build_header_or_leaderboard_line_is_refused_even_forced(root, log, tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text(CANDIDATE.replace("#!POPCORN leaderboard qr_v2\n", ""))
    with pytest.raises(PopkitError, match="neither popkit's build header nor a '#!POPCORN leaderboard' line"):
        promote("qr_v2", plain, root, log, force=True)
    assert not root.exists()


def test_a_built_file_without_leaderboard_line_is_promoted_forced(root, log, tmp_path, candidate):
    built = tmp_path / "built.py"
    built.write_text("# Built by popkit from parts/qr_v2: x\n" + CANDIDATE.replace("#!POPCORN leaderboard qr_v2\n", ""))
    assert promote("qr_v2", built, root, log, force=True) == root / "qr_v2.py"


def test_a_build_whose_cuda_parts_cannot_be_one_unit_is_refused_even_forced(root, log, tmp_path):
    # dc518b3 was promoted with two parts defining kColumnGroup: the H200 built it, a runner of under 4 CPUs cannot.
    parts = {"qr_v2/a.cu": "constexpr int kColumnGroup = 8;", "qr_v2/b.cu": "constexpr int kColumnGroup = 8;"}
    broken = tmp_path / "broken.py"
    broken.write_text(CANDIDATE + f"\nCUDA_PARTS = {parts!r}\n")
    with pytest.raises(PopkitError, match=r"parts/qr_v2/a\.cu and parts/qr_v2/b\.cu both define kColumnGroup: "
                                          r"machines under 4 CPUs .* \(--force does not skip this\)"):
        promote("qr_v2", broken, root, log, force=True)
    assert not root.exists()


def test_missing_file_is_one_error(tmp_path, root, log):
    with pytest.raises(PopkitError, match="no such submission file"):
        promote("qr_v2", tmp_path / "none.py", root, log, force=True)


def test_a_problem_added_at_runtime_is_found(candidate, root, log, monkeypatch, tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "late.yml").write_text("leaderboard: qr_v2\ntests: [{size: 4, seed: 1}]\nbenchmarks: [{size: 8, seed: 2}]\n")
    import checks.problems
    monkeypatch.setattr(checks.problems, "CASES_DIR", cases)          # what `popkit problem add` writes to
    assert promote("late", candidate, root, log, force=True) == root / "late.py"


@pytest.mark.parametrize("ranking, benchmarks, scope", [
    ("last", 3, "the last benchmark case, the only one the leaderboard ranks"),
    ("", 1, "the only benchmark case"), ("", 2, "all 2 benchmark cases")])
def test_the_refusal_counts_the_cases_in_words_that_fit(candidate, root, log, monkeypatch, tmp_path, ranking,
                                                         benchmarks, scope):
    # A problem ranked by its last case (vectoradd) read "over all 1 benchmark cases", and one test "all 1 tests".
    cases = tmp_path / "cases"
    cases.mkdir()
    listed = ", ".join(f"{{size: {8 * (i + 1)}, seed: 2}}" for i in range(benchmarks))
    (cases / "late.yml").write_text(f"leaderboard: qr_v2\nranking: '{ranking}'\ntests: [{{size: 4, seed: 1}}]\n"
                                    f"benchmarks: [{listed}]\n")
    import checks.problems
    monkeypatch.setattr(checks.problems, "CASES_DIR", cases)
    with pytest.raises(PopkitError) as info:
        promote("late", candidate, root, log)
    message = str(info.value)
    assert "no GPU check of this file over the only test: run" in message
    assert f"no GPU bench of this file over {scope}: run" in message


# ---- a first incumbent: a passing GPU check and bench of the full lists ---------------------------

def test_first_incumbent_needs_gpu_check_and_bench(candidate, root, log):
    with pytest.raises(PopkitError) as info:
        promote("qr_v2", candidate, root, log)
    message = str(info.value)
    assert "the first qr_v2 incumbent" in message
    assert f"no GPU check of this file over all {len(QR.tests)} tests" in message
    assert f"`popkit check qr_v2 --submission {candidate} --log {log}` on a GPU" in message   # the log promote reads
    assert f"no GPU bench of this file over all {len(QR.benchmarks)} benchmark cases" in message
    assert not root.exists()

    evidence(log, candidate, "check")
    with pytest.raises(PopkitError) as info:
        promote("qr_v2", candidate, root, log)
    assert "no GPU check" not in str(info.value) and "no GPU bench" in str(info.value)

    bench = evidence(log, candidate, "bench")
    assert promote("qr_v2", candidate, root, log) == root / "qr_v2.py"
    assert (root / "qr_v2.py").read_bytes() == candidate.read_bytes()
    [entry] = history(root)
    assert entry["evidence"]["bench"] == bench["time"] and not entry["forced"]
    assert not (root / "archive").exists()


def test_cpu_and_partial_runs_do_not_count(candidate, root, log):
    evidence(log, candidate, "check", device="cpu", gpu="cpu")
    evidence(log, candidate, "bench", device="cpu", gpu="cpu")
    evidence(log, candidate, "bench", specs=QR.benchmarks[:3])              # a GPU run of 3 cases
    evidence(log, candidate, "check", specs=QR.tests[:-1])                  # one test short
    with pytest.raises(PopkitError) as info:
        promote("qr_v2", candidate, root, log)
    message = str(info.value)
    assert "no GPU check of this file over all 22 tests (ignored: 1 run on chosen cases only, 1 CPU run)" in message
    assert "no GPU bench of this file over all 12 benchmark cases (ignored: 1 run on chosen cases only, 1 CPU run)" \
        in message


def test_evidence_of_another_file_or_problem_does_not_count(candidate, root, log, tmp_path):
    other = tmp_path / "other.py"
    other.write_text(CANDIDATE + "# changed\n")
    for mode in ("check", "bench"):
        evidence(log, other, mode)
        evidence(log, candidate, mode, problem="eigh")
    with pytest.raises(PopkitError, match="no GPU check of this file"):
        promote("qr_v2", candidate, root, log)


def test_extra_cases_and_leaderboard_gpu_names_count(candidate, root, log):
    extra = [{**QR.tests[0], "seed": 99}]
    evidence(log, candidate, "check", specs=QR.tests + extra, device=None)   # a record with only gpu
    evidence(log, candidate, "bench")
    promote("qr_v2", candidate, root, log)
    assert (root / "qr_v2.py").is_file()


# ---- replacing an incumbent: a passing GPU diff of the full benchmark list ------------------------

def test_replacing_needs_a_full_gpu_diff(candidate, root, log):
    target = with_incumbent(root)
    evidence(log, candidate, "check")
    evidence(log, candidate, "bench")
    evidence(log, candidate, "diff", device="cpu", gpu="cpu", against=target)
    evidence(log, candidate, "diff", specs=QR.benchmarks[:1], against=target)
    with pytest.raises(PopkitError) as info:
        promote("qr_v2", candidate, root, log)
    assert str(info.value) == (
        f"cannot make {candidate} ({logs.file_sha256(candidate)[:12]}) the qr_v2 incumbent: no GPU diff of this "
        f"file over all 12 benchmark cases (ignored: 1 run on chosen cases only, 1 CPU run): run "
        f"`popkit diff qr_v2 --submission {candidate} --log {log}` on a GPU (or pass --force)")
    assert target.read_text().endswith("# the incumbent\n")

    diff = evidence(log, candidate, "diff", time="2026-12-02T00:00:00Z", against=target)
    promote("qr_v2", candidate, root, log)
    assert target.read_bytes() == candidate.read_bytes()
    assert history(root)[-1]["evidence"] == {"diff": diff["time"]}
    archived = list((root / "archive").glob("qr_v2-*.py"))
    assert [p.read_text() for p in archived] == [INCUMBENT]


def test_the_newest_full_gpu_diff_decides(candidate, root, log):
    target = with_incumbent(root)
    evidence(log, candidate, "diff", time="2026-12-01T00:00:00Z", against=target)
    evidence(log, candidate, "diff", passed=False, time="2026-12-02T00:00:00Z", against=target)
    evidence(log, candidate, "diff", specs=QR.benchmarks[:2], time="2026-12-03T00:00:00Z", against=target)   # partial
    with pytest.raises(PopkitError, match=r"the newest GPU diff of this file over all 12 benchmark cases failed "
                                          r"\(2026-12-02T00:00:00Z\)"):
        promote("qr_v2", candidate, root, log)
    assert target.read_text().endswith("# the incumbent\n")


def test_a_diff_against_another_incumbent_does_not_count(candidate, root, log, tmp_path):
    # A passing diff against a slow file (--incumbent slow.py, or the folder's reference) said nothing about the
    # incumbent it would replace, yet it was taken as the evidence to replace it.
    target = with_incumbent(root)
    slow = tmp_path / "slow.py"
    slow.write_text(CANDIDATE + "# slow\n")
    evidence(log, candidate, "diff", against=slow)
    with pytest.raises(PopkitError) as info:
        promote("qr_v2", candidate, root, log)
    assert (f"no GPU diff of this file over all 12 benchmark cases (ignored: 1 run against another incumbent than "
            f"{target.name} ({logs.file_sha256(target)[:12]})): run `popkit diff qr_v2 --submission {candidate} "
            f"--log {log}` on a GPU") in str(info.value)
    assert target.read_text().endswith("# the incumbent\n")

    diff = evidence(log, candidate, "diff", time="2026-12-02T00:00:00Z", against=target)
    promote("qr_v2", candidate, root, log)
    assert history(root)[-1]["evidence"] == {"diff": diff["time"]}


def test_force_skips_the_evidence(candidate, root, log):
    with_incumbent(root)
    promote("qr_v2", candidate, root, log, force=True)
    assert (root / "qr_v2.py").read_bytes() == candidate.read_bytes()
    assert history(root)[-1]["forced"] is True and history(root)[-1]["evidence"] == {}


def test_a_history_whose_last_line_has_no_end_keeps_both_lines(candidate, root, log):
    # The history line was appended as it was: after a last line without its newline (a hand edit, a write cut
    # short) the two became one line that is not JSON.
    root.mkdir()
    (root / "history.jsonl").write_text('{"time": "2026-12-01T00:00:00Z", "note": "by hand"}')
    promote("qr_v2", candidate, root, log, force=True)
    assert [entry.get("note", entry.get("sha256")) for entry in history(root)] == ["by hand",
                                                                                   logs.file_sha256(candidate)]


def test_the_incumbent_itself_is_refused_in_one_line(candidate, root, log, tmp_path):
    # --force archived it and ended in shutil's SameFileError; without, it asked for a GPU diff of the file
    # against itself.
    target = with_incumbent(root)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    for path in (target, root / ".." / root.name / "qr_v2.py", link):
        for force in (False, True):
            with pytest.raises(PopkitError) as info:
                promote("qr_v2", path, root, log, force=force)
            alias = "" if path == target else f" ({target})"
            assert str(info.value) == (f"{path} is the qr_v2 incumbent itself{alias}: nothing to promote; "
                                       "pass the candidate with --submission")
    assert sorted(p.name for p in root.iterdir()) == ["qr_v2.py"]          # no archive, no history line
    assert target.read_text() == INCUMBENT


def test_a_copy_of_the_incumbent_is_refused_in_one_line(candidate, root, log, tmp_path):
    # A build promoted once and its promote line (merge prints it at every merge of the run) run again: it asked for
    # a GPU diff of the file against its own copy, and --force archived the incumbent and logged a promotion.
    target = with_incumbent(root)
    copy = tmp_path / "builds" / "qr_v2.py"
    copy.parent.mkdir()
    copy.write_text(INCUMBENT)
    for force in (False, True):
        with pytest.raises(PopkitError) as info:
            promote("qr_v2", copy, root, log, force=force)
        assert str(info.value) == (f"{copy} is a copy of the qr_v2 incumbent ({target}, "
                                   f"{logs.file_sha256(target)[:12]}): nothing to promote")
    assert sorted(p.name for p in root.iterdir()) == ["qr_v2.py"] and target.read_text() == INCUMBENT


def test_incumbents_folder_follows_the_module_setting(tmp_path, monkeypatch):
    monkeypatch.setattr(promote_mod, "INCUMBENTS", tmp_path)
    assert promote_mod.incumbent_path("qr_v2") == tmp_path / "qr_v2.py"


# ---- the verb (moved here from tests/test_cli_loop.py) ---------------------------------------------

def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def bound(root, monkeypatch):
    """The CLI's promote bound to the tmp incumbents folder (the verb has no option for it)."""
    monkeypatch.setattr(promote_mod, "promote", functools.partial(promote_mod.promote, root=root))
    return root


def test_cli_refusal_is_one_line_and_force_promotes(bound, candidate, log):
    result = run("promote", "qr_v2", "--submission", candidate, "--log", log)
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("error: cannot make") and "--force" in line
    assert not bound.exists()
    result = run("promote", "qr_v2", "--submission", candidate, "--log", log, "--force")
    assert result.exit_code == 0, result.output
    assert result.output == f"promoted {candidate} -> {bound / 'qr_v2.py'}\n"


def test_cli_unknown_problem_is_one_line(bound, candidate, log):
    result = run("promote", "foo", "--submission", candidate, "--log", log, "--force")
    assert result.exit_code == 1
    assert result.output.splitlines()[0].startswith("error: unknown problem 'foo'")
    assert len(result.output.splitlines()) == 1 and not bound.exists()


def test_cli_missing_log_is_a_usage_error(bound, candidate, tmp_path):
    # It said "no GPU check of this file ...: run `popkit check` on a GPU" about a typo in the log's name.
    missing = tmp_path / "perfomance.jsonl"
    result = run("promote", "qr_v2", "--submission", candidate, "--log", missing)
    assert result.exit_code == 2
    assert f"Invalid value for '--log': File '{missing}' does not exist." in result.output
    assert not bound.exists()


@pytest.mark.parametrize("name, text, why", [
    ("candidate.py", None, "its name ends in .py"),
    ("history.jsonl", '{"problem": "qr_v2", "sha256": "ab"}\n',
     "none of its 1 record(s) is a check, bench, diff or leaderboard run (no such 'mode')"),
    ("notes.txt", "a note\n", "none of its 1 non-blank line(s) is a JSON record"),
])
def test_cli_a_log_that_is_not_an_evidence_log_is_refused_as_such(bound, candidate, tmp_path, name, text, why):
    # --log naming the candidate or promote's own history said "no GPU check of this file ...: run `popkit check
    # ... --log FILE`", a command that refuses that file.
    wrong = tmp_path / name
    if text is not None:
        wrong.write_text(text)
    result = run("promote", "qr_v2", "--submission", candidate, "--log", wrong)
    assert result.exit_code == 1 and result.output.splitlines() == [
        f"error: {wrong}: not an evidence log ({why}; a log holds one JSON record per line, like "
        "logs/performance.jsonl): nothing was promoted"]
    assert not bound.exists()


def test_cli_help_names_the_file_promote_takes():
    # The help once said an unbuilt problem's parts are built to a temporary file: promote builds nothing.
    result = run("promote", "--help")
    assert result.exit_code == 0
    assert "built to a temporary file" not in result.output and "submission.py]" in result.output


# ---- a promotion cut off half-way ---------------------------------------------------------------------

FULL_DISK = """
import resource, signal, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from popcorn.promote import promote
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)          # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    promote("qr_v2", Path({candidate!r}), Path({incumbents!r}), Path({log!r}), force=True)
except OSError as exc:
    print("failed:", exc.strerror)
"""


def test_a_promotion_that_fails_half_way_leaves_the_incumbent_whole(candidate, root, log, tmp_path):
    # shutil.copyfile wrote the new incumbent in place: a full disk (or Ctrl-C) left a truncated file, which every
    # later `popkit diff` ran against. Here the file size limit stands in for the full disk.
    import subprocess
    import sys
    target = with_incumbent(root)
    big = tmp_path / "big.py"
    big.write_text(CANDIDATE + "".join(f"# padding line {i:06d}\n" for i in range(1000)))     # ~24 KB
    script = FULL_DISK.format(root=str(promote_mod.logs.ROOT), candidate=str(big), incumbents=str(root), log=str(log))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("failed:")
    assert target.read_text() == INCUMBENT
    assert not (root / "history.jsonl").exists()
    assert sorted(p.name for p in root.iterdir()) == ["archive", "qr_v2.py"]     # no temporary file left


def test_ctrl_c_during_the_promotion_finishes_it_and_says_so(candidate, root, log, monkeypatch):
    import os
    import signal
    from popcorn.evidence import files
    with_incumbent(root)
    real = files.write_atomic

    def write_and_press_ctrl_c(path, data):
        if path == root / "qr_v2.py":
            os.kill(os.getpid(), signal.SIGINT)
        return real(path, data)
    monkeypatch.setattr(promote_mod, "write_atomic", write_and_press_ctrl_c)
    with pytest.raises(KeyboardInterrupt, match=f"interrupted: promote qr_v2 had finished; {root / 'qr_v2.py'} is "
                                                "the incumbent"):
        promote("qr_v2", candidate, root, log, force=True)
    assert (root / "qr_v2.py").read_bytes() == candidate.read_bytes()
    assert history(root)[-1]["forced"] is True


def test_a_history_that_takes_no_line_is_refused_before_the_incumbent_changes(candidate, root, log):
    # The incumbent was replaced, then the history line failed: an incumbent with no word of why. A folder in the
    # history's place stands in for a read-only file (as root, every file takes a line).
    target = with_incumbent(root)
    (root / "history.jsonl").mkdir()
    with pytest.raises(PopkitError, match=r"history.jsonl: the promotion cannot be recorded \(a folder\); nothing"):
        promote("qr_v2", candidate, root, log, force=True)
    assert target.read_text() == INCUMBENT and sorted(p.name for p in root.iterdir()) == ["history.jsonl", "qr_v2.py"]


def test_the_command_it_asks_for_writes_to_the_default_log_without_naming_it(candidate, root, monkeypatch, tmp_path):
    # The evidence goes where promote reads it: --log only when promote was given another log.
    default = tmp_path / "logs" / "performance.jsonl"
    default.parent.mkdir()
    default.write_text("")
    monkeypatch.setattr(logs, "DEFAULT_LOG", default)
    with pytest.raises(PopkitError) as info:
        promote("qr_v2", candidate, root, default)
    assert f"`popkit check qr_v2 --submission {candidate}` on a GPU" in str(info.value)
