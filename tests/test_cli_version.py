"""`popkit --version`: the version and the commit the evidence records would name."""
from __future__ import annotations

import subprocess
from importlib import metadata

import pytest
from click.testing import CliRunner

from popcorn.cli import main
from popcorn.evidence import logs


def test_version_names_the_package_version_and_the_records_commit(monkeypatch):
    monkeypatch.setenv("POPKIT_COMMIT", "0123abc")
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"popkit {logs.toolkit_version()} (commit 0123abc)\n"


def test_version_runs_before_any_verb_and_says_when_no_commit_is_known(monkeypatch, tmp_path):
    # A copy nested in another checkout (a snapshot under vendor/) has git, but no commit of its own: it said
    # "no git", which was false there.
    outer = tmp_path / "outer"
    (outer / "copy").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=outer, check=True, capture_output=True)
    monkeypatch.delenv("POPKIT_COMMIT", raising=False)
    real = logs.git_commit
    monkeypatch.setattr(logs, "git_commit", lambda: real(outer / "copy"))
    result = CliRunner().invoke(main, ["--version", "check", "no-such-problem"])
    assert result.exit_code == 0
    assert result.output.endswith("(commit unknown: this copy is not the top of a git work tree and POPKIT_COMMIT "
                                  "is unset)\n")


def test_an_uninstalled_copy_reads_its_version_from_pyproject(monkeypatch):
    def not_installed(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", not_installed)
    tomllib = pytest.importorskip("tomllib")                 # Python 3.11 on; 3.10 reads 'unknown'
    expected = tomllib.loads((logs.ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert logs.toolkit_version() == expected


def test_the_tree_s_own_version_wins_over_a_package_installed_from_another_checkout(monkeypatch, tmp_path):
    # A worktree run with the main checkout's editable venv named main's version beside the worktree's commit.
    pytest.importorskip("tomllib")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "popkit"\nversion = "9.9.9"\n')
    monkeypatch.setattr(logs, "ROOT", tmp_path)
    monkeypatch.setattr(metadata, "version", lambda name: "0.1.0")
    assert logs.toolkit_version() == "9.9.9"


def test_a_wheel_without_pyproject_beside_it_reads_the_installed_version(monkeypatch, tmp_path):
    monkeypatch.setattr(logs, "ROOT", tmp_path)
    monkeypatch.setattr(metadata, "version", lambda name: "0.1.0")
    assert logs.toolkit_version() == "0.1.0"
