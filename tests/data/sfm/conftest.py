"""Fixtures of the structure-from-motion tests: the textured synthetic scene, photographed and
filmed, with its true poses; processed once per session."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gsnb.cameras import intrinsics, rigid_inverse
from gsnb.data.synthetic import SyntheticScene, ring_cameras

pytest.importorskip("pycolmap")

SIZE = (320, 240)  # small enough for CI; smaller images leave poses a few times less exact
DETAIL = 0.95
SAMPLES = 1


@dataclass
class Capture:
    """Images without poses in ``folder`` (or a video file) and the true world-to-camera poses."""

    path: Path
    truth: dict[str, np.ndarray]  # image name -> [4, 4] world-to-camera


def opaque(rgba: np.ndarray) -> np.ndarray:
    """``[H, W, 3]`` uint8 of straight-alpha ``rgba [H, W, 4]`` over white (photos are opaque)."""
    rgb = rgba[..., :3] * rgba[..., 3:] + (1.0 - rgba[..., 3:])
    return (rgb * 255.0 + 0.5).astype(np.uint8)


def photograph(
    folder: Path, num_views: int = 24, keep: range | None = None, size: tuple[int, int] = SIZE
) -> Capture:
    """The scene from a ring of ``num_views`` cameras (or the ``keep`` ones of them) as opaque
    PNGs in ``folder``, the poses kept aside."""
    scene = dataclasses.replace(SyntheticScene.random(0), detail=DETAIL)
    width, height = size
    k = intrinsics(width, height, 50.0, axis="x", dtype=torch.float64).numpy()
    c2ws = ring_cameras(num_views)
    folder.mkdir(parents=True, exist_ok=True)
    truth = {}
    for i in keep if keep is not None else range(num_views):
        name = f"r_{i:03d}.png"
        rgba = scene.render(c2ws[i], k, width, height, samples=SAMPLES)
        Image.fromarray(opaque(rgba)).save(folder / name)
        truth[name] = rigid_inverse(c2ws[i : i + 1])[0]
    return Capture(folder, truth)


def film(
    photos: Capture, path: Path, count: int, size: tuple[int, int] = (320, 240), fps: int = 12
) -> Capture:
    """The first ``count`` of ``photos`` in name order, at ``size``, as an H.264 video in which
    each photo is followed by a blurred copy of itself (camera shake); truth keyed by the sharp
    frames' names, ``frame_NNNNN.jpg``."""
    import cv2
    import imageio.v2 as iio

    frames, truth = [], {}
    for name in sorted(photos.truth)[:count]:
        rgb = np.asarray(Image.open(photos.path / name).convert("RGB").resize(size, Image.LANCZOS))
        truth[f"frame_{len(frames):05d}.jpg"] = photos.truth[name]
        frames += [rgb, cv2.GaussianBlur(rgb, (0, 0), 2.0)]
    iio.mimwrite(path, frames, fps=fps, codec="libx264", quality=10, macro_block_size=16)
    return Capture(path, truth)


@pytest.fixture(scope="session")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    """24 photos of the textured synthetic scene."""
    return photograph(tmp_path_factory.mktemp("photos") / "photos")


@pytest.fixture(scope="session")
def processed_photos(photos: Capture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``photos`` processed into a dataset (once)."""
    from gsnb.data.sfm import ProcessOptions, process

    out = tmp_path_factory.mktemp("processed") / "scene"
    process(photos.path, out, ProcessOptions(threads=1))  # one thread: the same model each run
    return out
