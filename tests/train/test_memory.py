"""The GPU memory preflight before training and after densification."""

from __future__ import annotations

import pytest
import torch

from gsnb.train.memory import MemoryWatch, check_gpu_memory


def test_cpu_training_needs_no_preflight() -> None:
    assert check_gpu_memory(10**9, 4096, 4096, 3, torch.device("cpu")) is None


def test_memory_watch_checks_again_only_after_growth() -> None:
    watch = MemoryWatch(torch.device("cpu"), 64, 48, dataset_bytes=0)
    watch.check(100, sh_degree=3)
    watch.check_growth(110, sh_degree=3)
    assert watch.checked_at == 100  # 10% is not more than 10%
    watch.check_growth(111, sh_degree=3)
    assert watch.checked_at == 111
    assert watch.peak(step=20, changed=True) is None  # nothing to read on the CPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_scene_too_large_for_the_gpu_is_warned_about() -> None:
    with pytest.warns(ResourceWarning, match="raise the downscale or cap the Gaussians"):
        need = check_gpu_memory(200_000_000, 3840, 2160, 3, torch.device("cuda"))
    assert need is not None and need > torch.cuda.get_device_properties(0).total_memory
    small = check_gpu_memory(1000, 64, 64, 0, torch.device("cuda"))
    assert small is not None and small < 2**30
