"""How well recovered camera poses agree with known ones, after the best similarity transform.

Structure from motion finds poses only up to rotation, translation and scale;
``compare_poses`` aligns the recovered camera centres to the known ones
(Umeyama's least-squares similarity) and measures the centre errors left, as a
fraction of the scene extent; the orientations are compared after the world
rotation that best aligns them (the chordal mean of the differences), and the
angles left are the rotation errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PoseAgreement:
    """The largest and mean errors of the aligned poses.

    ``offset_rotation_error_deg`` is the rotation error left once the mean
    rotation between each known camera and its recovered one is taken out: a
    principal point that one model puts off centre and the other does not
    tilts every camera alike (the fox's COLMAP model puts it 14.6 px off, 0.6
    degrees), which is no error of the poses.
    ``center_error`` is relative to the scene extent as gsnb and the 3DGS code
    measure it (``SceneDataset.extent``): 1.1 times the largest distance of a
    known camera centre from their mean.

    Example:
        >>> PoseAgreement(4, 0.001, 0.0005, 0.1, 0.05, 0.02, 2.0).center_error
        0.001
    """

    count: int
    center_error: float
    mean_center_error: float
    rotation_error_deg: float
    mean_rotation_error_deg: float
    offset_rotation_error_deg: float
    scale: float


def umeyama(source: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Scale ``s``, rotation ``R [3, 3]`` and ``t [3]`` minimising ``|s R source + t - target|``.

    ``source`` and ``target`` are ``[N, 3]`` corresponding points (N >= 3, not collinear).

    Example:
        >>> pts = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
        >>> s, r, t = umeyama(pts, 2 * pts + 1)
        >>> round(s, 6), np.allclose(r, np.eye(3)), t.round(6).tolist()
        (2.0, True, [1.0, 1.0, 1.0])
    """
    mu_s, mu_t = source.mean(axis=0), target.mean(axis=0)
    a, b = source - mu_s, target - mu_t
    cov = b.T @ a / len(source)
    u, d, vt = np.linalg.svd(cov)
    sign = np.eye(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:  # a reflection is no rotation
        sign[2, 2] = -1.0
    rotation = u @ sign @ vt
    scale = float(np.trace(np.diag(d) @ sign) / (a**2).sum(axis=1).mean())
    return scale, rotation, mu_t - scale * rotation @ mu_s


def compare_poses(estimated: np.ndarray, known: np.ndarray) -> PoseAgreement:
    """Agreement of world-to-camera ``estimated [N, 4, 4]`` with ``known [N, 4, 4]`` (same order).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> known = np.tile(np.eye(4), (5, 1, 1))
        >>> known[:, :3, 3] = rng.normal(size=(5, 3))
        >>> moved = known.copy()
        >>> moved[:, :3, 3] *= 3.0  # the same cameras in a world three times larger
        >>> agreement = compare_poses(moved, known)
        >>> agreement.center_error < 1e-9, agreement.rotation_error_deg < 1e-4
        (True, True)
    """
    est_r, known_r = estimated[:, :3, :3], known[:, :3, :3]
    est_c = -np.einsum("nji,nj->ni", est_r, estimated[:, :3, 3])  # centre = -R^T t
    known_c = -np.einsum("nji,nj->ni", known_r, known[:, :3, 3])
    scale, rotation, shift = umeyama(est_c, known_c)
    aligned = scale * est_c @ rotation.T + shift
    extent = 1.1 * float(np.linalg.norm(known_c - known_c.mean(axis=0), axis=1).max())
    centre = np.linalg.norm(aligned - known_c, axis=1) / max(extent, 1e-12)
    # The world rotation that best aligns the orientations themselves: the one fitted to the
    # centres carries their error (a few tenths of a degree) into every camera.
    turn = _nearest_rotation(np.einsum("nji,njk->ik", known_r, est_r))
    angles = _angles(np.einsum("nij,jk,nlk->nil", known_r, turn, est_r))
    # est camera -> known camera under the centres' alignment; their mean is a common tilt
    relative = np.einsum("nij,jk,nlk->nil", known_r, rotation, est_r)
    mean = _nearest_rotation(relative.sum(axis=0))
    return PoseAgreement(
        count=len(estimated),
        center_error=float(centre.max()),
        mean_center_error=float(centre.mean()),
        rotation_error_deg=float(angles.max()),
        mean_rotation_error_deg=float(angles.mean()),
        offset_rotation_error_deg=float(_angles(relative @ mean.T).max()),
        scale=scale,
    )


def _nearest_rotation(matrix: np.ndarray) -> np.ndarray:
    """The rotation nearest ``matrix [3, 3]`` (Frobenius): the chordal mean of a sum."""
    u, _, vt = np.linalg.svd(matrix)
    return u @ np.diag([1.0, 1.0, np.linalg.det(u @ vt)]) @ vt


def _angles(rotations: np.ndarray) -> np.ndarray:
    """``[N]`` angles in degrees of ``rotations [N, 3, 3]``."""
    cosines = (np.trace(rotations, axis1=1, axis2=2) - 1.0) / 2.0
    return np.degrees(np.arccos(np.clip(cosines, -1.0, 1.0)))
