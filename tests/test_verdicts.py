"""checks.verdicts: timing verdicts with their thresholds, and margin regressions."""
from __future__ import annotations

import pytest

from checks.timing import Stats
from checks.verdicts import case_verdict, margin_regressions


def timed(mean_ns, err_ns=0.0):
    """Stats of 10 runs with the given mean and standard error."""
    return Stats(10, mean_ns, err_ns * 10**0.5, err_ns, best=mean_ns, worst=mean_ns)


MS = 1e6  # ns


# --- case_verdict ------------------------------------------------------------

def test_faster():
    v = case_verdict(timed(1.8 * MS, 1e3), timed(2 * MS, 1e3))
    assert (v.ratio, v.verdict, v.regression) == (pytest.approx(0.9), "faster", False)


def test_slower_within_tolerance_is_not_a_regression():
    v = case_verdict(timed(2.03 * MS, 1e3), timed(2 * MS, 1e3))
    assert (v.verdict, v.regression) == ("slower", False)


def test_slower_beyond_tolerance_is_a_regression():
    v = case_verdict(timed(2.1 * MS, 1e3), timed(2 * MS, 1e3))
    assert (v.ratio, v.verdict, v.regression) == (pytest.approx(1.05), "slower", True)


def test_within_noise_of_the_combined_errors():
    # Combined error sqrt(2) * 20 us; 3 of them = 84.9 us > the 80 us (4%) slowdown.
    v = case_verdict(timed(2.08 * MS, 20e3), timed(2 * MS, 20e3))
    assert (v.verdict, v.regression) == ("within noise", False)
    v = case_verdict(timed(2.09 * MS, 20e3), timed(2 * MS, 20e3))
    assert (v.verdict, v.regression) == ("slower", True)


def test_within_noise_under_half_a_percent():
    assert case_verdict(timed(2.009 * MS), timed(2 * MS)).verdict == "within noise"
    assert case_verdict(timed(1.991 * MS), timed(2 * MS)).verdict == "within noise"
    assert case_verdict(timed(1.989 * MS), timed(2 * MS)).verdict == "faster"


@pytest.mark.parametrize(
    "incumbent_ns, slowdown, regression",
    [
        (2 * MS, 1.0199, False),
        (2 * MS, 1.0201, True),
        (1 * MS, 1.03, True),  # exactly 1 ms is not under 1 ms: 2%
        (0.999 * MS, 1.03, False),  # under 1 ms: 4%
        (0.999 * MS, 1.0399, False),
        (0.999 * MS, 1.0401, True),
    ],
)
def test_tolerance_is_2_percent_or_4_under_1_ms(incumbent_ns, slowdown, regression):
    v = case_verdict(timed(incumbent_ns * slowdown), timed(incumbent_ns))
    assert v.verdict == "slower"
    assert v.regression is regression
    assert v.tolerance == (0.04 if incumbent_ns < MS else 0.02)


def test_incumbent_mean_must_be_positive():
    with pytest.raises(ValueError):
        case_verdict(timed(1.0), timed(0.0))


# --- margin_regressions ------------------------------------------------------

def test_margin_more_than_doubled_is_a_regression():
    candidate = {"factor": [3.0, 20.0], "orthogonality": [5.0, 100.0]}
    incumbent = {"factor": [1.4, 20.0], "orthogonality": [2.5, 100.0]}  # orthogonality: exactly 2x
    messages = margin_regressions(candidate, incumbent)
    assert len(messages) == 1
    assert messages[0].startswith("factor: 7.0% -> 15.0% of its limit")


def test_margin_compares_shares_of_each_limit():
    assert margin_regressions({"factor": [3.0, 40.0]}, {"factor": [1.4, 20.0]}) == []


def test_tiny_margins_are_exempt():
    # 0.75% and 0.05% of the limit: 15x worse, but both under 1%.
    assert margin_regressions({"factor": [0.15, 20.0]}, {"factor": [0.01, 20.0]}) == []
    # 1.25% of the limit is no longer tiny.
    assert len(margin_regressions({"factor": [0.25, 20.0]}, {"factor": [0.01, 20.0]})) == 1


def test_margin_of_a_gate_the_incumbent_lacks_is_not_compared():
    assert margin_regressions({"new_gate": [50.0, 100.0]}, {}) == []


def test_better_margins_are_fine():
    assert margin_regressions({"factor": [1.0, 20.0]}, {"factor": [10.0, 20.0]}) == []
