"""Tests for gsnb/viewer/cameras.py: poses, intrinsics and projections agree (with the
quaternions of gsnb.cameras and gsnb.data.dataset.scaled_view they rely on)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from gsnb.cameras import matrix_from_wxyz, wxyz_from_matrix
from gsnb.data.dataset import scaled_view
from gsnb.viewer.cameras import pose_of_view, vertical_fov, view_from_pose


def project(view, point: np.ndarray) -> np.ndarray:
    cam = view.viewmat.double().numpy() @ np.append(point, 1.0)
    pix = view.K.double().numpy() @ cam[:3]
    return pix[:2] / pix[2]


@pytest.mark.parametrize("seed", range(5))
def test_pose_round_trip_and_quaternion_conversions(seed):
    rot = Rotation.random(random_state=seed)
    wxyz = np.roll(rot.as_quat(), 1)
    assert np.allclose(matrix_from_wxyz(wxyz), rot.as_matrix(), atol=1e-12)
    assert np.allclose(matrix_from_wxyz(-2.5 * wxyz), rot.as_matrix(), atol=1e-12)  # normalised
    back = wxyz_from_matrix(rot.as_matrix())
    assert back[0] >= 0 and min(np.abs(back - wxyz).max(), np.abs(back + wxyz).max()) < 1e-9
    position = np.random.default_rng(seed).normal(size=3)
    view = view_from_pose(wxyz, position, 0.9, 64, 48)
    q, p = pose_of_view(view)
    assert np.allclose(matrix_from_wxyz(q), rot.as_matrix(), atol=1e-6)
    assert np.allclose(p, position, atol=1e-5)
    assert vertical_fov(view) == pytest.approx(0.9, rel=1e-6)


def test_projection_follows_opencv_axes():
    # camera at (0, 0, -2) looking down +z: a point on the axis lands on the centre,
    # +x goes right, +y goes down, and the vertical fov spans the image height
    view = view_from_pose((1, 0, 0, 0), (0, 0, -2), math.radians(90), 64, 32)
    assert np.allclose(project(view, np.zeros(3)), [32, 16])
    assert project(view, np.array([0.5, 0, 0]))[0] > 32
    assert project(view, np.array([0, 0.5, 0]))[1] > 16
    top = np.array([0.0, -2.0, 0.0])  # 45 degrees above the axis at depth 2
    assert np.allclose(project(view, top), [32, 0], atol=1e-5)


def test_scaled_view_keeps_the_projection():
    view = view_from_pose((0.9, 0.1, -0.3, 0.2), (0.5, -1, -3), 1.1, 200, 120)
    small = scaled_view(view, 50)
    assert (small.width, small.height) == (50, 30)
    point = np.array([0.2, -0.1, 0.4])
    assert np.allclose(project(small, point), project(view, point) / 4, atol=1e-4)
    assert scaled_view(view, 200) is view


def test_bad_cameras_are_refused():
    with pytest.raises(ValueError, match="finite and non-zero"):
        matrix_from_wxyz((0, 0, 0, 0))
    with pytest.raises(ValueError, match="image size must be positive"):
        view_from_pose((1, 0, 0, 0), (0, 0, 0), 1.0, 0, 10)
    with pytest.raises(ValueError, match=r"field of view must lie in \(0, pi\)"):
        view_from_pose((1, 0, 0, 0), (0, 0, 0), 4.0, 10, 10)
    with pytest.raises(ValueError, match="position must be finite"):
        view_from_pose((1, 0, 0, 0), (0, float("nan"), 0), 1.0, 10, 10)
    with pytest.raises(ValueError, match="width must be positive"):
        scaled_view(view_from_pose((1, 0, 0, 0), (0, 0, 0), 1.0, 10, 10), 0)
    assert torch.isfinite(view_from_pose((2, 0, 0, 0), (0, 0, 0), 1.0, 8, 8).viewmat).all()
