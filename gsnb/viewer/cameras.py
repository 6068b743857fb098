"""Camera conversions between gsnb views and a browser's camera (OpenCV axes everywhere).

A browser camera is a pose ``T_world_camera`` (quaternion ``wxyz`` and
``position``), a vertical field of view in radians and a canvas size, as viser
reports it. :func:`view_from_pose` turns it into a :class:`~gsnb.data.dataset.View`
that ``Trainer.render_view`` renders; :func:`pose_of_view` goes the other
way for drawing the training cameras. The maths is :mod:`gsnb.cameras`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from gsnb.cameras import fov_of, intrinsics, matrix_from_wxyz, rigid_inverse, wxyz_from_matrix
from gsnb.data.dataset import View


def pose_of_view(view: View) -> tuple[np.ndarray, np.ndarray]:
    """``(wxyz [4], position [3])`` of the camera-to-world pose of ``view``.

    Example:
        >>> v = View("a", Path("a"), 4, 4, torch.eye(3), torch.eye(4))
        >>> [p.tolist() for p in pose_of_view(v)]
        [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    c2w = rigid_inverse(torch.as_tensor(view.viewmat, dtype=torch.float64).cpu().numpy())
    return wxyz_from_matrix(c2w[:3, :3]), c2w[:3, 3]


def vertical_fov(view: View) -> float:
    """Vertical field of view of ``view`` in radians: ``2 atan(H / (2 fy))``.

    Example:
        >>> K = torch.diag(torch.tensor([5.0, 5.0, 1.0]))
        >>> v = View("a", Path("a"), 10, 10, K, torch.eye(4))
        >>> round(math.degrees(vertical_fov(v)), 3)
        90.0
    """
    return math.radians(float(fov_of(view.K, axis="y", size=view.height)))


def view_from_pose(
    wxyz: np.ndarray | tuple[float, ...],
    position: np.ndarray | tuple[float, ...],
    fov: float,
    width: int,
    height: int,
    name: str = "viewer",
) -> View:
    """A view of ``width x height`` pixels with vertical field of view ``fov`` (radians) at the
    camera-to-world pose ``(wxyz, position)``; square pixels, principal point at the centre.

    Example:
        >>> v = view_from_pose((1, 0, 0, 0), (0, 0, -2), math.radians(90), 64, 32)
        >>> v.width, v.height, float(v.K[1, 1]), v.viewmat[2, 3].item()
        (64, 32, 16.0, 2.0)
    """
    width, height = int(width), int(height)
    if width < 1 or height < 1:
        raise ValueError(f"the image size must be positive, got {width}x{height}")
    if not 0.0 < fov < math.pi:
        raise ValueError(f"the vertical field of view must lie in (0, pi) radians, got {fov!r}")
    c2w = np.eye(4)
    c2w[:3, :3] = matrix_from_wxyz(wxyz)
    c2w[:3, 3] = np.asarray(position, dtype=np.float64).reshape(3)
    if not np.isfinite(c2w[:3, 3]).all():
        raise ValueError(f"camera position must be finite, got {c2w[:3, 3].tolist()}")
    K = intrinsics(width, height, math.degrees(fov), axis="y")
    return View(
        name, Path(name), width, height, K, torch.tensor(rigid_inverse(c2w), dtype=torch.float32)
    )
