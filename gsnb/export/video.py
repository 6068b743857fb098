"""Render a camera path to an H.264 MP4, rendering small and lanczos-upscaling each frame.

Frames are rendered one at a time, upscaled on the renderer's device and
streamed to ffmpeg (shipped by ``imageio-ffmpeg``), so memory stays flat
however long the video. The file is written under a temporary name beside the
target and renamed when complete.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from gsnb.cameras import scale_intrinsics
from gsnb.export.upscale import lanczos_resize, to_uint8
from gsnb.model import GaussianModel
from gsnb.utils.atomic import make_temporary


@torch.no_grad()
def render_frames(
    model: GaussianModel,
    viewmats: Tensor,
    Ks: Tensor,
    size: tuple[int, int],
    render_size: tuple[int, int] | None = None,
    background: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> Iterator[np.ndarray]:
    """Yield ``uint8 [H, W, 3]`` frames, one camera at a time.

    Args:
        model: the Gaussians; frames render on the model's device.
        viewmats: ``[F, 4, 4]`` world-to-camera matrices (OpenCV).
        Ks: ``[F, 3, 3]`` intrinsics for the output ``size``.
        size: output ``(width, height)``.
        render_size: ``(width, height)`` to render at before the lanczos resize
            to ``size``; default ``size`` (no resize).
        background: RGB colour behind the Gaussians.

    Example:
        >>> import torch
        >>> from gsnb.export.paths import Orbit, orbit_path
        >>> from gsnb.model import GaussianModel
        >>> model = GaussianModel.from_points(torch.rand(20, 3) - 0.5, torch.rand(20, 3))
        >>> orbit = Orbit(torch.zeros(3).numpy(), torch.tensor([0.0, -1, 0]).numpy(), 3.0, 0.5,
        ...               torch.tensor([1.0, 0, 0]).numpy())
        >>> viewmats, Ks = orbit_path(orbit, 2, 32, 24)
        >>> [f.shape for f in render_frames(model, viewmats, Ks, (32, 24), (16, 12))]
        [(24, 32, 3), (24, 32, 3)]
    """
    width, height = size
    rw, rh = render_size or size
    device = model.splats["means"].device
    viewmats = viewmats.to(device, torch.float32)
    Ks = scale_intrinsics(Ks.to(device, torch.float32), size, (rw, rh))
    bg = torch.tensor(background, dtype=torch.float32, device=device)
    for i in range(len(viewmats)):
        rgb = model.render(viewmats[i : i + 1], Ks[i : i + 1], rw, rh, backgrounds=bg).rgb[0]
        if (rw, rh) != (width, height):
            rgb = lanczos_resize(rgb, width, height)
        yield to_uint8(rgb)


def write_video(
    path: str | os.PathLike[str],
    frames: Iterable[np.ndarray],
    fps: float = 30.0,
    quality: float = 8.0,
    total: int | None = None,
    progress: bool = True,
) -> Path:
    """Encode ``uint8 [H, W, 3]`` frames as an H.264 MP4 (yuv420p, plays in browsers).

    Frames are streamed to ffmpeg as they come. The video appears at ``path``
    only once it is complete.

    Args:
        path: the ``.mp4`` file to write; its folder must exist.
        frames: the frames, all of one even width and height.
        fps: frames per second.
        quality: imageio's quality scale, 0 (smallest) to 10 (best).
        total: number of frames, for the progress bar.
        progress: show a tqdm progress bar.

    Returns:
        The written path.

    Raises:
        ValueError: a name other than ``.mp4``, bad ``fps``/``quality``, no frames, odd or
            changing frame size.
        OSError: the folder is missing or not writable (nothing is left behind).

    Example:
        >>> import numpy as np, tempfile
        >>> out = tempfile.mkdtemp() + "/ramp.mp4"
        >>> frames = (np.full((48, 64, 3), 10 * i, np.uint8) for i in range(5))
        >>> write_video(out, frames, fps=10, progress=False).name
        'ramp.mp4'
    """
    import imageio.v2 as imageio
    from tqdm.auto import tqdm

    if not fps > 0:
        raise ValueError(f"fps must be positive, got {fps}")
    if not 0 <= quality <= 10:
        raise ValueError(f"quality must lie in [0, 10] (imageio's scale), got {quality}")
    target = Path(path)
    if target.suffix.lower() != ".mp4":
        raise ValueError(
            f"{target}: the video is H.264 in an MP4 container; give the file a .mp4 name"
        )
    count, shape = 0, None
    with _temporary_file_beside(target, suffix=".mp4") as tmp:
        writer = imageio.get_writer(
            tmp, format="FFMPEG", mode="I", fps=fps, codec="libx264", pixelformat="yuv420p",
            quality=quality, macro_block_size=1, ffmpeg_log_level="error",
        )  # fmt: skip
        try:
            for frame in tqdm(
                frames, total=total, desc="video", unit="frame", disable=not progress
            ):
                _check_frame(frame, shape)
                shape = frame.shape
                writer.append_data(frame)
                count += 1
        finally:
            writer.close()
        if count == 0:
            raise ValueError("no frames to write; the camera path is empty")
    return target


def render_video(
    model: GaussianModel,
    path: str | os.PathLike[str],
    viewmats: Tensor,
    Ks: Tensor,
    size: tuple[int, int],
    render_size: tuple[int, int] | None = None,
    fps: float = 30.0,
    quality: float = 8.0,
    background: tuple[float, float, float] = (0.0, 0.0, 0.0),
    progress: bool = True,
) -> Path:
    """Render ``model`` along a camera path into an MP4 at ``path``.

    Each frame is rendered at ``render_size`` and lanczos-upscaled to ``size``
    (e.g. render 1920x1080, write 3840x2160), then streamed to the encoder.

    Args:
        model: the Gaussians (on the GPU for speed; the CPU works for small frames).
        path: the ``.mp4`` to write.
        viewmats: ``[F, 4, 4]`` world-to-camera (OpenCV); see :mod:`gsnb.export.paths`.
        Ks: ``[F, 3, 3]`` intrinsics for ``size``.
        size: output ``(width, height)``, both even.
        render_size: render resolution, default ``size``.
        fps, quality: see :func:`write_video`.
        background: RGB colour behind the Gaussians.
        progress: show a progress bar.

    Returns:
        The written path.

    Example:
        >>> import tempfile, torch
        >>> from gsnb.export.paths import fit_orbit_to_points, orbit_path
        >>> model = GaussianModel.from_points(torch.rand(30, 3), torch.rand(30, 3))
        >>> viewmats, Ks = orbit_path(fit_orbit_to_points(model.splats["means"]), 3, 32, 24)
        >>> out = tempfile.mkdtemp() + "/orbit.mp4"
        >>> render_video(model, out, viewmats, Ks, (32, 24), (16, 12), progress=False).name
        'orbit.mp4'
    """
    if len(viewmats) != len(Ks):
        raise ValueError(f"got {len(viewmats)} viewmats but {len(Ks)} Ks; give one K per frame")
    width, height = size
    if width % 2 or height % 2:
        raise ValueError(f"H.264 in yuv420p needs an even width and height, got {width}x{height}")
    frames = render_frames(model, viewmats, Ks, size, render_size, background)
    return write_video(path, frames, fps, quality, total=len(viewmats), progress=progress)


def _check_frame(frame: np.ndarray, first: tuple[int, ...] | None) -> None:
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"frames must be uint8 [H, W, 3], got {frame.dtype} {list(frame.shape)}")
    if frame.shape[0] % 2 or frame.shape[1] % 2:
        raise ValueError(
            f"H.264 in yuv420p needs an even width and height, got {frame.shape[1]}x"
            f"{frame.shape[0]}"
        )
    if first is not None and frame.shape != first:
        raise ValueError(f"frame size changed from {list(first)} to {list(frame.shape)}")


@contextlib.contextmanager
def _temporary_file_beside(target: Path, suffix: str) -> Iterator[Path]:
    """A temporary path beside ``target``, renamed to ``target`` on success, removed on error."""
    if target.is_dir():
        raise IsADirectoryError(f"cannot write {target}: it is a folder; give a file name")
    fd, name = make_temporary(target, suffix=f".tmp{suffix}")
    os.close(fd)
    try:
        yield Path(name)
        os.replace(name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
