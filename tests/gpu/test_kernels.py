"""gsnb.kernels on the GPU: the one guard of the fused kernels, and the module handle."""

from __future__ import annotations

import pytest
import torch

import gsnb.toolchain
from gsnb import kernels


def test_the_guard_takes_contiguous_float32_cuda_tensors_of_a_built_op(cuda_ext):
    a = torch.zeros(4, 3, device="cuda")
    assert kernels.applies("adam_step", a, a.clone())
    assert not kernels.applies("no_such_op", a)
    assert not kernels.applies("adam_step", a.double())
    assert not kernels.applies("adam_step", a.cpu())
    assert not kernels.applies("adam_step", a.t())
    assert kernels.applies("adam_step", a.t(), contiguous=False)


def test_a_forgotten_extension_is_loaded_again_from_the_cache(cuda_ext):
    kernels.set_extension(None)
    try:
        assert kernels.extension() is not None
        assert gsnb.toolchain.loaded_module() is kernels.extension()
    finally:
        kernels.set_extension(cuda_ext)


def test_an_error_in_an_entry_point_raises_and_the_process_lives(cuda_ext):
    """The message of a failed check is built by the extension's C++ runtime: it must raise
    (a second, static copy of libstdc++ in the extension made this crash the process)."""
    tensors = [torch.zeros(4, device="cuda") for _ in range(9)]
    with pytest.raises(RuntimeError, match="at most 8 tensors, got 9"):
        cuda_ext.adam_step(
            tensors, tensors, tensors, tensors, [0.1] * 9, [0.5] * 9, 0.9, 0.999, 1e-15, None
        )
