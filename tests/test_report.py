"""`popkit report` on logs the tests write: charts present, page numbers match the log, gaps noted."""
from __future__ import annotations

import errno
import json
import math
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from checks.problems import format_spec, load_problem, short_spec
from popcorn.cli import main
from popcorn.evidence.tables import fmt_sig
from popcorn.report import data as report_data
from popcorn.report.charts import chart_cases, check_chart, ratio_limits
from popcorn.report.dashboard import build_report, summary
from popcorn.report.data import _labels, case_label

SPECS = load_problem("qr_v2").benchmarks
TESTS = load_problem("qr_v2").tests
BASE_US = [40.0 * (i + 1) for i in range(len(SPECS))]  # the first run's time per case
RUN_FACTORS = (1.0, 0.8, 0.9)                          # three H200 bench runs: the second is best
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _case(spec, mean_us=None, status="pass", **extra):
    return {"spec": spec, "status": status, "error": None if status == "pass" else "boom",
            "mean_us": mean_us, "err_us": None if mean_us is None else 1.0,
            "baseline_us": 1000.0 * (spec["n"] / 32), "residuals": {}, **extra}


def _record(mode, time, cases=(), gpu="NVIDIA H200", **extra):
    return {"time": time, "problem": "qr_v2", "mode": mode, "commit": "c0ffee" * 7,
            "submission_sha256": "ab" * 32, "gpu": gpu, "torch": "2.11.0+cu130", "cuda": "13.0",
            "compile_s": 41.2, "cases": list(cases), "geomean_us": None,
            "baseline_geomean_us": None, "baseline": "torch.geqrf", **extra}


def _bench(time, factor, gpu="NVIDIA H200"):
    means = [b * factor for b in BASE_US]
    cases = [_case(s, m) for s, m in zip(SPECS, means)]
    return _record("bench", time, cases, gpu=gpu, geomean_us=_geomean(means),
                   baseline_geomean_us=_geomean([c["baseline_us"] for c in cases]))


def _geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def _check(**extra):
    """Every official test: the first three near, nearer and over a limit, the rest far below."""
    fractions = [(0.31, 0.12), (0.9, 0.05), (1.4, 0.2)] + [(0.0016, 0.00004)] * (len(TESTS) - 3)
    cases = [_case(s, status="pass" if f < 1 else "fail",
                   residuals={"factor": [f * 20.0, 20.0], "orthogonality": [o * 100.0, 100.0]})
             for s, (f, o) in zip(TESTS, fractions)]
    return _record("check", "2026-12-01T12:00:00Z", cases, **extra)


def _diff(**extra):
    """Every benchmark case: one faster, one slower, the rest within noise."""
    rows = [(100.0, 80.0, "faster"), (200.0, 230.0, "slower")] + [(300.0, 301.0, "within noise")] * (len(SPECS) - 2)
    cases = [_case(s, cand, incumbent_us=inc, ratio=cand / inc, verdict=v,
                   residuals={"factor": [2.0, 20.0]}, incumbent_residuals={"factor": [4.0, 20.0]})
             for s, (inc, cand, v) in zip(SPECS, rows)]
    return _record("diff", "2026-12-01T13:00:00Z", cases, incumbent_sha256="cd" * 32,
                   passed=False, changed_parts=["qr_v2/panel.cu"], **extra)


def _leaderboard(time, submission_id, public_s, secret_s):
    return _record("leaderboard", time, gpu="B200", submission_id=submission_id,
                   run_mode="leaderboard", public_score_s=public_s, secret_score_s=secret_s,
                   raw_result=f"logs/leaderboard/{submission_id}.json")


CORRUPT_LINE = 4


def write_full_log(root: Path) -> Path:
    """A log with every mode, an unknown mode and one corrupt line (line CORRUPT_LINE)."""
    records = [
        _bench("2026-12-01T10:00:00Z", RUN_FACTORS[0]),
        _bench("2026-12-01T10:30:00Z", 0.7, gpu="NVIDIA H100"),
        _bench("2026-12-02T10:00:00Z", RUN_FACTORS[1]),
        _check(),
        _diff(),
        _record("profile", "2026-12-02T11:00:00Z"),
        _leaderboard("2026-12-02T12:00:00Z", 101, 0.000150, 0.000155),
        _bench("2026-12-03T10:00:00Z", RUN_FACTORS[2]),
        _leaderboard("2026-12-03T12:00:00Z", 102, 0.000120, None),
    ]
    lines = [json.dumps(r) for r in records]
    lines.insert(CORRUPT_LINE - 1, '{"time": "2026-12-01T11:00:00Z", "problem": ')
    log = root / "logs" / "performance.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(lines) + "\n")
    (root / "logs" / "leaderboard").mkdir()
    (root / "logs" / "leaderboard" / "101.json").write_text("{}")
    return log


class _Tables(HTMLParser):
    """Collects each <table id=...> as rows of cell texts, and every <img src>."""

    def __init__(self, html: str):
        super().__init__()
        self.tables, self.images, self._table, self._cell = {}, [], None, None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("id"), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "img":
            self.images.append(attrs["src"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._table[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _rows(table):
    """A table's rows keyed by their first cell."""
    return {row[0]: row[1:] for row in table[1:]}


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    report = build_report(write_full_log(root), root / "report")
    return report, _Tables(report.page.read_text()), report.page.read_text()


def test_every_chart_is_drawn_and_linked(full):
    report, page, _ = full
    sections = ["cases", "frontier", "diff", "check"]
    assert report.charts["qr_v2"] == {s: f"qr_v2-{s}.png" for s in sections}
    assert page.images == [f"qr_v2-{s}.png" for s in sections]
    for name in page.images:
        data = (report.page.parent / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000


def test_corrupt_line_is_reported_with_its_number(full):
    report, _, html = full
    [note] = report.evidence.notes
    assert note.endswith(f"performance.jsonl:{CORRUPT_LINE}: not JSON (Expecting value)")
    assert f"performance.jsonl:{CORRUPT_LINE}: not JSON" in html


def test_case_table_has_first_best_newest_of_the_newest_gpu(full):
    _, page, html = full
    rows = _rows(page.tables["qr_v2-cases"])
    assert list(rows) == [short_spec(s) for s in SPECS]
    for spec, base in zip(SPECS, BASE_US):
        first, best, since, newest, baseline, speedup = rows[short_spec(spec)]
        assert (first, best, newest) == (f"{base:.1f}", f"{base * 0.8:.1f}", f"{base * 0.9:.1f}")
        assert since == "2026-12-02 10:00"  # the H100 run (0.7x) is another GPU: not mixed in
        assert baseline == f"{1000.0 * spec['n'] / 32:,.0f}"
        assert speedup == f"{1000.0 * spec['n'] / 32 / (base * 0.9):.1f}"
    assert f"Newest geomean {_geomean(BASE_US) * 0.9:.1f} µs" in html
    assert "3 bench run(s) on NVIDIA H200" in html


def test_frontier_has_one_line_per_source_and_gpu(full):
    _, page, _ = full
    rows = _rows(page.tables["qr_v2-frontier"])
    geomean = _geomean(BASE_US)
    assert rows["bench on NVIDIA H200"] == [f"{geomean * 0.8:.1f}", "2026-12-02 10:00", "3"]
    assert rows["bench on NVIDIA H100"] == [f"{geomean * 0.7:.1f}", "2026-12-01 10:30", "1"]
    assert rows["leaderboard on B200"] == ["120.0", "2026-12-03 12:00", "2"]  # from public_score_s


def test_newest_diff_case_by_case(full):
    _, page, html = full
    rows = _rows(page.tables["qr_v2-diff"])
    assert rows[short_spec(SPECS[0])] == ["100.0", "80.0", "0.800", "faster", "0.10", "0.20"]
    assert rows[short_spec(SPECS[1])] == ["200.0", "230.0", "1.150", "slower", "0.10", "0.20"]
    assert len(rows) == len(SPECS)
    assert rows[short_spec(SPECS[2])] == ["300.0", "301.0", "1.003", "within noise", "0.10", "0.20"]
    assert "did not pass" in html and "qr_v2/panel.cu" in html


def test_newest_check_fractions_of_limits(full):
    _, page, _ = full
    table = page.tables["qr_v2-check"]
    assert table[0] == ["case", "status", "factor", "orthogonality", "error"]
    rows = _rows(table)
    assert rows[short_spec(TESTS[0])] == ["pass", "0.31", "0.12", ""]
    assert rows[short_spec(TESTS[1])] == ["pass", "0.90", "0.050", ""]
    assert rows[short_spec(TESTS[2])] == ["fail", "1.4", "0.20", "boom"]
    assert rows[short_spec(TESTS[3])] == ["pass", "0.0016", "4.0e-05", ""]     # significant digits, never 0.00


def test_counters_get_their_columns_only_where_a_case_has_them(full, tmp_path):
    # A submission's ROUTE_COUNTERS per case (counters, incumbent_counters) were in the records, not on the page.
    _, page, _ = full
    assert "counters" not in " ".join(page.tables["qr_v2-diff"][0] + page.tables["qr_v2-check"][0])
    diff, check = _diff(), _check()
    diff["cases"][0].update(counters={"calls": 12, "resolved": 7}, incumbent_counters={"calls": 12, "bad": "x"})
    check["cases"][1]["counters"] = {"calls": 2}
    check["cases"][2]["counters"] = {"calls": 2, "flag": True}         # a bool is no count: the dict is left out
    log = tmp_path / "logs" / "performance.jsonl"
    log.parent.mkdir()
    log.write_text(f"{json.dumps(check)}\n{json.dumps(diff)}\n")
    report = build_report(log, tmp_path / "out")
    page = _Tables(report.page.read_text())
    table = page.tables["qr_v2-diff"]
    assert table[0][-2:] == ["counters (candidate)", "counters (incumbent)"]
    rows = _rows(table)
    assert rows[short_spec(SPECS[0])][-2:] == ["calls 12, resolved 7", "-"]
    assert rows[short_spec(SPECS[1])][-2:] == ["-", "-"]
    table = page.tables["qr_v2-check"]
    assert table[0][-2:] == ["counters", "error"]
    assert _rows(table)[short_spec(TESTS[1])][-2:] == ["calls 2", ""]
    assert _rows(table)[short_spec(TESTS[2])][-2:] == ["-", "boom"]
    assert report.evidence.notes == [
        "qr_v2's newest diff: 1 counters dict(s) of its cases left out, not a dict of str -> int (a bool is no count)",
        "qr_v2's newest check: 1 counters dict(s) of its cases left out, not a dict of str -> int (a bool is no count)"]


def test_submissions_newest_first(full):
    _, page, _ = full
    table = page.tables["qr_v2-submissions"]
    assert [row[1:7] for row in table[1:]] == [
        ["102", "leaderboard", "B200", "-", "120.0", "-"],          # no cases to compare with the official lists
        ["101", "leaderboard", "B200", "-", "150.0", "155.0"],
    ]
    assert table[1][7] == "102.json (missing)" and table[2][7] == "101.json"



def test_a_submission_shows_under_its_problem_and_one_logged_before_the_board_key_under_its_board(tmp_path):
    # vectoradd's board is vectoradd_v2: a record of today names both; an older one has the board as its problem.
    log = tmp_path / "logs" / "performance.jsonl"
    log.parent.mkdir()
    older = {**_leaderboard("2026-12-01T12:00:00Z", 101, 0.00004, None), "problem": "vectoradd_v2"}
    today = {**_leaderboard("2026-12-02T12:00:00Z", 102, 0.00004, None), "problem": "vectoradd",
             "leaderboard": "vectoradd_v2"}
    log.write_text(f"{json.dumps(older)}\n{json.dumps(today)}\n")
    evidence = report_data.load_evidence(log)
    assert [(p.name, [s.submission_id for s in p.submissions]) for p in evidence.problems] == [
        ("vectoradd", [102]), ("vectoradd_v2", [101])]


def test_missing_log_gives_notes_not_charts(tmp_path):
    report = build_report(tmp_path / "logs" / "performance.jsonl", tmp_path / "out", "qr_v2")
    html = report.page.read_text()
    assert report.charts == {"qr_v2": {}}
    assert set(report.notes["qr_v2"]) == {"cases", "frontier", "diff", "check", "submissions"}
    assert "No log at" in html and "run `popkit bench qr_v2`" in html
    assert "<img" not in html


def test_partial_records_are_tolerated(tmp_path):
    log = tmp_path / "logs" / "performance.jsonl"
    log.parent.mkdir()
    records = [
        _check(),
        _bench("2026-12-01T10:00:00Z", 1.0),
        {"problem": "qr_v2", "mode": "bench"},  # no time, gpu, cases or geomean
        {"problem": "qr_v2", "mode": "diff", "cases": [{"spec": SPECS[0], "ratio": None}, "junk"]},
        {"mode": "check", "cases": None},     # no problem: skipped, and counted
        [1, 2],                               # not an object
    ]
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    report = build_report(log, tmp_path / "out", include_cpu=True, all_cases=True)   # show every odd record
    assert [ev.name for ev in report.evidence.problems] == ["qr_v2"]
    assert set(report.charts["qr_v2"]) == {"cases", "frontier", "check"}
    assert report.evidence.problems[0].bench.runs == 1  # the empty newest bench hides nothing
    assert report.notes["qr_v2"] == {
        "diff": "The newest diff record holds no case ratios.",
        "submissions": "No leaderboard submissions for qr_v2 logged yet."}
    assert report.evidence.notes == [f"{log}:6: not a JSON object",
                                     "1 record(s) skipped: their problem is not a name (a non-empty string)"]


def test_records_without_a_problem_name_are_skipped_and_counted(tmp_path):
    # {"a": 1} was shown as problem '?', and {"problem": 5} as problem '5' with "run `popkit bench 5`".
    log = tmp_path / "performance.jsonl"
    odd = [{"a": 1}, {**_bench("2026-12-01T09:00:00Z", 2.0), "problem": 5}, {**_check(), "problem": ""},
           {**_check(), "problem": "  "}, {**_check(), "problem": ["qr_v2"]}, {**_check(), "problem": None}]
    log.write_text("".join(json.dumps(r) + "\n" for r in odd + [_bench("2026-12-01T10:00:00Z", 1.0)]))
    result = CliRunner().invoke(main, ["report", "--log", str(log), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "warning: 6 record(s) skipped: their problem is not a name (a non-empty string)" in result.output
    assert "== qr_v2 (bench 1)" in result.output
    assert [line for line in result.output.splitlines() if line.startswith("==")] == ["== qr_v2 (bench 1)"]
    assert "popkit bench 5" not in result.output and "== ?" not in result.output
    page = (tmp_path / "out" / "index.html").read_text()
    assert "6 record(s) skipped" in page and "popkit bench 5" not in page


def test_a_log_of_no_run_is_refused_and_a_record_of_no_mode_counted_as_such(tmp_path):
    # --log logs/incumbents/history.jsonl (promote's history: JSON records, but of no run) gave a page of
    # "No bench records for qr_v2 yet" under "== qr_v2 (None 6)".
    history = tmp_path / "history.jsonl"
    entries = [{"time": "2026-12-01T10:00:00Z", "problem": "qr_v2", "sha256": "ab" * 32, "evidence": {},
                "forced": True}] * 2
    history.write_text("".join(json.dumps(e) + "\n" for e in entries))
    result = CliRunner().invoke(main, ["report", "--log", str(history), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        f"error: {history} is not an evidence log: none of its 2 record(s) is a check, bench, diff or leaderboard "
        "run (no such 'mode')"]
    assert not (tmp_path / "out").exists()
    log = tmp_path / "performance.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in [_check(), entries[0], {**_check(), "mode": 5}]))
    [ev] = build_report(log, tmp_path / "out", include_cpu=True, all_cases=True).evidence.problems
    assert ev.counts == {"check": 1, "no mode": 2}
    assert "== qr_v2 (check 1, no mode 2)" in summary(build_report(log, tmp_path / "out"))


@pytest.mark.parametrize("gpu", [5, ["NVIDIA H200"], {"name": "cpu"}, None, "", "?"])
def test_a_record_that_names_no_gpu_is_of_an_unknown_device_not_a_cpu_run(tmp_path, gpu):
    # A gpu field that is not a name (and no device) was counted as a CPU run.
    log = tmp_path / "performance.jsonl"
    records = [_check(), {**_check(), "gpu": gpu}, {**_check(), "gpu": "cpu"}]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = build_report(log, tmp_path / "out", "qr_v2")
    [ev] = report.evidence.problems
    assert ev.hidden_line() == ("Left out: 1 CPU run(s) (--include-cpu shows them), 1 run(s) on no known "
                                "device (--include-cpu shows them).")
    [ev] = build_report(log, tmp_path / "all", "qr_v2", include_cpu=True).evidence.problems
    assert ev.hidden_line() is None and ev.check.gpu == "cpu"
    if isinstance(gpu, str):
        return
    bench = {**_bench("2026-12-01T10:00:00Z", 1.0), "gpu": gpu, "device": "cuda"}     # a GPU run, its name unknown
    log.write_text(json.dumps(bench) + "\n")
    report = build_report(log, tmp_path / "gpu", "qr_v2")
    assert report.evidence.problems[0].bench.gpu is None
    assert "bench on an unknown GPU: 1 run(s)" in summary(report)


def test_a_problem_name_with_a_path_in_it_keeps_its_charts_in_the_report(tmp_path):
    # The chart's file was named after the record's problem: 'a/b' ended the whole report in 'No such file or
    # directory', and '../x' wrote x-cases.png beside the report's folder.
    log = tmp_path / "logs" / "performance.jsonl"
    log.parent.mkdir()
    records = [{**_bench("2026-12-01T10:00:00Z", 1.0), "problem": name} for name in ("a/b", "../x")]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = build_report(log, tmp_path / "out", all_cases=True)
    assert [ev.name for ev in report.evidence.problems] == ["../x", "a/b"]
    assert report.charts["../x"]["cases"] == ".._x-cases.png" and report.charts["a/b"]["cases"] == "a_b-cases.png"
    written = sorted(chart for charts in report.charts.values() for chart in charts.values()) + ["index.html"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "out"]


def test_records_with_fields_of_another_kind_are_tolerated(tmp_path):
    # A diff whose commit or sha256 was a number (or an object) crashed the page's template ('int' object is
    # not subscriptable), and changed_parts given as one string was listed letter by letter.
    log = tmp_path / "logs" / "performance.jsonl"
    log.parent.mkdir()
    records = [
        _check(),
        {**_check(), "commit": 12345, "gpu": ["H200"]},
        {"problem": "qr_v2", "mode": "diff", "time": "2026-12-01T10:00:00Z", "commit": 12345,
         "submission_sha256": {"sha": 1}, "incumbent_sha256": 7, "changed_parts": "qr_v2/route.py",
         "cases": [{"spec": SPECS[0], "ratio": 0.9, "verdict": "faster", "mean_us": 9.0, "incumbent_us": 10.0}]},
    ]
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    report = build_report(log, tmp_path / "out", include_cpu=True, all_cases=True)
    [qr] = report.evidence.problems
    assert (qr.diff.commit, qr.diff.candidate_sha, qr.diff.incumbent_sha, qr.diff.changed_parts) == (None, None, None, [])
    assert (qr.check.commit, qr.check.gpu) == (None, None)
    page = (tmp_path / "out" / "index.html").read_text()
    assert "q, r, _" not in page


def test_failing_bench_counts_for_no_time_and_no_frontier(tmp_path):
    log = tmp_path / "performance.jsonl"
    failed = _record("bench", "2026-12-01T10:00:00Z", [_case(SPECS[0], 10.0, status="fail")],
                     geomean_us=10.0)
    log.write_text(json.dumps(failed) + "\n")
    report = build_report(log, tmp_path / "out", all_cases=True)
    assert report.charts["qr_v2"] == {}
    assert report.notes["qr_v2"]["cases"] == "The bench records for qr_v2 hold no passing, timed case."
    assert report.notes["qr_v2"]["frontier"].startswith("No GPU geomean yet")


def test_cli_prints_summary_and_writes_page(tmp_path):
    log = write_full_log(tmp_path)
    result = CliRunner().invoke(main, ["report", "qr_v2", "--log", str(log), "-o",
                                       str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"performance.jsonl:{CORRUPT_LINE}: not JSON" in out
    assert f"newest geomean {_geomean(BASE_US) * 0.9:.1f} us" in out
    assert f"newest diff 2026-12-01 13:00: did not pass (1 faster, 1 slower, {len(SPECS) - 2} within noise)" in out
    assert (f"newest check 2026-12-01 12:00: {len(TESTS) - 1}/{len(TESTS)} cases pass, tightest: factor at 1.4 of "
            f"its limit on {short_spec(TESTS[2])}") in out
    assert "newest submission 102 (leaderboard, B200) 2026-12-03 12:00: public 120.0 us" in out
    assert (tmp_path / "out" / "index.html").is_file()


def test_cli_unknown_problem_is_one_line(tmp_path):
    log = tmp_path / "empty.jsonl"
    log.write_text("")
    result = CliRunner().invoke(main, ["report", "nosuch", "--log", str(log), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "no records for problem 'nosuch'" in result.output


def test_cli_missing_log_is_a_usage_error(tmp_path):
    # An explicitly named log that is not there is a typo, not an empty dashboard (it exited 0).
    missing = tmp_path / "nosuch.jsonl"
    result = CliRunner().invoke(main, ["report", "--log", str(missing), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--log': File '{missing}' does not exist." in result.output
    assert not (tmp_path / "out").exists()


def test_cli_file_with_no_record_is_one_line(tmp_path):
    # `--log submission.py` printed a warning per line (hundreds) and exited 0 with an empty page.
    wrong = tmp_path / "submission.py"
    wrong.write_text("#!POPCORN leaderboard qr_v2\n" + "x = 1\n" * 300)
    result = CliRunner().invoke(main, ["report", "--log", str(wrong), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"error: {wrong} is not an evidence log: none of its 301 non-blank line(s) is a JSON record "
        f"(the first: {wrong}:1: not JSON (Expecting value))"]
    assert not (tmp_path / "out").exists()


def test_many_bad_lines_are_five_warnings_and_a_count(tmp_path):
    # A log with a few records and many bad lines printed one warning per bad line, on the terminal and the page.
    log = tmp_path / "performance.jsonl"
    log.write_text(json.dumps(_bench("2026-12-01T10:00:00Z", 1.0)) + "\n" + "torn line\n" * 40)
    result = CliRunner().invoke(main, ["report", "--log", str(log), "-o", str(tmp_path / "out"), "--all-cases"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warnings[:5] == [f"warning: {log}:{n}: not JSON (Expecting value)" for n in range(2, 7)]
    assert warnings[5:] == ["warning: ... and 35 more bad line(s) (40 in all)"]
    html = (tmp_path / "out" / "index.html").read_text()
    assert html.count("not JSON (Expecting value)") == 5 and "and 35 more bad line(s) (40 in all)" in html


def _chromium() -> str | None:
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)


def test_page_renders_in_headless_chromium(full, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium or chromium-browser on PATH (Debian: apt-get install chromium)")
    report, _, _ = full
    shot = tmp_path / "page.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1200,4000", report.page.as_uri()],
                   check=True, capture_output=True, timeout=60)
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 50_000


# ---- GPU evidence of the full lists by default ------------------------------------------------------

def _mixed_log(tmp_path) -> Path:
    """GPU runs of the full lists first, then newer CPU and chosen-case runs that must not hide them."""
    toy = [_case(SPECS[0], status="pass", residuals={"factor": [0.1, 20.0]})]
    records = [
        _bench("2026-12-01T10:00:00Z", 1.0),
        _check(),
        _diff(),
        {**_bench("2026-12-02T10:00:00Z", 0.01, gpu="cpu"), "device": "cpu",
         "cases": [_case(s, 0.4) for s in SPECS[:3]], "geomean_us": 0.4},          # a CPU bench of 3 cases
        _record("check", "2026-12-02T11:00:00Z", toy, device="cuda"),              # a toy --case check on the GPU
        _record("diff", "2026-12-02T12:00:00Z", [{**toy[0], "ratio": 2.0}], device="cpu", gpu="cpu"),
    ]
    log = tmp_path / "performance.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    return log


def test_cpu_and_chosen_case_runs_are_left_out_by_default(tmp_path):
    report = build_report(_mixed_log(tmp_path), tmp_path / "out", "qr_v2")
    [ev] = report.evidence.problems
    assert ev.bench.gpu == "NVIDIA H200" and ev.bench.runs == 1
    assert [line.gpu for line in ev.frontier] == ["NVIDIA H200"]
    assert len(ev.check.cases) == len(TESTS) and len(ev.diff.cases) == len(SPECS)
    assert ev.hidden_line() == ("Left out: 2 CPU run(s) (--include-cpu shows them), "
                                "1 run(s) of chosen cases only (--all-cases shows them).")
    assert ev.hidden_line() in report.page.read_text()
    assert ev.hidden_line() in summary(report)


def test_a_section_whose_runs_were_all_left_out_says_so_instead_of_asking_for_a_run(tmp_path):
    # 'No bench records for qr_v2 yet: run `popkit bench qr_v2`', right after that bench ran on the CPU.
    records = [{**_bench("2026-12-02T10:00:00Z", 0.01, gpu="cpu"), "device": "cpu"}, _check()]
    log = tmp_path / "performance.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    [ev] = build_report(log, tmp_path / "out", "qr_v2").evidence.problems
    assert ev.notes()["cases"] == ("No bench run of qr_v2 counts here yet (1 left out, see above): "
                                   "run `popkit bench qr_v2` on a GPU over the official list.")
    assert ev.notes()["diff"] == "No diff records for qr_v2 yet: run `popkit diff qr_v2`."


def test_cpu_and_chosen_case_runs_when_asked(tmp_path):
    log = _mixed_log(tmp_path)
    [ev] = build_report(log, tmp_path / "a", "qr_v2", all_cases=True).evidence.problems
    assert len(ev.check.cases) == 1 and ev.bench.gpu == "NVIDIA H200"              # the CPU runs stay out
    assert ev.hidden_line() == "Left out: 2 CPU run(s) (--include-cpu shows them)."
    [ev] = build_report(log, tmp_path / "b", "qr_v2", include_cpu=True, all_cases=True).evidence.problems
    assert ev.bench.gpu == "cpu" and ev.diff.cases[0].ratio == 2.0 and ev.hidden_line() is None
    assert [line.label for line in ev.frontier] == ["bench on NVIDIA H200"]     # a CPU geomean is never GPU speed
    assert ev.frontier_skipped_line() == ("Not in the frontier: 1 run(s) not on a known GPU "
                                          "(CPU timings are not GPU evidence).")


def test_cli_report_options(tmp_path):
    log = _mixed_log(tmp_path)
    out = CliRunner().invoke(main, ["report", "qr_v2", "--log", str(log), "-o", str(tmp_path / "a")]).output
    assert "Left out: 2 CPU run(s)" in out and "on NVIDIA H200: 1 run(s)" in out
    result = CliRunner().invoke(main, ["report", "qr_v2", "--log", str(log), "-o", str(tmp_path / "b"),
                                       "--include-cpu", "--all-cases"])
    assert result.exit_code == 0, result.output
    assert "Left out" not in result.output and "bench on cpu: 1 run(s)" in result.output


# ---- the frontier: one line per source and GPU ----------------------------------------------------------

def test_frontier_keeps_bench_and_leaderboard_apart_and_cpu_runs_out(tmp_path):
    # The frontier grouped runs by GPU name alone: a local bench and the leaderboard's score under the same
    # name were one line jumping between two kinds of number, and with --include-cpu a CPU bench drew a line
    # of its own named 'cpu', as if it were GPU evidence.
    cpu_bench = {**_bench("2026-12-04T10:00:00Z", 0.01, gpu="cpu"), "device": "cpu"}
    records = [_bench("2026-12-01T10:00:00Z", 1.0),
               {**_leaderboard("2026-12-02T12:00:00Z", 101, 0.000010, None), "gpu": "NVIDIA H200"},
               _bench("2026-12-03T10:00:00Z", 0.9), cpu_bench]
    log = tmp_path / "performance.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = build_report(log, tmp_path / "out", "qr_v2", include_cpu=True)
    [ev] = report.evidence.problems
    geomean = _geomean(BASE_US)
    assert [(line.label, line.best_us) for line in ev.frontier] == [
        ("bench on NVIDIA H200", pytest.approx([geomean, geomean * 0.9])), ("leaderboard on NVIDIA H200", [10.0])]
    assert ev.frontier_skipped_line() == ("Not in the frontier: 1 run(s) not on a known GPU "
                                          "(CPU timings are not GPU evidence).")
    rows = _rows(_Tables(report.page.read_text()).tables["qr_v2-frontier"])
    assert rows == {"bench on NVIDIA H200": [f"{geomean * 0.9:.1f}", "2026-12-03 10:00", "2"],
                    "leaderboard on NVIDIA H200": ["10.0", "2026-12-02 12:00", "1"]}
    text = summary(report)
    assert f"frontier bench on NVIDIA H200: best geomean {geomean * 0.9:.1f} us since 2026-12-03 10:00" in text
    assert "frontier leaderboard on NVIDIA H200: best geomean 10.0 us since 2026-12-02 12:00" in text
    assert ev.frontier_skipped_line() in text and ev.frontier_skipped_line() in report.page.read_text()


def test_frontier_without_gpu_runs_says_cpu_runs_never_count(tmp_path):
    log = tmp_path / "performance.jsonl"
    log.write_text(json.dumps({**_bench("2026-12-04T10:00:00Z", 0.01, gpu="cpu"), "device": "cpu"}) + "\n")
    [ev] = build_report(log, tmp_path / "out", "qr_v2", include_cpu=True).evidence.problems
    assert ev.frontier == [] and ev.bench.gpu == "cpu"
    assert ev.notes()["frontier"] == ("No GPU geomean yet: it needs a GPU bench run of the full benchmark list "
                                      "whose cases all pass, or a scored leaderboard run.")


def test_frontier_leaves_out_a_bench_of_chosen_cases_even_when_they_are_shown(tmp_path):
    # With --all-cases a bench of 3 chosen (fast) cases became the best geomean of the full list's line.
    chosen = {**_bench("2026-12-02T10:00:00Z", 1.0), "cases": [_case(s, 1.0) for s in SPECS[:3]], "geomean_us": 1.0}
    log = tmp_path / "performance.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in (_bench("2026-12-01T10:00:00Z", 1.0), chosen)))
    [ev] = build_report(log, tmp_path / "out", "qr_v2", all_cases=True).evidence.problems
    assert ev.bench.runs == 2
    assert [(line.label, line.best_us) for line in ev.frontier] == [
        ("bench on NVIDIA H200", pytest.approx([_geomean(BASE_US)]))]
    assert ev.frontier_skipped_line() == "Not in the frontier: 1 run(s) not over the full benchmark list."


# ---- leaderboard runs against the official lists ---------------------------------------------------------

def _board_run(time, submission_id, cases, geomean_us=None, public_s=None, run_mode="leaderboard"):
    """A leaderboard record of today's shape (problem and board beside it) with the given cases."""
    return {**_leaderboard(time, submission_id, public_s, None), "leaderboard": "qr_v2", "cases": cases,
            "geomean_us": geomean_us, "run_mode": run_mode}


def _report_of(tmp_path, records):
    log = tmp_path / "logs" / "performance.jsonl"
    log.parent.mkdir()
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    return build_report(log, tmp_path / "out", "qr_v2")


def test_a_leaderboard_run_of_part_of_the_benchmark_list_is_marked_and_not_in_the_frontier(tmp_path):
    # A leaderboard record's cases were never held against the official list: a run that stopped after 3 fast
    # cases (its geomean over those 3) became the board's best geomean.
    report = _report_of(tmp_path, [
        _board_run("2026-12-01T12:00:00Z", 101, [_case(s, 100.0) for s in SPECS], geomean_us=100.0),
        _board_run("2026-12-02T12:00:00Z", 102, [_case(s, 1.0) for s in SPECS[:3]], geomean_us=1.0)])
    ev, page = report.evidence.problems[0], _Tables(report.page.read_text())
    assert [(line.label, line.best_us) for line in ev.frontier] == [("leaderboard on B200", [100.0])]
    assert ev.frontier_skipped_line() == "Not in the frontier: 1 run(s) not over the full benchmark list."
    table = page.tables["qr_v2-submissions"]
    assert table[0][4] == "cases"
    assert [(row[1], row[4]) for row in table[1:]] == [("102", f"3 of {len(SPECS)} benchmarks"),
                                                       ("101", f"all {len(SPECS)} benchmarks")]
    assert f"newest submission 102 (leaderboard, B200, 3 of {len(SPECS)} benchmarks)" in summary(report)


def test_a_failed_leaderboard_submission_is_not_in_the_frontier(tmp_path):
    # A hacked (or failed, timed-out) job whose public benchmark run passed every case became the board's best
    # geomean: the frontier looked only at the cases, and the record said nothing of the job's verdict.
    report = _report_of(tmp_path, [
        {**_board_run("2026-12-01T12:00:00Z", 101, [_case(s, 100.0) for s in SPECS], geomean_us=100.0),
         "passed": True},
        {**_board_run("2026-12-02T12:00:00Z", 102, [_case(s, 1.0) for s in SPECS], geomean_us=1.0,
                      public_s=0.000001), "passed": False, "job_status": "hacked", "failures": ["job hacked"]}])
    [ev] = report.evidence.problems
    assert [(line.label, line.best_us) for line in ev.frontier] == [("leaderboard on B200", [100.0])]


def test_older_leaderboard_records_are_checked_as_far_as_their_specs_allow(tmp_path):
    # Before the client read specs under the problem's record they lacked its defaults (qr_v2's case: dense),
    # and a spec it could not read was logged as its text; a record may have no cases at all.
    def older(spec):
        return {k: v for k, v in spec.items() if (k, v) != ("case", "dense")}
    old_cases = [{**_case(s, 50.0), "spec": older(s)} for s in SPECS[:-1]]
    old_cases.append({**_case(SPECS[-1], 50.0), "spec": {"raw": format_spec(SPECS[-1])}})
    before_the_key = {**_leaderboard("2026-12-01T12:00:00Z", 101, None, None), "cases": old_cases, "geomean_us": 50.0}
    no_cases = _leaderboard("2026-12-02T12:00:00Z", 102, 0.000040, None)
    unreadable = _board_run("2026-12-03T12:00:00Z", 103, [_case(s, 1.0) for s in SPECS[:-1]]
                            + [{**_case(SPECS[-1], 1.0), "spec": {"raw": "no spec here"}}], geomean_us=1.0)
    tests = _board_run("2026-12-04T12:00:00Z", 104, [_case(s) for s in TESTS], run_mode="test")
    report = _report_of(tmp_path, [before_the_key, no_cases, unreadable, tests])
    ev, page = report.evidence.problems[0], _Tables(report.page.read_text())
    assert [(line.label, line.best_us) for line in ev.frontier] == [("leaderboard on B200", [50.0, 40.0])]
    assert ev.frontier_skipped_line() == "Not in the frontier: 1 run(s) not over the full benchmark list."
    assert {row[1]: row[4] for row in page.tables["qr_v2-submissions"][1:]} == {
        "101": f"all {len(SPECS)} benchmarks", "102": "-", "103": f"{len(SPECS) - 1} of {len(SPECS)} benchmarks",
        "104": f"all {len(TESTS)} tests"}
    assert f"newest submission 104 (test, B200, all {len(TESTS)} tests) 2026-12-04 12:00" in summary(report)


# ---- specs with any keys ----------------------------------------------------------------------------

def test_case_labels_for_specs_with_any_keys(monkeypatch):
    assert case_label({"size": 1024, "seed": 5}) == "size=1024"
    assert case_label({"seqlen": 64, "bs": 2, "dim": 128, "seed": 1}) == "seqlen=64 bs=2 dim=128"
    assert _labels([{"size": 8, "seed": 1}, {"size": 8, "seed": 2}]) == ["size=8 s1", "size=8 s2"]

    def unreadable(spec):
        raise KeyError("n")
    monkeypatch.setattr(report_data, "short_spec", unreadable)       # a label helper that assumes its keys
    assert case_label({"batch": 4, "seed": 3}) == "batch=4 seed=3"
    assert _labels([{"m": 1}, {"m": 2}]) == ["m=1", "m=2"]


def test_report_of_a_harness_problem_with_size_specs(tmp_path):
    specs = [{"size": 2 ** k, "seed": k} for k in range(10, 13)]
    cases = [{"spec": s, "status": "pass", "mean_us": 10.0 * (i + 1), "residuals": {}} for i, s in enumerate(specs)]
    diff_cases = [{**c, "incumbent_us": c["mean_us"] * 1.002, "ratio": 1 / 1.002, "verdict": "within noise"}
                  for c in cases]
    records = [{**_record("bench", "2026-12-01T10:00:00Z", cases, geomean_us=20.0), "problem": "vectorsum"},
               {**_record("diff", "2026-12-01T11:00:00Z", diff_cases, passed=True), "problem": "vectorsum"}]
    log = tmp_path / "performance.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = build_report(log, tmp_path / "out")
    assert set(report.charts["vectorsum"]) == {"cases", "frontier", "diff"}
    assert [c.label for c in report.evidence.problems[0].bench.cases] == ["size=1024", "size=2048", "size=4096"]


# ---- number formats and the diff axis ---------------------------------------------------------------

@pytest.mark.parametrize("value, text", [(None, "-"), (0.0, "0"), (0.31, "0.31"), (0.9, "0.90"), (1.4, "1.4"),
                                         (0.0016, "0.0016"), (4e-05, "4.0e-05"), (123.4, "123"), (12345.0, "12,345")])
def test_fmt_sig_keeps_significant_digits(value, text):
    assert fmt_sig(value) == text


def test_diff_axis_is_centred_on_one_with_at_least_five_percent():
    assert ratio_limits([0.997, 1.003]) == pytest.approx((0.95, 1.05))
    assert ratio_limits([]) == pytest.approx((0.95, 1.05))
    assert ratio_limits([0.5, 1.1]) == pytest.approx((0.35, 1.65))
    assert ratio_limits([3.0]) == pytest.approx((0.0, 3.6))


# ---- dependencies -----------------------------------------------------------------------------------

def test_report_without_matplotlib_is_one_line(tmp_path, monkeypatch):
    import popcorn.report
    for name in ("dashboard", "charts"):       # drop the loaded modules, so the verb imports them again
        monkeypatch.delitem(sys.modules, f"popcorn.report.{name}", raising=False)
        monkeypatch.delattr(popcorn.report, name, raising=False)
    monkeypatch.setitem(sys.modules, "matplotlib", None)              # import matplotlib now fails
    (tmp_path / "empty.jsonl").write_text("")
    result = CliRunner().invoke(main, ["report", "--log", str(tmp_path / "empty.jsonl"), "-o", str(tmp_path)])
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("error: popkit report draws its charts with matplotlib") and "pip install" in line


# ---- packaging (pyproject.toml) ---------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def test_matplotlib_is_a_runtime_dependency_and_build_is_not_installed():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(dep.startswith("matplotlib") for dep in project["project"]["dependencies"])
    assert "build" not in project.get("tool", {}).get("setuptools", {}).get("py-modules", [])


def test_the_cli_finds_build_py_from_any_folder(tmp_path):
    """Outside the project folder, the installed popkit still imports this project's build.py."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    installed = subprocess.run([sys.executable, "-c", "import popcorn; print(popcorn.__file__)"], cwd=tmp_path,
                               env=env, capture_output=True, text=True, timeout=120).stdout.strip()
    if installed and not Path(installed).resolve().is_relative_to(ROOT):
        # A git worktree run with another checkout's venv: the installed popkit is that checkout's.
        pytest.skip(f"the interpreter's popkit is installed from {Path(installed).parent.parent}, not {ROOT}")
    code = ("import popcorn.cli, build, pathlib; "
            f"assert pathlib.Path(build.__file__).resolve() == pathlib.Path({str(ROOT / 'build.py')!r}), build.__file__")
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True, timeout=120)


def test_the_report_shows_none_of_matplotlibs_notices_and_draws_whatever_its_backend_setting(tmp_path):
    # A config folder matplotlib cannot use, a bad matplotlibrc line, a font it cannot find: its warnings reached
    # the user; MPLBACKEND=nonsense ended the verb in a ValueError traceback (the charts need no backend).
    log = tmp_path / "performance.jsonl"
    log.write_text(json.dumps(_bench("2026-12-01T10:00:00Z", 1.0)) + "\n")
    (tmp_path / "not-a-folder").write_text("")
    (tmp_path / "matplotlibrc").write_text("backend: nonsense\nfont.family: No Such Font\n")
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "not-a-folder"), "MPLBACKEND": "nonsense",
           "MATPLOTLIBRC": str(tmp_path / "matplotlibrc")}
    done = subprocess.run([sys.executable, "-m", "popcorn", "report", "--log", str(log), "-o", str(tmp_path / "out")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    assert (tmp_path / "out" / "qr_v2-cases.png").read_bytes().startswith(PNG_MAGIC)


# ---- where the report goes (-o) -----------------------------------------------------------------------

def _small_log(tmp_path):
    log = tmp_path / "performance.jsonl"
    log.write_text(json.dumps(_bench("2026-12-01T10:00:00Z", 1.0)) + "\n")
    return log


def _report(*args):
    return CliRunner().invoke(main, ["report", *map(str, args)])


def test_report_to_dev_null_prints_the_summary_and_keeps_nothing(tmp_path, monkeypatch):
    # It ended in 'error: /dev/null: File exists' (exit 1): mkdir of the folder it took /dev/null for.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))   # where the thrown-away report is made
    (tmp_path / "tmp").mkdir()
    result = _report("--log", _small_log(tmp_path), "-o", os.devnull)
    assert result.exit_code == 0, result.output
    assert "bench on NVIDIA H200: 1 run(s)" in result.output
    assert result.output.splitlines()[-1] == "report: not kept (-o names the null device)"
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("kind", ["file", "character device", "inside a file"])
def test_an_out_that_is_no_folder_is_one_line(kind, tmp_path):
    # A file was click's three lines of usage ("Directory ... is a file."); /dev/zero was 'File exists'.
    (tmp_path / "a-file").write_text("keep me\n")
    out = {"file": tmp_path / "a-file", "character device": Path("/dev/zero"),
           "inside a file": tmp_path / "a-file" / "report"}[kind]
    result = _report("--log", _small_log(tmp_path), "-o", out)
    assert result.exit_code == 1
    expected = {"file": f"error: -o {out}: a file, not a folder; the report is a folder (index.html and its "
                        "charts): name a folder, or /dev/null to print the summary alone",
                "character device": f"error: -o {out}: a character device, not a folder; the report is a folder "
                                    "(index.html and its charts): name a folder, or /dev/null to print the summary "
                                    "alone",
                "inside a file": f"error: -o {out}: {tmp_path / 'a-file'} is a file, not a folder; nothing was "
                                 "written"}[kind]
    assert result.output.splitlines() == [expected]
    assert (tmp_path / "a-file").read_text() == "keep me\n"


def test_an_out_in_a_missing_folder_is_one_line_naming_it(tmp_path):
    # It made every missing folder on the way (a typo in the path became a new tree of folders).
    out = tmp_path / "typo" / "deeper" / "report"
    result = _report("--log", _small_log(tmp_path), "-o", out)
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"error: -o {out}: no such folder {out.parent} (the report makes its own folder, not the ones above it); "
        "nothing was written"]
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("out, line", [
    # -o '' was the current folder (Path('') is '.'), which got index.html and every chart.
    ("", "error: -o '': an empty folder name; name the report's folder (-o report), or /dev/null for the summary "
         "alone; nothing was written"),
    # -o report.html made a folder report.html/ with index.html inside.
    ("report.html", "error: -o report.html: -o names the report's folder (index.html and its charts go inside): "
                    "say -o report; nothing was written"),
])
def test_an_out_that_names_no_fit_folder_is_one_line(tmp_path, monkeypatch, out, line):
    monkeypatch.chdir(tmp_path)
    result = _report("--log", _small_log(tmp_path), "-o", out)
    assert result.exit_code == 1
    assert result.output.splitlines() == [line]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["performance.jsonl"]


def test_a_folder_named_like_a_page_made_on_purpose_is_used(tmp_path):
    (tmp_path / "site.html").mkdir()
    assert _report("--log", _small_log(tmp_path), "-o", tmp_path / "site.html").exit_code == 0
    assert (tmp_path / "site.html" / "index.html").is_file()


def test_a_new_out_folder_is_made_whole_with_the_usual_permissions(tmp_path):
    out = tmp_path / "report"
    result = _report("--log", _small_log(tmp_path), "-o", out)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "qr_v2-cases.png", "qr_v2-frontier.png"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["performance.jsonl", "report"]     # no staging folder left


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
@pytest.mark.parametrize("existing", [False, True])
def test_a_report_that_fails_half_way_leaves_nothing_half_written(failure, existing, tmp_path, monkeypatch):
    # The charts were drawn into the folder one by one and the page written last, in place: a full disk or
    # Ctrl-C left new charts beside an old page, or a half-written index.html.
    from popcorn.report import dashboard
    out = tmp_path / "report"
    if existing:
        out.mkdir()
        (out / "index.html").write_text("the old page\n")
        (out / "qr_v2-cases.png").write_bytes(b"the old chart")

    def failing_page(evidence, charts, notes, path):
        path.write_text("<html><body>half")
        raise failure
    monkeypatch.setattr(dashboard, "write_page", failing_page)
    result = _report("--log", _small_log(tmp_path), "-o", out)
    if isinstance(failure, OSError):
        assert result.exit_code == 1
        assert result.output.splitlines() == [
            f"error: {out}: the report could not be written (No space left on device); nothing in it was changed"]
    else:
        assert (result.exit_code, result.output) == (130, "\ninterrupted\n")
    if existing:
        assert sorted(p.name for p in out.iterdir()) == ["index.html", "qr_v2-cases.png"]
        assert ((out / "index.html").read_text(), (out / "qr_v2-cases.png").read_bytes()) == (
            "the old page\n", b"the old chart")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["performance.jsonl"] + (["report"] if existing else []))


def test_a_coverage_of_one_case_reads_as_one():
    # A board ranked by its last case alone (vectoradd) read "all 1 benchmarks".
    coverage = report_data.Coverage
    assert str(coverage("benchmarks", 1, 1)) == "the 1 benchmark"
    assert str(coverage("benchmarks", 0, 1)) == "0 of 1 benchmark"
    assert str(coverage("benchmarks", 12, 12)) == "all 12 benchmarks"
    assert str(coverage("tests", 3, 22)) == "3 of 22 tests"


def test_a_long_check_s_chart_draws_its_failed_and_tightest_cases_in_order(tmp_path):
    # A robust check of ~750 cases drew a 931 x 28,965-pixel chart (4.7 MB) into the page.
    CheckCase = report_data.CheckCase
    cases = [CheckCase(f"case {i}", "pass", None, {"factor": i / 1000, "orthogonality": None}) for i in range(100)]
    cases[7] = CheckCase("case 7", "fail", "boom", {"factor": None, "orthogonality": None})
    check = report_data.Check("2026-12-01T00:00:00Z", "abc", "H200", ["factor", "orthogonality"], cases)
    drawn = chart_cases(check, most=5)
    assert [c.label for c in drawn] == ["case 7", "case 96", "case 97", "case 98", "case 99"]
    assert chart_cases(check, most=100) == cases
    check_chart(check, "qr_v2: newest check", tmp_path / "check.png")
    height = int.from_bytes((tmp_path / "check.png").read_bytes()[20:24], "big")
    assert height < 3000                            # 40 rows, not 100
