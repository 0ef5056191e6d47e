"""popcorn.client.results: flat result dicts -> per-case records, tables, verdicts and evidence logs."""
import base64
import json
import math

import pytest

from popcorn.client import results
from popcorn.errors import PopkitError
from popcorn.evidence import logs
from popcorn.evidence.logs import read_records
from popcorn.evidence.tables import printable, render_table

BENCH = {
    "benchmark-count": "2",
    "benchmark.0.spec": "batch: 20; n: 32; cond: 1; seed: 43214",
    "benchmark.0.runs": "200", "benchmark.0.mean": "48211.7", "benchmark.0.std": "903.1",
    "benchmark.0.err": "63.9", "benchmark.0.best": "47105.0", "benchmark.0.worst": "55012.0",
    "benchmark.1.spec": "batch: 640; n: 512; cond: 2; seed: 1029; case: mixed",
    "benchmark.1.runs": "57", "benchmark.1.mean": "1234500", "benchmark.1.err": "1200",
    "benchmark.1.best": "1220000", "benchmark.1.worst": "1300000",
    "check": "pass",
}
TESTS_ONE_FAILING = {
    "test-count": "3",
    "test.0.spec": "batch: 2; n: 8; cond: 1; seed: 1", "test.0.status": "pass",
    "test.1.spec": "batch: 2; n: 64; cond: 3; seed: 2", "test.1.status": "fail",
    "test.1.error": "orthogonality residual 310.2 > 100",
    "test.2.spec": "size: weird", "test.2.status": "pass",
    "check": "fail",
}


QR = results.result_problem("qr_v2").record


def run(mode, passed=True, secret=False, score=None, result=None, runner="B200"):
    return {"mode": mode, "secret": secret, "runner": runner, "passed": passed, "score": score,
            "result": result}


def submission(runs, status="succeeded", error=None, code="import torch\n"):
    return {"id": 7, "leaderboard_name": "qr_v2", "file_name": "submission.py", "user_id": "42",
            "done": True, "code": code, "runs": runs, "job": {"status": status, "error": error}}


def test_benchmark_cases_are_in_microseconds_with_parsed_specs():
    cases = results.parse_cases(BENCH, "benchmark", QR)
    assert [c["status"] for c in cases] == ["pass", "pass"]
    first = cases[0]
    assert first["spec"] == {"batch": 20, "n": 32, "cond": 1, "seed": 43214, "case": "dense"}
    assert first["mean_us"] == pytest.approx(48.2117)
    assert (first["err_us"], first["best_us"], first["worst_us"]) == pytest.approx((0.0639, 47.105, 55.012))
    assert first["runs"] == 200 and first["error"] is None
    assert first["baseline_us"] is None and first["residuals"] == {}
    assert cases[1]["spec"]["case"] == "mixed" and cases[1]["mean_us"] == pytest.approx(1234.5)


def test_test_cases_keep_failures_and_unparseable_specs():
    cases = results.parse_cases(TESTS_ONE_FAILING, "test", QR)
    assert [c["status"] for c in cases] == ["pass", "fail", "pass"]
    assert cases[1]["error"] == "orthogonality residual 310.2 > 100"
    assert cases[2]["spec"] == {"raw": "size: weird"}
    assert all(c["mean_us"] is None for c in cases)


def test_cases_the_harness_never_reported_count_as_failures():
    # leaderboard mode stops at the first failing benchmark: later cases have no lines
    result = {"benchmark-count": "3", "benchmark.0.spec": "batch: 1; n: 8; cond: 1; seed: 1",
              "benchmark.0.mean": "1000", "benchmark.1.spec": "batch: 1; n: 9; cond: 1; seed: 1",
              "benchmark.1.status": "fail", "benchmark.1.error": "mismatch", "check": "fail"}
    cases = results.parse_cases(result, "benchmark")
    assert [(c["status"], c["error"]) for c in cases] == [
        ("pass", None), ("fail", "mismatch"), ("fail", "no result reported")]
    assert logs.case_geomean(cases) is None


def test_geomean():
    assert logs.case_geomean(results.parse_cases(BENCH, "benchmark")) == pytest.approx(
        math.sqrt(48.2117 * 1234.5))
    assert logs.case_geomean([]) is None


def test_render_cases_shows_every_case():
    table = results.render_cases(results.parse_cases(BENCH, "benchmark", QR) + results.parse_cases(
        TESTS_ONE_FAILING, "test", QR))
    assert "20x32 dense c1" in table and "640x512 mixed c2" in table
    assert "48.2" in table and "1,234" in table and "orthogonality residual" in table
    assert "mean us" in table.splitlines()[0]


def test_scores_come_from_the_leaderboard_runs_as_numbers():
    outcome = results.parse_submission(submission([
        run("test"), run("benchmark", result=BENCH), run("leaderboard", score="0.000144590"),
        run("test", secret=True), run("benchmark", secret=True),
        run("leaderboard", secret=True, score=0.00015)]))
    assert outcome.score_s(False) == pytest.approx(0.00014459)
    assert outcome.score_s(True) == pytest.approx(0.00015)
    assert outcome.run_mode == "leaderboard" and outcome.gpu == "B200"
    assert outcome.cases[0]["mean_us"] == pytest.approx(48.2117)
    assert outcome.failures("leaderboard") == []
    text = results.render_outcome(outcome)
    assert "ranked score (public): 144.590 us" in text and "ranked score (secret): 150.000 us" in text
    assert "geomean " in text


@pytest.mark.parametrize("runs, status, error, mode, expected", [
    ([run("test", passed=False, result=TESTS_ONE_FAILING)], "succeeded", None, "test",
     ["test run on B200 did not pass"]),
    ([run("test"), run("benchmark"), run("leaderboard", score="1e-4")], "failed",
     "secret validation failed on B200", "leaderboard",
     ["job failed: secret validation failed on B200"]),
    ([run("test"), run("benchmark"), run("leaderboard", score="1e-4")], "succeeded", None, "leaderboard",
     ["no leaderboard (secret) run was stored"]),
    ([], "succeeded", None, "benchmark", ["no runs were stored (the runner itself failed)"]),
    ([run("test")], "succeeded", None, "benchmark", ["no benchmark run was stored"]),
    ([run("benchmark", result=BENCH)], "hacked", None, "benchmark", ["job hacked"]),
    ([], "timed_out", None, "test", ["job timed_out", "no runs were stored"]),
])
def test_failures_name_every_reason(runs, status, error, mode, expected):
    assert results.parse_submission(submission(runs, status, error)).failures(mode) == expected


def test_logged_record_follows_the_evidence_contract(tmp_path):
    outcome = results.parse_submission(submission([run("benchmark", result=BENCH)]))
    raw_path = results.save_raw(b'{"id": 7}', "7.json", tmp_path / "logs" / "leaderboard")
    log = tmp_path / "logs" / "performance.jsonl"
    results.log_outcome(outcome, "benchmark", raw_path, log)
    [record], problems = read_records(log)
    assert problems == []
    assert record["problem"] == "qr_v2" and record["mode"] == "leaderboard" and record["gpu"] == "B200"
    assert record["run_mode"] == "benchmark" and record["submission_id"] == 7
    assert record["raw_result"] == "logs/leaderboard/7.json"
    assert record["public_score_s"] is None and record["secret_score_s"] is None
    assert record["geomean_us"] == pytest.approx(math.sqrt(48.2117 * 1234.5))
    assert len(record["submission_sha256"]) == 64
    assert [c["spec"]["n"] for c in record["cases"]] == [32, 512]


def test_save_raw_replaces_atomically(tmp_path):
    path = results.save_raw(b"old", "7.json", tmp_path)
    results.save_raw(b"new", "7.json", tmp_path)
    assert path.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["7.json"]


def test_progress_line_shows_status_and_queue():
    line = results.describe_progress({"id": 7, "job": {"status": "pending"}, "runner_queue": {
        "gpu": "B200", "queued_jobs": 3, "running_jobs": None, "available_runners": 2}})
    assert line == "submission 7: pending; B200 queue: 3 queued, 2 runners available"


RANKING = [
    {"rank": 1, "user_name": "ada", "user_id": "1", "submission_id": 11, "submission_score": 0.0001},
    {"rank": 2, "user_name": "me", "user_id": "42", "submission_id": 12, "submission_score": 0.000125},
    {"rank": 3, "user_name": "bob", "user_id": "3", "submission_id": 13, "submission_score": 0.0002},
]


def test_ranking_shows_my_rank_and_gap_to_first():
    text = results.render_ranking(RANKING, me="42")
    assert "you: rank 2 of 3, 125.0 us, 25.0 us behind first (+25.0%)" in text
    assert "<- you" in [line for line in text.splitlines() if "me" in line.split()][0]


def test_ranking_beyond_the_limit_still_shows_my_row():
    text = results.render_ranking(RANKING, me="3", limit=1)
    assert "ada" in text and "bob" in text and "me " not in text
    assert "(1 more not shown)" in text and "you: rank 3 of 3" in text


def test_ranking_first_place_shows_the_lead():
    assert "you: rank 1 of 3, 100.0 us, 25.0 us ahead of second" in results.render_ranking(RANKING, me="1")
    assert "you: not on this ranking" in results.render_ranking(RANKING, me="99")


def test_specs_of_an_unknown_leaderboard_are_generic():
    assert results.result_problem("no_such_board").record is None
    [case] = results.parse_cases({"test-count": "1", "test.0.spec": "size: 4096; seed: 7",
                                  "test.0.status": "pass", "check": "pass"}, "test")
    assert case["spec"] == {"size": 4096, "seed": 7}



# -- the problem a result belongs to ---------------------------------------------------------

@pytest.fixture
def boards(tmp_path, monkeypatch):
    """Records in tmp_path: qr_v2 (the native problem) on board qr_board, and two problems sharing board pair_v1."""
    from checks import problems
    qr_v2 = problems.record_path("qr_v2").read_text()
    monkeypatch.setattr(problems, "CASES_DIR", tmp_path / "cases")
    problems.CASES_DIR.mkdir()
    (problems.CASES_DIR / "qr_v2.yml").write_text(qr_v2.replace("leaderboard: qr_v2", "leaderboard: qr_board"))
    for name in ("one", "two"):
        (problems.CASES_DIR / f"{name}.yml").write_text("leaderboard: pair_v1\ntests: [{size: 1}]\n"
                                                        "benchmarks: [{size: 2}]\n")
    return problems.CASES_DIR


def built(problem: str, board: str = "pair_v1") -> str:
    """The head of a file popkit built from parts/PROBLEM for BOARD."""
    return f"#!POPCORN leaderboard {board}\n#!POPCORN gpu B200\n# Built by popkit from parts/{problem}: do not edit\n"


def test_a_native_problems_result_on_a_board_of_its_own_is_logged_and_read_as_that_problem(boards, tmp_path):
    # Logged under the board (qr_board), its specs were read without qr_v2's record: the default `case: dense`
    # was missing, so the same case never matched its check and bench records.
    outcome = results.parse_submission({**submission([run("benchmark", result=BENCH)]), "leaderboard_name": "qr_board"})
    assert outcome.problem.name == "qr_v2" and outcome.problem.note is None
    assert outcome.cases[0]["spec"] == {"batch": 20, "n": 32, "cond": 1, "seed": 43214, "case": "dense"}
    log = tmp_path / "logs" / "performance.jsonl"
    record = results.log_outcome(outcome, "benchmark", tmp_path / "logs" / "leaderboard" / "7.json", log)
    assert (record["problem"], record["leaderboard"]) == ("qr_v2", "qr_board")
    assert logs.record_problem(record) is None


@pytest.mark.parametrize("board, code, name, has_record, note", [
    ("pair_v1", built("two"), "two", True, None),                 # the file's own problem, of those on the board
    ("pair_v1", built("three"), "pair_v1", False, "board pair_v1 serves one, two and the submitted file's"),
    ("pair_v1", "import torch\n", "pair_v1", False, "board pair_v1 serves one, two"),
    ("qr_board", built("one", "qr_board"), "qr_v2", True, None),  # a file of another board's problem: the board's
    ("qr_v2", "", "qr_v2", False, "no problem's record names board qr_v2"),    # qr_v2's record names another board
])
def test_the_problem_a_result_is_logged_under(boards, board, code, name, has_record, note):
    found = results.result_problem(board, code)
    assert found.name == name and (found.record is not None) == has_record
    assert (found.note is None) if note is None else found.note.startswith(note)
    assert found.record is None or found.record.name == name


def test_a_problem_whose_record_cannot_be_read_still_owns_its_boards_result(boards):
    (boards / "two.yml").write_text("leaderboard: pair_v1\ntests: []\n")
    found = results.result_problem("pair_v1", built("two"))
    assert (found.name, found.record) == ("two", None)
    assert found.note.endswith("a problem record needs non-empty 'tests' and 'benchmarks' lists: the case specs "
                               "are read without it")


# -- runs that ended early (crash or timeout) ------------------------------------------------

def test_a_run_that_stopped_part_way_keeps_its_reported_cases_and_says_where_it_stopped():
    result = {"test-count": "3", "test.0.spec": "batch: 2; n: 8; cond: 1; seed: 1", "test.0.status": "pass",
              "test.1.spec": "batch: 2; n: 64; cond: 3; seed: 2"}
    outcome = results.parse_submission(submission([run("test", passed=False, result=result)]))
    [stopped] = outcome.runs
    assert [c["status"] for c in stopped.tests] == ["pass"]
    reason = ("test run on B200 stopped after 1 of 3 cases, during case 2x64 dense c3 "
              "(a crash or a timeout; the server does not return its log)")
    assert outcome.failures("test") == [reason]
    text = results.render_outcome(outcome)
    assert "no result reported" not in text and "the run stopped after 1 of 3 cases" in text


@pytest.mark.parametrize("result", [{}, {"benchmark-count": "12"}])
def test_a_run_with_no_results_says_so_once(result):
    outcome = results.parse_submission(submission([run("benchmark", passed=False, result=result)]))
    assert outcome.runs[0].benchmarks == []
    assert outcome.failures("benchmark") == [
        "benchmark run on B200 produced no results (a crash or a timeout; the server does not return its log)"]
    assert results.render_outcome(outcome).count("produced no results") == 1


def test_runs_without_a_result_or_with_their_check_line_did_not_stop_early():
    # the server never sends the result of secret runs; leaderboard mode stops at a failure but writes `check`
    failed = {"benchmark-count": "2", "benchmark.0.spec": "batch: 1; n: 8; cond: 1; seed: 1",
              "benchmark.0.status": "fail", "benchmark.0.error": "mismatch", "check": "fail"}
    outcome = results.parse_submission(submission([run("benchmark", passed=False, result=failed),
                                                   run("benchmark", passed=False, secret=True)]))
    assert [r.stopped for r in outcome.runs] == [None, None]
    assert [c["error"] for c in outcome.runs[0].benchmarks] == ["mismatch", "no result reported"]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind, passed", [("test", True), ("test", False), ("benchmark", True)])
def test_a_result_claiming_a_huge_case_count_is_refused_in_one_line(kind, passed):
    # 10**12 cases: parsing looped over every index (for hours) before showing anything.
    result = {f"{kind}-count": str(10**12), f"{kind}.0.spec": "batch: 1; n: 8; cond: 1; seed: 1",
              f"{kind}.0.status": "pass", **({"check": "pass"} if passed else {})}
    with pytest.raises(PopkitError) as info:
        results.parse_submission(submission([run(kind, passed=passed, result=result)]))
    assert str(info.value) == (f"the result claims 1,000,000,000,000 {kind} cases, more than popkit reads "
                               f"({results.MAX_CASES:,}): it cannot be a run's result")


def test_a_profile_result_claiming_a_huge_case_count_is_refused_in_one_line(tmp_path):
    raw = profile_raw({"benchmark-count": str(10**12), "check": "pass"})
    with pytest.raises(PopkitError, match="claims 1,000,000,000,000 benchmark cases"):
        results.save_profile(raw, tmp_path)
    assert (tmp_path / "result.json").read_text() == raw


def test_result_values_of_another_json_kind_are_read_as_their_text(tmp_path):
    # A spec sent as a number or an object ended in "AttributeError: 'int' object has no attribute 'split'" (a
    # traceback, after the reply was saved); a report sent as a number in a TypeError.
    result = {"test-count": "3", "test.0.spec": 5, "test.0.status": "fail", "test.0.error": ["not", "text"],
              "test.1.spec": {"n": 8}, "test.1.status": "pass", "test.2.spec": 7}
    outcome = results.parse_submission(submission([run("test", passed=False, result=result)]))
    [stopped] = outcome.runs
    assert [(c["spec"], c["status"], c["error"]) for c in stopped.tests] == [
        ({"raw": "5"}, "fail", "['not', 'text']"), ({"raw": "{'n': 8}"}, "pass", None)]
    assert stopped.stopped.startswith("stopped after 2 of 3 cases, during case 7 (")
    assert "case 7" in results.render_outcome(outcome)
    profile = results.save_profile(profile_raw({"benchmark-count": "1", "benchmark.0.spec": 9,
                                                "benchmark.0.report": 12345, "check": "pass"}), tmp_path)
    assert profile.runs[0].reports == ["12345"] and profile.runs[0].cases[0]["spec"] == {"raw": "9"}


def test_a_long_job_error_stays_on_one_line():
    # A traceback as the job's error spread over the title and the FAIL line, thousands of characters long.
    error = "Traceback (most recent call last):\n  File x\nRuntimeError: " + "boom " * 1000
    outcome = results.parse_submission(submission([], status="failed", error=error))
    title = results.render_outcome(outcome).splitlines()[0]
    [reason, _] = outcome.failures("test")
    assert title.startswith("submission 7: qr_v2, submission.py, job failed (Traceback (most recent call last): "
                            "File x RuntimeError: boom boom") and title.endswith("...)") and len(title) < 400
    assert reason.startswith("job failed: Traceback") and "\n" not in reason and len(reason) < 400


# -- the evidence log ------------------------------------------------------------------------

def test_a_submission_is_logged_once_however_often_it_is_followed(tmp_path):
    outcome = results.parse_submission(submission([run("benchmark", result=BENCH)]))
    raw_path = results.save_raw(b"{}", "7.json", tmp_path / "logs" / "leaderboard")
    log = tmp_path / "logs" / "performance.jsonl"
    assert results.log_outcome(outcome, "benchmark", raw_path, log) is not None
    assert results.log_outcome(outcome, "benchmark", raw_path, log) is None
    other = results.parse_submission({**submission([run("benchmark", result=BENCH)]), "id": 8})
    assert results.log_outcome(other, "benchmark", raw_path, log)["submission_id"] == 8
    assert [r["submission_id"] for r in read_records(log)[0]] == [7, 8]


def test_leaderboards_mark_closed_boards():
    text = results.render_leaderboards([{"name": "open_one", "gpu_types": ["B200"], "visibility": "public"},
                                        {"name": "secret_one", "gpu_types": ["H100"], "visibility": "closed"}])
    rows = {line.split()[0]: line.split()[1] for line in text.splitlines()[2:4]}
    assert rows == {"open_one": "open", "secret_one": "closed"}
    assert "`popkit join CODE`" in text
    assert "join" not in results.render_leaderboards([{"name": "open_one", "visibility": "public"}])


# -- profile runs ----------------------------------------------------------------------------

def encoded_report(text: str) -> str:
    """As eval.py writes it: base64 with '+*' for the last two characters."""
    return base64.b64encode(text.encode(), b"+*").decode()


def profile_raw(result, passed=True, success=True, error="", **run_fields):
    return json.dumps({"status": "success", "reports": ["**B200 on Modal**"], "results": [{
        "success": success, "error": error, "runs": {} if not success else {"profile.0": {
            "run": {"passed": passed, "result": result, **run_fields},
            "profile": {"profiler": "Nsight-Compute", "trace": base64.b64encode(b"PK zip").decode()}}}}]})


def test_profile_result_saves_report_and_trace(tmp_path):
    report = "ncu: 12 kernels; dram??? 3.1 GB/s"   # its base64 holds a '/', written as '*'
    assert "*" in encoded_report(report)
    raw = profile_raw({"benchmark-count": "1", "benchmark.0.spec": "batch: 20; n: 32; cond: 1; seed: 43214",
                       "benchmark.0.report": encoded_report(report), "check": "pass"})
    profile = results.save_profile(raw, tmp_path / "p", QR)
    [run] = profile.runs
    assert profile.ok and run.passed and run.label == "result0_profile.0"
    assert [(c["status"], c["error"]) for c in run.cases] == [("pass", None)]
    assert run.reports == [report]
    assert (tmp_path / "p" / "result.json").read_text() == raw
    assert (tmp_path / "p" / "result0_profile.0.zip").read_bytes() == b"PK zip"
    assert (tmp_path / "p" / "result0_profile.0_report.txt").read_text() == report
    assert (tmp_path / "p" / "report0.md").read_text() == "**B200 on Modal**"
    text = results.render_profile(profile)
    assert report in text and "case 20x32 dense c1: pass" in text and "no result reported" not in text
    assert f"saved {tmp_path / 'p' / 'result0_profile.0_report.txt'}" in text


def test_profile_runner_failure_shows_its_error_text(tmp_path):
    profile = results.save_profile(profile_raw({}, success=False, error="Modal: container ran out of memory"),
                                   tmp_path)
    assert not profile.ok and profile.runs == []
    assert "error: result0: the runner failed: Modal: container ran out of memory" in results.render_profile(profile)


def test_profile_run_that_crashed_shows_how_it_ended(tmp_path):
    raw = profile_raw({"benchmark-count": "1", "benchmark.0.spec": "batch: 20; n: 32; cond: 1; seed: 43214"},
                      passed=False, exit_code=110, stderr="Traceback ...\nRuntimeError: CUDA error: illegal address\n")
    profile = results.save_profile(raw, tmp_path, QR)
    [run] = profile.runs
    assert not profile.ok and run.cases == []
    assert run.error == ("produced no results, during case 20x32 dense c1 (a crash or a timeout); exit code 110; "
                         "stderr: RuntimeError: CUDA error: illegal address")


def test_profile_result_that_is_not_json_is_kept(tmp_path):
    with pytest.raises(PopkitError, match="not JSON"):
        results.save_profile("{oops", tmp_path)
    assert (tmp_path / "result.json").read_text() == "{oops"


def test_a_table_cell_shows_its_control_characters_and_the_columns_stay_aligned():
    # A cell held them raw: printed, ESC[2J cleared the screen, and a newline broke its row.
    table = render_table(["who", "n"], [["ada\x1b[2J\nbob", 1], ["eve", 22]], right_align={1})
    header, rule, first, second = table.splitlines()
    assert first.startswith("ada\\x1b[2J\\x0abob") and first.endswith(" 1") and len(first) == len(second)


def test_a_bidirectional_override_is_shown_not_obeyed():
    # U+202E in a server's name printed raw reversed the rest of the line, the columns after it included.
    assert printable("eve\u202egnp.exe") == "eve\\u202egnp.exe"
    assert printable("a\u2066b\u2069c") == "a\\u2066b\\u2069c"
    assert printable(printable("x\u202ey\x1b")) == "x\\u202ey\\x1b"     # printing it again changes nothing
    assert printable("caf\u00e9 \u00fc") == "caf\u00e9 \u00fc"          # letters stay letters
