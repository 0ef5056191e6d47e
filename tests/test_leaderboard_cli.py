"""The leaderboard verbs end to end against a local fake KernelBot (pytest-httpserver, 127.0.0.1)."""
import base64
import io
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from werkzeug import Response

from checks import preflight
from popcorn.cli import main
from popcorn.client import api
from popcorn.evidence.logs import read_records, record_passed

ROOT = Path(__file__).resolve().parent.parent
CLI_ID = "c0ffee00-1d-never-print-me"
SOURCE = "#!POPCORN leaderboard qr_v2\n#!POPCORN gpu B200\nimport torch\n\n\ndef custom_kernel(data):\n    return data\n"
QUEUE = {"runner": "Modal", "gpu": "B200", "queued_jobs": 3, "running_jobs": None,
         "available_runners": 2, "status": "available", "error": None}
TESTS = {"test-count": "2",
         "test.0.spec": "batch: 2; n: 8; cond: 1; seed: 1", "test.0.status": "pass",
         "test.1.spec": "batch: 2; n: 64; cond: 3; seed: 2", "test.1.status": "pass", "check": "pass"}
FAILING_TESTS = {**TESTS, "test.1.status": "fail", "test.1.error": "factor residual 40.1 > 20", "check": "fail"}
BENCH = {"benchmark-count": "2",
         "benchmark.0.spec": "batch: 20; n: 32; cond: 1; seed: 43214", "benchmark.0.runs": "200",
         "benchmark.0.mean": "48211.7", "benchmark.0.err": "63.9", "benchmark.0.best": "47105.0",
         "benchmark.0.worst": "55012.0",
         "benchmark.1.spec": "batch: 640; n: 512; cond: 2; seed: 1029; case: mixed", "benchmark.1.runs": "57",
         "benchmark.1.mean": "1234500", "benchmark.1.err": "1200", "benchmark.1.best": "1220000",
         "benchmark.1.worst": "1300000", "check": "pass"}


@pytest.fixture
def home(tmp_path, monkeypatch, httpserver):
    """A registered user in tmp_path talking to the local server; logs go to tmp_path/logs."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".popcorn.yaml").write_text(f"cli_id: {CLI_ID}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("POPCORN_API_URL", httpserver.url_for("/"))
    monkeypatch.setenv("POPKIT_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "submission.py").write_text(SOURCE)
    return home


def popkit(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def run(mode, passed=True, secret=False, score=None, result=None):
    return {"start_time": "2026-06-20T10:00:05Z", "end_time": "2026-06-20T10:01:40Z", "mode": mode,
            "secret": secret, "runner": "B200", "score": score, "passed": passed, "result": result}


def submission(status, runs=(), done=None, error=None, sid=7, heartbeat=None):
    return {"id": sid, "leaderboard_id": 3, "leaderboard_name": "qr_v2", "file_name": "submission.py",
            "user_id": "42", "submission_time": "2026-06-20T10:00:01Z", "code": SOURCE,
            "done": status in api.TERMINAL_JOB_STATES if done is None else done, "runs": list(runs),
            "job": {"status": status, "error": error, "last_heartbeat": heartbeat}, "runner_queue": QUEUE}


def serve_submission(httpserver, final, mode="test", sid=7):
    """Accept one upload (202), then answer polls: pending, running, then `final`."""
    accepted = {"details": {"id": sid, "job_status_id": sid}, "runner_queue": QUEUE, "status": "accepted"}
    httpserver.expect_request(f"/submission/qr_v2/B200/{mode}", method="POST",
                              headers={api.ID_HEADER: CLI_ID}).respond_with_json(accepted, status=202)
    serve_polls(httpserver, submission("pending"), submission("running"), final, sid=sid)


def serve_polls(httpserver, *states, sid=7):
    queue = [json.dumps(s) for s in states]

    def handler(request):
        body = queue.pop(0) if len(queue) > 1 else queue[0]
        return Response(body, content_type="application/json")
    httpserver.expect_request(f"/user/submissions/{sid}", method="GET",
                              headers={api.ID_HEADER: CLI_ID}).respond_with_handler(handler)
    return queue


def logged(tmp_path):
    records, problems = read_records(tmp_path / "logs" / "performance.jsonl")
    assert problems == []
    return records


def assert_id_never_shown(result, tmp_path):
    assert CLI_ID not in result.output
    for path in (tmp_path / "logs").rglob("*"):
        if path.is_file():
            assert CLI_ID not in path.read_text(errors="replace"), path


# -- submit ----------------------------------------------------------------------------------

def test_submit_test_mode_follows_the_job_and_logs_the_result(httpserver, home, tmp_path):
    final = submission("succeeded", [run("test", result=TESTS)])
    serve_submission(httpserver, final)
    result = popkit("submit", "submission.py", "--poll-interval", 0)
    assert result.exit_code == 0, result.output
    assert "submission 7: accepted; B200 queue: 3 queued, 2 runners available" in result.stderr
    assert "] submission 7: pending; B200 queue" in result.stderr
    assert "] submission 7: running;" in result.stderr and "] submission 7: succeeded;" in result.stderr
    assert "2/2 tests passed" in result.stdout and "2x64 dense c3" in result.stdout
    assert result.stdout.rstrip().endswith("PASS")
    upload = httpserver.log[0][0]
    assert upload.files["file"].filename == "submission.py"
    raw = tmp_path / "logs" / "leaderboard" / "7.json"
    assert json.loads(raw.read_text()) == final
    [record] = logged(tmp_path)
    assert (record["problem"], record["mode"], record["run_mode"], record["gpu"]) == (
        "qr_v2", "leaderboard", "test", "B200")
    assert [c["status"] for c in record["cases"]] == ["pass", "pass"]
    assert record["raw_result"] == "logs/leaderboard/7.json" and record["submission_id"] == 7
    assert record["passed"] is True and record["failures"] == []
    assert_id_never_shown(result, tmp_path)


@pytest.mark.parametrize("mode", ["test", "profile"])
def test_submit_sends_the_bytes_the_preflight_passed(httpserver, home, tmp_path, monkeypatch, mode):
    # The upload read the file again after the preflight: a file rewritten meanwhile (a build that ended while
    # KernelGuard scanned) went up unchecked, here with the banned word in it.
    def rebuilt_meanwhile(report, text, name):
        (tmp_path / "submission.py").write_text(SOURCE + "# upstream\n")
    monkeypatch.setattr(preflight, "apply_kernelguard", rebuilt_meanwhile)
    if mode == "profile":
        serve_stream(httpserver, f"event: result\ndata: {profile_result()}\n\n")
    else:
        serve_submission(httpserver, submission("succeeded", [run("test", result=TESTS)]))
    result = popkit("submit", "submission.py", "--mode", mode, "--poll-interval", 0)
    assert result.exit_code == 0, result.output
    assert httpserver.log[0][0].files["file"].read() == SOURCE.encode()


def test_submit_benchmark_prints_means_in_microseconds_and_geomean(httpserver, home, tmp_path):
    serve_submission(httpserver, submission("succeeded", [run("benchmark", result=BENCH)]), mode="benchmark")
    result = popkit("submit", "submission.py", "--mode", "benchmark", "--poll-interval", 0)
    assert result.exit_code == 0, result.output
    assert "48.2" in result.stdout and "1,234" in result.stdout and "geomean 244.0 us" in result.stdout
    [record] = logged(tmp_path)
    assert record["cases"][0]["mean_us"] == pytest.approx(48.2117)
    assert record["geomean_us"] == pytest.approx(243.96, rel=1e-4)


def test_submit_leaderboard_shows_public_and_secret_scores(httpserver, home, tmp_path):
    runs = [run("test"), run("benchmark", result=BENCH), run("leaderboard", score="0.000144590"),
            run("test", secret=True), run("benchmark", secret=True), run("leaderboard", secret=True, score="0.00015")]
    serve_submission(httpserver, submission("succeeded", runs), mode="leaderboard")
    result = popkit("submit", "submission.py", "--mode", "leaderboard", "--poll-interval", 0)
    assert result.exit_code == 0, result.output
    assert "ranked score (public): 144.590 us" in result.stdout
    assert "ranked score (secret): 150.000 us" in result.stdout
    [record] = logged(tmp_path)
    assert record["public_score_s"] == pytest.approx(0.00014459)
    assert record["secret_score_s"] == pytest.approx(0.00015)
    assert record["run_mode"] == "leaderboard"


@pytest.mark.parametrize("final, mode, reason", [
    (submission("failed", [run("test"), run("benchmark", result=BENCH), run("leaderboard", passed=False)],
                error="ranked validation failed on B200; submission will not appear on the leaderboard"),
     "leaderboard", "job failed: ranked validation failed on B200"),
    (submission("timed_out", [], error="Job exceeded 30 min"), "test", "job timed_out: Job exceeded 30 min"),
    (submission("hacked", [run("benchmark", result=BENCH)]), "benchmark", "job hacked"),
    (submission("succeeded", [run("test", passed=False, result=FAILING_TESTS)]), "test",
     "test run on B200 did not pass"),
    (submission("succeeded", []), "test", "no runs were stored"),
])
def test_submit_exits_non_zero_unless_every_requested_run_passed(httpserver, home, tmp_path, final, mode, reason):
    serve_submission(httpserver, final, mode=mode)
    result = popkit("submit", "submission.py", "--mode", mode, "--poll-interval", 0)
    assert result.exit_code == 1, result.output
    assert "FAIL: " in result.stdout and reason in result.stdout
    assert (tmp_path / "logs" / "leaderboard" / "7.json").is_file()
    [record] = logged(tmp_path)
    # The record had no verdict: a failed, timed-out or hacked job whose public cases passed read as passing
    # (record_passed) and its geomean joined the report's frontier.
    assert record["passed"] is False and not record_passed(record)
    assert any(reason in failure for failure in record["failures"])


def test_failing_test_case_shows_its_error(httpserver, home):
    serve_submission(httpserver, submission("succeeded", [run("test", passed=False, result=FAILING_TESTS)]))
    result = popkit("submit", "submission.py", "--poll-interval", 0)
    assert "1/2 tests passed" in result.stdout and "factor residual 40.1 > 20" in result.stdout


def test_flags_override_the_directives(httpserver, home):
    final = submission("succeeded", [run("test", result=TESTS)])
    accepted = {"details": {"id": 7, "job_status_id": 7}, "status": "accepted"}
    httpserver.expect_request("/submission/qr_v2/H100/test", method="POST").respond_with_json(accepted, status=202)
    serve_polls(httpserver, final)
    result = popkit("submit", "submission.py", "--leaderboard", "QR_V2", "--gpu", "H100", "--poll-interval", 0)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("source, flags, complaint", [
    (SOURCE + "# upstream\n", [], "banned word 'stream'"),
    ("import torch\n", ["--gpu", "B200"], "submission.py: names no leaderboard: add '#!POPCORN leaderboard ...' "
                                          "to its leading comment block or pass --leaderboard"),
    (SOURCE, ["--leaderboard", "eigh"], "directive says leaderboard 'qr_v2', expected 'eigh'"),
])
def test_preflight_failures_are_never_uploaded(httpserver, home, tmp_path, source, flags, complaint):
    (tmp_path / "submission.py").write_text(source)
    result = popkit("submit", "submission.py", *flags)
    assert result.exit_code == 1
    assert complaint in result.stderr and "not uploaded" in result.stderr
    assert httpserver.log == []


@pytest.mark.parametrize("flags", [[], ["--leaderboard", "qr_v2"]])
def test_mixed_case_board_directive_is_refused_in_one_line(httpserver, home, tmp_path, flags):
    (tmp_path / "submission.py").write_text(SOURCE.replace("leaderboard qr_v2", "leaderboard QR_v2"))
    result = popkit("submit", "submission.py", *flags)
    assert result.exit_code == 1
    assert result.stderr == ("error: submission.py: '#!POPCORN leaderboard QR_v2' must be lowercase ('qr_v2'): "
                             "the server looks the board up in lowercase and rejects a directive that differs\n")
    assert httpserver.log == []


def test_file_without_directives_is_submitted_with_the_options(httpserver, home, tmp_path):
    (tmp_path / "plain.py").write_text("import torch\n\n\ndef custom_kernel(data):\n    return data\n")
    serve_submission(httpserver, submission("succeeded", [run("test", result=TESTS)]))
    result = popkit("submit", "plain.py", "--leaderboard", "qr_v2", "--gpu", "B200", "--poll-interval", 0)
    assert result.exit_code == 0, result.output
    assert ("note: plain.py has no leaderboard or gpu directive: using --leaderboard qr_v2, --gpu B200"
            in result.stderr)
    assert "preflight:" not in result.stderr
    assert httpserver.log[0][0].files["file"].read().startswith(b"import torch")


PAIR = "import torch\n\n\ndef forward(data):\n    return data\n\n\ndef backward(data):\n    return data\n"


def test_the_preflight_asks_for_the_functions_of_the_board_the_file_goes_to(httpserver, home, tmp_path, monkeypatch):
    # A board whose eval.py calls forward and backward (princeton's cross_entropy). With --leaderboard standing in
    # for a missing '#!POPCORN leaderboard' line, the preflight asked for custom_kernel, the function of no board in
    # particular: a correct file was refused, and one eval.py cannot import was uploaded.
    from checks import problems
    monkeypatch.setattr(problems, "CASES_DIR", tmp_path / "cases")
    problems.CASES_DIR.mkdir()
    (problems.CASES_DIR / "pair.yml").write_text("leaderboard: pair_v1\nentry_points: [forward, backward]\n")
    accepted = {"details": {"id": 7, "job_status_id": 7}, "runner_queue": QUEUE, "status": "accepted"}
    httpserver.expect_request("/submission/pair_v1/B200/test", method="POST").respond_with_json(accepted, status=202)
    serve_polls(httpserver, submission("succeeded", [run("test", result=TESTS)]))
    (tmp_path / "plain.py").write_text(PAIR)
    (tmp_path / "headed.py").write_text("#!POPCORN leaderboard pair_v1\n#!POPCORN gpu B200\n" + PAIR)
    for args in (["plain.py", "--leaderboard", "pair_v1", "--gpu", "B200"], ["headed.py"]):
        result = popkit("submit", *args, "--poll-interval", 0)
        assert result.exit_code == 0, result.output
    (tmp_path / "usual.py").write_text("import torch\n\n\ndef custom_kernel(data):\n    return data\n")
    refused = popkit("submit", "usual.py", "--leaderboard", "pair_v1", "--gpu", "B200")
    assert refused.exit_code == 1 and "not uploaded" in refused.stderr
    assert ("preflight: usual.py: defines no forward, backward at its top level (the grader runs `from submission "
            "import forward, backward`)") in refused.stderr.splitlines()
    uploads = [request.files["file"].filename for request, _ in httpserver.log if request.method == "POST"]
    assert uploads == ["plain.py", "headed.py"]


def test_output_file_gets_the_printed_result(httpserver, home, tmp_path):
    serve_submission(httpserver, submission("succeeded", [run("test", result=TESTS)]))
    result = popkit("submit", "submission.py", "-o", "result.txt", "--poll-interval", 0)
    assert result.exit_code == 0
    assert (tmp_path / "result.txt").read_text().strip() == result.stdout.strip()


@pytest.mark.parametrize("verb, output", [(("submit", "submission.py"), "submission.py"),
                                          (("submit", "submission.py"), "logs/performance.jsonl"),
                                          (("submissions", "wait", "7"), "route.cu")])
def test_an_output_that_is_a_source_or_a_log_is_refused_before_any_request(httpserver, home, tmp_path, verb, output):
    # -o submission.py replaced the submitted file with the result's table once the run ended (and -o on the
    # evidence log replaced the log): refused in one line before the upload, each file as it was.
    target = tmp_path / output
    target.parent.mkdir(exist_ok=True)
    if not target.exists():
        target.write_text("keep me\n")
    before = target.read_bytes()
    result = popkit(*verb, "-o", output, "--poll-interval", 0)
    assert result.exit_code == 1
    assert result.stderr.strip() == (f"error: -o {output}: the result is a text table, and a {target.suffix} file "
                                     "is a source or an evidence log that it would replace: name a text file "
                                     "(-o result.txt); nothing was sent")
    assert target.read_bytes() == before and httpserver.log == []


def test_an_output_that_cannot_be_written_is_refused_before_any_request(httpserver, home, tmp_path):
    # The upload and the whole run went ahead; the result's file then failed ('File exists'), and the exit was 1.
    (tmp_path / "notes.txt").write_text("")
    result = popkit("submit", "submission.py", "-o", "notes.txt/result.txt", "--poll-interval", 0)
    assert result.exit_code == 1
    assert result.stderr.strip() == ("error: -o notes.txt/result.txt: cannot be written (Not a directory); "
                                     "nothing was sent")
    assert httpserver.log == []


def test_the_output_file_is_utf8_under_any_locale(httpserver, home, tmp_path):
    # -o wrote in the locale's encoding: under an ASCII locale a non-ASCII error text from the server ended in a
    # UnicodeEncodeError traceback, after the result was printed.
    failing = {**FAILING_TESTS, "test.1.error": "résidu ✅ 40.1 > 20"}
    serve_polls(httpserver, submission("succeeded", [run("test", passed=False, result=failing)]))
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "popcorn", "submissions", "wait", "7", "-o", "result.txt"],
                            env=env, capture_output=True, timeout=120)
    assert result.returncode == 1 and b"Traceback" not in result.stderr, result.stderr
    assert "résidu ✅ 40.1 > 20" in (tmp_path / "result.txt").read_text(encoding="utf-8")


# -- errors ----------------------------------------------------------------------------------

def test_missing_config_says_how_to_register(httpserver, home, tmp_path):
    (home / ".popcorn.yaml").unlink()
    result = popkit("submit", "submission.py")
    assert result.exit_code == 1
    assert result.stderr.strip() == (f"error: no cli_id in {home / '.popcorn.yaml'}: run `popkit register "
                                      "discord` (or `github`) and finish the login in the browser")
    assert httpserver.log == []


def test_a_config_that_is_not_utf8_is_one_line(httpserver, home):
    (home / ".popcorn.yaml").write_bytes(b"\xff\xfe\x00")
    result = popkit("submissions", "list")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr == (f"error: {home / '.popcorn.yaml'} is not UTF-8 text: fix it or {api.REGISTER_HINT}\n")
    assert httpserver.log == []


@pytest.mark.parametrize("status, body, headers, line", [
    (400, {"detail": "failed to prepare submission request: 400: GPU type 'B200' is not supported"}, {},
     "rejected by the server (400, inner 400): GPU type 'B200' is not supported"),
    (401, {"detail": "Invalid or unauthorized auth header"}, {},
     "does not accept your cli_id (401: Invalid or unauthorized auth header): run `popkit register discord`"),
    (403, {"detail": "closed leaderboard"}, {}, "not allowed (403): closed leaderboard"),
    (404, {"detail": "Not Found"}, {}, "not found (404): Not Found"),
    (413, {"detail": "File too large"}, {}, "file too large for the server (413): File too large"),
    (422, {"detail": [{"loc": ["body", "file"], "msg": "Field required"}]}, {},
     "could not read the request (422): body.file: Field required"),
    (429, {"detail": "Rate limit exceeded: 1/1 leaderboard submissions per hour. Try again in 120s."}, {},
     "rate limited (429): Rate limit exceeded: 1/1 leaderboard submissions per hour. Try again in 120s. "
     "(wait 2 min)"),
    (500, {"message": "internal"}, {}, "server error (500): internal"),
    (503, "upstream unavailable", {"Content-Type": "text/plain"}, "server error (503): upstream unavailable"),
])
def test_submit_errors_print_one_line_and_are_never_retried(httpserver, home, tmp_path, status, body, headers, line):
    httpserver.expect_request("/submission/qr_v2/B200/test").respond_with_data(
        body if isinstance(body, str) else json.dumps(body), status=status,
        headers=headers, content_type=None if headers else "application/json")
    result = popkit("submit", "submission.py")
    assert result.exit_code == 1
    [error] = [entry for entry in result.stderr.splitlines() if entry.startswith("error:")]
    assert line in error
    assert len(httpserver.log) == 1
    assert_id_never_shown(result, tmp_path)


def test_unreachable_server(home, monkeypatch, sleeps):
    monkeypatch.setenv("POPCORN_API_URL", "http://127.0.0.1:9")
    result = popkit("leaderboards")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == ("error: cannot reach http://127.0.0.1:9 (GET /leaderboards): "
                                              "Connection refused")
    assert result.stderr.count("; asking again in ") == 3


def test_a_server_url_without_a_scheme_is_one_line_and_nothing_is_sent(home, monkeypatch, sleeps):
    monkeypatch.setenv("POPCORN_API_URL", "localhost:8000")
    result = popkit("submit", "submission.py")
    assert result.exit_code == 1 and sleeps == []
    assert result.stderr.splitlines()[-1] == ("error: POPCORN_API_URL is not an http(s) URL: 'localhost:8000' (it "
                                              "should look like https://host or http://127.0.0.1:8000)")
    assert "submitting" not in result.stderr


def test_refused_connection_says_nothing_was_uploaded(home, monkeypatch):
    monkeypatch.setenv("POPCORN_API_URL", "http://127.0.0.1:9")
    result = popkit("submit", "submission.py")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == ("error: cannot reach http://127.0.0.1:9 (POST /submission/qr_v2/B200/"
                                              "test): Connection refused; nothing was uploaded")


def test_without_a_config_a_401_says_there_is_no_cli_id(httpserver, home):
    (home / ".popcorn.yaml").unlink()
    httpserver.expect_request("/gpus/closed_qr").respond_with_json(
        {"detail": "Invalid or unauthorized auth header"}, status=401)
    result = popkit("gpus", "closed_qr")
    assert result.exit_code == 1
    assert result.stderr == ("error: this needs a cli_id and none is configured (401: Invalid or unauthorized "
                             f"auth header): {api.REGISTER_HINT}\n")


# -- interrupted and resumed -----------------------------------------------------------------

def test_ctrl_c_while_polling_prints_the_resume_command(httpserver, home, monkeypatch):
    serve_submission(httpserver, submission("succeeded", [run("test", result=TESTS)]))

    def interrupt(seconds):
        raise KeyboardInterrupt
    monkeypatch.setattr(api, "sleep", interrupt)
    result = popkit("submit", "submission.py")
    assert result.exit_code == 130
    assert "Resume with: popkit submissions wait 7" in result.stderr


def test_ctrl_c_during_the_upload_exits_130_and_says_where_to_look(httpserver, home, monkeypatch):
    # It exited 1, as a failure, where every other Ctrl-C exits 130.
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(api.Client, "submit", interrupt)
    result = popkit("submit", "submission.py")
    assert result.exit_code == 130
    assert result.stderr.splitlines()[-1] == ("interrupted during the upload; it may have been accepted: see "
                                              "`popkit submissions list --leaderboard qr_v2`")


def test_ctrl_c_while_the_result_is_saved_says_how_to_save_it_again(httpserver, home, tmp_path, monkeypatch):
    # It printed a bare "interrupted": the result was perhaps saved but not logged, and nothing said how to mend it.
    from popcorn.client import results

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt
    serve_polls(httpserver, submission("succeeded", [run("test", result=TESTS)]))
    monkeypatch.setattr(results, "log_outcome", interrupt)
    result = popkit("submissions", "wait", 7)
    assert result.exit_code == 130
    assert result.stderr.splitlines()[-1] == (
        "interrupted while saving the result of submission 7: it stays on the server; "
        "`popkit submissions wait 7` saves and logs it (once)")


def test_wait_resumes_and_logs_like_submit(httpserver, home, tmp_path):
    runs = [run("test"), run("benchmark", result=BENCH), run("leaderboard", score="0.0001"),
            run("test", secret=True), run("benchmark", secret=True), run("leaderboard", secret=True, score="0.0001")]
    serve_polls(httpserver, submission("running"), submission("succeeded", runs))
    result = popkit("submissions", "wait", 7, "--poll-interval", 0)
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout
    [record] = logged(tmp_path)
    assert record["run_mode"] == "leaderboard" and record["public_score_s"] == pytest.approx(0.0001)


def test_wait_on_a_finished_job_logs_it_once(httpserver, home, tmp_path):
    serve_polls(httpserver, submission("succeeded", [run("test", result=TESTS)]))
    first = popkit("submissions", "wait", 7)
    again = popkit("submissions", "wait", 7)
    assert first.exit_code == again.exit_code == 0
    assert [r["submission_id"] for r in logged(tmp_path)] == [7]
    assert "submission 7 is already in the evidence log: not logged again" in again.stderr
    assert "already" not in first.stderr


def test_a_negative_poll_interval_is_a_usage_error(httpserver, home):
    # It reached time.sleep: "ValueError: sleep length must be non-negative", a traceback after the first poll.
    serve_polls(httpserver, submission("running"))
    result = popkit("submissions", "wait", 7, "--poll-interval", -1)
    assert result.exit_code == 2 and "Invalid value for '--poll-interval'" in result.stderr
    assert httpserver.log == []


def test_a_result_that_cannot_be_saved_says_it_stays_on_the_server(httpserver, home, tmp_path):
    # After the whole wait it printed "error: .../performance.jsonl: Is a directory" alone, and no result.
    (tmp_path / "logs" / "performance.jsonl").mkdir(parents=True)
    serve_polls(httpserver, submission("succeeded", [run("test", result=TESTS)]))
    result = popkit("submissions", "wait", 7)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: {tmp_path / 'logs' / 'performance.jsonl'}: Is a directory: the finished result could not be saved; "
        "it stays on the server (`popkit submissions show 7` prints it, `popkit submissions wait 7` saves and logs it)")



# -- the problem a result is logged under ----------------------------------------------------

TOY_TESTS = {"test-count": "2", "test.0.spec": "size: 3; seed: 11", "test.0.status": "pass",
             "test.1.spec": "size: 17; seed: 12", "test.1.status": "pass", "check": "pass"}


@pytest.fixture
def addone(toy, tmp_path, monkeypatch):
    """The toy problem `addone`, whose board is addone_v1 (a name of its own, as vectoradd's is vectoradd_v2),
    added and built as `popkit problem add` and `popkit build` leave it; the built file's path."""
    import build
    from checks import problem_add, problems
    problem_add.add_problem("addone", toy)
    monkeypatch.setattr(build, "PARTS", tmp_path / "parts")
    monkeypatch.setattr(build, "CASES_DIR", problems.CASES_DIR)
    return build.build("addone", tmp_path / "addone.py").output


def serve_board(httpserver, board, code, mode="test", sid=7):
    """Accept one upload to BOARD on the CPU runner, then answer polls with a finished run of the toy's tests."""
    accepted = {"details": {"id": sid, "job_status_id": sid}, "status": "accepted"}
    httpserver.expect_oneshot_request(f"/submission/{board}/CPU/{mode}", method="POST").respond_with_json(
        accepted, status=202)
    final = {**submission("succeeded", [run("test", result=TOY_TESTS)], sid=sid), "leaderboard_name": board,
             "code": code}
    serve_polls(httpserver, final, sid=sid)


def test_a_result_is_logged_under_the_problem_whose_built_file_was_submitted(httpserver, home, tmp_path, addone):
    # The record's problem was the board (addone_v1), so the result sat apart from addone's check, bench and diff
    # records, and the report showed it under a problem popkit does not know.
    from checks import runner
    from popcorn.report.data import load_evidence
    serve_board(httpserver, "addone_v1", addone.read_text())
    result = popkit("submit", addone, "--poll-interval", 0)
    assert result.exit_code == 0, result.output
    [record] = logged(tmp_path)
    assert record["problem"] == "addone" and record["leaderboard"] == "addone_v1"
    assert [c["spec"] for c in record["cases"]] == [{"size": 3, "seed": 11}, {"size": 17, "seed": 12}]
    log = tmp_path / "logs" / "performance.jsonl"
    assert runner.check("addone", addone, device="cpu", log_path=log).passed
    [evidence] = load_evidence(log).problems
    assert evidence.name == "addone" and evidence.counts == {"leaderboard": 1, "check": 1}
    assert [s.submission_id for s in evidence.submissions] == [7]



def test_of_problems_sharing_a_board_the_submitted_files_own_wins(httpserver, home, tmp_path, addone, toy):
    import build
    from checks import problem_add
    problem_add.add_problem("addtwo", toy)            # the same folder again: a second problem on addone_v1
    addtwo = build.build("addtwo", tmp_path / "addtwo.py").output
    for sid, path in ((7, addone), (8, addtwo)):
        serve_board(httpserver, "addone_v1", path.read_text(), sid=sid)
        result = popkit("submit", path, "--poll-interval", 0)
        assert result.exit_code == 0 and "note:" not in result.stderr, result.output
    assert [(r["problem"], r["leaderboard"]) for r in logged(tmp_path)] == [("addone", "addone_v1"),
                                                                             ("addtwo", "addone_v1")]


@pytest.mark.parametrize("second, board, note", [
    (True, "addone_v1", "note: board addone_v1 serves addone, addtwo and the submitted file's '# Built by popkit "
                        "from parts/NAME' line names none of them: its result is logged under the board's name"),
    (False, "other_v1", "note: no problem's record names board other_v1 (`popkit problem list`): its result is "
                        "logged under the board's name"),
])
def test_a_result_no_single_problem_claims_keeps_the_boards_name_and_says_so(httpserver, home, tmp_path, addone, toy,
                                                                              second, board, note):
    from checks import problem_add
    if second:
        problem_add.add_problem("addtwo", toy)
    hand_written = "import torch\n\n\ndef custom_kernel(data):\n    return data\n"
    (tmp_path / "plain.py").write_text(hand_written)
    serve_board(httpserver, board, hand_written)
    result = popkit("submit", "plain.py", "--leaderboard", board, "--gpu", "CPU", "--poll-interval", 0)
    assert result.exit_code == 0, result.output
    assert [line for line in result.stderr.splitlines() if "logged under" in line] == [note]
    [record] = logged(tmp_path)
    assert record["problem"] == record["leaderboard"] == board


def test_wait_logs_a_result_under_its_problem_once_and_knows_records_older_than_the_board_key(httpserver, home,
                                                                                            tmp_path, addone):
    from popcorn.evidence.logs import append_record, new_record
    serve_board(httpserver, "addone_v1", addone.read_text())
    popkit("submissions", "wait", 7)
    again = popkit("submissions", "wait", 7)
    assert again.exit_code == 0 and "submission 7 is already in the evidence log" in again.stderr
    assert [(r["problem"], r["submission_id"]) for r in logged(tmp_path)] == [("addone", 7)]
    # Before the record had a `leaderboard` key, its problem was the board: that submission is logged too.
    log = tmp_path / "logs" / "performance.jsonl"
    log.unlink()
    append_record(new_record("addone_v1", "leaderboard", submission_id=7), log)
    assert "already in the evidence log" in popkit("submissions", "wait", 7).stderr
    assert len(logged(tmp_path)) == 1


# -- runs that crash, jobs that stall --------------------------------------------------------

def test_crashed_run_says_it_produced_no_results(httpserver, home):
    crashed = {"test-count": "2", "test.0.spec": "batch: 2; n: 8; cond: 1; seed: 1"}
    serve_submission(httpserver, submission("succeeded", [run("test", passed=False, result=crashed)]))
    result = popkit("submit", "submission.py", "--poll-interval", 0)
    assert result.exit_code == 1
    assert "no result reported" not in result.stdout
    assert ("FAIL: test run on B200 produced no results, during case 2x8 dense c1 (a crash or a timeout; "
            "the server does not return its log)") in result.stdout


@pytest.fixture
def clock(monkeypatch):
    """A fake clock for the poller: each pause moves it on."""
    now = [0.0]
    monkeypatch.setattr(api, "monotonic", lambda: now[0])
    monkeypatch.setattr(api, "sleep", lambda seconds: now.__setitem__(0, now[0] + seconds))
    return now


def test_stale_heartbeat_is_warned_about_once(httpserver, home, clock):
    stalled = [submission("running", heartbeat="2026-06-20T10:00:20Z")] * 20
    serve_polls(httpserver, submission("pending"), *stalled, submission("succeeded", [run("test", result=TESTS)]))
    result = popkit("submissions", "wait", 7, "--poll-interval", 5)
    assert result.exit_code == 0, result.output
    assert result.stderr.count("warning:") == 1
    assert ("warning: submission 7 has had no heartbeat for 60 s (a running job sends one every 15 s): "
            "the server may have restarted") in result.stderr


def test_moving_heartbeat_gives_no_warning(httpserver, home, clock):
    beating = [submission("running", heartbeat=f"2026-06-20T10:{i:02d}:00Z") for i in range(20)]
    serve_polls(httpserver, *beating, submission("succeeded", [run("test", result=TESTS)]))
    result = popkit("submissions", "wait", 7, "--poll-interval", 5)
    assert result.exit_code == 0 and "warning" not in result.stderr


def test_polling_retries_gateway_errors(httpserver, home, tmp_path, sleeps):
    final = json.dumps(submission("succeeded", [run("test", result=TESTS)]))
    answers = [(502, "bad gateway"), (503, "busy"), (200, final)]

    def flaky(request):
        status, body = answers.pop(0)
        return Response(body, status=status, content_type="application/json")
    httpserver.expect_request("/user/submissions/7").respond_with_handler(flaky)
    result = popkit("submissions", "wait", 7)
    assert result.exit_code == 0, result.output
    assert sleeps == [1.0, 2.0]


@pytest.mark.parametrize("status, body, line", [
    (500, '{"detail": "database down"}', "server error (500): database down"),
    (429, '{"detail": "Try again in 3541s"}', "rate limited (429): Try again in 3541s (wait 59 min 1 s)"),
])
def test_transient_polling_failures_say_how_to_resume(httpserver, home, tmp_path, sleeps, status, body, line):
    httpserver.expect_request("/user/submissions/7").respond_with_data(body, status=status,
                                                                        content_type="application/json")
    result = popkit("submissions", "wait", 7)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == f"error: {line}; resume with `popkit submissions wait 7`"
    assert not (tmp_path / "logs" / "performance.jsonl").exists()


def test_an_id_rejected_while_polling_says_to_register_and_then_resume(httpserver, home, tmp_path):
    # It said to register, and nothing of the submission: its id was left to be found in `submissions list`.
    httpserver.expect_request("/submission/qr_v2/B200/test").respond_with_json(
        {"details": {"id": 7}, "status": "accepted"}, status=202)
    httpserver.expect_request("/user/submissions/7").respond_with_json(
        {"detail": "Invalid or unauthorized auth header"}, status=401)
    result = popkit("submit", "submission.py")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "error: the server does not accept your cli_id (401: Invalid or unauthorized auth header): "
        f"{api.REGISTER_HINT}; then resume with `popkit submissions wait 7`")


def test_polling_waits_out_a_short_rate_limit_and_says_so(httpserver, home, sleeps):
    # A 429 that asked for 10 s ended the follow at once.
    final = json.dumps(submission("succeeded", [run("test", result=TESTS)]))
    answers = [(429, '{"detail": "Try again in 10s"}'), (200, final)]
    httpserver.expect_request("/user/submissions/7").respond_with_handler(
        lambda request: Response(answers[0][1], status=answers.pop(0)[0], content_type="application/json"))
    result = popkit("submissions", "wait", 7)
    assert result.exit_code == 0, result.output
    assert sleeps == [10]
    assert ("note: rate limited (429): Try again in 10s (wait 10 s); asking again in 10 s (1 of 3)\n"
            in result.stderr)


def test_each_retry_prints_a_note(httpserver, home, sleeps):
    # Retries were silent: against a stalled server each of the four tries of `gpus` waits out its 120 s timeout,
    # 8 minutes without a word.
    httpserver.expect_request("/gpus/qr_v2").respond_with_data("gateway timeout", status=504)
    result = popkit("gpus", "qr_v2")
    assert result.exit_code == 1
    assert [line.split("; ")[-1] for line in result.stderr.splitlines()] == [
        "asking again in 1 s (1 of 3)", "asking again in 2 s (2 of 3)", "asking again in 4 s (3 of 3)",
        "error: server error (504): gateway timeout"]


def test_an_unreachable_server_or_a_job_past_the_wait_limit_say_how_to_resume(httpserver, home, monkeypatch, clock):
    serve_polls(httpserver, submission("running"))
    late = popkit("submissions", "wait", 7, "--poll-interval", 600)
    assert late.stderr.splitlines()[-1] == ("error: submission 7 is not finished after 60 min; resume with "
                                            "`popkit submissions wait 7`")
    monkeypatch.setenv("POPCORN_API_URL", "http://127.0.0.1:9")
    gone = popkit("submissions", "wait", 7)
    assert gone.stderr.splitlines()[-1] == ("error: cannot reach http://127.0.0.1:9 (GET /user/submissions/7): "
                                            "Connection refused; resume with `popkit submissions wait 7`")


@pytest.mark.parametrize("status, body, line", [
    (403, '{"detail": "Not your submission"}', "not allowed (403): Not your submission"),
    (404, '{"detail": "Submission not found"}', "not found (404): Submission not found"),
    (200, "<html>proxy page</html>", "the reply to GET /user/submissions/7 is not JSON: '<html>proxy page</html>'"),
])
def test_polling_failures_that_waiting_again_cannot_mend_suggest_no_resume(httpserver, home, tmp_path, status,
                                                                            body, line):
    # A 403 or 404 said "resume with `popkit submissions wait 7`", which can only fail the same way.
    httpserver.expect_request("/user/submissions/7").respond_with_data(body, status=status,
                                                                        content_type="application/json")
    result = popkit("submissions", "wait", 7)
    assert (result.exit_code, result.stderr) == (1, f"error: {line}\n")
    assert not (tmp_path / "logs" / "performance.jsonl").exists()


# -- profile over the event stream -----------------------------------------------------------

REPORT = "Nsight Compute: qr_kernel 12.3 us; dram??? 1.2 TB/s"


def profile_result(passed=True, success=True, error=""):
    """A profile result as the server sends it: spec and report only, no timings (eval.py's profile mode)."""
    report = base64.b64encode(REPORT.encode(), b"+*").decode()
    runs = {"profile.0": {"run": {"passed": passed, "result": {
        "benchmark-count": "1", "benchmark.0.spec": "batch: 20; n: 32; cond: 1; seed: 43214",
        "benchmark.0.report": report, "check": "pass" if passed else "fail"}},
        "profile": {"profiler": "Nsight-Compute", "trace": base64.b64encode(b"PK\x03\x04trace").decode(),
                    "download_url": None}}}
    return json.dumps({"status": "success", "reports": ["**B200 on Modal ✅ success**"], "results": [{
        "success": success, "error": error, "system": {"gpu": "NVIDIA B200"}, "runs": runs if success else {}}]})


def serve_stream(httpserver, *frames):
    def handler(request):
        return Response((f.encode() for f in frames), content_type="text/event-stream")
    httpserver.expect_request("/qr_v2/B200/profile", method="POST",
                              headers={api.ID_HEADER: CLI_ID}).respond_with_handler(handler)


def test_ctrl_c_during_a_profile_run_says_what_goes_on(httpserver, home, tmp_path, monkeypatch):
    # It printed "interrupted" alone.
    def interrupted_after_the_first_status(chunks, max_line_bytes):
        yield api.sse.Event("status", '{"status": "processing", "elapsed_time": 0.0}')
        raise KeyboardInterrupt
    monkeypatch.setattr(api.sse, "iter_events", interrupted_after_the_first_status)
    serve_stream(httpserver, 'event: status\ndata: {"status":"processing","elapsed_time":0.0}\n\n')
    result = popkit("submit", "submission.py", "--mode", "profile")
    assert result.exit_code == 130
    assert result.stderr.splitlines()[-1] == ("interrupted: nothing was saved; once uploaded, the profile run goes on "
                                              "at the server, where it cannot be followed again")
    assert not (tmp_path / "logs").exists()


def test_profile_saves_report_and_trace(httpserver, home, tmp_path):
    serve_stream(httpserver, 'event: status\ndata: {"status":"processing","elapsed_time":0.0}\n\n',
                 'event: status\ndata: {"status":"processing","elapsed_time":15.0}\n\n',
                 f"event: result\ndata: {profile_result()}\n\n")
    result = popkit("submit", "submission.py", "--mode", "profile")
    assert result.exit_code == 0, result.output
    assert "[   15s] processing" in result.stderr
    [folder] = (tmp_path / "logs" / "leaderboard").iterdir()
    assert folder.name.startswith("profile-")
    assert (folder / "result0_profile.0.zip").read_bytes() == b"PK\x03\x04trace"
    assert (folder / "result0_profile.0_report.txt").read_text() == REPORT
    assert json.loads((folder / "result.json").read_text())["status"] == "success"
    assert "result0_profile.0: passed" in result.stdout and "case 20x32 dense c1: pass" in result.stdout
    assert REPORT in result.stdout and "no result reported" not in result.stdout
    assert f"saved {folder / 'result0_profile.0_report.txt'}" in result.stdout
    assert f"profile result saved in {folder}" in result.stderr
    assert result.stdout.rstrip().endswith("PASS")
    assert_id_never_shown(result, tmp_path)


def test_profile_failures(httpserver, home):
    serve_stream(httpserver, f"event: result\ndata: {profile_result(passed=False)}\n\n")
    result = popkit("submit", "submission.py", "--mode", "profile")
    assert result.exit_code == 1 and "FAIL" in result.stdout


def test_profile_runner_failure_shows_the_runners_error(httpserver, home):
    failed = profile_result(success=False, error="Modal: function timed out after 600 s")
    serve_stream(httpserver, f"event: result\ndata: {failed}\n\n")
    result = popkit("submit", "submission.py", "--mode", "profile")
    assert result.exit_code == 1
    assert "error: result0: the runner failed: Modal: function timed out after 600 s" in result.stdout
    assert "no profile runs" not in result.stdout


def test_profile_error_event(httpserver, home):
    serve_stream(httpserver, 'event: status\ndata: {"status":"processing","elapsed_time":0.0}\n\n',
                 'event: error\ndata: {"status":"error","detail":"Rate limit exceeded. Try again in 60s.",'
                 '"status_code":400}\n\n')
    result = popkit("submit", "submission.py", "--mode", "profile")
    assert result.exit_code == 1
    assert "error: profile run failed: (400) Rate limit exceeded. Try again in 60s." in result.stderr


@pytest.mark.parametrize("result, where", [
    ("[1, 2]", "the result is list, not an object"),
    ('{"results": [{"success": true, "runs": ["profile.0"]}]}', "results[0].runs is list, not an object"),
    ('{"results": [{"success": true, "runs": {"profile.0": {"run": {"passed": true, "result": "check: pass"}}}}]}',
     "results[0].runs['profile.0'].run.result is str, not an object"),
])
def test_profile_result_of_an_unexpected_shape_is_one_line_and_kept(httpserver, home, tmp_path, result, where):
    # Each used to end in an AttributeError traceback after the raw result was saved.
    serve_stream(httpserver, f"event: result\ndata: {result}\n\n")
    outcome = popkit("submit", "submission.py", "--mode", "profile")
    assert outcome.exit_code == 1 and isinstance(outcome.exception, SystemExit), outcome.exception
    [folder] = (tmp_path / "logs" / "leaderboard").iterdir()
    assert outcome.stderr.splitlines()[-1] == (f"error: the profile result is not as expected: {where} "
                                               f"(saved as {folder / 'result.json'})")
    assert (folder / "result.json").read_text() == result


def test_a_profile_result_nested_too_deeply_is_one_line_and_kept(httpserver, home, tmp_path):
    # json's RecursionError used to end in a traceback after the raw result was saved.
    deep = "[" * 100_000 + "]" * 100_000
    serve_stream(httpserver, f"event: result\ndata: {deep}\n\n")
    outcome = popkit("submit", "submission.py", "--mode", "profile")
    assert outcome.exit_code == 1 and isinstance(outcome.exception, SystemExit), outcome.exception
    [folder] = (tmp_path / "logs" / "leaderboard").iterdir()
    saved = folder / "result.json"
    assert outcome.stderr.splitlines()[-1] == f"error: the profile result is not JSON (saved as {saved})"
    assert saved.read_text() == deep


# -- registration ----------------------------------------------------------------------------

NEW_ID = "9d2a4c1e-new-id"


def serve_auth(httpserver, valid_ids):
    """/auth/init hands out NEW_ID; /user/submissions accepts exactly the ids in valid_ids (a list, editable)."""
    httpserver.expect_request("/auth/init", query_string="provider=github").respond_with_json({"state": NEW_ID})

    def user_submissions(request):
        if request.headers.get(api.ID_HEADER) in valid_ids:
            return Response("[]", content_type="application/json")
        return Response('{"detail": "Invalid or unauthorized auth header"}', status=401,
                        content_type="application/json")
    httpserver.expect_request("/user/submissions").respond_with_handler(user_submissions)


def test_register_saves_the_new_id_privately_and_prints_the_login_url(httpserver, home):
    (home / ".popcorn.yaml").unlink()
    serve_auth(httpserver, [])
    result = popkit("register", "github")
    assert result.exit_code == 0, result.output
    path = home / ".popcorn.yaml"
    assert api.read_config(path) == {"cli_id": NEW_ID}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert "https://github.com/login/oauth/authorize?client_id=" in result.stdout
    assert NEW_ID not in result.output
    assert api.ID_HEADER not in httpserver.log[0][0].headers


def test_register_against_another_server_warns_that_the_login_is_for_the_hosted_one(httpserver, home):
    serve_auth(httpserver, [])
    result = popkit("register", "github")
    assert result.exit_code == 0, result.output
    assert (f"warning: POPCORN_API_URL is {httpserver.url_for('/').rstrip('/')}, but the login URL below "
            f"activates the id only on the hosted server ({api.DEFAULT_API_URL})") in result.stderr


def test_register_on_the_hosted_server_gives_no_warning(httpserver, home, monkeypatch):
    monkeypatch.delenv("POPCORN_API_URL")
    monkeypatch.setattr(api, "DEFAULT_API_URL", httpserver.url_for("/").rstrip("/"))
    serve_auth(httpserver, [])
    result = popkit("register", "github")
    assert result.exit_code == 0 and "warning" not in result.stderr


def test_register_keeps_a_working_id_until_the_new_one_is_confirmed(httpserver, home):
    valid = [CLI_ID]
    serve_auth(httpserver, valid)
    path = home / ".popcorn.yaml"
    result = popkit("register", "github")
    assert result.exit_code == 0, result.output
    assert api.read_config(path) == {"cli_id": CLI_ID, api.PENDING_KEY: NEW_ID}
    assert "run `popkit register --confirm`" in result.stdout and NEW_ID not in result.output
    early = popkit("register", "--confirm")                  # the login is not done yet
    assert early.exit_code == 1 and "does not accept the new cli_id yet" in early.stderr
    assert api.load_cli_id(path) == CLI_ID
    valid.append(NEW_ID)                                     # the login marks the new id valid
    done = popkit("register", "--confirm")
    assert done.exit_code == 0, done.output
    assert api.read_config(path) == {"cli_id": NEW_ID}
    assert_id_never_shown(done, home)


def test_register_replaces_an_id_the_server_rejects(httpserver, home):
    serve_auth(httpserver, [])
    result = popkit("register", "github")
    assert result.exit_code == 0, result.output
    assert api.read_config(home / ".popcorn.yaml") == {"cli_id": NEW_ID}


@pytest.mark.parametrize("state", ["abc def", "abc\ndef", "x" * 300, "caf\u00e9"])
def test_register_refuses_a_state_that_cannot_be_an_id_and_keeps_the_config(httpserver, home, state):
    # It was saved as the new cli_id, which every later verb refused as malformed "as `popkit register` writes it",
    # and the config's old id was gone.
    httpserver.expect_request("/auth/init", query_string="provider=github").respond_with_json({"state": state})
    httpserver.expect_request("/user/submissions").respond_with_json({"detail": "Invalid"}, status=401)
    path = home / ".popcorn.yaml"
    before = path.read_bytes()
    result = popkit("register", "github")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "error: the reply to GET /auth/init has no usable state (an id is one word of up to 256 printable ASCII "
        "characters, as the server's uuid4): nothing was saved")
    assert path.read_bytes() == before


def test_register_over_an_unreadable_config_keeps_a_copy_and_says_where(httpserver, home):
    # The new file held the new id alone: the broken file's other keys were gone, with no copy kept.
    serve_auth(httpserver, [])
    path = home / ".popcorn.yaml"
    for backup in (home / ".popcorn.yaml.bak", home / ".popcorn.yaml.bak.1"):     # an older copy stays as it is
        broken = f"cli_id: {CLI_ID}\nteam: kernels {backup.name}\n  odd: [\n"
        path.write_text(broken)
        result = popkit("register", "github")
        assert result.exit_code == 0, result.output
        assert api.read_config(path) == {"cli_id": NEW_ID}
        assert backup.read_text() == broken and stat.S_IMODE(os.stat(backup).st_mode) == 0o600
        assert (f"note: {path} could not be read as a config: the new one holds only the new id; the old one is "
                f"kept in {backup}\n") in result.stderr
        assert CLI_ID not in result.output
    assert (home / ".popcorn.yaml.bak").read_text().startswith(f"cli_id: {CLI_ID}\nteam: kernels .popcorn.yaml.bak\n")


def test_confirm_without_a_waiting_id(httpserver, home):
    result = popkit("register", "--confirm")
    assert result.exit_code == 1 and "no new cli_id waits in" in result.stderr
    assert httpserver.log == []


@pytest.mark.parametrize("pending", ["a b\nc", ["x"], True])
def test_confirm_of_a_malformed_waiting_id_is_one_line_and_asks_nothing(httpserver, home, pending):
    # "a b\nc" went out as a header: "the connection broke off (GET /user/submissions): InvalidHeader", retried.
    path = home / ".popcorn.yaml"
    api.update_config({api.PENDING_KEY: pending}, path)
    result = popkit("register", "--confirm")
    assert (result.exit_code, result.stderr) == (1, (
        f"error: the new cli_id waiting in {path} is malformed (it must be one word of printable ASCII, as "
        "`popkit register` writes it): run `popkit register discord` (or `github`) again; your current id stays "
        "in use\n"))
    assert httpserver.log == [] and api.load_cli_id(path) == CLI_ID


@pytest.mark.parametrize("args", [["gitlab"], []])
def test_register_rejects_unknown_or_missing_providers(home, args):
    assert popkit("register", *args).exit_code == 2


def test_join_redeems_an_invite_code(httpserver, home):
    httpserver.expect_request("/user/join", method="POST", headers={api.ID_HEADER: CLI_ID},
                              json={"code": "INVITE-42"}).respond_with_json(
        {"status": "ok", "leaderboards": ["closed_qr", "closed_eigh"]})
    result = popkit("join", "INVITE-42")
    assert result.exit_code == 0, result.output
    assert result.stdout == "joined: closed_qr, closed_eigh\n"


def test_join_with_a_bad_code(httpserver, home):
    httpserver.expect_request("/user/join", method="POST").respond_with_json(
        {"detail": "Invalid invite code"}, status=400)
    result = popkit("join", "nope")
    assert result.exit_code == 1 and result.stderr == "error: rejected by the server (400): Invalid invite code\n"


# -- listings and past submissions -----------------------------------------------------------

def test_leaderboards_and_gpus(httpserver, home):
    httpserver.expect_request("/leaderboards").respond_with_json([
        {"id": 1, "name": "qr_v2", "deadline": "2026-12-31T00:00:00", "gpu_types": ["B200"],
         "description": "QR factorization\nof batches", "task": {}, "visibility": "public"},
        {"id": 2, "name": "qr_invited", "deadline": "2026-12-31T00:00:00", "gpu_types": ["B200"],
         "description": "", "task": {}, "visibility": "closed"}])
    httpserver.expect_request("/gpus/qr_v2").respond_with_json(["B200"])
    result = popkit("leaderboards")
    assert result.exit_code == 0
    assert "qr_v2" in result.stdout and "2026-12-31" in result.stdout and "QR factorization" in result.stdout
    [closed] = [line for line in result.stdout.splitlines() if line.startswith("qr_invited")]
    assert closed.split()[1] == "closed" and "`popkit join CODE`" in result.stdout
    assert popkit("gpus", "qr_v2").stdout == "B200\n"


def test_gpus_of_an_unknown_leaderboard(httpserver, home):
    httpserver.expect_request("/gpus/nope").respond_with_json(
        {"detail": "Error fetching GPU data: Leaderboard `nope` does not exist."}, status=500)
    result = popkit("gpus", "nope")
    assert result.exit_code == 1
    assert "server error (500): Error fetching GPU data: Leaderboard `nope` does not exist." in result.stderr


def test_ranking_with_my_rank_and_gap(httpserver, home):
    httpserver.expect_request("/submissions/qr_v2/B200").respond_with_json([
        {"submission_id": 11, "rank": 1, "submission_score": 0.0001, "user_id": "1", "user_name": "ada",
         "submission_time": "2026-06-01T00:00:00Z", "gpu_type": "B200", "leaderboard_name": "qr_v2"},
        {"submission_id": 7, "rank": 2, "submission_score": 0.00012, "user_id": "42", "user_name": "me",
         "submission_time": "2026-06-20T10:00:01Z", "gpu_type": "B200", "leaderboard_name": "qr_v2"}])
    httpserver.expect_request("/user/submissions", query_string="limit=1&offset=0&leaderboard=qr_v2"
                              ).respond_with_json([{"id": 7}])
    serve_polls(httpserver, submission("succeeded"))
    result = popkit("ranking", "qr_v2", "B200")
    assert result.exit_code == 0, result.output
    assert "you: rank 2 of 2, 120.0 us, 20.0 us behind first (+20.0%)" in result.stdout


def test_ranking_without_an_id_shows_the_board_only(httpserver, home):
    (home / ".popcorn.yaml").unlink()
    httpserver.expect_request("/submissions/qr_v2/B200").respond_with_json([
        {"submission_id": 11, "rank": 1, "submission_score": 0.0001, "user_id": "1", "user_name": "ada"}])
    result = popkit("ranking", "qr_v2", "B200")
    assert result.exit_code == 0 and "ada" in result.stdout and "you:" not in result.stdout


@pytest.mark.parametrize("listed, shown, why", [
    (({"detail": "Invalid or unauthorized auth header"}, 401), None,
     "the server does not accept your cli_id (401: Invalid or unauthorized auth header)"),
    (([{"id": 7}], 200), ({"detail": "Submission not found"}, 404), "not found (404): Submission not found"),
])
def test_ranking_when_my_rank_cannot_be_read_still_shows_the_board(httpserver, home, listed, shown, why):
    # The public ranking, already fetched, used to be lost: only the error of the user's own lookup was shown.
    httpserver.expect_request("/submissions/qr_v2/B200").respond_with_json([
        {"submission_id": 11, "rank": 1, "submission_score": 0.0001, "user_id": "1", "user_name": "ada"}])
    httpserver.expect_request("/user/submissions").respond_with_json(*listed)
    if shown:
        httpserver.expect_request("/user/submissions/7").respond_with_json(*shown)
    result = popkit("ranking", "qr_v2", "B200")
    assert result.exit_code == 0, result.output
    assert "ada" in result.stdout and "you:" not in result.stdout
    assert result.stderr.startswith(f"note: your own rank is not marked: {why}") and CLI_ID not in result.output


@pytest.mark.parametrize("args, path, body", [
    (["leaderboards"], "/leaderboards", ["qr_v2", "eigh"]),
    (["submissions", "list"], "/user/submissions", [7]),
    (["submissions", "show", 7], "/user/submissions/7", {"id": 7, "job": "succeeded", "runs": []}),
    (["fetch", 7], "/user/submissions/7", {"id": 7, "runs": "none"}),
])
def test_replies_of_an_unexpected_shape_end_in_one_line(httpserver, home, args, path, body):
    httpserver.expect_request(path).respond_with_json(body)
    result = popkit(*args)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: the reply to GET {path} is not as expected: ")


def test_leaderboards_shows_a_gpu_list_sent_as_one_string_as_it_is(httpserver, home):
    httpserver.expect_request("/leaderboards").respond_with_json([{"name": "qr_v2", "gpu_types": "B200"}])
    result = popkit("leaderboards")
    assert result.exit_code == 0 and "B200" in result.stdout and "B, 2" not in result.stdout


def test_ranking_when_my_latest_submission_has_no_id_shows_the_board_only(httpserver, home):
    httpserver.expect_request("/submissions/qr_v2/B200").respond_with_json([
        {"submission_id": 11, "rank": 1, "submission_score": 0.0001, "user_id": "1", "user_name": "ada"}])
    httpserver.expect_request("/user/submissions").respond_with_json([{"leaderboard_name": "qr_v2"}])
    result = popkit("ranking", "qr_v2", "B200")
    assert result.exit_code == 0, result.output
    assert "ada" in result.stdout and "you:" not in result.stdout


@pytest.mark.parametrize("gpu, line", [
    ("b200", "error: leaderboard qr_v2 does not run on GPU 'b200' (it runs on B200, H100): did you mean B200?\n"),
    ("A100", "error: leaderboard qr_v2 does not run on GPU 'A100' (it runs on B200, H100)\n"),
])
def test_ranking_on_a_gpu_the_board_does_not_run_on_is_an_error(httpserver, home, gpu, line):
    # The server answers [] for any GPU name; this printed an empty table and exited 0.
    httpserver.expect_request(f"/submissions/qr_v2/{gpu}").respond_with_json([])
    httpserver.expect_request("/gpus/qr_v2").respond_with_json(["B200", "H100"])
    result = popkit("ranking", "qr_v2", gpu)
    assert result.exit_code == 1 and result.stderr == line and result.stdout == ""


def test_an_empty_ranking_on_a_real_gpu_says_so(httpserver, home):
    (home / ".popcorn.yaml").unlink()
    httpserver.expect_request("/submissions/qr_v2/H100").respond_with_json([])
    httpserver.expect_request("/gpus/qr_v2").respond_with_json(["B200", "H100"])
    result = popkit("ranking", "qr_v2", "H100")
    assert result.exit_code == 0 and result.stdout == "no ranked submission yet\n"


def test_gpus_of_a_board_that_lists_none_is_an_error(httpserver, home):
    httpserver.expect_request("/gpus/qr_v2").respond_with_json([])
    result = popkit("gpus", "qr_v2")
    assert result.exit_code == 1
    assert result.stderr == "error: the server lists no GPU for leaderboard qr_v2 (GET /gpus/qr_v2 answered [])\n"


def test_submissions_list_and_show(httpserver, home):
    httpserver.expect_request("/user/submissions", query_string="limit=50&offset=0&leaderboard=qr_v2"
                              ).respond_with_json([
                                  {"id": 7, "leaderboard_name": "qr_v2", "file_name": "submission.py",
                                   "submission_time": "2026-06-20T10:00:01.12Z", "done": True,
                                   "runs": [{"gpu_type": "B200", "score": "0.000150"},
                                            {"gpu_type": "B200", "score": "0.000144"}]}])
    serve_polls(httpserver, submission("succeeded", [run("benchmark", result=BENCH)]))
    listing = popkit("submissions", "list", "--leaderboard", "qr_v2")
    assert listing.exit_code == 0
    assert "2026-06-20T10:00:01" in listing.stdout and "144.0" in listing.stdout
    shown = popkit("submissions", "show", 7, "--code")
    assert shown.exit_code == 0
    assert "2/2 benchmarks passed" in shown.stdout and "def custom_kernel" in shown.stdout


def test_a_board_named_in_another_case_is_asked_for_in_lowercase(httpserver, home):
    # submit sends the board in lowercase (the server's names are), but list, gpus and ranking sent it as typed:
    # `submissions list --leaderboard QR_V2` answered "no submissions found", `gpus QR_V2` a 500.
    for limit in (50, 1):
        httpserver.expect_request("/user/submissions", query_string=f"limit={limit}&offset=0&leaderboard=qr_v2"
                                  ).respond_with_json([{"id": 7, "leaderboard_name": "qr_v2", "runs": []}])
    httpserver.expect_request("/gpus/qr_v2").respond_with_json(["B200"])
    httpserver.expect_request("/submissions/qr_v2/B200").respond_with_json(
        [{"rank": 1, "user_name": "me", "user_id": "42", "submission_score": 0.0001, "submission_id": 7}])
    serve_polls(httpserver, submission("succeeded"))
    listing = popkit("submissions", "list", "--leaderboard", "QR_V2")
    assert listing.exit_code == 0 and listing.stdout.splitlines()[-1].split()[:2] == ["7", "qr_v2"]
    assert popkit("gpus", "QR_V2").stdout == "B200\n"
    ranking = popkit("ranking", "Qr_V2", "B200")
    assert ranking.exit_code == 0 and "you: rank 1 of 1" in ranking.stdout, ranking.output
    assert {request.path for request, _ in httpserver.log} <= {"/user/submissions", "/gpus/qr_v2",
                                                               "/submissions/qr_v2/B200", "/user/submissions/7"}


def test_submissions_list_empty(httpserver, home):
    httpserver.expect_request("/user/submissions").respond_with_json([])
    assert popkit("submissions", "list").stdout == "no submissions found\n"


def test_a_lone_surrogate_in_a_result_is_printed_and_logged_as_a_replacement_character(httpserver, home, tmp_path):
    # JSON lets '\ud800' through: printing the result table used to end in a UnicodeEncodeError traceback.
    failing = {**FAILING_TESTS, "test.1.error": "bad \ud800 input"}
    body = json.dumps(submission("succeeded", [run("test", passed=False, result=failing)]))
    httpserver.expect_request("/user/submissions/7").respond_with_data(body, content_type="application/json")
    result = popkit("submissions", "wait", 7, "-o", "result.txt")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert "bad \ufffd input" in result.stdout and "FAIL" in result.stdout
    assert "bad \ufffd input" in (tmp_path / "result.txt").read_text(encoding="utf-8")
    [record] = logged(tmp_path)
    assert record["cases"][1]["error"] == "bad \ufffd input"


# Terminal commands a server's words may hold: clear the screen, set the window title, return over the line, and
# the C1 form of ESC[ (CSI); printed, each is shown as its escape, never obeyed (\r as a space where the text is
# made one line).
HOSTILE = "\x1b[2J\x1b]0;owned\x07\rhidden\x9b31m"
SHOWN = re.compile(r"\\x1b\[2J\\x1b\]0;owned\\x07(\\x0d| )hidden\\x9b31m")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")    # every control character but \t and \n
HOSTILE_CODE = f"def custom_kernel(data):\r\n\treturn data  # {HOSTILE}\n"


def serve_hostile(httpserver):
    """A board, a ranking, a submission and a failing request, each with HOSTILE in text popkit prints."""
    httpserver.expect_request("/leaderboards").respond_with_json(
        [{"name": "qr_v2", "gpu_types": ["B200"], "description": f"QR {HOSTILE}", "visibility": "public"}])
    httpserver.expect_request("/submissions/qr_v2/B200").respond_with_json(
        [{"submission_id": 11, "rank": 1, "submission_score": 0.0001, "user_id": "1", "user_name": f"ada{HOSTILE}"}])
    failing = {**FAILING_TESTS, "test.1.error": f"residual {HOSTILE}"}
    serve_polls(httpserver, {**submission("succeeded", [run("test", passed=False, result=failing)],
                                          error=f"job {HOSTILE}"), "code": HOSTILE_CODE, "file_name": f"s{HOSTILE}.py"})
    httpserver.expect_request("/gpus/qr_v2").respond_with_json({"detail": f"no {HOSTILE}"}, status=500)


@pytest.mark.parametrize("args", [("leaderboards",), ("ranking", "qr_v2", "B200"), ("submissions", "show", 7),
                                  ("submissions", "show", 7, "--code"), ("submissions", "wait", 7),
                                  ("submissions", "delete", 7), ("gpus", "qr_v2"), ("fetch", 7)])
def test_control_characters_in_the_servers_words_are_shown_not_obeyed(httpserver, home, args):
    # They reached the terminal raw: a board's description could clear the screen, a user name hide its row.
    serve_hostile(httpserver)
    result = popkit(*args, input="n\n")
    assert SHOWN.search(result.output) and not CONTROL.search(result.output), result.output


def test_what_is_saved_keeps_the_servers_control_characters(httpserver, home, tmp_path):
    serve_hostile(httpserver)
    shown = popkit("submissions", "show", 7, "--code")
    assert "def custom_kernel(data):\n\treturn data" in shown.stdout      # a multi-line block stays one
    assert popkit("fetch", 7).exit_code == 0
    assert (tmp_path / "submission_7.py").read_bytes() == HOSTILE_CODE.encode()
    assert popkit("submissions", "wait", 7, "-o", "result.txt").exit_code == 1
    raw = json.loads((tmp_path / "logs" / "leaderboard" / "7.json").read_text())
    assert (raw["runs"][0]["result"]["test.1.error"], raw["job"]["error"]) == (f"residual {HOSTILE}", f"job {HOSTILE}")
    printed = (tmp_path / "result.txt").read_text()
    assert SHOWN.search(printed) and not CONTROL.search(printed)


def test_show_of_someone_elses_submission(httpserver, home):
    httpserver.expect_request("/user/submissions/8").respond_with_json({"detail": "Not your submission"},
                                                                        status=403)
    result = popkit("submissions", "show", 8)
    assert result.exit_code == 1 and result.stderr == "error: not allowed (403): Not your submission\n"


def test_delete_asks_first(httpserver, home):
    serve_polls(httpserver, submission("succeeded"))
    httpserver.expect_request("/user/submissions/7", method="DELETE").respond_with_json(
        {"status": "ok", "submission_id": 7})
    kept = popkit("submissions", "delete", 7, input="n\n")
    assert kept.exit_code == 0 and "not deleted" in kept.stdout
    assert [entry[0].method for entry in httpserver.log] == ["GET"]
    deleted = popkit("submissions", "delete", 7, "--force")
    assert deleted.exit_code == 0 and "deleted submission 7" in deleted.stdout
    assert [entry[0].method for entry in httpserver.log] == ["GET", "GET", "DELETE"]


class CtrlC(io.RawIOBase):
    """Input where the user presses Ctrl-C at the first read."""

    def readable(self):
        return True

    def readinto(self, buffer):
        if len(buffer):
            raise KeyboardInterrupt
        return 0


@pytest.mark.parametrize("answer, code, line", [
    (CtrlC(), 130, "interrupted: submission 7 was not deleted"),
    ("", 1, "error: no answer (the input is closed): submission 7 was not deleted; --force deletes without asking")])
def test_ctrl_c_or_closed_input_at_the_delete_prompt_deletes_nothing_in_one_line(httpserver, home, answer, code,
                                                                                line):
    # click.confirm turned both into "Aborted!" and exit 1, where Ctrl-C in every other verb exits 130.
    serve_polls(httpserver, submission("succeeded"))
    result = popkit("submissions", "delete", 7, input=answer)
    assert result.exit_code == code
    assert result.stderr.strip() == line
    assert [entry[0].method for entry in httpserver.log] == ["GET"]


@pytest.mark.parametrize("reply", [{"status": "error", "detail": "still running"}, {}])
def test_delete_without_the_servers_confirmation_is_not_reported_as_done(httpserver, home, reply):
    # It used to print "deleted submission 7" and exit 0 whatever the 200 reply said.
    serve_polls(httpserver, submission("succeeded"))
    httpserver.expect_request("/user/submissions/7", method="DELETE").respond_with_json(reply)
    result = popkit("submissions", "delete", 7, "--force")
    assert result.exit_code == 1 and "deleted submission" not in result.stdout
    assert result.stderr.startswith("error: the server did not confirm that submission 7 was deleted (DELETE "
                                    "/user/submissions/7 answered ")
    assert result.stderr.endswith("check with `popkit submissions show 7`\n")


def test_fetch_saves_the_code_and_will_not_overwrite(httpserver, home, tmp_path):
    serve_polls(httpserver, submission("succeeded"))
    result = popkit("fetch", 7)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "submission_7.py").read_text() == SOURCE
    again = popkit("fetch", 7)
    assert again.exit_code == 1 and "submission_7.py exists" in again.stderr
    assert popkit("fetch", 7, "-o", "incumbent.py").exit_code == 0
    assert (tmp_path / "incumbent.py").read_text() == SOURCE


@pytest.mark.parametrize("args, existing", [(("-o", "incumbent.py"), "incumbent.py"),
                                            ((), "submission_7.py"), ((), "submission_7.cu")])
def test_fetch_refuses_an_existing_file_before_any_request(httpserver, home, tmp_path, args, existing):
    # The server is asked nothing: the refusal needs no reply (it used to GET the submission first).
    (tmp_path / existing).write_text("mine\n")
    result = popkit("fetch", 7, *args)
    assert result.exit_code == 1 and f"{existing} exists: pass --force" in result.stderr, result.output
    assert httpserver.log == []
    assert (tmp_path / existing).read_text() == "mine\n"
