"""Every CUDA part compiles on its own with plain nvcc (to PTX, for sm_90a and sm_100a), each problem's assembled
translation unit compiles fully (optimiser and ptxas) for both;
each problem's per-part units (what the loader compiles in parallel) compile and link into one library that
exports every entry point.

Compile only (no GPU needed). Skipped where nvcc is absent (CPU CI machines).
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
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
pytestmark = [pytest.mark.skipif(NVCC is None, reason="nvcc not found (PATH, /usr/local/cuda/bin): "
                                                      "CUDA compile tests skipped"),
              # Under pytest-xdist every test here runs on one worker: the `compiles` fixture starts all of
              # the module's compiles on that worker's first test (and on no other worker).
              pytest.mark.xdist_group("nvcc")]

CU_FILES = sorted(p.relative_to(build.PARTS).as_posix() for p in build.PARTS.rglob("*.cu"))
PROBLEMS = sorted(p.parent.name for p in build.PARTS.glob("*/manifest.yml"))
CUDA_PROBLEMS = [p for p in PROBLEMS if build.load_manifest(p)["cuda"]]
EXPORT = re.compile(r"(?m)^\s*POPKIT_EXPORT\s[^;{(]*?\b(\w+)\s*\(")     # the entry point's name
# nvcc processes at once: every CPU, shared with the other pytest-xdist workers (2 CPUs, 2 workers: one nvcc
# beside the other worker's tests, so no test of theirs, timing ones included, runs on an oversubscribed CPU).
CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
JOBS = max(1, CPUS // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


# A full compile (front end, optimiser, ptxas to SASS), and a cheap one (front end to unoptimised PTX, ~2.5x
# faster) for checks that a source compiles whose full compile another test already runs.
FULL = ("-O3", "-gencode=arch=compute_{arch},code=sm_{arch}")
CHEAP = ("-O0", "-Xcicc", "-O0", "-gencode=arch=compute_{arch},code=compute_{arch}")


def spawn(cmd: list[str], attempts: int = 3) -> subprocess.CompletedProcess:
    """cmd run to its end. Starting it from the compile pool's threads once failed with EFAULT on the CI machine
    ("[Errno 14] Bad address: nvcc", 2026-12-02): that is the start, not the compile, so the start is retried."""
    for attempt in range(attempts):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except OSError as exc:
            if exc.errno != errno.EFAULT or attempt == attempts - 1:
                raise


def nvcc(source: Path, arch: str, out: Path, include: Path | None = None, flags: tuple[str, ...] = FULL) -> None:
    cmd = [NVCC, "-c", "-std=c++17", *(flag.format(arch=arch) for flag in flags)]
    if include is not None:
        cmd.append(f"-I{include}")
    cmd += [str(source), "-o", str(out)]
    proc = spawn(cmd)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    assert out.is_file() and out.stat().st_size > 0


def compile_part(rel: str, arch: str, folder: Path) -> None:
    """A part on its own with plain nvcc (its includes resolved from parts/common): cheap flags, since the
    assembled unit of every problem that lists it gets the full compile (test_every_cuda_part_is_assembled)."""
    nvcc(build.PARTS / rel, arch, folder / "part.o", include=build.PARTS / "common", flags=CHEAP)


def compile_assembled(problem: str, arch: str, folder: Path) -> None:
    manifest = build.load_manifest(problem)
    source = build.assemble_cuda([build.read_part(rel) for rel in manifest["cuda"]]).source()
    path = folder / f"{problem}.cu"
    path.write_text(source)
    nvcc(path, arch, folder / f"{problem}.o")


COMPILES = {"test_each_cuda_part_compiles": (compile_part, "rel"),
            "test_assembled_translation_unit_compiles": (compile_assembled, "problem")}


@pytest.fixture(scope="module")
def compiles(request, tmp_path_factory):
    """The full compiles of this session's selected tests below, all started at once, JOBS nvcc processes at a
    time: {(part or problem, arch): future}; a test waits for its own, which raises as it would."""
    pool = ThreadPoolExecutor(max_workers=JOBS)
    futures = {}
    for item in request.session.items:
        if item.module is request.module and item.originalname in COMPILES:
            job, name = COMPILES[item.originalname]
            key = (item.callspec.params[name], item.callspec.params["arch"])
            futures[key] = pool.submit(job, *key, tmp_path_factory.mktemp("nvcc"))
    try:
        yield futures
    finally:
        pool.shutdown(cancel_futures=True)


def test_there_are_cuda_parts():
    assert CU_FILES, "no .cu files under parts/"


def test_every_cuda_part_is_assembled():
    """Each .cu part is in some problem's manifest, so its full compile (optimiser and ptxas, per arch) runs
    in test_assembled_translation_unit_compiles; a part no manifest lists would be dead code."""
    listed = {rel for problem in PROBLEMS for rel in build.load_manifest(problem)["cuda"]}
    assert not set(CU_FILES) - listed, sorted(set(CU_FILES) - listed)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("rel", CU_FILES)
def test_each_cuda_part_compiles(rel, arch, compiles):
    compiles[rel, arch].result()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("problem", PROBLEMS)
def test_assembled_translation_unit_compiles(problem, arch, compiles):
    """The single TU the built file embeds, with no include path: it must be self-contained."""
    compiles[problem, arch].result()


def test_the_export_pattern_finds_entry_points():
    text = ('#define POPKIT_EXPORT extern "C" __attribute__((visibility("default")))\n'
            "POPKIT_EXPORT int qr_small_max_n() { return 32; }\n"
            "POPKIT_EXPORT int cholesky_tiled(const float* src, float* dst,\n    int n);\n"
            "  POPKIT_EXPORT const char* popkit_name(void);\n")
    assert EXPORT.findall(text) == ["qr_small_max_n", "cholesky_tiled", "popkit_name"]


@pytest.mark.parametrize("problem", CUDA_PROBLEMS)
def test_per_part_units_compile_and_link_into_one_library(problem, tmp_path, import_module):
    """The units the loader builds in parallel (its plan on a 16-CPU machine), each compiled on its own and
    linked with no undefined symbol left: an entry point one unit calls in another links, and every
    POPKIT_EXPORT name of the problem's parts is a defined dynamic symbol. Cheap flags (PTX only, no device
    optimisation: ~3x faster) since this proves the units and the link; the full sm_90a / sm_100a compiles
    are the tests above."""
    loader = import_module(build.PARTS / "common" / "cuda_loader.py", prefix="popkit_test_cuda_loader")
    cuda = build.load_manifest(problem)["cuda"]
    assembly = build.assemble_cuda([build.read_part(rel) for rel in cuda])
    library = loader.CudaLibrary()
    library.configure(problem, assembly.parts, assembly.units)
    units = library.plan(cpus=16)
    assert len(units) == max(1, sum(rel.endswith(".cu") for rel in cuda))
    files = []
    for index, unit in enumerate(units):
        files.append(tmp_path / f"u{index}_{Path(unit[-1]).stem}.cu")
        files[-1].write_text(library.unit_source(unit))

    def compile_unit(source: Path) -> Path:
        cmd = [NVCC, "-c", "-std=c++17", "-O0", "-Xcicc", "-O0", "-gencode=arch=compute_90a,code=compute_90a",
               "-Xcompiler", "-fPIC", str(source), "-o", str(source.with_suffix(".o"))]
        proc = spawn(cmd)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
        return source.with_suffix(".o")

    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        objects = list(pool.map(compile_unit, files))
    shared = tmp_path / f"popkit_{problem}.so"
    cmd = [NVCC, "-shared", "-Xlinker", "--no-undefined", *map(str, objects), "-o", str(shared)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(shared)], capture_output=True, text=True,
                             check=True).stdout
    defined = {fields[2] for fields in map(str.split, symbols.splitlines()) if len(fields) == 3 and fields[1] == "T"}
    exported = {name for rel in cuda for name in EXPORT.findall(build.read_part(rel).text)}
    assert exported and exported <= defined, sorted(exported - defined)


def test_a_start_that_fails_with_efault_is_retried_and_any_other_failure_is_not(monkeypatch):
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        if len(calls) == 1:
            raise OSError(errno.EFAULT, "Bad address", cmd[0])
        return subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(subprocess, "run", run)
    assert spawn(["nvcc", "--version"]).returncode == 0 and len(calls) == 2

    def missing(cmd, **kwargs):
        raise FileNotFoundError(errno.ENOENT, "No such file", cmd[0])
    monkeypatch.setattr(subprocess, "run", missing)
    with pytest.raises(FileNotFoundError):
        spawn(["nvcc"])
