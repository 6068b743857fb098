"""Images for live views: float tensors to 8-bit arrays and PNG/JPEG bytes."""

from __future__ import annotations

import io
import time
from collections.abc import Callable

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


def to_uint8_tensor(image: torch.Tensor) -> torch.Tensor:
    """``[H, W, 3]`` float in [0, 1] to ``[H, W, 3]`` uint8 on the same device (no copy to host).

    Example:
        >>> to_uint8_tensor(torch.full((1, 1, 3), 0.5)).tolist()
        [[[128, 128, 128]]]
    """
    if image.ndim != 3 or image.shape[-1] != 3:
        raise ValueError(f"expected an [H, W, 3] image, got shape {list(image.shape)}")
    scaled = torch.nan_to_num(image.detach().float(), 0.0, 1.0, 0.0).clamp_(0.0, 1.0)
    return scaled.mul_(255.0).add_(0.5).to(torch.uint8)


def _gpu_jpeg() -> Callable[..., torch.Tensor] | None:
    """torchvision's nvJPEG encoder, or None when torchvision is not installed."""
    try:
        from torchvision.io import encode_jpeg
    except ImportError:  # an optional speed-up: the CPU encoder does the same job
        return None
    return encode_jpeg


class FrameEncoder:
    """JPEG bytes of rendered frames, encoded on the GPU where that is possible.

    A CUDA image is converted to 8 bits on the GPU and, with torchvision
    installed, compressed there too (nvJPEG): only the JPEG (about a twentieth
    of the raw pixels) crosses to the host. Otherwise the 8-bit pixels are
    copied and PIL compresses them. :attr:`last` holds the seconds each stage
    of the latest frame took (``convert``, ``encode``, ``copy``) and
    :attr:`backend` says which path ran (``"nvjpeg"`` or ``"pil"``); an nvJPEG
    failure is kept in :attr:`gpu_error` and the CPU path takes over.

    Args:
        quality: JPEG quality, 1..100.
        gpu: ``None`` (auto: the GPU for CUDA images when torchvision is there), ``True``
            (the same; the name of the missing piece is in :attr:`gpu_error`) or ``False``.

    Example:
        >>> encoder = FrameEncoder(quality=80)
        >>> data = encoder.encode(torch.rand(16, 24, 3))
        >>> data[:2] == b"\\xff\\xd8", encoder.backend
        (True, 'pil')
    """

    def __init__(self, quality: int = 80, gpu: bool | None = None) -> None:
        if not 1 <= int(quality) <= 100:
            raise ValueError(f"jpeg quality must lie in 1..100, got {quality!r}")
        self.quality = int(quality)
        self.gpu = gpu
        self.gpu_error: str | None = None
        self.backend = "pil"
        self.last: dict[str, float] = {}
        self._nvjpeg: Callable[..., torch.Tensor] | None = None
        self._streams: dict[torch.device, torch.cuda.Stream] = {}
        if gpu is not False:
            self._nvjpeg = _gpu_jpeg()
            if self._nvjpeg is None:
                self.gpu_error = "torchvision is not installed (pip install torchvision)"

    def encode(self, image: torch.Tensor) -> bytes:
        """JPEG bytes of an ``[H, W, 3]`` float image in [0, 1] (any device).

        A CUDA image is converted and encoded on a side stream of its own, after
        the work that produced it, so the stream that trains is not held up by it.
        Reading nvJPEG's bytes waits for the whole device (torchvision's encoder
        orders its stream after the one current when it was cached, not this one),
        so this thread, not training, waits for the steps already queued.
        """
        if not image.is_cuda:
            return self._encode(image)
        stream = self._streams.get(image.device)
        if stream is None:
            stream = self._streams[image.device] = torch.cuda.Stream(image.device)
        stream.wait_stream(torch.cuda.current_stream(image.device))
        image.record_stream(stream)  # its memory stays the image's until the side stream is done
        with torch.cuda.stream(stream):
            return self._encode(image)

    def _encode(self, image: torch.Tensor) -> bytes:
        start = time.perf_counter()
        pixels = to_uint8_tensor(image)
        on_gpu = pixels.is_cuda and self._nvjpeg is not None and self.gpu is not False
        _synchronize(pixels)
        converted = time.perf_counter()
        if on_gpu:
            try:
                assert self._nvjpeg is not None
                packed = self._nvjpeg(pixels.permute(2, 0, 1).contiguous(), quality=self.quality)
                # torchvision encodes on a stream of its own and orders it after the stream that
                # was current when its cached encoder was made, not this one: wait for the device.
                torch.cuda.synchronize(packed.device)
                encoded = time.perf_counter()
                data = packed.cpu().numpy().tobytes()
                self.backend = "nvjpeg"
                done = time.perf_counter()
                self.last = {
                    "convert": converted - start,
                    "encode": encoded - converted,
                    "copy": done - encoded,
                }
                return data
            except RuntimeError as err:  # e.g. a torchvision built without nvJPEG
                self.gpu_error = f"nvJPEG failed ({err}); encoding on the CPU"
                self._nvjpeg = None
        array = pixels.cpu().numpy()
        copied = time.perf_counter()
        buffer = io.BytesIO()
        Image.fromarray(array, "RGB").save(buffer, "JPEG", quality=self.quality)
        self.backend = "pil"
        self.last = {
            "convert": converted - start,
            "copy": copied - converted,
            "encode": time.perf_counter() - copied,
        }
        return buffer.getvalue()


def _synchronize(tensor: torch.Tensor) -> None:
    """Wait for the GPU work behind ``tensor`` (so that stage timings are honest)."""
    if tensor.is_cuda:
        torch.cuda.current_stream(tensor.device).synchronize()
