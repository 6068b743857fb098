"""Small scene builders: random Gaussian clouds and a ring of cameras around them.

Useful for tutorials, tests and benchmarks; the camera maths is :mod:`gsnb.cameras`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gsnb.cameras import intrinsics, look_at
from gsnb.raster.sh import num_sh_bases


def random_gaussians(
    n: int,
    *,
    sh_degree: int | None = 3,
    extent: float = 1.0,
    scale_range: tuple[float, float] = (0.005, 0.05),
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> dict[str, Tensor]:
    """A random cloud of ``n`` Gaussians in a cube of half-size ``extent`` around the origin.

    Returns render-ready tensors ``means [N,3]``, ``quats [N,4]``, ``scales [N,3]``
    (log-uniform in ``scale_range`` times ``extent``), ``opacities [N]`` and
    ``colors`` (``[N,K,3]`` SH, or ``[N,3]`` RGB when ``sh_degree`` is None).

    Example:
        >>> g = random_gaussians(10, sh_degree=1)
        >>> {k: tuple(v.shape) for k, v in g.items()}["colors"]
        (10, 4, 3)
    """
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> Tensor:
        return torch.rand(*shape, generator=gen, dtype=torch.float64)

    lo, hi = math.log(scale_range[0] * extent), math.log(scale_range[1] * extent)
    out = {
        "means": (rand(n, 3) * 2 - 1) * extent,
        "quats": torch.randn(n, 4, generator=gen, dtype=torch.float64),
        "scales": torch.exp(lo + (hi - lo) * rand(n, 3)),
        "opacities": 0.05 + 0.9 * rand(n),
    }
    if sh_degree is None:
        out["colors"] = rand(n, 3)
    else:
        sh = torch.randn(n, num_sh_bases(sh_degree), 3, generator=gen, dtype=torch.float64) * 0.3
        sh[:, 0] = (rand(n, 3) - 0.5) / 0.28209479177387814
        out["colors"] = sh
    return {k: v.to(device=device, dtype=dtype) for k, v in out.items()}


def orbit_cameras(
    num: int, width: int, height: int, radius: float = 3.0, fov_x_degrees: float = 60.0
) -> tuple[Tensor, Tensor]:
    """``num`` cameras on a circle of ``radius`` around the origin, looking at it.

    ``fov_x_degrees`` is the horizontal field of view.

    Returns ``viewmats [num, 4, 4]`` and ``Ks [num, 3, 3]``, float32.

    Example:
        >>> viewmats, Ks = orbit_cameras(4, 64, 48)
        >>> tuple(viewmats.shape), round(float(Ks[0, 0, 0]), 3)
        ((4, 4, 4), 55.426)
    """
    views = []
    for i in range(num):
        a = 2 * math.pi * i / max(num, 1)
        eye = torch.tensor([radius * math.sin(a), -0.3 * radius, -radius * math.cos(a)])
        views.append(look_at(eye, torch.zeros(3)))
    K = intrinsics(width, height, fov_x_degrees, axis="x")
    return torch.stack(views), K[None].repeat(num, 1, 1)
