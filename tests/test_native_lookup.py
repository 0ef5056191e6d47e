"""checks.native: native checkers are found by module name only, and no shared file (checks, the builder,
the templates, parts/common) names a problem."""
from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from checks.native import INTERFACE, native_checker
from checks.problems import load_problem
from popcorn.errors import ProblemError

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ("qr_v2", "eigh", "cholesky")
HELPERS = ("draw", "blocks", "profiles", "matrix_specs", "gate_tools")


@pytest.mark.parametrize("problem", NATIVE)
def test_native_modules_offer_the_whole_interface(problem):
    module = native_checker(problem)
    assert module is not None and module.__name__ == f"checks.native.{problem}"
    assert all(hasattr(module, name) for name in INTERFACE)
    assert module.DEFAULT_CASE in module.families()
    assert load_problem(problem).native is module


@pytest.mark.parametrize("name", ("nosuch", "Bad-Name", "../eigh", "") + HELPERS)
def test_helpers_and_unknown_names_are_not_checkers(name):
    assert native_checker(name) is None


def test_a_partial_checker_is_one_clear_error(monkeypatch):
    partial = types.ModuleType("checks.native.halfdone")
    partial.check_output = lambda data, output: None
    monkeypatch.setitem(sys.modules, "checks.native.halfdone", partial)
    with pytest.raises(ProblemError, match=r"halfdone\.py is not a complete native checker \(lacks DEFAULT_CASE"):
        native_checker("halfdone")


@pytest.mark.parametrize("problem", NATIVE)
def test_baseline_passes_its_own_gates(problem):
    module = native_checker(problem)
    A = module.generate({"batch": 2, "n": 12, "cond": 1, "seed": 4})
    assert module.check_output(A, module.baseline(A.clone())).passed


@pytest.mark.parametrize("problem", NATIVE)
def test_normalize_spec_fills_the_default_case_and_refuses_bad_specs(problem):
    module = native_checker(problem)
    spec = module.normalize_spec({"batch": "2", "n": 8, "cond": 0, "seed": 1})
    assert spec == {"batch": 2, "n": 8, "cond": 0, "seed": 1, "case": "dense"}
    for bad, why in (({"batch": 2, "n": 8, "cond": 0}, "lacks 'seed'"),
                     ({"batch": 0, "n": 8, "cond": 0, "seed": 1}, "must be >= 1"),
                     ({"batch": 1, "n": 8, "cond": -1, "seed": 1}, "cond must be >= 0"),
                     ({"batch": 1, "n": "x", "cond": 0, "seed": 1}, "n must be an integer"),
                     ({"batch": 1, "n": 8, "cond": 0, "seed": 1, "size": 3}, "unknown key")):
        with pytest.raises(ProblemError, match=re.escape(why)):
            module.normalize_spec(bad)


@pytest.mark.parametrize("problem", NATIVE)
def test_a_spec_lacking_keys_names_every_missing_key_and_the_keys_a_case_takes(problem):
    # 'lacks 'cond'' alone: the user fixed one key at a time.
    with pytest.raises(ProblemError) as info:
        native_checker(problem).normalize_spec({"batch": 4, "n": 64})
    assert str(info.value) == ("case spec {'batch': 4, 'n': 64} lacks 'cond', 'seed' (a case takes batch, n, cond "
                               "and seed, and optionally case, e.g. 'batch: 4; n: 64; cond: 1; seed: 7; case: dense')")


def test_a_spec_with_an_unknown_key_says_what_a_case_takes():
    # 'unknown key(s) ['Batch'] in case spec {...}' did not say which keys there are.
    with pytest.raises(ProblemError) as info:
        native_checker("qr_v2").normalize_spec({"Batch": 4, "n": 64, "cond": 1, "seed": 7})
    assert str(info.value) == ("unknown key(s) ['Batch'] in case spec {'Batch': 4, 'n': 64, 'cond': 1, 'seed': 7} "
                               "(a case takes batch, n, cond and seed, and optionally case, e.g. "
                               "'batch: 4; n: 64; cond: 1; seed: 7; case: dense')")


def test_the_case_examples_of_the_help_and_the_readme_are_cases_of_every_native_problem():
    # Both named the family 'mixed', which cholesky refuses.
    from checks.runner import checked_spec
    from popcorn.cli import main
    (option,) = [p for p in main.commands["check"].params if p.name == "cases"]
    examples = re.findall(r"'(batch: [^']*)'", option.help)
    examples += re.findall(r"--case '(batch: [^']*)'", (ROOT / "README.md").read_text())
    assert len(examples) == 2
    for problem in NATIVE:
        for example in examples:
            checked_spec(load_problem(problem), example)


def test_no_shared_file_names_a_problem():
    shared = sorted(ROOT.glob("checks/*.py")) + [ROOT / "checks" / "native" / f"{h}.py" for h in HELPERS]
    shared.append(ROOT / "checks" / "native" / "__init__.py")
    shared += [ROOT / "build.py"] + sorted(ROOT.glob("templates/*.j2")) + sorted(ROOT.glob("parts/common/*.*"))
    names = re.compile(r"(?<![a-z])(" + "|".join(NATIVE) + r")(?![a-z])", re.IGNORECASE)   # cholesky_pivot too
    offenders = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in shared for m in names.finditer(p.read_text())]
    assert offenders == []


def test_worker_times_the_module_baseline_beside_the_kernel():
    from checks import worker
    sent = []
    spec = {"batch": 1, "n": 4, "cond": 0, "seed": 2, "case": "dense"}
    kernel = native_checker("eigh").baseline
    result = worker.run_bench_case("eigh", kernel, spec, "cpu", True, sent.append)
    assert result["status"] == "pass" and result["baseline_us"] > 0
    assert any("torch.linalg.eigh" in m[1] for m in sent if m[0] == "progress")
