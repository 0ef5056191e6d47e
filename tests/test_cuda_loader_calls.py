"""CudaLibrary's calls into a loaded library, on the C library (no GPU): `function`'s typed hot path
and `call`'s converting one both pass their arguments through and raise on a non-zero return."""
import ctypes

import pytest
import torch

from parts.common.cuda_loader import CudaLibrary


@pytest.fixture
def libc() -> CudaLibrary:
    library = CudaLibrary()
    library._lib = ctypes.CDLL(None)                     # as if the embedded source were compiled
    return library


def test_function_passes_ints_and_raises_on_a_non_zero_return(libc):
    absolute = libc.function("abs", "i")
    assert absolute(0) is None
    with pytest.raises(RuntimeError, match="entry point abs failed with cudaError 7"):
        absolute(-7)


def test_function_passes_pointers_as_ints_or_none(libc):
    memcmp = libc.function("memcmp", "ppi")
    a, b = torch.tensor([1, 2, 3], dtype=torch.int32), torch.tensor([1, 2, 4], dtype=torch.int32)
    assert memcmp(a.data_ptr(), a.clone().data_ptr(), 12) is None
    with pytest.raises(RuntimeError, match="entry point memcmp failed"):
        memcmp(a.data_ptr(), b.data_ptr(), 12)
    assert memcmp(None, None, 0) is None


def test_function_rejects_an_unknown_signature_letter(libc):
    with pytest.raises(KeyError):
        libc.function("abs", "x")


def test_call_converts_tensors_none_and_ints(libc):
    a = torch.tensor([5, 6], dtype=torch.int32)
    libc.call("memcmp", a, a.clone(), 8)
    libc.call("memcmp", None, None, 0)
    with pytest.raises(RuntimeError, match="entry point abs failed with cudaError 3"):
        libc.call("abs", -3)
