"""``process``: photos and a video of the synthetic scene posed as rendered; stages reused; an
interrupted run leaves no model; the fox against its own COLMAP model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gsnb.data.colmap import read_colmap_model
from gsnb.data.dataset import load_dataset
from gsnb.data.sfm import ProcessOptions, ProcessSummary, process
from gsnb.data.sfm.agreement import compare_poses
from tests.data.sfm.conftest import Capture, film


def recovered(out: Path) -> dict[str, np.ndarray]:
    """Image name -> world-to-camera ``[4, 4]`` of the processed model."""
    model = read_colmap_model(out / "sparse" / "0")
    return {name: model.viewmat(i) for i, (name, *_) in model.images.items()}


def agreement(out: Path, truth: dict[str, np.ndarray]):
    poses = recovered(out)
    names = sorted(poses)
    return compare_poses(np.stack([poses[n] for n in names]), np.stack([truth[n] for n in names]))


def test_photos_register_and_match_the_rendered_poses(photos: Capture, processed_photos: Path):
    summary = ProcessSummary.read(processed_photos)
    assert summary is not None and summary.registered == summary.images_in == 24
    assert summary.unregistered == [] and summary.matcher == "exhaustive"
    assert summary.points > 300 and summary.mean_reprojection_error < 1.0
    assert set(summary.seconds) == {"images", "features", "matching", "mapping", "undistortion"}
    assert set(recovered(processed_photos)) == set(photos.truth)
    fit = agreement(processed_photos, photos.truth)
    assert fit.center_error < 0.01, fit
    assert fit.rotation_error_deg < 1.0, fit
    data = load_dataset(processed_photos)  # what gsnb train reads
    assert len(data.views) == 24 and len(data.points) == summary.points


def test_rerun_reuses_every_stage(photos: Capture, processed_photos: Path):
    before = recovered(processed_photos)
    summary = process(photos.path, processed_photos)
    assert summary.reused == ["images", "features", "matching", "mapping"]
    after = recovered(processed_photos)
    assert all(np.allclose(before[n], after[n]) for n in before)


def test_changed_options_redo_the_later_stages(photos: Capture, processed_photos: Path, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(processed_photos, out)
    summary = process(photos.path, out, ProcessOptions(matcher="sequential", overlap=6, threads=1))
    assert summary.reused == ["images", "features"]
    assert summary.matcher == "sequential" and summary.registered == 24


def test_interrupted_run_leaves_no_model(
    photos: Capture, processed_photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import pycolmap

    out = tmp_path / "copy"
    shutil.copytree(processed_photos, out)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pycolmap, "undistort_images", interrupted)
    with pytest.raises(KeyboardInterrupt):
        process(photos.path, out)
    assert not (out / "sparse").exists() and not (out / "process.json").exists()
    with pytest.raises(FileNotFoundError, match="no dataset found"):
        load_dataset(out)
    monkeypatch.undo()
    summary = process(photos.path, out)
    assert summary.reused == ["images", "features", "matching", "mapping"]
    assert (out / "sparse" / "0" / "cameras.bin").is_file()


def test_an_interrupted_redo_leaves_no_stage_to_reuse(
    photos: Capture, processed_photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from gsnb.data.sfm import pipeline

    out = tmp_path / "copy"
    shutil.copytree(processed_photos, out)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "copy_photos", interrupted)
    with pytest.raises(KeyboardInterrupt):  # other options: the images are being redone
        process(photos.path, out, ProcessOptions(max_image_size=128, threads=1))
    # The images folder is half rebuilt: no stage may be taken as finished any more.
    assert json.loads((out / "work" / "stages.json").read_text())["stages"] == {}


def test_video_frames_register_and_match_the_rendered_poses(photos: Capture, tmp_path: Path):
    capture = film(photos, tmp_path / "walk.mp4", count=24)
    out = tmp_path / "scene"
    summary = process(capture.path, out, ProcessOptions(frames=24, threads=1))
    assert summary.kind == "video" and summary.matcher == "sequential"
    assert summary.registered == summary.images_in == 24
    assert set(recovered(out)) == set(capture.truth)  # the sharp frame of each pair, every time
    fit = agreement(out, capture.truth)
    assert fit.center_error < 0.01, fit
    assert fit.rotation_error_deg < 1.0, fit


def test_fox_agrees_with_its_own_colmap_model(fox: Path, fox_model, tmp_path: Path):
    summary = process(fox / "images", tmp_path / "fox", ProcessOptions(max_image_size=320))
    assert summary.registered == summary.images_in == 67
    truth = {name: fox_model.viewmat(i) for i, (name, *_) in fox_model.images.items()}
    fit = agreement(tmp_path / "fox", truth)
    assert fit.center_error < 0.01, fit
    assert fit.rotation_error_deg < 1.0, fit
