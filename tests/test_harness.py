"""Harness problems on CPU: `problem add` from a folder, then check, bench and diff through the folder's eval.py.

The folder is tests/toy_reference (conftest.py's `toy` fixture: our own tiny problem in the reference-kernels
layout, copied to a temporary place); records, parts and the local config go to tmp_path, never into the project.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import build
from checks import harness, preflight, problem_add, problems, runner, task_folder
from popcorn.errors import ProblemError
from popcorn.cli import main
from popcorn.evidence import logs

GOOD = "def custom_kernel(data):\n    return [x + 1 for x in data]\n"
SLOWER = "import time\n\ndef custom_kernel(data):\n    time.sleep(0.002)\n    return [x + 1 for x in data]\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def added(toy: Path, **task_changes) -> problems.Problem:
    if task_changes:
        task = toy / "task.yml"
        write(task, task.read_text() + "".join(f"{k}: {v}\n" for k, v in task_changes.items()))
    problem_add.add_problem("addone", toy)
    return problems.load_problem("addone")


# ---- problem add ---------------------------------------------------------------------------------

def test_add_records_the_task_and_scaffolds_parts(toy, tmp_path):
    result = problem_add.add_problem("addone", toy)
    prob = problems.load_problem("addone")
    assert prob.leaderboard == "addone_v1" and prob.gpus == ["CPU"]        # from the collection index
    assert prob.timeouts_s == {"test": 20, "benchmark": 20, "ranked": 30}
    assert prob.tests[2] == {"size": 64, "seed": 13, "mode": "wide"}      # the task's own keys and order
    assert prob.harness["folder"] == "problems/toy/addone_py"
    assert {"name": "eval.py", "source": "../eval.py"} in prob.harness["files"]
    assert prob.native is None
    assert sorted(p.name for p in result.created) == ["__init__.py", "manifest.yml", "model.py", "route.py"]
    route = (tmp_path / "parts" / "addone" / "route.py").read_text()
    assert "from reference import ref_kernel" in route and "def custom_kernel" in route
    assert task_folder.harness_folder(prob) == toy.resolve()              # remembered in the local config


def test_the_scaffold_lets_the_parts_import_every_module_the_runner_places(toy, tmp_path, monkeypatch):
    # Every folder's own template starts `from task import input_t, output_t`; the scaffold allowed only
    # `reference`, so pasting the template into route.py was refused by the build.
    write(toy / "task.py", "input_t = output_t = list\n")
    task = toy / "task.yml"
    write(task, task.read_text().replace('  - {"name": "reference.py"',
                                         '  - {"name": "task.py", "source": "task.py"}\n  - {"name": "reference.py"'))
    problem_add.add_problem("addone", toy)
    manifest = yaml.safe_load((tmp_path / "parts" / "addone" / "manifest.yml").read_text())
    assert manifest["run_folder_imports"] == ["reference", "task"]
    write(tmp_path / "parts" / "addone" / "route.py", "from task import input_t, output_t\n\n\n" + GOOD)
    monkeypatch.setattr(build, "PARTS", tmp_path / "parts")
    monkeypatch.setattr(build, "CASES_DIR", problems.CASES_DIR)
    assert build.build("addone", tmp_path / "s.py").preflight.ok
    assert runner.check("addone", tmp_path / "s.py", device="cpu", log_path=None).passed


FANCY_TEMPLATE = """import fancylib.ops as ops


def custom_kernel(data):
    return [ops.add_one(x) for x in data]
"""


def test_the_scaffold_lists_the_packages_the_folders_files_import_and_check_needs_them_installed(toy, tmp_path,
                                                                                                 monkeypatch):
    # Every third-party import was refused, so a folder whose template is a triton/helion/cutlass kernel could
    # not be built unchanged; the package then failed as a traceback inside eval.py where it is not installed.
    write(toy / "submission.py", FANCY_TEMPLATE)
    write(toy / "reference.py", (toy / "reference.py").read_text() + "\n\ndef _fast(data):\n    import refpkg\n")
    added_cli = CliRunner().invoke(main, ["problem", "add", "addone", "--from", str(toy)])
    assert added_cli.exit_code == 0, added_cli.output
    assert "packages: fancylib, refpkg (third-party modules the folder's templates" in added_cli.output
    manifest = yaml.safe_load((tmp_path / "parts" / "addone" / "manifest.yml").read_text())
    assert manifest["packages"] == ["fancylib", "refpkg"]
    monkeypatch.setattr(build, "PARTS", tmp_path / "parts")
    monkeypatch.setattr(build, "CASES_DIR", problems.CASES_DIR)
    shown = CliRunner().invoke(main, ["problem", "show", "addone"])
    assert "packages: fancylib, refpkg\n" in shown.output
    write(tmp_path / "parts" / "addone" / "route.py", FANCY_TEMPLATE)       # the folder's template, unchanged
    built = build.build("addone", tmp_path / "s.py")
    assert built.preflight.ok and "# packages: fancylib\n" in built.text      # refpkg: allowed, not imported
    with pytest.raises(runner.PopkitError, match=r"s\.py imports fancylib \(its manifest's packages\), not "
                                                 r"installed for .*: install it here.*; nothing ran$"):
        runner.check("addone", tmp_path / "s.py", device="cpu", log_path=None)
    lib = tmp_path / "site"
    write(lib.joinpath("fancylib").mkdir(parents=True) or lib / "fancylib" / "__init__.py", "")
    write(lib / "fancylib" / "ops.py", "def add_one(x):\n    return x + 1\n")
    write(lib / "refpkg.py", "")
    monkeypatch.syspath_prepend(str(lib))                                   # installed here, and for eval.py
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(lib), os.environ.get("PYTHONPATH", "")]))
    assert runner.check("addone", tmp_path / "s.py", device="cpu", log_path=None).passed


def test_a_run_folder_file_that_imports_an_absent_package_is_refused_before_anything_runs(toy, tmp_path, monkeypatch):
    # nvidia's eval.py imports cutlass and amd_202602's reference.py aiter at their top level: on a host without them
    # every case crashed in eval.py, after a pre-run, whatever the submission imported.
    write(toy / "reference.py", "import popkit_absent_pkg.ops\n" + (toy / "reference.py").read_text()
          + "\n\ndef _fast(data):\n    import popkit_absent_lazy\n")
    added(toy)
    monkeypatch.setattr(harness, "prerun", lambda *args: pytest.fail("the submission ran"))
    with pytest.raises(runner.PopkitError) as info:
        runner.check("addone", write(tmp_path / "s.py", GOOD), device="cpu", log_path=None)
    assert str(info.value) == (f"the folder's reference.py imports popkit_absent_pkg, not installed for "
                               f"{sys.executable}: install it here, or run on a host that has it (the leaderboard's "
                               "runner does); nothing ran")


def test_the_scaffolds_own_route_names_no_package_it_does_not_import(toy, tmp_path, monkeypatch):
    # The manifest allows the folder's packages (helion's template imports helion), but the scaffolded route only
    # calls the reference: its header named them all, so check refused it where helion is absent ("imports helion").
    write(toy / "submission.py", FANCY_TEMPLATE)
    problem_add.add_problem("addone", toy)
    monkeypatch.setattr(build, "PARTS", tmp_path / "parts")
    monkeypatch.setattr(build, "CASES_DIR", problems.CASES_DIR)
    built = build.build("addone", tmp_path / "s.py")
    assert build.load_manifest("addone")["packages"] == ["fancylib"]
    assert built.preflight.ok and "# packages:" not in built.text
    assert runner.check("addone", tmp_path / "s.py", device="cpu", log_path=None).passed


def test_add_refuses_an_existing_name_unless_forced_and_keeps_parts_and_extra_keys(toy, tmp_path):
    problem_add.add_problem("addone", toy)
    record = problems.record_path("addone")
    write(record, record.read_text() + "gates: {exact: every value is x + 1}\n")
    route = tmp_path / "parts" / "addone" / "route.py"
    write(route, GOOD)
    with pytest.raises(ProblemError, match="exists.*--force"):
        problem_add.add_problem("addone", toy)
    result = problem_add.add_problem("addone", toy, force=True)
    assert result.replaced and not result.created and route.read_text() == GOOD
    assert problems.load_problem("addone").gates == {"exact": "every value is x + 1"}


def test_force_from_a_folder_of_another_leaderboard_is_refused_unless_the_board_is_named(toy, tmp_path):
    # A --force whose --from named the wrong folder (tab completion: grayscale_py for vectoradd_py) re-pointed the
    # problem at that folder's leaderboard and cases without a word, its parts (written for the first board) kept.
    problem_add.add_problem("addone", toy)
    record = problems.record_path("addone")
    before = record.read_bytes()
    other = toy.parent / "other_py"
    shutil.copytree(toy, other)
    index = toy.parent.parent / "toy.yaml"
    write(index, index.read_text() + "  - directory: toy/other_py\n    name: other_v1\n    gpus:\n      - CPU\n")
    with pytest.raises(ProblemError) as info:
        problem_add.add_problem("addone", other, force=True)
    assert str(info.value) == (
        f"problem addone is recorded for leaderboard addone_v1 (problems/toy/addone_py), but {other.resolve()} is "
        "leaderboard other_v1's: --force refreshes a problem from its own folder; check --from, or pass "
        "--leaderboard other_v1 to move addone to that board (its parts are kept); nothing was changed")
    assert record.read_bytes() == before
    assert task_folder.harness_folder(problems.load_problem("addone")) == toy.resolve()
    moved = problem_add.add_problem("addone", other, force=True, leaderboard="other_v1")
    assert moved.replaced and problems.load_problem("addone").leaderboard == "other_v1"


def test_force_over_a_record_that_is_not_yaml_is_one_line_and_keeps_the_file(toy):
    # It was a yaml traceback; replacing the file instead would drop whatever else it held.
    problem_add.add_problem("addone", toy)
    record = problems.record_path("addone")
    write(record, "gates: {exact: [unclosed\n")
    with pytest.raises(ProblemError, match=r"addone\.yml: not readable YAML .*delete it and add the problem again"):
        problem_add.add_problem("addone", toy, force=True)
    assert record.read_text() == "gates: {exact: [unclosed\n"


@pytest.mark.parametrize("damage, message", [
    (lambda d: shutil.rmtree(d), "no such folder"),
    (lambda d: (d / "task.yml").unlink(), "not a problem folder"),
    # It said only the parser's context, "unreadable (while parsing a flow sequence)": no line, nor what is wrong.
    (lambda d: write(d / "task.yml", "files: [unclosed\n"),
     r"task\.yml: unreadable \(line 2, column 1: expected ',' or '\]', but got '<stream end>'\)$"),
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text().replace("benchmarks:", "old_benchmarks:")),
     "no benchmarks list"),
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text().replace('lang: "py"', 'lang: "cu"')),
     "popkit builds Python submissions only"),
    (lambda d: (d.parent / "eval.py").unlink(), "comes from ../eval.py, which is missing"),
    # These four were tracebacks (int('soon'), int(None), 'str' object has no attribute 'get'):
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text() + "test_timeout: soon\n"),
     r"test_timeout must be a positive number of seconds up to 86400 \(a day\), not 'soon'"),
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text() + "ranked_timeout:\n"),
     r"ranked_timeout must be a positive number of seconds up to 86400 \(a day\), not None"),
    # An OverflowError traceback at add (math.ceil of infinity), and one in check's wait for a 10^23 s limit:
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text().replace("test_timeout: 20", "test_timeout: .inf")),
     r"test_timeout must be a positive number of seconds up to 86400 \(a day\), not inf"),
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text().replace("test_timeout: 20",
                                                                         "test_timeout: 1" + "0" * 23)),
     r"test_timeout must be a positive number of seconds up to 86400 \(a day\), not 1" + "0" * 23),
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text().replace('config:\n  main: "eval.py"',
                                                                         'config: "eval.py"')),
     "config must be a mapping"),
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text() + "gpus: {B200: 1}\n"),
     "gpus must be a GPU name or a list of them"),
    # Recorded as false, without a word (only the YAML boolean true was read as true):
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text() + 'multi_gpu: "true"\n'),
     "multi_gpu must be true or false \\(a YAML boolean, unquoted\\), not 'true'"),
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text() + "multi_gpu: 1\n"),
     "multi_gpu must be true or false \\(a YAML boolean, unquoted\\), not 1"),
    # Recorded as given, though the server ranks by geom, mean or last only:
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text() + "ranking_by: 5\n"),
     "ranking_by 5 is not one of the runner's rules"),
    # Was "no tests list", for a list that is there with an entry that is not a case:
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text().replace("tests:\n", "tests:\n  - 5\n")),
     "tests entry 1 is 5, not a case"),
    # Would have copied utils.py outside the run folder:
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text().replace('{"name": "reference.py"',
                                                                         '{"name": "../../reference.py"')),
     "file name '../../reference.py' lies outside the run folder"),
    # A case popkit cannot write on one line of eval.py's cases file: the error named neither task.yml nor the entry.
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text().replace('{"size": 17, "seed": 12}',
                                                                         '{"size": 17, "seed": 12, "desc": "a; b"}')),
     r"task\.yml: tests entry 2: desc = 'a; b' is not a number, a word or a list of integers .*cases file"),
    (lambda d: write(d / "task.yml", (d / "task.yml").read_text().replace('{"size": 100, "seed": 21}',
                                                                         '{"size": 100, "seed": 21, "o": {"a": 1}}')),
     r"task\.yml: benchmarks entry 1: o = \{'a': 1\} is not a number"),
])
def test_add_rejects_bad_folders_in_one_line_and_writes_nothing(toy, tmp_path, damage, message):
    damage(toy)
    with pytest.raises(ProblemError, match=message) as info:
        problem_add.add_problem("addone", toy)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "cases").exists() and not (tmp_path / "parts").exists()


@pytest.mark.parametrize("where", ["third part", "remembering the folder", "loading the record back"])
@pytest.mark.parametrize("force", [False, True])
def test_add_interrupted_leaves_nothing_half_added(toy, tmp_path, monkeypatch, where, force):
    # Ctrl-C half-way left some parts without the rest (`popkit build` failed on the missing part), or a record
    # whose folder this machine did not know (the next `problem add` refused the name: pass --force).
    if force:
        problem_add.add_problem("addone", toy)
        record = problems.record_path("addone")
        record.write_text(record.read_text() + "note: kept\n")
        before = record.read_text()
        shutil.rmtree(tmp_path / "parts" / "addone")
    writes = []
    real_write = problem_add.write_atomic

    def write_then_stop(path, data):
        writes.append(path)
        if where == "third part" and len(writes) == 3:
            raise KeyboardInterrupt
        return real_write(path, data)

    def stop(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(problem_add, "write_atomic", write_then_stop)
    if where == "remembering the folder":
        monkeypatch.setattr(task_folder, "remember_path", stop)
    if where == "loading the record back":
        monkeypatch.setattr(problems, "load_problem", stop)
    result = CliRunner().invoke(main, ["problem", "add", "addone", "--from", str(toy)] + (["--force"] if force else []))
    assert result.exit_code == 130
    assert result.output == ("\ninterrupted: problem add addone stopped; "
                             f"{'its record is as it was' if force else 'nothing was added'}\n")
    assert not (tmp_path / "parts").exists() or list((tmp_path / "parts").iterdir()) == []
    if force:
        assert problems.record_path("addone").read_text() == before
    else:
        assert not problems.record_path("addone").exists()


@pytest.mark.parametrize("force", [False, True])
def test_an_add_into_a_read_only_records_folder_says_what_it_left(toy, tmp_path, monkeypatch, force):
    # The cleanup's unlink(missing_ok=True) of the record it never wrote failed too (a read-only mount refuses even
    # that): its 'Read-only file system' line replaced the one saying that nothing was added.
    if force:
        problem_add.add_problem("addone", toy)
    record = problems.record_path("addone")
    before = record.read_bytes() if force else None
    real_write, real_unlink = problem_add.write_atomic, Path.unlink

    def read_only(path):
        raise OSError(30, "Read-only file system", str(path))
    monkeypatch.setattr(problem_add, "write_atomic", lambda path, data: read_only(path)
                        if Path(path).parent == record.parent else real_write(path, data))
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: read_only(self)
                        if self.parent == record.parent else real_unlink(self, missing_ok=missing_ok))
    result = CliRunner().invoke(main, ["problem", "add", "addone", "--from", str(toy)] + (["--force"] if force else []))
    assert result.exit_code == 1
    outcome = "its record is as it was" if force else "nothing was added"
    assert result.output == f"error: {record}: cannot write (Read-only file system); {outcome}\n"
    assert (record.read_bytes() if force else record.exists()) == (before if force else False)
    assert force or not (tmp_path / "parts" / "addone").exists()


def test_a_failed_add_leaves_no_trace_in_the_local_config(toy, tmp_path, monkeypatch):
    # The folder's line stayed in .popkit/harness.yml after an add that failed once it was written (a record that
    # did not load back), and a failed --force from another folder left the problem pointing at that folder.
    config = tmp_path / ".popkit" / "harness.yml"
    load_problem, broken = problems.load_problem, [True]

    def load_or_fail(name, cases_dir=None):
        if broken[0]:
            raise ProblemError(f"{name}: does not load back")
        return load_problem(name, cases_dir)
    monkeypatch.setattr(problems, "load_problem", load_or_fail)
    with pytest.raises(ProblemError, match="does not load back"):
        problem_add.add_problem("addone", toy)
    assert not config.exists() and not config.parent.exists()
    assert not problems.record_path("addone").exists()

    broken[0] = False
    problem_add.add_problem("addone", toy)
    before = config.read_bytes()
    other = toy.parent / "other_py"
    shutil.copytree(toy, other)
    broken[0] = True
    with pytest.raises(ProblemError, match="does not load back"):
        problem_add.add_problem("addone", other, force=True, leaderboard="addone_v1")
    assert config.read_bytes() == before and sorted(p.name for p in config.parent.iterdir()) == ["harness.yml"]
    broken[0] = False
    assert task_folder.harness_folder(problems.load_problem("addone")) == toy.resolve()


def test_an_unreadable_local_config_names_the_fix(toy, tmp_path):
    # It said only ".popkit/harness.yml: unreadable (...)", and every add and every run of a harness problem ended
    # there: nothing said that the file is this machine's list of folders, safe to delete and rebuild.
    config = tmp_path / ".popkit" / "harness.yml"
    config.parent.mkdir()
    write(config, "addone: [unclosed\n")
    with pytest.raises(ProblemError) as info:
        problem_add.add_problem("addone", toy)
    assert str(info.value) == (
        f"{config}: unreadable (line 2, column 1: expected ',' or ']', but got '<stream end>'): it only says where "
        "each added problem's folder is on this machine; fix it, or delete it and run `popkit problem add NAME "
        "--from DIR --force` for each harness problem")
    assert config.read_text() == "addone: [unclosed\n" and not problems.record_path("addone").exists()


def test_add_from_a_file_names_the_folder_to_pass(toy, tmp_path):
    # --from .../task.yml said '.../task.yml: not a problem folder (no task.yml; ...)'.
    with pytest.raises(ProblemError) as info:
        problem_add.add_problem("addone", toy / "task.yml")
    assert str(info.value) == (f"{toy / 'task.yml'}: a file, not a problem folder (the folder that holds task.yml): "
                               f"pass its folder, {toy}")
    with pytest.raises(ProblemError, match=r"reference\.py: a file, not a problem folder \(the folder that holds "
                                           r"task\.yml\)$"):
        problem_add.add_problem("addone", toy / "reference.py")
    assert not (tmp_path / "cases").exists() and not (tmp_path / "parts").exists()


@pytest.mark.parametrize("name, hint", [("Add-One", " (such as add_one)"), ("fp8-mm", " (such as fp8_mm)"),
                                        ("3d", ""), ("", "")])
def test_add_rejects_a_name_that_is_not_a_package_name_and_suggests_one(toy, name, hint):
    # Folders are named fp8-mm or mixed-mla; the refusal gave the rule but not the name it would take.
    with pytest.raises(ProblemError) as info:
        problem_add.add_problem(name, toy)
    assert str(info.value) == (f"problem name {name!r}: use up to 64 lower-case letters, digits and _, starting "
                               f"with a letter{hint}")


def test_add_refuses_a_name_that_holds_the_banned_word_and_writes_nothing(toy, tmp_path):
    # 'upstream' was added, and every build of its parts then failed: the scaffold's paths and the built file's
    # header name the problem, and the leaderboard refuses 'stream' anywhere in a submission.
    with pytest.raises(ProblemError) as info:
        problem_add.add_problem("upstream", toy)
    assert str(info.value) == ("problem name 'upstream': it holds 'stream', which the leaderboard refuses anywhere "
                               "in a submission, and the built file names its problem: choose another name; "
                               "nothing was added")
    assert not (tmp_path / "cases").exists() and not (tmp_path / "parts").exists()


def test_add_refuses_a_leaderboard_that_holds_the_banned_word_and_writes_nothing(toy, tmp_path):
    # --leaderboard upstream_x was added, and every build then failed on the manifest's title ("title holds the
    # banned word"), a line the user never wrote; the built file's '#!POPCORN leaderboard' line names the board too.
    with pytest.raises(ProblemError) as info:
        problem_add.add_problem("addone", toy, leaderboard="upstream_x")
    assert str(info.value) == ("problem addone: leaderboard 'upstream_x' holds 'stream', which the leaderboard "
                               "refuses anywhere in a submission, and the built file's '#!POPCORN leaderboard' line "
                               "names it: no file could be submitted to it; nothing was added")
    assert not (tmp_path / "cases").exists() and not (tmp_path / "parts").exists()


@pytest.mark.parametrize("where", ["my_Stream_copies", "copies: #1"])
def test_a_folder_anywhere_gets_a_manifest_that_builds(toy, tmp_path, monkeypatch, where):
    # The scaffold's title named the folder's path, unquoted, and it went into the built file: under a folder
    # 'copies: #1' the manifest was not YAML, and under 'my_Stream_copies' every build failed on 'stream' in a
    # line of the built file that no part holds.
    away = tmp_path / where / "addone_py"
    shutil.copytree(toy, away)
    shutil.copy(toy.parent / "eval.py", away.parent / "eval.py")
    problem_add.add_problem("addone", away, leaderboard="addone_v1")
    title = yaml.safe_load((tmp_path / "parts" / "addone" / "manifest.yml").read_text())["title"]
    assert title == ("addone_v1" if "Stream" in where else f"addone_v1 (from {away})")
    monkeypatch.setattr(build, "PARTS", tmp_path / "parts")
    monkeypatch.setattr(build, "CASES_DIR", problems.CASES_DIR)
    assert build.build("addone", tmp_path / "s.py").preflight.ok


@pytest.mark.parametrize("board", ["Bad Board", "AddOne_v1", "", "../x", "a/b", "x.y", "-x", "qr_v2\n", "déjà"])
def test_add_rejects_a_leaderboard_no_submission_could_name_and_writes_nothing(toy, tmp_path, board):
    # 'Bad Board' was recorded, and every build then failed ("directive says leaderboard 'Bad', expected
    # 'Bad Board'"); a mixed-case board built files that submit refuses.
    with pytest.raises(ProblemError, match="not a leaderboard name") as info:
        problem_add.add_problem("addone", toy, leaderboard=board)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "cases").exists() and not (tmp_path / "parts").exists()
    assert not (tmp_path / ".popkit").exists()


def test_add_refuses_a_leaderboard_name_with_a_path_in_it_in_one_line(toy, tmp_path):
    # '../x' passed as "one word in lower case" and was recorded as the board.
    result = CliRunner().invoke(main, ["problem", "add", "addone", "--from", str(toy), "--leaderboard", "../x"])
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("error: ") and "'../x' is not a leaderboard name" in line
    assert "letters, digits, '_' and '-'" in line
    assert not (tmp_path / "cases").exists() and not (tmp_path / "parts").exists()


@pytest.mark.parametrize("comment", ['# name: "identity"\n', "# name: single node all2all\n", ""])
def test_a_folder_no_index_names_needs_its_leaderboard_given(toy, tmp_path, comment):
    # A folder outside a reference-kernels clone (or missing from its index) was recorded for the board its
    # task.yml's '# name:' comment or its folder named: '"identity"' with the quotes, 'single' (of 'single node
    # all2all'), 'addone_py'. Those comments name the real board in 5 of the 31 folders that have one.
    alone = tmp_path / "alone" / "addone_py"
    shutil.copytree(toy, alone)
    shutil.copy(toy.parent / "eval.py", alone.parent / "eval.py")
    write(alone / "task.yml", comment + (alone / "task.yml").read_text().split("\n", 1)[1])
    with pytest.raises(ProblemError, match=r"no collection index \(problems/\*\.yaml\) names the leaderboard of "
                                           r".*: pass --leaderboard NAME") as info:
        problem_add.add_problem("addone", alone)
    assert "\n" not in str(info.value) and not (tmp_path / "cases").exists()
    assert problem_add.add_problem("addone", alone, leaderboard="amd-identity").leaderboard == "amd-identity"


def test_an_unreadable_collection_index_is_named_when_no_index_gives_the_board(toy, tmp_path):
    # A broken problems/*.yaml was passed over without a word: the error said that no index names the folder, and
    # a --leaderboard then recorded the folder with task.yml's GPUs (B200 by default), not the index's.
    index = toy.parent.parent / "toy.yaml"
    write(index, index.read_text() + '  - directory: "unclosed\n')
    with pytest.raises(ProblemError) as info:
        problem_add.add_problem("addone", toy)
    assert str(info.value) == (
        f"problem addone: no collection index (problems/*.yaml) names the leaderboard of {toy.resolve()}: pass "
        f"--leaderboard NAME (as `popkit leaderboards` lists it); {index} is unreadable (line 9, column 1: found "
        "unexpected end of stream), and it may list the folder: fix it; nothing was added")
    assert not (tmp_path / "cases").exists()


def test_a_record_with_a_leaderboard_no_submission_could_name_is_refused(toy):
    problem_add.add_problem("addone", toy)
    path = problems.record_path("addone")
    write(path, path.read_text().replace("leaderboard: addone_v1", "leaderboard: Addone V1"))
    with pytest.raises(ProblemError, match=r"addone.yml: 'Addone V1' is not a leaderboard name"):
        problems.load_problem("addone")


def test_a_harness_variable_naming_no_folder_is_an_error_not_passed_over(toy, tmp_path, monkeypatch):
    # POPKIT_HARNESS_ADDONE with a typo was passed over: the folder `problem add` recorded ran instead, without a word.
    prob = added(toy)
    monkeypatch.setenv(task_folder.env_key("addone"), str(tmp_path / "nowhere"))
    with pytest.raises(ProblemError) as info:
        task_folder.harness_folder(prob)
    assert str(info.value) == (f"POPKIT_HARNESS_ADDONE={tmp_path / 'nowhere'}: not a problem folder (no task.yml "
                               "there); fix or unset it")
    shown = CliRunner().invoke(main, ["problem", "show", "addone"])
    assert f"folder: not found ({info.value})" in shown.output.splitlines()


def test_folder_lookup_order_env_then_reference_root_then_local_config(toy, tmp_path, monkeypatch):
    prob = added(toy)
    other = tmp_path / "elsewhere" / "problems" / "toy" / "addone_py"
    shutil.copytree(toy, other)
    monkeypatch.setenv("POPKIT_REFERENCE_KERNELS", str(tmp_path / "elsewhere"))
    assert task_folder.harness_folder(prob) == other
    monkeypatch.setenv(task_folder.env_key("addone"), str(toy))
    assert task_folder.harness_folder(prob) == toy
    monkeypatch.delenv(task_folder.env_key("addone"))
    monkeypatch.delenv("POPKIT_REFERENCE_KERNELS")
    assert task_folder.harness_folder(prob) == toy.resolve()              # the local config knows it
    task_folder.LOCAL_CONFIG.unlink()
    with pytest.raises(ProblemError, match="POPKIT_HARNESS_ADDONE"):
        task_folder.harness_folder(prob)


# ---- check, bench, diff through eval.py ----------------------------------------------------------

def test_check_passes_a_correct_submission_and_logs_an_official_record(toy, tmp_path):
    added(toy)
    log = tmp_path / "perf.jsonl"
    outcome = runner.check("addone", write(tmp_path / "s.py", GOOD), device="cpu", log_path=log)
    assert outcome.passed and [c["status"] for c in outcome.record["cases"]] == ["pass"] * 3
    record = json.loads(log.read_text())
    assert record["harness"] == "official" and record["device"] == "cpu" and record["gpu"] == "cpu"
    assert record["cases"][1]["message"] == "checked 17 values"
    assert "size=64 mode=wide" in outcome.table


def test_check_reports_each_failing_case_with_its_error(toy, tmp_path):
    added(toy)
    wrong = write(tmp_path / "s.py", "def custom_kernel(data):\n    return [x + (len(data) < 5) for x in data]\n")
    outcome = runner.check("addone", wrong, device="cpu", log_path=None)
    assert not outcome.passed
    assert [c["status"] for c in outcome.record["cases"]] == ["pass", "fail", "fail"]
    assert outcome.record["cases"][1]["error"] == "wrong value at index 0"


def test_seeds_rerun_the_list_with_popcorn_seed_and_show_the_remapped_seed(toy, tmp_path):
    added(toy)
    outcome = runner.check("addone", write(tmp_path / "s.py", GOOD), seeds=2, device="cpu", log_path=None)
    seeds = [c["spec"]["seed"] for c in outcome.record["cases"]]
    assert len(seeds) == 9 and seeds[:3] == [11, 12, 13]
    assert seeds[3:6] == [harness.remap_seed(s, 1) for s in (11, 12, 13)]
    assert seeds[6:] == [harness.remap_seed(s, 2) for s in (11, 12, 13)]
    assert str(seeds[8]) in outcome.table


def test_seeds_for_cases_without_a_seed_are_refused_before_anything_runs(toy, tmp_path, monkeypatch):
    # princeton's cases have no seed: POPCORN_SEED changed nothing in them, and the same cases were run again and
    # counted as new seeds.
    task = toy / "task.yml"
    write(task, re.sub(r', "seed": \d+', "", task.read_text()))
    added(toy)
    monkeypatch.setattr(harness, "prerun", lambda *args: pytest.fail("the submission ran"))
    good = write(tmp_path / "s.py", GOOD)
    refusal = "--seeds 2: addone's cases have no seed, and POPCORN_SEED remaps only a case's seed"
    with pytest.raises(runner.PopkitError, match=re.escape(refusal)):
        runner.check("addone", good, seeds=2, device="cpu", log_path=None)
    cli = CliRunner().invoke(main, ["check", "addone", "--submission", str(good), "--seeds", "2", "--device", "cpu"])
    assert cli.exit_code == 1 and refusal in cli.output


REMAP = """        if salt is not None:
            a = args["seed"]
            args["seed"] = a + (a + salt) * (a + salt + 1) // 2
"""


@pytest.mark.parametrize("remap, refused", [
    ("", True),                                                         # pmpp's first eval.py: a global seed only
    ("        if salt is not None:\n            args.update(seed=args.pop('seed') + salt)\n", False),  # cannot tell
])
def test_seeds_for_an_eval_that_keeps_each_cases_seed_are_refused_before_anything_runs(toy, tmp_path, monkeypatch,
                                                                                        remap, refused):
    # Older eval.py files (pmpp's first, amd/mla-decode) read POPCORN_SEED only for the global generator: the
    # table showed remapped seeds eval.py never used, and the extra runs repeated the same inputs.
    evaluator = toy.parent / "eval.py"
    assert REMAP in evaluator.read_text()
    write(evaluator, evaluator.read_text().replace(REMAP, remap).replace("    return cases", "    random.seed(salt)\n"
                                                                         "    return cases").replace(
        "import os", "import os\nimport random", 1))
    added(toy)
    good = write(tmp_path / "s.py", GOOD)
    refusal = ("--seeds 2: addone's eval.py uses POPCORN_SEED only as a global seed and keeps each case's seed: the "
               "extra runs would repeat the same cases; nothing ran")
    if refused:
        monkeypatch.setattr(harness, "prerun", lambda *args: pytest.fail("the submission ran"))
        with pytest.raises(runner.PopkitError, match=re.escape(refusal)):
            runner.check("addone", good, seeds=2, device="cpu", log_path=None)
        cli = CliRunner().invoke(main, ["check", "addone", "--submission", str(good), "--seeds", "2", "--device", "cpu"])
        assert cli.exit_code == 1 and cli.output.splitlines() == [f"error: {refusal}"], cli.output
    else:
        outcome = runner.check("addone", good, seeds=2, device="cpu", log_path=None)
        assert outcome.passed and ("--seeds: cannot tell from addone's eval.py whether POPCORN_SEED changes each "
                                   "case's seed; the extra runs may repeat the same cases") in outcome.notes
        assert runner.check("addone", good, device="cpu", log_path=None).notes == []    # without --seeds: no note


def test_a_crashing_submission_fails_every_case_and_shows_stderr(toy, tmp_path):
    added(toy)
    crash = write(tmp_path / "s.py", "raise RuntimeError('kernel build failed: no nvcc')\n\n\n"
                                      "def custom_kernel(data):\n    return data\n")
    outcome = runner.check("addone", crash, device="cpu", log_path=None)
    assert not outcome.passed
    assert all("exit code 1" in c["error"] for c in outcome.record["cases"])
    assert any("pre-run of submission.py failed" in n for n in outcome.notes)
    assert any("kernel build failed: no nvcc" in n for n in outcome.notes)


@pytest.mark.parametrize("count", [str(10**12), "1e400", "nan"])
def test_a_case_count_no_run_can_have_reads_the_cases_that_were_sent(count):
    # 1e400 ended the verb in an OverflowError traceback, nan in a ValueError.
    lines = {"test-count": count, "test.0.spec": "size: 3; seed: 1", "test.0.status": "pass"}
    run = harness.EvalRun("test", [{"size": 3, "seed": 1}, {"size": 4, "seed": 2}], lines, 0, "", 20)
    assert [(r["status"], r["error"]) for r in run.results()] == [
        ("pass", None), ("fail", "eval.py reported no result for this case")]


@pytest.mark.parametrize("code, reason", [
    (112, "eval.py: No CUDA GPU available. This script requires a GPU."),
    (2, "eval.py exit code 2 (crashed): No CUDA GPU available. This script requires a GPU."),
])
def test_an_error_eval_py_writes_before_any_case_is_each_cases_reason(code, reason):
    # princeton's eval.py writes `check: fail` and `error: WHY` (the submission does not load, no GPU, a mode it
    # lacks) and no case: every case said "eval.py reported no result for this case", and WHY was shown nowhere.
    lines = {"check": "fail", "error": "No CUDA GPU available. This script requires a GPU."}
    run = harness.EvalRun("test", [{"vocab_size": 32000}, {"vocab_size": 50264}], lines, code, "", 300)
    assert [(r["status"], r["error"]) for r in run.results()] == [("fail", reason)] * 2
    assert harness.run_notes([run]) == [f"eval.py test: {reason}"]


def test_a_run_that_writes_nothing_is_named(toy, tmp_path):
    added(toy)
    silent = write(tmp_path / "s.py", "import os, sys\nif 'POPCORN_FD' in os.environ:\n"
                                      "    sys.stderr.write('bye\\n'); os._exit(0)\n" + GOOD)
    outcome = runner.check("addone", silent, device="cpu", log_path=None)
    assert not outcome.passed
    assert all("wrote nothing" in c["error"] for c in outcome.record["cases"])
    assert any("stderr: bye" in n for n in outcome.notes)


def test_a_hanging_run_is_killed_at_the_task_timeout(toy, tmp_path):
    added(toy, test_timeout=2)
    hang = write(tmp_path / "s.py", "import time\n\ndef custom_kernel(data):\n"
                                    "    if len(data) > 10:\n        time.sleep(60)\n    return [x + 1 for x in data]\n")
    outcome = runner.check("addone", hang, device="cpu", log_path=None)
    statuses = [c["status"] for c in outcome.record["cases"]]
    assert statuses == ["pass", "fail", "fail"]
    assert "timed out after 2 s" in outcome.record["cases"][1]["error"]


def test_an_interrupted_run_kills_eval_py_instead_of_leaving_it_running(tmp_path):
    # eval.py runs in its own session, out of Ctrl-C's reach: popkit must stop it on the way out.
    pid_file = tmp_path / "pid"
    write(tmp_path / "main.py", f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                                "time.sleep(60)\n")
    interrupt = threading.Thread(target=lambda: (_wait_for(pid_file), os.kill(os.getpid(), signal.SIGINT)))
    interrupt.start()
    with pytest.raises(KeyboardInterrupt):
        harness._run_main(tmp_path, "main.py", "test", 30, dict(os.environ), lambda text: None)
    interrupt.join()
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_ctrl_c_during_a_harness_check_leaves_no_record_and_no_run_folder(toy, tmp_path, monkeypatch):
    import tempfile
    added(toy)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    reported = threading.Event()

    def progress(text):
        if ": status " in text:                          # eval.py has reported a case (the reader thread says so)
            reported.set()
    interrupt = threading.Thread(target=lambda: (reported.wait(20), os.kill(os.getpid(), signal.SIGINT)))
    interrupt.start()
    slow = write(tmp_path / "s.py", "import time\n\ndef custom_kernel(data):\n    time.sleep(0.5)\n"
                                    "    return [x + 1 for x in data]\n")
    log = tmp_path / "perf.jsonl"
    with pytest.raises(runner.Interrupted, match=r"interrupted: check addone stopped before it finished; "
                                                 r"nothing was logged \(.*perf.jsonl is unchanged\)$"):
        runner.check("addone", slow, device="cpu", progress=progress, log_path=log)
    interrupt.join()
    assert reported.is_set()
    assert not log.exists() and list(scratch.iterdir()) == []


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 20
    while not path.is_file() or not path.read_text():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_bench_times_the_list_beside_the_folders_reference(toy, tmp_path):
    added(toy)
    log = tmp_path / "perf.jsonl"
    outcome = runner.bench("addone", write(tmp_path / "s.py", GOOD), baseline=True, device="cpu", log_path=log)
    assert outcome.passed
    record = json.loads(log.read_text())
    assert record["baseline"] == "reference.ref_kernel" and record["mode"] == "bench"
    assert all(c["mean_us"] > 0 and c["baseline_us"] > 0 and c["runs"] == 5 for c in record["cases"])
    assert record["geomean_us"] > 0 and record["baseline_geomean_us"] > 0


def test_diff_alternates_rounds_and_flags_the_slower_variant(toy, tmp_path):
    added(toy)
    fast, slow = write(tmp_path / "fast.py", GOOD), write(tmp_path / "slow.py", SLOWER)
    outcome = runner.diff("addone", slow, fast, rounds=3, device="cpu", log_path=None)
    assert not outcome.passed
    assert all(c["ratio"] > 2 and c["verdict"] == "slower" for c in outcome.record["cases"])
    assert outcome.record["incumbent_geomean_us"] < outcome.record["geomean_us"]
    # each side's spread over the rounds, the incumbent's as well as the candidate's
    assert all(c["runs"] == c["incumbent_runs"] == 3 and c["incumbent_err_us"] >= 0
               and c["incumbent_best_us"] <= c["incumbent_us"] <= c["incumbent_worst_us"]
               for c in outcome.record["cases"])


def test_diff_names_the_side_that_failed(toy, tmp_path):
    # A raising incumbent read "ValueError: boom", as if the candidate had raised: the two are run alike.
    added(toy)
    good = write(tmp_path / "good.py", GOOD)
    bad = write(tmp_path / "bad.py", "def custom_kernel(data):\n    raise ValueError('boom')\n")
    for candidate, incumbent, side in ((good, bad, "incumbent"), (bad, good, "candidate")):
        outcome = runner.diff("addone", candidate, incumbent, rounds=3, device="cpu", log_path=None)
        assert [(c["status"], c["error"]) for c in outcome.record["cases"]] == [("fail", f"{side}: ValueError: boom")] * 2


RANKS_EVAL = """import os, sys
out = os.fdopen(int(os.environ["POPCORN_FD"]), "w")
cases = open(sys.argv[2]).read().splitlines()
print(f"test-count: {len(cases)}", file=out)
for i, spec in enumerate(cases):
    print(f"test.{i}.spec: {spec}", file=out)
    print(f"test.{i}.status: pass", file=out)
    print(f"test.{i}.message: a pool of {os.environ.get('POPCORN_GPUS', 1)}", file=out)
print("check: pass", file=out)
"""


def test_a_multi_gpu_task_gets_the_runners_gpu_count_and_too_few_gpus_are_refused(toy, tmp_path, monkeypatch):
    # amd_distributed (multi_gpu: true): eval.py starts a pool of POPCORN_GPUS processes for a case's world_size
    # ranks. popkit dropped the flag and never set POPCORN_GPUS, so the pool had one process and the ranks
    # waited for each other until the 640 s timeout.
    task = toy / "task.yml"
    write(task, task.read_text().replace('{"size": 3, "seed": 11}', '{"size": 3, "seed": 11, "world_size": 4}')
          + "multi_gpu: true\n")
    write(toy.parent / "eval.py", RANKS_EVAL)
    assert added(toy).multi_gpu
    good = write(tmp_path / "s.py", GOOD)
    shown = CliRunner().invoke(main, ["problem", "show", "addone"])     # it said nothing of the GPUs a case needs
    assert ("multi-GPU: each case runs on world_size GPUs (up to 4): check, bench and diff need a host with that "
            "many") in shown.output.splitlines()
    monkeypatch.setattr(harness, "visible_gpus", lambda device: 4)
    outcome = runner.check("addone", good, device="cpu", log_path=None)
    assert outcome.passed and {c["message"] for c in outcome.record["cases"]} == {"a pool of 4"}
    monkeypatch.setattr(harness, "visible_gpus", lambda device: 2)
    monkeypatch.setattr(harness, "prerun", lambda *args: pytest.fail("the submission ran"))
    with pytest.raises(ProblemError, match="addone runs each case on world_size GPUs: its cases need 4 and 2 are "
                                           "visible here, so nothing ran"):
        runner.check("addone", good, device="cpu", log_path=None)


PAIR = "def forward(data):\n    return [x + 1 for x in data]\n\n\ndef backward(data):\n    return data\n"


def test_a_task_whose_eval_calls_other_functions_is_scaffolded_checked_and_preflighted_by_them(toy, tmp_path,
                                                                                               monkeypatch):
    # princeton/cross_entropy_py: eval.py calls cross_entropy_forward and _backward (the functions of its template,
    # submission.py), and reference.py has no ref_kernel. The scaffold imported ref_kernel, so the first build
    # failed at import on every case, and the preflight refused every file without custom_kernel.
    write(toy / "submission.py", PAIR + "\n\ndef _shared(data):\n    return data\n")
    write(toy / "reference.py", (toy / "reference.py").read_text().replace("def ref_kernel", "def reference_forward"))
    evaluator = toy.parent / "eval.py"
    write(evaluator, evaluator.read_text().replace("from submission import custom_kernel",
                                                   "from submission import backward, forward as custom_kernel"))
    added_cli = CliRunner().invoke(main, ["problem", "add", "addone", "--from", str(toy)])
    assert added_cli.exit_code == 0, added_cli.output
    assert "note: its eval.py calls forward, backward, not custom_kernel" in added_cli.output
    prob = problems.load_problem("addone")
    assert prob.entry_points == ["forward", "backward"]
    monkeypatch.setattr(build, "PARTS", tmp_path / "parts")
    monkeypatch.setattr(build, "CASES_DIR", problems.CASES_DIR)
    scaffolded = build.build("addone", tmp_path / "scaffolded.py")
    assert scaffolded.preflight.ok, scaffolded.preflight.errors
    outcome = runner.check("addone", tmp_path / "scaffolded.py", device="cpu", log_path=None)
    assert not outcome.passed and "forward is not written yet" in outcome.record["cases"][0]["error"]

    header = "#!POPCORN leaderboard addone_v1\n#!POPCORN gpu CPU\n"
    mine = write(tmp_path / "mine.py", header + PAIR)
    assert preflight.preflight_file(mine, kernelguard=False).ok
    assert runner.check("addone", mine, device="cpu", log_path=None).passed
    usual = preflight.preflight_file(write(tmp_path / "usual.py", header + GOOD), kernelguard=False)
    assert usual.errors == ["usual.py: defines no forward, backward at its top level (the grader runs "
                            "`from submission import forward, backward`)"]
    refusal = ("addone's eval.py calls forward, backward, not custom_kernel, so the folder's reference.ref_kernel "
               "cannot stand in for a submission")
    with pytest.raises(runner.PopkitError, match=re.escape(refusal)):
        runner.bench("addone", mine, baseline=True, device="cpu", log_path=None)
    with pytest.raises(runner.PopkitError, match=re.escape(refusal)):
        runner.diff("addone", mine, "reference", device="cpu", log_path=None)


def test_the_built_docstring_names_the_functions_the_grader_calls(toy, tmp_path, monkeypatch):
    # princeton/cross_entropy_py's built file said "custom_kernel(data) dispatches to the routes below", a function
    # it does not define.
    write(toy / "submission.py", PAIR)
    problem_add.add_problem("addone", toy)
    monkeypatch.setattr(build, "PARTS", tmp_path / "parts")
    monkeypatch.setattr(build, "CASES_DIR", problems.CASES_DIR)
    docstring = build.build("addone", tmp_path / "s.py").text.split('"""')[1]
    assert "custom_kernel" not in docstring
    assert "\nforward, backward: what the grader calls,\ndefined in the last part. Pure Python" in docstring


def test_a_reference_without_ref_kernel_is_scaffolded_as_a_stub_that_says_what_to_write(toy, tmp_path, monkeypatch):
    # eval.py calls custom_kernel but reference.py has no ref_kernel: the scaffold imported it, so the built file
    # failed at import on every case. reference.py is read with ast: importing it would fail here.
    write(toy / "reference.py", "raise RuntimeError('imported')\n" +
          (toy / "reference.py").read_text().replace("def ref_kernel", "def reference_kernel"))
    added_cli = CliRunner().invoke(main, ["problem", "add", "addone", "--from", str(toy)])
    assert added_cli.exit_code == 0, added_cli.output
    assert ("note: no ref_kernel to start from (its reference.py defines none): a scaffolded route's custom_kernel "
            "raises NotImplementedError until you write it") in added_cli.output.splitlines()
    assert problems.load_problem("addone").entry_points == ["custom_kernel"]
    monkeypatch.setattr(build, "PARTS", tmp_path / "parts")
    monkeypatch.setattr(build, "CASES_DIR", problems.CASES_DIR)
    scaffolded = build.build("addone", tmp_path / "scaffolded.py")
    assert scaffolded.preflight.ok, scaffolded.preflight.errors
    assert "ref_kernel as" not in scaffolded.text
    namespace = {}
    exec(compile(scaffolded.text, "scaffolded.py", "exec"), namespace)      # imports nothing of the folder's
    with pytest.raises(NotImplementedError, match="custom_kernel is not written yet: parts/addone/route.py"):
        namespace["custom_kernel"]([1])


def test_a_reference_that_does_not_parse_is_named_as_such_not_as_one_without_ref_kernel(toy):
    # A syntax error in reference.py read as 'its reference.py has no ref_kernel', which sent the reader looking for
    # a missing function in a file that defines it.
    reference = toy / "reference.py"
    write(reference, reference.read_text().replace("def ref_kernel(data):", "def ref_kernel(data)"))
    added_cli = CliRunner().invoke(main, ["problem", "add", "addone", "--from", str(toy)])
    assert added_cli.exit_code == 0, added_cli.output
    line = next(line for line in added_cli.output.splitlines() if line.startswith("note:"))
    assert line.startswith("note: no ref_kernel to start from (its reference.py does not parse, line 11: "), line
    assert "defines none" not in line
    with pytest.raises(runner.PopkitError, match=r"addone's reference has no ref_kernel \(its reference.py does "
                                                 r"not parse, line 11: .*\), so there is no baseline to time"):
        runner.require_reference_kernel(problems.load_problem("addone"))
    write(reference, "")
    assert task_folder.no_ref_kernel(toy, [{"name": "reference.py", "source": "reference.py"}]) == \
        "its reference.py defines none"
    assert task_folder.no_ref_kernel(toy, [{"name": "reference.py", "source": "absent.py"}]) == \
        "its reference.py cannot be read: No such file or directory"
    assert task_folder.no_ref_kernel(toy, []) == "task.yml places no reference.py"


def test_robust_for_a_harness_problem_is_refused_before_any_build(toy, tmp_path, monkeypatch):
    # It was refused only once the parts had been built to a temporary file (a 'note: ... built parts/addone to'
    # line first), unlike every other wrong option.
    added(toy)
    monkeypatch.setattr(build, "build", lambda *args: pytest.fail("the parts were built"))
    result = CliRunner().invoke(main, ["check", "addone", "--robust", "--device", "cpu",
                                       "--log", str(tmp_path / "perf.jsonl")])
    assert (result.exit_code, result.output) == (1, "error: --robust needs a native checker "
                                                    "(checks/native/addone.py); addone is a harness problem\n")


def test_bench_baseline_and_diff_reference_without_ref_kernel_are_refused_before_anything_runs(toy, tmp_path,
                                                                                                  monkeypatch):
    # A reference.py without ref_kernel (problem add scaffolds a stub route for it): bench --baseline ran the
    # candidate, then the baseline's run failed at import and the bench passed, logged without a baseline; diff
    # --incumbent reference failed every case after the candidate's rounds. Refused before any build or run now.
    write(toy / "reference.py", (toy / "reference.py").read_text().replace("def ref_kernel", "def reference_kernel"))
    added(toy)
    runs, real = [], harness.run_eval
    monkeypatch.setattr(harness, "run_eval", lambda *args, **kwargs: runs.append(args[1]) or real(*args, **kwargs))
    monkeypatch.setattr(build, "build", lambda *args: pytest.fail("the parts were built"))
    log, good = tmp_path / "perf.jsonl", write(tmp_path / "s.py", GOOD)
    why = "error: addone's reference has no ref_kernel (its reference.py defines none), so there is no "
    baseline = why + "baseline to time: nothing ran; bench without --baseline times the file alone\n"
    incumbent = why + ("reference incumbent to time: nothing ran; pass --incumbent FILE, a file of your own "
                       "(`popkit promote addone` installs one)\n")
    for args, line in ((["bench", "addone", "--baseline"], baseline), (["bench", "addone", "--fresh-baseline"], baseline),
                       (["diff", "addone", "--incumbent", "reference"], incumbent)):
        result = CliRunner().invoke(main, args + ["--device", "cpu", "--log", str(log)])
        assert (result.exit_code, result.stderr) == (1, line), result.output
    with pytest.raises(runner.PopkitError, match=re.escape(baseline[len("error: "):-1])):
        runner.bench("addone", good, baseline=True, device="cpu", log_path=log)
    with pytest.raises(runner.PopkitError, match=re.escape(incumbent[len("error: "):-1])):
        runner.diff("addone", good, "reference", device="cpu", log_path=log)
    assert runs == [] and not log.exists()
    assert runner.bench("addone", good, device="cpu", log_path=log).passed       # the file alone is timed as before
    assert runs == [good]


@pytest.mark.parametrize("path, template, called", [
    (None, None, ["custom_kernel"]),
    ("submission.py", "def custom_kernel(data):\n    return data\n\n\ndef quantize(x):\n    return x\n",
     ["custom_kernel"]),                                                                       # mixed-mla's helpers
    ("../template.py", "def kernel(...) -> ...:\n    ...\n", ["custom_kernel"]),             # helion's, not Python
    ("../template.py", PAIR, ["forward", "backward"]),
    ("template.py", PAIR, ["forward", "backward"]),
])
def test_the_functions_eval_calls_come_from_the_folders_template(toy, path, template, called):
    if path is not None:
        write(toy / path, template)
    if path == "../template.py":         # a template outside the folder is found only where task.yml names it
        write(toy / "task.yml", (toy / "task.yml").read_text() + f"templates:\n  Python: {path!r}\n")
    assert task_folder.read_task_folder(toy).entry_points == called


def test_check_runs_the_problems_own_parts_when_submission_py_is_another_problems_of_its_board(toy, tmp_path,
                                                                                               monkeypatch):
    # Two problems may share a board (a folder added twice, or our qr_v2 beside linalg/qr_v2): submission.py built
    # from the one's parts was checked as the other, judged by its leaderboard line alone.
    from popcorn.cli import loop as cli_loop
    problem_add.add_problem("addone", toy)
    problem_add.add_problem("addtwo", toy)
    write(tmp_path / "parts" / "addone" / "route.py", GOOD)
    write(tmp_path / "parts" / "addtwo" / "route.py", "def custom_kernel(data):\n    return data\n")
    monkeypatch.setattr(build, "PARTS", tmp_path / "parts")
    monkeypatch.setattr(build, "CASES_DIR", problems.CASES_DIR)
    monkeypatch.setattr(cli_loop, "DEFAULT_SUBMISSION", tmp_path / "submission.py")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    build.build("addone", tmp_path / "submission.py")
    mine = CliRunner().invoke(main, ["check", "addone", "--device", "cpu", "--log", str(tmp_path / "l")])
    assert mine.exit_code == 0 and "not built for" not in mine.output, mine.output
    other = CliRunner().invoke(main, ["check", "addtwo", "--device", "cpu", "--log", str(tmp_path / "l")])
    assert "submission.py is not built for addtwo: built parts/addtwo to" in other.output
    assert other.exit_code == 1 and "FAIL" in other.output       # addtwo's own (wrong) route ran


def test_a_task_without_ranking_by_is_ranked_and_timed_by_its_last_benchmark(toy, tmp_path):
    # The pmpp folders name no ranking_by; the runner then ranks by the last benchmark and gives eval.py only
    # that case, in benchmark mode too. The record said geom, and bench and diff timed every case.
    task = toy / "task.yml"
    write(task, task.read_text().replace('ranking_by: "geom"\n', ""))
    prob = added(toy)
    assert prob.ranking == "last" and prob.ranked_benchmarks == [{"size": 1000, "seed": 22}]
    good = write(tmp_path / "s.py", GOOD)
    bench = runner.bench("addone", good, device="cpu", log_path=None)
    diff = runner.diff("addone", good, good, rounds=3, device="cpu", log_path=None)
    for outcome in (bench, diff):
        assert [c["spec"] for c in outcome.record["cases"]] == prob.ranked_benchmarks
        assert any("ranked by its last benchmark case only" in note for note in outcome.notes)
    chosen = runner.bench("addone", good, custom=["size: 100; seed: 21"], device="cpu", log_path=None)
    assert [c["spec"] for c in chosen.record["cases"]] == [{"size": 100, "seed": 21}]
    assert not any("ranked by" in note for note in chosen.notes)


def test_a_file_for_another_leaderboard_is_named_without_a_wrong_article(toy, tmp_path):
    # It said "is a addone_v1 submission" and "pass --incumbent a addone file".
    added(toy)
    mine = write(tmp_path / "mine.py", "#!POPCORN leaderboard addone_v1\n#!POPCORN gpu CPU\n" + GOOD)
    other = write(tmp_path / "other.py", "#!POPCORN leaderboard eigh\n#!POPCORN gpu CPU\n" + GOOD)
    with pytest.raises(runner.PopkitError) as info:
        runner.diff("addone", mine, other, rounds=3, device="cpu", log_path=None)
    assert str(info.value) == (f"the incumbent {other} is built for leaderboard eigh (its #!POPCORN leaderboard "
                               "line), not addone_v1: pass --incumbent a file built for addone (`popkit promote "
                               "addone` installs one, or --incumbent reference)")
    elsewhere = dataclasses.replace(problems.load_problem("addone"), name="other", leaderboard="other_v1")
    with pytest.raises(runner.PopkitError, match=r"is built for leaderboard addone_v1 .*, not other_v1"):
        runner.require_submission_for(elsewhere, mine)


def test_case_accepts_the_tasks_own_keys(toy, tmp_path):
    added(toy)
    outcome = runner.check("addone", write(tmp_path / "s.py", GOOD), ["size: 5; seed: 1; mode: wide"],
                           device="cpu", log_path=None)
    assert outcome.passed and outcome.record["cases"][0]["spec"] == {"size": 5, "seed": 1, "mode": "wide"}


@pytest.mark.parametrize("text,why", [
    ("size: 5", "missing seed"),                                 # was: a crash in eval.py, after a pre-run
    ("sise: 5; seed: 1", "unknown key sise, missing size"),      # was: a crash in eval.py, after a pre-run
])
def test_a_case_without_the_tasks_keys_is_refused_before_anything_runs(toy, tmp_path, monkeypatch, text, why):
    added(toy)
    monkeypatch.setattr(harness, "run_eval", lambda *args, **kwargs: pytest.fail("eval.py ran"))
    with pytest.raises(runner.PopkitError) as info:
        runner.check("addone", write(tmp_path / "s.py", GOOD), [text], device="cpu", log_path=tmp_path / "l")
    assert str(info.value) == (f"--case {text!r}: {why} (addone's official cases have the keys size, seed, "
                               "mode; e.g. 'size: 3; seed: 11')")
    assert not (tmp_path / "l").exists()


@pytest.mark.parametrize("text,why", [
    ("size: 5; seed: x", "seed is 'x', expected an integer (as addone's official cases give it, e.g. seed: 11)"),
    ("size: [5, 6]; seed: 1", "size is [5, 6], expected an integer (as addone's official cases give it, e.g. size: 3)"),
    ("size: 5; seed: 1; mode: 3", "mode is 3, expected a word (as addone's official cases give it, e.g. mode: wide)"),
])
def test_a_case_value_of_the_wrong_type_is_refused_before_anything_runs(toy, tmp_path, monkeypatch, text, why):
    # `seed: x` where every official seed is an integer: eval.py passed the string 'x' to the task's generate_input,
    # which crashed in every case after a pre-run, and the failures were logged.
    added(toy)
    monkeypatch.setattr(harness, "prerun", lambda *args: pytest.fail("the submission ran"))
    monkeypatch.setattr(harness, "run_eval", lambda *args, **kwargs: pytest.fail("eval.py ran"))
    good, log = write(tmp_path / "s.py", GOOD), tmp_path / "l.jsonl"
    with pytest.raises(runner.PopkitError) as info:
        runner.check("addone", good, [text], device="cpu", log_path=log)
    assert str(info.value) == f"--case {text!r}: {why}"
    cli = CliRunner().invoke(main, ["bench", "addone", "--submission", str(good), "--case", text, "--device", "cpu",
                                    "--log", str(log)])
    assert cli.exit_code == 1 and cli.output.strip().splitlines() == [f"error: --case {text!r}: {why}"]
    assert not log.exists()


@pytest.mark.parametrize("text,why", [
    ("size: 5; size: 6; seed: 1", "size is given twice"),          # was: size 6, silently
    ("size: ; seed: 1", "got 'size:'"),                           # was: eval.py's "bad case file", after a pre-run
    ("size: 5 6; seed: 1", "is not a number, a word or a list of integers"),
    # An empty --case was 'a case spec is a non-empty mapping, got {}': neither the option nor an example.
    ("", "bad case spec '': no 'key: value' pair, e.g. 'size: 3; seed: 11'"),
    (" ; ", "bad case spec ' ; ': no 'key: value' pair, e.g. 'size: 3; seed: 11'"),
])
def test_a_malformed_case_is_refused_before_anything_runs(toy, text, why):
    prob = added(toy)
    with pytest.raises(ProblemError, match=re.escape(why)):
        problems.parse_spec(text, prob)


def test_a_grouped_task_with_per_group_sizes_is_added_and_its_cases_round_trip(toy):
    # nvfp4_group_gemm gives per-group sizes as lists ({"m": [96, 128], ...}): `problem add` refused it.
    task = toy / "task.yml"
    write(task, task.read_text().replace('{"size": 100, "seed": 21}', '{"size": [96, 128], "g": 2, "seed": 21}'))
    prob = added(toy)
    assert prob.benchmarks[0] == {"size": [96, 128], "g": 2, "seed": 21}
    line = problems.format_spec(prob.benchmarks[0])
    assert line == "size: [96, 128]; g: 2; seed: 21"                    # what the grouped eval.py reads
    assert problems.parse_spec(line, prob) == prob.benchmarks[0]


def test_a_case_given_as_an_official_one_is_read_as_that_one(toy):
    # trimul's `nomask: True` (a YAML boolean in task.yml) came back from --case as the word 'True': the same line of
    # eval.py's cases file, but another spec in the record, so a logged baseline of that official case never served it.
    task = toy / "task.yml"
    write(task, task.read_text().replace('{"size": 100, "seed": 21}', '{"size": 100, "seed": 21, "nomask": true}'))
    prob = added(toy)
    for spec in prob.tests + prob.benchmarks:
        assert runner.checked_spec(prob, problems.format_spec(spec)) == spec
    assert runner.checked_spec(prob, "size: 7; seed: 1; nomask: False") == {"size": 7, "seed": 1, "nomask": False}


def test_an_empty_native_case_names_an_example():
    with pytest.raises(ProblemError) as info:
        problems.parse_spec("", "qr_v2")
    assert str(info.value) == ("bad case spec '': no 'key: value' pair, e.g. 'batch: 20; n: 32; cond: 1; seed: 53124; "
                               "case: dense'")


def test_a_native_case_with_a_key_given_twice_is_refused():
    with pytest.raises(ProblemError, match="batch is given twice"):
        problems.parse_spec("batch: 4; batch: 5; n: 64; cond: 1; seed: 7; case: mixed", "qr_v2")


def test_native_only_options_are_refused_for_a_harness_problem(toy, tmp_path):
    added(toy)
    sub = write(tmp_path / "s.py", GOOD)
    with pytest.raises(Exception, match="harness problem"):
        runner.check("addone", sub, device="cpu", log_path=None, harness="native")
    with pytest.raises(Exception, match="--robust needs a native checker"):
        runner.check("addone", sub, device="cpu", log_path=None, robust=True)


@pytest.mark.parametrize("verb", ["check", "bench", "diff"])
def test_a_harness_problem_of_a_gpu_board_is_refused_on_the_cpu_before_any_case(toy, tmp_path, monkeypatch, verb):
    # vectoradd on the CPU: eval.py crashed on every case (its inputs are made on CUDA) and the run was logged.
    index = toy.parent.parent / "toy.yaml"
    write(index, index.read_text().replace("- CPU", "- B200"))
    assert added(toy).gpus == ["B200"]

    def no_eval(*args, **kwargs):
        raise AssertionError("eval.py ran")
    monkeypatch.setattr(harness, "run_eval", no_eval)
    sub, log = write(tmp_path / "s.py", GOOD), tmp_path / "perf.jsonl"
    incumbent = ["--incumbent", str(sub)] if verb == "diff" else []
    result = CliRunner().invoke(main, [verb, "addone", "--submission", str(sub), "--device", "cpu",
                                       "--log", str(log), *incumbent])
    line = ("addone is a harness problem, and harness problems run on the GPU only (the folder's eval.py makes its "
            "inputs on the leaderboard's GPU, B200): nothing ran on the CPU; run it on a GPU host")
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", f"error: {line}\n")
    with pytest.raises(runner.PopkitError, match=re.escape(line)):
        runner.check("addone", sub, device="cpu", log_path=log)
    assert not log.exists()


# ---- the verbs ------------------------------------------------------------------------------------

def test_the_result_header_shows_only_what_the_run_reported(toy, tmp_path):
    # A submission that never imports torch made eval.py's run report no torch: the header said "torch None".
    added(toy)
    result = CliRunner().invoke(main, ["check", "addone", "--submission", str(write(tmp_path / "s.py", GOOD)),
                                       "--device", "cpu", "--log", str(tmp_path / "perf.jsonl")])
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if line.startswith("check addone"))
    assert re.fullmatch(r"check addone on cpu \(import\+compile \d+\.\d s\)", header), header
    assert "None" not in result.output


@pytest.mark.parametrize("record, line", [
    ({"gpu": "NVIDIA H200", "torch": "2.11.0", "compile_s": 2.04}, "bench x on NVIDIA H200 (torch 2.11.0, import+compile 2.0 s)"),
    ({"gpu": "cpu", "torch": None, "compile_s": 0.0}, "bench x on cpu (import+compile 0.0 s)"),
    ({"gpu": None, "torch": None, "compile_s": None}, "bench x"),
])
def test_header_line_omits_what_is_unknown(record, line):
    assert runner.header_line("bench x", record) == line


def test_problem_verbs_add_list_show(toy):
    cli = CliRunner()
    result = cli.invoke(main, ["problem", "add", "addone", "--from", str(toy)])
    assert result.exit_code == 0, result.output
    assert "added addone: leaderboard addone_v1, 3 tests, 2 benchmarks" in result.output
    again = cli.invoke(main, ["problem", "add", "addone", "--from", str(toy)])
    assert again.exit_code == 1 and "pass --force" in again.output
    listing = cli.invoke(main, ["problem", "list"])
    assert listing.exit_code == 0 and "addone" in listing.output and "harness" in listing.output
    shown = cli.invoke(main, ["problem", "show", "addone"])
    assert shown.exit_code == 0 and "size: 64; seed: 13; mode: wide" in shown.output
    assert "eval.py calls: custom_kernel" in shown.output and "multi-GPU" not in shown.output
    missing = cli.invoke(main, ["problem", "add", "other", "--from", str(toy.parent / "nope")])
    assert missing.exit_code == 1 and "no such folder" in missing.output


def test_problem_list_names_an_unreadable_record_and_lists_the_rest(toy):
    # One broken record made `problem list` a single error line, hiding every other problem.
    problem_add.add_problem("addone", toy)
    write(problems.record_path("broken"), "tests: [\n")
    listing = CliRunner().invoke(main, ["problem", "list"])
    assert listing.exit_code == 0
    assert "addone_v1" in listing.stdout and "broken   unreadable" in listing.stdout
    assert listing.stderr.startswith("warning: ") and "broken.yml: not a readable problem record (line 2, column 1: " \
        "expected the node content, but found '<stream end>')" in listing.stderr


@pytest.mark.parametrize("change, why", [
    ("timeouts_s: [240, 480]\n", "timeouts_s must be a mapping, not [240, 480]"),
    ("timeouts_s: {test: soon}\n", "timeouts_s: test must be a number of seconds, not 'soon'"),
    # .inf ended check in an OverflowError traceback, and 0 timed every case out at once:
    ("timeouts_s: {test: .inf}\n", "timeouts_s: test must be a positive number of seconds up to 86400 (a day), "
                                   "not inf"),
    ("timeouts_s: {test: 0}\n", "timeouts_s: test must be a positive number of seconds up to 86400 (a day), not 0"),
    ("harness: eval.py\n", "harness must be a mapping, not 'eval.py'"),
    ("harness: {folder: 5}\n", "harness: folder must be a path, not 5"),
    ("gpus: {B200: 1}\n", "gpus must be a list of GPU names, not {'B200': 1}"),
    ("multi_gpu: 'yes'\n", "multi_gpu must be true or false, not 'yes'"),
    ("entry_points: [custom-kernel]\n", "entry_points must be a list of function names, not ['custom-kernel']"),
    ("tests: [{size: 'a b'}]\n", "case spec {'size': 'a b'}: size = 'a b' is not a number, a word or a list"),
])
def test_problem_show_and_list_name_an_odd_record_in_one_line(toy, change, why):
    # timeouts_s or harness of another kind ended `problem show` in an AttributeError or TypeError traceback,
    # and a bad spec was reported without the record it came from.
    problem_add.add_problem("addone", toy)
    path = problems.record_path("addone")
    data = yaml.safe_load(path.read_text())
    data.update(yaml.safe_load(change))
    path.write_text(yaml.safe_dump(data))
    shown = CliRunner().invoke(main, ["problem", "show", "addone"])
    assert shown.exit_code == 1 and isinstance(shown.exception, SystemExit), shown.exception
    assert shown.stderr.startswith(f"error: {path}: {why}")
    listing = CliRunner().invoke(main, ["problem", "list"])
    assert listing.exit_code == 0 and "addone   unreadable" in listing.stdout
    assert listing.stderr.startswith(f"warning: {path}: {why}")


def test_a_timeout_of_a_fraction_of_a_second_is_not_recorded_as_zero(toy):
    # int(0.5) recorded 'test: 0': every case of the next check timed out at once.
    write(toy / "task.yml", (toy / "task.yml").read_text().replace("test_timeout: 20", "test_timeout: 0.5"))
    problem_add.add_problem("addone", toy)
    assert problems.load_problem("addone").timeouts_s == {"test": 1, "benchmark": 20, "ranked": 30}


def test_a_task_whose_gpus_is_one_name_records_that_gpu(toy, tmp_path):
    # Outside any collection index the GPUs come from task.yml: 'gpus: H100' was recorded as H, 1, 0, 0, and the
    # built file's header said '#!POPCORN gpu H'.
    (toy.parent.parent / "toy.yaml").unlink()
    write(toy / "task.yml", (toy / "task.yml").read_text() + "gpus: H100\n")
    problem_add.add_problem("addone", toy, leaderboard="addone_v1")
    assert yaml.safe_load(problems.record_path("addone").read_text())["gpus"] == ["H100"]
    assert problems.load_problem("addone").gpu == "H100"


def test_a_gpus_entry_of_one_name_is_that_gpu(toy):
    problem_add.add_problem("addone", toy)
    path = problems.record_path("addone")
    data = yaml.safe_load(path.read_text())
    data.update(gpus="H100", ranking=None)
    path.write_text(yaml.safe_dump(data))
    prob = problems.load_problem("addone")
    assert (prob.gpus, prob.ranking) == (["H100"], "")     # were ['H', '1', '0', '0'] and 'None'


def test_add_refuses_a_name_whose_parts_folder_is_not_a_problems(toy, tmp_path):
    # 'problem add common' scaffolded manifest.yml, model.py and route.py into parts/common/, among the shared
    # loader and device helpers, and recorded a problem 'common'.
    shared = tmp_path / "parts" / "common"
    shared.mkdir(parents=True)
    write(shared / "cuda_loader.py", "")
    other = tmp_path / "parts" / "notes"
    other.mkdir()
    write(other / "ideas.txt", "")
    for name, why in (("common", "holds the parts every problem shares"), ("notes", "holds ideas.txt and no manifest")):
        result = CliRunner().invoke(main, ["problem", "add", name, "--from", str(toy)])
        assert result.exit_code == 1
        assert result.stderr == (f"error: problem name {name!r}: parts/{name}/ {why}, not a problem's parts: "
                                 "choose another name; nothing was added\n")
    assert sorted(p.name for p in shared.iterdir()) == ["cuda_loader.py"]
    assert sorted(p.name for p in other.iterdir()) == ["ideas.txt"]
    assert not (tmp_path / "cases").exists()


@pytest.mark.parametrize("name", ["../cases/addone", "Addone", "a" * 300])
def test_a_name_that_is_not_a_problem_name_is_refused(toy, name):
    # '../cases/addone' read the record through the path (and showed it as a harness problem named so); a
    # 300-letter name ended in "File name too long".
    problem_add.add_problem("addone", toy)
    shown = CliRunner().invoke(main, ["problem", "show", name])
    assert shown.exit_code == 1
    assert shown.stderr == (f"error: {name!r} is not a problem name (up to 64 lower-case letters, digits and _, as "
                            "`popkit problem add` takes); known: addone\n")


def test_the_record_is_plain_task_data(toy):
    problem_add.add_problem("addone", toy)
    data = yaml.safe_load(problems.record_path("addone").read_text())
    assert set(data) == set(problem_add.TASK_KEYS)


def test_diff_against_the_folders_reference(toy, tmp_path):
    added(toy)
    outcome = runner.diff("addone", write(tmp_path / "s.py", SLOWER), "reference", rounds=3, device="cpu",
                          log_path=None)
    assert not outcome.passed and outcome.record["harness"] == "official"
    assert all(c["verdict"] == "slower" for c in outcome.record["cases"])
    assert outcome.record["changed_parts"] is None      # the reference has no parts: which changed is unknown


def test_diff_cli_against_the_reference_says_the_changed_parts_are_unknown(toy, tmp_path):
    # It listed every part of the candidate as changed (the reference has no part hashes to compare).
    added(toy)
    built = tmp_path / "built.py"
    built.write_text("#!POPCORN leaderboard addone_v1\n# part addone/route.py sha256 " + "a" * 64 + "\n" + GOOD)
    result = CliRunner().invoke(main, ["diff", "addone", "--submission", str(built), "--incumbent", "reference",
                                       "--device", "cpu", "--log", str(tmp_path / "l.jsonl")])
    assert result.exit_code in (0, 1), result.output        # 1: a verdict of 'slower' by timing noise
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stdout.splitlines()[-1] == ("changed parts: unknown (the candidate or the incumbent has no popkit "
                                              "part hashes: the folder's reference, or a file popkit did not build)")


def test_an_incumbent_spelled_like_reference_is_the_word_or_the_file_never_a_silent_guess(toy, tmp_path, monkeypatch):
    # './reference' ran against the folder's ref_kernel (click made it 'reference'), file or not, and the word
    # 'reference' meant the ref_kernel even with a file of that name here.
    added(toy)
    monkeypatch.chdir(tmp_path)
    sub, log = write(tmp_path / "s.py", GOOD), tmp_path / "perf.jsonl"

    def diff(incumbent):
        return CliRunner().invoke(main, ["diff", "addone", "--submission", str(sub), "--incumbent", incumbent,
                                         "--device", "cpu", "--log", str(log)])
    missing = diff("./reference")
    assert (missing.exit_code, missing.stderr) == (1, "error: --incumbent ./reference: no such file (the word "
                                                      "reference alone is the competition folder's ref_kernel)\n")
    the_file = write(tmp_path / "reference", GOOD)
    both = diff("reference")
    assert (both.exit_code, both.stderr) == (1, "error: --incumbent reference: the word is the competition folder's "
                                                "ref_kernel, and ./reference is also a file here: pass ./reference "
                                                "for the file, or run from another folder for the ref_kernel\n")
    assert not log.exists()
    diff("./reference")                                     # passes or not by timing noise
    assert json.loads(log.read_text())["incumbent_sha256"] == logs.file_sha256(the_file)


# ---- bench --baseline: logged baselines reused per case (checks/baselines.py) ---------------------

@pytest.fixture
def eval_runs(monkeypatch, tmp_path):
    """Every eval.py run as (submission file name, specs); the project's log moved to tmp_path."""
    from popcorn.evidence import logs
    monkeypatch.setattr(logs, "DEFAULT_LOG", tmp_path / "project.jsonl")
    calls, real = [], harness.run_eval

    def spy(prob, submission, mode, specs, *args, **kwargs):
        calls.append((Path(submission).name, [s["size"] for s in specs]))
        return real(prob, submission, mode, specs, *args, **kwargs)
    monkeypatch.setattr(harness, "run_eval", spy)
    return calls


def test_official_bench_reuses_every_logged_baseline_and_skips_the_reference_run(toy, tmp_path, eval_runs):
    added(toy)
    log, sub = tmp_path / "perf.jsonl", write(tmp_path / "s.py", GOOD)
    first = runner.bench("addone", sub, baseline=True, device="cpu", log_path=log)
    assert eval_runs == [("s.py", [100, 1000]), ("baseline_submission.py", [100, 1000])]
    assert first.record["baselines_reused"] == 0 and all(c["baseline_runs"] == 5 for c in first.record["cases"])
    eval_runs.clear()
    second = runner.bench("addone", sub, baseline=True, device="cpu", log_path=log)
    assert eval_runs == [("s.py", [100, 1000])]
    assert second.record["baselines_reused"] == 2
    assert [c["baseline_us"] for c in second.record["cases"]] == [c["baseline_us"] for c in first.record["cases"]]
    assert all(c["baseline_reused"] == first.record["time"] for c in second.record["cases"])
    records, bad = logs_strict(log)
    assert bad == [] and len(records) == 2


def test_official_bench_times_only_the_cases_without_a_logged_baseline(toy, tmp_path, eval_runs):
    added(toy)
    log, sub = tmp_path / "perf.jsonl", write(tmp_path / "s.py", GOOD)
    runner.bench("addone", sub, baseline=True, custom=["size: 100; seed: 21"], device="cpu", log_path=log)
    eval_runs.clear()
    outcome = runner.bench("addone", sub, baseline=True, device="cpu", log_path=log)
    assert eval_runs == [("s.py", [100, 1000]), ("baseline_submission.py", [1000])]
    reused, fresh = outcome.record["cases"]
    assert reused["baseline_reused"] and fresh["baseline_reused"] is None and fresh["baseline_us"] > 0
    assert outcome.record["baselines_reused"] == 1 and outcome.record["baseline_geomean_us"] > 0


def test_fresh_baseline_through_the_verb_times_every_case_again(toy, tmp_path, eval_runs):
    added(toy)
    log, sub = tmp_path / "perf.jsonl", write(tmp_path / "s.py", GOOD)
    runner.bench("addone", sub, baseline=True, device="cpu", log_path=log)
    eval_runs.clear()
    result = CliRunner().invoke(main, ["bench", "addone", "--submission", str(sub), "--device", "cpu",
                                       "--fresh-baseline", "--log", str(log)])
    assert result.exit_code == 0, result.output
    assert [name for name, _ in eval_runs] == ["s.py", "baseline_submission.py"]
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["baseline"] == "reference.ref_kernel" and record["baselines_reused"] == 0
    assert "*" not in result.output


def logs_strict(path: Path):
    from popcorn.evidence import logs
    return logs.read_strict(path)
