"""``load_dataset``: posed photos (COLMAP, transforms.json) as ``View``s, splits, points."""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gsnb.cameras import camera_centres, scale_intrinsics
from gsnb.data.camera import Camera, PosedImage, SceneFiles
from gsnb.data.images import ImagePipeline

# How many random initial points a dataset without points3D gets.
RANDOM_POINTS = 20_000


@dataclass(frozen=True)
class View:
    """One posed photo, already undistorted and downscaled.

    ``K [3, 3]`` float32 pinhole intrinsics and ``viewmat [4, 4]`` float32
    world-to-camera (OpenCV axes: +x right, +y down, +z forward) describe the
    image ``load_image()`` returns (``[height, width, 3]`` float32 in [0, 1],
    RGBA composited over the dataset background). Processed images are cached
    on disk, so ``load_image`` is cheap after its first call.

    Example:
        >>> import torch
        >>> from pathlib import Path
        >>> viewmat = torch.eye(4)
        >>> viewmat[:3, 3] = torch.tensor([-1.0, -2.0, -3.0])
        >>> v = View("a.png", Path("a.png"), 64, 48, torch.eye(3), viewmat)
        >>> v.camera_center.tolist()
        [1.0, 2.0, 3.0]
    """

    name: str
    image_path: Path
    width: int
    height: int
    K: torch.Tensor = field(compare=False)
    viewmat: torch.Tensor = field(compare=False)
    pipeline: ImagePipeline | None = field(default=None, repr=False, compare=False)

    def load_image(self) -> torch.Tensor:
        """``[height, width, 3]`` float32 in [0, 1] on the CPU: :meth:`load_bytes` / 255."""
        return bytes_to_float(self.load_bytes())

    def load_bytes(self) -> torch.Tensor:
        """``[height, width, 3]`` uint8 on the CPU: the processed 8-bit image."""
        pipeline = self.pipeline if self.pipeline is not None else ImagePipeline(_file_camera(self))
        return torch.from_numpy(pipeline.load_bytes(self.image_path))

    @property
    def camera_center(self) -> torch.Tensor:
        """``[3]`` camera position in world space: ``-R^T t``."""
        return camera_centres(self.viewmat)


def bytes_to_float(image: torch.Tensor) -> torch.Tensor:
    """``image`` (uint8, any shape and device) as float32 in [0, 1]: one rounding, ``/ 255``.

    Example:
        >>> bytes_to_float(torch.tensor([0, 51, 255], dtype=torch.uint8)).tolist()
        [0.0, 0.20000000298023224, 1.0]
    """
    return image.to(torch.float32).div_(255.0)


def scaled_view(view: View, width: int) -> View:
    """``view`` resized to ``width`` pixels wide (height and intrinsics scaled alike).

    Example:
        >>> from pathlib import Path
        >>> K = torch.tensor([[100.0, 0, 100], [0, 100, 50], [0, 0, 1]])
        >>> s = scaled_view(View("a", Path("a"), 200, 100, K, torch.eye(4)), 50)
        >>> s.width, s.height, float(s.K[0, 2])
        (50, 25, 25.0)
    """
    width = int(width)
    if width < 1:
        raise ValueError(f"width must be positive, got {width}")
    if width == view.width:
        return view
    scale = width / view.width
    height = max(1, round(view.height * scale))
    K = scale_intrinsics(
        torch.as_tensor(view.K, dtype=torch.float32), (view.width, view.height), (width, height)
    )
    return View(view.name, view.image_path, width, height, K, view.viewmat)


@dataclass
class SceneDataset:
    """Posed views with a train/test split, initial points, scene centre and extent.

    ``views`` are sorted by name; ``test_ids`` are every ``test_every``-th view
    (``i % test_every == 0``, INRIA's convention) and ``train_ids`` the rest.
    ``points [P, 3]`` float32 and ``points_rgb [P, 3]`` in [0, 1] seed the
    Gaussians; ``random_points`` says they were drawn in the cameras' view because the
    capture has none (a transforms.json without a point cloud). ``center [3]`` is the
    mean of the training cameras' centres and ``extent`` 1.1 times their largest distance
    from it (INRIA's radius; every camera counts when none is for training, and a lone
    camera gives 1.0). ``downscale`` and ``test_every`` record how the images were loaded and
    split, so that a run trained on it can be reloaded the same way.

    Example:
        >>> import tempfile
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> root = make_synthetic_scene(tempfile.mkdtemp(), num_views=8, size=32)
        >>> ds = load_dataset(root, test_every=4)
        >>> len(ds.train), len(ds.test), tuple(ds.train[0].load_image().shape)
        (6, 2, (32, 32, 3))
    """

    root: Path
    views: list[View]
    train_ids: list[int]
    test_ids: list[int]
    points: torch.Tensor
    points_rgb: torch.Tensor
    center: torch.Tensor
    extent: float
    background: tuple[float, float, float] = (0.0, 0.0, 0.0)
    random_points: bool = False
    downscale: int = 1
    test_every: int = 8

    @property
    def train(self) -> list[View]:
        """The training views."""
        return [self.views[i] for i in self.train_ids]

    @property
    def test(self) -> list[View]:
        """The held-out views."""
        return [self.views[i] for i in self.test_ids]

    def __repr__(self) -> str:
        return (
            f"SceneDataset({str(self.root)!r}, {len(self.views)} views "
            f"({len(self.train_ids)} train, {len(self.test_ids)} test), "
            f"{self.points.shape[0]} points, extent {self.extent:.3g})"
        )


def load_dataset(
    path: str | Path,
    *,
    downscale: int = 1,
    test_every: int = 8,
    cache_dir: Path | None = None,
) -> SceneDataset:
    """Read a COLMAP model or a ``transforms.json`` dataset under ``path``.

    COLMAP is found as ``sparse/0/`` or ``sparse/`` holding ``cameras.bin`` or
    ``cameras.txt`` (images under ``images/``); otherwise ``transforms.json``
    (instant-ngp, NeRF-synthetic), or NeRF-synthetic's ``transforms_train.json``
    with ``transforms_test.json`` (whose frames then form the test split).
    ``path`` may also name a ``transforms*.json`` file.

    Images are downscaled by the integer ``downscale`` and undistorted if their
    camera is distorted; an ``images_N/`` folder (3DGS / Mip-NeRF 360 layout)
    serves ``downscale = N`` as it is. Images smaller than their camera by one
    factor (pre-downscaled captures) get the camera rescaled as COLMAP does. The
    processed images are cached under ``cache_dir`` (default: a folder of the
    user cache directory, ``$XDG_CACHE_HOME/gsnb/images`` or
    ``~/.cache/gsnb/images``, named after the dataset's resolved path; the dataset
    folder is never written, so read-only datasets are fine).
    ``test_every = 0`` puts every view in the training set.

    Example:
        >>> import tempfile
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> ds = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=4, size=16))
        >>> len(ds.views), ds.test_ids
        (4, [0])
    """
    root = Path(path).expanduser()
    if not root.exists():
        raise FileNotFoundError(f"dataset {root} does not exist")
    if isinstance(downscale, bool) or not isinstance(downscale, int) or downscale < 1:
        raise ValueError(f"downscale must be an integer >= 1, got {downscale!r}")
    if test_every < 0:
        raise ValueError(f"test_every must be >= 0, got {test_every}")
    files = _read_files(root, downscale)
    folder = root if root.is_dir() else root.parent
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir(folder)
    remaining = downscale // files.downscaled if downscale % files.downscaled == 0 else downscale
    return build_dataset(files, downscale=remaining, test_every=test_every, cache_dir=cache)


def build_dataset(
    files: SceneFiles, *, downscale: int = 1, test_every: int = 8, cache_dir: Path | None = None
) -> SceneDataset:
    """A ``SceneDataset`` from what a reader found, or from posed images made in memory.

    Example:
        >>> import numpy as np
        >>> from gsnb.data.camera import Camera, PosedImage
        >>> cam = Camera(32, 24, 30.0, 30.0, 16.0, 12.0)
        >>> poses = [np.eye(4), np.eye(4)]
        >>> poses[1][0, 3] = -1.0  # the second camera sits at x = 1
        >>> images = [PosedImage(f"{i}.png", Path(f"{i}.png"), cam, m) for i, m in enumerate(poses)]
        >>> ds = build_dataset(SceneFiles(Path("."), images), test_every=0)
        >>> ds.center.tolist(), round(ds.extent, 2), tuple(ds.points.shape)
        ([0.5, 0.0, 0.0], 0.55, (20000, 3))
    """
    from gsnb.data.points import check_points, random_frustum_points

    if not files.images:
        raise ValueError(f"dataset {files.root} has no images; nothing to train on")
    images = sorted((_fit_camera(im) for im in files.images), key=lambda im: im.name)
    pipelines: dict[Camera, ImagePipeline] = {}
    views = []
    for im in images:
        if im.camera not in pipelines:
            pipelines[im.camera] = ImagePipeline(im.camera, downscale, files.background, cache_dir)
        pipe = pipelines[im.camera]
        views.append(
            View(
                name=im.name,
                image_path=im.image_path,
                width=pipe.width,
                height=pipe.height,
                K=torch.tensor(pipe.K, dtype=torch.float32),
                viewmat=torch.tensor(im.viewmat, dtype=torch.float32),
                pipeline=pipe,
            )
        )
    test_ids = _test_ids([v.name for v in views], test_every, files.test_names)
    held_out = set(test_ids)
    train_ids = [i for i in range(len(views)) if i not in held_out]
    centers = np.stack([camera_centres(im.viewmat) for im in images])
    fit = centers[train_ids] if train_ids else centers
    center = fit.mean(axis=0)
    radius = float(np.linalg.norm(fit - center, axis=1).max()) * 1.1
    extent = radius if radius > 1e-8 else 1.0  # one camera: no spread to measure
    if files.points is None:
        points, rgb = random_frustum_points(
            [views[i] for i in train_ids or range(len(views))], center, extent, RANDOM_POINTS
        )
    else:
        points, rgb = files.points, files.points_rgb
    points, rgb = check_points(points, rgb, source=str(files.root))
    return SceneDataset(
        root=files.root,
        views=views,
        train_ids=train_ids,
        test_ids=test_ids,
        points=torch.tensor(points, dtype=torch.float32),
        points_rgb=torch.tensor(rgb, dtype=torch.float32),
        center=torch.tensor(center, dtype=torch.float32),
        extent=extent,
        background=files.background,
        random_points=files.points is None,
        downscale=downscale,
        test_every=test_every,
    )


def _fit_camera(image: PosedImage) -> PosedImage:
    """``image`` with its camera rescaled to the file's size (pre-downscaled photos)."""
    from gsnb.data.images import image_size, stored_size

    cam = image.camera
    if not image.image_path.is_file():
        return image  # made in memory, or a photo that is checked when it loads
    size = image_size(image.image_path)
    if size == (cam.width, cam.height) or stored_size(image.image_path) == (cam.width, cam.height):
        return image
    fitted = cam.fitted_to(*size, where=str(image.image_path))
    return PosedImage(image.name, image.image_path, fitted, image.viewmat)


def _read_files(root: Path, downscale: int = 1) -> SceneFiles:
    from gsnb.data.colmap import find_colmap_model, read_colmap_scene
    from gsnb.data.transforms import find_transforms, read_transforms_scene

    if root.is_file():
        if root.suffix == ".json":
            return read_transforms_scene(root, downscale=downscale)
        from gsnb.data.sfm.frames import is_video  # only on this error's path

        if is_video(root):
            raise ValueError(f"{root} is a video, not a posed dataset: {_process(root)}")
        raise ValueError(f"{root} is a file but not a transforms.json; pass the dataset folder")
    model = find_colmap_model(root)
    if model is not None:
        return read_colmap_scene(root, model, downscale)
    transforms = find_transforms(root)
    if transforms is not None:
        return read_transforms_scene(*transforms, downscale=downscale)
    raise FileNotFoundError(
        f"no dataset found in {root}: expected a COLMAP model (sparse/0/cameras.bin or .txt) "
        f"or a transforms.json{_photos_hint(root)}"
    )


def _photos_hint(root: Path) -> str:
    """For a folder without cameras that holds photos (or whose ``images/`` does): how to
    find their cameras; else nothing."""
    from gsnb.data.sfm.frames import list_photos  # only on this error's path

    folders = [root, root / "images"] if root.is_dir() else []
    photos = next((f for f in folders if f.is_dir() and list_photos(f)), None)
    return f"; it holds photos without cameras: {_process(photos)}" if photos else ""


def _process(source: Path) -> str:
    return f"`gsnb process {source} --out SCENE` finds the cameras; then train on SCENE"


def _test_ids(names: list[str], test_every: int, test_names: set[str] | None) -> list[int]:
    if test_every == 0:
        return []
    if test_names is not None:
        return [i for i, n in enumerate(names) if n in test_names]
    return [i for i in range(len(names)) if i % test_every == 0]


def default_cache_dir(folder: str | Path) -> Path:
    """Where the processed images of the dataset in ``folder`` are cached by default.

    A folder of the user cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``)
    named after the dataset folder and a hash of its resolved path; each entry's
    name also hashes its source file's path, size and modification time, so an
    edited photo is processed again.

    Example:
        >>> default_cache_dir("/data/garden").parent.name
        'images'
    """
    folder = Path(folder).expanduser().resolve()
    digest = hashlib.sha1(str(folder).encode()).hexdigest()[:12]
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "gsnb" / "images" / f"{folder.name}-{digest}"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gsnb" / "images" / f"{folder.name}-{digest}"


def _file_camera(view: View) -> Camera:
    k = view.K.double()
    return Camera(
        view.width, view.height, float(k[0, 0]), float(k[1, 1]), float(k[0, 2]), float(k[1, 2])
    )
