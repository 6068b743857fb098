"""Tests for gsnb/live/imaging.py."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from gsnb.live.imaging import encode_image, to_uint8


def test_to_uint8_rounds_clips_and_cleans():
    image = torch.tensor([[[0.0, 0.5, 1.0], [-1.0, 2.0, float("nan")]]])
    assert to_uint8(image).tolist() == [[[0, 128, 255], [0, 255, 0]]]
    with pytest.raises(ValueError, match=r"\[H, W, 3\]"):
        to_uint8(torch.zeros(4, 4))


def test_png_is_lossless_and_jpeg_resizes():
    rgb = torch.rand(12, 20, 3, generator=torch.Generator().manual_seed(0))
    png = Image.open(io.BytesIO(encode_image(rgb, "png")))
    assert np.array_equal(np.asarray(png), to_uint8(rgb))
    jpeg = Image.open(io.BytesIO(encode_image(rgb, "jpeg", width=10)))
    assert jpeg.format == "JPEG" and jpeg.size == (10, 6)
    same = encode_image(to_uint8(rgb), "png")
    assert same == encode_image(rgb, "png")
    with pytest.raises(ValueError, match="'png' or 'jpeg'"):
        encode_image(rgb, "gif")


def test_frame_encoder_gives_jpegs_of_the_image_and_times_each_stage():
    from gsnb.live.imaging import FrameEncoder, to_uint8_tensor

    ramp = torch.linspace(0, 1, 64)[None, :, None].expand(48, 64, 3).clone()
    ramp[0, 0] = float("nan")
    encoder = FrameEncoder(quality=90, gpu=False)
    decoded = np.asarray(Image.open(io.BytesIO(encoder.encode(ramp))).convert("RGB"))
    expected = to_uint8_tensor(ramp).numpy()
    assert decoded.shape == (48, 64, 3) and expected[0, 0].tolist() == [0, 0, 0]
    assert np.abs(decoded.astype(float) - expected).mean() < 2.0
    assert encoder.backend == "pil" and set(encoder.last) == {"convert", "copy", "encode"}
    assert all(v >= 0 for v in encoder.last.values())
    with pytest.raises(ValueError, match=r"jpeg quality must lie in 1\.\.100"):
        FrameEncoder(quality=0)
    with pytest.raises(ValueError, match=r"expected an \[H, W, 3\] image"):
        encoder.encode(torch.zeros(4, 4))


def test_frame_encoder_names_what_the_gpu_path_lacks():
    from gsnb.live.imaging import FrameEncoder

    encoder = FrameEncoder(gpu=True)
    try:
        import torchvision  # noqa: F401
    except ImportError:
        assert encoder.gpu_error is not None and "pip install torchvision" in encoder.gpu_error
    else:
        assert encoder.gpu_error is None
    assert encoder.encode(torch.rand(8, 8, 3))[:2] == b"\xff\xd8"  # the CPU path for a CPU image
