"""Compile the embedded CUDA once and call its C entry points through ctypes.

The CUDA sources include no torch headers, so the build is a plain shared
object (load_inline with is_python_module=False, no_implicit_headers=True):
about a second of nvcc instead of the ~45 s a torch-header extension costs.
torch's extension cache keys the build by name, and the name carries a hash of
the source and the target architecture, so a second process loads the cached
library without compiling. Entry points take device pointers and ints and
return a cudaError_t code; `call` raises on a non-zero code.
"""
import ctypes
import hashlib
import os
import time

import torch


def target_arch() -> str:
    """TORCH_CUDA_ARCH_LIST entry for the running GPU: '9.0a' on H100/H200, '10.0a' on B200."""
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}" + ("a" if major >= 9 else "")


def _raise_cuda_error(entry: str, code: int) -> None:
    if code != 0:
        raise RuntimeError(f"CUDA entry point {entry} failed with cudaError {code}")


class CudaLibrary:
    """The submission's compiled kernels; configured by the built file with its embedded source."""

    def __init__(self):
        self.name = None
        self.source = None
        self.compile_s = None
        self._lib = None
        self._entries = {}

    def configure(self, name: str, source: str) -> None:
        self.name, self.source, self._lib, self._entries = name, source, None, {}

    def load(self) -> ctypes.CDLL:
        if self._lib is not None:
            return self._lib
        if self.source is None:
            raise RuntimeError("no CUDA source embedded: run the built submission, not the parts")
        from torch.utils.cpp_extension import load_inline
        arch = target_arch()
        digest = hashlib.sha256((arch + self.source).encode()).hexdigest()[:16]
        previous = os.environ.get("TORCH_CUDA_ARCH_LIST")
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
        start = time.perf_counter()
        try:
            path = load_inline(name=f"{self.name}_{digest}", cpp_sources="", cuda_sources=self.source,
                               is_python_module=False, no_implicit_headers=True,
                               extra_cuda_cflags=["-O3", "-std=c++17"])
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
