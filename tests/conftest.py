"""Shared fixtures: submissions built once per session into a temporary folder, a module importer, the toy
harness problem's folder, and for the leaderboard client's tests the local server's address and a record of
the client's pauses.

Nothing here writes inside the repository: built files, logs and incumbents all live under pytest's
tmp folders.

torch runs one CPU thread in the tests and in every process they start (OMP_NUM_THREADS, set before torch is
imported; a value already set is kept). Their ops are small; while anything else used the second of two cores,
the second thread's waits made them 5-10 times slower (test_native_robustness.py: 82 s -> 15 s).
"""
from __future__ import annotations

import importlib.util
import itertools
import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ("qr_v2", "eigh")
TOY = ROOT / "tests" / "toy_reference"

_counter = itertools.count()


def import_file(path: Path | str, prefix: str = "popkit_test_submission"):
    """Import a file as a fresh module (as the grader does with submission.py)."""
    name = f"{prefix}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


@pytest.fixture(scope="session")
def import_module():
    """The importer above, as a fixture (test modules do not import conftest)."""
    return import_file


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Path]:
    """{problem: path} of each problem's submission, built once from the real parts."""
    import build

    folder = tmp_path_factory.mktemp("built")
    return {problem: build.build(problem, folder / f"{problem}.py").output for problem in PROBLEMS}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A copy of the toy reference tree (tests/toy_reference: our own tiny problem in the reference-kernels layout,
    a collection index, task.yml with `../eval.py`, a pure-Python eval.py that speaks the POPCORN_FD protocol),
    and the project's record, parts and config folders in tmp_path; returns the problem folder."""
    from checks import problem_add, problems, task_folder

    root = tmp_path / "reference-kernels"
    shutil.copytree(TOY, root)
    monkeypatch.setattr(problems, "CASES_DIR", tmp_path / "cases")
    monkeypatch.setattr(problem_add, "PARTS_DIR", tmp_path / "parts")
    monkeypatch.setattr(task_folder, "LOCAL_CONFIG", tmp_path / ".popkit" / "harness.yml")
    monkeypatch.setattr(task_folder, "VENDOR_ROOT", tmp_path / "no-vendor")
    for key in ("POPKIT_REFERENCE_KERNELS", task_folder.env_key("addone")):
        monkeypatch.delenv(key, raising=False)
    return root / "problems" / "toy" / "addone_py"


@pytest.fixture(scope="session")
def httpserver_listen_address():
    """pytest-httpserver's address: 127.0.0.1 on a free port."""
    return ("127.0.0.1", 0)


@pytest.fixture
def sleeps(monkeypatch):
    """Record the leaderboard client's pauses (backoff, polling) instead of sleeping."""
    from popcorn.client import api
    pauses = []
    monkeypatch.setattr(api, "sleep", pauses.append)
    return pauses
