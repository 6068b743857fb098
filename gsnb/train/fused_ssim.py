"""SSIM on the GPU in two kernels (forward, backward) from the built ``csrc/`` extension.

:func:`gsnb.train.losses.ssim` uses it for CUDA images when the extension is
built; the plain PyTorch path stays the reference and runs everywhere else.
The depthwise convolutions of the PyTorch path cost far more than the
rasterizer in a training step on the GPU; the fused kernels blur all five local
moments in shared memory in one pass and write the derivatives the backward
pass needs. :func:`photometric` gives the whole 3DGS loss from the same
kernels: two launches forward, one backward, instead of about twenty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from gsnb import kernels

WINDOW = 11
"""The window size the kernels implement."""


def available(img1: Tensor, img2: Tensor, window_size: int, op: str = "ssim_forward") -> bool:
    """Whether :func:`ssim_map` (or, with ``op="photometric_forward"``, :func:`photometric`)
    takes these images: CUDA float32 on one device, 11-tap window, a target without a
    gradient, extension built.

    Example:
        >>> import torch
        >>> available(torch.zeros(1, 16, 16, 3), torch.zeros(1, 16, 16, 3), 11)
        False
    """
    if window_size != WINDOW or img2.requires_grad:
        return False
    # The kernels' callers below make the images contiguous.
    return kernels.applies(op, img1, img2, contiguous=False)


class _FusedSSIM(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, img1: Tensor, img2: Tensor, pad: int, sigma: float, c1: float, c2: float
    ) -> Tensor:
        grad = img1.requires_grad
        ssim, d_mu, d_xx, d_xy = kernels.ssim_forward(
            img1=img1, img2=img2, pad=pad, sigma=sigma, c1=c1, c2=c2, with_grad=grad
        )
        if grad:
            ctx.save_for_backward(img1, img2, d_mu, d_xx, d_xy)
        ctx.pad, ctx.sigma = pad, sigma
        return ssim

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, v_map: Tensor):  # type: ignore[override]
        img1, img2, d_mu, d_xx, d_xy = ctx.saved_tensors
        v_img1 = kernels.ssim_backward(
            img1=img1, img2=img2, v_map=v_map.contiguous(), d_mu=d_mu, d_xx=d_xx, d_xy=d_xy,
            pad=ctx.pad, sigma=ctx.sigma,
        )  # fmt: skip
        return v_img1, None, None, None, None, None


def ssim_map(img1: Tensor, img2: Tensor, *, pad: int, sigma: float, c1: float, c2: float) -> Tensor:
    """The SSIM map ``[B, H + 2 pad - 10, W + 2 pad - 10, C]`` of two ``[B, H, W, C]`` images.

    Differentiable with respect to ``img1`` (the rendered image); ``img2``
    must not need a gradient. ``pad`` zero-pads (5 = "same", 0 = "valid").

    Example:
        >>> import torch
        >>> from gsnb.train.losses import SSIM_C1, SSIM_C2
        >>> a = torch.rand(1, 64, 64, 3, device="cuda")
        >>> ssim_map(a, a, pad=0, sigma=1.5, c1=SSIM_C1, c2=SSIM_C2).shape
        torch.Size([1, 54, 54, 3])
    """
    return _FusedSSIM.apply(img1.contiguous(), img2.contiguous(), pad, sigma, c1, c2)


@dataclass(frozen=True)
class _LossTerms:
    """The photometric loss's settings; the backward pass reads them again."""

    pad: int
    sigma: float
    c1: float
    c2: float
    lam: float
    with_grad: bool  # derivative maps for a backward pass


class _FusedPhotometric(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, render: Tensor, target: Tensor, terms: _LossTerms
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        stats, d_mu, d_xx, d_xy = kernels.photometric_forward(
            img1=render, img2=target, pad=terms.pad, sigma=terms.sigma, c1=terms.c1, c2=terms.c2,
            lam=terms.lam, with_grad=terms.with_grad,
        )  # fmt: skip
        if terms.with_grad:
            ctx.save_for_backward(render, target, d_mu, d_xx, d_xy)
        ctx.terms = terms
        ctx.set_materialize_grads(False)
        return stats[0], stats[1], stats[2], stats[3]

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_loss, g_l1, g_ssim, g_mse):  # type: ignore[override]
        render, target, d_mu, d_xx, d_xy = ctx.saved_tensors
        terms: _LossTerms = ctx.terms
        v_render = kernels.photometric_backward(
            img1=render, img2=target, d_mu=d_mu, d_xx=d_xx, d_xy=d_xy, pad=terms.pad,
            sigma=terms.sigma, lam=terms.lam, g_loss=g_loss, g_l1=g_l1, g_ssim=g_ssim, g_mse=g_mse,
        )  # fmt: skip
        return v_render, None, None


def photometric(
    render: Tensor, target: Tensor, *, pad: int, sigma: float, c1: float, c2: float, lam: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The 3DGS loss of ``[B, H, W, C]`` images and its parts: ``(loss, l1, ssim, mse)``.

    ``loss = (1 - lam) * l1 + lam * (1 - ssim)``: SSIM over the ``pad``-padded
    window positions, L1 and MSE over all pixels; all four are differentiable
    with respect to ``render``. Needs what :func:`available` checks for
    ``op="photometric_forward"``.

    Example:
        >>> import torch
        >>> from gsnb.train.losses import SSIM_C1, SSIM_C2
        >>> a = torch.rand(1, 64, 64, 3, device="cuda")
        >>> loss, l1, s, mse = photometric(a, a, pad=0, sigma=1.5, c1=SSIM_C1, c2=SSIM_C2, lam=0.2)
        >>> round(loss.item(), 6), round(s.item(), 6)
        (0.0, 1.0)
    """
    # Derivative maps only when a backward pass can follow (not under torch.no_grad()).
    grad = render.requires_grad and torch.is_grad_enabled()
    terms = _LossTerms(pad=pad, sigma=sigma, c1=c1, c2=c2, lam=lam, with_grad=grad)
    return _FusedPhotometric.apply(render.contiguous(), target.contiguous(), terms)
