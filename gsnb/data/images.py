"""Image loading: EXIF orientation, RGBA compositing, undistortion, downscaling, disk cache."""

from __future__ import annotations

import functools
import hashlib
import json
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from gsnb.data.camera import Camera
from gsnb.utils.atomic import atomic_write

# Bump when the pipeline's output changes, so old cache files are not reused.
CACHE_VERSION = 2
# Points along each image edge whose undistortion bounds a fisheye's pinhole view.
_EDGE_SAMPLES = 256
# EXIF orientations 5..8 rotate by 90 degrees, swapping width and height.
_SWAPPING_ORIENTATIONS = {5, 6, 7, 8}
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")


def _open(path: Path) -> Image.Image:
    if not path.is_file():
        raise FileNotFoundError(f"image {path} does not exist; check the dataset's image folder")
    try:
        img = Image.open(path)
        img.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise ValueError(
            f"cannot decode image {path} ({err}); the file is corrupt or not an image: "
            "re-export it or remove it from the dataset"
        ) from err
    return img


def _header(path: str | Path) -> tuple[tuple[int, int], bool]:
    """``((width, height) with EXIF orientation applied, has alpha)`` from an image's header."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image {path} does not exist; check the dataset's image folder")
    try:
        with Image.open(path) as img:
            (w, h), mode, info = img.size, img.mode, img.info
            orientation = img.getexif().get(0x0112, 1)
    except (UnidentifiedImageError, OSError, SyntaxError) as err:
        raise ValueError(f"cannot read the header of image {path} ({err}); it is corrupt") from err
    size = (h, w) if orientation in _SWAPPING_ORIENTATIONS else (w, h)
    return size, mode in _ALPHA_MODES or "transparency" in info


def stored_size(path: str | Path) -> tuple[int, int]:
    """``(width, height)`` of an image as stored (EXIF orientation ignored), from its header.

    Example:
        >>> import tempfile, pathlib
        >>> from PIL import Image
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.png"
        >>> Image.new("RGB", (4, 3)).save(p)
        >>> stored_size(p)
        (4, 3)
    """
    _header(path)  # its errors name a missing or corrupt file
    with Image.open(path) as img:
        return img.size


def image_size(path: str | Path) -> tuple[int, int]:
    """``(width, height)`` of an image as displayed (EXIF orientation applied), from its header.

    Example:
        >>> import tempfile, pathlib
        >>> from PIL import Image
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.png"
        >>> Image.new("RGB", (4, 3)).save(p)
        >>> image_size(p)
        (4, 3)
    """
    return _header(path)[0]


def image_has_alpha(path: str | Path) -> bool:
    """Whether an image has an alpha channel (or a transparent palette entry), from its header.

    Example:
        >>> import tempfile, pathlib
        >>> from PIL import Image
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.png"
        >>> Image.new("RGBA", (4, 3)).save(p)
        >>> image_has_alpha(p)
        True
    """
    return _header(path)[1]


def read_image(path: str | Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """Decode an image to ``[H, W, C]`` float32 in [0, 1], ``C`` = 3 (RGB) or 4 (RGBA).

    EXIF orientation is applied; ``size`` works as in ``decode_image``.

    Example:
        >>> import tempfile, pathlib
        >>> from PIL import Image
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.png"
        >>> Image.new("RGBA", (4, 3), (255, 0, 0, 128)).save(p)
        >>> im = read_image(p)
        >>> im.shape, float(im[0, 0, 3].round(2))
        ((3, 4, 4), 0.5)
    """
    return _as_float(decode_image(path, size))


def decode_image(path: str | Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """Decode an image to ``[H, W, C]``: uint8 for 8-bit files, float32 in [0, 1] for 16-bit.

    EXIF orientation is applied. If ``size = (width, height)`` is given and only
    the file's stored (un-rotated) size matches it, the orientation tag is
    ignored: the poses were computed on the stored pixels.

    Example:
        >>> import tempfile, pathlib
        >>> from PIL import Image
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.png"
        >>> Image.new("RGB", (4, 3), (255, 0, 0)).save(p)
        >>> im = decode_image(p)
        >>> im.shape, im.dtype.name, im[0, 0].tolist()
        ((3, 4, 3), 'uint8', [255, 0, 0])
    """
    path = Path(path)
    img = _open(path)
    upright = ImageOps.exif_transpose(img)
    if size is not None and upright.size != tuple(size):
        if img.size != tuple(size):
            raise ValueError(
                f"image {path} is {upright.size[0]}x{upright.size[1]} but its camera says "
                f"{size[0]}x{size[1]}; the images do not belong to these cameras"
            )
        upright = img
    if upright.mode in ("I;16", "I;16B", "I;16L", "I"):
        gray = np.asarray(upright, dtype=np.float32) / 65535.0
        return np.repeat(gray[..., None], 3, axis=2).clip(0.0, 1.0)
    has_alpha = upright.mode in _ALPHA_MODES or "transparency" in upright.info
    mode = "RGBA" if has_alpha else "RGB"
    return np.asarray(upright if upright.mode == mode else upright.convert(mode))


def _as_float(image: np.ndarray) -> np.ndarray:
    if image.dtype == np.uint8:
        # Division, not a product with 1/255: the same values as torch's bytes_to_float.
        return image.astype(np.float32) / np.float32(255.0)
    return image.astype(np.float32)


def composite(image: np.ndarray, background: tuple[float, float, float]) -> np.ndarray:
    """``[H, W, 3]`` RGB: an RGBA ``image`` laid over a constant ``background``; RGB passes through.

    Example:
        >>> import numpy as np
        >>> composite(np.array([[[1.0, 0.0, 0.0, 0.5]]]), (0.0, 0.0, 1.0)).tolist()
        [[[0.5, 0.0, 0.5]]]
    """
    if image.shape[-1] == 3:
        return image
    rgb, alpha = image[..., :3], image[..., 3:4]
    return rgb * alpha + np.asarray(background, dtype=image.dtype) * (1.0 - alpha)


def scaled_size(width: int, height: int, factor: int) -> tuple[int, int]:
    """Image size after downscaling by ``factor`` (rounded, at least 1 pixel).

    Example:
        >>> scaled_size(1080, 1920, 8)
        (135, 240)
    """
    if factor < 1:
        raise ValueError(f"downscale factor must be an integer >= 1, got {factor}")
    return max(1, round(width / factor)), max(1, round(height / factor))


@dataclass(frozen=True)
class ImagePipeline:
    """How one camera's photos become training images: undistort, downscale, composite, cache.

    ``camera`` describes the original files. ``K``, ``width`` and ``height`` are
    the pinhole intrinsics and size of the output. Distorted cameras are
    undistorted at full resolution with OpenCV (``getOptimalNewCameraMatrix``
    with ``alpha=0``, so every output pixel sees the scene), then images are
    area-averaged down by ``downscale``. Results are cached as PNG under
    ``cache_dir`` (when given), keyed by file, camera, factor and background.

    Example:
        >>> pipe = ImagePipeline(Camera(64, 48, 50.0, 50.0, 32.0, 24.0), downscale=2)
        >>> pipe.width, pipe.height, pipe.K[0].tolist()
        (32, 24, [25.0, 0.0, 16.0])
    """

    camera: Camera
    downscale: int = 1
    background: tuple[float, float, float] = (0.0, 0.0, 0.0)
    cache_dir: Path | None = None

    @cached_property
    def _undistorted_K(self) -> np.ndarray:
        """``[3, 3]`` pinhole matrix of the undistorted full-resolution image."""
        cam = self.camera
        if not cam.is_distorted:
            return cam.K
        if cam.fisheye:
            return _fisheye_pinhole_K(cam)
        # OpenCV puts pixel centres at integers, gsnb at i + 0.5: shift in and out.
        new_k, _ = cv2.getOptimalNewCameraMatrix(
            _to_opencv(cam.K), np.asarray(cam.distortion), (cam.width, cam.height), 0.0
        )
        return _from_opencv(new_k)

    @property
    def width(self) -> int:
        """Output width in pixels."""
        return scaled_size(self.camera.width, self.camera.height, self.downscale)[0]

    @property
    def height(self) -> int:
        """Output height in pixels."""
        return scaled_size(self.camera.width, self.camera.height, self.downscale)[1]

    @property
    def K(self) -> np.ndarray:
        """``[3, 3]`` float64 pinhole intrinsics of the output images."""
        k = self._undistorted_K
        cam = self.camera
        # An undistorted view is a two-focal pinhole (as COLMAP's undistorter writes).
        pinhole = Camera(
            cam.width,
            cam.height,
            float(k[0, 0]),
            float(k[1, 1]),
            float(k[0, 2]),
            float(k[1, 2]),
            single_focal=cam.single_focal and not cam.is_distorted,
        )
        return pinhole.rescaled(self.width, self.height).K

    @property
    def changes_pixels(self) -> bool:
        """Whether output pixels differ from the file's (then results are worth caching)."""
        return self.downscale > 1 or self.camera.is_distorted

    def cache_path(self, path: Path) -> Path | None:
        """Where the processed ``path`` is cached, or None without a cache."""
        if self.cache_dir is None or not self.changes_pixels:
            return None
        stat = path.stat()
        key = json.dumps(
            [
                CACHE_VERSION,
                str(path.resolve()),
                stat.st_size,
                stat.st_mtime_ns,
                # A file replaced under the same name, size and time (cp -p, rsync -a) is a
                # new inode, and its change time cannot be set back.
                stat.st_ino,
                stat.st_ctime_ns,
                self.camera.__dict__,
                self.downscale,
                list(self.background),
            ],
            sort_keys=True,
            default=str,
        )
        digest = hashlib.sha1(key.encode()).hexdigest()[:16]
        return self.cache_dir / f"{path.stem}-{digest}.png"

    def load(self, path: str | Path) -> np.ndarray:
        """``[height, width, 3]`` float32 in [0, 1]: the processed image (cached when possible).

        The values are :meth:`load_bytes`'s divided by 255.
        """
        return _as_float(self.load_bytes(path))

    def load_bytes(self, path: str | Path) -> np.ndarray:
        """``[height, width, 3]`` uint8: the processed image (cached when possible)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"image {path} does not exist; check the dataset's image folder"
            )
        cached = self.cache_path(path)
        if cached is not None and cached.is_file():
            try:
                with Image.open(cached) as img:
                    arr = np.array(img.convert("RGB"))
                if arr.shape[:2] == (self.height, self.width):
                    return arr
            except (OSError, SyntaxError, ValueError):
                pass  # an unreadable cache entry is rebuilt below
        native = self._process_native(decode_image(path, (self.camera.width, self.camera.height)))
        image = np.array(native) if native.dtype == np.uint8 else _to_uint8(native)
        if cached is not None:
            try:
                cached.parent.mkdir(parents=True, exist_ok=True)
                with atomic_write(cached) as handle:
                    Image.fromarray(image).save(handle, format="PNG", compress_level=1)
            except OSError as err:
                _warn_cache_unwritable(cached.parent, err)
        return image

    def process(self, image: np.ndarray) -> np.ndarray:
        """Composite, undistort and downscale a decoded ``[H, W, C]`` image of this camera.

        ``image`` is uint8 or float in [0, 1]; the result is ``[height, width, 3]``
        float32 in [0, 1]. 8-bit RGB stays 8-bit until the end, which is faster.
        """
        return np.ascontiguousarray(_as_float(self._process_native(image)).clip(0.0, 1.0))

    def _process_native(self, image: np.ndarray) -> np.ndarray:
        """:meth:`process` without the final conversion: 8-bit RGB stays uint8."""
        keep_bytes = image.dtype == np.uint8 and image.shape[-1] == 3
        rgb = image if keep_bytes else composite(_as_float(image), self.background)
        cam = self.camera
        if cam.is_distorted:
            map_xy, map_frac = _undistortion_maps(cam, tuple(self._undistorted_K.ravel()))
            rgb = cv2.remap(
                rgb, map_xy, map_frac, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
            )
        if (self.width, self.height) != (cam.width, cam.height):
            rgb = cv2.resize(rgb, (self.width, self.height), interpolation=cv2.INTER_AREA)
        return rgb


_UNWRITABLE_CACHES: set[Path] = set()


def _warn_cache_unwritable(folder: Path, err: OSError) -> None:
    """One warning per folder: images are processed again next time, training goes on."""
    if folder in _UNWRITABLE_CACHES:
        return
    _UNWRITABLE_CACHES.add(folder)
    warnings.warn(
        f"cannot write the image cache in {folder} ({err.strerror or err}); images are not "
        "cached. Choose a writable folder with --cache-dir",
        ResourceWarning,
        stacklevel=4,
    )


def _fisheye_pinhole_K(camera: Camera) -> np.ndarray:
    """``[3, 3]`` widest pinhole view of the fisheye ``camera``'s size that sees only valid pixels.

    The pinhole keeps the fisheye's principal point and focal aspect; its focal
    length is the shortest (bisected) whose image edges, seen through the
    fisheye lens, stay inside the fisheye image. Rays of 90 degrees or more,
    which no pinhole sees, never enter.
    """
    w, h = camera.width, camera.height
    t = np.linspace(0.0, 1.0, _EDGE_SAMPLES)
    edges = np.concatenate(
        [
            np.stack([np.zeros_like(t), t * h], 1),
            np.stack([np.full_like(t, w), t * h], 1),
            np.stack([t * w, np.zeros_like(t)], 1),
            np.stack([t * w, np.full_like(t, h)], 1),
        ]
    )
    k, d = _to_opencv(camera.K), np.asarray(camera.distortion, dtype=np.float64)

    def fits(scale: float) -> bool:
        rays = np.ones((len(edges), 3))
        rays[:, 0] = (edges[:, 0] - camera.cx) / (camera.fx * scale)
        rays[:, 1] = (edges[:, 1] - camera.cy) / (camera.fy * scale)
        seen, _ = cv2.fisheye.projectPoints(rays[:, None], np.zeros(3), np.zeros(3), k, d)
        px = seen[:, 0] + 0.5  # back to gsnb's pixel coordinates
        inside = (px[:, 0] >= -1e-6) & (px[:, 0] <= w + 1e-6)
        inside &= (px[:, 1] >= -1e-6) & (px[:, 1] <= h + 1e-6)
        return bool(np.isfinite(px).all() and inside.all())

    low, high = 1e-3, 1.0
    while not fits(high):  # a lens that magnifies at the edges needs a longer focal
        low, high = high, high * 2
        if high > 1e3:
            raise ValueError(f"the fisheye camera {camera} has no valid pinhole view")
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (low, mid) if fits(mid) else (mid, high)
    scale = high
    return np.array(
        [[camera.fx * scale, 0.0, camera.cx], [0.0, camera.fy * scale, camera.cy], [0.0, 0.0, 1.0]]
    )


@functools.lru_cache(maxsize=2)  # photos of one camera share maps; two bound the memory
def _undistortion_maps(camera: Camera, new_k: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """OpenCV's fixed-point (1/32 px) remap tables from ``camera`` to the pinhole ``new_k``."""
    if camera.fisheye:
        return cv2.fisheye.initUndistortRectifyMap(
            _to_opencv(camera.K),
            np.asarray(camera.distortion, dtype=np.float64),
            np.eye(3),
            _to_opencv(np.asarray(new_k).reshape(3, 3)),
            (camera.width, camera.height),
            cv2.CV_16SC2,
        )
    return cv2.initUndistortRectifyMap(
        _to_opencv(camera.K),
        np.asarray(camera.distortion),
        None,
        _to_opencv(np.asarray(new_k).reshape(3, 3)),
        (camera.width, camera.height),
        cv2.CV_16SC2,
    )


def _to_opencv(k: np.ndarray) -> np.ndarray:
    out = np.array(k, dtype=np.float64)
    out[:2, 2] -= 0.5
    return out


def _from_opencv(k: np.ndarray) -> np.ndarray:
    out = np.array(k, dtype=np.float64)
    out[:2, 2] += 0.5
    return out


def _to_uint8(image: np.ndarray) -> np.ndarray:
    return (image.clip(0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
