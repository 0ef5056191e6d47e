"""popcorn.evidence.logs.merge_logs and `popkit merge`: records from a GPU host join logs/ once, validated."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile

import pytest
from click.testing import CliRunner

from popcorn.cli import main
from popcorn.errors import PopkitError
from popcorn.evidence import archive, logs

SPEC = {"batch": 2, "n": 8, "cond": 1, "seed": 3, "case": "mixed"}


def record(time, mode="check", sha="ab" * 32, **extra):
    return logs.new_record("qr_v2", mode, time=time, submission_sha256=sha, gpu="NVIDIA H200", device="cuda",
                           commit="c0ffee" * 7, cases=[{"spec": SPEC, "status": "pass"}], **extra)


def write(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.fixture
def target(tmp_path):
    """The local log, with one record that the incoming file repeats."""
    log = tmp_path / "logs" / "performance.jsonl"
    log.parent.mkdir()
    return write(log, [record("2026-12-01T09:00:00Z")])


def test_new_records_are_appended_in_time_order_and_repeats_skipped(tmp_path, target):
    before = target.read_text()
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z", "bench"),
                                              record("2026-12-01T09:00:00Z"),              # already there
                                              record("2026-12-01T10:00:00Z", "diff")])
    result = logs.merge_logs([incoming], target)
    assert (result.read, result.added, result.present, result.bad) == (3, 2, 1, [])
    text = target.read_text()
    assert text.startswith(before)                                   # the old lines stay as they were
    assert [r["mode"] for r in logs.read_records(target)[0]] == ["check", "diff", "bench"]
    again = logs.merge_logs([incoming, incoming], target)            # merging twice adds nothing
    assert (again.added, again.present) == (0, 6) and target.read_text() == text


def test_an_older_run_merged_late_joins_the_log_in_time_order(tmp_path, target):
    newer = write(tmp_path / "newer.jsonl", [record("2026-12-01T12:00:00Z", "bench")])
    older = write(tmp_path / "older.jsonl", [record("2026-12-01T10:30:00Z", "diff")])
    logs.merge_logs([newer], target)
    logs.merge_logs([older], target)                                  # a folder from earlier, merged last
    times = [r["time"] for r in logs.read_records(target)[0]]
    assert times == ["2026-12-01T09:00:00Z", "2026-12-01T10:30:00Z", "2026-12-01T12:00:00Z"]
    assert logs.read_records(target)[0][-1]["mode"] == "bench"        # the newest is last, as readers assume


def test_a_bad_line_keeps_its_place_when_an_older_run_is_merged(tmp_path, target):
    with target.open("a") as log:
        log.write("not json\n")
    logs.merge_logs([write(tmp_path / "older.jsonl", [record("2026-12-01T08:00:00Z", "diff")])], target)
    lines = target.read_text().splitlines()
    assert json.loads(lines[0])["time"] == "2026-12-01T08:00:00Z"
    assert json.loads(lines[1])["time"] == "2026-12-01T09:00:00Z" and lines[2] == "not json"


def test_a_run_is_the_same_only_with_the_same_time_problem_mode_and_file(tmp_path, target):
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T09:00:00Z", sha="cd" * 32),
                                              record("2026-12-01T09:00:00Z", mode="bench"),
                                              {**record("2026-12-01T09:00:00Z"), "problem": "eigh"}])
    assert logs.merge_logs([incoming], target).added == 3


@pytest.mark.parametrize("line, why", [
    ('{"time": "2026-12-01T10:00:00Z", "problem": ', "not strict JSON"),
    ('[1, 2]', "not a JSON object"),
    (json.dumps(record("2026-12-01T10:00:00Z"))[:-1] + ', "x": NaN}', "not strict JSON (NaN is not strict JSON)"),
    (json.dumps({k: v for k, v in record("2026-12-01T10:00:00Z").items() if k not in ("gpu", "cases")}),
     "missing gpu, cases"),
    (json.dumps(record("yesterday")), "time 'yesterday' is not an ISO 8601 UTC time"),
    # Each read as a time, but the log is kept in the order of its times' text, where these fall out of place:
    # '20261201T...' after every '2026-12-...', '... 10:00:00Z' before '...T09:00:00Z', '...00.5Z' before '...00Z'.
    (json.dumps(record("20261201T100000Z")), "time '20261201T100000Z' is not an ISO 8601 UTC time in popkit's form "
                                              "(2026-12-01T10:00:00Z, which sorts as text)"),
    (json.dumps(record("2026-12-01 10:00:00Z")), "time '2026-12-01 10:00:00Z' is not an ISO 8601 UTC time in"),
    (json.dumps(record("2026-12-01T10:00:00.5Z")), "time '2026-12-01T10:00:00.5Z' is not an ISO 8601 UTC time in"),
    (json.dumps({**record("2026-12-01T10:00:00Z"), "mode": "timing"}), "mode 'timing' is not one of"),
    (json.dumps(record("2026-12-01T10:00:00Z", sha="xyz")), "submission_sha256 is not a sha256"),
    (json.dumps({**record("2026-12-01T10:00:00Z"), "geomean_us": "fast"}), "geomean_us is not a number"),
    (json.dumps({**record("2026-12-01T10:00:00Z"), "device": 0}), "device is not a string"),
    (json.dumps({**record("2026-12-01T10:00:00Z"), "leaderboard": ["qr_v2"]}), "leaderboard is not a string"),
    (json.dumps({**record("2026-12-01T10:00:00Z"), "cases": [{"status": "pass"}]}), "case 0 has no spec object"),
    (json.dumps({**record("2026-12-01T10:00:00Z"), "cases": [{"spec": SPEC, "status": "ok"}]}),
     "case 0 status 'ok' is not pass or fail"),
])
def test_bad_lines_are_named_by_file_and_line_and_skipped(tmp_path, target, line, why):
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z"), line])
    result = logs.merge_logs([incoming], target)
    [bad] = result.bad
    assert bad.startswith(f"{incoming}:2: {why}"), bad
    assert result.added == 1 and len(logs.read_records(target)[0]) == 2


def test_a_missing_file_writes_nothing(tmp_path, target):
    before = target.read_bytes()
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z")])
    with pytest.raises(PopkitError, match="nope.jsonl: no such file"):
        logs.merge_logs([incoming, tmp_path / "nope.jsonl"], target)
    assert target.read_bytes() == before


def test_merge_into_a_new_log_and_after_a_torn_line(tmp_path):
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z")])
    fresh = tmp_path / "new" / "performance.jsonl"
    assert logs.merge_logs([incoming], fresh).added == 1 and len(logs.read_records(fresh)[0]) == 1
    torn = tmp_path / "torn.jsonl"
    torn.write_text(json.dumps(record("2026-12-01T09:00:00Z")) + '\n{"time": ')
    logs.merge_logs([incoming], torn)
    records, problems = logs.read_records(torn)
    assert len(records) == 2 and problems == [f"{torn}:2: not JSON (Expecting value)"]


@pytest.mark.parametrize("lines", [[], ["not json", json.dumps(record("yesterday"))]])
def test_a_merge_of_nothing_into_a_new_log_leaves_no_log_and_no_folder(tmp_path, lines):
    # The log's lock made the file (and its folder) before the merge found nothing to add: an empty NEW.jsonl
    # stayed behind, also when the merge was refused.
    incoming = write(tmp_path / "gpu.jsonl", lines)
    fresh = tmp_path / "new" / "performance.jsonl"
    result = CliRunner().invoke(main, ["merge", str(incoming), "--log", str(fresh)])
    assert result.exit_code == (1 if lines else 0), result.output
    assert not (tmp_path / "new").exists()


def test_tables_are_copied_under_the_run_time(tmp_path, target):
    out = tmp_path / "out"
    out.mkdir()
    write(out / "performance.jsonl", [record("2026-12-01T11:00:00Z"), record("2026-12-01T10:30:05Z")])
    (out / "01-check-qr_v2.txt").write_text("check table\n")
    (out / "gpu.txt").write_text("NVIDIA H200\n")
    (out / "notes.md").write_text("not a table\n")
    (out / "sub.txt").mkdir()                                        # a folder is skipped
    result = logs.merge_logs([out / "performance.jsonl"], target, tables=out)
    device = target.parent / "device"
    assert sorted(p.name for p in device.iterdir()) == ["20261201T103005Z-01-check-qr_v2.txt",
                                                         "20261201T103005Z-gpu.txt"]
    assert sorted(result.tables) == sorted(device.iterdir())
    assert (device / "20261201T103005Z-gpu.txt").read_text() == "NVIDIA H200\n"
    assert logs.merge_logs([out / "performance.jsonl"], target, tables=out).tables == []   # same run again
    (out / "gpu.txt").write_text("another GPU\n")
    before = target.read_bytes()
    with pytest.raises(PopkitError, match="20261201T103005Z-gpu.txt exists with other content"):
        logs.merge_logs([out / "performance.jsonl"], target, tables=out)
    assert (device / "20261201T103005Z-gpu.txt").read_text() == "NVIDIA H200\n" and target.read_bytes() == before


def test_tables_folder_must_exist(tmp_path, target):
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z")])
    with pytest.raises(PopkitError, match="--tables .*nowhere: no such folder"):
        logs.merge_logs([incoming], target, tables=tmp_path / "nowhere")
    assert len(logs.read_records(target)[0]) == 1


def test_a_tables_folder_without_a_table_is_refused_before_anything_is_written(tmp_path, target):
    # --tables naming the folder above the run's (its tables one level down) merged the records and copied
    # nothing, without a word.
    run = tmp_path / "out" / "s"
    run.mkdir(parents=True)
    incoming = write(run / "performance.jsonl", [record("2026-12-01T11:00:00Z")])
    (run / "01-check-qr_v2.txt").write_text("check table\n")
    before = target.read_bytes()
    result = CliRunner().invoke(main, ["merge", str(incoming), "--log", str(target), "--tables", str(run.parent)])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        f"error: --tables {run.parent}: no .txt table in it (a GPU session writes them beside its "
        "performance.jsonl, e.g. 01-check-qr_v2.txt); nothing merged"]
    assert target.read_bytes() == before and not (target.parent / "device").exists()


def test_cli_merge_reports_counts_and_bad_lines(tmp_path, target):
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z"), record("2026-12-01T09:00:00Z"),
                                              "not json"])
    result = CliRunner().invoke(main, ["merge", str(incoming), "--log", str(target)])
    assert result.exit_code == 0, result.output
    assert f"warning: skipped {incoming}:3: not strict JSON" in result.output
    assert (f"merged into {target}: 1 record(s) added, 1 already there, 1 bad line(s) skipped "
            f"(of 2 valid record(s) read)") in result.output


def test_cli_merge_shows_five_bad_lines_and_a_count(tmp_path, target):
    # Every bad line was a warning of its own, with no cap.
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z")] + ["not json"] * 30)
    result = CliRunner().invoke(main, ["merge", str(incoming), "--log", str(target)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warnings[:5] == [f"warning: skipped {incoming}:{n}: not strict JSON (Expecting value)" for n in range(2, 7)]
    assert warnings[5:] == ["warning: ... and 25 more bad line(s) (30 in all)"]
    assert "1 record(s) added, 0 already there, 30 bad line(s) skipped" in result.output


def test_capped_keeps_short_lists_whole():
    assert logs.capped([]) == [] and logs.capped(["a"] * 5) == ["a"] * 5
    assert logs.capped(list("abcdefg"), shown=2) == ["a", "b", "... and 5 more bad line(s) (7 in all)"]


def test_a_file_with_only_bad_lines_is_refused_and_nothing_is_written(tmp_path, target):
    out = tmp_path / "out"
    out.mkdir()
    incoming = write(out / "performance.jsonl", ["not json", json.dumps(record("yesterday"))])
    (out / "gpu.txt").write_text("NVIDIA H200\n")
    before = target.read_bytes()
    with pytest.raises(PopkitError, match=r"no valid record in .*: 2 bad line\(s\), the first .*:1: not strict JSON"):
        logs.merge_logs([incoming], target, tables=out)
    assert target.read_bytes() == before and not (target.parent / "device").exists()
    result = CliRunner().invoke(main, ["merge", str(incoming), "--log", str(target)])
    assert result.exit_code == 1 and "nothing merged" in result.output


def test_cli_merge_needs_files_and_names_a_missing_one(tmp_path, target):
    assert CliRunner().invoke(main, ["merge", "--log", str(target)]).exit_code == 2
    result = CliRunner().invoke(main, ["merge", str(tmp_path / "x.jsonl"), "--log", str(target)])
    assert result.exit_code == 1 and result.output == f"error: {tmp_path / 'x.jsonl'}: no such file\n"


def test_merging_into_a_file_that_is_not_a_log_is_refused(tmp_path):
    # merge --log submission.py would have rewritten the submission with records in it.
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z")])
    submission = tmp_path / "submission.py"
    submission.write_text("def custom_kernel(data):\n    return data\n")
    with pytest.raises(PopkitError, match=r"submission.py: not an evidence log \(its name ends in .py; .*nothing merged"):
        logs.merge_logs([incoming], submission)
    assert submission.read_text() == "def custom_kernel(data):\n    return data\n"


def test_merging_into_promotes_history_is_refused_in_one_line(tmp_path):
    # logs/incumbents/history.jsonl holds JSON records (so it passed as a log), none of them a run.
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z")])
    history = tmp_path / "history.jsonl"
    history.write_text('{"time": "2026-12-01T10:00:00Z", "problem": "qr_v2", "evidence": {}, "forced": true}\n')
    result = CliRunner().invoke(main, ["merge", str(incoming), "--log", str(history)])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"error: {history}: not an evidence log (none of its 1 record(s) is a check, bench, diff or leaderboard run "
        "(no such 'mode'); a log holds one JSON record per line, like logs/performance.jsonl): nothing merged"]
    assert "forced" in history.read_text() and len(history.read_text().splitlines()) == 1


def test_a_log_whose_folder_takes_no_new_file_is_named_itself(tmp_path, target, monkeypatch):
    # 'error: /sys/.x.jsonl.chmittnp: Permission denied': the temporary file the replace goes through.
    import tempfile

    def refused(prefix, dir):
        raise PermissionError(13, "Permission denied", f"{dir}/{prefix}chmittnp")
    monkeypatch.setattr(tempfile, "mkstemp", refused)
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z", "bench")])
    result = CliRunner().invoke(main, ["merge", str(incoming), "--log", str(target)])
    assert result.exit_code == 1 and result.output.splitlines() == [f"error: {target}: Permission denied"]


def test_records_made_here_pass_the_merge_validation():
    made = logs.new_record("qr_v2", "bench", submission_sha256="ab" * 32, device="cpu",
                           cases=[{"spec": SPEC, "status": "pass"}])
    assert logs.record_problem(json.loads(json.dumps(made))) is None
    assert made["gpu"] == "cpu"               # a CPU record says so even when the run reported no environment


def test_a_log_that_is_a_device_or_a_pipe_is_written_into_not_replaced(tmp_path, target):
    # write_atomic replaced whatever stood at the path by a regular file: `merge FILE --log /dev/null`, run as root,
    # put a file of records where the null device was. A named pipe stands in for the device here.
    import threading
    from popcorn.evidence.files import write_atomic
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    got = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_bytes()))
    reader.start()
    write_atomic(pipe, "a line\n")
    reader.join(timeout=30)
    assert got == [b"a line\n"] and stat.S_ISFIFO(os.stat(pipe).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "pipe"]      # no temporary file beside it


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="making a device node needs root")
def test_merge_into_a_null_device_keeps_the_device(tmp_path):
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))          # the null device's numbers, in tmp_path
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z", "bench")])
    result = CliRunner().invoke(main, ["merge", str(incoming), "--log", str(null)])
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.stat(null).st_mode)


def test_merge_reads_a_device_or_a_pipe(tmp_path, target):
    # `merge /dev/null` said '/dev/null: no such file' (it took only regular files), and so did /dev/stdin.
    before = target.read_text()
    result = CliRunner().invoke(main, ["merge", os.devnull, "--log", str(target)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"merged into {target}: 0 record(s) added, 0 already there, 0 bad line(s) "
                                          "skipped (of 0 valid record(s) read)"]
    assert target.read_text() == before
    with pytest.raises(PopkitError, match=f"^{tmp_path}: a folder, not a log file; nothing merged$"):
        logs.merge_logs([tmp_path], target)


def test_records_appended_during_a_merge_are_kept(tmp_path, target):
    # merge read the log, then replaced it: a record that a check appended in between, or that another merge
    # wrote, was lost (48 of 220 records in a run of merges beside appends).
    import threading
    sources = [write(tmp_path / f"gpu{k}.jsonl", [record(f"2026-12-01T10:{k:02d}:00Z")]) for k in range(20)]
    merger = threading.Thread(target=lambda: [logs.merge_logs([source], target) for source in sources])
    merger.start()
    for k in range(100):
        logs.append_record(record(f"2026-12-02T00:00:{k % 60:02d}Z", "bench", sha=f"{k:064x}"), target)
    merger.join()
    assert len(logs.read_records(target)[0]) == 1 + 20 + 100


def test_merge_parses_each_line_of_the_log_once(tmp_path, target, monkeypatch):
    # A log of 296 MB took 38 s and 1.9 GB to merge two records into: it was read and parsed twice, as records.
    write(target, [record(f"2026-12-01T09:{k:02d}:00Z") for k in range(50)])
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z")])
    parsed = []
    real = json.loads
    monkeypatch.setattr(logs.json, "loads", lambda text, **kw: parsed.append(text) or real(text, **kw))
    assert logs.merge_logs([incoming], target).added == 1
    assert len(parsed) == 50 + 1 + 1        # the log's lines, the incoming one, refuse_non_log's first line


def test_a_log_line_with_a_list_for_its_time_is_kept_not_a_traceback(tmp_path, target):
    # 'TypeError: unhashable type: list' from the set of the log's identities (a hand-edited line).
    write(target, ['{"time": ["x"], "problem": "qr_v2", "mode": "check"}', record("2026-12-01T09:00:00Z")])
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z")])
    assert logs.merge_logs([incoming], target).added == 1
    assert target.read_text().startswith('{"time": ["x"]') and len(logs.read_records(target)[0]) == 3


def test_a_log_that_is_a_link_stays_a_link(tmp_path, target):
    # A log linked to a shared one (logs/performance.jsonl -> ../shared/perf.jsonl) was replaced by a file of its
    # own: the shared log never got the records, and every later run wrote beside it.
    link = tmp_path / "linked.jsonl"
    link.symlink_to(target)
    incoming = write(tmp_path / "gpu.jsonl", [record("2026-12-01T11:00:00Z")])
    assert logs.merge_logs([incoming], link).added == 1
    assert link.is_symlink() and len(logs.read_records(target)[0]) == 2


def test_tables_of_a_run_without_a_record_are_refused(tmp_path, target):
    # Named after the time of the merge instead, they were copied again, under a new name, at every merge.
    run = tmp_path / "out"
    run.mkdir()
    incoming = write(run / "performance.jsonl", [])
    (run / "01-check-qr_v2.txt").write_text("check table\n")
    with pytest.raises(PopkitError, match=r"^--tables .*out: no record in .*performance.jsonl names the run \(its "
                                          r"tables are named after its first record's time\); nothing merged$"):
        logs.merge_logs([incoming], target, tables=run)
    assert not (target.parent / "device").exists()


# ---- a device run's archive (gpu_session.sh -a FILE.tgz) ----------------------------------------------------------

BUILT = b"#!POPCORN leaderboard qr_v2\ndef custom_kernel(data):\n    return data\n"


def run_folder(folder, *times):
    """A run folder as gpu_session.sh leaves it: records, a table a verb, gpu.txt, builds/qr_v2.py."""
    (folder / "builds").mkdir(parents=True)
    write(folder / "performance.jsonl", [record(time, sha=f"{k:064x}") for k, time in enumerate(times)])
    for k in range(len(times)):
        (folder / f"{k + 1:02d}-check-qr_v2.txt").write_text(f"table {k} of {folder}\n")
    (folder / "gpu.txt").write_text("NVIDIA H200\n")
    (folder / "builds" / "qr_v2.py").write_bytes(BUILT + str(folder).encode())
    return folder


def pack(path, *folders, mode="w:gz", extra=(), base=None):
    """FOLDERS packed as gpu_session.sh packs its DIR (`tar -C PARENT NAME`), or under their paths from BASE, then
    EXTRA members (a tarfile.TarInfo and its bytes)."""
    with tarfile.open(path, mode) as tar:
        for folder in folders:
            tar.add(folder, arcname=folder.relative_to(base or folder.parent))
        for info, data in extra:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def member(name, data=b"x", kind=tarfile.REGTYPE, linkname=""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, linkname, len(data) if kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


@pytest.fixture
def run(tmp_path):
    return run_folder(tmp_path / "back" / "gs", "2026-12-01T11:00:00Z", "2026-12-01T10:30:05Z")


def untouched(tmp_path, target, before):
    """Nothing of a refused merge was written: the log as it was, no table, no build."""
    return (target.read_bytes() == before and not (target.parent / "device").exists()
            and not (tmp_path / "builds").exists())


@pytest.mark.parametrize("name, mode", [("gs.tgz", "w:gz"), ("gs.tar.gz", "w:gz"), ("gs.tar", "w")])
def test_an_archive_merges_as_its_folder_does_and_its_builds_are_kept_by_run(tmp_path, target, run, name, mode):
    result = archive.merge_files([pack(tmp_path / name, run, mode=mode)], target, builds=tmp_path / "builds")
    assert (result.read, result.added, result.present, result.bad) == (2, 2, 0, [])
    assert len(logs.read_records(target)[0]) == 3
    [build] = result.builds
    assert build == tmp_path / "builds" / "20261201T103005Z" / "qr_v2.py"
    assert build.read_bytes() == (run / "builds" / "qr_v2.py").read_bytes()
    # The tables as `merge DIR/performance.jsonl --tables DIR` copies them: the same names, the same bytes.
    by_hand = tmp_path / "by-hand" / "performance.jsonl"
    logs.merge_logs([run / "performance.jsonl"], by_hand, tables=run)
    device, hand = target.parent / "device", by_hand.parent / "device"
    assert sorted(p.name for p in device.iterdir()) == sorted(p.name for p in hand.iterdir()) == [
        "20261201T103005Z-01-check-qr_v2.txt", "20261201T103005Z-02-check-qr_v2.txt", "20261201T103005Z-gpu.txt"]
    assert all((device / p.name).read_bytes() == p.read_bytes() for p in hand.iterdir())
    assert sorted(result.tables) == sorted(device.iterdir())
    again = archive.merge_files([tmp_path / name], target, builds=tmp_path / "builds")    # adds nothing ...
    assert (again.added, again.present, again.tables, again.builds) == (0, 2, [], [build])    # ... and shows the build


@pytest.mark.skipif(shutil.which("tar") is None, reason="no tar command")
def test_an_archive_written_as_gpu_session_writes_it_is_merged(tmp_path, target, run):
    # scripts/gpu_session.sh's save_archive: GNU tar's own headers and folder members, not Python's.
    packed = tmp_path / "gs.tgz"
    subprocess.run(["tar", "-czf", str(packed), "-C", str(run.parent), run.name], check=True)
    result = archive.merge_files([packed], target, builds=tmp_path / "builds")
    assert (result.added, len(result.tables), [build.name for build in result.builds]) == (2, 3, ["qr_v2.py"])


def test_two_runs_in_one_archive_keep_their_own_names(tmp_path, target):
    first = run_folder(tmp_path / "s1" / "gs", "2026-12-01T10:00:00Z")
    second = run_folder(tmp_path / "s2" / "gs", "2026-12-01T12:00:00Z")
    both = pack(tmp_path / "both.tgz", first, second, base=tmp_path)
    result = archive.merge_files([both], target, builds=tmp_path / "builds")
    assert result.added == 2
    assert sorted(p.name for p in (target.parent / "device").iterdir()) == [
        "20261201T100000Z-01-check-qr_v2.txt", "20261201T100000Z-gpu.txt",
        "20261201T120000Z-01-check-qr_v2.txt", "20261201T120000Z-gpu.txt"]
    assert [p.relative_to(tmp_path / "builds").as_posix() for p in result.builds] == [
        "20261201T100000Z/qr_v2.py", "20261201T120000Z/qr_v2.py"]
    assert result.builds[1].read_bytes() == (second / "builds" / "qr_v2.py").read_bytes()


@pytest.mark.parametrize("extra, why", [
    (member("../evil.txt"), "../evil.txt: outside the archive's folder (an absolute path or '..')"),
    (member("gs/../../evil.txt"), "gs/../../evil.txt: outside the archive's folder"),
    (member("/tmp/evil.txt"), "/tmp/evil.txt: outside the archive's folder"),
    (member("gs/builds/eigh.py", kind=tarfile.SYMTYPE, linkname="/etc/passwd"),
     "gs/builds/eigh.py: a link to /etc/passwd (a run's archive holds only files and folders)"),
    (member("gs/gpu2.txt", kind=tarfile.LNKTYPE, linkname="gs/gpu.txt"), "gs/gpu2.txt: a link to gs/gpu.txt"),
    (member("gs/pipe.txt", kind=tarfile.FIFOTYPE), "gs/pipe.txt: neither a file nor a folder"),
    (member("./gs/gpu.txt"), "./gs/gpu.txt: twice in the archive"),          # the first one would be lost
])
def test_an_archive_with_a_member_outside_it_or_a_link_is_refused_and_nothing_written(tmp_path, target, run, extra,
                                                                                        why):
    before = target.read_bytes()
    bad = pack(tmp_path / "bad.tgz", run, extra=[extra])
    with pytest.raises(PopkitError, match=f"^{re.escape(f'{bad}: {why}')}.*; nothing merged$"):
        archive.merge_files([bad], target, builds=tmp_path / "builds")
    assert untouched(tmp_path, target, before) and not (tmp_path / "evil.txt").exists()


def test_a_truncated_or_corrupt_archive_is_refused_in_one_line(tmp_path, target, run):
    before = target.read_bytes()
    whole = pack(tmp_path / "whole.tgz", run).read_bytes()
    plain = pack(tmp_path / "whole.tar", run, mode="w").read_bytes()
    with tarfile.open(tmp_path / "whole.tar") as tar:        # a tar cut right before a member reads as a whole one
        log = tar.getmember("gs/performance.jsonl")
    damaged = bytearray(whole)
    damaged[len(whole) // 2] ^= 0xFF
    for name, data, why in (("cut.tgz", whole[:len(whole) // 2], "Compressed file ended before the end-of-stream"),
                            ("damaged.tgz", bytes(damaged), ""),
                            ("cut.tar", plain[:log.offset], "it ends before its closing blocks: truncated"),
                            ("cut-in-a-file.tar", plain[:log.offset_data + 10], "unexpected end of data"),
                            ("empty.tar", b"", "empty file"),
                            ("words.tar", b"not an archive\n" * 100, "")):
        path = tmp_path / name
        path.write_bytes(data)
        result = CliRunner().invoke(main, ["merge", str(path), "--log", str(target), "--builds", str(tmp_path / "b")])
        assert result.exit_code == 1, result.output
        [line] = result.output.splitlines()
        assert line.startswith(f"error: {path}: not a readable archive ({why}") and line.endswith("; nothing merged")
    assert untouched(tmp_path, target, before) and not (tmp_path / "b").exists()



def test_an_archive_without_records_is_refused(tmp_path, target, run):
    before = target.read_bytes()
    # A session stopped before its first verb ended, or whose verbs were all refused (a bad --case): the second
    # was told "a run's folder has one once its first verb has ended", which it had.
    (run / "performance.jsonl").unlink()
    without = pack(tmp_path / "without.tgz", run)
    with pytest.raises(PopkitError, match=r"without.tgz: no performance.jsonl in it: no verb of the run logged a "
                                          r"record \(each was refused before it ran, or the run was cut before the "
                                          r"first one ended; its tables say which\); nothing merged$"):
        archive.merge_files([without], target, builds=tmp_path / "builds")
    write(run / "performance.jsonl", ["not json"])
    bad = pack(tmp_path / "bad.tgz", run)
    with pytest.raises(PopkitError, match=re.escape(f"no valid record in {bad}:gs/performance.jsonl: 1 bad line(s), "
                                                    f"the first {bad}:gs/performance.jsonl:1: not strict JSON")):
        archive.merge_files([bad], target, builds=tmp_path / "builds")
    assert untouched(tmp_path, target, before)


def test_an_archive_over_the_size_limit_is_refused(tmp_path, target, run, monkeypatch):
    monkeypatch.setattr(archive, "MAX_BYTES", 1 << 20)
    (run / "builds" / "qr_v2.py").write_bytes(b"#" * (2 << 20))
    before = target.read_bytes()
    packed, plain = pack(tmp_path / "big.tgz", run), pack(tmp_path / "big.tar", run, mode="w")
    assert packed.stat().st_size < 1 << 20 < plain.stat().st_size
    for path, why in ((packed, "over 1 MB unpacked"), (plain, "over 1 MB")):
        with pytest.raises(PopkitError, match=f"^{path}: {why}, more than a run's archive holds; nothing merged$"):
            archive.merge_files([path], target, builds=tmp_path / "builds")
    assert untouched(tmp_path, target, before)


def test_nothing_is_half_merged_when_one_run_of_an_archive_is_refused(tmp_path, target):
    first = run_folder(tmp_path / "s1" / "gs", "2026-12-01T10:00:00Z")
    second = run_folder(tmp_path / "s2" / "gs", "2026-12-01T12:00:00Z")
    device = target.parent / "device"
    device.mkdir()
    (device / "20261201T120000Z-gpu.txt").write_text("another GPU\n")     # the second run's table, changed
    before = target.read_bytes()
    with pytest.raises(PopkitError, match=r"20261201T120000Z-gpu.txt exists with other content: move it away; "
                                          r"nothing merged$"):
        archive.merge_files([pack(tmp_path / "both.tgz", first, second, base=tmp_path)], target,
                            builds=tmp_path / "builds")
    assert target.read_bytes() == before and sorted(device.iterdir()) == [device / "20261201T120000Z-gpu.txt"]
    assert not (tmp_path / "builds").exists()


def test_two_runs_that_would_write_one_file_differently_are_refused(tmp_path, target):
    # Two runs whose first records share a second: their tables and builds would have one name.
    first = run_folder(tmp_path / "s1" / "gs", "2026-12-01T10:00:00Z")
    second = run_folder(tmp_path / "s2" / "gs", "2026-12-01T10:00:00Z")
    before = target.read_bytes()
    with pytest.raises(PopkitError, match=r"two runs of this merge give it different content: merge them one at a "
                                          r"time; nothing merged$"):
        archive.merge_files([pack(tmp_path / "both.tgz", first, second, base=tmp_path)], target,
                            builds=tmp_path / "builds")
    assert untouched(tmp_path, target, before)


@pytest.mark.parametrize("blocked", ["builds", "device"])
def test_a_table_or_build_that_cannot_be_written_is_refused_before_the_log_is(tmp_path, target, run, blocked):
    # A file where --builds or device/ should be failed after the log was replaced: 'error: ...: Not a directory',
    # the records merged and the builds not.
    (tmp_path / "builds").write_text("a file\n")
    builds = tmp_path / "builds" / "sub" if blocked == "builds" else tmp_path / "b"
    if blocked == "device":
        (target.parent / "device").write_text("a file\n")
    folder = builds / "20261201T103005Z" if blocked == "builds" else target.parent / "device"
    before = target.read_bytes()
    result = CliRunner().invoke(main, ["merge", str(pack(tmp_path / "gs.tgz", run)), "--log", str(target),
                                       "--builds", str(builds)])
    assert result.exit_code == 1 and result.output.splitlines() == [
        f"error: {folder}: cannot be written (Not a directory); nothing merged"]
    assert target.read_bytes() == before and not (tmp_path / "b").exists()


def test_archives_are_merged_alone(tmp_path, target, run):
    packed = pack(tmp_path / "gs.tgz", run)
    for files, tables in (([packed, run / "performance.jsonl"], None), ([packed], run)):
        with pytest.raises(PopkitError, match="^an archive brings its own records, tables and builds: merge archives "
                                              "alone, without performance.jsonl files or --tables; nothing merged$"):
            archive.merge_files(files, target, tables, builds=tmp_path / "builds")
    with pytest.raises(PopkitError, match="nope.tgz: no such file"):
        archive.merge_files([tmp_path / "nope.tgz"], target, builds=tmp_path / "builds")


def test_cli_merge_of_an_archive_names_its_tables_and_the_promote_command_of_each_build(tmp_path, target, run):
    packed = pack(tmp_path / "gs.tgz", run)
    builds = tmp_path / "builds"
    result = CliRunner().invoke(main, ["merge", str(packed), "--log", str(target), "--builds", str(builds)])
    assert result.exit_code == 0, result.output
    device, build = target.parent / "device", builds / "20261201T103005Z" / "qr_v2.py"
    assert result.output.splitlines() == [
        f"merged into {target}: 2 record(s) added, 0 already there, 0 bad line(s) skipped (of 2 valid record(s) read)",
        f"table: {device / '20261201T103005Z-01-check-qr_v2.txt'}",
        f"table: {device / '20261201T103005Z-02-check-qr_v2.txt'}",
        f"table: {device / '20261201T103005Z-gpu.txt'}",
        f"build: {build}",
        f"  promote it: popkit promote qr_v2 --submission {build} --log {target}"]


def test_cli_merge_with_tables_names_the_promote_command_of_each_build_left_in_the_folder(tmp_path, target):
    # The two-step form (a run folder brought back whole): its builds stay in DIR/builds, named for promote.
    out = tmp_path / "gs"
    (out / "builds").mkdir(parents=True)
    write(out / "performance.jsonl", [record("2026-12-01T10:30:05Z")])
    (out / "01-check-qr_v2.txt").write_text("check table\n")
    build = out / "builds" / "qr_v2.py"
    build.write_text("# built\n")
    (out / "builds" / "notes.txt").write_text("not a build\n")
    result = CliRunner().invoke(main, ["merge", str(out / "performance.jsonl"), "--tables", str(out),
                                       "--log", str(target)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-2:] == [
        f"build: {build}", f"  promote it: popkit promote qr_v2 --submission {build} --log {target}"]
    assert build.read_text() == "# built\n"


def test_the_promote_line_reads_the_log_merged_into_and_pastes_as_one_command(tmp_path):
    # Merged into --log FILE, the line said `popkit promote qr_v2 --submission B`: promote then read logs/ and
    # refused for want of the very diff just merged; a folder with a space split the path in two.
    from popcorn.cli.records import promote_command
    build = tmp_path / "my runs" / "qr_v2.py"
    scratch = tmp_path / "scratch log.jsonl"
    assert promote_command(build, scratch) == f"popkit promote qr_v2 --submission '{build}' --log '{scratch}'"
    assert promote_command(build, logs.DEFAULT_LOG) == f"popkit promote qr_v2 --submission '{build}'"


def test_an_archive_s_tables_and_builds_come_out_by_name_whatever_the_order_packed(tmp_path, target):
    # GNU tar packs a folder in its directory order: the merge listed 02-bench before 01-check.
    members = [member("gs/performance.jsonl", (json.dumps(record("2026-12-01T10:30:05Z")) + "\n").encode())]
    members += [member(f"gs/{name}") for name in ("02-bench-qr_v2.txt", "01-check-qr_v2.txt")]
    members += [member(f"gs/builds/{name}", BUILT) for name in ("qr_v2.py", "eigh.py")]
    result = archive.merge_files([pack(tmp_path / "gs.tgz", extra=members)], target, builds=tmp_path / "builds")
    assert [path.name for path in result.tables] == ["20261201T103005Z-01-check-qr_v2.txt",
                                                     "20261201T103005Z-02-bench-qr_v2.txt"]
    assert [path.name for path in result.builds] == ["eigh.py", "qr_v2.py"]


def test_builds_given_with_a_performance_jsonl_is_refused_not_ignored(tmp_path, target, run):
    # The two-step form ignored --builds without a word: the builds stayed in DIR/builds, not where it said.
    before = target.read_bytes()
    result = CliRunner().invoke(main, ["merge", str(run / "performance.jsonl"), "--tables", str(run), "--log",
                                       str(target), "--builds", str(tmp_path / "builds")])
    assert result.exit_code == 1
    assert result.output == (f"error: --builds {tmp_path / 'builds'}: only an archive's builds are unpacked there; a "
                             "performance.jsonl merge leaves them in its run folder's builds/ (--tables DIR names "
                             "them): drop --builds or merge the run's archive; nothing merged\n")
    assert untouched(tmp_path, target, before)
