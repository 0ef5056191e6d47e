"""popcorn.evidence.logs: the evidence log is strict JSON lines, read back whole, with bad lines named."""
from __future__ import annotations

import json
import math
import re
import subprocess

import pytest

from popcorn.evidence import logs

CONTRACT = ("time", "problem", "mode", "commit", "submission_sha256", "gpu", "torch", "cuda", "compile_s",
            "cases", "geomean_us", "baseline_geomean_us", "baseline")


def refuse(name):
    raise ValueError(f"non-strict JSON constant {name}")


def test_append_and_read_round_trip(tmp_path):
    path = tmp_path / "deep" / "perf.jsonl"          # the folder is created on first append
    first = logs.new_record("qr_v2", "check", submission_sha256="ab" * 32, cases=[{"spec": {"n": 8}, "status": "pass"}])
    second = logs.new_record("eigh", "bench", geomean_us=12.5, extra={"nested": [1, 2.5, None]})
    assert logs.append_record(first, path) == path
    logs.append_record(second, path)
    records, problems = logs.read_records(path)
    assert problems == []
    assert records == [first, second]
    assert len(path.read_text().splitlines()) == 2


def test_a_record_appended_after_a_line_without_an_end_is_a_line_of_its_own(tmp_path):
    # A log whose last line was cut short ('{"time": ...' of a killed write, or a hand edit without the final
    # newline): the next record was glued onto it, and the reader lost both as one line that is not JSON.
    path = tmp_path / "perf.jsonl"
    kept = logs.new_record("qr_v2", "check")
    path.write_text(json.dumps(kept) + "\n" + '{"time": "2026-')
    record = logs.new_record("eigh", "bench", geomean_us=1.0)
    logs.append_record(record, path)
    records, problems = logs.read_records(path)
    assert records == [kept, record]
    assert len(problems) == 1 and ":2:" in problems[0]
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == 3


def test_new_record_has_the_contract_keys_in_order():
    record = logs.new_record("qr_v2", "diff", gpu="NVIDIA H200")
    assert tuple(record)[:len(CONTRACT)] == CONTRACT
    assert record["mode"] == "diff" and record["gpu"] == "NVIDIA H200" and record["cases"] == []
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["time"])
    with pytest.raises(ValueError, match="unknown log mode"):
        logs.new_record("qr_v2", "timing")


def test_non_finite_values_become_null(tmp_path):
    path = tmp_path / "perf.jsonl"
    record = {"a": math.inf, "b": -math.inf, "c": math.nan, "d": 1.5,
              "cases": [{"residuals": {"factor": [math.inf, 20.0]}, "pair": (math.nan, 2)}]}
    logs.append_record(record, path)
    line = path.read_text()
    assert line.endswith("\n") and line.count("\n") == 1
    value = json.loads(line, parse_constant=refuse)       # strict: no NaN / Infinity tokens
    assert value == {"a": None, "b": None, "c": None, "d": 1.5,
                     "cases": [{"residuals": {"factor": [None, 20.0]}, "pair": [None, 2]}]}
    assert record["a"] == math.inf                         # the caller's record is not modified


def test_strict_json_leaves_other_values_alone():
    value = {"s": "inf", "i": 3, "n": None, "t": True, "l": [0.0, -0.0, 1e308]}
    assert logs.strict_json(value) == value


def test_corrupt_lines_are_reported_with_their_line_numbers(tmp_path):
    path = tmp_path / "perf.jsonl"
    good = logs.new_record("qr_v2", "check")
    logs.append_record(good, path)
    with open(path, "a") as handle:
        handle.write('{"time": "2026-01-01T00:00:00Z", "problem": \n')   # line 2: torn write
        handle.write("\n")                                                # line 3: blank, ignored
        handle.write("[1, 2, 3]\n")                                       # line 4: not an object
    logs.append_record(good, path)                                        # line 5
    records, problems = logs.read_records(path)
    assert records == [good, good]
    assert len(problems) == 2
    assert problems[0].startswith(f"{path}:2: not JSON")
    assert problems[1] == f"{path}:4: not a JSON object"


def test_a_non_utf8_line_is_reported_not_raised(tmp_path):
    path = tmp_path / "perf.jsonl"
    logs.append_record(logs.new_record("qr_v2", "check"), path)
    with open(path, "ab") as handle:
        handle.write(b'{"gpu": "caf\xe9"}\n')
    records, problems = logs.read_records(path)
    assert len(records) == 1
    assert len(problems) == 1 and problems[0].startswith(f"{path}:2:")


def test_missing_log_reads_as_empty(tmp_path):
    assert logs.read_records(tmp_path / "nothing.jsonl") == ([], [])


def test_file_sha256(tmp_path):
    path = tmp_path / "f.py"
    path.write_bytes(b"abc")
    assert logs.file_sha256(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


# ---------------------------------------------------------------- commit

def test_git_commit_inside_git(monkeypatch):
    monkeypatch.delenv("POPKIT_COMMIT", raising=False)
    commit = logs.git_commit()
    assert commit is not None and re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit), commit


def git_repo_with_a_nested_copy(tmp_path):
    """A git work tree at tmp_path/outer with one commit, and a plain folder inside it (a copy of a tree)."""
    outer = tmp_path / "outer"
    (outer / "inner").mkdir(parents=True)
    for args in (["init", "-q"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty",
                                  "-m", "base"]):
        subprocess.run(["git", *args], cwd=outer, check=True, capture_output=True)
    return outer, outer / "inner"


def test_popkit_commit_wins_over_a_stale_git(tmp_path, monkeypatch):
    """A GPU host's copy can carry an older .git of its own: the commit the caller names is the truth."""
    outer, _ = git_repo_with_a_nested_copy(tmp_path)
    monkeypatch.setenv("POPKIT_COMMIT", "abcd1234" * 5)
    assert logs.git_commit(outer) == "abcd1234" * 5


def test_a_copy_nested_in_another_checkout_does_not_report_that_checkouts_commit(tmp_path, monkeypatch):
    outer, inner = git_repo_with_a_nested_copy(tmp_path)
    monkeypatch.delenv("POPKIT_COMMIT", raising=False)
    assert re.fullmatch(r"[0-9a-f]{40}", logs.git_commit(outer))
    assert logs.git_commit(inner) is None


def test_git_commit_outside_git_falls_back_to_popkit_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.setenv("POPKIT_COMMIT", "1234abcd" * 5)
    assert logs.git_commit(tmp_path) == "1234abcd" * 5
    monkeypatch.delenv("POPKIT_COMMIT")
    assert logs.git_commit(tmp_path) is None


def test_git_commit_without_git_installed_falls_back(monkeypatch):
    def no_git(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "git")
    monkeypatch.setattr(subprocess, "run", no_git)
    monkeypatch.setenv("POPKIT_COMMIT", "cafe" * 10)
    assert logs.git_commit() == "cafe" * 10


def test_record_commit_uses_the_fallback(monkeypatch):
    def failing(cmd, **kwargs):
        raise subprocess.CalledProcessError(128, cmd, stderr="fatal: not a git repository")
    monkeypatch.setattr(subprocess, "run", failing)
    monkeypatch.setenv("POPKIT_COMMIT", "feed" * 10)
    assert logs.new_record("eigh", "check")["commit"] == "feed" * 10


# ---------------------------------------------------------------- where a record ran, what it covers

def test_records_say_where_they_ran():
    assert logs.new_record("qr_v2", "check")["device"] is None
    cpu = logs.new_record("qr_v2", "check", device="cpu")
    assert cpu["gpu"] == "cpu" and not logs.ran_on_gpu(cpu)
    gpu = logs.new_record("qr_v2", "check", device="cuda:1", gpu="NVIDIA H200")
    assert logs.ran_on_gpu(gpu)


@pytest.mark.parametrize("fields, on_gpu", [
    ({"device": "cuda", "gpu": "NVIDIA H200"}, True),
    ({"device": "cpu", "gpu": "NVIDIA H200"}, False),        # the torch device decides when it is there
    ({"gpu": "B200"}, True),                                  # a leaderboard record names only the server GPU
    ({"gpu": "cpu"}, False),
    ({"gpu": "CPU"}, False),
    ({"gpu": None}, False),
    ({}, False),
])
def test_ran_on_gpu(fields, on_gpu):
    assert logs.ran_on_gpu(fields) is on_gpu


def test_covers_needs_every_spec_in_any_key_order():
    a, b = {"size": 8, "seed": 1}, {"size": 16, "seed": 2}
    record = {"cases": [{"spec": {"seed": 2, "size": 16}}, {"spec": a}, {"spec": {"size": 8, "seed": 9}}, "junk"]}
    assert logs.covers(record, [a, b]) and logs.covers(record, [])
    assert not logs.covers(record, [a, b, {"size": 32, "seed": 3}])
    assert not logs.covers({"cases": None}, [a])


def test_record_passed_uses_the_verdict_then_the_cases():
    assert logs.record_passed({"passed": True, "cases": []})
    assert not logs.record_passed({"passed": False, "cases": [{"status": "pass"}]})
    assert logs.record_passed({"cases": [{"status": "pass"}]})
    assert not logs.record_passed({"cases": [{"status": "pass"}, {"status": "fail"}]})
    assert not logs.record_passed({"cases": []})


def test_a_log_of_only_cut_short_records_says_so_and_how_to_use_it(tmp_path):
    # A run killed while writing its record left '{"time": "2026-...' alone in the file: the refusal said no line
    # was a JSON record, as for notes.txt, without naming the cut line or the way out.
    log = tmp_path / "perf.jsonl"
    log.write_text('{"time": "2026-12-02T05:00:00Z", "problem": "qr_v2", "mode": "be')
    assert logs.not_a_log(log) == ("its 1 non-blank line(s) start as JSON records but none is whole (cut short?): "
                                   "delete them to use it as a log")
    log.write_text('{"time": "2026-12-02T05:00:00Z", "mode": "be\n# a note\n')
    assert logs.not_a_log(log) == "none of its 2 non-blank line(s) is a JSON record"
    log.write_text('{"time": "2026-12-02T05:00:00Z", "mode": "bench"}\n{"time": "2026-12-02T05:01')
    assert logs.not_a_log(log) is None                  # a real log with a torn last line stays a log
