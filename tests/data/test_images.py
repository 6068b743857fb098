"""Image pipeline: undistortion against a ray-traced ground truth, the fox, cache, EXIF, errors."""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from gsnb.data.camera import Camera
from gsnb.data.dataset import load_dataset
from gsnb.data.images import ImagePipeline, composite, read_image, scaled_size
from gsnb.data.synthetic import (
    SyntheticScene,
    distort_normalized,
    ring_cameras,
    undistort_normalized,
)

# The fox's OPENCV camera at a quarter of its resolution (distortion is resolution-free).
FOX_QUARTER = Camera(
    270,
    480,
    1375.52 / 4,
    1374.49 / 4,
    554.558 / 4,
    965.268 / 4,
    (0.0578421, -0.0805099, -0.000980296, 0.00015575),
)


def test_fixed_point_undistortion_inverts_the_model() -> None:
    xy = np.random.default_rng(0).uniform(-0.6, 0.6, (1000, 2))
    back = distort_normalized(
        undistort_normalized(xy, FOX_QUARTER.distortion), FOX_QUARTER.distortion
    )
    np.testing.assert_allclose(back, xy, atol=1e-12)


def test_undistortion_matches_a_pinhole_ray_trace() -> None:
    """A distorted photo of an analytic scene, once undistorted, equals the pinhole photo taken
    with the pipeline's K; keeping the distorted pixels with the original K does not."""
    scene = SyntheticScene.random(seed=3)
    c2w = ring_cameras(8, radius=3.5)[1]
    cam = FOX_QUARTER
    distorted = scene.render(
        c2w, cam.K, cam.width, cam.height, samples=2, distortion=cam.distortion
    )
    pipe = ImagePipeline(cam, downscale=2, background=(1.0, 1.0, 1.0))
    got = pipe.process(distorted.astype(np.float32))
    want = composite(scene.render(c2w, pipe.K, pipe.width, pipe.height, samples=4), (1.0, 1.0, 1.0))
    error = np.abs(got - want).mean()
    naive = ImagePipeline(
        Camera(cam.width, cam.height, cam.fx, cam.fy, cam.cx, cam.cy), 2, (1, 1, 1)
    )
    naive_want = composite(
        scene.render(c2w, naive.K, naive.width, naive.height, samples=4), (1.0, 1.0, 1.0)
    )
    naive_error = np.abs(naive.process(distorted.astype(np.float32)) - naive_want).mean()
    assert error < 0.004, error  # a principal point off by 0.25 px gives 0.0076
    assert naive_error > 2 * error, (naive_error, error)  # the fox lens is mild: 0.0068 vs 0.0019
    # the new camera keeps the full image valid: no border fill dominates the corners
    assert np.abs(got[:4, :4] - want[:4, :4]).mean() < 0.1


def test_fox_is_undistorted_like_opencv(fox: Path, tmp_path: Path) -> None:
    ds = load_dataset(fox, downscale=1, cache_dir=tmp_path)
    view = ds.views[0]
    original = np.asarray(Image.open(view.image_path).convert("RGB"), dtype=np.float32) / 255.0
    k = np.array([[1375.52, 0, 554.558], [0, 1374.49, 965.268], [0, 0, 1.0]])
    dist = np.array([0.0578421, -0.0805099, -0.000980296, 0.00015575])
    shift = np.array([[1, 0, -0.5], [0, 1, -0.5], [0, 0, 1.0]])  # OpenCV: pixel centres at i
    new_k = shift @ view.K.double().numpy()
    want = cv2.undistort(original, shift @ k, dist, None, new_k)
    got = view.load_image().numpy()
    assert got.shape == (1920, 1080, 3)
    inner = (slice(8, -8), slice(8, -8))
    # OpenCV's undistort uses fixed-point maps (1/32 px); gsnb's float maps agree to a few levels
    assert np.abs(got[inner] - want[inner]).mean() < 0.5 / 255
    assert np.abs(got[inner] - want[inner]).max() < 4 / 255
    assert np.abs(got[inner] - original[inner]).mean() > 5 * np.abs(got[inner] - want[inner]).mean()


def test_downscale_cache_is_written_and_reused(fox: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    view = load_dataset(fox, downscale=8, cache_dir=cache).views[1]
    first = view.load_image()
    files = sorted(cache.iterdir())
    assert len(files) == 1 and files[0].suffix == ".png"
    assert tuple(first.shape) == (240, 135, 3)
    # a fresh dataset object reads the cached file: altering it shows up
    marked = np.asarray(Image.open(files[0])).copy()
    marked[0, 0] = (255, 0, 255)
    Image.fromarray(marked).save(files[0])
    again = load_dataset(fox, downscale=8, cache_dir=cache).views[1].load_image()
    assert again[0, 0].tolist() == [1.0, 0.0, 1.0]
    assert float((again[1:] - first[1:]).abs().max()) == 0.0
    # another factor is another cache entry
    load_dataset(fox, downscale=4, cache_dir=cache).views[1].load_image()
    assert len(list(cache.iterdir())) == 2


def test_cache_follows_the_source_file(tmp_path: Path) -> None:
    src = tmp_path / "a.png"
    Image.new("RGB", (8, 8), (255, 0, 0)).save(src)
    pipe = ImagePipeline(Camera(8, 8, 8.0, 8.0, 4.0, 4.0), 2, cache_dir=tmp_path / "c")
    assert pipe.load(src)[0, 0].tolist() == [1.0, 0.0, 0.0]
    Image.new("RGB", (8, 8), (0, 0, 255)).save(src)
    os.utime(src, ns=(1, 10**18))  # a new modification time
    assert pipe.load(src)[0, 0].tolist() == [0.0, 0.0, 1.0]


def test_a_file_replaced_with_the_same_size_and_time_is_read_again(tmp_path: Path) -> None:
    src, other = tmp_path / "a.bmp", tmp_path / "b.bmp"
    Image.new("RGB", (8, 8), (255, 0, 0)).save(src)
    Image.new("RGB", (8, 8), (0, 0, 255)).save(other)  # BMP: the same byte size
    pipe = ImagePipeline(Camera(8, 8, 8.0, 8.0, 4.0, 4.0), 2, cache_dir=tmp_path / "c")
    assert pipe.load(src)[0, 0].tolist() == [1.0, 0.0, 0.0]
    times = src.stat()
    os.replace(other, src)  # as cp -p or rsync -a put a new export in place
    os.utime(src, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert src.stat().st_size == times.st_size and src.stat().st_mtime_ns == times.st_mtime_ns
    assert pipe.load(src)[0, 0].tolist() == [0.0, 0.0, 1.0]


def test_downscaled_intrinsics_follow_the_pixel_grid() -> None:
    pipe = ImagePipeline(Camera(101, 50, 100.0, 90.0, 50.5, 25.0), downscale=2)
    assert (pipe.width, pipe.height) == scaled_size(101, 50, 2) == (50, 25)
    np.testing.assert_allclose(pipe.K, [[100 * 50 / 101, 0, 25.0], [0, 45.0, 12.5], [0, 0, 1]])
    image = np.zeros((50, 101, 3), np.float32)
    image[:, :51] = 1.0  # left half bright: the downscaled edge stays at the same place
    out = pipe.process(image)
    assert out[0, 24] == pytest.approx(1.0) and out[0, 26] == pytest.approx(0.0)


def test_exif_orientation(tmp_path: Path) -> None:
    stored = np.zeros((20, 30, 3), np.uint8)
    stored[:, :5] = 255  # bright left columns of the stored pixels
    img = Image.fromarray(stored)
    exif = img.getexif()
    exif[0x0112] = 6  # display rotated 90 degrees clockwise
    img.save(tmp_path / "a.jpg", exif=exif, quality=95)
    upright = read_image(tmp_path / "a.jpg")
    assert upright.shape == (30, 20, 3) and upright[:5].mean() > 0.9 and upright[-5:].mean() < 0.1
    # a camera with the stored size means the poses saw the stored pixels
    raw = read_image(tmp_path / "a.jpg", size=(30, 20))
    assert raw.shape == (20, 30, 3) and raw[:, :5].mean() > 0.9
    with pytest.raises(ValueError, match=r"is 20x30 but its camera says 40x40"):
        read_image(tmp_path / "a.jpg", size=(40, 40))


def test_rgba_and_grey_images(tmp_path: Path) -> None:
    Image.new("RGBA", (4, 4), (255, 0, 0, 0)).save(tmp_path / "clear.png")
    Image.new("L", (4, 4), 128).save(tmp_path / "grey.png")
    Image.fromarray(np.full((4, 4), 65535, np.uint16)).save(tmp_path / "deep.png")
    clear = ImagePipeline(Camera(4, 4, 4.0, 4.0, 2.0, 2.0), background=(0.0, 1.0, 0.0))
    assert clear.load(tmp_path / "clear.png")[0, 0].tolist() == [0.0, 1.0, 0.0]
    assert read_image(tmp_path / "grey.png")[0, 0].tolist() == pytest.approx([128 / 255] * 3)
    assert read_image(tmp_path / "deep.png")[0, 0].tolist() == [1.0, 1.0, 1.0]


def test_corrupt_jpeg_is_a_clear_error(fox: Path, tmp_path: Path) -> None:
    data = (fox / "images" / "0001.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 3])
    (tmp_path / "junk.jpg").write_bytes(b"not an image at all")
    pipe = ImagePipeline(Camera(1080, 1920, 1000.0, 1000.0, 540.0, 960.0))
    for name in ("cut.jpg", "junk.jpg"):
        with pytest.raises(ValueError, match=r"cannot decode image .* corrupt"):
            pipe.load(tmp_path / name)
    with pytest.raises(FileNotFoundError, match=r"does not exist"):
        pipe.load(tmp_path / "absent.jpg")
