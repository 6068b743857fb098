"""Small deterministic scenes for the renderer tests.

Example:
    >>> scene = random_scene(10, width=17, height=13, seed=0)
    >>> tuple(scene.means.shape), tuple(scene.viewmats.shape)
    ((10, 3), (1, 4, 4))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from gsnb.cameras import look_at


@dataclass
class Scene:
    """Inputs of ``gsnb.render`` in order; ``args()`` unpacks them."""

    means: Tensor
    quats: Tensor
    scales: Tensor
    opacities: Tensor
    colors: Tensor
    viewmats: Tensor
    Ks: Tensor
    width: int
    height: int

    def args(self) -> tuple:
        """The positional arguments of ``gsnb.render``."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def tensors(self) -> dict[str, Tensor]:
        """The tensor arguments by name."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("width", "height")
        }

    def with_grad(self) -> Scene:
        """A copy whose tensors are fresh leaves that require grad."""
        leaves = {k: v.detach().clone().requires_grad_() for k, v in self.tensors().items()}
        return replace(self, **leaves)

    def camera(self, index: int) -> Scene:
        """The same Gaussians seen by camera ``index`` alone."""
        return replace(
            self, viewmats=self.viewmats[index : index + 1], Ks=self.Ks[index : index + 1]
        )


def intrinsics(width: int, height: int, focal: float, dtype: torch.dtype = torch.float64) -> Tensor:
    """``[3, 3]`` pinhole matrix with the principal point at the image centre."""
    return torch.tensor(
        [[focal, 0.0, width / 2], [0.0, focal, height / 2], [0.0, 0.0, 1.0]], dtype=dtype
    )


def random_scene(
    n: int,
    *,
    width: int,
    height: int,
    num_cams: int = 1,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    sh_degree: int | None = None,
    opacity_range: tuple[float, float] = (0.05, 0.95),
    scale_range: tuple[float, float] = (0.03, 0.4),
    spread: float = 1.0,
) -> Scene:
    """``n`` random Gaussians around the origin seen by cameras 4 units away.

    Cameras look at the origin from directions around -z; focal lengths make the
    unit ball fill most of the image, so some Gaussians straddle the borders.
    """
    gen = torch.Generator().manual_seed(seed)

    def uniform(shape: tuple[int, ...], low: float, high: float) -> Tensor:
        return low + (high - low) * torch.rand(shape, generator=gen, dtype=dtype)

    means = spread * torch.randn(n, 3, generator=gen, dtype=dtype)
    quats = torch.randn(n, 4, generator=gen, dtype=dtype)
    log_lo, log_hi = math.log(scale_range[0]), math.log(scale_range[1])
    scales = torch.exp(uniform((n, 3), log_lo, log_hi))
    opacities = uniform((n,), *opacity_range)
    if sh_degree is None:
        colors = uniform((n, 3), 0.1, 0.9)
    else:
        colors = 0.3 * torch.randn(n, (sh_degree + 1) ** 2, 3, generator=gen, dtype=dtype)
    viewmats, Ks = [], []
    for _ in range(num_cams):
        eye = torch.cat([uniform((2,), -1.5, 1.5), torch.tensor([-4.0], dtype=dtype)])
        eye = 4.0 * eye / eye.norm()
        viewmats.append(look_at(eye, uniform((3,), -0.2, 0.2)))
        focal = 1.6 * max(width, height) * float(uniform((1,), 0.9, 1.1))
        K = intrinsics(width, height, focal, dtype)
        K[:2, 2] += uniform((2,), -0.3, 0.3)
        Ks.append(K)
    return Scene(
        means,
        quats,
        scales,
        opacities,
        colors,
        torch.stack(viewmats),
        torch.stack(Ks),
        width,
        height,
    )
