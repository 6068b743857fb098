"""Photos copied upright and downscaled, unreadable ones skipped by name; sharpest video frames."""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import imageio.v2 as iio
import numpy as np
from PIL import Image

from gsnb.data.sfm.frames import copy_photos, extract_frames, frame_window


def test_exif_orientation_is_applied(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    image = Image.new("RGB", (60, 40), (200, 10, 10))
    image.paste((10, 10, 200), (0, 0, 20, 40))  # a blue left edge
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: display rotated 90 degrees clockwise
    image.save(src / "phone.jpg", exif=exif.tobytes())
    got = copy_photos(src, tmp_path / "dst")
    upright = Image.open(tmp_path / "dst" / "phone.jpg")
    assert got.names == ["phone.jpg"] and upright.size == (40, 60)
    top = np.asarray(upright)[2, 20]
    assert top[2] > 150 and top[0] < 80  # the blue edge is now at the top


def test_max_size_and_unreadable_photos(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    Image.new("RGB", (400, 300)).save(src / "a.png")
    Image.new("RGB", (100, 80)).save(src / "b.tif")
    buffer = io.BytesIO()
    Image.new("RGB", (400, 300)).save(buffer, "JPEG")
    (src / "cut.jpg").write_bytes(buffer.getvalue()[:200])
    got = copy_photos(src, tmp_path / "dst", max_size=200)
    assert got.names == ["a.png", "b.png"] and list(got.skipped) == ["cut.jpg"]
    assert Image.open(tmp_path / "dst" / "a.png").size == (200, 150)
    assert Image.open(tmp_path / "dst" / "b.png").size == (100, 80)


def test_frame_window():
    assert frame_window(300, 30.0, 2.0, None) == 15
    assert frame_window(300, 30.0, None, 60) == 5
    assert frame_window(300, 30.0, None, None) == 15
    assert frame_window(10, 30.0, None, 60) == 1


def test_sharpest_frame_of_each_window_is_kept(tmp_path: Path):
    rng = np.random.default_rng(0)
    sharp = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for _ in range(4)]
    frames = []
    for i, image in enumerate(sharp):  # the sharp frame sits at a different place in each triple
        blurred = cv2.GaussianBlur(image, (0, 0), 3.0)
        triple = [blurred, blurred, blurred]
        triple[i % 3] = image
        frames += triple
    iio.mimwrite(tmp_path / "v.mp4", frames, fps=6, codec="libx264", quality=9)
    got = extract_frames(tmp_path / "v.mp4", tmp_path / "out", frames=4, max_size=32)
    assert got.names == [f"frame_{3 * i + i % 3:05d}.jpg" for i in range(4)]
    assert Image.open(tmp_path / "out" / got.names[0]).size == (32, 32)
