"""Trainer: a real short run, live knobs, callbacks, evaluation and bad inputs."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from gsnb.data.dataset import load_dataset
from gsnb.train import DefaultStrategy, MCMCStrategy, TrainConfig, Trainer
from gsnb.train.strategy import STRATEGIES


def test_fox_short_run_lowers_loss_and_raises_test_psnr(fox_path: Path, tmp_path: Path) -> None:
    full = load_dataset(fox_path, downscale=8, cache_dir=tmp_path / "cache")
    # five photos at 1/8 resolution (135 x 240): four to train on, one to test
    data = dataclasses.replace(full, views=full.views[:5], train_ids=[1, 2, 3, 4], test_ids=[0])
    trainer = Trainer(data, TrainConfig(steps=20, max_init_points=600, sh_degree=0))
    before = trainer.evaluate()
    trainer.run()
    after = trainer.evaluate()
    assert after.psnr > before.psnr + 2.0, (before.summary(), after.summary())
    losses = [m.loss for m in trainer.history]  # one epoch = the 4 training views
    assert sum(losses[-4:]) < 0.8 * sum(losses[:4])
    assert trainer.step_count == 20 and len(trainer.history) == 20


def test_metrics_stream_reports_every_step(make_scene) -> None:
    trainer = Trainer(make_scene(), TrainConfig(steps=3, sh_degree=1, sh_degree_interval=2))
    seen = []
    remove = trainer.on_step(seen.append)
    trainer.run()
    assert [m.step for m in seen] == [1, 2, 3]
    assert [m.sh_degree for m in seen] == [0, 0, 1]
    m = seen[-1]
    assert m.num_gaussians == trainer.num_gaussians == 30
    assert m.gpu_memory is None  # CPU run
    assert m.step_time > 0 and m.grad_norm > 0 and 0 < m.mean_opacity < 1
    assert m.anisotropy >= 1 and m.scale_max > 0 and math.isfinite(m.scale_spread)
    assert m.lr_means == pytest.approx(1.6e-4 * trainer.extent * 0.01 ** (2 / 3))
    remove()
    trainer.step()
    assert len(seen) == 3


def test_set_applies_at_the_next_step(make_scene) -> None:
    trainer = Trainer(make_scene(), TrainConfig(steps=100))
    trainer.step()
    trainer.set(ssim_lambda=0.0, lr_scales=0.0, grow_grad2d=1e-3)
    assert trainer.config.ssim_lambda == 0.2  # not yet
    assert trainer.pending_knobs == {"ssim_lambda": 0.0, "lr_scales": 0.0, "grow_grad2d": 1e-3}
    scales = trainer.model.splats["scales"].detach().clone()
    m = trainer.step()
    assert trainer.config.ssim_lambda == 0.0 and trainer.strategy.grow_grad2d == 1e-3
    assert m.loss == pytest.approx(m.l1)
    assert torch.equal(trainer.model.splats["scales"], scales)  # learning rate 0
    assert trainer.pending_knobs == {}


def test_set_rejects_unknown_knobs_and_bad_values(make_scene) -> None:
    trainer = Trainer(make_scene(), TrainConfig(steps=10))
    with pytest.raises(ValueError, match=r"unknown knob.*lr_mean.*valid knobs are: steps"):
        trainer.set(lr_mean=1e-3)
    with pytest.raises(ValueError, match=r"ssim_lambda=2.0 is outside its range \[0.0, 1.0\]"):
        trainer.set(ssim_lambda=2.0)
    with pytest.raises(ValueError, match="takes True or False"):
        trainer.set(random_background="yes")
    with pytest.raises(ValueError, match="unknown knob"):
        trainer.set(seed=3)  # fixed at the start, not live
    assert trainer.pending_knobs == {}


def test_knobs_describe_every_live_setting() -> None:
    from gsnb.train.knobs import describe_knobs

    names = [k.name for k in describe_knobs(TrainConfig())]
    for cls in STRATEGIES.values():
        strategy_knobs = describe_knobs(cls(), "strategy")
        assert strategy_knobs, cls
        for k in strategy_knobs + describe_knobs(TrainConfig()):
            assert len(k.doc) > 10, k.name
            assert k.type in ("int", "float", "bool", "str")
            if k.type in ("int", "float") and k.low is not None:
                assert k.value >= k.low
        clash = set(names) & {k.name for k in strategy_knobs}
        assert not clash, clash
    assert {"lr_means", "ssim_lambda", "steps", "aniso_reg", "scale_grad_clip"} <= set(names)
    assert "seed" not in names and "device" not in names


def test_evaluate_reports_psnr_ssim_and_why_lpips_is_missing(make_scene) -> None:
    trainer = Trainer(make_scene(views=4, test_every=2), TrainConfig(steps=5))
    results = []
    trainer.on_eval(results.append)
    result = trainer.evaluate()
    assert result.num_views == 2 and [r[0] for r in result.per_view] == ["000.png", "002.png"]
    assert result.psnr == pytest.approx(sum(r[1] for r in result.per_view) / 2)
    assert -1 <= result.ssim <= 1
    assert result.lpips is None and "LPIPS" in result.lpips_note
    assert results == [result]
    no_test = Trainer(make_scene(views=3), TrainConfig(steps=5))
    with pytest.raises(ValueError, match="no test views"):
        no_test.evaluate()
    assert no_test.evaluate("train").num_views == 3


def test_eval_every_evaluates_during_training(make_scene) -> None:
    trainer = Trainer(make_scene(views=4, test_every=2), TrainConfig(steps=4, eval_every=2))
    trainer.run()
    assert [e.step for e in trainer.evals] == [2, 4]


def test_mcmc_run_never_exceeds_its_cap(make_scene) -> None:
    strategy = MCMCStrategy(cap_max=33, refine_start_iter=2, refine_every=2)
    trainer = Trainer(make_scene(), TrainConfig(steps=12), strategy=strategy)
    assert torch.sigmoid(trainer.model.splats["opacities"][0]).item() == pytest.approx(0.5)
    trainer.run()
    counts = [m.num_gaussians for m in trainer.history]
    # refine steps 4, 6, 8, 10 (0-based) grow 30 -> 31 -> 32 -> 33 -> 33
    assert counts[4] == 31 and counts[-1] == 33 and max(counts) == 33


def test_densification_runs_inside_training(make_scene) -> None:
    strategy = DefaultStrategy(refine_start_iter=2, refine_every=3, grow_grad2d=1e-5)
    trainer = Trainer(make_scene(), TrainConfig(steps=6), strategy=strategy)
    trainer.run()
    events = {m.step: m.events for m in trainer.history if m.events}
    assert list(events) == [4]  # step index 3 is the first > 2 divisible by 3
    assert trainer.num_gaussians > 30
    assert trainer.optimizer.param_groups[0]["params"][0].shape[0] == trainer.num_gaussians


def test_error_densify_grows_where_the_views_are_wrong(make_scene) -> None:
    strategy = DefaultStrategy(
        error_densify=True, grow_error=1e-3, refine_start_iter=2, refine_every=3,
        grow_grad2d=1.0,  # no Gaussian grows by its gradient
    )  # fmt: skip
    trainer = Trainer(make_scene(), TrainConfig(steps=6), strategy=strategy)
    trainer.run(3)  # the error kept since the start, before step index 3 refines
    error = trainer.strategy_state["error"].clone()
    assert error.shape == (30,) and error.max() > 1e-3 and error.min() < 1e-3
    trainer.run(4)
    events = trainer.history[3].events
    grown = events.get("cloned", 0) + events.get("split", 0)
    assert grown >= int((error > 1e-3).sum()) > 0  # step index 3's own shares count too
    assert bool((trainer.strategy_state["error"] == 0).all())  # kept anew after refining
    trainer.run()
    assert trainer.strategy_state["error"].shape == (trainer.num_gaussians,)
    with pytest.raises(ValueError, match="batch_size 1"):
        Trainer(make_scene(), TrainConfig(steps=6, batch_size=2), strategy=strategy)
    batched = Trainer(make_scene(), TrainConfig(steps=6, batch_size=2))
    with pytest.raises(ValueError, match="batch_size 1"):
        batched.set(error_densify=True)
    assert batched.pending_knobs == {}


def test_error_densify_takes_a_test_views_left_half_as_the_loss_does(make_scene) -> None:
    # With the exposure transform the test views train on their left halves (3DGS's protocol).
    strategy = DefaultStrategy(error_densify=True, refine_start_iter=2, refine_every=3)
    config = TrainConfig(steps=8, exposure=True, train_test_exp=True)
    trainer = Trainer(make_scene(test_every=2), config, strategy=strategy)
    assert trainer.corrections.first_half < len(trainer.train_images.views)
    trainer.run()
    assert trainer.step_count == 8
    assert trainer.strategy_state["error"].shape == (trainer.num_gaussians,)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"points": torch.zeros(0, 3), "points_rgb": torch.zeros(0, 3)}, "non-empty"),
        ({"points": torch.full((4, 3), math.nan), "points_rgb": torch.zeros(4, 3)}, "NaN or Inf"),
        ({"views": [], "train_ids": [], "test_ids": []}, "no training views"),
        ({"extent": float("nan")}, "extent must be a positive number"),
    ],
)
def test_bad_inputs_give_clear_errors(make_scene, change: dict, message: str) -> None:
    data = dataclasses.replace(make_scene(), **change)
    with pytest.raises(ValueError, match=message):
        Trainer(data, TrainConfig(steps=5))


def test_non_finite_pose_is_named(make_scene) -> None:
    data = make_scene()
    bad = dataclasses.replace(data.views[1], viewmat=torch.full((4, 4), math.inf))
    data.views[1] = bad
    with pytest.raises(ValueError, match=r"view 001\.png has a non-finite pose"):
        Trainer(data, TrainConfig(steps=5))


def test_config_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="steps=0"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="init_opacity"):
        TrainConfig(init_opacity=1.5)
    with pytest.raises(ValueError, match="device"):
        TrainConfig(device="tpu")
    with pytest.raises(ValueError, match="unknown TrainConfig settings"):
        TrainConfig.from_dict({"stepz": 3})


def test_max_init_points_subsamples_with_the_seed(make_scene) -> None:
    data = make_scene()
    a = Trainer(data, TrainConfig(max_init_points=10, seed=1))
    b = Trainer(data, TrainConfig(max_init_points=10, seed=1))
    c = Trainer(data, TrainConfig(max_init_points=10, seed=2))
    assert a.num_gaussians == 10
    assert torch.equal(a.model.splats["means"], b.model.splats["means"])
    assert not torch.equal(a.model.splats["means"], c.model.splats["means"])


def test_adam_skips_only_sh_bands_the_render_alone_left_without_gradients(make_scene) -> None:
    trainer = Trainer(make_scene(), TrainConfig(steps=3, sh_degree=3))
    assert trainer._active_sh(0, True) == {"shN": 0}
    assert trainer._active_sh(2, True) == {"shN": 24}
    assert trainer._active_sh(3, True) is None  # every band in use
    assert trainer._active_sh(1, False) is None  # a regulariser may reach any band


def test_read_back_slots_alternate_and_outlive_queued_copies(make_scene, monkeypatch) -> None:
    # The two pinned read-back tensors (CUDA only; stood in for here): a step takes the one
    # the step in flight does not hold, and longer sums replace them only after the stream
    # has passed every copy queued into them.
    from types import SimpleNamespace

    import gsnb.train.trainer as trainer_module

    trainer = Trainer(make_scene(), TrainConfig(steps=2))
    syncs = []
    plain_empty = torch.empty
    fake_cuda = SimpleNamespace(
        Event=lambda: object(),
        current_stream=lambda index: SimpleNamespace(synchronize=lambda: syncs.append(index)),
    )
    monkeypatch.setattr(
        trainer_module.torch,
        "empty",
        lambda *a, pin_memory=False, **kw: plain_empty(*a, **kw),
    )
    monkeypatch.setattr(trainer_module.torch, "cuda", fake_cuda)

    def in_flight(values):
        trainer._in_flight = None if values is None else SimpleNamespace(values=values)

    a, event_a = trainer._read_slot(14)
    assert a.numel() == 14 and a.dtype == torch.float64 and not syncs
    in_flight(a)
    b, event_b = trainer._read_slot(14)
    assert b.data_ptr() != a.data_ptr() and event_b is not event_a
    in_flight(b)
    again, _ = trainer._read_slot(14)
    assert again.data_ptr() == a.data_ptr() and again is a  # the same view, not a new slice
    in_flight(again)
    shorter, _ = trainer._read_slot(13)  # an unfused step: fewer values, the same memory
    assert shorter.numel() == 13 and shorter.data_ptr() == b.data_ptr() and not syncs
    in_flight(None)
    longer, _ = trainer._read_slot(40)  # longer sums: new tensors, once the stream is through
    assert longer.numel() == 40 and syncs == [trainer._device_index]


def test_read_behind_waits_only_for_pose_corrections_that_learn(make_scene) -> None:
    config = TrainConfig(steps=100, pose_refine=True, pose_refine_start=50)
    trainer = Trainer(make_scene(), config)
    trainer._read_behind_until = 100  # as run() sets it
    assert trainer._reads_behind(10, early=True, fused=True)
    assert not trainer._reads_behind(50, early=True, fused=True)
    assert not trainer._reads_behind(10, early=True, fused=False)
    trainer.set(pose_refine_start=0)
    trainer._apply_pending()
    assert not trainer._reads_behind(10, early=True, fused=True)
