"""Checkpoints: exact resumption, atomic writes under faults, clear errors for bad files,
and the training state read and written without a trainer."""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import signal
from pathlib import Path

import pytest
import torch

from gsnb.data.dataset import View
from gsnb.model import GaussianModel
from gsnb.train import CheckpointError, DefaultStrategy, MCMCStrategy, TrainConfig, Trainer
from gsnb.train.checkpoint import (
    read_checkpoint,
    read_training_state,
    training_payload,
    write_checkpoint,
)
from gsnb.train.inputs import ViewOrder
from gsnb.train.optim import learning_rates, make_optimizer


def params_equal(a: Trainer, b: Trainer) -> bool:
    return all(torch.equal(a.model.splats[k], b.model.splats[k]) for k in a.model.splats)


@pytest.mark.slow
def test_resume_continues_exactly_like_an_uninterrupted_run(make_scene, tmp_path: Path) -> None:
    """2000 steps in one go versus 1000, save, load, 1000: bitwise-equal parameters and Adam.

    The run crosses SH degree changes, densification (clone/split/prune), two
    opacity resets and random backgrounds, so every piece of state must survive.
    """
    data = make_scene()

    def trainer() -> Trainer:
        config = TrainConfig(steps=2000, sh_degree=1, sh_degree_interval=300,
                             random_background=True)  # fmt: skip
        strategy = DefaultStrategy(refine_start_iter=100, refine_every=100, reset_every=700,
                                   grow_grad2d=0.005, opacity_reset=True)  # fmt: skip
        return Trainer(data, config, strategy=strategy)

    # One run of 2000 steps that checkpoints at step 1000 (saving changes nothing) ...
    whole = trainer()
    whole.run(1000)
    whole.set(ssim_lambda=0.2)  # a queued knob travels with the checkpoint
    whole.save_checkpoint(tmp_path / "half.pt")
    whole.run()
    events = [m.events for m in whole.history if m.events]
    assert sum("reset" in e for e in events) == 2 and any("split" in e for e in events)
    # ... against a new trainer that loads the checkpoint and trains the second 1000 steps.
    second = Trainer.resume_from(tmp_path / "half.pt", data)
    assert second.step_count == 1000 and second.pending_knobs == {"ssim_lambda": 0.2}
    second.run()
    assert second.step_count == 2000
    assert second.num_gaussians == whole.num_gaussians
    assert params_equal(whole, second)
    for name in ("exp_avg", "exp_avg_sq"):
        for ga, gb in zip(whole.optimizer.param_groups, second.optimizer.param_groups, strict=True):
            sa = whole.optimizer.state[ga["params"][0]][name]
            sb = second.optimizer.state[gb["params"][0]][name]
            assert torch.equal(sa, sb), (ga["name"], name)


def test_mcmc_resume_is_exact(make_scene, tmp_path: Path) -> None:
    data = make_scene()
    strategy = {"refine_start_iter": 2, "refine_every": 3, "cap_max": 40}
    whole = Trainer(data, TrainConfig(steps=20), strategy=MCMCStrategy(**strategy))
    whole.run()
    first = Trainer(data, TrainConfig(steps=20), strategy=MCMCStrategy(**strategy))
    first.run(9)
    first.save_checkpoint(tmp_path / "c.pt")
    second = Trainer.resume_from(tmp_path / "c.pt", data)
    assert isinstance(second.strategy, MCMCStrategy) and second.strategy.cap_max == 40
    second.run()
    assert params_equal(whole, second)


def test_error_densify_resume_is_exact(make_scene, tmp_path: Path) -> None:
    data = make_scene()
    settings = {"error_densify": True, "grow_error": 1e-3, "refine_start_iter": 2}
    settings["refine_every"] = 4
    whole = Trainer(data, TrainConfig(steps=12), strategy=DefaultStrategy(**settings))
    whole.run()
    assert any(m.events for m in whole.history)
    first = Trainer(data, TrainConfig(steps=12), strategy=DefaultStrategy(**settings))
    first.run(6)  # between two refine steps: the kept error travels with the checkpoint
    first.save_checkpoint(tmp_path / "c.pt")
    second = Trainer.resume_from(tmp_path / "c.pt", data)
    assert second.strategy.error_densify
    assert torch.equal(second.strategy_state["error"], first.strategy_state["error"])
    second.run()
    assert params_equal(whole, second)


def test_checkpoint_holds_data_only(make_scene, tmp_path: Path) -> None:
    trainer = Trainer(make_scene(), TrainConfig(steps=3))
    trainer.run()
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    payload = torch.load(path, weights_only=True)  # no pickled objects
    assert payload["format"] == "gsnb-trainer-1" and payload["step"] == 3
    assert payload["config"]["steps"] == 3 and payload["strategy"]["settings"]["name"] == "default"
    # the model alone loads from a trainer checkpoint too (for export)
    assert GaussianModel.load(path).num_gaussians == trainer.num_gaussians


def test_corrupt_or_foreign_checkpoints_give_clear_errors(make_scene, tmp_path: Path) -> None:
    data = make_scene()
    trainer = Trainer(data, TrainConfig(steps=2))
    good = trainer.save_checkpoint(tmp_path / "good.pt")
    raw = good.read_bytes()
    (tmp_path / "cut.pt").write_bytes(raw[: len(raw) // 3])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        Trainer.resume_from(tmp_path / "cut.pt", data)
    (tmp_path / "noise.pt").write_bytes(bytes(range(256)) * 8)
    with pytest.raises(CheckpointError, match="not a gsnb checkpoint: it is a file of another"):
        read_checkpoint(tmp_path / "noise.pt")
    GaussianModel.from_points(torch.rand(4, 3), torch.rand(4, 3)).save(tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match=r"format .gsnb-model-1.*GaussianModel\.load"):
        Trainer.resume_from(tmp_path / "model.pt", data)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Trainer.resume_from(tmp_path / "missing.pt", data)
    payload = torch.load(good, weights_only=True)
    payload["config"]["steps"] = -5
    del payload["checksum"]  # as a writer without checksums would leave it
    torch.save(payload, tmp_path / "bad_config.pt")
    with pytest.raises(CheckpointError, match="invalid settings"):
        Trainer.resume_from(tmp_path / "bad_config.pt", data)
    payload["splats"]["means"] = torch.zeros(1).expand(10_000_000, 3)  # 4 bytes stored
    torch.save(payload, tmp_path / "crafted.pt")
    with pytest.raises(CheckpointError, match=r"malformed: the tensor at \['splats'\]"):
        Trainer.resume_from(tmp_path / "crafted.pt", data)


def test_a_checkpoint_saved_before_a_setting_existed_resumes_with_its_behaviour(
    make_scene, tmp_path: Path
) -> None:
    data = make_scene()
    good = Trainer(data, TrainConfig(steps=2)).save_checkpoint(tmp_path / "good.pt")
    payload = torch.load(good, weights_only=True)
    del payload["config"]["lr_means_decay_steps"], payload["checksum"]
    for name in ("opacity_reset", "grow_grad2d", "refine_stop_iter"):
        del payload["strategy"]["settings"][name]
    torch.save(payload, tmp_path / "old.pt")
    old = Trainer.resume_from(tmp_path / "old.pt", data)
    assert old.config.lr_means_decay_steps == 0  # one decay over the run, as then
    s = old.strategy
    assert (s.opacity_reset, s.grow_grad2d, s.refine_stop_iter) == (True, 2e-4, 15_000)
    # a setting the checkpoint holds is kept, and a new one resumes with today's default
    again = Trainer.resume_from(good, data)
    assert not again.strategy.opacity_reset
    # "the strategy's choice" (-1) is saved as the period it stood for
    assert again.config.lr_means_decay_steps == DefaultStrategy.lr_means_decay_steps == 10_000


def test_the_strategys_decay_period_is_saved_as_its_value(make_scene, tmp_path: Path) -> None:
    data = make_scene()
    mcmc = Trainer(data, TrainConfig(steps=2), strategy=MCMCStrategy())
    assert mcmc.config.lr_means_decay_steps == -1
    resumed = Trainer.resume_from(mcmc.save_checkpoint(tmp_path / "m.pt"), data)
    assert resumed.config.lr_means_decay_steps == 0  # MCMC's: one decay over the run
    chosen = Trainer(data, TrainConfig(steps=2, lr_means_decay_steps=7))
    resumed = Trainer.resume_from(chosen.save_checkpoint(tmp_path / "c.pt"), data)
    assert resumed.config.lr_means_decay_steps == 7


def test_resume_on_other_views_is_refused(make_scene, tmp_path: Path) -> None:
    data = make_scene(views=4)
    Trainer(data, TrainConfig(steps=2)).save_checkpoint(tmp_path / "c.pt")
    fewer = dataclasses.replace(data, views=data.views[:3], train_ids=[0, 1, 2])
    with pytest.raises(CheckpointError, match="trained on 4 views"):
        Trainer.resume_from(tmp_path / "c.pt", fewer)


def test_resume_on_moved_cameras_is_refused(make_scene, tmp_path: Path) -> None:
    # the same views in another world frame (here: normalize_world's) would train the saved
    # Gaussians against cameras they were never fitted to
    from gsnb.data.normalize import normalize_world

    data = make_scene(views=4)
    Trainer(data, TrainConfig(steps=2)).save_checkpoint(tmp_path / "c.pt")
    moved, _ = normalize_world(data)
    with pytest.raises(CheckpointError, match="at another camera pose than this dataset's"):
        Trainer.resume_from(tmp_path / "c.pt", moved)
    assert Trainer.resume_from(tmp_path / "c.pt", data).step_count == 0  # the same frame resumes


@contextlib.contextmanager
def file_size_limit(size: int):
    """A full disk for this process: writes past ``size`` bytes fail with EFBIG."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_full_disk_leaves_the_previous_checkpoint_intact(make_scene, tmp_path: Path) -> None:
    out = tmp_path / "out"
    trainer = Trainer(make_scene(), TrainConfig(steps=10, out_dir=str(out)))
    trainer.run(2)  # ends with an automatic checkpoint in out_dir
    path = out / "checkpoint.pt"
    before = path.read_bytes()
    trainer.step()
    trainer.step()
    with file_size_limit(len(before) // 2), pytest.raises(OSError, match="could not write"):
        trainer.save_checkpoint()
    assert path.read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoint.pt",
        "checkpoints",
        "metrics.jsonl",
    ]
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step_0000002.pt"]  # no partial
    assert read_checkpoint(path)["step"] == 2
    # an automatic checkpoint that fails warns, and training goes on
    trainer.set(checkpoint_every=1)
    with file_size_limit(len(before) // 2), pytest.warns(UserWarning, match="could not write"):
        trainer.step()
    assert trainer.step_count == 5 and path.read_bytes() == before


def test_unwritable_path_raises_and_writes_nothing(make_scene, tmp_path: Path) -> None:
    trainer = Trainer(make_scene(), TrainConfig(steps=3))
    out = tmp_path / "out"
    out.mkdir()
    blocker = out / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError):
        trainer.save_checkpoint(blocker / "checkpoint.pt")
    assert [p.name for p in out.iterdir()] == ["a_file"]
    with pytest.raises(ValueError, match="no checkpoint path"):
        trainer.save_checkpoint()


def named_views(sizes: list[tuple[int, int]]) -> list[View]:
    """Views with a name and a size only (no image is read)."""
    return [
        View(f"{i:03d}.png", Path(f"{i:03d}.png"), w, h, torch.eye(3), torch.eye(4))
        for i, (w, h) in enumerate(sizes)
    ]


def test_training_state_round_trip_without_a_trainer(tmp_path: Path) -> None:
    config = TrainConfig(steps=50, sh_degree=1, ssim_lambda=0.3, lr_means_decay_steps=20)
    strategy = MCMCStrategy(cap_max=77)
    model = GaussianModel.from_points(torch.rand(12, 3), torch.rand(12, 3), sh_degree=1)
    optimizer = make_optimizer(model.splats, learning_rates(config, 0, 1.0))
    sum(p.square().sum() for p in model.splats.values()).backward()
    optimizer.step()  # Adam now holds moments
    strategy_state = strategy.initialize_state(2.0) | {"count": torch.arange(12.0)}
    generator = torch.Generator().manual_seed(5)
    torch.rand(3, generator=generator)
    order = ViewOrder(3, seed=1)
    for _ in range(4):  # into the second epoch
        order.next()
    views = named_views([(16, 12), (16, 12), (8, 6)])

    payload = training_payload(
        step=7, config=config, strategy=strategy, strategy_state=strategy_state, model=model,
        optimizer=optimizer, generator=generator, view_order=order, views=views,
        skipped_steps=2, pending_knobs={"lr_scales": 0.01},
    )  # fmt: skip
    path = write_checkpoint(tmp_path / "new" / "c.pt", payload)  # the folder is made
    state = read_training_state(path)

    assert (state.step, state.skipped_steps, state.pending_knobs) == (7, 2, {"lr_scales": 0.01})
    assert state.config == config
    assert isinstance(state.strategy, MCMCStrategy) and state.strategy.cap_max == 77
    assert all(torch.equal(state.model.splats[k], model.splats[k]) for k in model.splats)
    fresh = make_optimizer(state.model.splats, learning_rates(config, 0, 1.0))
    state.restore_optimizer(fresh)
    for ga, gb in zip(optimizer.param_groups, fresh.param_groups, strict=True):
        for key in ("exp_avg", "exp_avg_sq"):
            a, b = optimizer.state[ga["params"][0]][key], fresh.state[gb["params"][0]][key]
            assert torch.equal(a, b), (ga["name"], key)
    restored = state.strategy_state(torch.device("cpu"))
    assert restored["scene_scale"] == 2.0 and torch.equal(restored["count"], torch.arange(12.0))
    # the view order and the random draws continue where they were
    order_again, generator_again = ViewOrder(3, seed=99), torch.Generator().manual_seed(0)
    state.restore_random(order_again, generator_again)
    assert [order_again.next() for _ in range(8)] == [order.next() for _ in range(8)]
    assert torch.equal(torch.rand(4, generator=generator_again), torch.rand(4, generator=generator))
    state.check_views(views)


def test_training_state_refuses_what_does_not_fit(tmp_path: Path) -> None:
    config = TrainConfig()
    model = GaussianModel.from_points(torch.rand(6, 3), torch.rand(6, 3))
    optimizer = make_optimizer(model.splats, learning_rates(config, 0, 1.0))
    sum(p.sum() for p in model.splats.values()).backward()
    optimizer.step()
    views = named_views([(16, 12), (8, 6)])
    strategy = DefaultStrategy()
    payload = training_payload(
        step=1, config=config, strategy=strategy, strategy_state=strategy.initialize_state(1.0),
        model=model, optimizer=optimizer, generator=torch.Generator(),
        view_order=ViewOrder(2, seed=0), views=views,
    )  # fmt: skip
    state = read_training_state(write_checkpoint(tmp_path / "c.pt", payload))
    with pytest.raises(CheckpointError, match="trained on 2 views"):
        state.check_views(views[:1])
    with pytest.raises(CheckpointError, match=r"001\.png at 8x6 px but the dataset has it at 4x3"):
        state.check_views(named_views([(16, 12), (4, 3)]))
    other = GaussianModel.from_points(torch.rand(9, 3), torch.rand(9, 3))
    with pytest.raises(CheckpointError, match=r"Adam state exp_avg of means has shape \[6, 3\]"):
        state.restore_optimizer(make_optimizer(other.splats, learning_rates(config, 0, 1.0)))
    # a run on another kind of device keeps its fresh seed, with a warning
    state.payload["rng"]["device_type"] = "cuda"
    generator = torch.Generator().manual_seed(3)
    with pytest.warns(UserWarning, match="comes from a cuda run"):
        state.restore_random(ViewOrder(2, seed=0), generator)
    fresh = torch.Generator().manual_seed(3)
    assert torch.equal(torch.rand(2, generator=generator), torch.rand(2, generator=fresh))
