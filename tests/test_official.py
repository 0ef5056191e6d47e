"""checks.official: the official eval.py protocol, driven by a fake problem folder (CPU, no torch in the fake)."""
import textwrap

import pytest

from checks import official
from checks.problems import format_spec
from checks.runner import RunOutcome, case_record, results_table
from popcorn.errors import PopkitError

# Mimics the grader's eval.py: POPCORN_FD, `eval.py test CASES_FILE`, key: value lines, exit 0/111/112/113.
FAKE_EVAL = textwrap.dedent('''
    import os, shutil, sys
    from submission import custom_kernel

    if "POPCORN_FD" not in os.environ:
        sys.exit(111)
    out = os.fdopen(int(os.environ["POPCORN_FD"]), "w")
    mode, cases_file = sys.argv[1:]
    if os.environ.get("FAKE_CASES_COPY"):
        shutil.copyfile(cases_file, os.environ["FAKE_CASES_COPY"])
    lines = [line.strip() for line in open(cases_file) if line.strip()]
    print(f"test-count: {len(lines)}", file=out)
    passed = True
    for i, line in enumerate(lines):
        spec = {k.strip(): int(v) if v.strip().isdigit() else v.strip()
                for k, _, v in (part.partition(":") for part in line.split(";"))}
        print(f"test.{i}.spec: {line}", file=out)
        error = custom_kernel(spec)
        if error:
            passed = False
            print(f"test.{i}.status: fail", file=out)
            print(f"test.{i}.error: {error}", file=out)
        else:
            print(f"test.{i}.status: pass", file=out)
            print(f"test.{i}.message: seed {os.environ.get('POPCORN_SEED')}", file=out)
    print(f"check: {'pass' if passed else 'fail'}", file=out)
    sys.exit(0 if passed else 112)
''')
SUBMISSION = textwrap.dedent('''
    def custom_kernel(spec):
        return "residual 310.2 > 100" if spec["n"] == 13 else None
''')
SPECS = [{"batch": 2, "n": 8, "cond": 1, "seed": 1, "case": "dense"},
         {"batch": 4, "n": 13, "cond": 3, "seed": 7, "case": "mixed"}]


@pytest.fixture
def problem_dir(tmp_path):
    folder = tmp_path / "qr_v2"
    folder.mkdir()
    (folder / "eval.py").write_text(FAKE_EVAL)
    for name in ("reference.py", "task.py", "utils.py"):
        (folder / name).write_text("# dummy\n")
    return folder


@pytest.fixture
def submission(tmp_path):
    path = tmp_path / "my_kernel.py"
    path.write_text(SUBMISSION)
    return path


def outcome_for(specs):
    results = [{"spec": spec, "status": "pass", "error": None, "residuals": {"orth": [1.5, 100.0]}}
               for spec in specs]
    record = {"problem": "qr_v2", "mode": "check", "cases": [case_record(r) for r in results], "passed": True}
    return RunOutcome(record, results_table(results, "check"), True, ["a note of ours"])


def test_all_cases_pass_and_merge_adds_an_official_column(problem_dir, submission):
    outcome = outcome_for(SPECS[:1])
    result = official.run_official(problem_dir, submission, outcome.record, timeout_s=30)
    assert result.exit_code == 0 and result.check == "pass" and result.passed
    assert result.cases == [{"spec": format_spec(SPECS[0]), "status": "pass", "message": "seed None"}]
    assert result.prerun_error is None

    merged = official.merge(outcome, result)
    assert merged.passed and merged.notes == ["a note of ours"]
    header = merged.table.splitlines()[0].split()
    assert header[-2:] == ["official", "error"] and "orth" in header
    assert merged.table.splitlines()[2].split()[-1] == "pass"
    assert merged.record["official"] == {"check": "pass", "exit_code": 0, "prerun_error": None,
                                         "cases": result.cases}
    assert "official" not in outcome.record


def test_one_failing_case_fails_the_merged_run(problem_dir, submission):
    outcome = outcome_for(SPECS)
    result = official.run_official(problem_dir, submission, outcome.record, timeout_s=30)
    assert result.exit_code == 112 and result.check == "fail" and not result.passed
    assert [c["status"] for c in result.cases] == ["pass", "fail"]
    assert result.cases[1]["message"] == "residual 310.2 > 100"

    merged = official.merge(outcome, result)
    assert not merged.passed
    assert merged.notes[1:] == ["official: 4x13 mixed c3 failed: residual 310.2 > 100"]
    assert [row.split()[-1] for row in merged.table.splitlines()[2:]] == ["pass", "fail"]


def test_cases_file_holds_our_specs_and_popcorn_seed_passes_through(problem_dir, submission, tmp_path,
                                                                    monkeypatch):
    copy = tmp_path / "cases_seen.txt"
    monkeypatch.setenv("FAKE_CASES_COPY", str(copy))
    monkeypatch.setenv("POPCORN_SEED", "4242")
    result = official.run_official(problem_dir, submission, outcome_for(SPECS).record, timeout_s=30)
    assert copy.read_text() == "".join(format_spec(spec) + "\n" for spec in SPECS)
    assert result.cases[0]["message"] == "seed 4242"


def test_missing_eval_py_is_one_clear_error(problem_dir, submission):
    (problem_dir / "eval.py").unlink()
    with pytest.raises(PopkitError, match="no eval.py"):
        official.run_official(problem_dir, submission, outcome_for(SPECS).record, timeout_s=30)


def test_a_hanging_eval_py_is_reported_as_timed_out(problem_dir, submission):
    (problem_dir / "eval.py").write_text("import time\ntime.sleep(60)\n")
    outcome = outcome_for(SPECS)
    result = official.run_official(problem_dir, submission, outcome.record, timeout_s=0.5)
    assert result.exit_code == official.TIMEOUT_EXIT and result.cases == [] and not result.passed

    merged = official.merge(outcome, result)
    assert not merged.passed
    assert "official eval.py timed out after 0.5 s" in merged.notes
    assert [row.split()[-1] for row in merged.table.splitlines()[2:]] == ["-", "-"]


def test_a_failing_pre_run_is_a_note_not_a_failure(problem_dir, submission):
    submission.write_text(SUBMISSION + 'if __name__ == "__main__":\n    raise SystemExit("boom at pre-run")\n')
    outcome = outcome_for(SPECS[:1])
    result = official.run_official(problem_dir, submission, outcome.record, timeout_s=30)
    assert result.prerun_error == "exit code 1: boom at pre-run" and result.passed

    merged = official.merge(outcome, result)
    assert merged.passed
    assert merged.notes[1:] == ["official pre-run of submission.py failed (exit code 1: boom at pre-run); "
                                "eval.py ran anyway"]


def test_a_bad_case_file_exit_names_its_meaning():
    result = official.OfficialResult(cases=[], check=None, exit_code=113, stderr_tail="Traceback\nValueError: bad\n")
    merged = official.merge(outcome_for(SPECS[:1]), result)
    assert not merged.passed
    assert merged.notes[1:] == ["official eval.py reported 0 cases, popkit ran 1",
                                "official eval.py exit code 113 (bad case file): ValueError: bad"]


def test_spec_mismatches_are_notes():
    other = {**SPECS[0], "seed": 99}
    result = official.OfficialResult(cases=[{"spec": format_spec(other), "status": "pass", "message": None}],
                                     check="pass", exit_code=0, stderr_tail="")
    merged = official.merge(outcome_for(SPECS[:1]), result)
    assert merged.passed
    assert merged.notes[1:] == [f"official case 0 is {format_spec(other)!r}, popkit's is {format_spec(SPECS[0])!r}"]
