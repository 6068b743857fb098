"""A canonical world frame for a capture: centred, unit camera distance, principal axes.

COLMAP's world frame is arbitrary: its first camera's axes, in units the
reconstruction picked. :func:`world_alignment` finds a similarity (rotation,
uniform scale, translation) that puts the capture in the frame of gsplat's
``simple_trainer.py`` (``normalize_world_space``, after nerf-factory), so that
the two trainers can be compared in the same frame:

1. rotate so that the mean of the cameras' up directions (their ``-y`` axes)
   becomes ``-y`` (OpenCV's up; gsplat's code does this, though its comment says +z);
2. centre on the cameras' focus: for each camera the point of its optical axis
   nearest the origin, the per-axis median over cameras (in the frame of step 1:
   medians depend on the axes they are taken along);
3. scale so that the median camera lies at distance 1 from it;
4. rotate about the median of the points so that their principal axes become
   ``x, y, z`` in order of decreasing spread (``z`` the thinnest), a right-handed
   frame; this rotation replaces step 1's, so the cameras' up ends wherever the
   points' axes put it (along ``-x`` on the fox);
5. turn the scene upside down (a half turn about ``x``) when the points' median
   ``z`` lies above their mean ``z``, taking the denser side as the floor.

:func:`transform_dataset` applies a similarity to a dataset: its cameras, points,
centre and extent. gsnb's trainer is equivariant to the scale and translation of
the world (every length it uses is in scene extents or pixels), but not exactly
to its rotation: Adam normalises each coordinate of the means, quaternions and
SH coefficients on its own, so the axes along which the world is laid out can
change the optimisation a little.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from gsnb.cameras import rigid_inverse
from gsnb.data.dataset import SceneDataset, View


def _rotation_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The ``[3, 3]`` rotation taking unit vector ``a`` to unit vector ``b`` by the shortest
    arc (a half turn about an axis perpendicular to ``a`` when they are opposite)."""
    axis = np.cross(a, b)
    sine, cosine = float(np.linalg.norm(axis)), float(np.dot(a, b))
    if sine < 1e-12:
        if cosine > 0:
            return np.eye(3)
        # opposite: any axis perpendicular to a
        helper = np.array([1.0, 0.0, 0.0]) if abs(a[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
        axis = np.cross(a, helper)
        axis /= np.linalg.norm(axis)
        return 2.0 * np.outer(axis, axis) - np.eye(3)
    axis /= sine
    k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    return np.eye(3) + sine * k + (1.0 - cosine) * (k @ k)


def _similarity(rotation: np.ndarray, scale: float, translation: np.ndarray) -> np.ndarray:
    """The ``[4, 4]`` matrix of ``x -> scale * rotation @ x + translation``."""
    out = np.eye(4)
    out[:3, :3] = scale * rotation
    out[:3, 3] = translation
    return out


def world_alignment(viewmats: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The ``[4, 4]`` similarity ``x -> s R x + t`` that takes a capture to the canonical frame
    of this module's docstring, from its cameras ``viewmats [V, 4, 4]`` (world-to-camera,
    OpenCV axes) and its points ``[P, 3]`` (at least 3; the principal axes need them).

    Example:
        >>> from gsnb.cameras import look_at
        >>> eyes = [(4 * np.cos(a), 4 * np.sin(a), 1.0) for a in np.linspace(0, 6, 12)]
        >>> views = np.stack([look_at(e, (0, 0, 1), up=(0, 0, 1)) for e in eyes])
        >>> pts = np.random.default_rng(0).normal(size=(500, 3)) * (2.0, 1.0, 0.1)
        >>> T = world_alignment(views, pts)
        >>> round(float(np.cbrt(np.linalg.det(T[:3, :3]))), 3)  # cameras 4 units away -> 1
        0.25
    """
    viewmats = np.asarray(viewmats, dtype=np.float64).reshape(-1, 4, 4)
    points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    if viewmats.shape[0] < 1 or points.shape[0] < 3:
        raise ValueError(
            f"world_alignment needs a camera and 3 points, got {viewmats.shape[0]} cameras "
            f"and {points.shape[0]} points"
        )
    c2w = rigid_inverse(viewmats)
    axes, centres = c2w[:, :3, :3], c2w[:, :3, 3]
    # (1) up: the cameras' -y axes, averaged, turned to -y
    up = (-axes[:, :, 1]).mean(axis=0)
    norm = float(np.linalg.norm(up))
    rotation = np.eye(3) if norm < 1e-12 else _rotation_between(up / norm, np.array([0, -1.0, 0]))
    centres = centres @ rotation.T
    forward = axes[:, :, 2] @ rotation.T
    # (2) focus: each optical axis' point nearest the origin, the median of them
    nearest = centres - np.sum(centres * forward, axis=1, keepdims=True) * forward
    shift = -np.median(nearest, axis=0)
    # (3) the median camera at distance 1
    distance = float(np.median(np.linalg.norm(centres + shift, axis=1)))
    scale = 1.0 / distance if distance > 1e-12 else 1.0
    first = _similarity(rotation, scale, scale * shift)
    moved = points @ first[:3, :3].T + first[:3, 3]
    # (4) principal axes of the points, about their median, by decreasing spread
    middle = np.median(moved, axis=0)
    spread, vectors = np.linalg.eigh(np.cov(moved - middle, rowvar=False))
    vectors = vectors[:, np.argsort(spread)[::-1]]
    if np.linalg.det(vectors) < 0:
        vectors[:, 0] = -vectors[:, 0]
    second = _similarity(vectors.T, 1.0, -vectors.T @ middle)
    total = second @ first
    # (5) the denser side of the points down
    height = (points @ total[:3, :3].T + total[:3, 3])[:, 2]
    if np.median(height) > np.mean(height):
        total = np.diag([1.0, -1.0, -1.0, 1.0]) @ total
    return total


def transform_dataset(dataset: SceneDataset, similarity: np.ndarray | Sequence) -> SceneDataset:
    """``dataset`` in the frame ``x -> s R x + t`` given as a ``[4, 4]`` similarity: cameras
    (intrinsics and images unchanged), points, centre and extent (times ``s``).

    Example:
        >>> import tempfile
        >>> from gsnb.data import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> ds = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=4, size=16))
        >>> T = np.diag([2.0, 2.0, 2.0, 1.0]); T[:3, 3] = (1.0, 0.0, 0.0)
        >>> moved = transform_dataset(ds, T)
        >>> round(moved.extent / ds.extent, 6)
        2.0
    """
    matrix = np.asarray(similarity, dtype=np.float64).reshape(4, 4)
    linear, shift = matrix[:3, :3], matrix[:3, 3]
    scale = float(np.cbrt(np.linalg.det(linear)))
    if not np.isfinite(matrix).all() or not scale > 0:
        raise ValueError("the similarity must be finite with a positive determinant")
    rotation = linear / scale
    if not np.allclose(rotation @ rotation.T, np.eye(3), atol=1e-6):
        raise ValueError("the similarity's 3x3 part must be a rotation times a uniform scale")
    if not np.allclose(matrix[3], (0.0, 0.0, 0.0, 1.0)):
        raise ValueError("the similarity's last row must be (0, 0, 0, 1)")

    def moved_view(view: View) -> View:
        c2w = rigid_inverse(view.viewmat.double().cpu().numpy())
        out = np.eye(4)
        out[:3, :3] = rotation @ c2w[:3, :3]
        out[:3, 3] = linear @ c2w[:3, 3] + shift
        return dataclasses.replace(
            view, viewmat=torch.tensor(rigid_inverse(out), dtype=torch.float32)
        )

    views = [moved_view(v) for v in dataset.views]
    points = dataset.points.double() @ torch.from_numpy(linear).T + torch.from_numpy(shift)
    center = dataset.center.double() @ torch.from_numpy(linear).T + torch.from_numpy(shift)
    return dataclasses.replace(
        dataset,
        views=views,
        points=points.float(),
        center=center.float(),
        extent=dataset.extent * scale,
    )


def normalize_world(dataset: SceneDataset) -> tuple[SceneDataset, np.ndarray]:
    """``dataset`` in the canonical frame of :func:`world_alignment` (from all its cameras and
    its points), and the ``[4, 4]`` similarity that took it there.

    Example:
        >>> import tempfile
        >>> from gsnb.data import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> ds = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=6, size=16))
        >>> canonical, T = normalize_world(ds)
        >>> T.shape, canonical.points.shape == ds.points.shape
        ((4, 4), True)
    """
    viewmats = np.stack([v.viewmat.double().cpu().numpy() for v in dataset.views])
    similarity = world_alignment(viewmats, dataset.points.double().cpu().numpy())
    return transform_dataset(dataset, similarity), similarity


__all__ = ["normalize_world", "transform_dataset", "world_alignment"]
