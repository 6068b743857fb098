"""Training images in pinned host memory, copied ahead on a side stream, against on the GPU."""

from __future__ import annotations

import torch

from gsnb.train import TrainConfig, Trainer
from tests.train.conftest import build_scene


def _run(data, images_on: str) -> Trainer:
    config = TrainConfig(steps=30, device="cuda", backend="cuda", seed=4, images_on=images_on)
    trainer = Trainer(data, config)
    trainer.run(30)
    torch.cuda.synchronize()
    return trainer


def test_host_images_train_bitwise_like_gpu_images(cuda_ext, tmp_path):
    data = build_scene(tmp_path / "scene", size=64, views=6, gaussians=80, points=300)
    on_gpu, on_host = _run(data, "gpu"), _run(data, "cpu")
    host = on_host.train_images
    assert host.images_on == "cpu" and all(image.is_pinned() for image in host.stored)
    assert all(image.device.type == "cuda" for image in on_gpu.train_images.stored)
    assert len(host._ahead) == 2 and all(img.is_cuda for img, _ in host._ahead.values())
    for name, value in on_gpu.model.splats.items():
        assert torch.equal(value, on_host.model.splats[name]), name
    assert on_host.evaluate("train").psnr == on_gpu.evaluate("train").psnr


def test_auto_keeps_small_captures_on_the_gpu(cuda_ext, tmp_path):
    data = build_scene(tmp_path / "scene", size=32, views=3)
    trainer = Trainer(data, TrainConfig(steps=1, device="cuda", images_on="auto"))
    assert trainer.train_images.images_on == "gpu"
