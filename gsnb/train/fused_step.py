"""A training step's render, loss and gradients in one call of the CUDA extension.

The default training step renders one view with :func:`gsnb.render_splats`, scores it
with the 3DGS photometric loss and runs autograd's backward pass: about thirty kernels,
each launched from Python through an autograd function. On the GPU that Python, not the
kernels, bounds the step. :func:`forward_backward` runs the same entry points of the
extension in the same order from C++ (``csrc/step_ops.cpp``) and leaves each parameter's
gradient in ``.grad``, as ``loss.backward()`` would. It stands in for the autograd path
of one view, classic or antialiased, with or without the 3D filter (whose widening the
projection kernels apply, :func:`gsnb.train.filter3d.apply_filter3d`'s arithmetic), with
nothing between the render and the loss (no exposure or pose correction), which
:class:`~gsnb.train.Trainer` decides; :func:`applies` says whether the kernels take the
tensors.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass

import torch
from torch import Tensor

from gsnb import kernels
from gsnb.model import SPLAT_KEYS
from gsnb.raster.constants import FAR_PLANE, NEAR_PLANE
from gsnb.train.losses import SSIM_C1, SSIM_C2, SSIM_SIGMA, SSIM_WINDOW

_OP = "train_forward_backward"


@dataclass(frozen=True)
class StepGrads:
    """What a fused step leaves besides the parameters' gradients.

    Attributes:
        stats: ``[4]`` the loss, L1, SSIM and MSE of the render, on the device.
        means2d: ``[1, N, 2]`` the projected centres, their gradient in ``.grad``
            (what the densification strategy reads from ``info["means2d"]``).
        radii: ``[1, N, 2]`` int32 screen radii (0 where a Gaussian is not visible).
        absgrad: ``[1, N, 2]`` absolute screen-space gradients summed per pixel, or None.
        intersections: ``[1]`` int64 on the device, the render's splat-tile intersections
            (above the step's ``capacity``, the render lacked some and ``stats[0]`` is NaN).
        error: ``[N]`` each Gaussian's share of the render's error, in pixels
            (:func:`gsnb.train.error_shares.error_shares`), or None.
    """

    stats: Tensor
    means2d: Tensor
    radii: Tensor
    absgrad: Tensor | None
    intersections: Tensor
    error: Tensor | None = None


def applies(splats: MutableMapping[str, Tensor], target: Tensor) -> bool:
    """Whether :func:`forward_backward` takes these parameters and ``target [H, W, 3]``:
    float32 CUDA tensors on one device (the target float32 or uint8, contiguous), at least
    one Gaussian, an image no smaller than the SSIM window, and an extension built with the
    fused step.

    Example:
        >>> import torch
        >>> from gsnb.model import GaussianModel
        >>> model = GaussianModel.from_points(torch.rand(20, 3), torch.rand(20, 3))
        >>> applies(model.splats, torch.rand(16, 16, 3))  # CPU tensors
        False
    """
    if target.dim() != 3 or target.shape[-1] != 3 or min(target.shape[:2]) < SSIM_WINDOW:
        return False
    if splats["means"].shape[0] == 0 or target.requires_grad:
        return False
    params = [splats[k] for k in SPLAT_KEYS]
    if target.dtype == torch.uint8:  # the photo's bytes: read as bytes_to_float would make them
        on_device = target.is_contiguous() and target.device == params[0].device
        return on_device and kernels.applies(_OP, *params)
    return kernels.applies(_OP, target, *params)


def forward_backward(
    splats: MutableMapping[str, Tensor],
    viewmat: Tensor,
    K: Tensor,
    width: int,
    height: int,
    sh_degree: int,
    background: Tensor | None,
    target: Tensor,
    ssim_lambda: float,
    absgrad: bool = False,
    antialiased: bool = False,
    filter3d: Tensor | None = None,
    capacity: int = 0,
    error_shares: bool = False,
) -> StepGrads:
    """Render ``splats`` (as :class:`~gsnb.model.GaussianModel` stores them) from one camera,
    score the render against ``target`` and set each parameter's ``.grad``.

    The same as ``render_splats(splats, viewmat, K, width, height, sh_degree=sh_degree,
    backgrounds=background, absgrad=absgrad, check_values=False, with_depth=False,
    rasterize_mode="antialiased" if antialiased else "classic")`` of the Gaussians through
    :func:`~gsnb.train.filter3d.apply_filter3d` (with ``filter3d``), then
    ``photometric_terms(out.rgb[0], target, ssim_lambda)[0].backward()`` with ``.grad``
    cleared first (an 8-bit ``target`` taken as ``bytes_to_float(target)``); needs what
    :func:`applies` checks.

    Args:
        splats: ``means [N, 3]``, ``quats [N, 4]``, ``scales [N, 3]`` (log),
            ``opacities [N]`` (logits), ``sh0 [N, 1, 3]``, ``shN [N, K-1, 3]``.
        viewmat: ``[1, 4, 4]`` or ``[4, 4]`` world-to-camera.
        K: ``[1, 3, 3]`` or ``[3, 3]`` intrinsics.
        width, height: the image size in pixels.
        sh_degree: the SH degree to evaluate (at most the model's).
        background: ``[3]`` composited under the splats, or None for black.
        target: ``[height, width, 3]`` the photo: float32 in [0, 1], or its uint8 values,
            read as :func:`gsnb.data.dataset.bytes_to_float` makes them (no float copy).
        ssim_lambda: the weight of ``1 - SSIM`` in the loss.
        absgrad: also sum the absolute screen-space gradients (AbsGS).
        antialiased: gsplat's ``rasterize_mode="antialiased"`` (Mip-Splatting's 2D filter).
        filter3d: ``[N]`` the 3D filter's variances (``Filter3D.variances``), or None.
        capacity: 0, or the splat-tile intersections to make room for, so that the host
            need not wait for the GPU to count them before binning; where the render has
            more, it lacks some, and its loss (``stats[0]``) is NaN: the step's gate
            (:func:`gsnb.train.health.gate_open`) closes and nothing learns from it.
        error_shares: also each Gaussian's share of the render's error (``StepGrads.error``),
            which the backward pass gathers through a fourth channel, zero for every
            Gaussian, blended beside the colours (no second render).

    Example:
        >>> import torch
        >>> from gsnb.model import GaussianModel
        >>> model = GaussianModel.from_points(torch.rand(500, 3) + 2, torch.rand(500, 3)).to("cuda")
        >>> K = torch.tensor([[64.0, 0, 32], [0, 64, 32], [0, 0, 1]], device="cuda")
        >>> out = forward_backward(model.splats, torch.eye(4, device="cuda"), K, 64, 64, 0,
        ...                        None, torch.rand(64, 64, 3, device="cuda"), 0.2)
        >>> model.splats["means"].grad.shape, out.stats.shape
        (torch.Size([500, 3]), torch.Size([4]))
    """
    params = [splats[k] for k in SPLAT_KEYS]
    means, quats, scales, opacities, sh0, shn = (p.detach() for p in params)
    bg = None if background is None else background.detach().reshape(1, 3).contiguous()
    pad = 0  # "valid" SSIM windows: the image is at least the window (applies)
    outs = kernels.train_forward_backward(
        means=means, quats=quats, scales=scales, opacities=opacities, sh0=sh0, shN=shn,
        viewmats=viewmat.reshape(1, 4, 4).contiguous(), Ks=K.reshape(1, 3, 3).contiguous(),
        width=int(width), height=int(height), near_plane=NEAR_PLANE, far_plane=FAR_PLANE,
        sh_degree=int(sh_degree), backgrounds=bg, target=target.reshape(1, height, width, 3),
        pad=pad, sigma=SSIM_SIGMA, c1=SSIM_C1, c2=SSIM_C2, lam=float(ssim_lambda),
        absgrad=absgrad, antialiased=antialiased,
        filter3d=None if filter3d is None else filter3d.detach().float().contiguous(),
        capacity=int(capacity), error_shares=error_shares,
    )  # fmt: skip
    stats, *grads = outs[:7]
    means2d, v_means2d, radii, sums, count, shares = outs[7:]
    for p, g in zip(params, grads, strict=True):
        p.grad = g  # the kernels return each gradient in its parameter's shape
    means2d.grad = v_means2d
    error = shares if error_shares else None
    return StepGrads(stats, means2d, radii, sums if absgrad else None, count, error)
