"""COLMAP sparse models, binary and text: cameras, images (poses) and points3D.

Models written by COLMAP >= 3.12 / pycolmap 4 also hold ``rigs`` and
``frames`` files; their ``images`` files still carry each registered image's
composed camera-from-world pose, so those files are not needed here and are
left unread.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gsnb.data.camera import (
    Camera,
    PosedImage,
    SceneFiles,
    downscaled_folder,
    drop_missing_images,
)
from gsnb.utils.atomic import atomic_write

# COLMAP's model ids (src/colmap/sensor/models.h); gsnb reads those in camera.CAMERA_MODELS.
MODEL_NAMES = {
    0: "SIMPLE_PINHOLE",
    1: "PINHOLE",
    2: "SIMPLE_RADIAL",
    3: "RADIAL",
    4: "OPENCV",
    5: "OPENCV_FISHEYE",
    6: "FULL_OPENCV",
    7: "FOV",
    8: "SIMPLE_RADIAL_FISHEYE",
    9: "RADIAL_FISHEYE",
    10: "THIN_PRISM_FISHEYE",
    11: "RAD_TAN_THIN_PRISM_FISHEYE",
}


@dataclass
class ColmapModel:
    """A COLMAP sparse model as stored: cameras by id, registered images by id, points.

    ``cameras`` maps camera id to ``(model name, width, height, params)``;
    ``images`` maps image id to ``(name, qvec wxyz [4], tvec [3], camera id)``
    with the world-to-camera pose; ``points [P, 3]`` float64 and
    ``points_rgb [P, 3]`` uint8.

    Example:
        >>> m = ColmapModel({1: ("PINHOLE", 4, 3, (2.0, 2.0, 2.0, 1.5))},
        ...                 {1: ("a.png", np.array([1.0, 0, 0, 0]), np.zeros(3), 1)})
        >>> m.viewmat(1).tolist()[0]
        [1.0, 0.0, 0.0, 0.0]
    """

    cameras: dict[int, tuple[str, int, int, tuple[float, ...]]]
    images: dict[int, tuple[str, np.ndarray, np.ndarray, int]]
    points: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    points_rgb: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.uint8))

    def viewmat(self, image_id: int) -> np.ndarray:
        """``[4, 4]`` float64 world-to-camera matrix of an image."""
        name, qvec, tvec, _ = self.images[image_id]
        if not (np.isfinite(qvec).all() and np.isfinite(tvec).all()):
            raise ValueError(f"pose of image {name} holds NaN or Inf; fix or remove that image")
        out = np.eye(4)
        out[:3, :3] = qvec_to_rotation(qvec)
        out[:3, 3] = tvec
        return out

    def camera(self, camera_id: int) -> Camera:
        """The ``Camera`` of a camera id (raises for models gsnb does not read)."""
        model, width, height, params = self.cameras[camera_id]
        return Camera.from_colmap(model, width, height, list(params))


def qvec_to_rotation(qvec: np.ndarray) -> np.ndarray:
    """``[3, 3]`` rotation of a Hamilton quaternion ``(w, x, y, z)`` (normalised first).

    Example:
        >>> qvec_to_rotation(np.array([0.0, 0.0, 0.0, 1.0])).round(6).tolist()[0]
        [-1.0, 0.0, 0.0]
    """
    q = np.asarray(qvec, dtype=np.float64)
    norm = np.linalg.norm(q)
    if not np.isfinite(norm) or norm < 1e-12:
        raise ValueError(f"quaternion {q.tolist()} is zero or not finite")
    w, x, y, z = q / norm
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def find_colmap_model(root: Path) -> Path | None:
    """The folder holding ``cameras.bin``/``cameras.txt`` (``sparse/0``, ``sparse`` or ``root``).

    Example:
        >>> find_colmap_model(Path("/nonexistent")) is None
        True
    """
    for folder in (root / "sparse" / "0", root / "sparse", root):
        if (folder / "cameras.bin").is_file() or (folder / "cameras.txt").is_file():
            return folder
    return None


def read_colmap_model(folder: str | Path) -> ColmapModel:
    """Read ``cameras``, ``images`` and (if present) ``points3D`` from ``folder``; binary first.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> write_colmap_text(ColmapModel({1: ("SIMPLE_PINHOLE", 4, 3, (2.0, 2.0, 1.5))}, {}), d)
        >>> read_colmap_model(d).cameras[1][0]
        'SIMPLE_PINHOLE'
    """
    folder = Path(folder)
    if (folder / "cameras.bin").is_file():
        readers = (_read_cameras_bin, _read_images_bin, _read_points_bin)
        names = ("cameras.bin", "images.bin", "points3D.bin")
    elif (folder / "cameras.txt").is_file():
        readers = (_read_cameras_txt, _read_images_txt, _read_points_txt)
        names = ("cameras.txt", "images.txt", "points3D.txt")
    else:
        raise FileNotFoundError(f"no cameras.bin or cameras.txt in {folder}")
    cameras = readers[0](folder / names[0])
    if not (folder / names[1]).is_file():
        raise FileNotFoundError(f"{folder / names[1]} is missing; the COLMAP model is incomplete")
    images = readers[1](folder / names[1])
    model = ColmapModel(cameras, images)
    if (folder / names[2]).is_file():
        model.points, model.points_rgb = readers[2](folder / names[2])
    return model


def read_colmap_scene(root: Path, model_dir: Path, downscale: int = 1) -> SceneFiles:
    """A COLMAP dataset: the model in ``model_dir`` and photos in ``root/images``.

    With ``downscale = N > 1`` and an ``images_N/`` folder holding every image,
    the photos come from there (``SceneFiles.downscaled`` says so). Points are
    None when the model has no ``points3D`` file (random points are used then);
    an empty ``points3D`` file is an error.
    """
    image_dir = root / "images"
    smaller = downscaled_folder(image_dir, downscale)
    if smaller != image_dir and not image_dir.is_dir():
        image_dir = smaller
    if not image_dir.is_dir():
        raise FileNotFoundError(
            f"image folder {image_dir} does not exist; a COLMAP dataset keeps its photos in "
            "images/ beside sparse/"
        )
    model = read_colmap_model(model_dir)
    for image_id, (name, _, _, camera_id) in model.images.items():
        if camera_id not in model.cameras:
            raise ValueError(
                f"image {name} (id {image_id}) uses camera {camera_id}, not in the model"
            )
    posed = [
        PosedImage(name, image_dir / name, model.camera(cam_id), model.viewmat(image_id))
        for image_id, (name, _, _, cam_id) in model.images.items()
    ]
    if smaller != image_dir and all((smaller / im.name).is_file() for im in posed):
        posed = [PosedImage(im.name, smaller / im.name, im.camera, im.viewmat) for im in posed]
        image_dir, downscaled = smaller, downscale
    else:
        downscaled = downscale if image_dir == smaller and smaller.name != "images" else 1
    posed = drop_missing_images(posed, image_dir)
    has_points = any((model_dir / f"points3D.{ext}").is_file() for ext in ("bin", "txt"))
    if not has_points:
        return SceneFiles(root, posed, downscaled=downscaled)
    return SceneFiles(root, posed, model.points, model.points_rgb / 255.0, downscaled=downscaled)


def write_colmap_text(model: ColmapModel, folder: str | Path) -> None:
    """Write ``cameras.txt``, ``images.txt`` and ``points3D.txt`` (no 2D points or tracks).

    Example:
        >>> import tempfile
        >>> write_colmap_text(ColmapModel({}, {}), tempfile.mkdtemp())
    """
    folder = Path(folder)
    with atomic_write(folder / "cameras.txt", "w") as f:
        f.write("# CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]\n")
        for cid, (name, w, h, params) in model.cameras.items():
            f.write(" ".join([str(cid), name, str(w), str(h), *(repr(float(p)) for p in params)]))
            f.write("\n")
    with atomic_write(folder / "images.txt", "w") as f:
        f.write("# IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME\n# POINTS2D[]\n")
        for iid, (name, qvec, tvec, cid) in model.images.items():
            pose = " ".join(repr(float(v)) for v in (*qvec, *tvec))
            f.write(f"{iid} {pose} {cid} {name}\n\n")
    with atomic_write(folder / "points3D.txt", "w") as f:
        f.write("# POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[]\n")
        for i, (xyz, rgb) in enumerate(zip(model.points, model.points_rgb, strict=True)):
            coords = " ".join(repr(float(v)) for v in xyz)
            f.write(f"{i + 1} {coords} {' '.join(str(int(c)) for c in rgb)} 0\n")


class _BinaryFile:
    """Little-endian reads over a file's bytes that check every count against the bytes left."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = path.read_bytes()
        self.pos = 0

    def fail(self, what: str) -> ValueError:
        return ValueError(
            f"{self.path} is truncated or corrupt ({what} at byte {self.pos} of "
            f"{len(self.data)}); re-export the model (colmap model_converter)"
        )

    def read(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise self.fail(f"needs {size} more bytes")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values

    def count(self, record_bytes: int, what: str) -> int:
        """A uint64 record count, refused if its records cannot fit in the rest of the file."""
        (n,) = self.read("<Q")
        if n * record_bytes > len(self.data) - self.pos:
            raise self.fail(f"claims {n} {what} of at least {record_bytes} bytes each")
        return n

    def skip(self, nbytes: int) -> None:
        if self.pos + nbytes > len(self.data):
            raise self.fail(f"needs {nbytes} more bytes")
        self.pos += nbytes

    def string(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise self.fail("unterminated image name")
        text = self.data[self.pos : end].decode("utf-8", errors="replace")
        self.pos = end + 1
        return text

    def finish(self) -> None:
        if self.pos != len(self.data):
            raise self.fail(f"{len(self.data) - self.pos} unexpected bytes after the last record")


def _num_params(model: str) -> int:
    from gsnb.data.camera import CAMERA_MODELS

    if model not in CAMERA_MODELS:
        raise ValueError(
            f"camera model {model} is not supported; gsnb reads {', '.join(CAMERA_MODELS)}. "
            "Run COLMAP's image_undistorter to get PINHOLE cameras."
        )
    return len(CAMERA_MODELS[model])


def _read_cameras_bin(path: Path) -> dict[int, tuple[str, int, int, tuple[float, ...]]]:
    f = _BinaryFile(path)
    cameras = {}
    for _ in range(f.count(24, "cameras")):
        camera_id, model_id, width, height = f.read("<IiQQ")
        if model_id not in MODEL_NAMES:
            raise ValueError(f"{path}: camera {camera_id} has unknown camera model id {model_id}")
        model = MODEL_NAMES[model_id]
        cameras[camera_id] = (model, width, height, f.read(f"<{_num_params(model)}d"))
    f.finish()
    return cameras


def _read_images_bin(path: Path) -> dict[int, tuple[str, np.ndarray, np.ndarray, int]]:
    f = _BinaryFile(path)
    images = {}
    for _ in range(f.count(69, "images")):  # 4 + 56 + 4 + name (>= 1) + 8
        image_id, *pose, camera_id = f.read("<I7dI")
        name = f.string()
        f.skip(24 * f.count(24, "2D points"))
        images[image_id] = (name, np.array(pose[:4]), np.array(pose[4:]), camera_id)
    f.finish()
    return images


def _read_points_bin(path: Path) -> tuple[np.ndarray, np.ndarray]:
    f = _BinaryFile(path)
    n = f.count(51, "points")  # 8 + 24 + 3 + 8 + 8
    xyz = np.empty((n, 3))
    rgb = np.empty((n, 3), dtype=np.uint8)
    for i in range(n):
        _, x, y, z, r, g, b, _ = f.read("<Q3d3Bd")
        xyz[i] = (x, y, z)
        rgb[i] = (r, g, b)
        f.skip(8 * f.count(8, "track elements"))
    f.finish()
    return xyz, rgb


def _data_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of non-comment lines; blank ones kept (images.txt needs them)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.startswith("#"):
                yield number, line.rstrip("\r\n")


def _parse_text(
    path: Path,
    usage: str,
    parse: Callable[[list[str]], Any],
    *,
    maxsplit: int = -1,
    lines_per_record: int = 1,
) -> Iterator[Any]:
    """``parse(tokens)`` of every record of a text model file; errors name the line."""
    lines = _data_lines(path)
    for number, line in lines:
        tokens = line.split(maxsplit=maxsplit)
        if not tokens:
            continue
        try:
            yield parse(tokens)
        except (ValueError, IndexError) as err:
            what = f"expected {usage}" if isinstance(err, IndexError) else str(err)
            raise ValueError(
                f"{path}, line {number}: {what}; the COLMAP text model is malformed"
            ) from err
        for _ in range(lines_per_record - 1):
            next(lines, None)  # an image's 2D points line


def _camera_record(tokens: list[str]) -> tuple[int, tuple[str, int, int, tuple[float, ...]]]:
    if len(tokens) < 4:
        raise IndexError("too few values")
    n = _num_params(tokens[1])
    if len(tokens) != 4 + n:
        raise ValueError(f"{tokens[1]} takes {n} parameters, got {len(tokens) - 4}")
    params = tuple(float(t) for t in tokens[4:])
    return int(tokens[0]), (tokens[1], int(tokens[2]), int(tokens[3]), params)


def _image_record(tokens: list[str]) -> tuple[int, tuple[str, np.ndarray, np.ndarray, int]]:
    pose = np.array([float(t) for t in tokens[1:8]])
    return int(tokens[0]), (tokens[9].strip(), pose[:4], pose[4:], int(tokens[8]))


def _read_cameras_txt(path: Path) -> dict[int, tuple[str, int, int, tuple[float, ...]]]:
    return dict(_parse_text(path, "CAMERA_ID MODEL WIDTH HEIGHT PARAMS[]", _camera_record))


def _read_images_txt(path: Path) -> dict[int, tuple[str, np.ndarray, np.ndarray, int]]:
    usage = "IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME"
    return dict(_parse_text(path, usage, _image_record, maxsplit=9, lines_per_record=2))


def _point_record(tokens: list[str]) -> list[float]:
    if len(tokens) < 8:
        raise IndexError("too few values")
    return [float(v) for v in tokens[1:7]]


def _read_points_txt(path: Path) -> tuple[np.ndarray, np.ndarray]:
    rows = list(_parse_text(path, "POINT3D_ID X Y Z R G B ERROR TRACK[]", _point_record))
    table = np.array(rows, dtype=np.float64).reshape(-1, 6)
    return table[:, :3], np.clip(table[:, 3:], 0, 255).astype(np.uint8)
