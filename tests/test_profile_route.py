"""scripts/profile_route.py, the parts that run without a GPU: its launch timeline (start order, durations and the
idle gaps between launches) and the refusals that come before the GPU check and the import."""
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "profile_route.py"


@pytest.fixture(scope="module")
def profile_script(import_module):
    return import_module(SCRIPT, "profile_route")


def test_timeline_orders_launches_and_adds_up_the_idle_gaps(profile_script):
    spans = [("panel", 150.0, 160.0), ("diag", 100.0, 140.0), ("update", 158.0, 170.0)]
    lines = profile_script.timeline(spans)
    assert [line.split()[-1] for line in lines[:3]] == ["diag", "panel", "update"]
    assert lines[0].split()[0] == "0.0" and lines[1].split()[0] == "50.0"
    assert "gap   10.0 us" in lines[1]            # panel starts 10 us after diag ended
    assert "gap    0.0 us" in lines[2]            # update overlaps the panel: no idle time
    assert lines[-1] == "3 launches, idle gaps 10.0 us in all"


def test_timeline_of_nothing_says_so(profile_script):
    assert profile_script.timeline([]) == ["0 launches, idle gaps 0.0 us in all"]


@pytest.mark.parametrize("args, line", [
    (["nope", "batch: 2; n: 8; cond: 1; seed: 1"], "error: unknown problem 'nope' (known: "),
    (["qr_v2", "batch: 2; n: 8; cond: 1; seed: 1", "batch: 2; n: 8"], "error: case spec {'batch': 2, 'n': 8} lacks"),
    (["qr_v2", "batch: 2; n: 8; cond: 1; seed: 1; case: nope"], "error: --case 'batch: 2; n: 8; cond: 1; seed: 1; "
                                                                 "case: nope': unknown qr_v2 family 'nope'"),
    (["vectoradd", "size: 4; seed: 1"], "error: vectoradd is a harness problem: profile_route.py makes its inputs"),
])
def test_a_problem_or_case_it_cannot_run_is_one_line_before_anything_else(profile_script, tmp_path, capsys, args,
                                                                            line):
    # Checked only after the GPU check and the import (a CUDA compile), the bad last case after the others were
    # profiled, each ending in a traceback (a harness problem: AttributeError on its missing checker).
    built = tmp_path / "built.py"
    built.write_text("raise SystemExit('imported')\n")
    with pytest.raises(SystemExit) as stop:
        profile_script.main([str(built), *args])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and err.startswith(line), err


def test_a_file_that_is_no_submission_is_one_line_before_the_gpu_check(profile_script, tmp_path, capsys):
    # On a GPU host it was imported (a CUDA compile) and ended in an AttributeError traceback (custom_kernel).
    log = tmp_path / "log.txt"
    log.write_text("raise SystemExit('imported')\n")
    with pytest.raises(SystemExit) as stop:
        profile_script.main([str(log), "qr_v2", "batch: 2; n: 8; cond: 1; seed: 1"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "log.txt is not a submission (defines no " in err
