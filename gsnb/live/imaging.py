"""Images for live views: float tensors to 8-bit arrays and PNG/JPEG bytes."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image


def to_uint8(image: torch.Tensor | np.ndarray) -> np.ndarray:
    """``[H, W, 3]`` float in [0, 1] (any device) to a ``[H, W, 3]`` uint8 numpy array.

    Example:
        >>> to_uint8(torch.full((2, 2, 3), 0.5))[0, 0].tolist()
        [128, 128, 128]
    """
    if isinstance(image, torch.Tensor):
        image = image.detach().float().cpu().numpy()
    array = np.asarray(image, dtype=np.float32)
    if array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"expected an [H, W, 3] image, got shape {list(array.shape)}")
    return (np.clip(np.nan_to_num(array), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def encode_image(
    image: torch.Tensor | np.ndarray, fmt: str = "jpeg", quality: int = 85, width: int | None = None
) -> bytes:
    """PNG or JPEG bytes of an ``[H, W, 3]`` image (float in [0, 1], or uint8).

    ``width`` resizes (keeping the aspect ratio) before encoding.

    Example:
        >>> data = encode_image(torch.zeros(8, 8, 3), "png")
        >>> data[:4] == b"\\x89PNG"
        True
    """
    if fmt not in ("png", "jpeg"):
        raise ValueError(f"image format must be 'png' or 'jpeg', got {fmt!r}")
    array = image if isinstance(image, np.ndarray) and image.dtype == np.uint8 else to_uint8(image)
    pil = Image.fromarray(array, "RGB")
    if width is not None and width != pil.width:
        height = max(1, round(pil.height * width / pil.width))
        pil = pil.resize((width, height), Image.Resampling.BILINEAR)
    buffer = io.BytesIO()
    if fmt == "png":
        pil.save(buffer, "PNG", compress_level=1)
    else:
        pil.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()
