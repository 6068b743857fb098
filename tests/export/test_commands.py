"""Tests for gsnb/export/commands.py through the real ``gsnb`` entry point."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pytest
import torch

from gsnb.cameras import camera_centres
from gsnb.cli import main
from gsnb.export import paths
from gsnb.export.commands import VideoOptions, add_video_options, camera_path, training_cameras
from gsnb.export.ply import read_ply, write_ply
from gsnb.model import GaussianModel

FOX = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "fox"
SMALL = ["--size", "64x48", "--render-size", "32x24", "--no-progress"]


def _frames(path) -> int:
    return imageio_ffmpeg.count_frames_and_secs(str(path))[0]


def test_export_writes_the_checkpoint_as_ply(tmp_path, small_model, capsys):
    small_model.save(tmp_path / "model.pt")
    assert main(["export", str(tmp_path / "model.pt"), "--ply", str(tmp_path / "out.ply")]) == 0
    assert "120 Gaussians, SH degree 1" in capsys.readouterr().out
    read = read_ply(tmp_path / "out.ply")
    for key, value in small_model.splats.items():
        assert torch.equal(read[key], value.detach()), key


def test_export_errors_are_one_clear_line(tmp_path, capsys):
    assert main(["export", str(tmp_path / "absent.pt"), "--ply", str(tmp_path / "x.ply")]) == 1
    assert "no checkpoint or PLY file at" in capsys.readouterr().err
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    assert main(["export", str(tmp_path / "junk.pt"), "--ply", str(tmp_path / "x.ply")]) == 1
    assert "junk.pt is not a gsnb checkpoint: it is a file of another format" in (
        capsys.readouterr().err
    )
    assert sorted(os.listdir(tmp_path)) == ["junk.pt"]


def test_a_damaged_checkpoint_is_named_without_torchs_advice(tmp_path, small_model, capsys):
    small_model.save(tmp_path / "model.pt")
    whole = (tmp_path / "model.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(whole[: len(whole) // 2])
    assert main(["export", str(tmp_path / "cut.pt"), "--ply", str(tmp_path / "x.ply")]) == 1
    err = capsys.readouterr().err
    assert "cut.pt is not a readable gsnb checkpoint (truncated or corrupt: " in err
    assert "miniz" not in err and err.count("\n") == 1
    # a zip of code (a pickled object): never loaded, and no advice to load it as code
    torch.save({"format": "x", "obj": argparse.Namespace(a=1)}, tmp_path / "code.pt")
    assert main(["export", str(tmp_path / "code.pt"), "--ply", str(tmp_path / "x.ply")]) == 1
    err = capsys.readouterr().err
    assert "objects other than tensors and plain data, which gsnb never loads" in err
    assert "weights_only" not in err and err.count("\n") == 1


def test_export_of_a_run_folder_takes_its_checkpoint(tmp_path, small_model, capsys):
    run = tmp_path / "run"
    run.mkdir()
    assert main(["export", str(run), "--ply", str(tmp_path / "x.ply")]) == 1
    assert "run is a folder without checkpoint.pt" in capsys.readouterr().err
    small_model.save(run / "checkpoint.pt")
    assert main(["export", str(run), "--ply", str(tmp_path / "x.ply")]) == 0
    assert read_ply(tmp_path / "x.ply")["means"].shape[0] == small_model.num_gaussians


def test_video_of_a_ply_along_an_orbit(tmp_path, small_model):
    write_ply(tmp_path / "scene.ply", small_model.splats)
    out = tmp_path / "orbit.mp4"
    assert (
        main(["video", str(tmp_path / "scene.ply"), "--out", str(out), "--frames", "5", *SMALL])
        == 0
    )
    assert _frames(out) == 5


def test_video_on_the_cpu_at_full_hd_says_how_to_make_it_faster(tmp_path, small_model, capsys):
    write_ply(tmp_path / "scene.ply", small_model.splats)
    args = ["video", str(tmp_path / "scene.ply"), "--device", "cpu", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "o.avi")]) == 1  # refused before rendering
    err = capsys.readouterr().err
    assert "rendering 120 frames of 1920x1080 on the CPU" in err and "--render-size" in err
    assert "the video is H.264 in an MP4 container" in err
    assert main([*args, *SMALL, "--frames", "2", "--out", str(tmp_path / "o.mp4")]) == 0
    assert "on the CPU" not in capsys.readouterr().err


def test_video_along_keyframes(tmp_path, small_model):
    small_model.save(tmp_path / "model.pt")
    spec = {"keyframes": [{"position": [0, -0.5, -3], "look_at": [0, 0, 0]},
                          {"position": [3, -0.5, 0], "look_at": [0, 0, 0]}]}  # fmt: skip
    (tmp_path / "path.json").write_text(json.dumps(spec))
    args = ["video", str(tmp_path / "model.pt"), "--out", str(tmp_path / "keys.mp4")]
    assert main([*args, "--path", str(tmp_path / "path.json"), "--frames", "4", *SMALL]) == 0
    assert _frames(tmp_path / "keys.mp4") == 4


def test_video_errors_name_the_fix(tmp_path, small_model, capsys):
    small_model.save(tmp_path / "model.pt")
    base = ["video", str(tmp_path / "model.pt"), "--out", str(tmp_path / "v.mp4"), *SMALL]
    assert main([*base, "--path", "train"]) == 1
    assert "give the dataset with --data" in capsys.readouterr().err
    assert main([*base, "--path", "nowhere.json"]) == 1
    assert "no file at nowhere.json" in capsys.readouterr().err
    assert main([*base, "--size", "63x48"]) == 1
    assert "even width and height" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["model.pt"]
    with pytest.raises(SystemExit):
        main([*base, "--size", "large"])
    assert "size must look like 1920x1080" in capsys.readouterr().err


def test_video_options_are_what_the_options_parse():
    parser = argparse.ArgumentParser()
    add_video_options(parser)
    assert VideoOptions.from_args(parser.parse_args([])) == VideoOptions()
    args = parser.parse_args(["--path", "train", "--frames", "5", "--background", "1,1,1", *SMALL])
    expected = VideoOptions(path="train", size=(64, 48), render_size=(32, 24), frames=5,
                            background=(1.0, 1.0, 1.0), progress=False)  # fmt: skip
    assert VideoOptions.from_args(args) == expected


def test_orbit_without_cameras_looks_at_the_gaussians(small_model):
    viewmats, Ks = camera_path("orbit", 4, (64, 48), small_model, None, 50.0)
    result = small_model.render(viewmats, Ks, 64, 48)
    assert (result.alpha.flatten(1).mean(1) > 0.05).all()  # every frame sees the scene


@pytest.fixture(scope="module")
def fox() -> Path:
    if not (FOX / "sparse" / "0").is_dir():
        pytest.skip(f"the fox capture is not at {FOX.resolve()} (it lives in ../shared/data/fox)")
    return FOX.resolve()


def test_paths_follow_the_fox_training_cameras(fox, tmp_path):
    cameras = training_cameras(fox)
    assert cameras.viewmats.shape == (67, 4, 4) and cameras.size == (1080, 1920)
    orbit = paths.fit_orbit(cameras.viewmats)
    distances = np.linalg.norm(
        camera_centres(cameras.viewmats.double().numpy()) - orbit.centre, axis=1
    )
    assert distances.std() / distances.mean() < 0.5  # the fox cameras circle the focus point
    model = GaussianModel.from_points(torch.zeros(1, 3), torch.zeros(1, 3))
    viewmats, Ks = camera_path("train", 20, (54, 96), model, cameras, 50.0)
    torch.testing.assert_close(viewmats[0], cameras.viewmats[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(
        Ks[:, 1, 1], torch.full((20,), float(cameras.Ks[0, 1, 1]) / 20), rtol=2e-3, atol=0
    )


def test_video_of_fox_points_through_the_cli(fox, tmp_path):
    from gsnb.data.dataset import load_dataset

    dataset = load_dataset(fox, test_every=0)
    keep = torch.arange(0, dataset.points.shape[0], 10)
    GaussianModel.from_points(dataset.points[keep], dataset.points_rgb[keep], sh_degree=0).save(
        tmp_path / "fox.pt"
    )
    out = tmp_path / "fox.mp4"
    args = ["video", str(tmp_path / "fox.pt"), "--out", str(out), "--data", str(fox)]
    assert (
        main(
            [
                *args,
                "--path",
                "train",
                "--frames",
                "3",
                "--size",
                "36x64",
                "--render-size",
                "18x32",
                "--no-progress",
            ]
        )
        == 0
    )
    assert _frames(out) == 3


def test_a_video_without_data_uses_the_background_the_model_was_trained_over(tmp_path):
    """A white-background scene, its dataset not given: the frames are white, not black."""
    from gsnb.data.dataset import load_dataset
    from gsnb.data.synthetic import make_synthetic_scene
    from gsnb.train import TrainConfig, Trainer

    data = load_dataset(make_synthetic_scene(tmp_path / "scene", num_views=4, size=16))
    assert data.background == (1.0, 1.0, 1.0)
    trainer = Trainer(data, TrainConfig(steps=1, device="cpu"))
    path = trainer.save_checkpoint(tmp_path / "checkpoint.pt")
    model = GaussianModel.load(path)
    assert model.background == (1.0, 1.0, 1.0)
    with torch.no_grad():
        model.splats["opacities"].fill_(-30.0)  # nothing drawn: only the background shows
    from gsnb.export.commands import make_video

    out = make_video(
        model, tmp_path / "v.mp4", VideoOptions(size=(32, 32), frames=2, progress=False)
    )
    import imageio.v2 as imageio

    frame = imageio.mimread(out)[0]
    assert frame.min() > 240  # white, up to H.264's rounding
