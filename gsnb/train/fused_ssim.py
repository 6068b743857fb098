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

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

WINDOW = 11
"""The window size the kernels implement."""


def available(img1: Tensor, img2: Tensor, window_size: int, op: str = "ssim_forward") -> bool:
    """Whether :func:`ssim_map` (or, with ``op="photometric_forward"``, :func:`photometric`)
    takes these images: CUDA float32, 11-tap window, extension built.

    Example:
        >>> import torch
        >>> available(torch.zeros(1, 16, 16, 3), torch.zeros(1, 16, 16, 3), 11)
        False
    """
    if not (img1.is_cuda and img1.dtype == torch.float32 and img2.dtype == torch.float32):
        return False
    if window_size != WINDOW or img2.requires_grad or img1.device != img2.device:
        return False
    from gsnb.raster import cuda

    return cuda.kernel(op) is not None


class _FusedSSIM(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, img1: Tensor, img2: Tensor, pad: int, sigma: float, c1: float, c2: float
    ) -> Tensor:
        from gsnb.raster import cuda

        ext = cuda.get_extension()
        grad = img1.requires_grad
        ssim, d_mu, d_xx, d_xy = ext.ssim_forward(img1, img2, pad, sigma, c1, c2, grad)
        if grad:
            ctx.save_for_backward(img1, img2, d_mu, d_xx, d_xy)
        ctx.pad, ctx.sigma = pad, sigma
        return ssim

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, v_map: Tensor):  # type: ignore[override]
        from gsnb.raster import cuda

        img1, img2, d_mu, d_xx, d_xy = ctx.saved_tensors
        v_img1 = cuda.get_extension().ssim_backward(
            img1, img2, v_map.contiguous(), d_mu, d_xx, d_xy, ctx.pad, ctx.sigma
        )
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


class _FusedPhotometric(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        render: Tensor,
        target: Tensor,
        settings: tuple[int, float, float, float, float, bool],
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        from gsnb.raster import cuda

        pad, sigma, c1, c2, lam, grad = settings
        stats, d_mu, d_xx, d_xy = cuda.kernel("photometric_forward")(
            render, target, pad, sigma, c1, c2, lam, grad
        )
        if grad:
            ctx.save_for_backward(render, target, d_mu, d_xx, d_xy)
        ctx.settings = settings
        ctx.set_materialize_grads(False)
        return stats[0], stats[1], stats[2], stats[3]

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_loss, g_l1, g_ssim, g_mse):  # type: ignore[override]
        from gsnb.raster import cuda

        render, target, d_mu, d_xx, d_xy = ctx.saved_tensors
        pad, sigma, _, _, lam, _ = ctx.settings
        v_render = cuda.kernel("photometric_backward")(
            render, target, d_mu, d_xx, d_xy, pad, sigma, lam, g_loss, g_l1, g_ssim, g_mse
        )
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
    return _FusedPhotometric.apply(
        render.contiguous(), target.contiguous(), (pad, sigma, c1, c2, lam, grad)
    )
