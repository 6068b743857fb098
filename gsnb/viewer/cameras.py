"""Camera conversions between gsnb views and a browser's camera (OpenCV axes everywhere).

A browser camera is a pose ``T_world_camera`` (quaternion ``wxyz`` and
``position``), a vertical field of view and a canvas size, as viser reports
it. :func:`view_from_pose` turns it into a :class:`~gsnb.data.dataset.View`
that ``Trainer.render_view`` renders; :func:`pose_of_view` goes the other
way for drawing the training cameras.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from scipy.spatial.transform import Rotation

from gsnb.data.dataset import View


def wxyz_from_matrix(rotation: np.ndarray) -> np.ndarray:
    """``[4]`` unit quaternion (w, x, y, z) of a ``[3, 3]`` rotation matrix.

    Example:
        >>> wxyz_from_matrix(np.eye(3)).tolist()
        [1.0, 0.0, 0.0, 0.0]
    """
    x, y, z, w = Rotation.from_matrix(np.asarray(rotation, dtype=np.float64)).as_quat()
    q = np.array([w, x, y, z])
    return q if w >= 0 else -q


def matrix_from_wxyz(wxyz: np.ndarray | tuple[float, ...]) -> np.ndarray:
    """``[3, 3]`` rotation matrix of a (w, x, y, z) quaternion (normalised first).

    Example:
        >>> matrix_from_wxyz((1.0, 0.0, 0.0, 0.0)).tolist()[0]
        [1.0, 0.0, 0.0]
    """
    w, x, y, z = (float(v) for v in wxyz)
    if not math.isfinite(w + x + y + z) or w * w + x * x + y * y + z * z == 0:
        raise ValueError(f"camera quaternion must be finite and non-zero, got {tuple(wxyz)}")
    return Rotation.from_quat([x, y, z, w]).as_matrix()


def pose_of_view(view: View) -> tuple[np.ndarray, np.ndarray]:
    """``(wxyz [4], position [3])`` of the camera-to-world pose of ``view``.

    Example:
        >>> v = View("a", Path("a"), 4, 4, torch.eye(3), torch.eye(4))
        >>> [p.tolist() for p in pose_of_view(v)]
        [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    viewmat = torch.as_tensor(view.viewmat, dtype=torch.float64).cpu().numpy()
    rotation = viewmat[:3, :3].T
    position = -rotation @ viewmat[:3, 3]
    return wxyz_from_matrix(rotation), position


def vertical_fov(view: View) -> float:
    """Vertical field of view of ``view`` in radians: ``2 atan(H / (2 fy))``.

    Example:
        >>> K = torch.diag(torch.tensor([5.0, 5.0, 1.0]))
        >>> v = View("a", Path("a"), 10, 10, K, torch.eye(4))
        >>> round(math.degrees(vertical_fov(v)), 3)
        90.0
    """
    return 2.0 * math.atan(0.5 * view.height / float(view.K[1, 1]))


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
    rotation = matrix_from_wxyz(wxyz)
    center = np.asarray(position, dtype=np.float64).reshape(3)
    if not np.isfinite(center).all():
        raise ValueError(f"camera position must be finite, got {center.tolist()}")
    viewmat = np.eye(4)
    viewmat[:3, :3] = rotation.T
    viewmat[:3, 3] = -rotation.T @ center
    focal = 0.5 * height / math.tan(0.5 * fov)
    K = np.array([[focal, 0.0, width / 2], [0.0, focal, height / 2], [0.0, 0.0, 1.0]])
    return View(
        name,
        Path(name),
        width,
        height,
        torch.tensor(K, dtype=torch.float32),
        torch.tensor(viewmat, dtype=torch.float32),
    )


def scaled_view(view: View, width: int) -> View:
    """``view`` resized to ``width`` pixels wide (height and intrinsics scaled alike).

    Example:
        >>> v = view_from_pose((1, 0, 0, 0), (0, 0, 0), 1.0, 200, 100)
        >>> s = scaled_view(v, 50)
        >>> s.width, s.height, float(s.K[0, 2])
        (50, 25, 25.0)
    """
    width = int(width)
    if width < 1:
        raise ValueError(f"width must be positive, got {width}")
    if width == view.width:
        return view
    scale = width / view.width
    height = max(1, round(view.height * scale))
    K = torch.as_tensor(view.K, dtype=torch.float32).clone()
    K[0] *= width / view.width
    K[1] *= height / view.height
    return View(view.name, view.image_path, width, height, K, view.viewmat)
