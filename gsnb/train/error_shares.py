"""Each Gaussian's share of a view's error, for error-based densification.

Rota Bulò et al. 2024 ("Revising Densification in Gaussian Splatting") grow the Gaussians
that carry the most of the image's error rather than those of the largest screen-space
gradient: a blurry Gaussian over fine texture draws gradients of both signs from its
pixels, which cancel in the gradient of its centre, but every one of those pixels is wrong.
A Gaussian's share of a view's error is ``sum over pixels p of w(p) * e(p)``: its blending
weight ``w = T * alpha`` at ``p`` times the pixel's error ``e``.

That sum is the gradient of ``sum_p e(p) * image(p)`` with respect to a colour every
Gaussian renders with weight one, so :func:`error_shares` renders the view once more with
constant colours and reads the colour gradient: any renderer with gsnb's signature gives it,
in either rasterize mode and through the 3D filter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from gsnb.raster.api import RenderResult
from gsnb.raster.sh import C0
from gsnb.train.pose_refine import MovedGaussians

Draw = Callable[[MovedGaussians], RenderResult]
"""``draw(gaussians) -> RenderResult``: render ``gaussians`` from the view at SH degree 0
over a black background (as the step's render, with its rasterize mode and 3D filter)."""


def pixel_error(rgb: Tensor, target: Tensor) -> Tensor:
    """``[H, W]`` error of each pixel: the mean over the channels of ``|rgb - target|``.

    Example:
        >>> import torch
        >>> pixel_error(torch.zeros(1, 2, 3), torch.tensor([[[0.3, 0.0, 0.0], [1.0, 1.0, 1.0]]]))
        tensor([[0.1000, 1.0000]])
    """
    if rgb.shape != target.shape or rgb.shape[-1] != 3:
        raise ValueError(
            f"rgb and target must be [H, W, 3] images of one shape; got {tuple(rgb.shape)} "
            f"and {tuple(target.shape)}"
        )
    return (rgb.detach() - target.detach()).abs().mean(-1)


def error_shares(splats: Mapping[str, Tensor], draw: Draw, error: Tensor) -> Tensor:
    """``[N]`` each Gaussian's share of ``error`` ``[H, W]``: the sum over the pixels of its
    blending weight there times the pixel's error, in pixels of error.

    ``splats`` are stored parameters (log-scales, opacity logits, ``means [N, 3]``); only
    their geometry and opacities matter. No gradient reaches them: the render's only
    leaf is a constant colour of the shares' own.

    Example:
        >>> import torch
        >>> from gsnb.raster.api import render_splats
        >>> splats = {"means": torch.tensor([[0.0, 0.0, 3.0]]),
        ...     "quats": torch.tensor([[1.0, 0, 0, 0]]),
        ...     "scales": torch.full((1, 3), -1.0), "opacities": torch.tensor([10.0]),
        ...     "sh0": torch.zeros(1, 1, 3), "shN": torch.zeros(1, 0, 3)}
        >>> K = torch.tensor([[[16.0, 0, 8], [0, 16.0, 8], [0, 0, 1]]])
        >>> def draw(g):
        ...     return render_splats(g.splats, torch.eye(4)[None], K, 16, 16, sh_degree=0,
        ...                          backgrounds=torch.zeros(3), backend="reference")
        >>> everywhere = error_shares(splats, draw, torch.ones(16, 16))
        >>> lit = draw(MovedGaussians(splats, (0.0, 0.0, 0.0))).alpha.sum()  # its weights' sum
        >>> bool(torch.isclose(everywhere[0], lit, rtol=1e-4))
        True
    """
    means = splats["means"]
    n = means.shape[0]
    colour = torch.zeros((n, 1, 3), device=means.device, dtype=means.dtype, requires_grad=True)
    moved = {name: value.detach() for name, value in splats.items() if name != "shN"}
    moved["sh0"] = colour
    moved["shN"] = means.new_zeros((n, 0, 3))
    with torch.enable_grad():
        out = draw(MovedGaussians(moved, (0.0, 0.0, 0.0)))
        rendered = out.rgb[0, ..., 0]
        if rendered.shape != error.shape:
            raise ValueError(
                f"the error map is {tuple(error.shape)}, the view renders "
                f"{tuple(rendered.shape)}; pass the view's own [H, W] error"
            )
        if not rendered.requires_grad:  # nothing in view
            return means.new_zeros(n)
        (grad,) = torch.autograd.grad((rendered * error.detach()).sum(), colour, allow_unused=True)
    if grad is None:
        return means.new_zeros(n)
    # The colour renders as sh0 * C0 + 0.5: its gradient is C0 times the weighted sum.
    return grad[:, 0, 0] / C0
