"""Checkpoints: exact resumption, atomic writes under faults, clear errors for bad files."""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import signal
from pathlib import Path

import pytest
import torch

from gsnb.model import GaussianModel
from gsnb.train import CheckpointError, DefaultStrategy, MCMCStrategy, TrainConfig, Trainer
from gsnb.train.checkpoint import read_checkpoint


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
                                   grow_grad2d=0.005)  # fmt: skip
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
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        read_checkpoint(tmp_path / "noise.pt")
    GaussianModel.from_points(torch.rand(4, 3), torch.rand(4, 3)).save(tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match=r"format .gsnb-model-1.*GaussianModel\.load"):
        Trainer.resume_from(tmp_path / "model.pt", data)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Trainer.resume_from(tmp_path / "missing.pt", data)
    payload = torch.load(good, weights_only=True)
    payload["config"]["steps"] = -5
    torch.save(payload, tmp_path / "bad_config.pt")
    with pytest.raises(CheckpointError, match="invalid settings"):
        Trainer.resume_from(tmp_path / "bad_config.pt", data)


def test_resume_on_other_views_is_refused(make_scene, tmp_path: Path) -> None:
    data = make_scene(views=4)
    Trainer(data, TrainConfig(steps=2)).save_checkpoint(tmp_path / "c.pt")
    fewer = dataclasses.replace(data, views=data.views[:3], train_ids=[0, 1, 2])
    with pytest.raises(CheckpointError, match="trained on 4 views"):
        Trainer.resume_from(tmp_path / "c.pt", fewer)


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
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt"]  # no partial file
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
