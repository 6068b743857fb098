"""Tests for gsnb/cameras.py against plain matrix and trigonometry maths."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import torch

from gsnb import cameras
from gsnb.cameras import (
    camera_centres,
    focal_from_fov,
    fov_from_focal,
    fov_of,
    intrinsics,
    look_at,
    matching_fov,
    rigid_inverse,
    scale_intrinsics,
)

UP = np.array([0.0, -1.0, 0.0])


def _random_cameras(seed: int, count: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(count, 3)) * 3, rng.normal(size=(count, 3))


def _project(viewmat: np.ndarray, K: np.ndarray, point: np.ndarray) -> tuple[np.ndarray, float]:
    cam = viewmat[:3, :3] @ point + viewmat[:3, 3]
    pix = K @ cam
    return pix[:2] / pix[2], cam[2]


def test_docstring_examples():
    result = doctest.testmod(cameras, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 10 and result.failed == 0


@pytest.mark.parametrize("seed", range(4))
def test_look_at_puts_the_eye_at_the_origin_and_the_target_on_plus_z(seed):
    eyes, targets = _random_cameras(seed)
    viewmats = look_at(eyes, targets)
    assert viewmats.shape == (6, 4, 4) and viewmats.dtype == np.float64
    for viewmat, eye, target in zip(viewmats, eyes, targets, strict=True):
        np.testing.assert_allclose(viewmat @ np.append(eye, 1.0), [0, 0, 0, 1], atol=1e-12)
        distance = np.linalg.norm(target - eye)
        np.testing.assert_allclose(viewmat @ np.append(target, 1), [0, 0, distance, 1], atol=1e-12)
        rotation = viewmat[:3, :3]
        np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-12)
        assert np.linalg.det(rotation) == pytest.approx(1.0)
        np.testing.assert_array_equal(viewmat[3], [0, 0, 0, 1])
        # The camera's -y (image up) leans towards the world's up (0, -1, 0).
        assert float(-rotation[1] @ UP) > 0
        np.testing.assert_allclose(viewmat, look_at(eye, target), atol=0)


def test_look_at_centres_the_target_and_keeps_up_upwards():
    viewmat = look_at(np.array([2.0, -1.0, -3.0]), np.array([0.5, 0.2, 0.1]), UP)
    K = intrinsics(64, 48, 60.0, axis="y").double().numpy()
    pixel, depth = _project(viewmat, K, np.array([0.5, 0.2, 0.1]))
    np.testing.assert_allclose(pixel, [32.0, 24.0], atol=1e-9)
    assert depth > 0
    above, _ = _project(viewmat, K, np.array([0.5, 0.2, 0.1]) + 0.1 * UP)
    assert above[1] < 24.0  # world up is up in the image (smaller row)
    np.testing.assert_allclose(np.linalg.det(viewmat[:3, :3]), 1.0)


def test_look_at_with_another_up_and_opencv_axes():
    # From -y towards the origin with +z up: +x world is image right, +z world is image up.
    viewmat = look_at(np.array([0.0, -5.0, 0.0]), np.zeros(3), up=(0.0, 0.0, 1.0))
    np.testing.assert_allclose(viewmat[:3, :3], [[1, 0, 0], [0, 0, -1], [0, 1, 0]], atol=1e-12)
    np.testing.assert_allclose(viewmat[:3, 3], [0, 0, 5], atol=1e-12)


def test_look_at_returns_tensors_for_tensors():
    eye, target = torch.tensor([1.0, -2.0, -3.0]), torch.tensor([0.0, 0.5, 0.0])
    viewmat = look_at(eye, target)
    assert isinstance(viewmat, torch.Tensor) and viewmat.dtype == torch.float32
    want = look_at(eye.double().numpy(), target.double().numpy())
    torch.testing.assert_close(viewmat, torch.tensor(want, dtype=torch.float32))
    assert look_at(eye.double(), target.double()).dtype == torch.float64
    assert look_at(torch.tensor([0, 0, -3]), torch.zeros(3)).dtype == torch.get_default_dtype()


def test_look_at_refuses_degenerate_cameras():
    with pytest.raises(ValueError, match="coincide"):
        look_at(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="along its up vector"):
        look_at(np.zeros(3), np.array([0.0, 2.0, 0.0]))


@pytest.mark.parametrize("seed", range(3))
def test_camera_centres_and_rigid_inverse_match_the_matrix_inverse(seed):
    viewmats = look_at(*_random_cameras(seed))
    inverse = np.linalg.inv(viewmats)
    np.testing.assert_allclose(camera_centres(viewmats), inverse[:, :3, 3], atol=1e-12)
    np.testing.assert_allclose(rigid_inverse(viewmats), inverse, atol=1e-12)
    np.testing.assert_allclose(camera_centres(viewmats), _random_cameras(seed)[0], atol=1e-12)
    tensors = torch.tensor(viewmats)
    torch.testing.assert_close(camera_centres(tensors), torch.tensor(inverse[:, :3, 3]))
    torch.testing.assert_close(rigid_inverse(tensors), torch.tensor(inverse))
    assert camera_centres(tensors[0]).shape == (3,)


def test_camera_centres_are_differentiable():
    viewmats = torch.tensor(look_at(*_random_cameras(0))).requires_grad_()
    camera_centres(viewmats).sum().backward()
    # d(-R^T t)/dt = -R^T: the gradient of the summed centres is -(row sums of R^T).
    want = -viewmats.detach()[:, :3, :3].sum(dim=2)
    torch.testing.assert_close(viewmats.grad[:, :3, 3], want)


@pytest.mark.parametrize(("axis", "size"), [("x", 64), ("y", 48)])
@pytest.mark.parametrize("fov", [10.0, 60.0, 90.0, 150.0])
def test_intrinsics_and_field_of_view_round_trip(axis, size, fov):
    K = intrinsics(64, 48, fov, axis=axis, dtype=torch.float64)
    focal = 0.5 * size / math.tan(math.radians(fov) / 2)
    torch.testing.assert_close(
        K, torch.tensor([[focal, 0, 32], [0, focal, 24], [0, 0, 1]], dtype=torch.float64)
    )
    assert float(fov_of(K, axis=axis, size=size)) == pytest.approx(fov, rel=1e-12)
    assert float(fov_of(K, axis=axis)) == pytest.approx(fov, rel=1e-12)  # centred: 2 c = size
    assert float(fov_from_focal(focal_from_fov(fov, size), size)) == pytest.approx(fov, rel=1e-12)
    assert float(focal_from_fov(fov, size)) == pytest.approx(focal, rel=1e-12)
    # Square pixels: the other axis' half-angle tangent scales with the image's aspect.
    other, other_size = ("y", 48) if axis == "x" else ("x", 64)
    tan_other = math.tan(math.radians(float(fov_of(K, axis=other))) / 2)
    assert tan_other == pytest.approx(math.tan(math.radians(fov) / 2) * other_size / size)


def test_intrinsics_of_many_fields_of_view():
    fovs = np.array([[30.0, 60.0], [90.0, 120.0]])
    Ks = intrinsics(80, 60, fovs, axis="x")
    assert Ks.shape == (2, 2, 3, 3) and Ks.dtype == torch.float32
    np.testing.assert_allclose(fov_of(Ks, axis="x", size=80), fovs, rtol=1e-6)
    np.testing.assert_allclose(fov_of(Ks.numpy(), axis="x", size=80), fovs, rtol=1e-6)


def test_intrinsics_reject_bad_field_of_view():
    with pytest.raises(ValueError, match=r"fov_deg must lie in \(0, 180\)"):
        intrinsics(64, 48, 180.0, axis="y")
    with pytest.raises(ValueError, match="image size must be positive"):
        intrinsics(0, 48, 60.0, axis="y")
    with pytest.raises(ValueError, match='axis must be "x"'):
        intrinsics(64, 48, 60.0, axis="z")  # type: ignore[arg-type]


def test_matching_fov_keeps_the_diagonal():
    portrait = torch.tensor([[[100.0, 0, 48], [0, 100, 64], [0, 0, 1]]])
    for axis, extent in (("x", 128), ("y", 96)):
        fov = float(matching_fov(portrait, (128, 96), (96, 128), axis=axis)[0])
        # tan(half diagonal fov) = half diagonal / focal, for both the cameras and the new images
        assert math.tan(math.radians(fov) / 2) * 80 / (extent / 2) == pytest.approx(80 / 100)
    same = matching_fov(portrait, (96, 128), axis="y")  # no source size: 2 c stands in
    assert float(same[0]) == pytest.approx(float(fov_of(portrait, axis="y")[0]))


def test_scale_intrinsics_keeps_the_picture():
    K = torch.tensor([[[80.0, 0, 30], [0, 90, 20], [0, 0, 1]]])
    half = scale_intrinsics(K, (60, 40), (30, 20))
    torch.testing.assert_close(half, torch.tensor([[[40.0, 0, 15], [0, 45, 10], [0, 0, 1]]]))
