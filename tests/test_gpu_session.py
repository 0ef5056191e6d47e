"""scripts/gpu_session.sh: the refusals that come before anything is built or run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_session.sh"


def session(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_run_from_another_folder_says_where_to_run_it(tmp_path):
    # It made DIR, warned of a missing git and nvidia-smi, then failed in 'No module named popcorn' (or ran
    # whatever popcorn the interpreter found elsewhere).
    done = session(tmp_path, "-o", str(tmp_path / "out"), "check qr_v2")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: run scripts/gpu_session.sh from the repository root: cd {ROOT}"]
    assert not (tmp_path / "out").exists()
