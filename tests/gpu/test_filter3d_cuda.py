"""The 3D filter on the GPU: its recomputation inside a training step waits for nothing."""

from __future__ import annotations

import torch

from gsnb.train import TrainConfig, Trainer
from tests.train.conftest import build_scene


def test_recomputing_the_filter_does_not_wait_for_the_gpu(cuda_ext, tmp_path):
    data = build_scene(tmp_path / "scene", size=32, views=4, points=200)
    trainer = Trainer(data, TrainConfig(steps=5, device="cuda", backend="cuda", filter3d=True))
    splats = trainer.model.splats
    trainer.filter3d.variances(splats, 0)  # the first use: allocations settle
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a copy from the host would synchronise
    try:
        value = trainer.filter3d.variances(splats, trainer.filter3d.every)  # a recomputation
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert value.device.type == "cuda" and value.shape == (trainer.num_gaussians,)
