"""Images smaller than their camera (pre-downscaled captures) and the images_N/ layout."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from gsnb.data.camera import Camera
from gsnb.data.colmap import ColmapModel, write_colmap_text
from gsnb.data.dataset import load_dataset
from gsnb.data.images import scaled_size
from gsnb.data.synthetic import make_synthetic_scene

# An odd size, so that halving and quartering round (65 / 2 = 32.5 -> 32, as gsnb rounds).
WIDTH, HEIGHT = 65, 49
CAMERAS = {
    1: ("PINHOLE", WIDTH, HEIGHT, (60.0, 58.0, 33.1, 24.2)),
    2: ("SIMPLE_PINHOLE", WIDTH, HEIGHT, (61.0, 32.4, 24.9)),
}


def _photo(seed: int) -> np.ndarray:
    """A smooth ``[HEIGHT, WIDTH, 3]`` uint8 photo."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (7, 9, 3), dtype=np.uint8)
    return cv2.resize(small, (WIDTH, HEIGHT), interpolation=cv2.INTER_CUBIC)


def _colmap_capture(folder: Path, factors: dict[str, int]) -> Path:
    """A COLMAP text dataset of 4 views; ``factors`` maps image folders to their downscale."""
    images = {}
    for i in range(4):
        qvec, tvec = np.array([1.0, 0.0, 0.0, 0.0]), np.array([0.3 * i, 0.0, 4.0])
        images[i + 1] = (f"v{i}.png", qvec, tvec, 1 + i % 2)
    points = np.random.default_rng(0).normal(size=(50, 3))
    rgb = np.full((50, 3), 128, dtype=np.uint8)
    (folder / "sparse" / "0").mkdir(parents=True)
    write_colmap_text(ColmapModel(CAMERAS, images, points, rgb), folder / "sparse" / "0")
    for name, factor in factors.items():
        (folder / name).mkdir()
        for i in range(4):
            photo = _photo(i)
            size = scaled_size(WIDTH, HEIGHT, factor)
            if factor > 1:
                photo = cv2.resize(photo, size, interpolation=cv2.INTER_AREA)
            Image.fromarray(photo).save(folder / name / f"v{i}.png")
    return folder


def _assert_same_cameras(a, b, names: bool = True) -> None:
    def key(v):
        return (v.name if names else "", v.width, v.height)

    assert [key(v) for v in a.views] == [key(v) for v in b.views]
    for va, vb in zip(a.views, b.views, strict=True):
        assert torch.allclose(va.K.double(), vb.K.double(), rtol=0, atol=1e-6)
        assert torch.equal(va.viewmat, vb.viewmat)


@pytest.mark.parametrize("factor", [2, 4])
def test_pre_downscaled_images_match_gsnb_downscaling(tmp_path: Path, factor: int) -> None:
    full = load_dataset(_colmap_capture(tmp_path / "full", {"images": 1}), downscale=factor)
    small_root = _colmap_capture(tmp_path / "small", {"images": factor})
    small = load_dataset(small_root, cache_dir=tmp_path / "cache")
    _assert_same_cameras(full, small)
    assert (small.views[0].width, small.views[0].height) == scaled_size(WIDTH, HEIGHT, factor)
    assert small.views[0].load_image().shape == full.views[0].load_image().shape
    # A further --downscale applies to the smaller files.
    again = load_dataset(small_root, downscale=2, cache_dir=tmp_path / "cache")
    assert again.views[0].width == scaled_size(*scaled_size(WIDTH, HEIGHT, factor), 2)[0]


def test_intrinsics_rescale_as_colmap(tmp_path: Path) -> None:
    # Camera::Rescale: fx, cx by the width ratio, fy, cy by the height ratio; one focal
    # length by their mean.
    small = load_dataset(_colmap_capture(tmp_path / "small", {"images": 2}))
    sx, sy = 32 / WIDTH, 24 / HEIGHT
    pinhole = small.views[0].K.double()  # v0 uses camera 1
    expected = [[60.0 * sx, 0, 33.1 * sx], [0, 58.0 * sy, 24.2 * sy]]
    assert torch.allclose(pinhole[:2], torch.tensor(expected, dtype=torch.float64), atol=1e-5)
    simple = small.views[1].K.double()  # v1 uses camera 2
    f = 61.0 * (sx + sy) / 2
    expected = [[f, 0, 32.4 * sx], [0, f, 24.9 * sy]]
    assert torch.allclose(simple[:2], torch.tensor(expected, dtype=torch.float64), atol=1e-5)


def test_images_n_folder_serves_downscale_n(tmp_path: Path) -> None:
    layout = _colmap_capture(tmp_path / "layout", {"images": 1, "images_4": 4})
    quarter = load_dataset(layout, downscale=4, cache_dir=tmp_path / "cache")
    assert {v.image_path.parent.name for v in quarter.views} == {"images_4"}
    full = load_dataset(_colmap_capture(tmp_path / "full", {"images": 1}), downscale=4)
    _assert_same_cameras(full, quarter)
    # images_4 is used as it is: nothing was processed or cached.
    quarter.views[0].load_image()
    assert not (tmp_path / "cache").exists()
    # Another factor falls back to images/.
    half = load_dataset(layout, downscale=2, cache_dir=tmp_path / "cache")
    assert {v.image_path.parent.name for v in half.views} == {"images"}


def test_pre_downscaled_capture_trains(tmp_path: Path) -> None:
    from gsnb.train import TrainConfig, Trainer

    small = load_dataset(_colmap_capture(tmp_path / "small", {"images": 2}), test_every=0)
    trainer = Trainer(small, TrainConfig(steps=2, device="cpu", max_init_points=50))
    assert trainer.run().step == 2


def test_non_uniform_mismatch_names_sizes_and_factors(tmp_path: Path) -> None:
    root = _colmap_capture(tmp_path / "bad", {"images": 1})
    photo = Image.open(root / "images" / "v2.png").resize((32, 40))
    photo.save(root / "images" / "v2.png")
    message = r"v2.png is 32x40 but its camera says 65x49.*2\.031.*1\.225"
    with pytest.raises(ValueError, match=message):
        load_dataset(root)


def test_camera_fitted_to_rounded_sizes() -> None:
    cam = Camera(1080, 1920, 1500.0, 1500.0, 540.0, 960.0)
    assert cam.fitted_to(68, 120, "a").width == 68  # 1080 / 16 = 67.5, rounded up
    with pytest.raises(ValueError, match="not one factor"):
        cam.fitted_to(100, 120, "a")


def test_transforms_images_n_and_smaller_frames(tmp_path: Path) -> None:
    root = make_synthetic_scene(tmp_path / "scene", num_views=4, size=(48, 40))
    (root / "images_2").mkdir()
    for path in (root / "images").iterdir():
        Image.open(path).resize((24, 20), Image.Resampling.BOX).save(root / "images_2" / path.name)
    ours = load_dataset(root, downscale=2, cache_dir=tmp_path / "cache")
    assert {v.image_path.parent.name for v in ours.views} == {"images_2"}
    (root / "images_2").rename(root / "images_2_unused")
    gsnb = load_dataset(root, downscale=2, cache_dir=tmp_path / "cache")
    _assert_same_cameras(gsnb, ours)
    # Frames whose w/h say full size while the files are half size.
    meta = json.loads((root / "transforms.json").read_text())
    for frame in meta["frames"]:
        frame["file_path"] = frame["file_path"].replace("images/", "images_2_unused/")
    (root / "transforms.json").write_text(json.dumps(meta))
    smaller = load_dataset(root, cache_dir=tmp_path / "cache")
    _assert_same_cameras(gsnb, smaller, names=False)
