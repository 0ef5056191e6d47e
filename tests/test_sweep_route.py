"""scripts/sweep_route.py: every variant is checked and timed on the same input, in alternating rounds,
and the route's tables are put back afterwards, also when a variant fails (CPU, the cholesky route)."""
from pathlib import Path

import pytest

from checks.problems import load_problem, parse_spec
from checks.timing import PerfCounterClock
from parts.cholesky import route

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sweep_route.py"


@pytest.fixture(scope="module")
def sweep_script(import_module):
    return import_module(SCRIPT, "sweep_route")


def test_every_variant_is_checked_and_timed_and_the_tables_come_back(sweep_script):
    prob = load_problem("cholesky")
    case = parse_spec("batch: 2; n: 200; cond: 2; seed: 7", prob)
    before = route.BLOCK_NB
    variants = {"default": {}, "nb64": {"BLOCK_NB": [[1 << 30, 64]]}}
    seen = []
    rows = sweep_script.sweep(route, prob, variants, [case], 3, PerfCounterClock(), "cpu", seen.append)
    assert route.BLOCK_NB == before
    assert rows == seen and len(rows) == 1
    assert set(rows[0]["variants"]) == {"default", "nb64"}
    for result in rows[0]["variants"].values():
        assert result["passed"] and result["us"] > 0 and 0 <= result["worst_fraction"] < 1
    assert rows[0]["baseline_us"] > 0


def test_a_variant_that_raises_leaves_the_tables_as_they_were(sweep_script):
    prob = load_problem("cholesky")
    case = parse_spec("batch: 1; n: 150; cond: 2; seed: 3", prob)
    before = route.BLOCK_NB
    with pytest.raises(ValueError, match="nb \\(0\\)"):
        sweep_script.sweep(route, prob, {"broken": {"BLOCK_NB": [[1 << 30, 0]]}}, [case], 3, PerfCounterClock(), "cpu")
    assert route.BLOCK_NB == before


def test_json_rows_become_the_tables_tuples(sweep_script):
    assert sweep_script.as_global([[1024, 8192, 256], [1 << 30, 1 << 62, 4096]]) == ((1024, 8192, 256),
                                                                                   (1 << 30, 1 << 62, 4096))
    assert sweep_script.as_global(True) is True


def test_a_variant_that_sets_a_name_the_route_lacks_is_named(sweep_script):
    # A misspelt tunable was set as a new global and the variant timed the default under its name.
    variants = {"default": {}, "typo": {"BLOCK_NB": [[1 << 30, 64]], "BLOKC_NB": 1, "ALSO_MISSING": 2}}
    assert sweep_script.unknown_globals(route, variants) == ["ALSO_MISSING", "BLOKC_NB"]
    assert sweep_script.unknown_globals(route, {"default": {}}) == []
