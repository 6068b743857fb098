"""``compare_poses``: a similarity transform is no error; a moved or turned camera is."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from gsnb.data.sfm.agreement import compare_poses, umeyama


def cameras(count: int = 12, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.tile(np.eye(4), (count, 1, 1))
    out[:, :3, :3] = Rotation.random(count, random_state=seed).as_matrix()
    out[:, :3, 3] = rng.normal(size=(count, 3))
    return out


def moved(viewmats: np.ndarray, scale: float, rotation: np.ndarray, shift: np.ndarray):
    """The same cameras in a world mapped by ``x -> scale R x + shift``."""
    out = viewmats.copy()
    out[:, :3, :3] = viewmats[:, :3, :3] @ rotation.T
    out[:, :3, 3] = scale * viewmats[:, :3, 3] - out[:, :3, :3] @ shift
    return out


def test_umeyama_recovers_a_similarity():
    rng = np.random.default_rng(1)
    points = rng.normal(size=(20, 3))
    rotation = Rotation.from_euler("xyz", [10, -40, 70], degrees=True).as_matrix()
    s, r, t = umeyama(points, 0.3 * points @ rotation.T + [1, 2, 3])
    assert np.isclose(s, 0.3) and np.allclose(r, rotation) and np.allclose(t, [1, 2, 3])


def test_a_similarity_transform_is_no_error():
    known = cameras()
    rotation = Rotation.from_euler("zyx", [30, 20, -50], degrees=True).as_matrix()
    fit = compare_poses(moved(known, 2.5, rotation, np.array([1.0, -2.0, 0.5])), known)
    assert fit.center_error < 1e-9 and fit.rotation_error_deg < 1e-4
    assert np.isclose(fit.scale, 1 / 2.5)


def test_a_moved_or_turned_camera_is_caught():
    known = cameras()
    shifted = known.copy()
    shifted[3, :3, 3] += 0.2  # one camera moved
    assert compare_poses(shifted, known).center_error > 0.02
    turned = known.copy()
    turned[5, :3, :3] = Rotation.from_euler("x", 2.0, degrees=True).as_matrix() @ known[5, :3, :3]
    fit = compare_poses(turned, known)
    assert 1.5 < fit.rotation_error_deg < 2.1 and fit.offset_rotation_error_deg > 1.5


def test_a_common_tilt_is_taken_out_of_the_offset_error():
    known = cameras()
    tilted = known.copy()
    tilt = Rotation.from_euler("y", 0.6, degrees=True).as_matrix()
    tilted[:, :3, :3] = tilt @ known[:, :3, :3]  # the same turn in every camera's frame
    tilted[:, :3, 3] = np.einsum("ij,nj->ni", tilt, known[:, :3, 3])  # centres stay
    fit = compare_poses(tilted, known)
    assert fit.center_error < 1e-9 and 0.3 < fit.rotation_error_deg < 0.7
    assert fit.offset_rotation_error_deg < 1e-4  # arccos near 1: about 1e-6 degrees
