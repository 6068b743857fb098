"""Photometric losses and image metrics in plain PyTorch: L1, SSIM, PSNR and the 3DGS loss."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from gsnb.train import fused_ssim

SSIM_WINDOW = 11
SSIM_SIGMA = 1.5
SSIM_C1 = 0.01**2
SSIM_C2 = 0.03**2


def _gaussian_kernel(size: int, sigma: float, like: Tensor) -> Tensor:
    x = torch.arange(size, dtype=like.dtype, device=like.device) - (size - 1) / 2.0
    g = torch.exp(-(x * x) / (2.0 * sigma * sigma))
    return g / g.sum()


def _window_pad(img: Tensor, window_size: int, padding: str) -> int:
    """Zero padding of the SSIM window: none for "valid", unless the image is smaller."""
    h, w = img.shape[-3:-1]
    return 0 if padding == "valid" and min(h, w) >= window_size else window_size // 2


def _batched(img: Tensor) -> Tensor:
    """``[..., H, W, C]`` as ``[B, H, W, C]``."""
    return img.reshape(-1, *img.shape[-3:])


def ssim(
    img1: Tensor,
    img2: Tensor,
    *,
    window_size: int = SSIM_WINDOW,
    sigma: float = SSIM_SIGMA,
    padding: str = "valid",
    reduce: bool = True,
) -> Tensor:
    """Structural similarity (Wang et al. 2004) with an 11x11 Gaussian window, sigma 1.5.

    Args:
        img1, img2: ``[..., H, W, 3]`` images in [0, 1] (data range 1).
        window_size, sigma: the Gaussian window.
        padding: ``"valid"`` averages only where the window fits inside the image
            (as gsplat's training loss and torchmetrics do); ``"same"`` zero-pads
            as the original 3DGS code does. Images smaller than the window always
            use ``"same"``.
        reduce: return the mean (a scalar); else the per-image means ``[B]``.

    Returns:
        SSIM in [-1, 1]; 1 for identical images.

    On CUDA float32 images with the 11-pixel window, and once the CUDA
    extension is built, the fused kernels of :mod:`gsnb.train.fused_ssim`
    compute the same value in two launches.

    Example:
        >>> import torch
        >>> a = torch.rand(1, 32, 32, 3)
        >>> round(ssim(a, a).item(), 4)
        1.0
    """
    if img1.shape != img2.shape:
        raise ValueError(f"ssim needs equal shapes, got {list(img1.shape)} and {list(img2.shape)}")
    if padding not in ("valid", "same"):
        raise ValueError(f"padding must be 'valid' or 'same', got {padding!r}")
    if img1.dim() < 3 or img1.shape[-1] != 3:
        raise ValueError(f"image has shape {list(img1.shape)}; expected [..., H, W, 3]")
    pad = _window_pad(img1, window_size, padding)
    a, b = _batched(img1), _batched(img2)
    if fused_ssim.available(img1, img2, window_size):
        fused = fused_ssim.ssim_map(a, b, pad=pad, sigma=sigma, c1=SSIM_C1, c2=SSIM_C2)
        return fused.mean() if reduce else fused.flatten(1).mean(1)
    x, y = a.permute(0, 3, 1, 2), b.permute(0, 3, 1, 2)
    g = _gaussian_kernel(window_size, sigma, x)
    # The five local moments in one separable depthwise convolution.
    stack = torch.cat([x, y, x * x, y * y, x * y], dim=1)
    ch = stack.shape[1]
    kx = g.view(1, 1, 1, -1).expand(ch, 1, 1, window_size)
    ky = g.view(1, 1, -1, 1).expand(ch, 1, window_size, 1)
    blurred = F.conv2d(
        F.conv2d(stack, kx, padding=(0, pad), groups=ch), ky, padding=(pad, 0), groups=ch
    )
    mu1, mu2, e11, e22, e12 = blurred.split(3, dim=1)
    mu11, mu22, mu12 = mu1 * mu1, mu2 * mu2, mu1 * mu2
    s11, s22, s12 = e11 - mu11, e22 - mu22, e12 - mu12
    num = (2.0 * mu12 + SSIM_C1) * (2.0 * s12 + SSIM_C2)
    den = (mu11 + mu22 + SSIM_C1) * (s11 + s22 + SSIM_C2)
    ssim_map = num / den
    return ssim_map.mean() if reduce else ssim_map.flatten(1).mean(1)


def psnr(img1: Tensor, img2: Tensor) -> Tensor:
    """Peak signal-to-noise ratio in dB for images in [0, 1]: ``-10 log10(MSE)``.

    Example:
        >>> import torch
        >>> round(psnr(torch.zeros(4, 4, 3), torch.full((4, 4, 3), 0.1)).item(), 2)
        20.0
    """
    mse = F.mse_loss(img1, img2)
    return -10.0 * torch.log10(mse.clamp_min(1e-20))


def psnr_from_mse(mse: float) -> float:
    """PSNR in dB of a mean squared error (images in [0, 1]), as :func:`psnr` computes it.

    Example:
        >>> psnr_from_mse(0.01)
        20.0
    """
    if math.isnan(mse):
        return math.nan
    return -10.0 * math.log10(max(mse, 1e-20))


def photometric_loss(
    render: Tensor, target: Tensor, ssim_lambda: float
) -> tuple[Tensor, Tensor, Tensor]:
    """The 3DGS loss ``(1 - lambda) * L1 + lambda * (1 - SSIM)``.

    Args:
        render, target: ``[..., H, W, 3]`` images.
        ssim_lambda: weight of the SSIM term (0.2 in 3DGS).

    Returns:
        ``(loss, l1, ssim)`` scalars.

    Example:
        >>> import torch
        >>> a = torch.rand(1, 16, 16, 3)
        >>> [round(v.item(), 4) for v in photometric_loss(a, a, 0.2)]
        [0.0, 0.0, 1.0]
    """
    return photometric_terms(render, target, ssim_lambda)[:3]


def photometric_terms(
    render: Tensor, target: Tensor, ssim_lambda: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`photometric_loss` and the mean squared error: ``(loss, l1, ssim, mse)``.

    On CUDA float32 images, once the extension is built, the fused kernels of
    :func:`gsnb.train.fused_ssim.photometric` compute all four in two launches
    (one for the gradient); elsewhere PyTorch does. SSIM uses the
    :func:`ssim` defaults (11-px window, ``"valid"`` padding).

    Example:
        >>> import torch
        >>> a = torch.zeros(1, 16, 16, 3)
        >>> [round(v.item(), 4) for v in photometric_terms(a, a + 0.1, 0.2)]
        [0.278, 0.1, 0.0099, 0.01]
    """
    if render.shape != target.shape:
        raise ValueError(
            f"the render has shape {list(render.shape)} but the target {list(target.shape)}"
        )
    if (
        render.dim() >= 3
        and render.shape[-1] == 3
        and fused_ssim.available(render, target, SSIM_WINDOW, "photometric_forward")
    ):
        return fused_ssim.photometric(
            _batched(render), _batched(target), pad=_window_pad(render, SSIM_WINDOW, "valid"),
            sigma=SSIM_SIGMA, c1=SSIM_C1, c2=SSIM_C2, lam=float(ssim_lambda),
        )  # fmt: skip
    l1 = (render - target).abs().mean()
    s = ssim(render, target)  # differentiable at any lambda, as the fused path's ssim
    mse = F.mse_loss(render, target)
    return (1.0 - ssim_lambda) * l1 + ssim_lambda * (1.0 - s), l1, s, mse
