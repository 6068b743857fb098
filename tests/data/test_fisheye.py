"""Fisheye and FULL_OPENCV lenses: undistorted into the widest pinhole view of valid pixels."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from gsnb.data.camera import Camera
from gsnb.data.dataset import load_dataset
from gsnb.data.images import ImagePipeline, _undistortion_maps

SIZE = (96, 80)
SIGMA = 1.2  # blob radius in pixels


def _ramps() -> np.ndarray:
    """``[H, W, 3]`` float32 whose pixels hold their own centre ``(x / W, y / H, 0)`` (gsnb
    coordinates): bilinear resampling reproduces a linear ramp exactly, so an undistorted
    pixel's value says where in the raw image it was read."""
    width, height = SIZE
    xs, ys = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    return np.stack([xs / width, ys / height, np.zeros_like(xs)], 2).astype(np.float32)


def _read_error(out: np.ndarray, pixels: np.ndarray, expected: np.ndarray) -> float:
    """Largest distance between where the undistorted ``pixels [P, 2]`` (pixel centres) were
    read in the raw image and ``expected [P, 2]``; the outer half pixel, where the ramp is
    clamped, is left out."""
    cols, rows = (pixels - 0.5).round().astype(int).T
    read = out[rows, cols, :2] * np.array(SIZE)
    inner = ((expected >= 0.5) & (expected <= np.array(SIZE) - 0.5)).all(1)
    assert inner.sum() > 0.8 * len(expected)
    return float(np.abs(read - expected)[inner].max())


@pytest.mark.parametrize(
    ("model", "params"),
    [
        ("OPENCV_FISHEYE", [38.0, 37.0, 47.3, 40.6, 0.06, -0.03, 0.01, -0.004]),
        ("SIMPLE_RADIAL_FISHEYE", [40.0, 48.0, 40.0, 0.08]),
        ("RADIAL_FISHEYE", [40.0, 48.5, 39.5, 0.05, 0.02]),
    ],
)
def test_points_land_where_opencvs_fisheye_model_puts_them(model: str, params: list) -> None:
    camera = Camera.from_colmap(model, *SIZE, params)
    assert camera.fisheye and len(camera.distortion) == 4
    pipe = ImagePipeline(camera)
    # Rays through a grid of the undistorted view, so every point is inside it.
    u, v = np.meshgrid(np.arange(0.5, SIZE[0], 7.0), np.arange(0.5, SIZE[1], 6.0))
    pinhole_px = np.stack([u.ravel(), v.ravel()], 1)
    K = pipe.K
    rays = np.stack(
        [(pinhole_px[:, 0] - K[0, 2]) / K[0, 0], (pinhole_px[:, 1] - K[1, 2]) / K[1, 1]], 1
    )
    points = np.concatenate([rays, np.ones((len(rays), 1))], 1) * 2.5
    k_cv = camera.K.copy()
    k_cv[:2, 2] -= 0.5  # OpenCV's pixel centres sit at integers
    fisheye_px, _ = cv2.fisheye.projectPoints(
        points[:, None], np.zeros(3), np.zeros(3), k_cv, np.asarray(camera.distortion)
    )
    out = pipe.process(_ramps())
    assert out.shape == (SIZE[1], SIZE[0], 3)
    # OpenCV's remap tables hold 1/32 pixel steps.
    assert _read_error(out, pinhole_px, fisheye_px[:, 0] + 0.5) < 0.05


def test_fisheye_view_is_the_widest_of_valid_pixels() -> None:
    camera = Camera.from_colmap(
        "OPENCV_FISHEYE", *SIZE, [38.0, 37.0, 47.3, 40.6, 0.06, -0.03, 0.01, 0]
    )
    pipe = ImagePipeline(camera)
    maps, frac = _undistortion_maps(camera, tuple(pipe._undistorted_K.ravel()))
    source = cv2.convertMaps(maps, frac, cv2.CV_32FC2)[0]  # OpenCV coordinates
    x, y = source[..., 0] + 0.5, source[..., 1] + 0.5  # pixel centres in gsnb coordinates
    assert x.min() >= 0 and y.min() >= 0 and x.max() <= SIZE[0] and y.max() <= SIZE[1]
    # Widest: the output's edges reach the source image's edges (within a pixel).
    assert min(x.min(), y.min(), SIZE[0] - x.max(), SIZE[1] - y.max()) < 1.0


def test_full_opencv_undistorts_like_opencv() -> None:
    params = [40.0, 41.0, 48.2, 39.7, 0.05, -0.01, 0.001, -0.002, 0.003, 0.01, -0.004, 0.002]
    camera = Camera.from_colmap("FULL_OPENCV", *SIZE, params)
    assert len(camera.distortion) == 8 and not camera.fisheye
    pipe = ImagePipeline(camera)
    K = pipe.K
    u, v = np.meshgrid(np.arange(0.5, SIZE[0], 7.0), np.arange(0.5, SIZE[1], 6.0))
    pinhole_px = np.stack([u.ravel(), v.ravel()], 1)
    rays = np.stack(
        [(pinhole_px[:, 0] - K[0, 2]) / K[0, 0], (pinhole_px[:, 1] - K[1, 2]) / K[1, 1]], 1
    )
    rays = np.concatenate([rays, np.ones((len(rays), 1))], 1)
    k_cv = camera.K.copy()
    k_cv[:2, 2] -= 0.5
    raw_px, _ = cv2.projectPoints(
        rays, np.zeros(3), np.zeros(3), k_cv, np.asarray(camera.distortion)
    )
    out = pipe.process(_ramps())
    assert _read_error(out, pinhole_px, raw_px[:, 0] + 0.5) < 0.05


def test_transforms_fisheye_capture(tmp_path: Path) -> None:
    Image.new("RGB", SIZE, (90, 120, 30)).save(tmp_path / "a.png")
    frame = {"file_path": "a.png", "transform_matrix": np.eye(4).tolist()}
    meta = {
        "camera_model": "OPENCV_FISHEYE",
        **dict(zip(("fl_x", "fl_y", "cx", "cy"), (38.0, 37.0, 47.3, 40.6), strict=True)),
        **dict(zip(("k1", "k2", "k3", "k4"), (0.06, -0.03, 0.01, 0.0), strict=True)),
        "frames": [frame],
    }
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    view = load_dataset(tmp_path, test_every=0, cache_dir=tmp_path / "cache").views[0]
    assert view.pipeline is not None and view.pipeline.camera.fisheye
    assert view.pipeline.camera.distortion == (0.06, -0.03, 0.01, 0.0)
    assert view.K[0, 0] < 38.0  # a pinhole needs a shorter focal length for the same field
    assert view.load_bytes()[40, 48].tolist() == [90, 120, 30]


def test_a_fisheye_lens_without_coefficients_is_still_undistorted():
    # r = f * theta, not f * tan(theta): a pinhole view needs a remap even with k1..k4 = 0.
    lens = Camera.from_colmap("OPENCV_FISHEYE", 640, 480, [300, 300, 320, 240, 0, 0, 0, 0])
    assert lens.is_distorted
    pinhole = Camera.from_colmap("PINHOLE", 640, 480, [300, 300, 320, 240])
    assert not pinhole.is_distorted
