"""The robustness suite's cases, and the checker refusing a submission built for another problem."""
from __future__ import annotations

from click.testing import CliRunner

from checks.native import native_checker
from checks.native.matrix_specs import LARGE_SIZES, SMALL_SIZES
from popcorn.cli import main


def test_every_family_at_every_small_size_and_sizes_straddle_powers_of_two():
    for problem in ("qr_v2", "eigh", "cholesky"):
        native = native_checker(problem)
        specs = native.robustness_specs()
        small = {(s["n"], s["case"]) for s in specs if s["n"] in SMALL_SIZES}
        assert small == {(n, f) for n in SMALL_SIZES for f in native.families()}
        sizes = {s["n"] for s in specs}
        for power in (32, 64, 128, 256, 512, 1024, 2048):
            assert {power - 1, power + 1} & sizes, power
        assert {1, 3} <= {s["batch"] for s in specs}
        assert len({s["seed"] for s in specs}) == len(specs)          # no two cases share inputs
        assert all(native.normalize_spec(s) == s for s in specs)      # valid specs as they are


def test_robust_check_runs_the_cpu_path(built, tmp_path):
    result = CliRunner().invoke(main, ["check", "qr_v2", "--submission", str(built["qr_v2"]), "--robust",
                                       "--device", "cpu", "--log", str(tmp_path / "perf.jsonl")])
    assert result.exit_code == 0, result.output
    assert "3x1 dense c1" in result.output and "3x65 mixed c1" in result.output
    assert f"1x{LARGE_SIZES[0]}" in result.output


def test_check_refuses_a_submission_built_for_another_problem(built, tmp_path):
    result = CliRunner().invoke(main, ["check", "eigh", "--submission", str(built["qr_v2"]),
                                       "--device", "cpu", "--log", str(tmp_path / "perf.jsonl")])
    assert result.exit_code == 1
    assert "is built for leaderboard qr_v2" in result.output and "popkit build eigh" in result.output
    assert not (tmp_path / "perf.jsonl").exists()
