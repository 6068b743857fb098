"""Lanczos resampling on torch, with the same weights as PIL's ``Image.LANCZOS``.

The resize is separable: one dense ``[out, in]`` weight matrix per axis, applied
with two matrix products, so it runs on the GPU beside the renderer. The
weights follow Pillow's ``ImagingResample``: a Lanczos-3 kernel, stretched by
the scale when shrinking, truncated at the image border and renormalised.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

LANCZOS_SUPPORT = 3.0


def _lanczos(x: np.ndarray) -> np.ndarray:
    """The Lanczos-3 kernel ``sinc(x) sinc(x / 3)`` on ``[-3, 3)``, zero outside."""
    inside = (x >= -LANCZOS_SUPPORT) & (x < LANCZOS_SUPPORT)
    return np.where(inside, np.sinc(x) * np.sinc(x / LANCZOS_SUPPORT), 0.0)


def lanczos_weights(in_size: int, out_size: int) -> np.ndarray:
    """The ``[out_size, in_size]`` float64 matrix that resamples one axis like Pillow.

    Output pixel ``i`` is centred at ``(i + 0.5) * in_size / out_size`` in input
    pixels; its taps are the input pixels within the kernel's support (3 input
    pixels when enlarging, ``3 * scale`` when shrinking), and each row sums to 1.

    Example:
        >>> w = lanczos_weights(4, 8)
        >>> w.shape, bool(abs(w.sum(1) - 1).max() < 1e-12)
        ((8, 4), True)
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
    x = np.arange(in_size)[None, :]
    taps = (x >= lo[:, None]) & (x < hi[:, None])
    weights = np.where(taps, _lanczos((x - centres[:, None] + 0.5) / filter_scale), 0.0)
    total = weights.sum(axis=1, keepdims=True)
    return weights / np.where(total == 0.0, 1.0, total)


def lanczos_resize(image: Tensor, width: int, height: int, clamp: bool = True) -> Tensor:
    """Resize an image with Lanczos-3 filtering (Pillow's ``Image.LANCZOS``).

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
    if (in_w, in_h) != (width, height):
        wx = _as_tensor(lanczos_weights(in_w, width), image)
        wy = _as_tensor(lanczos_weights(in_h, height), image)
        out = torch.einsum("xw,...hwc->...hxc", wx, out)
        out = torch.einsum("yh,...hxc->...yxc", wy, out)
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


def _as_tensor(weights: np.ndarray, like: Tensor) -> Tensor:
    return torch.from_numpy(weights).to(device=like.device, dtype=like.dtype)
