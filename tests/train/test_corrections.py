"""Exposure and pose corrections in a run: checkpoints, skipped steps, options and knobs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gsnb.cli import main
from gsnb.live.controls import control_for
from gsnb.train import TrainConfig, Trainer
from gsnb.train.checkpoint import read_checkpoint
from gsnb.train.knobs import describe_knobs
from tests.train.known_scene import known_scene, starting_copy, with_photos
from tests.train.test_health import PoisonedRenderer


def scene(tmp_path: Path):
    """The known scene at 16 px, photos darkened unevenly, view 0 held out."""
    data, model, photos = known_scene(tmp_path / "scene", size=16)
    dimmed = [p * (0.8 + 0.03 * i) for i, p in enumerate(photos)]
    return with_photos(data, tmp_path / "dimmed", dimmed, test_ids=[0]), model


def both(steps: int = 20) -> TrainConfig:
    return TrainConfig(
        steps=steps, backend="reference", sh_degree=0, exposure=True, pose_refine=True,
        lr_pose=1e-3,
    )  # fmt: skip


def corrections_of(trainer: Trainer) -> dict[str, torch.Tensor]:
    fix = trainer.corrections
    out = {"exposure": fix.exposure.matrices.detach().clone()}
    out["poses"] = fix.poses.params.detach().clone()
    for name, opt in (("exposure", fix.exposure.optimizer), ("poses", fix.poses.optimizer)):
        state = opt.state[opt.param_groups[0]["params"][0]]
        out[f"{name} exp_avg"] = state["exp_avg"].clone()
        out[f"{name} exp_avg_sq"] = state["exp_avg_sq"].clone()
    return out


def test_checkpoint_round_trip_continues_the_corrections_exactly(tmp_path: Path) -> None:
    data, truth = scene(tmp_path)
    trainer = Trainer(data, both(), model=starting_copy(truth, data.background))
    trainer.run(8)
    path = trainer.save_checkpoint(tmp_path / "run" / "checkpoint.pt")
    saved = corrections_of(trainer)
    trainer.run(4)
    straight = corrections_of(trainer)

    payload = read_checkpoint(path)  # torch.load(weights_only=True), checksum checked
    assert set(payload["corrections"]) == {"exposure", "poses"}
    assert len(payload["data_order"]["views"]) == len(data.train) + 1  # view 0's left half

    resumed = Trainer.resume_from(path, data)
    assert resumed.config.train_test_exp is True
    assert all(torch.equal(v, corrections_of(resumed)[k]) for k, v in saved.items())
    resumed.run(4)
    again = corrections_of(resumed)
    assert all(torch.equal(v, again[k]) for k, v in straight.items()), [
        k for k, v in straight.items() if not torch.equal(v, again[k])
    ]
    assert not torch.equal(saved["poses"], again["poses"])


def test_a_checkpoint_without_corrections_starts_them_fresh(tmp_path: Path) -> None:
    data, _ = scene(tmp_path)
    trainer = Trainer(data, TrainConfig(steps=5, backend="reference", sh_degree=0))
    trainer.run(2)
    path = trainer.save_checkpoint(tmp_path / "plain.pt")
    resumed = Trainer.resume_from(path, data)
    assert torch.equal(resumed.corrections.poses.params, torch.zeros(len(data.train), 6))
    assert not resumed.corrections.exposure.optimizer.state


def test_a_non_finite_step_leaves_the_corrections_alone(tmp_path: Path) -> None:
    data, truth = scene(tmp_path)
    renderer = PoisonedRenderer(3)
    trainer = Trainer(data, both(), model=starting_copy(truth, data.background), renderer=renderer)
    trainer.run(3)
    before = corrections_of(trainer)
    with pytest.warns(UserWarning, match="skipped"):
        assert trainer.step().skipped
    after = corrections_of(trainer)
    assert all(torch.equal(v, after[k]) for k, v in before.items())
    trainer.step()
    assert not torch.equal(before["poses"], corrections_of(trainer)["poses"])


def test_densification_leaves_the_corrections_alone(tmp_path: Path) -> None:
    data, truth = scene(tmp_path)
    trainer = Trainer(data, both(), model=starting_copy(truth, data.background))
    trainer.set(refine_start_iter=3, refine_every=4, grow_grad2d=1e-9)  # step 5 grows
    trainer.run(4)
    count, before = trainer.num_gaussians, corrections_of(trainer)
    metrics = trainer.step()
    assert trainer.num_gaussians > count and metrics.events
    fix = trainer.corrections
    for opt in (fix.exposure.optimizer, fix.poses.optimizer):  # one more Adam step, no reset
        assert float(opt.state[opt.param_groups[0]["params"][0]]["step"]) == 5
    after = corrections_of(trainer)
    assert all(v.shape == after[k].shape for k, v in before.items())


def test_options_and_knobs_list_them(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for option in ("--exposure", "--lr-exposure", "--lr-exposure-final", "--train-test-exp",
                   "--pose-refine", "--lr-pose", "--pose-weight-decay"):  # fmt: skip
        assert option in text, option
    knobs = {k.name: k for k in describe_knobs(TrainConfig())}
    assert control_for(knobs["exposure"]).kind == control_for(knobs["pose_refine"]).kind
    assert control_for(knobs["exposure"]).kind == "checkbox"
    assert control_for(knobs["lr_pose"]).kind == "log_slider"
    assert "train_test_exp" not in knobs  # fixed when the run starts


def test_a_resume_keeps_applying_corrections_that_learned_nothing(tmp_path: Path) -> None:
    # Corrections that took Adam steps stay applied once pose_refine is off, even when the
    # steps left them at zero (a zero rate): the moved Gaussians differ from the unmoved ones
    # by rounding, so a resumed run must move them too.
    data, truth = scene(tmp_path)
    config = TrainConfig(steps=20, backend="reference", sh_degree=0, pose_refine=True, lr_pose=0.0)
    trainer = Trainer(data, config, model=starting_copy(truth, data.background))
    trainer.run(2)
    path = trainer.save_checkpoint(tmp_path / "checkpoint.pt")
    resumed = Trainer.resume_from(path, data)
    for run in (trainer, resumed):
        run.set(pose_refine=False)
        run.run(3)
    for name, value in trainer.model.splats.items():
        assert torch.equal(value, resumed.model.splats[name]), name
