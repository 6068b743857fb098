"""benchmarks/image_pipelines.py compares gsnb's test images with gsplat's parser's."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gsnb.data.camera import Camera
from gsnb.data.dataset import load_dataset
from gsnb.data.synthetic import make_synthetic_scene

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import image_pipelines  # noqa: E402


def rgb_scene(root: Path, size: int | tuple[int, int], k1: float = 0.0) -> Path:
    """A synthetic capture of RGB photos (composited over black, as gsnb composites them;
    gsplat's parser drops alpha), its lens given a radial distortion ``k1``."""
    scene = make_synthetic_scene(root, num_views=9, size=size, num_points=100, detail=0.5)
    for file in (scene / "images").iterdir():
        rgba = np.asarray(Image.open(file).convert("RGBA"), np.float64) / 255.0
        rgb = rgba[..., :3] * rgba[..., 3:]
        Image.fromarray(np.round(rgb * 255).astype(np.uint8)).save(file)
    meta = json.loads((scene / "transforms.json").read_text())
    meta["k1"] = k1
    (scene / "transforms.json").write_text(json.dumps(meta))
    return scene


def test_without_distortion_or_downscale_both_versions_are_the_photo(tmp_path: Path) -> None:
    scene = rgb_scene(tmp_path / "s", 32)
    view = load_dataset(scene, downscale=1).test[0]
    row = image_pipelines.compare_view(view, factor=1, sigma=1.0, at_psnr=33.4)
    assert row["psnr_between"] == math.inf and row["detail_ratio"] == 1.0
    assert row["cost_db"] == 0.0 and row["gsnb_size"] == row["gsplat_size"] == [32, 32]
    assert row["alpha"] is False


def test_a_distorted_capture_is_compared_view_by_view(tmp_path: Path) -> None:
    scene = rgb_scene(tmp_path / "s", (96, 64), k1=0.08)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "image_pipelines.py"), str(scene), "--downscale", "2",
         "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((out / "image_pipelines.json").read_text())
    test_names = [v.name for v in load_dataset(scene, downscale=2).test]
    assert sorted(result["views"]) == sorted(test_names) and result["summary"]["views"] == 2
    for row in result["views"].values():
        # gsplat's parser crops to the pixels every output pixel sees; gsnb keeps the size
        assert row["gsnb_size"] == [48, 32]
        assert row["gsplat_size"][0] <= 48 and row["gsplat_size"][1] <= 32
        assert 20 < row["psnr_between"] < 60  # the same view, made two ways
        assert 0 < row["detail_ratio"] < 2
    assert "wrote" in done.stdout and "alpha" not in done.stdout


def test_photos_with_alpha_are_flagged_and_a_folder_without_a_capture_refused(
    tmp_path: Path,
) -> None:
    scene = make_synthetic_scene(tmp_path / "s", num_views=9, size=32, num_points=100)  # RGBA
    script = [sys.executable, str(BENCHMARKS / "image_pipelines.py")]
    done = subprocess.run(
        [*script, str(scene), "--downscale", "1", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the photos have alpha" in done.stdout
    rows = json.loads((tmp_path / "out" / "image_pipelines.json").read_text())["views"]
    assert all(row["alpha"] for row in rows.values())
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(
        [*script, str(empty), "--out", str(tmp_path / "out2")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "no dataset found" in done.stderr
    assert "Traceback" not in done.stderr


def test_photos_already_downscaled_are_refused(tmp_path: Path) -> None:
    scene = rgb_scene(tmp_path / "s", (48, 32), k1=0.08)
    (scene / "images_2").mkdir()
    for file in (scene / "images").iterdir():
        Image.open(file).resize((24, 16), Image.Resampling.BOX).save(scene / "images_2" / file.name)
    view = load_dataset(scene, downscale=2).test[0]
    with pytest.raises(ValueError, match="images_2/, already downscaled"):
        image_pipelines.compare_view(view, factor=2, sigma=1.0, at_psnr=33.4)


def test_gsplat_image_undistorts_at_the_reduced_size_and_crops() -> None:
    # a checkerboard photo through a barrel lens: the valid region is smaller than the frame
    size = (64, 48)
    photo = (np.indices((48, 64)).sum(0) // 4 % 2 * 255).astype(np.uint8)[..., None].repeat(3, -1)
    import tempfile

    path = Path(tempfile.mkdtemp()) / "p.png"
    Image.fromarray(photo).save(path)
    lens = Camera(*size, 60.0, 60.0, 32.0, 24.0, distortion=(-0.2, 0.0, 0.0, 0.0))
    image, corner = image_pipelines.gsplat_image(path, lens, 2)
    assert image.shape[0] < 24 and image.shape[1] < 32 and image.dtype == np.uint8
    x, y = corner  # the valid region lies inside the frame
    assert x >= 0 and x + image.shape[1] <= 32 and y >= 0 and y + image.shape[0] <= 24
    plain = Camera(*size, 60.0, 60.0, 32.0, 24.0)
    image, corner = image_pipelines.gsplat_image(path, plain, 2)
    assert image.shape == (24, 32, 3) and corner == (0, 0)
    fisheye = Camera(*size, 60.0, 60.0, 32.0, 24.0, distortion=(0.1, 0.0, 0.0, 0.0), fisheye=True)
    with pytest.raises(ValueError, match="perspective"):
        image_pipelines.gsplat_image(path, fisheye, 2)
