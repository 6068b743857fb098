"""GPU tests: skipped without a CUDA device; the rasterizer is built on first use."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def cuda_ext():
    """The built CUDA rasterizer (built for this GPU if no cached build exists)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible")
    from gsnb import kernels
    from gsnb.raster import cuda

    if not cuda.is_available():
        from gsnb.toolchain import build

        build()
    assert cuda.is_available(), "the CUDA rasterizer did not load after building it"
    return kernels.extension()
