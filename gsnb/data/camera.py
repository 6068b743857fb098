"""``Camera`` (intrinsics), ``PosedImage`` (a photo with its pose): what readers find on disk."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# COLMAP camera models gsnb reads -> the names of their parameters, in COLMAP's order.
CAMERA_MODELS: dict[str, tuple[str, ...]] = {
    "SIMPLE_PINHOLE": ("f", "cx", "cy"),
    "PINHOLE": ("fx", "fy", "cx", "cy"),
    "SIMPLE_RADIAL": ("f", "cx", "cy", "k1"),
    "RADIAL": ("f", "cx", "cy", "k1", "k2"),
    "OPENCV": ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2"),
    "FULL_OPENCV": ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6"),
    "OPENCV_FISHEYE": ("fx", "fy", "cx", "cy", "k1", "k2", "k3", "k4"),
    "SIMPLE_RADIAL_FISHEYE": ("f", "cx", "cy", "k1"),
    "RADIAL_FISHEYE": ("f", "cx", "cy", "k1", "k2"),
}
# Lenses of OpenCV's fisheye model: theta_d = theta (1 + k1 theta^2 + ... + k4 theta^8).
FISHEYE_MODELS = ("OPENCV_FISHEYE", "SIMPLE_RADIAL_FISHEYE", "RADIAL_FISHEYE")
# Images may be this many pixels off their camera's size scaled by one factor (rounding).
SIZE_ROUNDING = 1.0


@dataclass(frozen=True)
class Camera:
    """Pinhole intrinsics and OpenCV distortion of ``width x height`` images.

    ``distortion`` is in OpenCV's order: ``(k1, k2, p1, p2)`` or ``(k1, k2, p1,
    p2, k3, k4, k5, k6)`` for a perspective lens, ``(k1, k2, k3, k4)`` of
    OpenCV's fisheye model when ``fisheye``. ``single_focal`` marks the COLMAP
    models with one focal length (rescaling then scales it by the mean of the
    two ratios, as COLMAP does). Pixel centres sit at ``i + 0.5`` (COLMAP and
    OpenCV ``cx`` of a centred camera is ``width / 2``).

    Example:
        >>> cam = Camera.from_colmap("SIMPLE_RADIAL", 640, 480, [500.0, 320.0, 240.0, 0.01])
        >>> cam.fx, cam.fy, cam.distortion, cam.is_distorted
        (500.0, 500.0, (0.01, 0.0, 0.0, 0.0), True)
    """

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)
    fisheye: bool = False
    single_focal: bool = False

    def __post_init__(self) -> None:
        values = (self.fx, self.fy, self.cx, self.cy, *self.distortion)
        if not all(np.isfinite(values)):
            raise ValueError(f"camera intrinsics hold NaN or Inf: {values}; fix the camera file")
        counts = (4,) if self.fisheye else (4, 5, 8)
        if len(self.distortion) not in counts:
            raise ValueError(
                f"a {'fisheye' if self.fisheye else 'perspective'} camera takes "
                f"{' or '.join(map(str, counts))} distortion coefficients, got "
                f"{len(self.distortion)}"
            )
        if self.width <= 0 or self.height <= 0 or self.fx <= 0 or self.fy <= 0:
            raise ValueError(
                f"camera has size {self.width}x{self.height} and focal ({self.fx}, {self.fy}); "
                "sizes and focal lengths must be positive"
            )

    @classmethod
    def from_colmap(cls, model: str, width: int, height: int, params: list[float]) -> Camera:
        """A camera from a COLMAP model name and its parameter list (see ``CAMERA_MODELS``)."""
        if model not in CAMERA_MODELS:
            raise ValueError(
                f"camera model {model!r} is not supported; gsnb reads {', '.join(CAMERA_MODELS)}. "
                "Run COLMAP's image_undistorter to get PINHOLE cameras."
            )
        names = CAMERA_MODELS[model]
        if len(params) != len(names):
            raise ValueError(
                f"camera model {model} takes {len(names)} parameters, got {len(params)}"
            )
        p = dict(zip(names, (float(v) for v in params), strict=True))
        fx = p.get("fx", p.get("f"))
        fy = p.get("fy", p.get("f"))
        fisheye = model in FISHEYE_MODELS
        keys = ("k1", "k2", "k3", "k4") if fisheye else ("k1", "k2", "p1", "p2")
        if model == "FULL_OPENCV":
            keys += ("k3", "k4", "k5", "k6")
        dist = tuple(p.get(k, 0.0) for k in keys)
        return cls(int(width), int(height), fx, fy, p["cx"], p["cy"], dist, fisheye, "f" in p)  # type: ignore[arg-type]

    def rescaled(self, width: int, height: int) -> Camera:
        """This camera for images of ``width x height``, as COLMAP's ``Camera::Rescale``.

        ``cx`` and ``fx`` scale by ``width / self.width``, ``cy`` and ``fy`` by
        ``height / self.height``; a single focal length scales by the mean of the
        two ratios. Distortion (in normalised coordinates) is unchanged.

        Example:
            >>> Camera(64, 48, 50.0, 50.0, 32.0, 24.0).rescaled(32, 24).K[0].tolist()
            [25.0, 0.0, 16.0]
        """
        sx, sy = width / self.width, height / self.height
        fx, fy = self.fx * sx, self.fy * sy
        if self.single_focal:
            fx = fy = self.fx * (sx + sy) / 2.0
        return Camera(
            int(width),
            int(height),
            fx,
            fy,
            self.cx * sx,
            self.cy * sy,
            self.distortion,
            self.fisheye,
            self.single_focal,
        )

    def fitted_to(self, width: int, height: int, where: str) -> Camera:
        """This camera rescaled to images of ``width x height`` smaller or larger by one factor.

        Sizes rounded by a pixel (as downscaling tools round) count as one factor;
        a different factor along each axis raises ``ValueError`` naming both
        sizes and the factors (``where`` names the image).

        Example:
            >>> cam = Camera(3072, 2048, 3000.0, 3000.0, 1536.0, 1024.0)
            >>> cam.fitted_to(768, 512, "a.jpg").fx
            750.0
        """
        if (width, height) == (self.width, self.height):
            return self
        fx_lo, fx_hi = _factor_range(self.width, width)
        fy_lo, fy_hi = _factor_range(self.height, height)
        if max(fx_lo, fy_lo) > min(fx_hi, fy_hi):
            raise ValueError(
                f"image {where} is {width}x{height} but its camera says "
                f"{self.width}x{self.height}: smaller by {self.width / width:.4g} in width and "
                f"{self.height / height:.4g} in height, not one factor; the images do not "
                "belong to these cameras (or were resized without keeping their aspect)"
            )
        return self.rescaled(width, height)

    @property
    def K(self) -> np.ndarray:
        """``[3, 3]`` float64 pinhole matrix."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    @property
    def is_distorted(self) -> bool:
        """Whether images need undistorting: a fisheye lens always does (with every
        coefficient zero it still maps angles, not tangents, to the image), a perspective
        one when a coefficient is non-zero."""
        return self.fisheye or any(d != 0.0 for d in self.distortion)


def _factor_range(camera_size: int, image_size: int) -> tuple[float, float]:
    """The downscale factors that round ``camera_size`` to ``image_size`` (one pixel slack)."""
    low = camera_size / (image_size + SIZE_ROUNDING)
    high = camera_size / max(image_size - SIZE_ROUNDING, 1e-9)
    return low, high


@dataclass(frozen=True)
class PosedImage:
    """One photo as a reader found it: file, intrinsics and world-to-camera pose (OpenCV axes).

    Example:
        >>> import numpy as np
        >>> cam = Camera(64, 48, 50.0, 50.0, 32.0, 24.0)
        >>> img = PosedImage("a.png", Path("a.png"), cam, np.eye(4))
        >>> img.viewmat.shape
        (4, 4)
    """

    name: str
    image_path: Path
    camera: Camera
    viewmat: np.ndarray  # [4, 4] float64 world-to-camera

    def __post_init__(self) -> None:
        m = np.asarray(self.viewmat, dtype=np.float64)
        if m.shape != (4, 4):
            raise ValueError(f"pose of {self.name} has shape {m.shape}; expected (4, 4)")
        if not np.isfinite(m).all():
            raise ValueError(
                f"pose of image {self.name} holds NaN or Inf; fix or remove that image"
            )
        object.__setattr__(self, "viewmat", m)


@dataclass
class SceneFiles:
    """What a format reader found: posed photos, optional points, background and a given test split.

    ``points [P, 3]`` float64 and ``points_rgb [P, 3]`` in [0, 1] are None when the
    format has no points; ``test_names`` is None unless the files fix a split
    (NeRF-synthetic's ``transforms_test.json``). ``downscaled`` is the factor the
    reader already applied by picking a pre-downscaled ``images_N/`` folder.

    Example:
        >>> SceneFiles(Path("."), []).background
        (0.0, 0.0, 0.0)
    """

    root: Path
    images: list[PosedImage]
    points: np.ndarray | None = None
    points_rgb: np.ndarray | None = None
    background: tuple[float, float, float] = (0.0, 0.0, 0.0)
    test_names: set[str] | None = None
    downscaled: int = 1


def downscaled_folder(folder: Path, factor: int) -> Path:
    """``folder`` or, when ``factor > 1`` and it exists, the sibling ``<folder>_<factor>``.

    The 3DGS / Mip-NeRF 360 layout keeps images downscaled by N in ``images_N/``.

    Example:
        >>> downscaled_folder(Path("/nonexistent/images"), 4)
        PosixPath('/nonexistent/images')
    """
    candidate = folder.with_name(f"{folder.name}_{factor}")
    return candidate if factor > 1 and candidate.is_dir() else folder


def drop_missing_images(images: list[PosedImage], image_dir: Path) -> list[PosedImage]:
    """The images whose file exists; one warning counts the others, and none left is an error.

    Example:
        >>> drop_missing_images([], Path("."))
        []
    """
    kept = [im for im in images if im.image_path.is_file()]
    missing = len(images) - len(kept)
    if images and not kept:
        raise FileNotFoundError(
            f"none of the {len(images)} images of the dataset exist (looked for "
            f"{images[0].image_path}, ...); check the image folder {image_dir}"
        )
    if missing:
        warnings.warn(
            f"{missing} of {len(images)} images are missing under {image_dir} and were skipped "
            f"(first: {next(im.name for im in images if not im.image_path.is_file())})",
            stacklevel=3,
        )
    return kept
