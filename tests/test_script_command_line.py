"""scripts/command_line.py: how every script ends (one line for an error, 130 for Ctrl-C) and how it imports a
built file that fails."""
import subprocess
import sys
from pathlib import Path

import pytest

from checks.problems import load_problem
from popcorn.errors import PopkitError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cli(import_module):
    return import_module(ROOT / "scripts" / "command_line.py", "script_command_line")


def _end(cli, main):
    with pytest.raises(SystemExit) as stop:
        cli.run_main(main, "some_script.py")
    return stop.value.code


def test_an_error_is_one_line_and_exit_2(cli, capsys):
    def main():
        raise PopkitError("--reps 1: at least 3")
    assert _end(cli, main) == 2
    assert capsys.readouterr().err == "error: --reps 1: at least 3\n"


def test_ctrl_c_is_one_line_and_exit_130(cli, capsys):
    def main():
        print("case 1 done")
        raise KeyboardInterrupt
    assert _end(cli, main) == 130
    out = capsys.readouterr()
    assert out.out == "case 1 done\n" and out.err.startswith("interrupted: some_script.py stopped (Ctrl-C)")


@pytest.mark.parametrize("returned, code", [(None, 0), (0, 0), (1, 1), (2, 2)])
def test_main_s_own_code_is_the_exit_code(cli, returned, code):
    assert _end(cli, lambda: returned) == code


@pytest.mark.parametrize("body, says", [
    ("def custom_kernel(data)\n    return data\n", "SyntaxError"),
    ("raise RuntimeError('nvcc failed\\nu3.cu(12): error: expected a ;')\n",
     r"RuntimeError: nvcc failed \.\.\. u3\.cu\(12\): error: expected a ;"),
    ("import sys\nsys.exit(3)\n", "SystemExit: 3"),        # it ended the script silently with that code
])
def test_a_built_file_that_fails_at_import_is_named_in_one_error(cli, tmp_path, body, says):
    bad = tmp_path / "bad.py"
    bad.write_text(body)
    with pytest.raises(PopkitError, match=f"bad.py: it fails at import: {says}"):
        cli.import_built(str(bad), "bad_built")


def test_a_script_given_a_failing_built_file_ends_in_one_line_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def custom_kernel(data):\n    return data\n\n\nraise RuntimeError('boom')\n")
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "same_outputs.py"), str(bad), str(bad), "qr_v2",
                             "--case", "batch: 1; n: 8; cond: 1; seed: 2", "--device", "cpu"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "bad.py: it fails at import: RuntimeError: boom" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("body, says", [
    ("x = 1\n", r"not a submission \(defines no custom_kernel at its top level"),
    ("#!POPCORN leaderboard other\ndef custom_kernel(data):\n    return data\n", "built for leaderboard other"),
])
def test_a_built_file_for_no_problem_or_another_is_refused_without_its_import(cli, tmp_path, body, says):
    # Imported, it ended in an AttributeError traceback (custom_kernel) or, on a GPU host, failed every case.
    built = tmp_path / "built.py"
    built.write_text(body + "raise SystemExit('imported')\n")
    with pytest.raises(PopkitError, match=says):
        cli.built_file(str(built), load_problem("qr_v2"))


def test_a_built_file_it_cannot_read_is_one_error(cli, tmp_path, monkeypatch):
    built = tmp_path / "built.py"
    built.write_text("def custom_kernel(data):\n    return data\n")

    prob, read_text = load_problem("qr_v2"), Path.read_text

    def refuse(path, *args, **kwargs):       # chmod 000 is no refusal for root, who runs the GPU hosts
        if path == built:
            raise PermissionError(13, "Permission denied")
        return read_text(path, *args, **kwargs)
    monkeypatch.setattr(Path, "read_text", refuse)
    with pytest.raises(PopkitError, match=r"built.py: cannot read it \(Permission denied\)"):
        cli.built_file(str(built), prob)


def test_a_json_output_it_could_not_write_is_refused_up_front(cli, tmp_path):
    (tmp_path / "file").write_text("")
    assert cli.json_output(None) is None and cli.json_output(str(tmp_path / "new" / "out.json"))
    assert not (tmp_path / "new").exists()             # made by the first write, not by the question
    with pytest.raises(PopkitError, match="--json .*: a folder; name the file to write"):
        cli.json_output(str(tmp_path))
    with pytest.raises(PopkitError, match=r"--json .*file/out.json: cannot write it there \(Not a directory\)"):
        cli.json_output(str(tmp_path / "file" / "out.json"))


def test_json_rows_become_the_tables_tuples(cli):
    assert cli.as_global([[1024, 8192, 256], [1 << 30, 1 << 62, 4096]]) == ((1024, 8192, 256),
                                                                          (1 << 30, 1 << 62, 4096))
    assert cli.as_global(True) is True


@pytest.mark.parametrize("text, says", [("[1, 2]", "need an object of globals"), ("{UPDATE: 1}", "not JSON")])
def test_route_globals_that_are_not_an_object_name_the_option(cli, text, says):
    with pytest.raises(PopkitError, match=f"--set-a .*{says}"):
        cli.route_globals(text, "--set-a")


def test_set_globals_sets_tables_as_tuples_and_refuses_a_name_the_module_lacks(cli):
    module = type(sys)("built")
    module.TABLE, module.FLAG = ((1, 2),), False
    cli.set_globals(module, cli.route_globals('{"TABLE": [[3, 4]], "FLAG": true}', "--set-b"), "--set-b")
    assert module.TABLE == ((3, 4),) and module.FLAG is True
    with pytest.raises(PopkitError, match="--set-b: the built file defines no TABEL"):
        cli.set_globals(module, {"TABEL": 1}, "--set-b")
    assert module.TABLE == ((3, 4),)                 # nothing set when one name is wrong
