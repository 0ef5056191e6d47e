"""Every CUDA part, and each problem's assembled translation unit, compiles with nvcc for sm_90a and sm_100a.

Compile only (no GPU needed). Skipped where nvcc is absent (CPU CI machines).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import build

ARCHS = ("90a", "100a")


def find_nvcc() -> str | None:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


NVCC = find_nvcc()
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found (PATH, /usr/local/cuda/bin): "
                                                     "CUDA compile tests skipped")

CU_FILES = sorted(p.relative_to(build.PARTS).as_posix() for p in build.PARTS.rglob("*.cu"))
PROBLEMS = sorted(p.parent.name for p in build.PARTS.glob("*/manifest.yml"))


def nvcc(source: Path, arch: str, out: Path, include: Path | None = None) -> None:
    cmd = [NVCC, "-c", "-std=c++17", "-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"]
    if include is not None:
        cmd.append(f"-I{include}")
    cmd += [str(source), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    assert out.is_file() and out.stat().st_size > 0


def test_there_are_cuda_parts():
    assert CU_FILES, "no .cu files under parts/"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("rel", CU_FILES)
def test_each_cuda_part_compiles(rel, arch, tmp_path):
    nvcc(build.PARTS / rel, arch, tmp_path / "part.o", include=build.PARTS / "common")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("problem", PROBLEMS)
def test_assembled_translation_unit_compiles(problem, arch, tmp_path):
    """The single TU the built file embeds, with no include path: it must be self-contained."""
    manifest = build.load_manifest(problem)
    source = build.assemble_cuda([build.read_part(rel) for rel in manifest["cuda"]]).source()
    path = tmp_path / f"{problem}.cu"
    path.write_text(source)
    nvcc(path, arch, tmp_path / f"{problem}.o")
