"""Camera paths for videos: through given cameras, an orbit, or keyframes from a JSON file.

Every path returns ``viewmats [F, 4, 4]`` (world-to-camera, OpenCV: +x right,
+y down, +z forward) and ``Ks [F, 3, 3]`` for the requested output size, ready
for :func:`gsnb.render`. Fields of view here are vertical, in degrees; the
camera maths is :mod:`gsnb.cameras`.

Keyframe files are JSON::

    {
      "fov_deg": 50,              # optional vertical field of view (default 50)
      "up": [0, -1, 0],           # optional world up for "look_at" keyframes
      "loop": false,              # optional: return to the first keyframe
      "keyframes": [
        {"position": [0, 0, -4], "look_at": [0, 0, 0]},
        {"position": [3, -1, -3], "look_at": [0, 0, 0], "up": [0, -1, 0], "fov_deg": 40},
        {"viewmat": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 4], [0, 0, 0, 1]]}
      ]
    }

A keyframe is either ``position`` + ``look_at`` (+ its own ``up``) or a
world-to-camera ``viewmat`` (4x4, OpenCV), with an optional ``fov_deg``. At
least two keyframes are needed; the path passes through each of them.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from gsnb.cameras import intrinsics, look_at, matching_fov

DEFAULT_FOV_DEG = 50.0


@dataclass(frozen=True)
class Orbit:
    """A circle of cameras looking at ``centre``.

    Attributes:
        centre: ``[3]`` the point every camera looks at.
        up: ``[3]`` unit world up vector (the orbit's axis).
        radius: distance of the cameras from the axis.
        height: signed height of the camera circle above ``centre`` along ``up``.
        start: ``[3]`` unit vector from the axis towards the first camera.

    Example:
        >>> import numpy as np
        >>> orbit = Orbit(np.zeros(3), np.array([0.0, -1, 0]), 3.0, 1.0, np.array([1.0, 0, 0]))
        >>> orbit.radius
        3.0
    """

    centre: np.ndarray
    up: np.ndarray
    radius: float
    height: float
    start: np.ndarray


def fit_orbit(viewmats: Tensor) -> Orbit:
    """Fit an orbit to cameras ``viewmats [M, 4, 4]``.

    The centre is the point nearest to all optical axes in the least-squares
    sense (the mean camera centre if the axes are near parallel), the up
    vector the cameras' mean up (``-y`` in OpenCV), the radius and height the
    cameras' mean distance from the axis and mean height above the centre.

    Example:
        >>> import numpy as np, torch
        >>> ring = [look_at(np.array([3 * np.cos(a), -1.0, 3 * np.sin(a)]), np.zeros(3),
        ...                 np.array([0.0, -1, 0])) for a in np.arange(8) * np.pi / 4]
        >>> orbit = fit_orbit(torch.tensor(np.stack(ring)))
        >>> (np.round(orbit.centre, 3) + 0).tolist(), round(orbit.radius, 3), round(orbit.height, 3)
        ([0.0, 0.0, 0.0], 3.0, 1.0)
    """
    c2w = np.linalg.inv(_as_numpy(viewmats, (4, 4)))
    centres, forwards = c2w[:, :3, 3], c2w[:, :3, 2]
    up = -c2w[:, :3, 1].mean(axis=0)
    if np.linalg.norm(up) < 1e-6:
        raise ValueError("the cameras' up vectors cancel out; give the orbit an explicit up")
    up /= np.linalg.norm(up)
    # Least squares: sum over cameras of (I - f f^T)(x - c) = 0.
    projectors = np.eye(3)[None] - forwards[:, :, None] * forwards[:, None, :]
    a, b = projectors.sum(0), np.einsum("mij,mj->i", projectors, centres)
    focus = np.linalg.solve(a, b) if np.linalg.cond(a) < 1e6 else centres.mean(axis=0)
    return _orbit_around(focus, up, centres)


def fit_orbit_to_points(
    points: Tensor, up: np.ndarray | None = None, distance: float = 2.5, elevation_deg: float = 20.0
) -> Orbit:
    """An orbit around a cloud of points ``[P, 3]`` (e.g. the Gaussians' centres), with no cameras.

    The centre is the median point; the radius is ``distance`` times the
    80th percentile of the distances to it, seen from ``elevation_deg`` above
    the horizon. Without ``up``, the axis of least spread is taken as up,
    pointing towards ``-y`` (COLMAP and OpenCV worlds usually have y down).

    Example:
        >>> import torch
        >>> pts = torch.randn(1000, 3) * torch.tensor([1.0, 0.1, 1.0])
        >>> orbit = fit_orbit_to_points(pts)
        >>> bool(abs(orbit.up[1]) > 0.99), orbit.radius > 1
        (True, True)
    """
    pts = _as_numpy(points, (3,))
    if len(pts) == 0:
        raise ValueError("cannot fit an orbit to an empty point cloud")
    centre = np.median(pts, axis=0)
    if up is None:
        _, vectors = np.linalg.eigh(np.cov((pts - centre).T) if len(pts) > 1 else np.eye(3))
        up = vectors[:, 0] * (-1.0 if vectors[1, 0] > 0 else 1.0)
    up = np.asarray(up, float) / np.linalg.norm(up)
    reach = float(np.percentile(np.linalg.norm(pts - centre, axis=1), 80)) or 1.0
    elevation = math.radians(elevation_deg)
    start = _perpendicular(up)
    radius = distance * reach * math.cos(elevation)
    return Orbit(centre, up, radius, distance * reach * math.sin(elevation), start)


def orbit_path(
    orbit: Orbit, frames: int, width: int, height: int, fov_y_deg: float = DEFAULT_FOV_DEG
) -> tuple[Tensor, Tensor]:
    """``frames`` cameras evenly spaced on ``orbit`` (one full turn, no repeated frame).

    Returns:
        ``viewmats [F, 4, 4]`` and ``Ks [F, 3, 3]`` for ``width x height``.

    Example:
        >>> import numpy as np
        >>> orbit = Orbit(np.zeros(3), np.array([0.0, -1, 0]), 3.0, 1.0, np.array([1.0, 0, 0]))
        >>> viewmats, Ks = orbit_path(orbit, 12, 64, 48)
        >>> tuple(viewmats.shape), tuple(Ks.shape)
        ((12, 4, 4), (12, 3, 3))
    """
    _check_frames(frames)
    side = np.cross(orbit.up, orbit.start)
    poses = []
    for angle in np.linspace(0.0, 2 * np.pi, frames, endpoint=False):
        direction = np.cos(angle) * orbit.start + np.sin(angle) * side
        position = orbit.centre + orbit.radius * direction + orbit.height * orbit.up
        poses.append(look_at(position, orbit.centre, orbit.up))
    viewmats = torch.as_tensor(np.stack(poses), dtype=torch.float32)
    return viewmats, intrinsics(width, height, np.full(frames, fov_y_deg), axis="y")


def spline_path(
    viewmats: Tensor,
    frames: int,
    width: int,
    height: int,
    fov_y_deg: float | np.ndarray = DEFAULT_FOV_DEG,
    loop: bool = False,
) -> tuple[Tensor, Tensor]:
    """A smooth path through cameras ``viewmats [M, 4, 4]`` in their order.

    Positions follow a cubic spline (scipy ``CubicSpline``) parameterised by
    distance travelled, so the speed is steady; rotations are slerped between
    the keyframes (scipy ``Slerp``); the field of view (one value or one per
    camera) is interpolated linearly. With ``loop`` the path returns smoothly
    to the first camera.

    Returns:
        ``viewmats [F, 4, 4]`` and ``Ks [F, 3, 3]`` for ``width x height``.

    Example:
        >>> import numpy as np, torch
        >>> keys = torch.tensor(np.stack([look_at(np.array([x, 0.0, -4]), np.zeros(3),
        ...                                      np.array([0.0, -1, 0])) for x in (-1, 0, 1)]))
        >>> viewmats, Ks = spline_path(keys, 30, 64, 48)
        >>> bool(torch.allclose(viewmats[0], keys[0].float(), atol=1e-5)), tuple(Ks.shape)
        (True, (30, 3, 3))
    """
    from scipy.interpolate import CubicSpline
    from scipy.spatial.transform import Rotation, Slerp

    _check_frames(frames)
    c2w = np.linalg.inv(_as_numpy(viewmats, (4, 4)))
    fov = np.broadcast_to(np.asarray(fov_y_deg, dtype=np.float64), (len(c2w),))
    if len(c2w) < 2:
        raise ValueError(f"a path needs at least 2 cameras, got {len(c2w)}")
    if loop:
        c2w, fov = np.concatenate([c2w, c2w[:1]]), np.concatenate([fov, fov[:1]])
    positions = c2w[:, :3, 3]
    steps = np.linalg.norm(np.diff(positions, axis=0), axis=1)
    # Cameras that do not move between keyframes still need time to turn.
    steps = np.maximum(steps, 1e-3 * max(steps.mean(), 1e-9))
    knots = np.concatenate([[0.0], np.cumsum(steps)])
    times = np.linspace(0.0, knots[-1], frames, endpoint=not loop)
    spline = CubicSpline(knots, positions, bc_type="periodic" if loop else "natural")
    rotations = Slerp(knots, Rotation.from_matrix(c2w[:, :3, :3]))(times)
    out = np.tile(np.eye(4), (frames, 1, 1))
    out[:, :3, :3], out[:, :3, 3] = rotations.as_matrix(), spline(times)
    viewmats_out = torch.as_tensor(np.linalg.inv(out), dtype=torch.float32)
    return viewmats_out, intrinsics(width, height, np.interp(times, knots, fov), axis="y")


def train_path(
    viewmats: Tensor,
    Ks: Tensor,
    frames: int,
    width: int,
    height: int,
    source_size: tuple[int, int] | None = None,
    max_keyframes: int = 16,
) -> tuple[Tensor, Tensor]:
    """A smooth path through training cameras ``viewmats [M, 4, 4]``, ``Ks [M, 3, 3]``.

    At most ``max_keyframes`` evenly chosen cameras (first and last included)
    become keyframes of :func:`spline_path`, so the jitter of a hand-held
    capture does not shake the video. The field of view follows the cameras'
    (see :func:`gsnb.cameras.matching_fov`; ``source_size = (width, height)``
    of the training images makes it exact).

    Example:
        >>> import numpy as np, torch
        >>> keys = torch.tensor(np.stack([look_at(np.array([x, 0.0, -4]), np.zeros(3),
        ...                                      np.array([0.0, -1, 0])) for x in (-1, 0, 1)]))
        >>> K = torch.tensor([[50.0, 0, 32], [0, 50, 24], [0, 0, 1]]).expand(3, 3, 3)
        >>> viewmats, Ks = train_path(keys, K, 10, 128, 96)
        >>> tuple(viewmats.shape), round(float(Ks[0, 1, 1]), 1)
        ((10, 4, 4), 100.0)
    """
    if len(viewmats) != len(Ks):
        raise ValueError(f"got {len(viewmats)} viewmats but {len(Ks)} Ks; give one K per camera")
    keep = np.unique(np.linspace(0, len(viewmats) - 1, min(max_keyframes, len(viewmats))).round())
    keep = torch.as_tensor(keep.astype(np.int64))
    fov = matching_fov(Ks[keep], (width, height), source_size, axis="y")
    return spline_path(viewmats[keep], frames, width, height, fov)


def load_keyframes(path: str | os.PathLike[str]) -> dict:
    """Read and check a keyframe file (format in this module's docstring).

    Returns:
        ``{"viewmats": Tensor [M, 4, 4], "fov_deg": ndarray [M], "loop": bool}``.

    Raises:
        ValueError: the file is not valid JSON or a keyframe is malformed;
            the message names the keyframe and the fix.

    Example:
        >>> import json, tempfile
        >>> spec = {"keyframes": [{"position": [0, 0, -4], "look_at": [0, 0, 0]},
        ...                       {"position": [4, 0, 0], "look_at": [0, 0, 0], "fov_deg": 30}]}
        >>> file = tempfile.mkdtemp() + "/path.json"
        >>> _ = open(file, "w").write(json.dumps(spec))
        >>> keys = load_keyframes(file)
        >>> tuple(keys["viewmats"].shape), keys["fov_deg"].tolist()
        ((2, 4, 4), [50.0, 30.0])
    """
    try:
        spec = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(spec, dict) or not isinstance(spec.get("keyframes"), list):
        raise ValueError(f'{path} needs an object with a "keyframes" list (see gsnb.export.paths)')
    default_fov = float(spec.get("fov_deg", DEFAULT_FOV_DEG))
    default_up = spec.get("up", [0.0, -1.0, 0.0])
    poses, fovs = [], []
    for i, key in enumerate(spec["keyframes"]):
        try:
            if "viewmat" in key:
                pose = np.asarray(key["viewmat"], dtype=np.float64).reshape(4, 4)
            else:
                position, target = (
                    np.asarray(key[k], float).reshape(3) for k in ("position", "look_at")
                )
                pose = look_at(
                    position, target, np.asarray(key.get("up", default_up), float).reshape(3)
                )
            fovs.append(float(key.get("fov_deg", default_fov)))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(
                f'{path}: keyframe {i} is malformed ({err}); give "position" and "look_at" '
                'as 3 numbers each, or a 4x4 "viewmat"'
            ) from err
        poses.append(pose)
    if len(poses) < 2:
        raise ValueError(f"{path} has {len(poses)} keyframe(s); a path needs at least 2")
    viewmats = torch.as_tensor(np.stack(poses), dtype=torch.float64)
    return {
        "viewmats": viewmats,
        "fov_deg": np.asarray(fovs),
        "loop": bool(spec.get("loop", False)),
    }


def keyframe_path(
    path: str | os.PathLike[str], frames: int, width: int, height: int
) -> tuple[Tensor, Tensor]:
    """The smooth path through the keyframes of a JSON file (see :func:`load_keyframes`).

    Example:
        >>> import json, tempfile
        >>> spec = {"loop": True, "keyframes": [{"position": [0, 0, -4], "look_at": [0, 0, 0]},
        ...                                     {"position": [4, 0, 0], "look_at": [0, 0, 0]}]}
        >>> file = tempfile.mkdtemp() + "/path.json"
        >>> _ = open(file, "w").write(json.dumps(spec))
        >>> viewmats, Ks = keyframe_path(file, 24, 64, 48)
        >>> tuple(viewmats.shape)
        (24, 4, 4)
    """
    keys = load_keyframes(path)
    return spline_path(keys["viewmats"], frames, width, height, keys["fov_deg"], keys["loop"])


def _orbit_around(centre: np.ndarray, up: np.ndarray, positions: np.ndarray) -> Orbit:
    offsets = positions - centre
    heights = offsets @ up
    radial = offsets - heights[:, None] * up
    radius = float(np.linalg.norm(radial, axis=1).mean())
    if radius < 1e-9:
        raise ValueError("the cameras lie on the orbit's axis; an orbit cannot be fitted to them")
    first = (
        radial[0] / np.linalg.norm(radial[0])
        if np.linalg.norm(radial[0]) > 1e-9
        else _perpendicular(up)
    )
    return Orbit(centre, up, radius, float(heights.mean()), first)


def _perpendicular(up: np.ndarray) -> np.ndarray:
    helper = np.eye(3)[int(np.argmin(np.abs(up)))]
    side = helper - (helper @ up) * up
    return side / np.linalg.norm(side)


def _check_frames(frames: int) -> None:
    if frames < 1:
        raise ValueError(f"frames must be at least 1, got {frames}")


def _as_numpy(t: Tensor | np.ndarray, tail: tuple[int, ...]) -> np.ndarray:
    array = t.detach().cpu().double().numpy() if isinstance(t, Tensor) else np.asarray(t, float)
    if array.ndim != len(tail) + 1 or tuple(array.shape[1:]) != tail:
        raise ValueError(
            f"expected an array of shape [M, {', '.join(map(str, tail))}], got {list(array.shape)}"
        )
    if not np.isfinite(array).all():
        raise ValueError("camera or point values hold NaN or Inf")
    return array
