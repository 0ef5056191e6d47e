"""Compile the embedded CUDA once and call its C entry points through ctypes.

The CUDA sources include no torch headers, so the build is a plain shared
object (is_python_module=False, no torch includes in the source): seconds of
nvcc instead of the ~45 s a torch-header extension costs. The built file hands
over its CUDA parts and translation units (build.assemble_cuda: every header
part, then one .cu part). On a machine of PARALLEL_MIN_CPUS or more CPUs each
unit is a source file of torch.utils.cpp_extension.load, whose ninja build
compiles them in parallel and links them into one library (cold compile about
the slowest unit instead of the sum); elsewhere every part, in manifest order,
is one unit for load_inline. torch's extension cache keys the build by name,
and the name carries a hash of the units' sources and the target architecture
and the unit count, so a second process loads the cached library without
compiling and a one-unit and an N-unit build never share a name. Entry points
take device pointers and ints and return a cudaError_t code; `call` raises on a
non-zero code.
"""
import ctypes
import hashlib
import os
import sys
import time

import torch

PARALLEL_MIN_CPUS = 4                        # fewer CPUs: one unit (ninja's parallel jobs would not pay)
CUDA_FLAGS = ["-O3", "-std=c++17"]
# POPKIT_CUDA_LINEINFO=1 adds -lineinfo (source lines in the SASS: ncu's per-line stall samples; the code is the
# same). The flags are part of the cache name, so such a build never stands in for a plain one or the reverse.
LINEINFO_ENV = "POPKIT_CUDA_LINEINFO"


def cuda_flags() -> list:
    """nvcc's flags for this process: CUDA_FLAGS, and -lineinfo where LINEINFO_ENV is 1."""
    return CUDA_FLAGS + (["-lineinfo"] if os.environ.get(LINEINFO_ENV) == "1" else [])


def target_arch() -> str:
    """TORCH_CUDA_ARCH_LIST entry for the running GPU: '9.0a' on H100/H200, '10.0a' on B200."""
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}" + ("a" if major >= 9 else "")


def _raise_cuda_error(entry: str, code: int) -> None:
    if code != 0:
        raise RuntimeError(f"CUDA entry point {entry} failed with cudaError {code}")


def usable_cpus():
    """The CPUs this process may run on (its affinity set: a container pinned to a few of a large host's
    CPUs counts those), os.cpu_count() where the platform has no affinity call, None if unknown."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def extension_directory(name: str) -> str:
    """The folder torch's load would build `name` in (TORCH_EXTENSIONS_DIR, else torch's per-user cache with
    its pyXY_cuXYZ subfolder), created: the unit files are written there, as load_inline writes its one."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is None:
        from torch.utils.cpp_extension import get_default_build_root
        cuda = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
        root = os.path.join(get_default_build_root(), f"py{sys.version_info.major}{sys.version_info.minor}_{cuda}")
    directory = os.path.join(root, name)
    os.makedirs(directory, exist_ok=True)
    return directory


def write_if_changed(path: str, text: str) -> None:
    """Write text unless the file holds it already (ninja rebuilds what is newer), atomically: another process
    importing the same file at the same time must never compile a half-written unit."""
    try:
        with open(path, encoding="utf-8") as existing:
            if existing.read() == text:
                return
    except OSError:
        pass
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temporary, path)


class CudaLibrary:
    """The submission's compiled kernels; configured by the built file with its embedded parts and units."""

    def __init__(self):
        self.name = None
        self.parts = {}
        self.units = []
        self.build_name = None
        self.compile_s = None
        self._lib = None
        self._entries = {}

    def configure(self, name: str, parts: dict, units: list) -> None:
        """parts: {part path: text} in manifest order (the newlines around an embedded text are dropped);
        units: the part paths of each translation unit."""
        self.name, self.units = name, [tuple(unit) for unit in units]
        self.parts = {path: text.strip("\n") for path, text in parts.items()}
        self.build_name, self._lib, self._entries = None, None, {}

    def plan(self, cpus=None) -> list:
        """The units to compile: the per-part units on a machine of PARALLEL_MIN_CPUS or more CPUs (cpus:
        usable_cpus() when not given) if there are two or more, else one unit of every part in order."""
        cpus = usable_cpus() if cpus is None else cpus
        if len(self.units) > 1 and (cpus or 1) >= PARALLEL_MIN_CPUS:
            return list(self.units)
        return [tuple(self.parts)]

    def unit_source(self, unit) -> str:
        """A unit's text: its parts in order, each under a `// ---- part PATH ----` line (as build.py joins them)."""
        return "\n\n".join(f"// ---- part {path} ----\n{self.parts[path]}" for path in unit)

    def name_for(self, arch: str, sources: list, flags: list = CUDA_FLAGS) -> str:
        """The extension's name: a hash of the target architecture, nvcc's flags and every unit's source, and the
        unit count."""
        digest = hashlib.sha256("\0".join([arch, " ".join(flags), *sources]).encode()).hexdigest()[:16]
        return f"{self.name}_{digest}_{len(sources)}u"

    def load(self) -> ctypes.CDLL:
        if self._lib is not None:
            return self._lib
        if not self.parts:
            raise RuntimeError("no CUDA source embedded: run the built submission, not the parts")
        from torch.utils.cpp_extension import load, load_inline
        arch = target_arch()
        units = self.plan()
        sources = [self.unit_source(unit) for unit in units]
        flags = cuda_flags()
        self.build_name = self.name_for(arch, sources, flags)
        previous = os.environ.get("TORCH_CUDA_ARCH_LIST")
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
        start = time.perf_counter()
        try:
            if len(sources) == 1:
                path = load_inline(name=self.build_name, cpp_sources="", cuda_sources=sources[0],
                                   is_python_module=False, no_implicit_headers=True, extra_cuda_cflags=flags)
            else:
                directory = extension_directory(self.build_name)
                files = []
                for index, (unit, source) in enumerate(zip(units, sources)):
                    # u0_NAME.cu for a unit whose .cu part is NAME.cu (the index keeps the objects apart)
                    stem = os.path.splitext(os.path.basename(unit[-1]))[0]
                    files.append(os.path.join(directory, f"u{index}_{stem}.cu"))
                    write_if_changed(files[-1], source)
                path = load(name=self.build_name, sources=files, build_directory=directory,
                            is_python_module=False, extra_cuda_cflags=flags)
        finally:
            if previous is None:
                os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
            else:
                os.environ["TORCH_CUDA_ARCH_LIST"] = previous
        self.compile_s = time.perf_counter() - start
        self._lib = ctypes.CDLL(path)
        return self._lib

    def entry(self, name: str):
        """A C entry point returning int, looked up once (a call then costs a few us of ctypes, not more)."""
        func = self._entries.get(name)
        if func is None:
            func = getattr(self.load(), name)
            func.restype = ctypes.c_int
            self._entries[name] = func
        return func

    def function(self, entry: str, signature: str):
        """The entry point as a typed ctypes function for hot paths: signature has one letter per argument,
        'p' for a pointer (pass tensor.data_ptr() or None) and 'i' for an int; a non-zero return raises.
        Arguments then go to C without `call`'s per-argument conversion (~0.4 us each)."""
        func = self.load()[entry]                        # a new function object, apart from entry()'s
        func.argtypes = [{"p": ctypes.c_void_p, "i": ctypes.c_int}[letter] for letter in signature]
        func.restype = ctypes.c_int
        func.errcheck = lambda code, _func, _args: _raise_cuda_error(entry, code)
        return func

    def call(self, entry: str, *args) -> None:
        """Call an entry point; tensors go as device pointers, None as NULL, ints as C ints."""
        c_args = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor)
                  else ctypes.c_void_p(None) if a is None else ctypes.c_int(a) for a in args]
        _raise_cuda_error(entry, self.entry(entry)(*c_args))

    def query(self, entry: str, *ints: int) -> int:
        """Call an entry point that returns a plain int (a size or a limit)."""
        return self.entry(entry)(*[ctypes.c_int(i) for i in ints])


CUDA = CudaLibrary()
