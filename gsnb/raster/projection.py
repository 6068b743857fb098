"""EWA projection of 3D Gaussians to screen-space splats, in plain PyTorch.

Shared by the reference backend and by tests; the CUDA backend implements the
same maths in ``csrc/projection_forward.cu`` and ``csrc/projection_backward.cu``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from gsnb.raster.constants import ALPHA_MIN, FOV_CLAMP, LOWPASS


class Projection(NamedTuple):
    """Screen-space splats of ``N`` Gaussians in ``C`` cameras."""

    means2d: Tensor  # [C, N, 2] pixel coordinates of the centres
    conics: Tensor  # [C, N, 3] inverse 2D covariance (a, b, c): [[a, b], [b, c]]
    depths: Tensor  # [C, N] view-space z
    radii: Tensor  # [C, N, 2] int32 half extents of the bounding box in px, 0 where culled
    # [C, N] opacity factor of the antialiased mode (sqrt(det(cov2d) / det(cov2d + 0.3 I))),
    # None in the classic mode
    compensations: Tensor | None = None


def quat_to_rotmat(quats: Tensor) -> Tensor:
    """Rotation matrices ``[..., 3, 3]`` of quaternions ``[..., 4]`` (wxyz, any norm)."""
    w, x, y, z = F.normalize(quats, dim=-1).unbind(-1)
    return torch.stack(
        [
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ],
        dim=-1,
    ).reshape(*quats.shape[:-1], 3, 3)


def covariances_3d(quats: Tensor, scales: Tensor) -> Tensor:
    """World-space covariances ``R S S^T R^T``, ``[N, 3, 3]``."""
    m = quat_to_rotmat(quats) * scales[..., None, :]
    return m @ m.transpose(-1, -2)


def project(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    opacities: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    near_plane: float,
    far_plane: float,
    antialiased: bool = False,
) -> Projection:
    """Project Gaussians into every camera (EWA splatting with a 0.3 px^2 low-pass).

    A splat is culled (radius 0) when its depth is outside ``(near, far)``, its
    opacity is below 1/255, or the box of pixels where its alpha can reach
    1/255 misses the image. With ``antialiased`` (gsplat's ``rasterize_mode=
    "antialiased"``, Mip-Splatting's 2D filter) the projection also returns each
    splat's ``compensations [C, N]``, ``sqrt(max(det(S) / det(S + 0.3 I), 0))`` of its 2D
    covariance ``S``, the factor on its opacity that keeps the low-pass from adding
    energy; the culling then uses the compensated opacity.
    """
    rot = viewmats[:, None, :3, :3]  # [C, 1, 3, 3]
    means_c = (rot @ means[None, :, :, None])[..., 0] + viewmats[:, None, :3, 3]  # [C, N, 3]
    x, y, z = means_c.unbind(-1)
    in_depth = (z > near_plane) & (z < far_plane)
    zs = torch.where(in_depth, z, torch.ones_like(z))

    fx, fy = Ks[:, 0, 0, None], Ks[:, 1, 1, None]
    cx, cy = Ks[:, 0, 2, None], Ks[:, 1, 2, None]
    margin_x = (FOV_CLAMP - 1.0) * 0.5 * width / fx
    margin_y = (FOV_CLAMP - 1.0) * 0.5 * height / fy
    lim_x = (-cx / fx - margin_x, (width - cx) / fx + margin_x)
    lim_y = (-cy / fy - margin_y, (height - cy) / fy + margin_y)
    tx = zs * torch.minimum(torch.maximum(x / zs, lim_x[0]), lim_x[1])
    ty = zs * torch.minimum(torch.maximum(y / zs, lim_y[0]), lim_y[1])

    zero = torch.zeros_like(zs)
    jac = torch.stack(
        [fx / zs, zero, -fx * tx / (zs * zs), zero, fy / zs, -fy * ty / (zs * zs)], dim=-1
    ).reshape(*zs.shape, 2, 3)
    cov_c = rot @ covariances_3d(quats, scales)[None] @ rot.transpose(-1, -2)  # [C, N, 3, 3]
    cov2d = jac @ cov_c @ jac.transpose(-1, -2)
    a = cov2d[..., 0, 0] + LOWPASS
    b = cov2d[..., 0, 1]
    c = cov2d[..., 1, 1] + LOWPASS
    det = a * c - b * b
    valid = in_depth & (det > 0)
    det_safe = torch.where(valid, det, torch.ones_like(det))
    conics = torch.stack([c / det_safe, -b / det_safe, a / det_safe], dim=-1)
    means2d = torch.stack([fx * x / zs + cx, fy * y / zs + cy], dim=-1)

    compensations = None
    culling = opacities.detach()
    if antialiased:
        ratio = (cov2d[..., 0, 0] * cov2d[..., 1, 1] - b * b) / det_safe
        # sqrt's gradient is infinite at 0: a degenerate splat gets none (it draws nothing).
        positive = valid & (ratio > 0)
        compensations = torch.where(
            positive, torch.sqrt(torch.where(positive, ratio, torch.ones_like(ratio))), 0.0
        )
        culling = culling[None] * compensations.detach()
    radii = splat_radii(means2d.detach(), a.detach(), c.detach(), culling, width, height)
    radii = torch.where(valid[..., None], radii, torch.zeros_like(radii))
    return Projection(means2d, conics, z, radii, compensations)


def splat_radii(
    means2d: Tensor, cov_xx: Tensor, cov_yy: Tensor, opacities: Tensor, width: int, height: int
) -> Tensor:
    """Half extents ``[C, N, 2]`` (int32) of the boxes where alpha can reach 1/255.

    ``opacities`` is ``[N]``, or ``[C, N]`` when it differs per camera (antialiased mode).

    alpha = o * exp(-d^T S^-1 d / 2) >= 1/255 holds inside the ellipse
    d^T S^-1 d <= 2 ln(255 o), whose box has half extents sqrt(2 ln(255 o) S_ii).
    Zero where the box misses the image. A box that overlaps the image yet holds
    no pixel centre still counts as visible, as in gsplat: densification divides
    a splat's summed screen-space gradient by the views that saw it, and its
    default thresholds were set with this count.
    """
    if opacities.dim() == 1:
        opacities = opacities[None]  # [1, N]
    log_ratio = torch.log(opacities.clamp_min(1e-30)) - math.log(ALPHA_MIN)
    extend2 = (2.0 * log_ratio).clamp_min(0.0)
    # At least 1 px: an opacity of exactly 1/255 still reaches the threshold at its centre.
    rx = torch.ceil(torch.sqrt(extend2 * cov_xx)).clamp(1, 2**30)
    ry = torch.ceil(torch.sqrt(extend2 * cov_yy)).clamp(1, 2**30)
    mx, my = means2d[..., 0], means2d[..., 1]
    hits = (
        (opacities >= ALPHA_MIN)  # the compositing's own test, in the same dtype
        & torch.isfinite(rx)
        & torch.isfinite(ry)
        & (mx + rx > 0)
        & (mx - rx < width)
        & (my + ry > 0)
        & (my - ry < height)
    )
    radii = torch.stack([rx, ry], dim=-1).nan_to_num(0.0)
    return torch.where(hits[..., None], radii, torch.zeros_like(radii)).to(torch.int32)
