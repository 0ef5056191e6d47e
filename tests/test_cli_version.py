"""`popkit --version`: the version and the commit the evidence records would name."""
from __future__ import annotations

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


def test_version_runs_before_any_verb_and_says_when_no_commit_is_known(monkeypatch):
    monkeypatch.setattr(logs, "git_commit", lambda: None)
    result = CliRunner().invoke(main, ["--version", "check", "no-such-problem"])
    assert result.exit_code == 0 and "no git and no POPKIT_COMMIT" in result.output


def test_an_uninstalled_copy_reads_its_version_from_pyproject(monkeypatch):
    def not_installed(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", not_installed)
    tomllib = pytest.importorskip("tomllib")                 # Python 3.11 on; 3.10 reads 'unknown'
    expected = tomllib.loads((logs.ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert logs.toolkit_version() == expected
