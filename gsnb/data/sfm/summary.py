"""The record of a ``gsnb process`` run: ``process.json`` beside ``images/`` and ``sparse/0``.

It is written last, so its presence says the dataset beside it is complete.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gsnb.utils.atomic import atomic_write

SUMMARY_NAME = "process.json"


@dataclass
class ProcessSummary:
    """What structure from motion made of an input; ``seconds`` holds the time of each stage.

    ``images_in`` counts the photos read (or video frames kept), ``skipped``
    the photos that could not be read (name -> reason), ``unregistered`` the
    images no pose was found for, ``pieces`` the images of each model the
    mapper made (the largest is kept), ``reused`` the stages a re-run took
    from its earlier run.

    Example:
        >>> s = ProcessSummary("photos", "photos", 3, 3, 120, 0.5, matcher="exhaustive")
        >>> s.lines()[0]
        'photos: 3 of 3 images registered, 120 points, mean reprojection error 0.50 px'
    """

    input: str
    kind: str  # "photos" or "video"
    images_in: int
    registered: int
    points: int
    mean_reprojection_error: float
    matcher: str = ""
    camera_model: str = ""
    image_size: tuple[int, int] | None = None  # (width, height) of the undistorted images
    unregistered: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    pieces: list[int] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    reused: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The summary as a few lines of text."""
        out = [
            f"{Path(self.input).name}: {self.registered} of {self.images_in} images registered, "
            f"{self.points} points, mean reprojection error {self.mean_reprojection_error:.2f} px"
        ]
        timing = ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())
        if timing:
            reused = f" (reused: {', '.join(self.reused)})" if self.reused else ""
            out.append(f"time: {timing}{reused}")
        if self.matcher:
            out.append(f"matching: {self.matcher}; camera model: {self.camera_model}")
        if self.unregistered:
            out.append(f"not registered ({len(self.unregistered)}): {_names(self.unregistered)}")
        if self.skipped:
            out.append(f"skipped, unreadable ({len(self.skipped)}): {_names(list(self.skipped))}")
        out.extend(f"warning: {w}" for w in self.warnings)
        return out

    def write(self, folder: Path) -> Path:
        """Write ``folder/process.json`` atomically; returns its path."""
        path = Path(folder) / SUMMARY_NAME
        with atomic_write(path, "w") as handle:
            json.dump(asdict(self), handle, indent=1)
        return path

    @classmethod
    def read(cls, folder: Path) -> ProcessSummary | None:
        """The summary in ``folder``, or None when there is none (or it is not one)."""
        try:
            data: dict[str, Any] = json.loads((Path(folder) / SUMMARY_NAME).read_text())
            if data.get("image_size") is not None:
                data["image_size"] = tuple(data["image_size"])
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None


def _names(names: list[str], limit: int = 12) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")
