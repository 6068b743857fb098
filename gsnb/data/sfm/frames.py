"""The images SfM starts from: photos copied upright, or the sharpest frames of a video.

Photos are copied with their EXIF orientation applied (phones store portrait
photos sideways plus a rotation tag that COLMAP ignores) and, when larger than
``max_size``, downscaled. A video is decoded once with imageio-ffmpeg; of each
run of consecutive frames one is kept, the sharpest by the variance of its
Laplacian, so motion blur does not reach the feature matcher.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from gsnb.data.sfm.errors import ProcessError
from gsnb.utils.atomic import atomic_write

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp", ".webp")
VIDEO_SUFFIXES = (".mp4", ".mov", ".m4v", ".avi", ".mkv", ".webm")
Progress = Callable[[int, int], None]  # (done, total)


@dataclass
class PreparedImages:
    """What ``copy_photos`` or ``extract_frames`` wrote: image names and what it left out.

    ``skipped`` maps a photo that could not be read to the reason.

    Example:
        >>> PreparedImages(["a.jpg"], {"b.jpg": "truncated"}).skipped
        {'b.jpg': 'truncated'}
    """

    names: list[str]
    skipped: dict[str, str] = field(default_factory=dict)


def is_video(path: Path) -> bool:
    """Whether ``path`` is a video file by its suffix.

    Example:
        >>> import tempfile
        >>> clip = Path(tempfile.mkdtemp()) / "walk.MP4"
        >>> _ = clip.write_bytes(b"")
        >>> is_video(clip), is_video(clip.parent)
        (True, False)
    """
    return path.is_file() and path.suffix.lower() in VIDEO_SUFFIXES


def list_photos(folder: Path) -> list[Path]:
    """The image files directly in ``folder``, sorted by name (the capture order of phones).

    Example:
        >>> import tempfile
        >>> list_photos(Path(tempfile.mkdtemp()))
        []
    """
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in PHOTO_SUFFIXES)


def fit_size(width: int, height: int, max_size: int | None) -> tuple[int, int]:
    """``(width, height)`` scaled so the longer side is at most ``max_size`` (never enlarged).

    Example:
        >>> fit_size(1920, 1080, 960), fit_size(640, 480, 960), fit_size(640, 480, None)
        ((960, 540), (640, 480), (640, 480))
    """
    if not max_size or max(width, height) <= max_size:
        return width, height
    scale = max_size / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def copy_photos(
    source: Path, dest: Path, max_size: int | None = None, progress: Progress | None = None
) -> PreparedImages:
    """Copy the photos of ``source`` upright (EXIF) into ``dest``, downscaled to ``max_size``.

    A photo that cannot be decoded is skipped and named in ``skipped``: one bad
    file in a phone's folder should not cost the whole capture.

    Example:
        >>> import tempfile
        >>> src, dst = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
        >>> Image.new("RGB", (40, 20)).save(src / "a.jpg")
        >>> (src / "b.jpg").write_bytes(b"not a jpeg")
        10
        >>> out = copy_photos(src, dst, max_size=20)
        >>> out.names, list(out.skipped), Image.open(dst / "a.jpg").size
        (['a.jpg'], ['b.jpg'], (20, 10))
    """
    photos = list_photos(source)
    if not photos:
        raise ProcessError(
            f"no photos in {source} (looked for {', '.join(PHOTO_SUFFIXES)}); "
            "point gsnb process at the folder that holds them, or at a video file"
        )
    dest.mkdir(parents=True, exist_ok=True)
    names, skipped = [], {}
    for i, photo in enumerate(photos):
        try:
            with Image.open(photo) as raw:
                image = ImageOps.exif_transpose(raw)
                image.load()
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
            skipped[photo.name] = str(err) or type(err).__name__
            continue
        image = image.convert("RGB")
        size = fit_size(*image.size, max_size)
        if size != image.size:
            image = image.resize(size, Image.Resampling.LANCZOS)
        name = photo.stem + (
            ".png" if photo.suffix.lower() in (".png", ".tif", ".tiff") else ".jpg"
        )
        with atomic_write(dest / name) as handle:
            image.save(handle, "PNG" if name.lower().endswith(".png") else "JPEG", quality=95)
        names.append(name)
        if progress is not None:
            progress(i + 1, len(photos))
    return PreparedImages(names, skipped)


def sharpness(rgb: np.ndarray) -> float:
    """Variance of the Laplacian of an ``[H, W, 3]`` uint8 image: low means blurred.

    Example:
        >>> flat = np.zeros((8, 8, 3), np.uint8)
        >>> checker = (np.indices((8, 8)).sum(0) % 2 * 255).astype(np.uint8)
        >>> sharpness(flat), sharpness(np.dstack([checker] * 3)) > 1000
        (0.0, True)
    """
    grey = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2GRAY)
    return float(cv2.Laplacian(grey, cv2.CV_64F).var())


def frame_window(total: int, source_fps: float, fps: float | None, frames: int | None) -> int:
    """How many consecutive video frames share one kept frame (at least 1).

    ``frames`` asks for about that many frames over the whole video, ``fps``
    for that rate; with neither, two frames a second.

    Example:
        >>> frame_window(300, 30.0, 2.0, None), frame_window(300, 30.0, None, 60)
        (15, 5)
    """
    if frames is not None:
        return max(1, total // max(1, frames))
    rate = fps if fps is not None else 2.0
    return max(1, round(source_fps / rate))


def extract_frames(
    video: Path,
    dest: Path,
    *,
    fps: float | None = None,
    frames: int | None = None,
    max_size: int | None = None,
    progress: Progress | None = None,
) -> PreparedImages:
    """The sharpest frame of each window of ``video`` written to ``dest`` as ``frame_NNNNN.jpg``.

    ``NNNNN`` is the frame's index in the video. Raises ``ProcessError`` when
    ffmpeg cannot decode the file.

    Example:
        >>> import tempfile, imageio.v2 as iio
        >>> folder = Path(tempfile.mkdtemp())
        >>> clip = [np.full((32, 32, 3), 10 * i, np.uint8) for i in range(8)]
        >>> iio.mimwrite(folder / "c.mp4", clip, fps=4, macro_block_size=1)
        >>> extract_frames(folder / "c.mp4", folder / "out", frames=4).names[:2]
        ['frame_00000.jpg', 'frame_00002.jpg']
    """
    import imageio.v2 as iio
    import imageio_ffmpeg

    try:
        total, _ = imageio_ffmpeg.count_frames_and_secs(str(video))
        reader = iio.get_reader(video, format="FFMPEG")
        source_fps = float(reader.get_meta_data().get("fps") or 30.0)
    except (OSError, RuntimeError, ValueError, StopIteration) as err:
        raise ProcessError(
            f"ffmpeg cannot decode the video {video}: {_first_line(err)}; "
            "re-encode it (e.g. to H.264 MP4) or extract its frames into a folder"
        ) from None
    window = frame_window(total, source_fps, fps, frames)
    dest.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    best: tuple[float, int, np.ndarray] | None = None
    try:
        for index, rgb in enumerate(reader):
            score = sharpness(rgb)
            if best is None or score > best[0]:
                best = (score, index, rgb)
            if (index + 1) % window == 0:
                names.append(_write_frame(dest, best[1], best[2], max_size))
                best = None
            if progress is not None:
                progress(index + 1, max(total, index + 1))
    except (OSError, RuntimeError, ValueError) as err:
        raise ProcessError(
            f"ffmpeg stopped decoding {video} after {len(names)} kept frames: "
            f"{_first_line(err)}; re-encode the video"
        ) from None
    finally:
        reader.close()
    if best is not None and (not names or best[1] - int(names[-1][6:11]) >= window // 2):
        names.append(_write_frame(dest, best[1], best[2], max_size))
    if not names:
        raise ProcessError(f"ffmpeg found no frames in {video}; is it a video?")
    return PreparedImages(names)


def _write_frame(dest: Path, index: int, rgb: np.ndarray, max_size: int | None) -> str:
    image = Image.fromarray(rgb)
    size = fit_size(*image.size, max_size)
    if size != image.size:
        image = image.resize(size, Image.Resampling.LANCZOS)
    name = f"frame_{index:05d}.jpg"
    with atomic_write(dest / name) as handle:
        image.save(handle, "JPEG", quality=95)
    return name


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0][:200]
