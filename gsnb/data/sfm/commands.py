"""``gsnb process INPUT --out DIR``: photos or a video to a posed dataset (see :mod:`.pipeline`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gsnb.data.sfm.errors import MissingPycolmap, ProcessError

if TYPE_CHECKING:
    from gsnb.data.sfm.pipeline import ProcessOptions


CAMERA_MODELS = (
    "SIMPLE_PINHOLE",
    "PINHOLE",
    "SIMPLE_RADIAL",
    "RADIAL",
    "OPENCV",
    "FULL_OPENCV",
    "OPENCV_FISHEYE",
    "SIMPLE_RADIAL_FISHEYE",
    "RADIAL_FISHEYE",
    "THIN_PRISM_FISHEYE",
    "FOV",
)
"""The lens models of COLMAP that ``--camera-model`` takes."""


def process_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gsnb process``.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> process_arguments(p)
        >>> a = p.parse_args(["walk.mp4", "--out", "scene", "--frames", "150"])
        >>> a.input, a.out, a.frames
        ('walk.mp4', PosixPath('scene'), 150)
    """
    parser.description = (
        "Find the camera poses of a folder of photos or of a video's frames with pycolmap "
        "(SIFT, matching, incremental mapping, undistortion) and write a dataset that "
        "gsnb train reads: DIR/images, DIR/sparse/0 and DIR/process.json. A re-run reuses "
        "the finished stages (DIR/work)."
    )
    parser.add_argument("input", help="a folder of photos or a video file")
    parser.add_argument("--out", type=Path, required=True, help="the dataset folder to write")
    rate = parser.add_mutually_exclusive_group()
    rate.add_argument("--fps", type=float, default=None, help="video: frames kept per second")
    rate.add_argument(
        "--frames", type=int, default=None, help="video: about this many frames in all"
    )
    parser.add_argument(
        "--max-image-size",
        type=int,
        default=None,
        help="downscale images whose longer side is larger (pixels; default: keep)",
    )
    parser.add_argument(
        "--matcher",
        choices=("auto", "exhaustive", "sequential"),
        default="auto",
        help="auto: sequential for video, exhaustive up to 300 photos, sequential beyond",
    )
    parser.add_argument(
        "--camera-model",
        default="SIMPLE_RADIAL",
        choices=CAMERA_MODELS,
        metavar="MODEL",
        help="COLMAP's model of the lens: " + ", ".join(CAMERA_MODELS) + " (default SIMPLE_RADIAL)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="threads for features, matching and mapping (default 0: every core; 1 gives the "
        "same model on every run)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def process_options(args: argparse.Namespace) -> ProcessOptions:
    """The :class:`ProcessOptions` that :func:`process_arguments`' options describe.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> process_arguments(parser)
        >>> process_options(parser.parse_args(["photos", "--out", "scene", "--threads", "1"]))
        ProcessOptions(fps=None, frames=None, max_image_size=None, matcher='auto', \
exhaustive_limit=300, overlap=10, camera_model='SIMPLE_RADIAL', threads=1)
    """
    from gsnb.data.sfm.pipeline import ProcessOptions

    return ProcessOptions(
        fps=args.fps,
        frames=args.frames,
        max_image_size=args.max_image_size,
        matcher=args.matcher,
        camera_model=args.camera_model,
        threads=args.threads,
    )


def process(args: argparse.Namespace) -> int:
    """``gsnb process``: 0 with the summary, 1 with the cause, 2 without pycolmap."""
    from gsnb.data.sfm.pipeline import process as run

    bar = StageBar(disable=args.no_progress)
    try:
        summary = run(args.input, args.out, process_options(args), progress=bar.update)
    except MissingPycolmap as err:
        print(f"gsnb process: {err}", file=sys.stderr)
        return 2
    except ProcessError as err:
        bar.close()
        print(f"gsnb process: error: {err}", file=sys.stderr)
        return 1
    except (OSError, ValueError, RuntimeError) as err:  # COLMAP's checks, a full disk
        bar.close()
        first = (str(err).splitlines() or [type(err).__name__])[0]
        log = Path(args.out) / "work" / "colmap.log"
        print(f"gsnb process: error: {first[:300]} (COLMAP's log: {log})", file=sys.stderr)
        return 1
    bar.close()
    for line in summary.lines():
        print(line)
    print(f"wrote {args.out}; train it with: gsnb train {args.out} --out runs/scene")
    return 0


class StageBar:
    """One tqdm bar per stage, fed by ``process``'s ``progress(stage, done, total)``."""

    def __init__(self, disable: bool = False) -> None:
        from gsnb.data.sfm.logs import terminal_stream

        self.disable = disable
        self.stream = terminal_stream()  # COLMAP's log is sent away from stderr, not the bars
        self.stage: str | None = None
        self.bar = None

    def update(self, stage: str, done: int, total: int) -> None:
        """Advance the bar of ``stage`` (a new stage closes the previous bar)."""
        from tqdm import tqdm

        if stage != self.stage:
            self.close()
            self.stage = stage
            unit = "img" if stage in ("images", "mapping") else "stage"  # the others: one step
            self.bar = tqdm(
                total=total, desc=stage, unit=unit, disable=self.disable, file=self.stream
            )
        if self.bar is not None:
            self.bar.total = total
            self.bar.n = done
            self.bar.refresh()

    def close(self) -> None:
        """Close the current bar."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
