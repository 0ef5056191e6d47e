"""scripts/same_outputs.py: two built files' outputs compared bit for bit (CPU, the qr_v2 model path)."""
from pathlib import Path

import pytest
import torch

from checks.problems import load_problem

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "same_outputs.py"
CASES = ["--case", "batch: 2; n: 40; cond: 1; seed: 3", "--case", "batch: 1; n: 100; cond: 0; seed: 4; case: rankdef"]


@pytest.fixture(scope="module")
def same(import_module):
    return import_module(SCRIPT, "same_outputs")


def test_outputs_equal_to_the_bit_are_the_same_nan_bits_included(same):
    x = torch.tensor([1.0, float("nan"), -0.0])
    assert same.first_difference((x, x.clone()), (x.clone(), x.clone())) is None
    assert same.first_difference(x, x.clone()) is None


@pytest.mark.parametrize("other, says", [
    (torch.tensor([1.0, 2.0, 0.0]), "output 0 differs first at (1,)"),
    (torch.tensor([1.0, float("nan"), 0.0]), "output 0 differs first at (2,)"),     # -0.0 against 0.0
    (torch.tensor([1.0, float("nan")]), "output 0: (3,) torch.float32 against (2,) torch.float32"),
    (torch.tensor([1, 0, 0]), "torch.float32 against (3,) torch.int64"),
])
def test_each_kind_of_difference_is_named(same, other, says):
    assert says in same.first_difference(torch.tensor([1.0, float("nan"), -0.0]), other)


def test_a_different_number_of_outputs_is_named(same):
    x = torch.zeros(2)
    assert same.first_difference((x, x), (x,)) == "A returned 2 outputs, B 1"


def test_compare_gives_each_kernel_its_own_copy_and_reports_every_case(same):
    def in_place(A):
        A += 1                          # a kernel that writes its input must not change the other's
        return A

    lines = []
    inputs = [("one", torch.zeros(3)), ("two", torch.ones(2))]
    assert same.compare(in_place, in_place, inputs, lines.append)
    assert lines == ["one: same", "two: same"]
    assert not same.compare(in_place, lambda A: A + 2, inputs, lines.append)
    assert lines[-1].startswith("two: output 0 differs first at (0,)")


def test_two_copies_of_a_built_file_are_the_same_and_a_changed_one_is_not(same, built, tmp_path, capsys):
    copy = tmp_path / "copy.py"
    copy.write_text(built["qr_v2"].read_text())
    assert same.main([str(built["qr_v2"]), str(copy), "qr_v2", *CASES]) == 0
    changed = tmp_path / "changed.py"
    changed.write_text(built["qr_v2"].read_text() + "\n_original = custom_kernel\n"
                       "def custom_kernel(data):\n    H, tau = _original(data)\n    return H, tau * 2\n")
    assert same.main([str(built["qr_v2"]), str(changed), "qr_v2", *CASES]) == 1
    assert "output 1 differs" in capsys.readouterr().out


def test_globals_set_on_one_side_of_one_file_show_in_its_outputs(same, tmp_path, capsys):
    toy = tmp_path / "toy.py"
    toy.write_text("import torch\n\nSCALE = 1.0\n\n\ndef custom_kernel(A):\n    return torch.linalg.qr(A)[1] * SCALE\n")
    assert same.main([str(toy), str(toy), "qr_v2", *CASES]) == 0
    assert same.main([str(toy), str(toy), "qr_v2", *CASES, "--set-b", '{"SCALE": 2.0}']) == 1
    assert "output 0 differs" in capsys.readouterr().out
    both = ["--set-a", '{"SCALE": 2.0}', "--set-b", '{"SCALE": 2.0}']
    assert same.main([str(toy), str(toy), "qr_v2", *CASES, *both]) == 0
    assert same.main([str(toy), str(toy), "qr_v2", *CASES, "--set-a", '{"SCALLE": 2.0}']) == 2
    assert "error: --set-a: the built file defines no SCALLE" in capsys.readouterr().err


@pytest.mark.parametrize("args, says", [
    (["vectoradd"], "vectoradd is a harness problem"),
    (["qr_v2", "--case", "batch: 2"], "lacks 'n'"),
    (["nosuch"], "unknown problem 'nosuch'"),
    (["qr_v2", "--set-b", "[1]"], "--set-b [1]: need an object of globals"),
    (["qr_v2", "--case", "batch: 1; n: 8; cond: 1; seed: 2", "--case", "batch: 1; n: 8; cond: 1; seed: 2"],
     "given twice"),
])
def test_bad_arguments_are_one_line_and_exit_2(same, built, args, says, capsys):
    assert same.main([str(built["qr_v2"]), str(built["qr_v2"]), *args]) == 2
    assert says in capsys.readouterr().err


def test_a_missing_file_is_refused_before_anything_runs(same, built, capsys):
    assert same.main([str(built["qr_v2"]), "no/such.py", "qr_v2"]) == 2
    assert "no/such.py: no such file" in capsys.readouterr().err


def test_a_file_that_is_no_submission_is_refused_before_the_import(same, built, tmp_path, capsys):
    # Imported, it ended in an AttributeError traceback (module.custom_kernel), exit 1.
    log = tmp_path / "log.txt"
    log.write_text("raise SystemExit('imported')\n")
    assert same.main([str(built["qr_v2"]), str(log), "qr_v2"]) == 2
    assert "log.txt is not a submission (defines no custom_kernel" in capsys.readouterr().err


def test_on_a_cpu_only_the_cases_small_enough_for_its_path_run(same, tmp_path, capsys):
    # Every benchmark case was made and run on the CPU, up to the largest: many minutes, then cut off.
    toy = tmp_path / "toy.py"
    toy.write_text("def custom_kernel(A):\n    return A\n")
    assert same.main([str(toy), str(toy), "qr_v2", "--device", "cpu"]) == 0
    out = capsys.readouterr()
    assert "note: no GPU: running the CPU path on " in out.err
    assert 0 < len(out.out.splitlines()) < len(load_problem("qr_v2").benchmarks)
