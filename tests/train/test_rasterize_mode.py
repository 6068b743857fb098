"""The trainer's ``rasterize_mode`` (and ``filter3d``): a live knob, an option, a checkpoint
setting, used by every render of the trainer."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

import gsnb
from gsnb.train import TrainConfig, Trainer
from gsnb.train.options import add_config_options
from gsnb.train.rendering import BackendRenderer, render_model


def test_option_parses_into_the_config() -> None:
    parser = argparse.ArgumentParser()
    add_config_options(parser)
    args = parser.parse_args(["--rasterize-mode", "antialiased", "--filter3d"])
    config = TrainConfig.from_args(args)
    assert config.rasterize_mode == "antialiased" and config.filter3d
    assert TrainConfig.from_args(parser.parse_args([])).rasterize_mode == "classic"
    with pytest.raises(SystemExit):
        parser.parse_args(["--rasterize-mode", "mip"])
    with pytest.raises(ValueError, match="rasterize_mode"):
        TrainConfig(rasterize_mode="mip")


def test_a_live_knob_that_changes_the_trainers_renders(make_scene) -> None:
    data = make_scene()
    trainer = Trainer(data, TrainConfig(steps=10, sh_degree=0))
    names = [k.name for k in trainer.knobs()]
    assert "rasterize_mode" in names and "filter3d" in names
    view = data.train[0]
    classic = trainer.render_view(view).rgb
    trainer.set(rasterize_mode="antialiased")
    trainer.run(1)  # knob changes apply at the next step
    assert trainer.config.rasterize_mode == "antialiased"
    aa = trainer.render_view(view).rgb
    a = trainer.model.activated()
    want = gsnb.render(
        a["means"], a["quats"], a["scales"], a["opacities"], a["colors"], view.viewmat[None],
        view.K[None], view.width, view.height, sh_degree=0, backgrounds=trainer.background,
        rasterize_mode="antialiased",
    )  # fmt: skip
    torch.testing.assert_close(aa, want.rgb)
    assert (aa - classic).abs().max() > 1e-4
    # Evaluation renders the same way.
    assert trainer.evaluate("train").num_views == len(data.train)


def test_render_model_passes_the_mode_only_when_not_classic(make_scene) -> None:
    calls: list[dict] = []

    def renderer(*args, **kwargs):
        calls.append(kwargs)
        return gsnb.render(*args, **kwargs)

    trainer = Trainer(make_scene(), TrainConfig(steps=5, sh_degree=0), renderer=renderer)
    view = trainer.dataset.train[0]
    trainer.render_view(view)
    assert "rasterize_mode" not in calls[-1]  # a renderer without the option still works
    trainer.set(rasterize_mode="antialiased")
    trainer.run(1)
    assert calls[-1]["rasterize_mode"] == "antialiased"
    out = render_model(trainer.model, BackendRenderer("reference"), view.viewmat[None],
                       view.K[None], 16, 16, rasterize_mode="antialiased")  # fmt: skip
    assert out.rgb.shape == (1, 16, 16, 3)


def test_settings_round_trip_through_a_checkpoint(make_scene, tmp_path: Path) -> None:
    data = make_scene()
    config = TrainConfig(steps=10, sh_degree=0, rasterize_mode="antialiased", filter3d=True)
    trainer = Trainer(data, config)
    trainer.run(2)
    trainer.save_checkpoint(tmp_path / "c.pt")
    again = Trainer.resume_from(tmp_path / "c.pt", data)
    assert again.config.rasterize_mode == "antialiased" and again.config.filter3d
    view = data.train[0]
    torch.testing.assert_close(again.render_view(view).rgb, trainer.render_view(view).rgb)
    again.run()
    assert again.step_count == 10
