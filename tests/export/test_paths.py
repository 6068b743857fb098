"""Tests for gsnb/export/paths.py: orbits, splines, keyframe files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gsnb.cameras import camera_centres, look_at, matching_fov
from gsnb.export import paths

UP = np.array([0.0, -1.0, 0.0])


def _centres(viewmats: torch.Tensor) -> np.ndarray:
    """Camera centres ``[M, 3]``, in float64."""
    return camera_centres(viewmats.double().numpy())


def _project(viewmat: np.ndarray, K: np.ndarray, point: np.ndarray) -> tuple[np.ndarray, float]:
    cam = viewmat[:3, :3] @ point + viewmat[:3, 3]
    pix = K @ cam
    return pix[:2] / pix[2], cam[2]


def _ring(count: int, radius: float = 3.0, height: float = 1.0, centre=(0.0, 0.0, 0.0)):
    """World-to-camera matrices ``[count, 4, 4]`` of cameras on a circle, looking at its centre."""
    centre = np.asarray(centre)
    angles = np.arange(count) * 2 * np.pi / count
    poses = [
        look_at(centre + np.array([radius * np.cos(a), -height, radius * np.sin(a)]), centre, UP)
        for a in angles
    ]
    return torch.tensor(np.stack(poses))


def test_fit_orbit_recovers_a_ring_of_cameras():
    centre = np.array([1.0, 2.0, -0.5])
    orbit = paths.fit_orbit(_ring(12, radius=4.0, height=1.5, centre=centre))
    np.testing.assert_allclose(orbit.centre, centre, atol=1e-9)
    np.testing.assert_allclose(orbit.up, UP, atol=1e-9)
    assert orbit.radius == pytest.approx(4.0) and orbit.height == pytest.approx(1.5)


def test_orbit_path_circles_the_centre_and_looks_at_it():
    orbit = paths.fit_orbit(_ring(6, radius=2.0, height=0.5))
    viewmats, Ks = paths.orbit_path(orbit, 16, 64, 48, fov_y_deg=40.0)
    assert viewmats.shape == (16, 4, 4) and Ks.shape == (16, 3, 3)
    centres = _centres(viewmats)
    np.testing.assert_allclose(np.linalg.norm(centres[:, [0, 2]], axis=1), 2.0, atol=1e-5)
    np.testing.assert_allclose(centres[:, 1], -0.5, atol=1e-5)
    np.testing.assert_allclose(centres[0], _centres(_ring(6, 2.0, 0.5))[0], atol=1e-5)
    for viewmat, K in zip(viewmats.double().numpy(), Ks.double().numpy(), strict=True):
        pixel, depth = _project(viewmat, K, np.zeros(3))
        np.testing.assert_allclose(pixel, [32.0, 24.0], atol=1e-4)
        assert depth > 0
    assert float(Ks[0, 1, 1]) == pytest.approx(24.0 / np.tan(np.radians(20.0)), rel=1e-6)


def test_orbit_around_points_without_cameras():
    g = torch.Generator().manual_seed(0)
    points = torch.randn(2000, 3, generator=g) * torch.tensor([2.0, 0.2, 1.0]) + 5.0
    orbit = paths.fit_orbit_to_points(points)
    np.testing.assert_allclose(orbit.centre, 5.0, atol=0.15)
    assert orbit.up[1] < -0.99  # the thin axis, pointing to -y
    viewmats, _ = paths.orbit_path(orbit, 8, 32, 24)
    distances = np.linalg.norm(_centres(viewmats) - orbit.centre, axis=1)
    assert (distances > np.percentile(np.linalg.norm(points.numpy() - 5.0, axis=1), 80)).all()


def test_spline_passes_through_keyframes_smoothly():
    keys = _ring(8)[:5]  # a half circle: 5 keyframes, equal spacing
    viewmats, _ = paths.spline_path(keys, 41, 64, 48)
    # Chord-length timing with equal chords puts keyframe i at frame 10 * i.
    torch.testing.assert_close(viewmats[::10].double(), keys, atol=1e-5, rtol=0)
    rotations = viewmats[:, :3, :3].double()
    eye = torch.eye(3, dtype=torch.float64).expand_as(rotations)
    torch.testing.assert_close(rotations @ rotations.transpose(1, 2), eye, atol=1e-5, rtol=0)
    steps = np.linalg.norm(np.diff(_centres(viewmats), axis=0), axis=1)
    assert steps.max() / steps.min() < 1.2  # steady speed, no jumps


def test_looped_spline_returns_to_the_start():
    viewmats, _ = paths.spline_path(_ring(4), 40, 32, 24, loop=True)
    centres = _centres(viewmats)
    steps = np.linalg.norm(np.diff(np.concatenate([centres, centres[:1]]), axis=0), axis=1)
    assert steps.max() / steps.min() < 1.3  # the closing step is like the others


def test_spline_needs_two_cameras_and_frames():
    with pytest.raises(ValueError, match="at least 2 cameras"):
        paths.spline_path(_ring(3)[:1], 10, 32, 24)
    with pytest.raises(ValueError, match="frames must be at least 1"):
        paths.spline_path(_ring(3), 0, 32, 24)
    with pytest.raises(ValueError, match=r"shape \[M, 4, 4\]"):
        paths.spline_path(torch.zeros(3, 3, 4), 10, 32, 24)


def test_train_path_keeps_the_cameras_field_of_view():
    keys = _ring(10)
    K = torch.tensor([[50.0, 0, 32], [0, 50, 24], [0, 0, 1]]).expand(10, 3, 3)
    viewmats, Ks = paths.train_path(keys, K, 12, 128, 96, source_size=(64, 48), max_keyframes=4)
    assert viewmats.shape == (12, 4, 4)
    torch.testing.assert_close(Ks[:, 1, 1], torch.full((12,), 100.0))
    torch.testing.assert_close(viewmats[0].double(), keys[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(viewmats[-1].double(), keys[-1], atol=1e-5, rtol=0)
    # A portrait camera rendered landscape keeps its diagonal field of view.
    portrait = torch.tensor([[[100.0, 0, 48], [0, 100, 64], [0, 0, 1]]])
    fov = matching_fov(portrait, (128, 96), (96, 128), axis="y")[0]
    half_diag = np.tan(np.radians(fov) / 2) * 80 / 48
    assert half_diag == pytest.approx(80 / 100)


def test_keyframe_file(tmp_path):
    spec = {
        "fov_deg": 45,
        "loop": False,
        "keyframes": [
            {"position": [0, -1, -4], "look_at": [0, 0, 0]},
            {"position": [4, -1, 0], "look_at": [0, 0, 0], "fov_deg": 30},
            {"viewmat": look_at(np.array([0.0, -1, 4]), np.zeros(3), UP).tolist()},
        ],
    }
    file = tmp_path / "path.json"
    file.write_text(json.dumps(spec))
    keys = paths.load_keyframes(file)
    assert keys["fov_deg"].tolist() == [45.0, 30.0, 45.0] and keys["loop"] is False
    viewmats, Ks = paths.keyframe_path(file, 9, 64, 48)
    np.testing.assert_allclose(_centres(viewmats)[[0, -1]], [[0, -1, -4], [0, -1, 4]], atol=1e-5)
    assert float(Ks[0, 1, 1]) == pytest.approx(24 / np.tan(np.radians(22.5)), rel=1e-5)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"frames": []}', '"keyframes" list'),
        ('{"keyframes": [{"position": [0, 0, 1], "look_at": [0, 0, 0]}]}', "at least 2"),
        (
            '{"keyframes": [{"position": [0, 0], "look_at": [0, 0, 0]}, {}]}',
            "keyframe 0 is malformed",
        ),
        (
            '{"keyframes": [{"position": [0, 0, 1], "look_at": [0, 0, 0]}, {"fov_deg": 3}]}',
            "keyframe 1",
        ),
        ('{"keyframes": [{"position": [0, 0, 0], "look_at": [0, 0, 0]}, {}]}', "coincide"),
    ],
)
def test_bad_keyframe_files_are_explained(tmp_path, content, message):
    file = tmp_path / "bad.json"
    file.write_text(content)
    with pytest.raises(ValueError, match=message):
        paths.load_keyframes(file)
