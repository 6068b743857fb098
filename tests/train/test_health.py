"""Numerical health: the non-finite guard, gradient clipping, regularisers and warnings."""

from __future__ import annotations

import math

import pytest
import torch

import gsnb
from gsnb.train import TrainConfig, Trainer, TrainingHealthWarning
from gsnb.train import regularizers as reg
from gsnb.train.health import (
    HEALTH_SIGNALS,
    HealthMonitor,
    health_signals,
    health_sums,
    signals_from_sums,
)


class PoisonedRenderer:
    """gsnb.render whose image holds a NaN at the given call indices."""

    def __init__(self, *poisoned: int) -> None:
        self.poisoned = set(poisoned)
        self.calls = 0

    def __call__(self, *args, **kwargs):
        out = gsnb.render(*args, check_values=False, **kwargs)
        if self.calls in self.poisoned:
            out.rgb = out.rgb * torch.tensor(math.nan)
        self.calls += 1
        return out


def snapshot(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.splats.items()}


def test_non_finite_step_is_skipped_and_counted(make_scene) -> None:
    trainer = Trainer(make_scene(), TrainConfig(steps=10), renderer=PoisonedRenderer(2))
    trainer.run(2)
    before = snapshot(trainer)
    adam = {g["name"]: trainer.optimizer.state[g["params"][0]]["exp_avg"].clone()
            for g in trainer.optimizer.param_groups}  # fmt: skip
    with pytest.warns(TrainingHealthWarning, match="loss is NaN or Inf; the step was skipped"):
        m = trainer.step()
    assert m.skipped and m.skipped_total == 1 and trainer.skipped_steps == 1
    assert not math.isfinite(m.loss) and m.warnings
    assert all(torch.equal(before[k], trainer.model.splats[k]) for k in before)
    for g in trainer.optimizer.param_groups:
        assert torch.equal(adam[g["name"]], trainer.optimizer.state[g["params"][0]]["exp_avg"])
    m = trainer.step()  # the next step is healthy again
    assert not m.skipped and m.skipped_total == 1 and math.isfinite(m.loss) and not m.warnings
    assert all(bool(torch.isfinite(p).all()) for p in trainer.model.splats.values())


def test_without_the_guard_nan_reaches_the_model(make_scene) -> None:
    config = TrainConfig(steps=10, skip_nonfinite=False)
    trainer = Trainer(make_scene(), config, renderer=PoisonedRenderer(0))
    with pytest.warns(TrainingHealthWarning, match="may now hold NaN"):
        trainer.step()
    with pytest.warns(TrainingHealthWarning, match="the model holds NaN"):
        trainer.step()
    assert trainer.skipped_steps == 0


def test_exploding_scales_warn_once_until_they_recover(make_scene) -> None:
    trainer = Trainer(make_scene(), TrainConfig(steps=10, lr_scales=0.0))
    with torch.no_grad():
        trainer.model.splats["scales"][0] = math.log(20 * trainer.extent)
    with pytest.warns(TrainingHealthWarning, match="spans 20 scene extents"):
        first = trainer.step()
    assert first.scale_max == pytest.approx(20, rel=1e-4) and first.warnings
    assert not trainer.step().warnings  # said once, not every step
    trainer.set(warn_scale=100.0)
    assert not trainer.step().warnings


def test_scale_gradient_clipping_bounds_the_first_adam_moment(make_scene) -> None:
    clip = 1e-6
    trainer = Trainer(make_scene(), TrainConfig(steps=10, scale_grad_clip=clip))
    trainer.step()
    scales = trainer.model.splats["scales"]
    moment = trainer.optimizer.state[scales]["exp_avg"]
    # after one step Adam's first moment is (1 - beta1) * the (clipped) gradient
    assert moment.norm().item() == pytest.approx(0.1 * clip, rel=1e-3)
    free = Trainer(make_scene(), TrainConfig(steps=10))
    free.step()
    assert free.optimizer.state[free.model.splats["scales"]]["exp_avg"].norm() > 100 * 0.1 * clip


@pytest.mark.parametrize("knob", ["aniso_reg", "big_scale_reg"])
def test_regularisers_enter_the_loss(make_scene, knob: str) -> None:
    data = make_scene()
    settings = {"steps": 10, "big_scale_limit": 0.001, "warn_scale": 0.0}
    plain = Trainer(data, TrainConfig(**settings))
    weighted = Trainer(data, TrainConfig(**settings, **{knob: 2.0}))
    for t in (plain, weighted):
        with torch.no_grad():
            t.model.splats["scales"][:, 0] += 4.0  # long, thin and large
    scales = weighted.model.splats["scales"].detach()
    if knob == "aniso_reg":
        term = reg.anisotropy(scales, 10.0)
    else:
        term = reg.big_scale(scales, weighted.extent, 0.001)
    assert term > 0
    gap = weighted.step().loss - plain.step().loss
    assert gap == pytest.approx(2.0 * term.item(), rel=1e-4)


def test_anisotropy_regulariser_reduces_anisotropy(make_scene) -> None:
    data = make_scene()
    runs = {}
    for weight in (0.0, 1.0):
        t = Trainer(data, TrainConfig(steps=30, aniso_reg=weight, aniso_max_ratio=1.5))
        with torch.no_grad():
            t.model.splats["scales"][:, 0] += 1.0
        t.run()
        runs[weight] = t.history[-1].anisotropy
    assert runs[1.0] < runs[0.0]


def test_regulariser_functions() -> None:
    s = torch.log(torch.tensor([[1.0, 1.0, 1.0], [30.0, 1.0, 1.0]]))
    assert reg.anisotropy(s, 10.0).item() == pytest.approx(10.0)
    assert reg.big_scale(s, extent=10.0, limit=1.0).item() == pytest.approx(1.0)
    assert reg.scale_l1(s).item() == pytest.approx((3 + 32) / 6)
    assert reg.opacity_l1(torch.tensor([0.0, 100.0])).item() == pytest.approx(0.75)


def test_health_signals_and_monitor() -> None:
    splats = {
        "scales": torch.log(torch.tensor([[2.0, 1.0, 1.0], [8.0, 1.0, 0.5]])),
        "opacities": torch.tensor([0.0, 0.0]),
        "means": torch.tensor([[0.0, 0.0, math.nan], [0.0, 0.0, 0.0]]),
    }
    values = health_signals(splats, extent=4.0)
    assert list(values) == list(HEALTH_SIGNALS)
    assert values["scale_max"] == pytest.approx(2.0)
    assert values["anisotropy"] == pytest.approx(math.sqrt(2.0 * 16.0))
    assert values["anisotropy_max"] == pytest.approx(16.0)
    assert values["mean_opacity"] == pytest.approx(0.5)
    assert values["params_finite"] == 0.0
    monitor = HealthMonitor()
    with pytest.warns(TrainingHealthWarning):
        assert len(monitor.check(1, {"loss": 1.0, "grads_finite": 0.0}, 10, True)) == 1
    assert monitor.check(2, {"loss": 1.0, "grads_finite": 0.0}, 10, True) == []
    assert monitor.check(3, {"loss": 1.0}, 10, True) == []
    with pytest.warns(TrainingHealthWarning, match="gradient is NaN"):
        monitor.check(4, {"loss": 1.0, "grads_finite": 0.0}, 10, True)


def test_signals_from_sums_match_direct_statistics() -> None:
    gen = torch.Generator().manual_seed(0)
    log_s = torch.randn(50, 3, generator=gen) - 3.0
    logits = torch.randn(50, generator=gen)
    splats = {"scales": log_s, "opacities": logits, "means": torch.zeros(50, 3)}
    got = health_signals(splats, extent=2.5)
    top, low = log_s.amax(-1), log_s.amin(-1)
    assert got["scale_max"] == pytest.approx(math.exp(top.max()) / 2.5, rel=1e-6)
    assert got["scale_spread"] == pytest.approx(top.std().item(), rel=1e-5)
    assert got["anisotropy"] == pytest.approx(torch.exp((top - low).mean()).item(), rel=1e-6)
    assert got["anisotropy_max"] == pytest.approx(torch.exp((top - low).max()).item(), rel=1e-6)
    assert got["mean_opacity"] == pytest.approx(torch.sigmoid(logits).mean().item(), rel=1e-6)
    assert got["params_finite"] == 1.0
    one = health_signals({"scales": log_s[:1], "opacities": logits[:1]}, extent=1.0)
    assert one["scale_spread"] == 0.0
    huge = health_signals({"scales": torch.full((2, 3), 1000.0), "opacities": logits[:2]}, 1.0)
    assert huge["scale_max"] == math.inf


def test_gradient_sums_flag_overflow_and_survive_an_empty_model() -> None:
    splats = {"scales": torch.zeros(2, 3), "opacities": torch.zeros(2)}
    huge = [torch.full((3,), 3e19)]  # its squared norm is past float32's range
    signals = signals_from_sums(health_sums(splats, huge).tolist(), 2, 1.0)
    assert signals["grads_finite"] == 0.0 and math.isfinite(signals["grad_norm"])
    empty = {"scales": torch.zeros(0, 3), "opacities": torch.zeros(0)}
    sums = health_sums(empty, [torch.full((4,), 0.5)]).tolist()
    signals = signals_from_sums(sums, 0, 1.0)
    assert signals["grads_finite"] == 1.0 and signals["grad_norm"] == 1.0
    assert math.isnan(signals["scale_max"]) and signals["params_finite"] == 1.0
