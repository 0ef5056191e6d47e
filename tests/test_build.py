"""build.py: deterministic, atomic, clear errors on bad parts and manifests; the header follows the problem
record; pure-Python and run-folder (harness) builds; the built file obeys the rules and runs on CPU."""
from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest
import torch

import build
from popcorn.evidence import files
from popcorn.evidence.provenance import built_from
from checks.native import native_checker
from popcorn.errors import PopkitError

PROBLEMS = ("qr_v2", "eigh")
CPU_SIZES = {"qr_v2": (1, 5, 33, 70), "eigh": (1, 5, 32, 40)}


@pytest.fixture
def parts_copy(tmp_path, monkeypatch):
    """A private copy of parts/, templates/ and the problem records that build.py reads instead of the real ones."""
    parts, templates, cases = tmp_path / "parts", tmp_path / "templates", tmp_path / "cases"
    shutil.copytree(build.PARTS, parts, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(build.TEMPLATES, templates)
    shutil.copytree(build.CASES_DIR, cases)
    monkeypatch.setattr(build, "PARTS", parts)
    monkeypatch.setattr(build, "TEMPLATES", templates)
    monkeypatch.setattr(build, "CASES_DIR", cases)
    return parts, templates


def manifest_parts(problem: str) -> list[str]:
    manifest = build.load_manifest(problem)
    return manifest["cuda"] + manifest["python"]


def leftovers(folder, keep):
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


# ---------------------------------------------------------------- determinism

# Builds are compared within one test (not with the session's build): others may commit parts meanwhile.

@pytest.mark.parametrize("problem", PROBLEMS)
def test_two_builds_are_byte_identical(problem, tmp_path):
    first = build.build(problem, tmp_path / "first.py").output
    second = build.build(problem, tmp_path / "second.py").output
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize("problem", PROBLEMS)
def test_output_does_not_depend_on_the_working_directory(problem, tmp_path, monkeypatch):
    monkeypatch.chdir(build.ROOT)
    here = build.build(problem, tmp_path / "here.py").output.read_bytes()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert build.build(problem, "relative.py").output.resolve() == elsewhere / "relative.py"
    assert (elsewhere / "relative.py").read_bytes() == here


# ---------------------------------------------------------------- atomicity

def test_failed_build_leaves_previous_output_and_no_temp_file(parts_copy, tmp_path):
    parts, _ = parts_copy
    out_dir = tmp_path / "out"
    out = out_dir / "submission.py"
    build.build("qr_v2", out)
    before = out.read_bytes()
    route = parts / "qr_v2" / "route.py"
    route.write_text(route.read_text() + "\n# fetched from upstream\n")
    with pytest.raises(PopkitError, match=r"route\.py:\d+: .*stream"):
        build.build("qr_v2", out)
    assert out.read_bytes() == before
    assert leftovers(out_dir, {"submission.py"}) == []


def test_failed_write_leaves_previous_output_and_no_temp_file(tmp_path, monkeypatch):
    out = tmp_path / "submission.py"
    out.write_text("previous\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(files.os, "replace", broken_replace)
    with pytest.raises(PopkitError, match="cannot write .No space left on device"):
        build.build("qr_v2", out)
    assert out.read_text() == "previous\n"
    assert leftovers(tmp_path, {"submission.py"}) == []


def test_an_output_under_a_file_says_not_a_directory(tmp_path):
    # It said "cannot write (File exists)", of a path that does not exist: mkdir's error for the file in the way.
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(PopkitError, match=r"notes\.txt/sub\.py: cannot write \(Not a directory\)$"):
        build.build("vectoradd", tmp_path / "notes.txt" / "sub.py")


def test_build_creates_missing_output_folders(tmp_path):
    out = tmp_path / "a" / "b" / "submission.py"
    result = build.build("eigh", out)
    assert result.output == out and out.read_text(encoding="utf-8") == result.text


def test_build_to_the_null_device_builds_and_preflights_and_keeps_nothing():
    # -o /dev/null was refused: 'null: a built file is Python, so its name must end in .py'.
    from click.testing import CliRunner
    from popcorn.cli import main
    result = CliRunner().invoke(main, ["build", "eigh", "-o", os.devnull])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith(f"built {os.devnull} (")
    assert result.output.splitlines()[-1] == "preflight: ok"
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_kernelguard_warning_names_the_file_the_build_writes(tmp_path, monkeypatch):
    # It named 'eigh.py', the name render() gave the preflight, whatever -o said.
    from checks import preflight
    monkeypatch.setattr(preflight, "kernelguard_available", lambda: True)
    monkeypatch.setattr(preflight, "run_kernelguard", lambda text: {"matched_patterns": [
        {"pattern": "p", "severity": "low", "evidence": "e"}]})
    out = tmp_path / "mine.py"
    assert build.build("eigh", out).preflight.warnings == [f"{out}: KernelGuard p (low): e"]


# ---------------------------------------------------------------- bad input names the file

def test_unknown_problem():
    with pytest.raises(PopkitError, match=r"unknown problem 'nope'.*nope/manifest\.yml.*eigh.*qr_v2"):
        build.build("nope")


def test_a_problem_whose_parts_are_gone_is_not_called_unknown(parts_copy, tmp_path):
    # It said "unknown problem 'eigh'" while `popkit problem list` listed it.
    parts, _ = parts_copy
    shutil.rmtree(parts / "eigh")
    with pytest.raises(PopkitError) as info:
        build.build("eigh", tmp_path / "out.py")
    assert str(info.value) == (f"eigh has no parts: no parts/eigh/manifest.yml (its record {build.CASES_DIR / 'eigh.yml'}"
                               " is there; `popkit problem add eigh --from DIR --force` scaffolds the missing parts)")


def test_missing_part(parts_copy, tmp_path):
    parts, _ = parts_copy
    (parts / "qr_v2" / "route.py").unlink()
    with pytest.raises(PopkitError, match=r"qr_v2/route\.py: cannot read part"):
        build.build("qr_v2", tmp_path / "out.py")
    assert not (tmp_path / "out.py").exists()


def test_a_manifest_that_is_not_yaml_names_the_line(parts_copy, tmp_path):
    # It said "not valid YAML (while parsing a flow node)": the parser's context, without a line or the fault.
    parts, _ = parts_copy
    (parts / "qr_v2" / "manifest.yml").write_text("problem: qr_v2\npython: [\n")
    with pytest.raises(PopkitError, match=r"manifest\.yml: not valid YAML \(line 3, column 1: expected the node "
                                          r"content, but found '<stream end>'\)$"):
        build.build("qr_v2", tmp_path / "out.py")


def test_unreadable_part(parts_copy, tmp_path):
    parts, _ = parts_copy
    part = parts / "eigh" / "model.py"
    part.chmod(0)
    try:
        if os.access(part, os.R_OK):
            pytest.skip("running as root: a mode-000 file is still readable")
        with pytest.raises(PopkitError, match=r"eigh/model\.py: cannot read part"):
            build.build("eigh", tmp_path / "out.py")
    finally:
        part.chmod(0o644)


def test_non_utf8_part(parts_copy, tmp_path):
    parts, _ = parts_copy
    part = parts / "qr_v2" / "householder_small.cu"
    part.write_bytes(part.read_bytes() + b"\n// caf\xe9\n")
    with pytest.raises(PopkitError, match=r"qr_v2/householder_small\.cu: part is not UTF-8"):
        build.build("qr_v2", tmp_path / "out.py")


@pytest.mark.parametrize("line, error", [
    ("{% for part in %}\n", r"submission\.py\.j2:\d+: template error"),                          # syntax
    ("# {{ no_such_variable }}\n", r"submission\.py\.j2.*template error.*no_such_variable"),     # undefined
])
def test_a_template_error_names_the_template(parts_copy, tmp_path, line, error):
    _, templates = parts_copy
    template = templates / build.TEMPLATE
    template.write_text(template.read_text() + line)
    with pytest.raises(PopkitError, match=error):
        build.build("qr_v2", tmp_path / "out.py")


def _add_numpy_import(parts):
    model = parts / "qr_v2" / "model.py"
    model.write_text(model.read_text().replace("import torch\n", "import numpy as np\nimport torch\n", 1))


def test_non_stdlib_import_is_rejected_and_a_cross_part_one_asks_for_the_inline_mark(parts_copy, tmp_path):
    # A package was told to "mark cross-part imports with '# popkit: inline'", which is no fix for numpy.
    _add_numpy_import(parts_copy[0])
    with pytest.raises(PopkitError, match=r"imports 'numpy'; a package beyond torch and the standard library: add "
                                          r"numpy to the manifest's packages when the leaderboard's runner has it$"):
        build.build("qr_v2", tmp_path / "out.py")
    assert not (tmp_path / "out.py").exists()
    model = parts_copy[0] / "qr_v2" / "model.py"
    model.write_text(model.read_text().replace("import numpy as np\n", "from parts.common import helpers\n"))
    with pytest.raises(PopkitError, match=r"imports 'parts.common'; a cross-part import ends with '# popkit: inline'"):
        build.build("qr_v2", tmp_path / "out.py")
    model.write_text(model.read_text().replace("from parts.common import helpers\n", "from .panel_model import x\n"))
    with pytest.raises(PopkitError, match=r"imports '.panel_model'; a cross-part import ends with '# popkit: inline'"):
        build.build("qr_v2", tmp_path / "out.py")


def test_a_package_the_manifest_lists_may_be_imported_and_the_built_file_names_it(parts_copy, tmp_path):
    # Every package but torch was refused, so no triton, helion or cutlass kernel could be built.
    _add_numpy_import(parts_copy[0])
    manifest = parts_copy[0] / "qr_v2" / "manifest.yml"
    manifest.write_text(manifest.read_text().replace("python:", "packages: [numpy, triton]\npython:", 1))
    result = build.build("qr_v2", tmp_path / "out.py")
    assert result.preflight.ok and "import numpy as np" in result.text
    header = result.text.split('"""', 1)[0].splitlines()
    # triton is allowed but no part imports it: the header names what the file imports, which check needs here.
    assert header[-1] == "# packages: numpy" and header[-2].startswith("# part qr_v2/route.py sha256 ")
    model = parts_copy[0] / "qr_v2" / "model.py"
    model.write_text("import scipy.linalg\n" + model.read_text())
    with pytest.raises(PopkitError, match=r"model\.py:1: imports 'scipy.linalg'; .*add scipy to the manifest's packages"):
        build.build("qr_v2", tmp_path / "out.py")


@pytest.mark.parametrize("problem", ["qr_v2", "eigh", "cholesky"])
def test_our_native_problems_import_no_package(problem):
    assert build.load_manifest(problem)["packages"] == []
    assert "# packages:" not in build.render(problem, kernelguard=False).text


def test_non_stdlib_import_error_names_the_part(parts_copy, tmp_path):
    _add_numpy_import(parts_copy[0])
    with pytest.raises(PopkitError, match=r"qr_v2/model\.py"):
        build.build("qr_v2", tmp_path / "out.py")


def test_cross_part_import_with_inline_mark_is_dropped(built):
    text = built["qr_v2"].read_text()
    assert build.INLINE_MARK not in text
    assert "from parts." not in text and "import parts" not in text


def test_manifest_missing_key(parts_copy, tmp_path):
    parts, _ = parts_copy
    manifest = parts / "eigh" / "manifest.yml"
    manifest.write_text(re.sub(r"(?m)^title:.*\n", "", manifest.read_text()))
    with pytest.raises(PopkitError, match=r"eigh/manifest\.yml: missing key 'title'"):
        build.build("eigh", tmp_path / "out.py")


@pytest.mark.parametrize("text", ["", "# only a comment\n", "- a list\n"], ids=["empty", "comment", "list"])
def test_empty_or_non_mapping_manifest_is_one_clear_error(parts_copy, tmp_path, text):
    (parts_copy[0] / "eigh" / "manifest.yml").write_text(text)
    with pytest.raises(PopkitError, match=r"eigh/manifest\.yml: empty or not a mapping; a manifest needs the keys"):
        build.build("eigh", tmp_path / "out.py")


def test_manifest_problem_must_name_its_folder(parts_copy, tmp_path):
    manifest = parts_copy[0] / "eigh" / "manifest.yml"
    manifest.write_text(manifest.read_text().replace("problem: eigh", "problem: qr_v2"))
    with pytest.raises(PopkitError, match=r"eigh/manifest\.yml: problem: 'qr_v2' does not match its folder 'eigh'"):
        build.build("eigh", tmp_path / "out.py")
    assert not (tmp_path / "out.py").exists()


@pytest.mark.parametrize("old,new,message", [
    ("cuda:\n", "cuda: common/device_utils.cuh\nold_cuda:\n", r"'cuda' must be a list of names"),
    ("python:\n", "python: []\nold_python:\n", r"'python' lists no parts"),
    ("python:\n", "run_folder_imports: [reference.py]\npython:\n", r"'reference\.py' is not a module name"),
    ("python:\n", "packages: triton\npython:\n", r"'packages' must be a list of names"),
    ("python:\n", "packages: [triton.language]\npython:\n", r"packages: 'triton\.language' is not a module name "
                                                             r"\(a top-level one"),
], ids=["cuda-not-a-list", "no-python-parts", "file-not-module", "packages-not-a-list", "packages-submodule"])
def test_bad_manifest_lists(parts_copy, tmp_path, old, new, message):
    manifest = parts_copy[0] / "eigh" / "manifest.yml"
    manifest.write_text(manifest.read_text().replace(old, new, 1))
    with pytest.raises(PopkitError, match=message):
        build.build("eigh", tmp_path / "out.py")


@pytest.mark.parametrize("title, why", [
    ("", "title is empty"), ("[1, 2]", "title is not text"), ('"two\\nlines"', "title is not one line"),
    ("'a \"\"\" b'", 'title holds """ or a backslash'), ("'ends in \\'", 'title holds """ or a backslash'),
    ("Upstream", "title holds the banned word 'stream' (any case)"),
], ids=["empty", "list", "two-lines", "triple-quote", "backslash", "banned-word"])
def test_a_title_the_built_files_docstring_cannot_hold_is_named(parts_copy, tmp_path, title, why):
    # The title goes into the built file's docstring: an empty one read "None", '"""' ended in "the built file:22:
    # not valid Python", 'stream' in "eigh.py:7: contains the banned word", none of which named the manifest.
    manifest = parts_copy[0] / "eigh" / "manifest.yml"
    manifest.write_text(re.sub(r"(?m)^title:.*$", lambda _: f"title: {title}", manifest.read_text()))
    with pytest.raises(PopkitError) as info:
        build.build("eigh", tmp_path / "out.py")
    assert str(info.value) == f"{manifest}: {why}: the built file's docstring holds it"
    assert not (tmp_path / "out.py").exists()


def test_a_part_whose_name_holds_the_banned_word_is_named(parts_copy, tmp_path):
    # The built file's header names every part: a part 'eigh/upstream_model.py' failed as "eigh.py:8: contains
    # the banned word", a line of the built file, not the part.
    parts, _ = parts_copy
    (parts / "eigh" / "model.py").rename(parts / "eigh" / "upstream_model.py")
    manifest = parts / "eigh" / "manifest.yml"
    manifest.write_text(manifest.read_text().replace("eigh/model.py", "eigh/upstream_model.py"))
    with pytest.raises(PopkitError) as info:
        build.build("eigh", tmp_path / "out.py")
    assert str(info.value) == (f"{parts / 'eigh' / 'upstream_model.py'}: the part's name holds the banned word "
                               "'stream' (any case), and the built file names every part")


def test_triple_quote_in_cuda_part_is_rejected(parts_copy, tmp_path):
    parts, _ = parts_copy
    part = parts / "eigh" / "jacobi_small.cu"
    part.write_text(part.read_text() + "\n// a ''' here would end the embedded string\n")
    with pytest.raises(PopkitError, match="'''"):
        build.build("eigh", tmp_path / "out.py")


# ---------------------------------------------------------------- harness problems: record, run folder, pure Python

TOY_RECORD = """leaderboard: toy_board_v2
gpus: [H100, B200]
harness:
  folder: problems/toy
  main: eval.py
  files:
  - {name: submission.py, source: '@SUBMISSION@'}
  - {name: reference.py, source: reference.py}
  - {name: utils.py, source: ../utils.py}
  - {name: eval.py, source: eval.py}
tests:
- {size: 4, seed: 1}
benchmarks:
- {size: 8, seed: 2}
"""
TOY_MANIFEST = """problem: toy
title: toy (from problems/toy)
run_folder_imports: [reference]
cuda: []
python:
  - toy/model.py
  - toy/route.py
"""
TOY_ROUTE = """from reference import ref_kernel as _reference  # the runner places reference.py beside submission.py


def custom_kernel(data):
    return _reference(data)
"""


@pytest.fixture
def toy(parts_copy):
    """A harness problem as `popkit problem add` leaves it: a record with the task's files, a pure-Python route."""
    folder = parts_copy[0] / "toy"
    folder.mkdir()
    (folder / "manifest.yml").write_text(TOY_MANIFEST)
    (folder / "model.py").write_text('"""toy: no model yet."""\n')
    (folder / "route.py").write_text(TOY_ROUTE)
    (build.CASES_DIR / "toy.yml").write_text(TOY_RECORD)
    return folder


def run_in_folder(built_file, tmp_path, *args):
    """Run Python in a run folder laid out as the runner does: submission.py beside reference.py."""
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    shutil.copyfile(built_file, run / "submission.py")
    (run / "reference.py").write_text("def ref_kernel(data):\n    return 2 * data\n")
    return subprocess.run([sys.executable, *args], cwd=run, capture_output=True, text=True, timeout=60)


def test_header_comes_from_the_problem_record(toy, tmp_path):
    result = build.build("toy", tmp_path / "toy.py")
    assert result.text.splitlines()[:2] == ["#!POPCORN leaderboard toy_board_v2", "#!POPCORN gpu H100"]
    assert result.preflight.directives == {"leaderboard": "toy_board_v2", "gpu": "H100"}


def test_without_a_record_the_header_is_the_problem_name_and_b200(toy, tmp_path):
    (build.CASES_DIR / "toy.yml").unlink()
    result = build.build("toy", tmp_path / "toy.py")
    assert result.text.splitlines()[:2] == ["#!POPCORN leaderboard toy", "#!POPCORN gpu B200"]


def test_an_unreadable_record_is_one_clear_error(toy, tmp_path):
    (build.CASES_DIR / "toy.yml").write_text("leaderboard: toy\ntests: []\n")
    with pytest.raises(PopkitError, match=r"toy\.yml: a problem record needs non-empty 'tests'"):
        build.build("toy", tmp_path / "toy.py")
    assert not (tmp_path / "toy.py").exists()


def test_pure_python_build_compiles_nothing_and_runs_in_the_run_folder(toy, tmp_path):
    text = build.build("toy", tmp_path / "toy.py").text
    assert "CUDA_PARTS" not in text and "CUDA_UNITS" not in text and "CUDA." not in text
    prerun = run_in_folder(tmp_path / "toy.py", tmp_path, "submission.py")
    assert prerun.returncode == 0, prerun.stderr
    assert prerun.stdout.strip() == "toy: pure Python, nothing to compile"
    called = run_in_folder(tmp_path / "toy.py", tmp_path, "-c", "import submission; print(submission.custom_kernel(21))")
    assert called.returncode == 0 and called.stdout.strip() == "42", called.stderr


def test_run_folder_import_needs_the_manifest_declaration(toy, tmp_path):
    manifest = toy / "manifest.yml"
    manifest.write_text(manifest.read_text().replace("run_folder_imports: [reference]\n", ""))
    with pytest.raises(PopkitError, match=r"toy/route\.py:1: imports 'reference'; .*run_folder_imports"):
        build.build("toy", tmp_path / "toy.py")


def test_run_folder_imports_allow_only_the_declared_names(toy, tmp_path):
    route = toy / "route.py"
    route.write_text("import utils\n" + route.read_text())
    with pytest.raises(PopkitError, match=r"toy/route\.py:1: imports 'utils'; the runner places utils\.py beside "
                                          r"submission\.py: add utils to the manifest's run_folder_imports"):
        build.build("toy", tmp_path / "toy.py")
    manifest = toy / "manifest.yml"
    manifest.write_text(manifest.read_text().replace("[reference]", "[reference, utils]"))
    assert "import utils" in build.build("toy", tmp_path / "toy.py").text
    route.write_text("import numpy\n" + route.read_text())
    with pytest.raises(PopkitError, match=r"toy/route\.py:1: imports 'numpy'"):
        build.build("toy", tmp_path / "toy.py")


def test_run_folder_imports_must_be_files_the_runner_places(toy, tmp_path):
    manifest = toy / "manifest.yml"
    manifest.write_text(manifest.read_text().replace("[reference]", "[reference, task]"))
    with pytest.raises(PopkitError, match=r"run_folder_imports names task, which the runner does not place .*"
                                          r"eval, reference, utils"):
        build.build("toy", tmp_path / "toy.py")
    (build.CASES_DIR / "toy.yml").unlink()      # no record: nothing to check against
    build.build("toy", tmp_path / "toy.py")


def test_cuda_parts_without_the_loader_are_refused(parts_copy, tmp_path):
    manifest = parts_copy[0] / "eigh" / "manifest.yml"
    manifest.write_text(manifest.read_text().replace("  - common/cuda_loader.py\n", ""))
    with pytest.raises(PopkitError, match=r"eigh/manifest\.yml: CUDA parts need a Python part that defines CUDA"):
        build.build("eigh", tmp_path / "out.py")


# ---------------------------------------------------------------- the built file

@pytest.fixture
def fresh(tmp_path):
    """Build now, so comparisons with the parts on disk see the same bytes the build read."""
    return lambda problem: build.build(problem, tmp_path / f"{problem}.py").output

@pytest.mark.parametrize("problem", PROBLEMS)
def test_header_directives_and_provenance(problem, fresh):
    text = fresh(problem).read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == f"#!POPCORN leaderboard {problem}"
    assert lines[1] == "#!POPCORN gpu B200"
    provenance = dict(re.findall(r"(?m)^# part (\S+) sha256 ([0-9a-f]{64})$", text))
    expected = {rel: hashlib.sha256((build.PARTS / rel).read_bytes()).hexdigest()
                for rel in manifest_parts(problem)}
    assert provenance == expected
    assert re.search(r"(?m)^# toolkit commit: ([0-9a-f]{40}|uncommitted)$", text)


@pytest.mark.parametrize("problem", PROBLEMS)
def test_every_cuda_part_is_embedded_verbatim(problem, fresh):
    text = fresh(problem).read_text(encoding="utf-8")
    for rel in build.load_manifest(problem)["cuda"]:
        body = [line for line in (build.PARTS / rel).read_text().splitlines()
                if not build.LOCAL_INCLUDE.match(line) and line.strip() != "#pragma once"]
        assert "\n".join(body).strip("\n") in text, rel
    # no local include survives: the translation unit is self-contained
    assert not re.search(r'(?m)^\s*#\s*include\s+"', text)


@pytest.mark.parametrize("problem", PROBLEMS)
def test_imports_only_torch_and_stdlib(problem, built):
    tree = ast.parse(built[problem].read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in the built file"
            names.add(node.module.split(".")[0])
    assert "torch" in names
    assert names <= {"torch"} | set(sys.stdlib_module_names), names - set(sys.stdlib_module_names)


@pytest.mark.parametrize("problem", PROBLEMS)
def test_rules_size_and_syntax(problem, built):
    data = built[problem].read_bytes()
    assert b"stream" not in data.lower()
    assert 0 < len(data) < 1_000_000
    compile(data.decode("utf-8"), str(built[problem]), "exec")


@pytest.mark.parametrize("problem", PROBLEMS)
def test_embedded_cuda_is_the_assembly(problem, fresh, import_module):
    module = import_module(fresh(problem))
    assembly = build.assemble_cuda([build.read_part(rel) for rel in build.load_manifest(problem)["cuda"]])
    assert {path: text.strip("\n") for path, text in module.CUDA_PARTS.items()} == assembly.parts
    assert list(module.CUDA_PARTS) == build.load_manifest(problem)["cuda"]        # manifest order
    assert [tuple(unit) for unit in module.CUDA_UNITS] == assembly.units
    assert module.CUDA.name == f"popkit_{problem}"
    assert module.CUDA.parts == assembly.parts and module.CUDA.units == assembly.units
    # what the loader compiles, on a big machine and on a small one, is what the builder assembled
    assert [module.CUDA.unit_source(u) for u in module.CUDA.plan(cpus=16)] == (
        [assembly.source(u) for u in assembly.units] if len(assembly.units) > 1 else [assembly.source()])
    assert [module.CUDA.unit_source(u) for u in module.CUDA.plan(cpus=2)] == [assembly.source()]


# ---------------------------------------------------------------- the CUDA layout (build.assemble_cuda)

def fake_part(path: str, text: str) -> build.Part:
    return build.Part(path, text, hashlib.sha256(text.encode()).hexdigest())


def test_each_cu_part_is_a_unit_after_every_header_part_in_manifest_order():
    parts = [fake_part("common/u.cuh", "#pragma once\nint u();"),
             fake_part("p/a.cu", '#include "u.cuh"\n#include <cstdio>\nint a() { return u(); }'),
             fake_part("p/v.cuh", '#pragma once\n#include "u.cuh"\nint v();'),
             fake_part("p/b.cu", '#include "v.cuh"\nint b();')]
    assembly = build.assemble_cuda(parts)
    assert assembly.parts == {"common/u.cuh": "int u();", "p/a.cu": "#include <cstdio>\nint a() { return u(); }",
                              "p/v.cuh": "int v();", "p/b.cu": "int b();"}
    # a .cu part listed before a header still gets it: every unit starts with all the headers
    assert assembly.units == [("common/u.cuh", "p/v.cuh", "p/a.cu"), ("common/u.cuh", "p/v.cuh", "p/b.cu")]
    assert assembly.source(assembly.units[0]) == ("// ---- part common/u.cuh ----\nint u();\n\n"
                                                  "// ---- part p/v.cuh ----\nint v();\n\n"
                                                  "// ---- part p/a.cu ----\n#include <cstdio>\nint a() { return u(); }")
    # the one-unit layout (small machines) is every part in manifest order, as before the split
    assert assembly.source() == "\n\n".join(f"// ---- part {p} ----\n{t}" for p, t in assembly.parts.items())
    assert build.assemble_cuda(parts[:1]).units == []           # headers alone: no unit of their own
    assert build.assemble_cuda([]).units == [] and build.assemble_cuda([]).source() == ""


@pytest.mark.parametrize("first, second", [
    ("constexpr int kColumnGroup = 8;", "constexpr int kColumnGroup = 8;   // the same value"),
    ("__device__ float g_scale[4];", "static __device__ float g_scale = 1.f;"),
    ("struct __align__(16) Chunk { float x[4]; };", "template <int W>\nstruct Chunk { float y[W]; };"),
    ("using Row = float[32];", "enum class Row { a, b };"),
])
def test_two_parts_defining_one_name_at_namespace_scope_are_refused(first, second):
    # dc518b3: householder_panel.cu and householder_warp.cu both defined kColumnGroup; the GPU hosts compile a unit
    # a part and passed it, a machine under 4 CPUs compiles one unit and fails.
    parts = [fake_part("common/u.cuh", "#pragma once\nint u();"),
             fake_part("p/a.cu", f"namespace {{\n{first}\n}}"), fake_part("p/b.cu", f"namespace {{\n{second}\n}}")]
    with pytest.raises(PopkitError, match=r"parts/p/a\.cu and parts/p/b\.cu both define \w+: machines under 4 CPUs"):
        build.assemble_cuda(parts)


def test_names_inside_functions_declarations_and_overloads_are_not_clashes():
    body = "__global__ void k(float* x) {\n    constexpr int kRows = 4;\n    x[0] = kRows;\n}\n"
    parts = [fake_part("p/a.cu", "struct Chunk;\n__device__ int twice(int x) { return 2 * x; }\n" + body),
             fake_part("p/b.cu", "struct Chunk { int a; };\n__device__ float twice(float x) { return 2 * x; }\n"
                                 + body.replace("k(", "k2("))]
    assert len(build.assemble_cuda(parts).units) == 2


CUDA_PROBLEMS = sorted(p.parent.name for p in build.PARTS.glob("*/manifest.yml")
                       if build.load_manifest(p.parent.name)["cuda"])


def test_the_cuda_problems_are_found():
    assert {"cholesky", "qr_v2", "eigh"} <= set(CUDA_PROBLEMS)


@pytest.mark.parametrize("problem", CUDA_PROBLEMS)
def test_every_cuda_problem_has_one_unit_per_cu_part(problem):
    cuda = build.load_manifest(problem)["cuda"]
    assembly = build.assemble_cuda([build.read_part(rel) for rel in cuda])
    headers = tuple(rel for rel in cuda if rel.endswith(".cuh"))
    assert assembly.units == [headers + (rel,) for rel in cuda if rel.endswith(".cu")]
    if problem == "cholesky":
        assert len(assembly.units) >= 2 and headers[0] == "common/device_utils.cuh"   # the parallel path


def test_a_part_that_would_end_the_embedded_string_is_named(tmp_path):
    with pytest.raises(PopkitError, match=r"p/a\.cu: contains \'\'\' which would end the embedded string"):
        build.assemble_cuda([fake_part("p/a.cu", "int x; // \'\'\'")])


@pytest.mark.parametrize("problem,n", [(p, n) for p in PROBLEMS for n in CPU_SIZES[p]])
def test_built_file_passes_the_gates_on_cpu(problem, n, built, import_module):
    module = import_module(built[problem])
    native = native_checker(problem)
    A = native.generate({"batch": 3, "n": n, "cond": 1, "seed": 11, "case": "mixed"})
    report = native.check_output(A, module.custom_kernel(A.clone()))
    assert report.passed, report.message
    if not torch.cuda.is_available():
        assert module.CUDA.compile_s is None      # no GPU: nothing was compiled at import


@pytest.mark.parametrize("problem", PROBLEMS)
def test_built_file_runs_as_a_script_on_cpu(problem, built):
    if torch.cuda.is_available():
        pytest.skip("the pre-run would compile CUDA on a GPU machine")
    proc = subprocess.run([sys.executable, str(built[problem])], capture_output=True, text=True, timeout=120,
                          cwd=built[problem].parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{problem}: no GPU, CPU models only"


def test_provenance_commit_follows_popkit_commit_and_ignores_an_enclosing_checkout(tmp_path, monkeypatch):
    outer = tmp_path / "outer"
    (outer / "inner").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=outer, check=True, capture_output=True)
    monkeypatch.setattr(build, "ROOT", outer / "inner")
    monkeypatch.delenv("POPKIT_COMMIT", raising=False)
    assert build.inputs_commit() == "uncommitted"
    monkeypatch.setenv("POPKIT_COMMIT", "feed" * 10)
    assert build.inputs_commit() == "feed" * 10


# ---------------------------------------------------------------- the tracked submission.py

def test_the_tracked_submission_is_a_fresh_build_of_the_problem_it_names():
    # It was left built from an older commit's parts (other common/device_utils.cuh and householder_panel.cu),
    # so the file README's loop uploads was not the code the tests checked.
    reason = build.stale_reason(build.ROOT / "submission.py")
    assert reason is None, (f"{reason}\n(from {build.ROOT}: {sys.executable} -m popcorn build "
                            f"{built_from((build.ROOT / 'submission.py').read_text())})")


def test_a_fresh_build_differs_only_in_its_commit_line(tmp_path, monkeypatch):
    monkeypatch.setenv("POPKIT_COMMIT", "a" * 40)
    out = build.build("eigh", tmp_path / "eigh.py").output
    assert build.stale_reason(out) is None
    monkeypatch.setenv("POPKIT_COMMIT", "b" * 40)        # built at another commit from the same inputs: the same build
    assert build.stale_reason(out) is None


@pytest.mark.parametrize("edit", ["part_hash", "code", "directive", "trailing_line"])
def test_a_stale_build_names_the_line_and_the_command(edit, tmp_path):
    out = build.build("qr_v2", tmp_path / "old.py").output
    text = out.read_text()
    if edit == "part_hash":
        digest = re.search(r"(?m)^# part qr_v2/route\.py sha256 ([0-9a-f]{64})$", text).group(1)
        text = text.replace(digest, "0" * 64)
    elif edit == "code":
        text = text.replace("def custom_kernel(", "def custom_kernel_old(", 1)
    elif edit == "directive":
        text = text.replace("#!POPCORN gpu B200", "#!POPCORN gpu H100", 1)
    else:
        text += "# a line left from an older template\n"
    out.write_text(text)
    reason = build.stale_reason(out)
    assert reason is not None and reason.startswith(f"{out} is not a fresh build of parts/qr_v2: line ")
    assert reason.endswith(f"rebuild it with `popkit build qr_v2 -o {out}`")


def test_a_file_popkit_did_not_build_is_named(tmp_path):
    plain = tmp_path / "hand.py"
    plain.write_text("def custom_kernel(data):\n    return data\n")
    assert build.stale_reason(plain) == (f"{plain}: not built by popkit (no '# Built by popkit from "
                                         "parts/PROBLEM' line in its header)")
