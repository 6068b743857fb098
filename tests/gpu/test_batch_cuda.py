"""Batches and data parallel on GPUs: the CUDA rasterizer with several cameras, and NCCL.

Several cameras sum their gradients into the Gaussians with atomics (in no fixed order),
so these runs agree with their references to rounding, not bit for bit; densification is
off, since a split decided at a threshold could round either way.
"""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from gsnb.train import TrainConfig, Trainer
from gsnb.train.batch import apply_adam_settings
from gsnb.train.optim import LR_KNOBS
from gsnb.train.strategy import DefaultStrategy
from tests.train.conftest import build_scene

STEPS = 12
BASE = dict(device="cuda", backend="cuda", sh_degree=1, steps=STEPS)


def no_densify() -> DefaultStrategy:
    return DefaultStrategy(refine_start_iter=10_000)


def close_models(a: Trainer, b: Trainer, view) -> None:
    for a_step, b_step in zip(a.history, b.history, strict=True):
        assert a_step.loss == pytest.approx(b_step.loss, rel=1e-3)
    rgb_a, rgb_b = a.render_view(view).rgb, b.render_view(view).rgb
    assert float((rgb_a - rgb_b).norm() / rgb_b.norm()) < 1e-3


def test_a_batch_of_one_view_twice_matches_batch_one_with_scaled_rates(cuda_ext, tmp_path):
    data = build_scene(tmp_path / "scene", size=48, views=2, test_every=2, points=200)
    two = Trainer(data, TrainConfig(batch_size=2, **BASE), strategy=no_densify())
    rates = {k: getattr(two.config, k) * math.sqrt(2) for k in LR_KNOBS.values()}
    one = Trainer(data, TrainConfig(**BASE, **rates), strategy=no_densify())
    apply_adam_settings(one.optimizer, 2)
    one.run()
    two.run()
    close_models(one, two, data.views[1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gpu_worker(rank: int, port: int, data, out: str) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )  # fmt: skip
    from gsnb.train import distributed, process_group

    process_group.init_process_group("cuda", timeout_s=120)
    config = TrainConfig(batch_size=2, **BASE)
    trainer = distributed.DistributedTrainer(data, config, strategy=no_densify())
    trainer.run()
    trainer.leave_group()
    if rank == 0:
        state = {k: v.detach().cpu() for k, v in trainer.model.splats.items()}
        torch.save({"splats": state, "peaks": trainer.process_peaks}, Path(out) / "end.pt")
    process_group.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.timeout(300)
def test_two_gpus_train_the_model_of_one(cuda_ext, tmp_path):
    data = build_scene(tmp_path / "scene", size=48, views=5, points=200)
    context = mp.start_processes(
        _gpu_worker, args=(_free_port(), data, str(tmp_path)), nprocs=2, join=False,
        start_method="spawn",
    )  # fmt: skip
    deadline = time.monotonic() + 240
    try:
        while not context.join(timeout=1.0):
            assert time.monotonic() < deadline, "the GPU workers did not finish in 240 s"
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    single = Trainer(data, TrainConfig(batch_size=2, **BASE), strategy=no_densify())
    single.run()
    saved = torch.load(tmp_path / "end.pt", weights_only=True)
    assert all(p > 0 for p in saved["peaks"])
    both = Trainer(data, TrainConfig(batch_size=2, **BASE), strategy=no_densify())
    with torch.no_grad():
        for k, v in saved["splats"].items():
            both.model.splats[k].copy_(v)
    view = data.views[0]
    rgb_a, rgb_b = both.render_view(view).rgb, single.render_view(view).rgb
    assert float((rgb_a - rgb_b).norm() / rgb_b.norm()) < 1e-3
