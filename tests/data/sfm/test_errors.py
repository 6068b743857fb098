"""Each input ``gsnb process`` cannot use fails with one message naming the problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from gsnb.data.sfm import ProcessError, ProcessSummary, process
from gsnb.data.synthetic import make_synthetic_scene
from tests.data.sfm.conftest import Capture


def test_empty_folder(tmp_path: Path):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "notes.txt").write_text("no photos here")
    with pytest.raises(ProcessError, match=r"no photos in .*photos"):
        process(tmp_path / "photos", tmp_path / "out")


def test_missing_input(tmp_path: Path):
    with pytest.raises(ProcessError, match="does not exist"):
        process(tmp_path / "nowhere", tmp_path / "out")


def test_corrupt_images_are_named_and_too_few_are_refused(photos: Capture, tmp_path: Path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("r_000.png", "r_001.png"):
        shutil.copy(photos.path / name, folder / name)
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    data = (photos.path / "r_002.png").read_bytes()
    (folder / "truncated.png").write_bytes(data[: len(data) // 3])
    with pytest.raises(ProcessError, match=r"2 usable image.*unreadable: broken.jpg, truncated"):
        process(folder, tmp_path / "out")


def test_video_ffmpeg_cannot_decode(tmp_path: Path):
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    with pytest.raises(ProcessError, match=r"ffmpeg cannot decode the video .*clip.mp4"):
        process(video, tmp_path / "out")


def test_fewer_than_three_registered(photos: Capture, tmp_path: Path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("r_000.png", "r_001.png"):
        shutil.copy(photos.path / name, folder / name)
    rng = np.random.default_rng(0)
    for i in range(3):  # noise: features that match nothing
        noise = rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)
        Image.fromarray(noise).resize((320, 240)).save(folder / f"noise_{i}.png")
    with pytest.raises(ProcessError, match=r"(only 2 of 5 images registered|no two images)"):
        process(folder, tmp_path / "out")
    assert not (tmp_path / "out" / "sparse").exists()


def test_split_model_keeps_the_largest_piece_and_says_so(photos: Capture, tmp_path: Path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(7):  # one arc of the ring
        shutil.copy(photos.path / f"r_{i:03d}.png", folder / f"a_{i:03d}.png")
    for i in range(12, 17):  # the opposite arc, mirrored: a world of its own for SIFT
        ImageOps.mirror(Image.open(photos.path / f"r_{i:03d}.png")).save(folder / f"b_{i:03d}.png")
    summary = process(folder, tmp_path / "out")
    assert summary.pieces[:2] == [7, 5], summary.pieces
    assert summary.registered == 7
    assert summary.unregistered == [f"b_{i:03d}.png" for i in range(12, 17)]
    assert "2 separate models holding 7, 5 images; kept the largest (7)" in summary.warnings[0]


def test_target_holds_another_dataset(photos: Capture, tmp_path: Path):
    other = make_synthetic_scene(tmp_path / "other", num_views=2, size=8, num_points=5)
    with pytest.raises(ProcessError, match="already holds a dataset that gsnb process did not"):
        process(photos.path, other)
    assert json.loads((other / "transforms.json").read_text())["w"] == 8  # untouched


def test_target_processed_from_another_input(photos: Capture, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    ProcessSummary("/somewhere/else", "photos", 3, 3, 10, 0.5).write(out)
    with pytest.raises(ProcessError, match="processed from /somewhere/else"):
        process(photos.path, out)


def test_target_inside_the_input(photos: Capture):
    with pytest.raises(ProcessError, match="is inside the input"):
        process(photos.path, photos.path / "scene")
