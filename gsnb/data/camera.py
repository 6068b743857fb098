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
}


@dataclass(frozen=True)
class Camera:
    """Pinhole intrinsics and OpenCV distortion ``(k1, k2, p1, p2)`` of ``width x height`` images.

    Pixel centres sit at ``i + 0.5`` (COLMAP and OpenCV ``cx`` of a centred
    camera is ``width / 2``).

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
    distortion: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        values = (self.fx, self.fy, self.cx, self.cy, *self.distortion)
        if not all(np.isfinite(values)):
            raise ValueError(f"camera intrinsics hold NaN or Inf: {values}; fix the camera file")
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
        dist = (p.get("k1", 0.0), p.get("k2", 0.0), p.get("p1", 0.0), p.get("p2", 0.0))
        return cls(int(width), int(height), fx, fy, p["cx"], p["cy"], dist)  # type: ignore[arg-type]

    @property
    def K(self) -> np.ndarray:
        """``[3, 3]`` float64 pinhole matrix."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    @property
    def is_distorted(self) -> bool:
        """Whether any distortion coefficient is non-zero."""
        return any(d != 0.0 for d in self.distortion)


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
    (NeRF-synthetic's ``transforms_test.json``).

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
