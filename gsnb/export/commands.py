"""``gsnb export`` (checkpoint -> PLY) and ``gsnb video`` (checkpoint or PLY -> MP4).

gsnb export CHECKPOINT --ply OUT.ply
gsnb video CHECKPOINT_OR_PLY --out OUT.mp4 [--data DATASET_DIR]
           [--path orbit|train|KEYFRAMES.json] [--render-size WxH] [--size WxH]
           [--frames N] [--fps F] [--quality Q]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from gsnb.cameras import matching_fov
from gsnb.export import paths
from gsnb.export.ply import read_ply, write_ply
from gsnb.export.video import render_video
from gsnb.model import GaussianModel

DEFAULT_SIZE = (1920, 1080)


@dataclass(frozen=True)
class Cameras:
    """Training cameras for a camera path.

    Attributes:
        viewmats: ``[M, 4, 4]`` world-to-camera (OpenCV).
        Ks: ``[M, 3, 3]`` intrinsics of images of ``size``.
        size: the images' ``(width, height)``.
        background: the dataset's background colour.

    Example:
        >>> import torch
        >>> cams = Cameras(torch.eye(4)[None], torch.eye(3)[None], (64, 48))
        >>> cams.size, cams.background
        ((64, 48), (0.0, 0.0, 0.0))
    """

    viewmats: Tensor
    Ks: Tensor
    size: tuple[int, int]
    background: tuple[float, float, float] = (0.0, 0.0, 0.0)


def training_cameras(data: Any) -> Cameras:
    """The training cameras of a dataset folder (or of a loaded ``SceneDataset``).

    Example:
        >>> from types import SimpleNamespace
        >>> import torch
        >>> view = SimpleNamespace(viewmat=torch.eye(4), K=torch.eye(3), width=64, height=48)
        >>> scene = SimpleNamespace(train=[view], views=[view], background=(0.0, 0.0, 0.0))
        >>> training_cameras(scene).size
        (64, 48)
    """
    if isinstance(data, (str, Path)):
        from gsnb.data.dataset import load_dataset

        if not Path(data).is_dir():
            raise FileNotFoundError(f"no dataset folder at {data}")
        data = load_dataset(data, test_every=0)
    views = data.train or data.views
    if not views:
        raise ValueError("the dataset has no cameras")
    return Cameras(
        viewmats=torch.stack([v.viewmat for v in views]).float(),
        Ks=torch.stack([v.K for v in views]).float(),
        size=(views[0].width, views[0].height),
        background=tuple(data.background),
    )


def load_scene(path: str | Path, device: str | torch.device | None = None) -> GaussianModel:
    """A model from a ``.ply`` file or a gsnb checkpoint (read as data, never as code), or a
    run folder's ``checkpoint.pt``; a checkpoint's as the run's own exports show it (3D
    filter, mean exposure: :meth:`GaussianModel.load`'s ``exported``).

    Example:
        >>> import tempfile, torch
        >>> model = GaussianModel.from_points(torch.rand(4, 3), torch.rand(4, 3))
        >>> file = tempfile.mkdtemp() + "/model.pt"
        >>> model.save(file)
        >>> load_scene(file).num_gaussians
        4
    """
    path = Path(path)
    if path.is_dir():
        if not (path / "checkpoint.pt").is_file():
            raise FileNotFoundError(
                f"{path} is a folder without checkpoint.pt; name a checkpoint or PLY file"
            )
        path = path / "checkpoint.pt"
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint or PLY file at {path}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if path.suffix.lower() == ".ply":
        return GaussianModel(read_ply(path)).to(device)
    return GaussianModel.load(path, map_location=device, exported=True)


def parse_size(text: str) -> tuple[int, int]:
    """``"1920x1080"`` -> ``(1920, 1080)``.

    Example:
        >>> parse_size("64x48")
        (64, 48)
    """
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must look like 1920x1080, got {text!r}") from None
    if width < 2 or height < 2:
        raise argparse.ArgumentTypeError(f"size must be at least 2x2, got {text!r}")
    return width, height


def parse_colour(text: str) -> tuple[float, float, float]:
    """``"1,1,1"`` -> ``(1.0, 1.0, 1.0)`` (RGB in [0, 1]).

    Example:
        >>> parse_colour("0,0.5,1")
        (0.0, 0.5, 1.0)
    """
    try:
        r, g, b = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"colour must look like 0,0,0 or 1,1,1, got {text!r}"
        ) from None
    return r, g, b


@dataclass(frozen=True)
class VideoOptions:
    """What :func:`make_video` renders; ``gsnb video`` and ``%gs_export`` fill it from options.

    Attributes:
        data: dataset folder whose cameras ``orbit`` and ``train`` follow (None: orbit the
            Gaussians).
        path: camera path: ``"orbit"``, ``"train"`` (needs ``data``) or a keyframes JSON file.
        size: video ``(width, height)``; None: the training images' size with ``data``,
            else 1920x1080.
        render_size: render at this ``(width, height)``, then lanczos-upscale to ``size``
            (None: ``size``).
        frames: number of frames (default 120).
        fps: frames per second (default 30).
        quality: encoder quality, 0 (small) to 10 (best) (default 8).
        fov: vertical field of view in degrees of an orbit without ``data`` (default 50).
        background: RGB in [0, 1] behind the Gaussians; None: the dataset's, else the one
            the model was trained over (its checkpoint records it).
        device: device to render on; None: the model's.
        progress: show a progress bar (default True).

    Example:
        >>> VideoOptions(size=(64, 48), frames=5).path
        'orbit'
    """

    data: str | None = None
    path: str = "orbit"
    size: tuple[int, int] | None = None
    render_size: tuple[int, int] | None = None
    frames: int = 120
    fps: float = 30.0
    quality: float = 8.0
    fov: float = paths.DEFAULT_FOV_DEG
    background: tuple[float, float, float] | None = None
    device: str | None = None
    progress: bool = True

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> VideoOptions:
        """The options :func:`add_video_options` parsed.

        Example:
            >>> parser = argparse.ArgumentParser()
            >>> add_video_options(parser)
            >>> VideoOptions.from_args(parser.parse_args(["--no-progress"])).progress
            False
        """
        names = {f.name for f in fields(cls)} - {"progress"}
        return cls(
            **{k: v for k, v in vars(args).items() if k in names}, progress=not args.no_progress
        )


def add_video_options(parser: argparse.ArgumentParser) -> None:
    """Add the options shared by ``gsnb video`` and ``%gs_export`` to ``parser``.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_video_options(parser)
        >>> args = parser.parse_args(["--size", "64x48", "--frames", "5"])
        >>> args.size, args.frames, args.path
        ((64, 48), 5, 'orbit')
    """
    parser.add_argument("--data", help="dataset folder, for paths that follow its cameras")
    parser.add_argument(
        "--path",
        default=VideoOptions.path,
        help="camera path: 'orbit' (around the training cameras' focus, or the Gaussians "
        "without --data), 'train' (through the training cameras; needs --data) or a "
        "keyframes .json file (format in gsnb.export.paths)",
    )
    parser.add_argument(
        "--size",
        type=parse_size,
        help="video size WxH (default: the training images' size with --data, else 1920x1080)",
    )
    parser.add_argument(
        "--render-size",
        type=parse_size,
        help="render at WxH, then lanczos-upscale to --size (default: --size)",
    )
    defaults = VideoOptions()
    parser.add_argument(
        "--frames",
        type=int,
        default=defaults.frames,
        help=f"number of frames (default {defaults.frames})",
    )
    parser.add_argument(
        "--fps",
        type=float,
        default=defaults.fps,
        help=f"frames per second (default {defaults.fps:g})",
    )
    parser.add_argument(
        "--quality",
        type=float,
        default=defaults.quality,
        help=f"encoder quality 0 (small) to 10 (best) (default {defaults.quality:g})",
    )
    parser.add_argument(
        "--fov",
        type=float,
        default=defaults.fov,
        help=f"vertical field of view in degrees of an orbit without --data "
        f"(default {defaults.fov:g})",
    )
    parser.add_argument(
        "--background",
        type=parse_colour,
        help="R,G,B in [0, 1] behind the Gaussians (default: the dataset's, else black)",
    )
    parser.add_argument(
        "--device", help="device to render on (default: the model's; for a file cuda if available)"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def camera_path(
    spec: str,
    frames: int,
    size: tuple[int, int],
    model: GaussianModel,
    cameras: Cameras | None,
    fov: float,
) -> tuple[Tensor, Tensor]:
    """``viewmats [F, 4, 4]`` and ``Ks [F, 3, 3]`` for a ``--path`` value.

    Example:
        >>> import torch
        >>> model = GaussianModel.from_points(torch.rand(50, 3), torch.rand(50, 3))
        >>> viewmats, Ks = camera_path("orbit", 8, (64, 48), model, None, 50.0)
        >>> tuple(viewmats.shape), tuple(Ks.shape)
        ((8, 4, 4), (8, 3, 3))
    """
    width, height = size
    if spec == "orbit":
        if cameras is None:
            orbit = paths.fit_orbit_to_points(model.splats["means"].detach())
            return paths.orbit_path(orbit, frames, width, height, fov)
        fov_y = float(matching_fov(cameras.Ks, size, cameras.size, axis="y").mean())
        return paths.orbit_path(paths.fit_orbit(cameras.viewmats), frames, width, height, fov_y)
    if spec == "train":
        if cameras is None:
            raise ValueError(
                "--path train follows the training cameras; give the dataset with --data"
            )
        return paths.train_path(cameras.viewmats, cameras.Ks, frames, width, height, cameras.size)
    if not Path(spec).is_file():
        raise FileNotFoundError(
            f"--path is 'orbit', 'train' or a keyframes JSON file; no file at {spec}"
        )
    return paths.keyframe_path(spec, frames, width, height)


def make_video(
    model: GaussianModel, out: str | Path, options: VideoOptions | None = None, data: Any = None
) -> Path:
    """Render the video that ``options`` describe to ``out``.

    ``data`` overrides ``options.data`` with a loaded dataset.

    Example:
        >>> import tempfile, torch
        >>> options = VideoOptions(size=(32, 24), frames=2, progress=False)
        >>> model = GaussianModel.from_points(torch.rand(20, 3), torch.rand(20, 3))
        >>> make_video(model, tempfile.mkdtemp() + "/orbit.mp4", options).name
        'orbit.mp4'
    """
    o = options or VideoOptions()
    source = data if data is not None else o.data
    cameras = training_cameras(source) if source is not None else None
    size = o.size or (_even(cameras.size) if cameras else DEFAULT_SIZE)
    if o.frames < 1:
        raise ValueError(f"--frames must be at least 1, got {o.frames}")
    # Without a dataset, the colour the model was trained over (its checkpoint records it).
    background = o.background or (cameras.background if cameras else model.background)
    if o.device and torch.device(o.device) != model.splats["means"].device:
        # A copy: the caller's model stays put.
        model = GaussianModel(model.splats, model.background).to(o.device)
    viewmats, Ks = camera_path(o.path, o.frames, size, model, cameras, o.fov)
    return render_video(
        model, out, viewmats, Ks, size, o.render_size, o.fps, o.quality,
        background, progress=o.progress,
    )  # fmt: skip


def export_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``gsnb export`` to ``parser``.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> export_arguments(parser)
        >>> parser.parse_args(["model.pt", "--ply", "scene.ply"]).ply
        'scene.ply'
    """
    parser.add_argument(
        "checkpoint",
        help="a gsnb checkpoint (or a PLY file to rewrite); a run trained with --filter3d or "
        "--exposure is written as its own PLY is, with the 3D filter and the mean of its "
        "learned exposures baked in",
    )
    parser.add_argument("--ply", required=True, help="the PLY file to write (INRIA 3DGS layout)")


def export(args: argparse.Namespace) -> int:
    """``gsnb export CHECKPOINT --ply OUT.ply``: write the Gaussians as a 3DGS PLY file.

    Returns the exit code: 0, or 1 after printing the error in one line.

    Example:
        >>> import tempfile, torch
        >>> folder = tempfile.mkdtemp()
        >>> GaussianModel.from_points(torch.rand(3, 3), torch.rand(3, 3)).save(folder + "/m.pt")
        >>> export(argparse.Namespace(checkpoint=folder + "/m.pt", ply=folder + "/m.ply"))
        ... # doctest: +ELLIPSIS
        wrote ...m.ply: 3 Gaussians, SH degree 3
        0
    """
    try:
        model = load_scene(args.checkpoint, "cpu")
        write_ply(args.ply, model.splats)
    except (OSError, ValueError) as err:
        print(f"gsnb export: error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {args.ply}: {model.num_gaussians} Gaussians, SH degree {model.sh_degree}")
    return 0


def video_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``gsnb video`` to ``parser``.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> video_arguments(parser)
        >>> args = parser.parse_args(["scene.ply", "--out", "v.mp4", "--render-size", "960x540"])
        >>> args.render_size
        (960, 540)
    """
    parser.add_argument("scene", help="a gsnb checkpoint or a 3DGS PLY file")
    parser.add_argument("--out", required=True, help="the .mp4 file to write")
    add_video_options(parser)


def video(args: argparse.Namespace) -> int:
    """``gsnb video SCENE --out OUT.mp4 ...``: render a camera path to an H.264 MP4.

    Returns the exit code: 0, or 1 after printing the error in one line.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> video_arguments(parser)
        >>> video(parser.parse_args(["missing.ply", "--out", "v.mp4"]))
        1
    """
    try:
        options = VideoOptions.from_args(args)
        model = load_scene(args.scene, args.device)
        note = cpu_note(model, options)
        if note:
            print(f"gsnb video: {note}", file=sys.stderr)
        out = make_video(model, args.out, options)
    except (OSError, ValueError) as err:
        print(f"gsnb video: error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


def cpu_note(model: GaussianModel, options: VideoOptions) -> str | None:
    """What to know before rendering ``options``' frames on the CPU at more than 960x540, the
    size of the render itself (``render_size``, else ``size``, else 1920x1080 without data);
    None on a GPU or for small frames.

    Example:
        >>> import torch
        >>> model = GaussianModel.from_points(torch.rand(5, 3), torch.rand(5, 3))
        >>> cpu_note(model, VideoOptions(size=(1920, 1080)))[:40]
        'rendering 120 frames of 1920x1080 on the'
        >>> cpu_note(model, VideoOptions(size=(1920, 1080), render_size=(640, 360))) is None
        True
    """
    device = torch.device(options.device) if options.device else model.splats["means"].device
    rendered = options.render_size or options.size or (None if options.data else DEFAULT_SIZE)
    if device.type != "cpu" or rendered is None or rendered[0] * rendered[1] <= 960 * 540:
        return None
    width, height = rendered
    return (
        f"rendering {options.frames} frames of {width}x{height} on the CPU takes a second or "
        "more each; --render-size 960x540 renders a quarter of the pixels (or fewer, "
        "--frames) and lanczos-upscales them to --size"
    )


def _even(size: tuple[int, int]) -> tuple[int, int]:
    return size[0] - size[0] % 2, size[1] - size[1] % 2
