"""COLMAP readers: binary and text agree, camera models, rigs/frames files, and bad input."""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from gsnb.data.camera import CAMERA_MODELS, Camera
from gsnb.data.colmap import (
    MODEL_NAMES,
    ColmapModel,
    qvec_to_rotation,
    read_colmap_model,
    write_colmap_text,
)
from gsnb.data.dataset import load_dataset


def _copy_model(fox: Path, folder: Path) -> Path:
    model = folder / "sparse" / "0"
    shutil.copytree(fox / "sparse" / "0", model)
    for f in model.iterdir():
        f.chmod(0o644)
    (folder / "images").symlink_to(fox / "images")
    return model


def test_fox_binary_model_with_rigs_and_frames(fox: Path, fox_model: ColmapModel) -> None:
    assert (fox / "sparse" / "0" / "rigs.bin").is_file()
    assert (fox / "sparse" / "0" / "frames.bin").is_file()
    assert len(fox_model.images) == 67
    assert (
        fox_model.cameras == {1: ("OPENCV", 1080, 1920, fox_model.cameras[1][3])}
        and len(fox_model.cameras[1][3]) == 8
    )
    assert fox_model.points.shape == (18949, 3) and np.isfinite(fox_model.points).all()
    names = sorted(n for n, *_ in fox_model.images.values())
    assert names[0] == "0001.jpg" and len(set(names)) == 67
    # every pose is a rotation
    for image_id in fox_model.images:
        rot = fox_model.viewmat(image_id)[:3, :3]
        np.testing.assert_allclose(rot @ rot.T, np.eye(3), atol=1e-12)


def test_text_and_binary_readers_agree(fox: Path, fox_model: ColmapModel, tmp_path: Path) -> None:
    write_colmap_text(fox_model, tmp_path)
    text = read_colmap_model(tmp_path)
    assert text.cameras == fox_model.cameras
    assert text.images.keys() == fox_model.images.keys()
    for image_id, (name, qvec, tvec, cam) in fox_model.images.items():
        t_name, t_qvec, t_tvec, t_cam = text.images[image_id]
        assert (t_name, t_cam) == (name, cam)
        np.testing.assert_array_equal(t_qvec, qvec)
        np.testing.assert_array_equal(t_tvec, tvec)
    np.testing.assert_array_equal(text.points, fox_model.points)
    np.testing.assert_array_equal(text.points_rgb, fox_model.points_rgb)


def test_text_dataset_loads_like_binary(fox: Path, fox_subset, tmp_path: Path) -> None:
    root = fox_subset(3)
    text = load_dataset(root, downscale=8, cache_dir=tmp_path / "cache")
    binary = load_dataset(fox, downscale=8, cache_dir=tmp_path / "cache")
    by_name = {v.name: v for v in binary.views}
    assert [v.name for v in text.views] == ["0001.jpg", "0002.jpg", "0003.jpg"]
    for view in text.views:
        other = by_name[view.name]
        assert (view.width, view.height) == (other.width, other.height) == (135, 240)
        assert torch_equal(view.K, other.K) and torch_equal(view.viewmat, other.viewmat)


def torch_equal(a, b) -> bool:
    return bool((a == b).all())


def test_images_txt_names_with_spaces_and_empty_points_lines(tmp_path: Path) -> None:
    (tmp_path / "cameras.txt").write_text("# comment\n1 PINHOLE 4 3 2 2 2 1.5\n")
    (tmp_path / "images.txt").write_text(
        "# IMAGE_ID ...\n"
        "1 1 0 0 0 0 0 0 1 my photo.png\n\n"
        "2 1 0 0 0 1 2 3 1 b.png\n1.0 2.0 -1 3.0 4.0 7\n"
    )
    model = read_colmap_model(tmp_path)
    assert [v[0] for v in model.images.values()] == ["my photo.png", "b.png"]
    np.testing.assert_array_equal(model.images[2][2], [1.0, 2.0, 3.0])
    assert model.points.shape == (0, 3)


@pytest.mark.parametrize("model_id", [0, 1, 2, 3, 4])
def test_every_supported_model_reads_from_binary(tmp_path: Path, model_id: int) -> None:
    name = MODEL_NAMES[model_id]
    params = [300.0, 310.0, 160.0, 120.0, 0.01, -0.02, 0.001, 0.002][: len(CAMERA_MODELS[name])]
    if name.startswith(("SIMPLE", "RADIAL")):
        params = [300.0, 160.0, 120.0, 0.01, -0.02][: len(CAMERA_MODELS[name])]
    _write_cameras_bin(tmp_path / "cameras.bin", [(7, model_id, 320, 240, params)])
    _write_images_bin(tmp_path / "images.bin", [(3, [1, 0, 0, 0], [0, 0, 1], 7, "x.png", 2)])
    model = read_colmap_model(tmp_path)
    assert model.cameras[7] == (name, 320, 240, tuple(params))
    cam = model.camera(7)
    assert (cam.width, cam.height, cam.cx, cam.cy) == (320, 240, 160.0, 120.0)
    assert cam.fx == 300.0 and cam.fy == (310.0 if name in ("PINHOLE", "OPENCV") else 300.0)
    assert cam.is_distorted == (model_id >= 2)


def test_one_camera_per_image_of_different_sizes_and_orientations(tmp_path: Path) -> None:
    from PIL import Image

    (tmp_path / "images").mkdir()
    sparse = tmp_path / "sparse"
    sparse.mkdir()
    sizes = {"a.png": (64, 48), "b.png": (48, 64), "c.png": (50, 50)}
    cameras, images = {}, {}
    for i, (name, (w, h)) in enumerate(sizes.items(), start=1):
        Image.new("RGB", (w, h), (10 * i, 0, 0)).save(tmp_path / "images" / name)
        cameras[i] = ("SIMPLE_PINHOLE", w, h, (40.0, w / 2, h / 2))
        images[i] = (name, np.array([1.0, 0, 0, 0]), np.array([0.0, 0, i]), i)
    write_colmap_text(
        ColmapModel(cameras, images, np.zeros((1, 3)), np.zeros((1, 3), np.uint8)), sparse
    )
    ds = load_dataset(tmp_path, downscale=2, cache_dir=tmp_path / "cache")
    assert [(v.width, v.height) for v in ds.views] == [(32, 24), (24, 32), (25, 25)]
    for view in ds.views:
        assert tuple(view.load_image().shape) == (view.height, view.width, 3)
        assert float(view.K[0, 0]) == pytest.approx(40.0 * view.width / sizes[view.name][0])


def test_quaternion_convention() -> None:
    # 90 degrees about z (Hamilton, w first) maps x to y.
    rot = qvec_to_rotation(np.array([np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4)]))
    np.testing.assert_allclose(rot @ [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], atol=1e-12)


# ----------------------------------------------------------------------------- bad input


def test_truncated_binary_files_fail_clearly(fox: Path, tmp_path: Path) -> None:
    for name in ("cameras.bin", "images.bin", "points3D.bin"):
        model = _copy_model(fox, tmp_path / name)
        data = (model / name).read_bytes()
        (model / name).write_bytes(data[: len(data) // 2 + 3])
        with pytest.raises(ValueError, match=r"truncated or corrupt"):
            read_colmap_model(model)


@pytest.mark.parametrize("name", ["cameras.bin", "images.bin", "points3D.bin"])
def test_huge_counts_are_refused_without_allocating(fox: Path, tmp_path: Path, name: str) -> None:
    model = _copy_model(fox, tmp_path)
    data = bytearray((model / name).read_bytes())
    data[:8] = struct.pack("<Q", 2**62)
    (model / name).write_bytes(bytes(data))
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"claims 4611686018427387904"):
        read_colmap_model(model)
    assert time.perf_counter() - start < 5.0


def test_huge_inner_count_is_refused(fox: Path, tmp_path: Path) -> None:
    model = _copy_model(fox, tmp_path)
    data = bytearray((model / "images.bin").read_bytes())
    offset = 8 + 4 + 56 + 4 + len(b"0001.jpg\0")  # first image's number of 2D points
    data[offset : offset + 8] = struct.pack("<Q", 2**40)
    (model / "images.bin").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"2D points"):
        read_colmap_model(model)


def test_unknown_and_unsupported_camera_models(tmp_path: Path) -> None:
    _write_cameras_bin(tmp_path / "cameras.bin", [(1, 99, 10, 10, [])])
    _write_images_bin(tmp_path / "images.bin", [])
    with pytest.raises(ValueError, match=r"unknown camera model id 99"):
        read_colmap_model(tmp_path)
    _write_cameras_bin(tmp_path / "cameras.bin", [(1, 10, 10, 10, [1.0] * 12)])
    with pytest.raises(ValueError, match=r"THIN_PRISM_FISHEYE is not supported.*PINHOLE"):
        read_colmap_model(tmp_path)
    (tmp_path / "cameras.bin").unlink()
    (tmp_path / "cameras.txt").write_text("1 FOV 10 10 1 1 5 5 0.1\n")
    (tmp_path / "images.txt").write_text("")
    with pytest.raises(ValueError, match=r"FOV is not supported"):
        read_colmap_model(tmp_path)
    with pytest.raises(ValueError, match=r"not supported"):
        Camera.from_colmap("THIN_PRISM_FISHEYE", 10, 10, [1.0] * 12)


def _text_dataset(
    folder: Path, images_txt: str, points_txt: str | None = "1 0 0 0 1 2 3 0\n"
) -> Path:
    from PIL import Image

    (folder / "images").mkdir(parents=True)
    Image.new("RGB", (8, 6)).save(folder / "images" / "a.png")
    sparse = folder / "sparse" / "0"
    sparse.mkdir(parents=True)
    (sparse / "cameras.txt").write_text("1 PINHOLE 8 6 5 5 4 3\n")
    (sparse / "images.txt").write_text(images_txt)
    if points_txt is not None:
        (sparse / "points3D.txt").write_text(points_txt)
    return folder


GOOD_IMAGE = "1 1 0 0 0 0 0 2 1 a.png\n\n"


def test_text_dataset_reads(tmp_path: Path) -> None:
    ds = load_dataset(_text_dataset(tmp_path, GOOD_IMAGE), cache_dir=tmp_path / "c")
    assert ds.points.tolist() == [[0.0, 0.0, 0.0]]
    assert ds.points_rgb[0].tolist() == pytest.approx([1 / 255, 2 / 255, 3 / 255])


def test_non_finite_pose_is_an_error(tmp_path: Path) -> None:
    root = _text_dataset(tmp_path, "1 nan 0 0 0 0 0 2 1 a.png\n\n")
    with pytest.raises(ValueError, match=r"pose of image a.png holds NaN"):
        load_dataset(root)
    root = _text_dataset(tmp_path / "inf", "1 1 0 0 0 inf 0 2 1 a.png\n\n")
    with pytest.raises(ValueError, match=r"pose of image a.png holds NaN or Inf"):
        load_dataset(root)


def test_zero_images_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"has no images"):
        load_dataset(_text_dataset(tmp_path, "# nothing registered\n"))


def test_empty_and_non_finite_points_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"point cloud .* is empty"):
        load_dataset(_text_dataset(tmp_path / "a", GOOD_IMAGE, "# no points\n"))
    with pytest.raises(ValueError, match=r"1 of 2 points .* hold NaN or Inf"):
        load_dataset(
            _text_dataset(tmp_path / "b", GOOD_IMAGE, "1 0 0 0 1 2 3 0\n2 nan 0 0 1 2 3 0\n")
        )


def test_missing_points_file_gives_random_points(tmp_path: Path) -> None:
    ds = load_dataset(_text_dataset(tmp_path, GOOD_IMAGE, None), cache_dir=tmp_path / "c")
    assert ds.points.shape[0] > 1000 and bool(ds.points.isfinite().all())


def test_missing_image_folder_is_an_error(tmp_path: Path) -> None:
    root = _text_dataset(tmp_path, GOOD_IMAGE)
    shutil.rmtree(root / "images")
    with pytest.raises(FileNotFoundError, match=r"image folder .*images does not exist"):
        load_dataset(root)


def test_missing_images_are_skipped_with_one_warning(tmp_path: Path) -> None:
    root = _text_dataset(
        tmp_path, GOOD_IMAGE + "2 1 0 0 0 0 0 3 1 b.png\n\n3 1 0 0 0 0 0 4 1 c.png\n\n"
    )
    with pytest.warns(UserWarning, match=r"2 of 3 images are missing") as record:
        ds = load_dataset(root, cache_dir=tmp_path / "c")
    assert len(record) == 1 and [v.name for v in ds.views] == ["a.png"]


def test_malformed_text_lines_name_the_line(tmp_path: Path) -> None:
    (tmp_path / "cameras.txt").write_text("1 PINHOLE 8 6 5 5 4\n")
    (tmp_path / "images.txt").write_text("")
    with pytest.raises(ValueError, match=r"cameras.txt, line 1: PINHOLE takes 4 parameters"):
        read_colmap_model(tmp_path)


# ----------------------------------------------------------------------------- helpers


def _write_cameras_bin(path: Path, cameras: list) -> None:
    data = struct.pack("<Q", len(cameras))
    for cid, model_id, w, h, params in cameras:
        data += struct.pack(f"<IiQQ{len(params)}d", cid, model_id, w, h, *params)
    path.write_bytes(data)


def _write_images_bin(path: Path, images: list) -> None:
    data = struct.pack("<Q", len(images))
    for iid, qvec, tvec, cid, name, num_points in images:
        data += struct.pack("<I7dI", iid, *qvec, *tvec, cid) + name.encode() + b"\0"
        data += struct.pack("<Q", num_points) + b"\0" * (24 * num_points)
    path.write_bytes(data)
