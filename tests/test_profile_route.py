"""scripts/profile_route.py's launch timeline: start order, durations and the idle gaps between launches
(the part that runs without a GPU)."""
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
