"""checks.preflight: each leaderboard rule rejects a file that breaks it; KernelGuard's verdict counts."""
from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

import checks.preflight as preflight
from checks.preflight import MAX_BYTES, check_rules, preflight_bytes, preflight_file
from popcorn.cli import main

HEADER = "#!POPCORN leaderboard qr_v2\n#!POPCORN gpu B200\n"
BODY = "import torch\n\n\ndef custom_kernel(data):\n    return torch.geqrf(data)\n"
CLEAN = HEADER + BODY

# KernelGuard marks these hacked (should_filter true): output replay keyed on the input's address,
# and patched timers.
POINTER_REPLAY = HEADER + """import torch
_cache = {}


def custom_kernel(data):
    key = data.data_ptr()
    if key in _cache:
        return _cache[key]
    out = torch.geqrf(data)
    _cache[key] = out
    return out
"""
TIMER_PATCH = HEADER + """import time
import torch
torch.cuda.synchronize = lambda *args, **kwargs: None
time.perf_counter = lambda: 0.0


def custom_kernel(data):
    return torch.geqrf(data)
"""

needs_kernelguard = pytest.mark.skipif(not preflight.kernelguard_available(), reason="kernelguard not installed")


def rules(text: str | bytes, name: str = "submission.py", board: str | None = "qr_v2"):
    data = text.encode() if isinstance(text, str) else text
    return check_rules(data, name, expect_leaderboard=board)


def assert_rejected(report, pattern: str):
    assert not report.ok
    assert any(pattern in e for e in report.errors), report.errors


# ---------------------------------------------------------------- the rules, one by one

def test_clean_file_passes_the_rules():
    report = rules(CLEAN)
    assert report.ok, report.errors
    assert report.directives == {"leaderboard": "qr_v2", "gpu": "B200"}


@pytest.mark.parametrize("text,line", [
    (CLEAN + "# read the upstream docs\n", 8),                       # in a comment
    (CLEAN + "STREAM = 1\n", 8),                                     # upper case identifier
    (HEADER + "# cudaStream_t s;\n" + BODY, 3),                      # a CUDA type name
    (CLEAN + "x = torch.cuda.current_stream()\n", 8),                # an API call
    (CLEAN + 'CUDA_SRC = "cudaStreamSynchronize(0);"\n', 8),         # inside a string
    (CLEAN + "def f(sTrEaM):\n    return sTrEaM\n", 8),              # any case
])
def test_stream_anywhere_any_case_is_rejected(text, line):
    report = rules(text)
    assert_rejected(report, f"submission.py:{line}: contains the banned word 'stream'")


def test_size_limit():
    at_limit = CLEAN + "#" * (MAX_BYTES - len(CLEAN) - 1) + "\n"
    assert len(at_limit.encode()) == MAX_BYTES
    assert rules(at_limit).ok
    over = at_limit + "\n"
    assert_rejected(rules(over), "over the 1,000,000-byte limit")


def test_empty_file_is_rejected():
    assert_rejected(rules(b""), "file is empty")


def test_non_utf8_is_rejected():
    report = rules(CLEAN.encode() + b"# caf\xe9\n")
    assert_rejected(report, "not UTF-8")


@pytest.mark.parametrize("name", ["submission.txt", "submission", "submission.py.bak", "kernel.cu.txt"])
def test_wrong_suffix_is_rejected(name):
    assert_rejected(rules(CLEAN, name), "file name must end in")


@pytest.mark.parametrize("name", ["submission.py", "kernel.cu", "kernel.cuh", "kernel.cpp"])
def test_accepted_suffixes(name):
    assert rules(CLEAN, name).ok


@pytest.mark.parametrize("key", ["leaderboard", "gpu"])
def test_missing_directive_is_rejected(key):
    text = "\n".join(line for line in CLEAN.splitlines() if f"#!POPCORN {key}" not in line) + "\n"
    assert_rejected(rules(text), f"missing '#!POPCORN {key} ...'")


@pytest.mark.parametrize("text", [
    BODY + HEADER,                                          # after the code
    '"""Docstring first."""\n' + HEADER + BODY,             # after a docstring
    "import torch\n" + HEADER + BODY,                       # after one import
])
def test_directive_outside_the_leading_comment_block_is_rejected(text):
    report = rules(text)
    assert_rejected(report, "missing '#!POPCORN leaderboard ...'")
    assert "leaderboard" not in report.directives


@pytest.mark.parametrize("name,lead", [("submission.py", "# my QR\n\n# notes\n"),
                                       ("kernel.cu", "# my QR\n\n// a C-style comment line\n")])
def test_directives_may_follow_other_comments_and_blank_lines(name, lead):
    assert rules(lead + HEADER + BODY, name).ok


def test_leaderboard_mismatch_is_rejected():
    assert_rejected(rules(CLEAN, board="eigh"), "directive says leaderboard 'qr_v2', expected 'eigh'")
    assert rules(CLEAN, board=None).ok


@pytest.mark.parametrize("body,line,message", [
    ("def custom_kernel(data:\n    return data\n", 3, "'(' was never closed"),
    ("import torch\nreturn torch.zeros(1)\n", 4, "'return' outside function"),
    ("def custom_kernel(data):\n    x = data\n  return x\n", 5, "unindent"),
])
def test_python_syntax_error_is_rejected_with_its_line(body, line, message):
    report = rules(HEADER + body)
    assert len(report.errors) == 1, report.errors
    assert report.errors[0].startswith(f"submission.py:{line}: not valid Python (")
    assert message in report.errors[0]


def test_compile_warning_is_a_warning_not_an_error():
    report = rules(CLEAN + 'PATTERN = "\\d+"\n')
    assert report.ok, report.errors
    assert [w for w in report.warnings if "escape" in w] == [report.warnings[0]], report.warnings
    assert report.warnings[0].startswith("submission.py:8: "), report.warnings


@pytest.mark.parametrize("body", [
    "import torch\n",
    "def kernel(data):\n    return data\n",
    "def helper():\n    custom_kernel = None\n",
    "table = {}\ntable['custom_kernel'] = print\n",
])
def test_a_python_file_without_custom_kernel_is_rejected(body):
    # The grader runs `from submission import custom_kernel`: without it every run fails after the upload.
    assert_rejected(rules(HEADER + body), "defines no custom_kernel")


@pytest.mark.parametrize("body", [
    "async def custom_kernel(data):\n    return data\n",
    "custom_kernel = print\n",
    "kernel, custom_kernel = print, print\n",
    "from reference import ref_kernel as custom_kernel\n",
    "try:\n    import torch\nexcept ImportError:\n    pass\nelse:\n    def custom_kernel(data):\n        return data\n",
    "if True:\n    custom_kernel: object = print\n",
    "class custom_kernel:\n    pass\n",
    "from kernels import *\n",
])
def test_custom_kernel_counts_in_any_top_level_binding(body):
    assert rules(HEADER + body).ok


@pytest.mark.parametrize("name", ["kernel.cu", "kernel.cpp"])
def test_non_python_files_are_not_compiled_as_python(name):
    assert rules(HEADER + "__global__ void k(float* x) { x[0] = 1.f; }\n", name).ok


def test_preflight_file_reports_an_unreadable_file(tmp_path):
    report = preflight_file(tmp_path / "missing.py")
    assert_rejected(report, "cannot read")


# ---------------------------------------------------------------- KernelGuard

@needs_kernelguard
def test_clean_file_passes_kernelguard():
    report = preflight_bytes(CLEAN.encode(), "submission.py", "qr_v2")
    assert report.ok, report.errors
    assert not report.notes


@needs_kernelguard
@pytest.mark.parametrize("text", [POINTER_REPLAY, TIMER_PATCH], ids=["pointer-replay", "timer-patch"])
def test_file_kernelguard_filters_fails_the_preflight(text):
    assert rules(text).ok                     # the plain rules alone would let it through
    report = preflight_bytes(text.encode(), "submission.py", "qr_v2")
    assert_rejected(report, "KernelGuard would mark it hacked")


def test_without_kernelguard_the_report_has_a_note_and_no_error(monkeypatch):
    monkeypatch.setattr(preflight, "kernelguard_available", lambda: False)

    def must_not_run(text):
        raise AssertionError("kernelguard ran although it is unavailable")
    monkeypatch.setattr(preflight, "run_kernelguard", must_not_run)
    report = preflight_bytes(POINTER_REPLAY.encode(), "submission.py", "qr_v2")
    assert report.ok and not report.errors
    assert any("kernelguard is not installed" in note for note in report.notes)


def test_kernelguard_failure_is_an_error_not_a_pass(monkeypatch):
    monkeypatch.setattr(preflight, "kernelguard_available", lambda: True)

    def crashing(text):
        raise RuntimeError("kernelguard exited 1: boom")
    monkeypatch.setattr(preflight, "run_kernelguard", crashing)
    report = preflight_bytes(CLEAN.encode(), "submission.py", "qr_v2")
    assert_rejected(report, "KernelGuard could not scan the file")


def test_kernelguard_is_not_run_when_a_rule_already_failed(monkeypatch):
    def must_not_run(text):
        raise AssertionError("kernelguard ran on a file that already failed")
    monkeypatch.setattr(preflight, "run_kernelguard", must_not_run)
    monkeypatch.setattr(preflight, "kernelguard_available", lambda: True)
    report = preflight_bytes((CLEAN + "# upstream\n").encode(), "submission.py", "qr_v2")
    assert len(report.errors) == 1


# ---------------------------------------------------------------- popkit build --check FILE

def invoke_check(*args):
    return CliRunner().invoke(main, ["build", *args])


@pytest.mark.parametrize("name,content", [
    ("stream.py", CLEAN + "# upstream\n"),
    ("nodirective.py", BODY),
    ("bad.txt", CLEAN),
    ("empty.py", ""),
    ("syntax.py", HEADER + "def custom_kernel(data)\n    return data\n"),
])
def test_cli_check_bad_file_exits_nonzero_with_one_line(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    result = invoke_check("--check", str(path))
    assert result.exit_code != 0
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {name}"), result.output


@needs_kernelguard
def test_cli_check_kernelguard_hit_exits_nonzero_with_one_line(tmp_path):
    path = tmp_path / "replay.py"
    path.write_text(POINTER_REPLAY)
    result = invoke_check("--check", str(path))
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 1 and "KernelGuard would mark it hacked" in lines[0], result.output


def test_cli_check_leaderboard_mismatch(tmp_path):
    path = tmp_path / "submission.py"
    path.write_text(CLEAN)
    result = invoke_check("eigh", "--check", str(path))
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "error: submission.py: directive says leaderboard 'qr_v2', expected 'eigh'"]


def test_cli_check_good_file_exits_zero(tmp_path, monkeypatch):
    path = tmp_path / "submission.py"
    path.write_text(CLEAN)
    result = invoke_check("qr_v2", "--check", str(path))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "preflight: ok"


def test_cli_check_built_file_exits_zero(built, tmp_path):
    copy = tmp_path / "submission.py"
    shutil.copyfile(built["eigh"], copy)
    result = invoke_check("eigh", "--check", str(copy))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "preflight: ok"


def test_cli_check_expects_the_problems_leaderboard_not_its_name(tmp_path):
    path = tmp_path / "submission.py"
    path.write_text(CLEAN.replace("leaderboard qr_v2", "leaderboard vectoradd_v2"))
    assert invoke_check("vectoradd", "--check", str(path)).exit_code == 0      # vectoradd's board
    path.write_text(CLEAN.replace("leaderboard qr_v2", "leaderboard vectoradd"))
    result = invoke_check("vectoradd", "--check", str(path))
    assert result.exit_code == 1 and "expected 'vectoradd_v2'" in result.output


def test_cli_check_of_a_missing_file_assumes_nothing(tmp_path):
    # It said "note: nope.py has no leaderboard or gpu directive: assumed ...", then that it cannot be read.
    result = invoke_check("vectoradd", "--check", str(tmp_path / "nope.py"))
    assert result.exit_code == 2 and "does not exist" in result.output and "note:" not in result.output


def test_cli_check_without_directives_assumes_the_problems_board(tmp_path):
    """As submit's --leaderboard/--gpu: the record gives what a file without directives lacks, in one line;
    a directive naming another problem's board is still refused, and without a problem nothing is assumed."""
    path = tmp_path / "submission.py"
    path.write_text(BODY)
    result = invoke_check("vectoradd", "--check", str(path))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "note: submission.py has no leaderboard or gpu directive: assumed leaderboard vectoradd_v2, gpu B200 "
        "from vectoradd's record", "preflight: ok"]
    path.write_text("#!POPCORN gpu H100\n" + BODY)
    result = invoke_check("vectoradd", "--check", str(path))
    assert result.exit_code == 0 and "assumed leaderboard vectoradd_v2 from" in result.output, result.output
    path.write_text("#!POPCORN leaderboard qr_v2\n" + BODY)
    result = invoke_check("vectoradd", "--check", str(path))
    assert result.exit_code == 1 and "expected 'vectoradd_v2'" in result.output.splitlines()[-1], result.output
    assert invoke_check("--check", str(path)).exit_code == 1        # no gpu, and no problem to give one


def test_a_build_whose_cuda_parts_clash_as_one_unit_is_refused_and_a_clean_one_is_not():
    # logs/incumbents/qr_v2.py (dc518b3) embeds two parts that both define kColumnGroup: fine one unit a part (the
    # GPU hosts), a redefinition in the one unit that a runner of under 4 CPUs compiles.
    parts = {"qr_v2/a.cu": "namespace {\nconstexpr int kColumnGroup = 8;\n}",
             "qr_v2/b.cu": "namespace {\nconstexpr int kColumnGroup = 8;\n}"}
    clash = CLEAN + f"\nCUDA_PARTS = {parts!r}\n"
    report = check_rules(clash.encode(), "submission.py")
    assert report.errors == ["submission.py: CUDA_PARTS: parts/qr_v2/a.cu and parts/qr_v2/b.cu both define "
                             "kColumnGroup: machines under 4 CPUs compile every part as one translation unit, where a "
                             "second definition of a name fails the build (parts/common/cuda_loader.py); rename one"]
    parts["qr_v2/b.cu"] = "namespace {\nconstexpr int kWarpColumnGroup = 8;\n}"
    assert check_rules((CLEAN + f"\nCUDA_PARTS = {parts!r}\n").encode(), "submission.py").ok
    # not a literal of strings (a hand-written file's own CUDA_PARTS): not ours to read
    assert check_rules((CLEAN + "\nCUDA_PARTS = {'a.cu': open('x').read()}\n").encode(), "submission.py").ok
