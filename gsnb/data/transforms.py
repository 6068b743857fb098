"""``transforms.json`` datasets (instant-ngp, NeRF-synthetic, nerfstudio) as posed images.

Poses are camera-to-world in OpenGL axes (+y up, +z backward); they become
world-to-camera matrices in OpenCV axes. Intrinsics come from ``fl_x``/``fl_y``
(or ``camera_angle_x``/``camera_angle_y``), ``cx``/``cy`` (default: the image
centre), ``w``/``h`` (default: the image file's size) and distortion ``k1 k2 p1
p2`` (``k1 k2 k3 k4`` with ``camera_model: OPENCV_FISHEYE``), at the top level
or per frame (per-frame values win). The size the intrinsics describe may differ
from the files' by one factor (pre-downscaled images); ``images_N/`` beside
``images/`` is used for a downscale of N.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from gsnb.cameras import focal_from_fov
from gsnb.data.camera import (
    Camera,
    PosedImage,
    SceneFiles,
    downscaled_folder,
    drop_missing_images,
)
from gsnb.data.images import image_has_alpha, image_size

# OpenGL camera axes (x right, y up, z back) -> OpenCV (x right, y down, z forward).
GL_TO_CV = np.diag([1.0, -1.0, -1.0, 1.0])
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".PNG", ".JPG", ".JPEG", ".exr", ".webp")
_SUPPORTED_MODELS = (
    "OPENCV",
    "PINHOLE",
    "SIMPLE_PINHOLE",
    "SIMPLE_RADIAL",
    "RADIAL",
    "OPENCV_FISHEYE",
)


def find_transforms(root: Path) -> tuple[Path, Path | None] | None:
    """``(transforms.json, None)``, ``(transforms_train.json, transforms_test.json)`` or None.

    Example:
        >>> find_transforms(Path("/nonexistent")) is None
        True
    """
    if (root / "transforms.json").is_file():
        return root / "transforms.json", None
    if (root / "transforms_train.json").is_file():
        test = root / "transforms_test.json"
        return root / "transforms_train.json", test if test.is_file() else None
    return None


def read_transforms_scene(
    path: Path, test_path: Path | None = None, downscale: int = 1
) -> SceneFiles:
    """Read ``path`` (and NeRF-synthetic's ``test_path``, whose frames become the test split).

    With ``downscale = N > 1``, frames under ``images/`` are read from
    ``images_N/`` when it holds all of them (``SceneFiles.downscaled`` says so).

    Points come from the optional ``ply_file_path`` key (nerfstudio's); images
    with an alpha channel put the scene on a white background (NeRF-synthetic).

    Example:
        >>> import tempfile
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> root = make_synthetic_scene(tempfile.mkdtemp(), num_views=3, size=16)
        >>> len(read_transforms_scene(root / "transforms.json").images)
        3
    """
    meta = _load_json(path)
    images = _posed_images(path, meta)
    test_names = None
    if test_path is not None:
        test_images = _posed_images(test_path, _load_json(test_path))
        test_names = {im.name for im in test_images}
        images += test_images
    if not images:
        raise ValueError(f"{path} lists no frames; nothing to train on")
    smaller = [
        downscaled_folder(im.image_path.parent, downscale) / im.image_path.name for im in images
    ]
    downscaled = 1
    pairs = zip(smaller, images, strict=True)
    if downscale > 1 and all(p.is_file() and p != im.image_path for p, im in pairs):
        images = [
            PosedImage(im.name, p, im.camera, im.viewmat)
            for p, im in zip(smaller, images, strict=True)
        ]
        downscaled = downscale
    images = drop_missing_images(images, _image_folder(path.parent, images))
    points = rgb = None
    if "ply_file_path" in meta:
        from gsnb.data.points import read_ply_points

        points, rgb = read_ply_points(path.parent / str(meta["ply_file_path"]))
    background = (1.0, 1.0, 1.0) if image_has_alpha(images[0].image_path) else (0.0, 0.0, 0.0)
    return SceneFiles(path.parent, images, points, rgb, background, test_names, downscaled)


def _load_json(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read {path} ({err}); it is not valid JSON") from err
    if not isinstance(meta, dict) or not isinstance(meta.get("frames"), list):
        raise ValueError(f"{path} has no 'frames' list; it is not a transforms.json dataset")
    return meta


def _posed_images(path: Path, meta: dict[str, Any]) -> list[PosedImage]:
    root = path.parent
    images = []
    for index, frame in enumerate(meta["frames"]):
        if not isinstance(frame, dict) or "file_path" not in frame:
            raise ValueError(f"{path}: frame {index} has no 'file_path'")
        image_path = _resolve_image(root, str(frame["file_path"]))
        try:
            rel = image_path.relative_to(root)
        except ValueError:
            rel = image_path
        name = rel.as_posix()
        c2w = _matrix(frame.get("transform_matrix"), f"{path}: frame {name}")
        camera = _camera({**meta, **frame}, image_path, f"{path}: frame {name}")
        viewmat = np.linalg.inv(c2w @ GL_TO_CV)
        images.append(PosedImage(name, image_path, camera, viewmat))
    return images


def _resolve_image(root: Path, file_path: str) -> Path:
    path = Path(file_path)
    path = path if path.is_absolute() else root / path
    if path.suffix.lower() not in _IMAGE_SUFFIXES:  # NeRF-synthetic omits ".png"
        for suffix in _IMAGE_SUFFIXES:
            candidate = path.with_name(path.name + suffix)
            if candidate.is_file():
                return candidate
    return path


def _matrix(value: Any, where: str) -> np.ndarray:
    try:
        m = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: transform_matrix is not a numeric matrix ({err})") from err
    if m.shape == (3, 4):
        m = np.vstack([m, [0.0, 0.0, 0.0, 1.0]])
    if m.shape != (4, 4):
        raise ValueError(f"{where}: transform_matrix has shape {m.shape}; expected 4x4")
    if not np.isfinite(m).all():
        raise ValueError(f"{where}: transform_matrix holds NaN or Inf; fix or remove that frame")
    rot = m[:3, :3]
    if np.abs(rot @ rot.T - np.eye(3)).max() > 1e-3 or np.linalg.det(rot) < 0:
        raise ValueError(
            f"{where}: transform_matrix is not a rigid motion (its rotation part is scaled, "
            "sheared or mirrored); write camera-to-world rotations and translations only"
        )
    if np.abs(m[3] - [0.0, 0.0, 0.0, 1.0]).max() > 1e-6:
        raise ValueError(f"{where}: transform_matrix's last row must be 0 0 0 1")
    return m


def _camera(meta: dict[str, Any], image_path: Path, where: str) -> Camera:
    model = str(meta.get("camera_model", "OPENCV"))
    if model not in _SUPPORTED_MODELS:
        raise ValueError(
            f"{where}: camera_model {model!r} is not supported; gsnb reads "
            f"{', '.join(_SUPPORTED_MODELS)}"
        )
    if "w" in meta and "h" in meta:
        width, height = int(meta["w"]), int(meta["h"])
    elif image_path.is_file():
        width, height = image_size(image_path)
    else:
        return _placeholder_camera()  # a missing image is dropped later with a warning
    fx = _focal(meta, "fl_x", "camera_angle_x", width)
    fy = _focal(meta, "fl_y", "camera_angle_y", height)
    if fx is None and fy is None:
        raise ValueError(f"{where}: no focal length (fl_x or camera_angle_x)")
    fx = fx if fx is not None else fy
    fy = fy if fy is not None else fx
    fisheye = model == "OPENCV_FISHEYE"
    keys = ("k1", "k2", "k3", "k4") if fisheye else ("k1", "k2", "p1", "p2")
    dist = tuple(float(meta.get(k, 0.0)) for k in keys)
    cx = float(meta.get("cx", width / 2.0))
    cy = float(meta.get("cy", height / 2.0))
    return Camera(width, height, float(fx), float(fy), cx, cy, dist, fisheye)


def _focal(meta: dict[str, Any], key: str, angle_key: str, size: int) -> float | None:
    if key in meta:
        return float(meta[key])
    if angle_key in meta:
        return float(
            focal_from_fov(math.degrees(float(meta[angle_key])), size)
        )  # radians in the file
    return None


def _placeholder_camera() -> Camera:
    return Camera(1, 1, 1.0, 1.0, 0.5, 0.5)


def _image_folder(root: Path, images: list[PosedImage]) -> Path:
    folder = images[0].image_path.parent if images else root
    if not folder.is_dir():
        raise FileNotFoundError(
            f"image folder {folder} does not exist; the frames' file_path entries of "
            f"{root} point there"
        )
    return folder
