"""Real spherical harmonics with the constants of the original 3DGS code.

``color = max(SH(dir) + 0.5, 0)`` where ``dir`` is the unit vector from the
camera centre to the Gaussian. Degrees 0 to 3, so ``K = (degree + 1) ** 2`` is
1, 4, 9 or 16 coefficients per colour channel.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

C0 = 0.28209479177387814
C1 = 0.4886025119029199
C2 = (
    1.0925484305920792,
    -1.0925484305920792,
    0.31539156525252005,
    -1.0925484305920792,
    0.5462742152960396,
)
C3 = (
    -0.5900435899266435,
    2.890611442640554,
    -0.4570457994644658,
    0.3731763325901154,
    -0.4570457994644658,
    1.445305721320277,
    -0.5900435899266435,
)

MAX_SH_DEGREE = 3


def num_sh_bases(degree: int) -> int:
    """Number of SH coefficients per channel for ``degree``: 1, 4, 9 or 16."""
    return (degree + 1) ** 2


def sh_degree_from_bases(num_bases: int) -> int:
    """Inverse of :func:`num_sh_bases`; raises ``ValueError`` for other counts."""
    for degree in range(MAX_SH_DEGREE + 1):
        if num_sh_bases(degree) == num_bases:
            return degree
    raise ValueError(f"{num_bases} SH coefficients per channel is not (degree + 1)^2 for 0..3")


def eval_sh(degree: int, coeffs: Tensor, dirs: Tensor) -> Tensor:
    """Evaluate SH colours, ``SH(dir) + 0.5`` clamped at 0.

    Args:
        degree: SH degree to use, 0 to 3; may be lower than the coefficients hold.
        coeffs: ``[..., K, 3]`` coefficients, ``K >= (degree + 1) ** 2``.
        dirs: ``[..., 3]`` view directions (need not be unit length).

    Returns:
        ``[..., 3]`` colours.

    Example:
        >>> import torch
        >>> from gsnb.raster.sh import eval_sh
        >>> eval_sh(0, torch.zeros(2, 1, 3), torch.ones(2, 3)).tolist()
        [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]
    """
    result = C0 * coeffs[..., 0, :]
    if degree >= 1:
        d = dirs / torch.linalg.vector_norm(dirs, dim=-1, keepdim=True).clamp_min(1e-12)
        x, y, z = d[..., 0:1], d[..., 1:2], d[..., 2:3]
        result = (
            result
            - C1 * y * coeffs[..., 1, :]
            + C1 * z * coeffs[..., 2, :]
            - C1 * x * coeffs[..., 3, :]
        )
        if degree >= 2:
            xx, yy, zz = x * x, y * y, z * z
            xy, yz, xz = x * y, y * z, x * z
            result = (
                result
                + C2[0] * xy * coeffs[..., 4, :]
                + C2[1] * yz * coeffs[..., 5, :]
                + C2[2] * (2.0 * zz - xx - yy) * coeffs[..., 6, :]
                + C2[3] * xz * coeffs[..., 7, :]
                + C2[4] * (xx - yy) * coeffs[..., 8, :]
            )
            if degree >= 3:
                result = (
                    result
                    + C3[0] * y * (3.0 * xx - yy) * coeffs[..., 9, :]
                    + C3[1] * xy * z * coeffs[..., 10, :]
                    + C3[2] * y * (4.0 * zz - xx - yy) * coeffs[..., 11, :]
                    + C3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy) * coeffs[..., 12, :]
                    + C3[4] * x * (4.0 * zz - xx - yy) * coeffs[..., 13, :]
                    + C3[5] * z * (xx - yy) * coeffs[..., 14, :]
                    + C3[6] * x * (xx - 3.0 * yy) * coeffs[..., 15, :]
                )
    # Degree 0 ignores dirs, yet the result must still broadcast over them (one colour per
    # camera). numpy's broadcast of two shapes: torch's first call imports sympy (0.3 s).
    batch = np.broadcast_shapes(tuple(coeffs.shape[:-2]), tuple(dirs.shape[:-1]))
    return torch.clamp_min(result + 0.5, 0.0).expand(*batch, 3)


def rgb_to_sh0(rgb: Tensor) -> Tensor:
    """The degree-0 coefficient that renders as ``rgb``: ``(rgb - 0.5) / C0``."""
    return (rgb - 0.5) / C0


def sh0_to_rgb(sh0: Tensor) -> Tensor:
    """The colour a degree-0 coefficient renders as: ``sh0 * C0 + 0.5``."""
    return sh0 * C0 + 0.5
