"""parts/common/cuda_loader.py without a GPU: which translation units a machine compiles (per .cu part in
parallel from PARALLEL_MIN_CPUS CPUs, one unit below), the cache name (sources, arch and unit count), and
the calls it makes to torch's load / load_inline (faked here; tests/test_cuda_compile.py compiles and links
the real units with nvcc)."""
from __future__ import annotations

import os

import pytest

import build

LOADER = build.PARTS / "common" / "cuda_loader.py"
PARTS = {"common/u.cuh": "int u();", "p/a.cu": "int a() { return u(); }", "p/v.cuh": "int v();",
         "p/b.cu": "int b();"}
UNITS = [("common/u.cuh", "p/v.cuh", "p/a.cu"), ("common/u.cuh", "p/v.cuh", "p/b.cu")]


@pytest.fixture
def loader(import_module):
    return import_module(LOADER, prefix="popkit_test_cuda_loader")


@pytest.fixture
def library(loader):
    lib = loader.CudaLibrary()
    lib.configure("popkit_toy", PARTS, UNITS)
    return lib


def sources(lib, cpus):
    return [lib.unit_source(unit) for unit in lib.plan(cpus=cpus)]


def test_four_or_more_cpus_compile_one_unit_per_cu_part(library, loader):
    assert loader.PARALLEL_MIN_CPUS == 4
    assert library.plan(cpus=16) == library.plan(cpus=4) == UNITS


@pytest.mark.parametrize("cpus", [1, 2, 3])
def test_fewer_cpus_compile_every_part_in_order_as_one_unit(library, cpus):
    assert library.plan(cpus=cpus) == [("common/u.cuh", "p/a.cu", "p/v.cuh", "p/b.cu")]


def test_the_plan_follows_the_cpus_this_process_may_use(library, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)        # a large host ...
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)   # ... pinned to two
    assert len(library.plan()) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert library.plan() == UNITS


def test_the_plan_falls_back_to_os_cpu_count_without_an_affinity_call(library, monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert library.plan() == UNITS
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert len(library.plan()) == 1
    monkeypatch.setattr(os, "cpu_count", lambda: None)      # unknown: the safe single unit
    assert len(library.plan()) == 1


def test_a_single_cu_part_is_one_unit_everywhere(loader):
    lib = loader.CudaLibrary()
    lib.configure("popkit_toy", {"common/u.cuh": "int u();", "p/a.cu": "int a();"},
                  [("common/u.cuh", "p/a.cu")])
    assert lib.plan(cpus=16) == lib.plan(cpus=2) == [("common/u.cuh", "p/a.cu")]


def test_a_unit_joins_its_parts_as_the_builder_does(library):
    assembly = build.CudaAssembly(PARTS, UNITS)
    assert [library.unit_source(u) for u in UNITS] == [assembly.source(u) for u in UNITS]
    assert sources(library, 2) == [assembly.source()]


def test_configure_drops_the_newlines_around_an_embedded_text(loader):
    lib = loader.CudaLibrary()
    lib.configure("popkit_toy", {"p/a.cu": "\nint a();\n"}, [("p/a.cu",)])
    assert lib.unit_source(("p/a.cu",)) == "// ---- part p/a.cu ----\nint a();"


def test_the_cache_name_carries_the_unit_count_and_a_hash_of_sources_and_arch(library):
    many, one = sources(library, 16), sources(library, 2)
    assert library.name_for("9.0a", many).endswith("_2u") and library.name_for("9.0a", one).endswith("_1u")
    assert library.name_for("9.0a", many).startswith("popkit_toy_")
    assert library.name_for("9.0a", many) == library.name_for("9.0a", list(many))     # deterministic
    names = {library.name_for("9.0a", many), library.name_for("9.0a", one), library.name_for("10.0a", many),
             library.name_for("9.0a", [many[0] + " ", many[1]]),
             library.name_for("9.0a", ["".join(many)])}      # the same text as one unit: still another name
    assert len(names) == 5


@pytest.fixture
def fake_torch(loader, monkeypatch, tmp_path):
    """torch's load and load_inline replaced by recorders; TORCH_EXTENSIONS_DIR in tmp; an sm_90a GPU."""
    import torch.utils.cpp_extension as cpp_extension
    calls = []

    def recorder(kind):
        def fake(**kwargs):
            calls.append((kind, kwargs, os.environ.get("TORCH_CUDA_ARCH_LIST")))
            return str(tmp_path / f"{kwargs['name']}.so")
        return fake

    monkeypatch.setattr(cpp_extension, "load", recorder("load"))
    monkeypatch.setattr(cpp_extension, "load_inline", recorder("load_inline"))
    monkeypatch.setattr(loader, "target_arch", lambda: "9.0a")
    monkeypatch.setattr(loader.ctypes, "CDLL", lambda path: ("library", path))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.delenv(loader.LINEINFO_ENV, raising=False)
    return calls


def test_many_cpus_build_the_units_with_load_in_one_folder(loader, library, fake_torch, monkeypatch, tmp_path):
    monkeypatch.setattr(loader, "usable_cpus", lambda: 16)
    assert library.load() == ("library", str(tmp_path / f"{library.build_name}.so"))
    [(kind, kwargs, arch)] = fake_torch
    assert kind == "load" and arch == "9.0a" and "TORCH_CUDA_ARCH_LIST" not in os.environ
    folder = tmp_path / "extensions" / library.build_name
    assert library.build_name.endswith("_2u")
    assert kwargs == {"name": library.build_name, "sources": [str(folder / "u0_a.cu"), str(folder / "u1_b.cu")],
                      "build_directory": str(folder), "is_python_module": False,
                      "extra_cuda_cflags": ["-O3", "-std=c++17"]}
    assert [(folder / f).read_text() for f in ("u0_a.cu", "u1_b.cu")] == sources(library, 16)
    assert library.compile_s is not None
    library.load()
    assert len(fake_torch) == 1                     # loaded once per process


def test_few_cpus_build_one_unit_with_load_inline(loader, library, fake_torch, monkeypatch):
    monkeypatch.setattr(loader, "usable_cpus", lambda: 2)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    library.load()
    [(kind, kwargs, arch)] = fake_torch
    assert kind == "load_inline" and arch == "9.0a" and os.environ["TORCH_CUDA_ARCH_LIST"] == "8.0"
    assert kwargs == {"name": library.build_name, "cpp_sources": "", "cuda_sources": sources(library, 2)[0],
                      "is_python_module": False, "no_implicit_headers": True,
                      "extra_cuda_cflags": ["-O3", "-std=c++17"]}
    assert library.build_name.endswith("_1u")


def test_lineinfo_on_request_adds_the_flag_and_names_another_build(loader, library, fake_torch, monkeypatch):
    # ncu's per-line stall samples need -lineinfo; a cached plain build must not answer for it, nor the reverse.
    monkeypatch.setattr(loader, "usable_cpus", lambda: 2)
    library.load()
    plain = library.build_name
    for value, lineinfo in (("0", False), ("1", True)):
        monkeypatch.setenv(loader.LINEINFO_ENV, value)
        library.configure("popkit_toy", PARTS, UNITS)            # a fresh process's library
        library.load()
        flags = fake_torch[-1][1]["extra_cuda_cflags"]
        assert flags == ["-O3", "-std=c++17"] + (["-lineinfo"] if lineinfo else [])
        assert (library.build_name != plain) == lineinfo
    assert loader.CUDA_FLAGS == ["-O3", "-std=c++17"]                # the default list is not grown in place


def test_an_unchanged_unit_file_is_not_rewritten(loader, tmp_path):
    # ninja rebuilds a unit whose file is newer than its object: a second process must leave it alone.
    path = tmp_path / "u0_a.cu"
    loader.write_if_changed(str(path), "int a();")
    os.utime(path, (1_000_000, 1_000_000))
    loader.write_if_changed(str(path), "int a();")
    assert path.stat().st_mtime == 1_000_000
    loader.write_if_changed(str(path), "int a2();")
    assert path.read_text() == "int a2();" and path.stat().st_mtime != 1_000_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["u0_a.cu"]     # no temporary file left


def test_without_parts_load_says_to_run_the_built_file(loader):
    with pytest.raises(RuntimeError, match="no CUDA source embedded"):
        loader.CudaLibrary().load()
