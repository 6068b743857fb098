"""The trainer on the GPU with its fused kernels against the same run in plain PyTorch.

The fused path (CUDA rasterizer, fused SSIM, one-launch Adam, health sums and
densification sums) and the PyTorch path (reference renderer, PyTorch SSIM,
torch's Adam, PyTorch sums) train the same tiny scene from the same start;
float32 both, so they drift apart only by rounding.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from gsnb import kernels
from gsnb.train import TrainConfig, Trainer
from gsnb.train.strategy import default
from tests.train.conftest import build_scene


def run(data, steps: int, fused: bool, monkeypatch) -> Trainer:
    with monkeypatch.context() as patch:
        if not fused:
            # The one guard of every fused training kernel says no.
            patch.setattr(kernels, "applies", lambda *_, **__: False)
        cfg = TrainConfig(
            steps=steps, device="cuda", backend="cuda" if fused else "reference", seed=3
        )
        # Densification off: a split or clone decided at a threshold could round either way.
        trainer = Trainer(data, cfg, strategy=default.DefaultStrategy(refine_start_iter=1000))
        trainer.run(steps)
        torch.cuda.synchronize()
        trainer.used_kernels = trainer.optimizer._fused()
    return trainer


def test_fused_training_matches_plain_pytorch(cuda_ext, tmp_path, monkeypatch):
    data = build_scene(tmp_path / "scene", size=48, views=4, gaussians=60, points=200)
    fused = run(data, 12, True, monkeypatch)
    plain = run(data, 12, False, monkeypatch)
    assert fused.used_kernels and not plain.used_kernels
    for a, b in zip(fused.history, plain.history, strict=True):
        assert a.loss == pytest.approx(b.loss, rel=1e-3), (a.step, a.loss, b.loss)
        assert a.psnr == pytest.approx(b.psnr, rel=1e-3)
        assert a.scale_max == pytest.approx(b.scale_max, rel=1e-3)
        assert a.mean_opacity == pytest.approx(b.mean_opacity, rel=1e-3)
    # Adam turns rounding-level gradients (a rotation the loss barely sees) into full
    # learning-rate steps, so single parameters drift by a few lr; the renders must agree.
    for k, p in fused.model.splats.items():
        q = plain.model.splats[k]
        err = float((p - q).norm() / q.norm().clamp_min(1e-12))
        assert err < 1e-2, (k, err)
    view = data.views[0]
    a = fused.render_view(view).rgb
    b = plain.render_view(view).rgb
    assert float((a - b).norm() / b.norm()) < 1e-3
    grad2d = fused.strategy_state["grad2d"], plain.strategy_state["grad2d"]
    assert float((grad2d[0] - grad2d[1]).norm() / grad2d[1].norm()) < 1e-3
    last = dataclasses.asdict(fused.history[-1])
    assert all(math.isfinite(v) for v in last.values() if isinstance(v, float))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_peak_allocated_is_max_memory_allocated_without_garbage() -> None:
    """torch's max_memory_allocated leaves a reference cycle per call (see peak_allocated)."""
    import gc

    from gsnb.train.memory import peak_allocated

    device = torch.device("cuda")
    held = torch.empty(3_000_000, device=device)
    assert peak_allocated(device) == torch.cuda.max_memory_allocated(device) > 0
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            peak_allocated(device)
        assert gc.collect() == 0  # nothing for the collector: no cycle was left
        torch.cuda.max_memory_allocated(device)
        assert gc.collect() > 0  # what this avoids
    finally:
        gc.enable()
    del held


def test_steps_ask_the_driver_for_no_device_count(cuda_ext, tmp_path, monkeypatch):
    # torch.cuda.is_available() is a driver call of up to 0.1 ms; a step that named no
    # device (current_stream() of None) asked it every time.
    data = build_scene(tmp_path / "scene", size=48, views=4, gaussians=60, points=200)
    trainer = Trainer(data, TrainConfig(steps=60, device="cuda", seed=3))
    trainer.run(5)
    calls = []
    real = torch.cuda.is_available
    monkeypatch.setattr(torch.cuda, "is_available", lambda: calls.append(1) or real())
    trainer.run(40)
    torch.cuda.synchronize()
    assert trainer.step_count == 45
    assert len(calls) <= 4  # the memory peak every 20 steps may ask; a step may not


def test_adam_skipping_the_sh_bands_not_in_use_changes_nothing(cuda_ext, tmp_path, monkeypatch):
    # 15 steps at sh_degree_interval 10: degree 0, then 1. The bands above stay exactly zero,
    # moments included, whether Adam skips them or updates them with zero gradients.
    data = build_scene(tmp_path / "scene", size=48, views=4, gaussians=60, points=200)

    def train(skip: bool) -> Trainer:
        cfg = TrainConfig(steps=15, device="cuda", seed=3, sh_degree_interval=10)
        trainer = Trainer(data, cfg, strategy=default.DefaultStrategy(refine_start_iter=1000))
        if not skip:
            monkeypatch.setattr(trainer, "_active_sh", lambda *_: None)
        trainer.run(15)
        torch.cuda.synchronize()
        return trainer

    skipped, full = train(True), train(False)
    assert skipped._active_sh(1, True) == {"shN": 9} and skipped._active_sh(1, False) is None
    for trainer in (skipped, full):
        shn = trainer.model.splats["shN"]
        state = trainer.optimizer.state[shn]
        for t in (shn, state["exp_avg"], state["exp_avg_sq"]):
            assert not t[:, 3:].any()
        assert shn[:, :3].abs().sum() > 0  # degree 1 trained
    for k, p in skipped.model.splats.items():
        q = full.model.splats[k]
        assert float((p - q).norm() / q.norm().clamp_min(1e-12)) < 1e-2, k
