"""gsnb.kernels: the module of this process, the guard of the fused kernels, the examples."""

from __future__ import annotations

import doctest

import pytest
import torch

import gsnb.toolchain
from gsnb import kernels


def test_docstring_examples() -> None:
    result = doctest.testmod(kernels)
    assert result.failed == 0 and result.attempted > 0


def test_the_extension_is_the_module_the_toolchain_gave_this_process() -> None:
    assert kernels.extension() is gsnb.toolchain.loaded_module()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_without_a_build_the_ops_say_how_to_build_it() -> None:
    with pytest.raises(RuntimeError, match="gs_build"):
        kernels.require()
    with pytest.raises(RuntimeError, match="gsnb build"):
        kernels.health_sums(scales=torch.zeros(1, 3), opacities=torch.zeros(1), params=[], grads=[])
    assert not kernels.applies("health_sums", torch.zeros(3))
