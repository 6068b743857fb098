"""Lanczos resampling on torch, with the same weights as PIL's ``Image.LANCZOS``.

The resize is separable: per axis, each output pixel is a weighted sum of a few
gathered input pixels, so it runs on the GPU beside the renderer. The
weights follow Pillow's ``ImagingResample``: a Lanczos-3 kernel, stretched by
the scale when shrinking, truncated at the image border and renormalised.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

LANCZOS_SUPPORT = 3.0


def _lanczos(x: np.ndarray) -> np.ndarray:
    """The Lanczos-3 kernel ``sinc(x) sinc(x / 3)`` on ``[-3, 3)``, zero outside."""
    inside = (x >= -LANCZOS_SUPPORT) & (x < LANCZOS_SUPPORT)
    return np.where(inside, np.sinc(x) * np.sinc(x / LANCZOS_SUPPORT), 0.0)


def lanczos_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's lanczos taps of one axis: input indices and float64 weights, ``[out_size, T]`` each.

    Output pixel ``i`` is centred at ``(i + 0.5) * in_size / out_size`` in input
    pixels; its taps are the input pixels within the kernel's support (3 input
    pixels each side when enlarging, ``3 * scale`` when shrinking), and its
    weights sum to 1. Unused taps have weight 0.

    Example:
        >>> index, weight = lanczos_taps(1080, 2160)
        >>> index.shape, bool(abs(weight.sum(1) - 1).max() < 1e-12)
        ((2160, 6), True)
    """
    if in_size < 1 or out_size < 1:
        raise ValueError(f"sizes must be positive, got in_size={in_size}, out_size={out_size}")
    scale = in_size / out_size
    filter_scale = max(scale, 1.0)
    support = LANCZOS_SUPPORT * filter_scale
    centres = (np.arange(out_size) + 0.5) * scale
    # Pillow's tap range: int(centre -/+ support + 0.5), clipped to the image.
    lo = np.clip((centres - support + 0.5).astype(np.int64), 0, in_size)
    hi = np.clip((centres + support + 0.5).astype(np.int64), 0, in_size)
    index = lo[:, None] + np.arange(int((hi - lo).max()))[None, :]
    used = index < hi[:, None]
    weight = np.where(used, _lanczos((index - centres[:, None] + 0.5) / filter_scale), 0.0)
    total = weight.sum(axis=1, keepdims=True)
    return np.minimum(index, in_size - 1), weight / np.where(total == 0.0, 1.0, total)


def lanczos_weights(in_size: int, out_size: int) -> np.ndarray:
    """The dense ``[out_size, in_size]`` float64 matrix of :func:`lanczos_taps` (for inspection).

    Example:
        >>> w = lanczos_weights(4, 8)
        >>> w.shape, bool(abs(w.sum(1) - 1).max() < 1e-12)
        ((8, 4), True)
    """
    index, weight = lanczos_taps(in_size, out_size)
    dense = np.zeros((out_size, in_size))
    np.add.at(dense, (np.arange(out_size)[:, None], index), weight)
    return dense


def lanczos_resize(image: Tensor, width: int, height: int, clamp: bool = True) -> Tensor:
    """Resize an image with Lanczos-3 filtering (Pillow's ``Image.LANCZOS``).

    Works on any device with a handful of gathers per axis (no matrix
    products, so TF32 settings cannot change the result); the taps of each
    size pair are computed once and cached.

    Args:
        image: ``[H, W, C]`` or ``[B, H, W, C]`` float tensor (any device).
        width, height: the output size in pixels.
        clamp: clip the result to ``[0, 1]`` (Lanczos overshoots at edges);
            turn off for data that is not an image in ``[0, 1]``.

    Returns:
        ``[height, width, C]`` (or ``[B, height, width, C]``), same dtype and device.

    Example:
        >>> import torch
        >>> from gsnb.export.upscale import lanczos_resize
        >>> lanczos_resize(torch.rand(48, 64, 3), 128, 96).shape
        torch.Size([96, 128, 3])
    """
    if image.dim() not in (3, 4) or not image.is_floating_point():
        raise ValueError(
            f"image must be a float [H, W, C] or [B, H, W, C] tensor, got {image.dtype} "
            f"{list(image.shape)}"
        )
    if width < 1 or height < 1:
        raise ValueError(f"output size must be positive, got {width}x{height}")
    in_h, in_w = image.shape[-3], image.shape[-2]
    out = image
    if in_w != width:
        out = _resample(out, *_device_taps(in_w, width, image.device, image.dtype), dim=-2)
    if in_h != height:
        out = _resample(out, *_device_taps(in_h, height, image.device, image.dtype), dim=-3)
    return out.clamp(0.0, 1.0) if clamp else out


def to_uint8(image: Tensor) -> np.ndarray:
    """``[H, W, 3]`` float image in [0, 1] -> contiguous ``uint8`` numpy array (rounded).

    Example:
        >>> import torch
        >>> to_uint8(torch.tensor([[[0.0, 0.5, 1.0]]])).tolist()
        [[[0, 128, 255]]]
    """
    scaled = (image.detach().clamp(0.0, 1.0) * 255.0).add_(0.5).floor_()
    return scaled.to(torch.uint8).cpu().numpy()


@functools.lru_cache(maxsize=16)
def _device_taps(
    in_size: int, out_size: int, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    index, weight = lanczos_taps(in_size, out_size)
    return torch.from_numpy(index).to(device), torch.from_numpy(weight).to(device, dtype)


def _resample(image: Tensor, index: Tensor, weight: Tensor, dim: int) -> Tensor:
    """Weighted sum of gathered taps along ``dim`` (-2: width, -3: height)."""
    shape = (-1,) + (1,) * (-dim - 1)
    out = image.index_select(dim, index[:, 0]) * weight[:, 0].view(shape)
    for tap in range(1, index.shape[1]):
        out = out.add_(image.index_select(dim, index[:, tap]) * weight[:, tap].view(shape))
    return out
