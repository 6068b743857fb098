"""Cameras: look-at poses, intrinsics from a field of view, camera centres, FOV conversions.

The one place for camera maths; it sits below ``data``, ``raster``, ``export``
and ``viewer`` and imports none of them.

Conventions (as gsplat's):

- OpenCV camera axes: +x right, +y down, +z forward.
- A ``viewmat [..., 4, 4]`` maps world to camera coordinates; its rigid
  inverse is the camera-to-world pose ``c2w [..., 4, 4]``, whose rotation
  columns are the camera's right, down and forward axes in world coordinates.
- ``Ks [..., 3, 3]`` are pinhole intrinsics in pixels; pixel centres sit at
  ``i + 0.5``, so a centred principal point is ``(width / 2, height / 2)``.
- Angles are in degrees; the axis of a field of view is always named:
  ``axis="x"`` spans the image width, ``axis="y"`` its height.

Array types: the pose functions (:func:`look_at`, :func:`rigid_inverse`,
:func:`camera_centres`) return what they are given, a torch ``Tensor`` (same
dtype and device) for a tensor, else a numpy array (float64 from
:func:`look_at`, the input's float dtype from the other two).
:func:`intrinsics` and :func:`scale_intrinsics` return tensors, what
``gsnb.render`` takes. Fields of view and focal lengths are plain numbers:
float64 numpy values (tensors are read as float64).

Example:
    >>> import torch
    >>> viewmat = look_at(torch.tensor([0.0, 0, -3]), torch.zeros(3))
    >>> K = intrinsics(64, 48, 90.0, axis="x")
    >>> (camera_centres(viewmat) + 0).tolist(), round(float(fov_of(K, axis="x", size=64)), 6)
    ([0.0, 0.0, -3.0], 90.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, TypeVar

import numpy as np
import torch
from torch import Tensor

Axis = Literal["x", "y"]
# Index of an axis in K: fx = K[0, 0] spans the width, fy = K[1, 1] the height.
_AXES: dict[str, int] = {"x": 0, "y": 1}

Pose = TypeVar("Pose", Tensor, np.ndarray)


def look_at(
    eye: Tensor | np.ndarray | Sequence[float],
    target: Tensor | np.ndarray | Sequence[float],
    up: Tensor | np.ndarray | Sequence[float] = (0.0, -1.0, 0.0),
) -> Tensor | np.ndarray:
    """World-to-camera ``viewmat [..., 4, 4]`` of a camera at ``eye [..., 3]`` looking at
    ``target [..., 3]`` (OpenCV: +z towards ``target``, +y down).

    ``up [..., 3]`` is the world direction that appears upwards in the image;
    the default ``(0, -1, 0)`` suits OpenCV and COLMAP worlds (y down). The
    arguments broadcast against each other. The maths runs in float64; a
    tensor ``eye`` or ``target`` gives a tensor of its dtype and device, else a
    float64 numpy array.

    Raises:
        ValueError: ``eye`` and ``target`` coincide, or the camera looks along ``up``.

    Example:
        >>> import torch
        >>> v = look_at(torch.tensor([0.0, 0, -3]), torch.zeros(3))
        >>> (v @ torch.tensor([0.0, 0, 0, 1]))[:3].tolist()
        [0.0, 0.0, 3.0]
    """
    like = next((v for v in (eye, target) if isinstance(v, Tensor)), None)
    e, t, u = (_float64(v) for v in (eye, target, up))
    forward = t - e
    distance = np.linalg.norm(forward, axis=-1, keepdims=True)
    if (distance < 1e-12).any():
        raise ValueError("a camera's eye and target coincide; move one of them")
    forward = forward / distance
    right = np.cross(forward, u)
    length = np.linalg.norm(right, axis=-1, keepdims=True)
    if (length < 1e-9).any():
        raise ValueError("a camera looks along its up vector; give another 'up'")
    right = right / length
    down = np.cross(forward, right)
    right, down, forward, e = np.broadcast_arrays(right, down, forward, e)
    c2w = np.zeros((*e.shape[:-1], 4, 4))
    c2w[..., :3, :3] = np.stack([right, down, forward], axis=-1)
    c2w[..., :3, 3], c2w[..., 3, 3] = e, 1.0
    viewmat = rigid_inverse(c2w)
    if like is None:
        return viewmat
    dtype = like.dtype if like.is_floating_point() else torch.get_default_dtype()
    return torch.as_tensor(viewmat, dtype=dtype, device=like.device)


def rigid_inverse(matrices: Pose) -> Pose:
    """Inverse ``[..., 4, 4]`` of rigid transforms ``[R | t]`` ``[..., 4, 4]``: ``[R^T | -R^T t]``.

    A ``viewmat`` gives its camera-to-world pose and a pose its ``viewmat``.

    Example:
        >>> import numpy as np
        >>> c2w = np.eye(4); c2w[:3, 3] = (1.0, 2.0, 3.0)
        >>> rigid_inverse(c2w)[:3, 3].tolist()
        [-1.0, -2.0, -3.0]
    """
    matrices = _floating(matrices)
    rotation_t = matrices[..., :3, :3].swapaxes(-1, -2)
    out = torch.zeros_like(matrices) if isinstance(matrices, Tensor) else np.zeros_like(matrices)
    out[..., :3, :3] = rotation_t
    out[..., :3, 3] = ((-rotation_t) @ matrices[..., :3, 3:4])[..., 0]
    out[..., 3, 3] = 1.0
    return out


def camera_centres(viewmats: Pose) -> Pose:
    """World positions ``[..., 3]`` of cameras ``viewmats [..., 4, 4]``: ``-R^T t``.

    Differentiable for tensors; computed in the input's dtype.

    Example:
        >>> import torch
        >>> vm = torch.eye(4)[None].clone(); vm[0, 2, 3] = 4.0
        >>> (camera_centres(vm) + 0).tolist()  # + 0 turns -0.0 into 0.0
        [[0.0, 0.0, -4.0]]
    """
    viewmats = _floating(viewmats)
    rotation = viewmats[..., :3, :3]
    return -(rotation.swapaxes(-1, -2) @ viewmats[..., :3, 3:4])[..., 0]


def focal_from_fov(
    fov_deg: float | np.ndarray | Tensor, size: float | np.ndarray
) -> np.floating | np.ndarray:
    """Focal length in pixels for a field of view of ``fov_deg`` degrees over ``size`` pixels.

    ``size`` is the image width for a horizontal field of view, its height
    for a vertical one (or its diagonal, for a diagonal one).

    Example:
        >>> round(float(focal_from_fov(90.0, 64)), 9)
        32.0
    """
    return 0.5 * np.asarray(size, np.float64) / np.tan(np.deg2rad(_float64(fov_deg)) / 2)


def fov_from_focal(
    focal: float | np.ndarray | Tensor, size: float | np.ndarray
) -> np.floating | np.ndarray:
    """Field of view in degrees over ``size`` pixels of a focal length of ``focal`` pixels.

    The inverse of :func:`focal_from_fov`.

    Example:
        >>> round(float(fov_from_focal(32.0, 64)), 6)
        90.0
    """
    return np.rad2deg(2 * np.arctan(0.5 * np.asarray(size, np.float64) / _float64(focal)))


def intrinsics(
    width: int,
    height: int,
    fov_deg: float | np.ndarray | Tensor,
    *,
    axis: Axis,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Pinhole ``K [..., 3, 3]`` of ``width x height`` images with a field of view of ``fov_deg``.

    ``axis="x"``: ``fov_deg`` spans the width; ``axis="y"``: the height.
    Square pixels, principal point at the image centre. ``fov_deg`` is one
    number (``K [3, 3]``) or an array ``[...]`` of them (``Ks [..., 3, 3]``).

    Raises:
        ValueError: the size is not positive or a field of view is outside (0, 180).

    Example:
        >>> intrinsics(64, 48, 90.0, axis="y").tolist()
        [[24.0, 0.0, 32.0], [0.0, 24.0, 24.0], [0.0, 0.0, 1.0]]
        >>> tuple(intrinsics(64, 48, [60.0, 90.0], axis="x").shape)
        (2, 3, 3)
    """
    if width < 1 or height < 1:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    fov = _float64(fov_deg)
    if not np.all((fov > 0) & (fov < 180)):
        raise ValueError(f"fov_deg must lie in (0, 180) degrees, got {fov.min()}..{fov.max()}")
    focal = focal_from_fov(fov, (width, height)[_axis(axis)])
    ks = np.zeros((*fov.shape, 3, 3))
    ks[..., 0, 0] = ks[..., 1, 1] = focal
    ks[..., 0, 2], ks[..., 1, 2], ks[..., 2, 2] = width / 2, height / 2, 1.0
    return torch.as_tensor(ks, dtype=dtype)


def fov_of(
    Ks: Tensor | np.ndarray, *, axis: Axis, size: float | None = None
) -> np.floating | np.ndarray:
    """Field of view in degrees ``[...]`` of cameras ``Ks [..., 3, 3]`` along ``axis``.

    ``size`` is the images' width (``axis="x"``) or height (``axis="y"``) in
    pixels; without it, twice the principal point stands in for it.

    Example:
        >>> import torch
        >>> K = torch.tensor([[24.0, 0, 32], [0, 24, 24], [0, 0, 1]])
        >>> round(float(fov_of(K, axis="y")), 6), round(float(fov_of(K, axis="x")), 3)
        (90.0, 106.26)
    """
    i = _axis(axis)
    ks = _float64(Ks)
    return fov_from_focal(ks[..., i, i], 2 * ks[..., i, 2] if size is None else size)


def matching_fov(
    Ks: Tensor | np.ndarray,
    size: tuple[int, int],
    source_size: tuple[float, float] | None = None,
    *,
    axis: Axis,
) -> np.ndarray:
    """Field of view in degrees ``[M]`` along ``axis`` of ``size = (w, h)`` images that keeps the
    diagonal field of view of cameras ``Ks [M, 3, 3]``.

    A portrait dataset filmed into a landscape video keeps its apparent zoom.
    ``source_size`` is the cameras' image ``(width, height)``; without it,
    twice the cameras' mean principal point stands in for it. The new images
    have square pixels, so the cameras' focal is the mean ``sqrt(fx fy)``.

    Example:
        >>> import torch
        >>> K = torch.tensor([[[24.0, 0, 32], [0, 24, 24], [0, 0, 1]]])
        >>> round(float(matching_fov(K, (128, 96), axis="y")[0]), 3)
        90.0
    """
    ks = _float64(Ks)
    source = source_size or (float(2 * ks[:, 0, 2].mean()), float(2 * ks[:, 1, 2].mean()))
    diagonal = fov_from_focal(np.sqrt(ks[:, 0, 0] * ks[:, 1, 1]), math.hypot(*source))
    focal = focal_from_fov(diagonal, math.hypot(*size))
    return fov_from_focal(focal, size[_axis(axis)])


def scale_intrinsics(Ks: Tensor, from_size: tuple[int, int], to_size: tuple[int, int]) -> Tensor:
    """``Ks [..., 3, 3]`` of ``from_size = (w, h)`` images rescaled for images of ``to_size``.

    Pixel centres sit at ``i + 0.5``, so focal lengths and the principal point
    scale by the same factor along each axis.

    Example:
        >>> import torch
        >>> K = torch.tensor([[[100.0, 0, 64], [0, 100, 48], [0, 0, 1]]])
        >>> scale_intrinsics(K, (128, 96), (64, 48))[0].tolist()
        [[50.0, 0.0, 32.0], [0.0, 50.0, 24.0], [0.0, 0.0, 1.0]]
    """
    scaled = Ks.clone()
    scaled[..., 0, :] *= to_size[0] / from_size[0]
    scaled[..., 1, :] *= to_size[1] / from_size[1]
    return scaled


def wxyz_from_matrix(rotation: np.ndarray) -> np.ndarray:
    """``[4]`` unit quaternion ``(w, x, y, z)``, ``w >= 0``, of a ``[3, 3]`` rotation matrix.

    Example:
        >>> wxyz_from_matrix(np.eye(3)).tolist()
        [1.0, 0.0, 0.0, 0.0]
    """
    from scipy.spatial.transform import Rotation

    x, y, z, w = Rotation.from_matrix(np.asarray(rotation, dtype=np.float64)).as_quat()
    q = np.array([w, x, y, z])
    return q if w >= 0 else -q


def matrix_from_wxyz(wxyz: np.ndarray | Sequence[float]) -> np.ndarray:
    """``[3, 3]`` rotation matrix of a ``(w, x, y, z)`` quaternion (normalised first).

    Example:
        >>> matrix_from_wxyz((1.0, 0.0, 0.0, 0.0)).tolist()[0]
        [1.0, 0.0, 0.0]
    """
    w, x, y, z = (float(v) for v in wxyz)
    norm = math.hypot(w, x, y, z)
    if not math.isfinite(norm) or norm == 0:
        raise ValueError(f"camera quaternion must be finite and non-zero, got {tuple(wxyz)}")
    w, x, y, z = w / norm, x / norm, y / norm, z / norm
    # the closed form of a unit quaternion (a viewer calls this for every frame: no scipy object)
    return np.array(
        [
            [1.0 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1.0 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1.0 - 2 * (x * x + y * y)],
        ]
    )


def _axis(axis: str) -> int:
    if axis not in _AXES:
        raise ValueError(f'axis must be "x" (width) or "y" (height), got {axis!r}')
    return _AXES[axis]


def _floating(values: Pose) -> Pose:
    if isinstance(values, Tensor):
        return values if values.is_floating_point() else values.to(torch.get_default_dtype())
    array = np.asarray(values)
    return array if np.issubdtype(array.dtype, np.floating) else array.astype(np.float64)


def _float64(values: float | Sequence[float] | np.ndarray | Tensor) -> np.ndarray:
    if isinstance(values, Tensor):
        return values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64)
