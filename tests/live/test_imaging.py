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
