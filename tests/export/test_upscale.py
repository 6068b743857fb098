"""Tests for gsnb/export/upscale.py against Pillow's Image.LANCZOS.

Tolerances: on float images ("F" mode, no rounding on either side) the results
agree to 1e-5 (both compute in at least float32 with the same weights); on
8-bit RGB images of smooth content they differ by at most 1 level of 255
(Pillow rounds its fixed-point weights and stores the intermediate pass as
8 bits; we keep floats throughout).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageFilter

from gsnb.export.upscale import lanczos_resize, lanczos_weights, to_uint8

SIZES = [((64, 48), (128, 96)), ((64, 48), (200, 77)), ((33, 21), (96, 54)), ((50, 40), (30, 17))]


def _pil_float(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    channels = [
        Image.fromarray(image[..., c], mode="F").resize(size, Image.LANCZOS) for c in range(3)
    ]
    return np.stack([np.asarray(c) for c in channels], axis=-1)


@pytest.mark.parametrize(("source", "target"), SIZES)
def test_matches_pil_lanczos_on_float_images(source, target):
    image = np.random.default_rng(0).random((source[1], source[0], 3), dtype=np.float32)
    ours = lanczos_resize(torch.from_numpy(image), *target, clamp=False).numpy()
    assert ours.shape == (target[1], target[0], 3)
    np.testing.assert_allclose(ours, _pil_float(image, target), rtol=0, atol=1e-5)


@pytest.mark.parametrize(("source", "target"), SIZES)
def test_matches_pil_lanczos_on_8_bit_images_within_one_level(source, target):
    noise = np.random.default_rng(1).integers(0, 256, (source[1], source[0], 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(noise).filter(ImageFilter.GaussianBlur(1.5)))
    ours = to_uint8(lanczos_resize(torch.from_numpy(smooth.copy()).float() / 255, *target))
    pil = np.asarray(Image.fromarray(smooth).resize(target, Image.LANCZOS))
    diff = np.abs(ours.astype(int) - pil.astype(int))
    assert diff.max() <= 1
    assert diff.mean() < 0.35


def test_weights_are_normalised_and_local():
    weights = lanczos_weights(10, 25)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-12)
    assert (np.count_nonzero(weights, axis=1) <= 7).all()  # 3 taps each side when enlarging


def test_same_size_is_identity_and_batches_work():
    image = torch.rand(2, 12, 16, 3, dtype=torch.float64)
    assert torch.equal(lanczos_resize(image, 16, 12), image)
    both = lanczos_resize(image, 40, 30)
    torch.testing.assert_close(both[1], lanczos_resize(image[1], 40, 30))


def test_constant_image_stays_constant_and_clamp_limits_overshoot():
    flat = torch.full((9, 11, 3), 0.25)
    torch.testing.assert_close(lanczos_resize(flat, 31, 20), torch.full((20, 31, 3), 0.25))
    edge = torch.zeros(8, 8, 3)
    edge[:, 4:] = 1.0
    assert lanczos_resize(edge, 32, 32, clamp=False).max() > 1.0  # Lanczos rings
    clamped = lanczos_resize(edge, 32, 32)
    assert clamped.min() >= 0.0 and clamped.max() <= 1.0


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="float"):
        lanczos_resize(torch.zeros(4, 4, 3, dtype=torch.uint8), 8, 8)
    with pytest.raises(ValueError, match="positive"):
        lanczos_resize(torch.zeros(4, 4, 3), 0, 8)
