"""Initial points: checks, PLY point clouds, and random points inside the cameras' view frustums."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gsnb.data.dataset import View


def check_points(
    points: np.ndarray, rgb: np.ndarray | None, source: str
) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``points [P, 3]`` and ``rgb [P, 3]`` (grey when None); returns float64 arrays.

    Raises ValueError when the cloud is empty, misshapen or holds NaN/Inf.

    Example:
        >>> import numpy as np
        >>> p, c = check_points(np.zeros((2, 3)), None, "example")
        >>> c.tolist()
        [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]
    """
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 3:
        raise ValueError(f"points of {source} have shape {points.shape}; expected [P, 3]")
    if points.shape[0] == 0:
        raise ValueError(
            f"the point cloud of {source} is empty; remove the empty points file to start "
            "from random points, or re-run the reconstruction"
        )
    bad = ~np.isfinite(points).all(axis=1)
    if bad.any():
        raise ValueError(
            f"{int(bad.sum())} of {len(points)} points of {source} hold NaN or Inf; "
            "clean the point cloud (or delete it to start from random points)"
        )
    rgb = np.full_like(points, 0.5) if rgb is None else np.asarray(rgb, dtype=np.float64)
    if rgb.shape != points.shape:
        raise ValueError(
            f"point colours of {source} have shape {rgb.shape}; expected {points.shape}"
        )
    if not np.isfinite(rgb).all():
        raise ValueError(f"point colours of {source} hold NaN or Inf; fix the point cloud")
    return points, rgb.clip(0.0, 1.0)


def read_ply_points(path: str | Path) -> tuple[np.ndarray, np.ndarray | None]:
    """``points [P, 3]`` float64 and ``rgb [P, 3]`` in [0, 1] (None without colours) from a PLY.

    Colours are read from ``red``/``green``/``blue`` (integers are divided by 255).

    Example:
        >>> import tempfile, pathlib, numpy as np
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "p.ply"
        >>> write_ply_points(p, np.ones((2, 3)), np.zeros((2, 3)))
        >>> read_ply_points(p)[0].shape
        (2, 3)
    """
    from plyfile import PlyData, PlyElementParseError, PlyHeaderParseError

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"point cloud {path} does not exist")
    try:
        # mmap: a vertex count larger than the file fails instead of allocating it.
        ply = PlyData.read(str(path), mmap=True)
        vertex = ply["vertex"]
        points = np.stack([np.asarray(vertex[a], dtype=np.float64) for a in "xyz"], axis=1)
        names = vertex.data.dtype.names or ()
        rgb = None
        if all(c in names for c in ("red", "green", "blue")):
            cols = np.stack([np.asarray(vertex[c]) for c in ("red", "green", "blue")], axis=1)
            rgb = cols / 255.0 if np.issubdtype(cols.dtype, np.integer) else cols.astype(np.float64)
    except (PlyHeaderParseError, PlyElementParseError, KeyError, ValueError, OSError) as err:
        raise ValueError(
            f"cannot read point cloud {path} ({err}); the PLY file is malformed"
        ) from err
    return points, rgb


def write_ply_points(path: str | Path, points: np.ndarray, rgb: np.ndarray) -> None:
    """Write ``points [P, 3]`` and ``rgb [P, 3]`` in [0, 1] to a binary PLY, atomically.

    Example:
        >>> import tempfile, pathlib, numpy as np
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "p.ply"
        >>> write_ply_points(path, np.ones((1, 3)), np.ones((1, 3)))
    """
    from plyfile import PlyData, PlyElement

    from gsnb.utils.atomic import atomic_write

    dtype = [("x", "f4"), ("y", "f4"), ("z", "f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1")]
    data = np.empty(len(points), dtype=dtype)
    for i, a in enumerate("xyz"):
        data[a] = points[:, i]
    cols = (np.clip(rgb, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    for i, c in enumerate(("red", "green", "blue")):
        data[c] = cols[:, i]
    with atomic_write(path) as handle:
        PlyData([PlyElement.describe(data, "vertex")]).write(handle)


def random_frustum_points(
    views: Sequence[View], center: np.ndarray, extent: float, count: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` random points uniform in the cameras' view frustums, with random colours.

    Each point picks a view, a pixel, and a depth between ``near`` and ``far``
    with density proportional to depth squared (uniform in volume), where the
    range spans the ball of radius ``extent`` around ``center`` as seen from
    that camera. Returns ``points [count, 3]`` and ``rgb [count, 3]`` float64.

    Example:
        >>> import torch, numpy as np
        >>> from pathlib import Path
        >>> from gsnb.data.dataset import View
        >>> K = torch.tensor([[4.0, 0, 2], [0, 4, 2], [0, 0, 1]])
        >>> view = View("a", Path("a"), 4, 4, K, torch.eye(4))
        >>> pts, rgb = random_frustum_points([view], np.array([0.0, 0.0, 3.0]), 1.0, 100)
        >>> bool((pts[:, 2] > 0).all())
        True
    """
    if not views:
        raise ValueError("random points need at least one view")
    rng = np.random.default_rng(seed)
    which = rng.integers(0, len(views), count)
    out = np.empty((count, 3))
    center = np.asarray(center, dtype=np.float64)
    for i, view in enumerate(views):
        sel = np.flatnonzero(which == i)
        if sel.size == 0:
            continue
        viewmat = view.viewmat.double().numpy()
        k_inv = np.linalg.inv(view.K.double().numpy())
        rot, t = viewmat[:3, :3], viewmat[:3, 3]
        depth_center = float((rot @ center + t)[2])
        far = max(depth_center + extent, 1e-3 * extent)
        near = max(depth_center - extent, 0.02 * far)
        pix = np.stack(
            [
                rng.uniform(0, view.width, sel.size),
                rng.uniform(0, view.height, sel.size),
                np.ones(sel.size),
            ],
            axis=1,
        )
        u = rng.uniform(0.0, 1.0, sel.size)
        depth = np.cbrt(near**3 + u * (far**3 - near**3))
        cam = (pix @ k_inv.T) * depth[:, None]
        out[sel] = (cam - t) @ rot  # R^T (x_cam - t)
    return out, rng.uniform(0.0, 1.0, (count, 3))
