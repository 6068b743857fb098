"""The render check a fresh build must pass: its scene is a valid, non-trivial render input."""

from __future__ import annotations

import torch

import gsnb
from gsnb.raster.smoke import tiny_scene


def test_tiny_scene_is_a_valid_render_input():
    scene = tiny_scene(torch.device("cpu"))
    out = gsnb.render(**scene, backend="reference")
    assert out.rgb.shape == (1, 35, 50, 3)
    assert 0.05 < out.alpha.mean().item() < 0.95  # neither empty nor saturated
