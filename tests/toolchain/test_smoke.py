"""The smoke test: skipped with a reason without a GPU; on a GPU, CUDA agrees with the reference."""

from __future__ import annotations

import pytest
import torch

from gsnb.raster.smoke import compare_backends
from gsnb.toolchain.smoke import render_check, smoke_test


def test_the_renderer_hands_the_toolchain_its_check():
    assert render_check() is compare_backends


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_without_a_gpu_the_smoke_test_is_skipped_with_a_reason():
    result = smoke_test()
    assert result.status == "skipped" and result.ok
    assert "no GPU is visible" in result.message


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_build_on_the_gpu_passes_its_smoke_test(tmp_path):
    import gsnb.toolchain
    from gsnb.toolchain.smoke_records import gpu_identity, recorded_pass

    result = gsnb.toolchain.build(cache_dir=tmp_path, progress=False)
    assert result.smoke is not None and result.smoke.status == "passed", result.smoke
    assert result.smoke.max_error < 1e-3 and result.smoke.recorded is None
    assert recorded_pass(result.manifest, gpu_identity()) is not None
    again = gsnb.toolchain.build(cache_dir=tmp_path, progress=False)
    assert again.cached and again.seconds < 1.0
    assert again.smoke.status == "passed" and again.smoke.recorded is not None
    verified = gsnb.toolchain.build(cache_dir=tmp_path, progress=False, verify=True)
    assert verified.smoke.status == "passed" and verified.smoke.recorded is None
