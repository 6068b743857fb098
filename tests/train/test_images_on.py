"""Where training images live: 8-bit on the device or in host memory, the same run either way."""

from __future__ import annotations

import resource
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gsnb.data.colmap import ColmapModel, write_colmap_text
from gsnb.data.dataset import load_dataset
from gsnb.train import TrainConfig, Trainer
from gsnb.train import memory as train_memory
from gsnb.train.memory import choose_images_on
from tests.train.conftest import build_scene


def _params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.splats.items()}


def _run(data, images_on: str, float_path: bool = False) -> Trainer:
    trainer = Trainer(data, TrainConfig(steps=6, device="cpu", seed=2, images_on=images_on))
    if float_path:
        # Each step reads the image from the file, as training did before images were kept.
        views = trainer.train_images.views
        trainer.train_images.image_bytes = lambda idx, upcoming=(): views[idx].load_bytes()
    trainer.run(6)
    return trainer


def test_host_and_device_images_train_bitwise_alike(tmp_path: Path) -> None:
    data = build_scene(tmp_path / "scene", size=20, views=4)
    on_device, on_host = _run(data, "gpu"), _run(data, "cpu")
    from_files = _run(data, "gpu", float_path=True)
    assert on_device.train_images.images_on == "gpu" and on_host.train_images.images_on == "cpu"
    assert on_host.train_images.stored[0].dtype == torch.uint8
    assert [m.view for m in on_host.history] == [m.view for m in on_device.history]
    for name, value in _params(on_device).items():
        assert torch.equal(value, _params(on_host)[name]), name
        assert torch.equal(value, _params(from_files)[name]), name
    assert on_host.evaluate("train").psnr == on_device.evaluate("train").psnr


def test_images_on_choices_and_host_memory_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    assert choose_images_on("auto", cpu, [(64, 48)], 100, 3) == "gpu"
    assert choose_images_on("cpu", cpu, [(64, 48)], 100, 3) == "cpu"
    with pytest.raises(ValueError, match="images_on must be one of auto, gpu, cpu"):
        choose_images_on("disk", cpu, [(64, 48)], 100, 3)
    monkeypatch.setattr(train_memory, "available_host_memory", lambda: 10_000)
    with pytest.warns(ResourceWarning, match=r"images take .* GiB as 8-bit RGB but the host has"):
        choose_images_on("cpu", cpu, [(64, 48)] * 10, 100, 3)


def _many_views(root: Path, count: int, size: tuple[int, int]) -> Path:
    """A COLMAP capture of ``count`` tiny noise photos around a ring."""
    width, height = size
    rng = np.random.default_rng(0)
    images = {}
    (root / "images").mkdir(parents=True)
    for i in range(count):
        angle = 2 * np.pi * i / count
        half = angle / 2  # a rotation about y by angle, as a quaternion
        qvec = np.array([np.cos(half), 0.0, np.sin(half), 0.0])
        images[i + 1] = (f"{i:05d}.png", qvec, np.array([0.0, 0.0, 3.0]), 1)
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "images" / f"{i:05d}.png", compress_level=0)
    camera = {1: ("PINHOLE", width, height, (10.0, 10.0, width / 2, height / 2))}
    points = rng.normal(size=(100, 3))
    model = ColmapModel(camera, images, points, np.full((100, 3), 128, dtype=np.uint8))
    (root / "sparse" / "0").mkdir(parents=True)
    write_colmap_text(model, root / "sparse" / "0")
    return root


def test_two_thousand_views_load_and_train_in_bounded_memory(tmp_path: Path) -> None:
    root = _many_views(tmp_path / "many", 2000, (12, 8))
    data = load_dataset(root, test_every=0, cache_dir=tmp_path / "cache")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    config = TrainConfig(steps=3, device="cpu", images_on="cpu", max_init_points=50)
    trainer = Trainer(data, config)
    trainer.run(3)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    images = trainer.train_images
    assert len(images) == 2000 and images.host_nbytes == 2000 * 12 * 8 * 3
    assert all(image.dtype == torch.uint8 for image in images.stored)
    assert grown < 200 * 2**20  # no per-view copies of anything large
