"""Training images in pinned host memory, copied ahead on a side stream, against on the GPU."""

from __future__ import annotations

import random

import torch

from gsnb.train import TrainConfig, Trainer
from gsnb.train.inputs import PREFETCH, ViewImages, ViewOrder
from tests.train.conftest import build_scene


def test_host_images_reach_each_step_bitwise_like_gpu_images(cuda_ext, tmp_path):
    data = build_scene(tmp_path / "scene", size=64, views=6, gaussians=80, points=300)
    device = torch.device("cuda")
    on_gpu = ViewImages(data.views, device, images_on="gpu")
    on_host = ViewImages(data.views, device, images_on="cpu")
    assert all(image.is_pinned() for image in on_host.stored)
    order, guesses = ViewOrder(len(data.views), seed=3), random.Random(0)
    for step in range(60):
        idx = order.next()
        # Mostly the true next views; now and then a wrong guess, so a view is not ahead.
        ahead = order.peek(PREFETCH) if step % 7 else [guesses.randrange(6) for _ in range(2)]
        got = on_host.image(idx, ahead)
        assert torch.equal(got, on_gpu.image(idx)), step
    staged = on_host._staging
    assert len(staged.slot_of) <= PREFETCH and all(b.is_cuda for b in staged.buffers)


def _run(data, images_on: str) -> Trainer:
    config = TrainConfig(steps=30, device="cuda", backend="cuda", seed=4, images_on=images_on)
    trainer = Trainer(data, config)
    trainer.run(30)
    torch.cuda.synchronize()
    return trainer


def test_host_images_train_like_gpu_images(cuda_ext, tmp_path):
    # The CUDA backward sums with atomics, so two runs agree to rounding, not bitwise.
    data = build_scene(tmp_path / "scene", size=64, views=6, gaussians=80, points=300)
    on_gpu, on_host = _run(data, "gpu"), _run(data, "cpu")
    assert on_host.train_images.images_on == "cpu"
    a, b = on_host.evaluate("train").psnr, on_gpu.evaluate("train").psnr
    assert abs(a - b) < 0.05, (a, b)


def test_auto_keeps_small_captures_on_the_gpu(cuda_ext, tmp_path):
    data = build_scene(tmp_path / "scene", size=32, views=3)
    trainer = Trainer(data, TrainConfig(steps=1, device="cuda", images_on="auto"))
    assert trainer.train_images.images_on == "gpu"


def test_staged_bytes_stay_until_the_work_queued_after_them_has_read_them(cuda_ext, tmp_path):
    # A step reads its photo's bytes in kernels queued after image_bytes returns; the copy of
    # an upcoming view into that buffer must wait for them, however long they take.
    data = build_scene(tmp_path / "scene", size=64, views=6, gaussians=80, points=300)
    device = torch.device("cuda")
    on_gpu = ViewImages(data.views, device, images_on="gpu")
    on_host = ViewImages(data.views, device, images_on="cpu")
    order, read = ViewOrder(len(data.views), seed=5), []
    for _ in range(40):
        idx = order.next()
        photo = on_host.image_bytes(idx, order.peek(PREFETCH))
        torch.cuda._sleep(2_000_000)  # the step's kernels before the loss reads the photo
        read.append((idx, photo.clone()))
    torch.cuda.synchronize()
    for step, (idx, got) in enumerate(read):
        assert got.dtype == torch.uint8 and torch.equal(got, on_gpu.image_bytes(idx)), step
