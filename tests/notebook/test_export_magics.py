"""Tests for gsnb/notebook/export_magics.py in a real IPython shell."""

from __future__ import annotations

import imageio_ffmpeg
import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.display import Video

from gsnb.export.ply import read_ply
from gsnb.model import GaussianModel
from gsnb.notebook.export_magics import ExportMagics


@pytest.fixture
def shell():
    ip = InteractiveShell.instance()
    ip.register_magics(ExportMagics)
    g = torch.Generator().manual_seed(2)
    points = torch.rand(60, 3, generator=g) - 0.5
    ip.user_ns["model"] = GaussianModel.from_points(points, torch.rand(60, 3, generator=g))
    yield ip
    ip.user_ns.pop("model", None)


def test_writes_a_ply_from_a_notebook_variable(shell, tmp_path, capsys):
    out = tmp_path / "scene.ply"
    assert shell.run_line_magic("gs_export", f"model --ply {out}") is None
    assert "60 Gaussians, SH degree 3" in capsys.readouterr().out
    assert torch.equal(read_ply(out)["means"], shell.user_ns["model"].splats["means"].detach())


def test_renders_and_shows_a_video_from_a_checkpoint(shell, tmp_path):
    shell.user_ns["model"].save(tmp_path / "model.pt")
    out = tmp_path / "orbit.mp4"
    line = f"{tmp_path / 'model.pt'} --video {out} --frames 3 --size 32x24 --no-progress --show"
    shown = shell.run_line_magic("gs_export", line)
    assert isinstance(shown, Video)
    assert imageio_ffmpeg.count_frames_and_secs(str(out))[0] == 3
    assert "<video" in shown._repr_html_()


def test_help_and_errors(shell, capsys):
    assert shell.run_line_magic("gs_export", "--help") is None
    assert "--render-size" in capsys.readouterr().out
    with pytest.raises(ValueError, match="nothing to do"):
        shell.run_line_magic("gs_export", "model")
    with pytest.raises(FileNotFoundError, match=r"no checkpoint or PLY file at nothing\.pt"):
        shell.run_line_magic("gs_export", "nothing.pt --ply x.ply")
    assert "--render-size" in ExportMagics.gs_export.__doc__


def test_a_trainer_variable_exports_its_model_as_its_exports_hold_it(shell, dataset, tmp_path):
    from gsnb.train import TrainConfig, Trainer
    from gsnb.train.exported import exported_model
    from tests.train.test_exported import drift_exposures

    config = TrainConfig(steps=10, max_init_points=60, sh_degree=1, device="cpu", exposure=True)
    trainer = Trainer(dataset, config)
    drift_exposures(trainer)  # their mean is not the identity
    shell.user_ns["trainer"] = trainer
    out = tmp_path / "scene.ply"
    try:
        assert shell.run_line_magic("gs_export", f"trainer --ply {out}") is None
    finally:
        shell.user_ns.pop("trainer")
    written = read_ply(out)["sh0"]
    torch.testing.assert_close(written, exported_model(trainer).splats["sh0"])
    assert (written - trainer.model.splats["sh0"].detach()).abs().max() > 0.1
