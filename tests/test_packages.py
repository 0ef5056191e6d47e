"""checks/packages.py: which third-party modules a folder's own files import, the built file's packages line,
and the one-line refusal of a file whose packages this Python lacks."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from checks import packages, task_folder
from popcorn.errors import PopkitError

TASK = """files:
  - {"name": "submission.py", "source": "@SUBMISSION@"}
  - {"name": "reference.py", "source": "reference.py"}
  - {"name": "utils.py", "source": "utils.py"}
  - {"name": "task.py", "source": "task.py"}
  - {"name": "eval.py", "source": "eval.py"}
templates:
  Python: "../template.py"
  CuteDSL: "template_cute.py"
  CUDA: "template.cu"
tests:
  - {"size": 1}
benchmarks:
  - {"size": 2}
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_folders_packages_come_from_its_templates_and_reference_never_from_the_run_folder(tmp_path):
    folder = tmp_path / "problems" / "board" / "kernel_py"
    folder.mkdir(parents=True)
    write(folder / "task.yml", TASK)
    for name in ("utils.py", "task.py", "eval.py"):
        write(folder / name, "import numpy\n")                  # the runner's own files: not the submission's
    write(folder / "reference.py", "from utils import verbose_allclose\nfrom task import input_t\n"
                                   "import torch.nn.functional as F\n\n\ndef fast():\n    import aiter.ops\n")
    write(folder / "submission.py", "import os\nimport triton.language as tl\nfrom . import sibling\n")
    write(folder / "template_cute.py", "import cutlass.cute as cute\nimport cuda.bindings.driver as cuda\n")
    write(folder / "template.cu", "#include <cuda.h>\n")
    write(folder.parent / "template.py", "def kernel(...) -> ...:\n    import helion\n")   # not Python: passed over
    found = task_folder.read_task_folder(folder)
    assert [p.relative_to(found.path.parent).as_posix() for p in found.own_sources] == [
        "template.py", "kernel_py/template_cute.py", "kernel_py/submission.py", "kernel_py/reference.py"]
    run_folder = {Path(f["name"]).stem for f in found.files}
    assert packages.folder_packages(found.own_sources, run_folder) == ["aiter", "cuda", "cutlass", "triton"]


def test_the_packages_line_is_read_back_from_the_leading_comments_only():
    line = packages.header_line(["helion", "triton"])
    assert line == "# packages: helion, triton" and packages.header_line([]) == ""
    assert packages.declared(f"#!POPCORN leaderboard x\n{line}\n\"\"\"doc\"\"\"\n") == ["helion", "triton"]
    assert packages.declared(f"\"\"\"doc\"\"\"\n{line}\n") == []
    assert packages.declared("#!POPCORN leaderboard x\nimport torch\n") == []


def test_a_file_whose_packages_are_not_installed_is_refused_in_one_line(tmp_path):
    absent = write(tmp_path / "s.py", "#!POPCORN leaderboard x\n# packages: yaml, popkit_absent_a, "
                                      "popkit_absent_b\nimport yaml\n")
    with pytest.raises(PopkitError) as info:
        packages.require_installed(absent)
    assert str(info.value) == (f"{absent} imports popkit_absent_a, popkit_absent_b (its manifest's packages), not "
                               f"installed for {sys.executable}: install them here, or run on a host that has them "
                               "(the leaderboard's runner does); nothing ran")
    one = write(tmp_path / "one.py", "# packages: popkit_absent_a\n")
    with pytest.raises(PopkitError, match=re.escape("install it here, or run on a host that has it")):
        packages.require_installed(one)
    packages.require_installed(write(tmp_path / "ok.py", "# packages: yaml, jinja2\n"))
    packages.require_installed(write(tmp_path / "none.py", "import torch\n"))
