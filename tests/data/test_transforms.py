"""transforms.json: the fox agrees with its COLMAP model; conventions, intrinsics, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gsnb.data.colmap import find_colmap_model, read_colmap_scene
from gsnb.data.dataset import load_dataset
from gsnb.data.transforms import read_transforms_scene


def test_fox_formats_describe_the_same_cameras(fox: Path) -> None:
    """The fox's COLMAP model was triangulated with the transforms.json poses held fixed, in the
    same world frame: no instant-ngp rescaling or recentring separates the two, so after the
    OpenGL camera-to-world -> OpenCV world-to-camera conversion they agree directly."""
    colmap = {im.name: im for im in read_colmap_scene(fox, find_colmap_model(fox)).images}
    ngp = {Path(im.name).name: im for im in read_transforms_scene(fox / "transforms.json").images}
    assert sorted(colmap) == sorted(ngp) and len(colmap) == 67
    for name, a in colmap.items():
        b = ngp[name]
        np.testing.assert_allclose(b.viewmat, a.viewmat, atol=1e-5, rtol=0)
        np.testing.assert_allclose(b.camera.K, a.camera.K, atol=1e-5, rtol=0)
        np.testing.assert_allclose(b.camera.distortion, a.camera.distortion, atol=1e-5, rtol=0)
        assert (b.camera.width, b.camera.height) == (a.camera.width, a.camera.height)
        assert b.image_path.resolve() == a.image_path.resolve()


def test_fox_datasets_agree_after_undistortion(fox: Path, tmp_path: Path) -> None:
    a = load_dataset(fox, downscale=8, cache_dir=tmp_path)
    b = load_dataset(fox / "transforms.json", downscale=8, cache_dir=tmp_path)
    assert [Path(v.name).name for v in b.views] == [v.name for v in a.views]
    assert a.test_ids == b.test_ids == list(range(0, 67, 8))
    for va, vb in zip(a.views, b.views, strict=True):
        assert (va.width, va.height) == (vb.width, vb.height) == (135, 240)
        np.testing.assert_allclose(vb.K.numpy(), va.K.numpy(), atol=1e-5)
        np.testing.assert_allclose(vb.viewmat.numpy(), va.viewmat.numpy(), atol=1e-5)
    np.testing.assert_allclose(a.center.numpy(), b.center.numpy(), atol=1e-5)
    assert a.extent == pytest.approx(b.extent, abs=1e-5)
    assert b.points.shape[1] == 3 and a.points.shape == (18949, 3)


def _write(folder: Path, meta: dict, images: dict[str, tuple[int, int, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rel, (w, h, mode) in images.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        colour = (200, 100, 50, 128) if mode == "RGBA" else (200, 100, 50)
        Image.new(mode, (w, h), colour).save(folder / rel)
    name = meta.pop("_name", "transforms.json")
    (folder / name).write_text(json.dumps(meta))
    return folder / name


def _frame(path: str, c2w: np.ndarray | None = None, **extra: object) -> dict:
    c2w = np.eye(4) if c2w is None else c2w
    return {"file_path": path, "transform_matrix": c2w.tolist(), **extra}


def test_opengl_poses_become_opencv_world_to_camera(tmp_path: Path) -> None:
    # camera at (1, 2, 3) looking down -z with +y up (OpenGL identity rotation)
    c2w = np.eye(4)
    c2w[:3, 3] = (1.0, 2.0, 3.0)
    path = _write(
        tmp_path, {"fl_x": 50.0, "frames": [_frame("a.png", c2w)]}, {"a.png": (40, 30, "RGB")}
    )
    view = load_dataset(path, cache_dir=tmp_path / "c").views[0]
    # a point 1 unit in front of the camera, 0.1 above it, must project above the image centre
    point = np.array([1.0, 2.1, 2.0, 1.0])
    cam = view.viewmat.double().numpy() @ point
    assert cam[2] == pytest.approx(1.0) and cam[1] == pytest.approx(-0.1)
    pix = view.K.double().numpy() @ cam[:3] / cam[2]
    assert pix[0] == pytest.approx(20.0) and pix[1] == pytest.approx(15.0 - 5.0)
    np.testing.assert_allclose(view.camera_center.numpy(), [1.0, 2.0, 3.0], atol=1e-6)


def test_camera_angle_x_alone(tmp_path: Path) -> None:
    meta = {"camera_angle_x": 0.6, "frames": [_frame("./train/r_0"), _frame("./train/r_1")]}
    path = _write(
        tmp_path, meta, {"train/r_0.png": (80, 60, "RGB"), "train/r_1.png": (80, 60, "RGB")}
    )
    ds = load_dataset(path, cache_dir=tmp_path / "c", test_every=0)
    focal = 0.5 * 80 / math.tan(0.3)
    assert [v.name for v in ds.views] == ["train/r_0.png", "train/r_1.png"]
    np.testing.assert_allclose(
        ds.views[0].K.numpy(), [[focal, 0, 40], [0, focal, 30], [0, 0, 1]], rtol=1e-6
    )
    assert ds.test_ids == [] and ds.train_ids == [0, 1]


def test_shared_and_per_frame_intrinsics_and_distortion(tmp_path: Path) -> None:
    meta = {
        "fl_x": 100.0,
        "fl_y": 110.0,
        "cx": 41.0,
        "cy": 29.0,
        "w": 80,
        "h": 60,
        "k1": 0.01,
        "k2": -0.02,
        "p1": 0.001,
        "p2": -0.001,
        "frames": [
            _frame("a.png"),
            _frame(
                "b.png",
                fl_x=70.0,
                fl_y=70.0,
                cx=20.0,
                cy=40.0,
                w=40,
                h=80,
                k1=0.0,
                k2=0.0,
                p1=0.0,
                p2=0.0,
            ),
        ],
    }
    path = _write(tmp_path, meta, {"a.png": (80, 60, "RGB"), "b.png": (40, 80, "RGB")})
    images = {im.name: im for im in read_transforms_scene(path).images}
    a, b = images["a.png"].camera, images["b.png"].camera
    assert (a.fx, a.fy, a.cx, a.cy, a.width, a.height) == (100.0, 110.0, 41.0, 29.0, 80, 60)
    assert a.distortion == (0.01, -0.02, 0.001, -0.001) and a.is_distorted
    assert (b.fx, b.fy, b.cx, b.cy, b.width, b.height) == (70.0, 70.0, 20.0, 40.0, 40, 80)
    assert not b.is_distorted
    ds = load_dataset(path, cache_dir=tmp_path / "c")
    assert [(v.width, v.height) for v in ds.views] == [(80, 60), (40, 80)]
    assert float(ds.views[1].K[0, 0]) == 70.0  # undistorted camera passes through
    assert float(ds.views[0].K[0, 0]) != 100.0  # distorted camera gets a new pinhole K
    assert tuple(ds.views[0].load_image().shape) == (60, 80, 3)


def test_nerf_synthetic_split_and_white_background(tmp_path: Path) -> None:
    files = {f"{s}/r_{i}.png": (20, 20, "RGBA") for s in ("train", "test") for i in range(3)}
    angle = {"camera_angle_x": 0.69}
    _write(
        tmp_path,
        {
            **angle,
            "_name": "transforms_train.json",
            "frames": [_frame(f"./train/r_{i}") for i in range(3)],
        },
        files,
    )
    _write(
        tmp_path,
        {
            **angle,
            "_name": "transforms_test.json",
            "frames": [_frame(f"./test/r_{i}") for i in range(3)],
        },
        {},
    )
    ds = load_dataset(tmp_path, cache_dir=tmp_path / "c")
    assert ds.background == (1.0, 1.0, 1.0)
    assert [ds.views[i].name for i in ds.test_ids] == [
        "test/r_0.png",
        "test/r_1.png",
        "test/r_2.png",
    ]
    assert len(ds.train) == 3
    pixel = ds.views[0].load_image()[0, 0]
    alpha = 128 / 255
    expected = [c / 255 * alpha + (1 - alpha) for c in (200, 100, 50)]
    np.testing.assert_allclose(pixel.numpy(), expected, atol=1 / 255)
    assert load_dataset(tmp_path, cache_dir=tmp_path / "c", test_every=0).test_ids == []


def test_missing_frames_are_skipped_with_one_warning(tmp_path: Path) -> None:
    meta = {"fl_x": 50.0, "frames": [_frame(f"images/{i}.png") for i in range(5)]}
    path = _write(
        tmp_path, meta, {"images/0.png": (16, 16, "RGB"), "images/3.png": (16, 16, "RGB")}
    )
    with pytest.warns(UserWarning, match=r"3 of 5 images are missing") as record:
        ds = load_dataset(path, cache_dir=tmp_path / "c")
    assert len(record) == 1
    assert [v.name for v in ds.views] == ["images/0.png", "images/3.png"]


def test_missing_image_folder_is_an_error(tmp_path: Path) -> None:
    meta = {"fl_x": 50.0, "w": 16, "h": 16, "frames": [_frame("images/0.png")]}
    path = _write(tmp_path, meta, {})
    with pytest.raises(FileNotFoundError, match=r"image folder .*images does not exist"):
        load_dataset(path)


def test_non_finite_and_non_rigid_poses_are_errors(tmp_path: Path) -> None:
    bad = np.eye(4)
    bad[0, 3] = np.nan
    meta = {"fl_x": 50.0, "frames": [_frame("a.png", bad)]}
    path = _write(tmp_path / "a", meta, {"a.png": (8, 8, "RGB")})
    with pytest.raises(ValueError, match=r"frame a.png: transform_matrix holds NaN or Inf"):
        load_dataset(path)
    scaled = np.diag([2.0, 2.0, 2.0, 1.0])
    path = _write(
        tmp_path / "b",
        {"fl_x": 50.0, "frames": [_frame("a.png", scaled)]},
        {"a.png": (8, 8, "RGB")},
    )
    with pytest.raises(ValueError, match=r"not a rigid motion"):
        load_dataset(path)


def test_zero_frames_and_bad_json_are_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, {"fl_x": 50.0, "frames": []}, {})
    with pytest.raises(ValueError, match=r"lists no frames"):
        load_dataset(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"not valid JSON"):
        load_dataset(path)


def test_unsupported_camera_model(tmp_path: Path) -> None:
    meta = {"fl_x": 50.0, "camera_model": "EQUIRECTANGULAR", "frames": [_frame("a.png")]}
    path = _write(tmp_path, meta, {"a.png": (8, 8, "RGB")})
    with pytest.raises(ValueError, match=r"EQUIRECTANGULAR' is not supported"):
        load_dataset(path)
