"""A brute-force renderer for the tests: every Gaussian against every pixel.

Written from DESIGN.md's compositing semantics, independently of
``gsnb.raster.reference`` (no tiles, no radii, no log-space transmittance): the
projection uses its own quaternion formula and a matrix inverse, and the
compositing is the per-pixel loop of the original 3DGS rasterizer, vectorised
over pixels only. SH colours come from :func:`gsnb.raster.sh.eval_sh`, which
``test_sh.py`` checks against scipy's spherical harmonics.

Example:
    >>> import torch
    >>> rgb, alpha, depth = render_brute(
    ...     torch.tensor([[0.0, 0, 2]]), torch.tensor([[1.0, 0, 0, 0]]),
    ...     torch.full((1, 3), 0.2), torch.tensor([0.9]), torch.ones(1, 3),
    ...     torch.eye(4)[None], torch.tensor([[[64.0, 0, 32], [0, 64, 32], [0, 0, 1]]]), 64, 64)
    >>> round(alpha[0, 32, 32, 0].item(), 2)
    0.89
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gsnb.raster.sh import eval_sh

LOWPASS = 0.3
ALPHA_MAX = 0.99
ALPHA_MIN = 1.0 / 255.0
T_MIN = 1e-4
FOV_CLAMP = 1.3


def rotation_matrices(quats: Tensor) -> Tensor:
    """``[N, 3, 3]`` rotations of wxyz quaternions ``[N, 4]``.

    Uses ``R = (w^2 - v.v) I + 2 v v^T + 2 w [v]x`` for the unit quaternion ``(w, v)``.
    """
    q = quats / quats.norm(dim=-1, keepdim=True)
    w, v = q[:, 0], q[:, 1:]
    zero = torch.zeros_like(w)
    cross = torch.stack(
        [zero, -v[:, 2], v[:, 1], v[:, 2], zero, -v[:, 0], -v[:, 1], v[:, 0], zero], dim=-1
    ).reshape(-1, 3, 3)
    eye = torch.eye(3, dtype=quats.dtype, device=quats.device)
    return (
        (w * w - (v * v).sum(-1))[:, None, None] * eye
        + 2 * v[:, :, None] * v[:, None, :]
        + 2 * w[:, None, None] * cross
    )


@dataclass
class Splats:
    """Screen-space splats of ``N`` Gaussians in ``C`` cameras."""

    means2d: Tensor  # [C, N, 2]
    cov2d: Tensor  # [C, N, 2, 2], low-pass included
    depths: Tensor  # [C, N]


def project_brute(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
) -> Splats:
    """EWA projection in plain matrix maths, one camera at a time."""
    rot = rotation_matrices(quats)
    cov3d = rot @ torch.diag_embed(scales * scales) @ rot.transpose(-1, -2)
    all_means, all_covs, all_depths = [], [], []
    for viewmat, K in zip(viewmats, Ks, strict=True):
        fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
        r, t = viewmat[:3, :3], viewmat[:3, 3]
        x, y, z = (means @ r.T + t).unbind(-1)
        all_means.append(torch.stack([fx * x / z + cx, fy * y / z + cy], dim=-1))
        # gsplat/INRIA evaluate the Jacobian with x/z, y/z clamped to 1.3x the field of view.
        lim = (FOV_CLAMP - 1) * 0.5
        u = torch.clamp(x / z, -cx / fx - lim * width / fx, (width - cx) / fx + lim * width / fx)
        v = torch.clamp(y / z, -cy / fy - lim * height / fy, (height - cy) / fy + lim * height / fy)
        zero = torch.zeros_like(z)
        jac = torch.stack(
            [
                torch.stack([fx / z, zero, -fx * u / z], dim=-1),
                torch.stack([zero, fy / z, -fy * v / z], dim=-1),
            ],
            dim=-2,
        )  # [N, 2, 3]
        cov2d = jac @ r @ cov3d @ r.T @ jac.transpose(-1, -2)
        all_covs.append(cov2d + LOWPASS * torch.eye(2, dtype=means.dtype, device=means.device))
        all_depths.append(z)
    return Splats(torch.stack(all_means), torch.stack(all_covs), torch.stack(all_depths))


def composite_brute(
    means2d: Tensor,
    cov2d: Tensor,
    opacities: Tensor,
    colors: Tensor,
    depths: Tensor,
    width: int,
    height: int,
    near_plane: float = 0.01,
    far_plane: float = 1e10,
) -> tuple[Tensor, Tensor, Tensor]:
    """Blend one camera's splats into ``rgb [H, W, 3]``, ``alpha [H, W, 1]``, ``depth [H, W, 1]``.

    ``means2d`` is ``[N, 2]``, or ``[H, W, N, 2]`` to give each pixel its own copy
    (so that the gradient of each copy is that pixel's share). Follows the
    original 3DGS loop: skip alpha < 1/255; stop the pixel (for good) at the
    first splat that would take the transmittance below 1e-4, without blending it.
    """
    dtype, device = colors.dtype, colors.device
    py, px = torch.meshgrid(
        torch.arange(height, dtype=dtype, device=device) + 0.5,
        torch.arange(width, dtype=dtype, device=device) + 0.5,
        indexing="ij",
    )
    trans = torch.ones(height, width, dtype=dtype, device=device)
    done = torch.zeros(height, width, dtype=torch.bool, device=device)
    rgb = torch.zeros(height, width, 3, dtype=dtype, device=device)
    zsum = torch.zeros(height, width, dtype=dtype, device=device)
    conics = torch.linalg.inv(cov2d)
    in_range = ((depths > near_plane) & (depths < far_plane)).tolist()
    for g in torch.argsort(depths.detach(), stable=True).tolist():
        if not in_range[g]:
            continue
        conic = conics[g]
        dx = px - means2d[..., g, 0]
        dy = py - means2d[..., g, 1]
        power = -0.5 * (conic[0, 0] * dx * dx + 2 * conic[0, 1] * dx * dy + conic[1, 1] * dy * dy)
        alpha = torch.clamp_max(opacities[g] * torch.exp(power), ALPHA_MAX)
        active = ~done & (alpha >= ALPHA_MIN) & (power <= 0)
        test_t = trans * (1 - alpha)
        stop = active & (test_t < T_MIN)
        done = done | stop
        blend = active & ~stop
        weight = torch.where(blend, alpha * trans, torch.zeros_like(alpha))
        rgb = rgb + weight[..., None] * colors[g]
        zsum = zsum + weight * depths[g]
        trans = torch.where(blend, test_t, trans)
    alpha_img = 1 - trans
    depth = torch.where(alpha_img > 0, zsum / alpha_img.clamp_min(1e-300), torch.zeros_like(zsum))
    return rgb, alpha_img[..., None], depth[..., None]


def camera_colors(
    means: Tensor, colors: Tensor, viewmats: Tensor, sh_degree: int | None = None
) -> Tensor:
    """``[C, N, 3]`` colours: RGB as given, or SH evaluated towards each camera centre."""
    if colors.dim() == 2:
        return colors[None].expand(viewmats.shape[0], -1, -1)
    degree = sh_degree if sh_degree is not None else int(colors.shape[1] ** 0.5) - 1
    centres = torch.stack([-(vm[:3, :3].T @ vm[:3, 3]) for vm in viewmats])
    return eval_sh(degree, colors[None], means[None] - centres[:, None])


def render_brute(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    opacities: Tensor,
    colors: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    *,
    sh_degree: int | None = None,
    backgrounds: Tensor | None = None,
    near_plane: float = 0.01,
    far_plane: float = 1e10,
) -> tuple[Tensor, Tensor, Tensor]:
    """What ``gsnb.render`` must return: ``rgb [C, H, W, 3]``, alpha and depth ``[C, H, W, 1]``."""
    splats = project_brute(means, quats, scales, viewmats, Ks, width, height)
    feats = camera_colors(means, colors, viewmats, sh_degree)
    outs = []
    for c in range(viewmats.shape[0]):
        args = (splats.means2d[c], splats.cov2d[c], opacities, feats[c], splats.depths[c])
        outs.append(composite_brute(*args, width, height, near_plane, far_plane))
    rgb, alpha, depth = (torch.stack(t) for t in zip(*outs, strict=True))
    if backgrounds is not None:
        rgb = rgb + (1 - alpha) * backgrounds.expand(viewmats.shape[0], 3)[:, None, None]
    return rgb, alpha, depth


def raw_alphas(splats: Splats, opacities: Tensor, width: int, height: int) -> Tensor:
    """``[C, N, H, W]`` unclamped ``opacity * exp(-d^T S^-1 d / 2)``.

    Lets gradient tests check that no pixel sits at the 1/255 or 0.99 thresholds.
    """
    dtype = opacities.dtype
    py, px = torch.meshgrid(
        torch.arange(height, dtype=dtype) + 0.5,
        torch.arange(width, dtype=dtype) + 0.5,
        indexing="ij",
    )
    conic = torch.linalg.inv(splats.cov2d)  # [C, N, 2, 2]
    dx = px - splats.means2d[..., 0, None, None]
    dy = py - splats.means2d[..., 1, None, None]
    c = conic[..., None, None, :, :]
    power = -0.5 * (c[..., 0, 0] * dx * dx + 2 * c[..., 0, 1] * dx * dy + c[..., 1, 1] * dy * dy)
    return opacities[:, None, None] * torch.exp(power)


def assert_images_close(
    got: tuple[Tensor, Tensor, Tensor], want: tuple[Tensor, Tensor, Tensor], atol: float
) -> None:
    """``torch.testing.assert_close`` on ``(rgb, alpha, depth)``, naming the output that differs."""
    for name, a, b in zip(("rgb", "alpha", "depth"), got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=atol, msg=lambda m, n=name: f"{n}: {m}")
