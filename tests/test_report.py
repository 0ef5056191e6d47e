"""`popkit report` on logs the tests write: charts present, page numbers match the log, gaps noted."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from checks.problems import load_problem, short_spec
from popcorn.cli import main
from popcorn.report import build_report

SPECS = load_problem("qr_v2").benchmarks
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


def _check():
    fractions = [(0.31, 0.12), (0.9, 0.05), (1.4, 0.2)]  # factor, orthogonality: near, then over
    cases = [_case(s, status="pass" if f < 1 else "fail",
                   residuals={"factor": [f * 20.0, 20.0], "orthogonality": [o * 100.0, 100.0]})
             for s, (f, o) in zip(SPECS, fractions)]
    return _record("check", "2026-12-01T12:00:00Z", cases)


def _diff():
    rows = [(100.0, 80.0, "faster"), (200.0, 230.0, "slower"), (300.0, 301.0, "within noise")]
    cases = [_case(s, cand, incumbent_us=inc, ratio=cand / inc, verdict=v,
                   residuals={"factor": [2.0, 20.0]}, incumbent_residuals={"factor": [4.0, 20.0]})
             for s, (inc, cand, v) in zip(SPECS, rows)]
    return _record("diff", "2026-12-01T13:00:00Z", cases, incumbent_sha256="cd" * 32,
                   passed=False, changed_parts=["qr_v2/panel.cu"])


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


def test_frontier_has_one_line_per_gpu(full):
    _, page, _ = full
    rows = _rows(page.tables["qr_v2-frontier"])
    geomean = _geomean(BASE_US)
    assert rows["NVIDIA H200"] == [f"{geomean * 0.8:.1f}", "2026-12-02 10:00", "3"]
    assert rows["NVIDIA H100"] == [f"{geomean * 0.7:.1f}", "2026-12-01 10:30", "1"]
    assert rows["B200"] == ["120.0", "2026-12-03 12:00", "2"]  # from public_score_s


def test_newest_diff_case_by_case(full):
    _, page, html = full
    rows = _rows(page.tables["qr_v2-diff"])
    assert rows[short_spec(SPECS[0])] == ["100.0", "80.0", "0.800", "faster", "0.10", "0.20"]
    assert rows[short_spec(SPECS[1])] == ["200.0", "230.0", "1.150", "slower", "0.10", "0.20"]
    assert rows[short_spec(SPECS[2])] == ["300.0", "301.0", "1.003", "within noise", "0.10", "0.20"]
    assert "did not pass" in html and "qr_v2/panel.cu" in html


def test_newest_check_fractions_of_limits(full):
    _, page, _ = full
    table = page.tables["qr_v2-check"]
    assert table[0] == ["case", "status", "factor", "orthogonality", "error"]
    rows = _rows(table)
    assert rows[short_spec(SPECS[0])] == ["pass", "0.31", "0.12", ""]
    assert rows[short_spec(SPECS[1])] == ["pass", "0.90", "0.05", ""]
    assert rows[short_spec(SPECS[2])] == ["fail", "1.40", "0.20", "boom"]


def test_submissions_newest_first(full):
    _, page, _ = full
    table = page.tables["qr_v2-submissions"]
    assert [row[1:6] for row in table[1:]] == [
        ["102", "leaderboard", "B200", "120.0", "-"],
        ["101", "leaderboard", "B200", "150.0", "155.0"],
    ]
    assert table[1][6] == "102.json (missing)" and table[2][6] == "101.json"


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
        {"mode": "check", "cases": None},     # no problem: shown under "?"
        [1, 2],                               # not an object
    ]
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    report = build_report(log, tmp_path / "out")
    assert [ev.name for ev in report.evidence.problems] == ["?", "qr_v2"]
    assert set(report.charts["qr_v2"]) == {"cases", "frontier", "check"}
    assert report.evidence.problems[1].bench.runs == 1  # the empty newest bench hides nothing
    assert report.notes["qr_v2"] == {
        "diff": "The newest diff record holds no case ratios.",
        "submissions": "No leaderboard submissions for qr_v2 logged yet."}
    assert report.notes["?"]["check"] == "The newest check record holds no gate residuals."
    assert report.evidence.notes == [f"{log}:6: not a JSON object"]


def test_failing_bench_counts_for_no_time_and_no_frontier(tmp_path):
    log = tmp_path / "performance.jsonl"
    failed = _record("bench", "2026-12-01T10:00:00Z", [_case(SPECS[0], 10.0, status="fail")],
                     geomean_us=10.0)
    log.write_text(json.dumps(failed) + "\n")
    report = build_report(log, tmp_path / "out")
    assert report.charts["qr_v2"] == {}
    assert report.notes["qr_v2"]["cases"] == "The bench records for qr_v2 hold no passing, timed case."
    assert report.notes["qr_v2"]["frontier"].startswith("No geomean yet")


def test_cli_prints_summary_and_writes_page(tmp_path):
    log = write_full_log(tmp_path)
    result = CliRunner().invoke(main, ["report", "qr_v2", "--log", str(log), "-o",
                                       str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"performance.jsonl:{CORRUPT_LINE}: not JSON" in out
    assert f"newest geomean {_geomean(BASE_US) * 0.9:.1f} us" in out
    assert "newest diff 2026-12-01 13:00: did not pass (1 faster, 1 slower, 1 within noise)" in out
    assert ("newest check 2026-12-01 12:00: 2/3 cases pass, tightest: factor at 1.4 of its limit"
            f" on {short_spec(SPECS[2])}") in out
    assert "newest submission 102 (leaderboard, B200) 2026-12-03 12:00: public 120.0 us" in out
    assert (tmp_path / "out" / "index.html").is_file()


def test_cli_unknown_problem_is_one_line(tmp_path):
    result = CliRunner().invoke(main, ["report", "nosuch", "--log", str(tmp_path / "none.jsonl"),
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "no records for problem 'nosuch'" in result.output


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
