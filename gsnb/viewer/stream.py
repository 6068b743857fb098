"""When to render for one browser, and at which size: previews while the camera moves.

:class:`FramePlanner` keeps one client's latest camera and answers "is a frame
due now, and how large?". A camera change gets a quick preview at
``preview_scale`` of the canvas; once the camera has rested ``rest_seconds``
the full-size frame follows. While training changes the model, frames are
refreshed, and only while the time spent on such refreshes stays within
``refresh_share`` of the wall time. Every frame, previews included, keeps to
``max_fps`` on a steady beat: a frame costs a training run in the same process
(the renderer's launches and the encoder take the interpreter's lock from the
training thread), so frames beyond what a video shows cost throughput and buy
nothing. A frame that is late by less than one beat keeps the beat, so the
rate is ``max_fps`` itself, not a little under it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gsnb.live.throttle import TimeBudget


@dataclass(frozen=True)
class BrowserCamera:
    """A browser's camera: pose ``T_world_camera`` (OpenCV axes), vertical fov, canvas size.

    Example:
        >>> BrowserCamera((1.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0), 1.0, 640, 480, 0.0).aspect
        1.3333333333333333
    """

    wxyz: tuple[float, float, float, float]
    position: tuple[float, float, float]
    fov: float
    width: int
    height: int
    stamp: float

    @property
    def aspect(self) -> float:
        """Width over height."""
        return self.width / self.height


@dataclass(frozen=True)
class FrameRequest:
    """One frame to render: the camera, the image size and whether it is a preview.

    Example:
        >>> cam = BrowserCamera((1.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0), 1.0, 64, 48, 0.0)
        >>> FrameRequest(cam, 16, 12, preview=True, version=0).preview
        True
    """

    camera: BrowserCamera
    width: int
    height: int
    preview: bool
    version: int
    planned: float = 0.0  # the time it was planned at (its beat)


def fit_size(width: int, height: int, max_size: int, scale: float = 1.0) -> tuple[int, int]:
    """``(width, height)`` times ``scale``, shrunk so that neither side exceeds ``max_size``.

    Example:
        >>> fit_size(3840, 2160, 1920), fit_size(640, 480, 1920, 0.25)
        ((1920, 1080), (160, 120))
    """
    factor = min(scale, max_size / max(width, height))
    return max(1, round(width * factor)), max(1, round(height * factor))


class FramePlanner:
    """Decides, for one browser, when a frame is due and at which size.

    Args:
        preview_scale: size of a preview relative to the full frame (while moving).
        rest_seconds: a camera unchanged this long is at rest: the full frame follows.
        max_fps: at most this many frames a second (previews while moving, refreshes while
            training), on a steady beat.
        max_size: longest side of a full frame in pixels.
        refresh_share: largest share of wall time spent on refreshes driven by training.

    Example:
        >>> planner = FramePlanner(rest_seconds=0.2)
        >>> planner.camera(BrowserCamera((1, 0, 0, 0), (0, 0, 0), 1.0, 640, 480, stamp=0.0))
        >>> first = planner.next_frame(now=0.01, version=0)
        >>> (first.width, first.preview)
        (160, True)
        >>> planner.rendered(first, cost=0.01, now=0.02)
        >>> planner.next_frame(now=0.1, version=0) is None
        True
        >>> rest = planner.next_frame(now=0.3, version=0)
        >>> (rest.width, rest.height, rest.preview)
        (640, 480, False)
    """

    def __init__(
        self,
        preview_scale: float = 0.25,
        rest_seconds: float = 0.1,
        max_fps: float = 60.0,
        max_size: int = 1920,
        refresh_share: float = 0.25,
    ) -> None:
        if not 0.0 < preview_scale <= 1.0:
            raise ValueError(f"preview_scale must lie in (0, 1], got {preview_scale!r}")
        if not 0 < max_fps < math.inf or not max_size >= 16 or not rest_seconds >= 0:
            raise ValueError(
                "max_fps must be a finite number > 0, max_size >= 16 and rest_seconds >= 0"
            )
        self.preview_scale = preview_scale
        self.rest_seconds = rest_seconds
        self.max_size = int(max_size)
        self.max_fps = float(max_fps)
        self._interval = 1.0 / self.max_fps  # seconds between two beats
        self.refresh = TimeBudget(0.0, refresh_share)
        self._beat = -math.inf  # the earliest time the next frame may start
        self._camera: BrowserCamera | None = None
        self._shown: FrameRequest | None = None

    @property
    def current(self) -> BrowserCamera | None:
        """The latest camera, or None before the first."""
        return self._camera

    def camera(self, camera: BrowserCamera) -> None:
        """Record a camera the browser reported."""
        if camera.width < 1 or camera.height < 1 or not math.isfinite(camera.fov):
            return  # a hidden or zero-size canvas: nothing to draw
        self._camera = camera

    def forget(self) -> None:
        """Drop what was shown (e.g. after splats replaced the renders): the next frame is due."""
        self._shown = None

    def resting(self, now: float) -> bool:
        """Whether the camera has not moved for ``rest_seconds``."""
        return self._camera is not None and now - self._camera.stamp >= self.rest_seconds

    def next_frame(self, now: float, version: int) -> FrameRequest | None:
        """The frame due at ``now`` for model ``version`` (e.g. the step count), or None."""
        camera, shown = self._camera, self._shown
        if camera is None or now < self._beat:
            return None
        rest = self.resting(now)
        full = fit_size(camera.width, camera.height, self.max_size)
        preview = fit_size(*full, self.max_size, self.preview_scale)
        size = full if rest else preview
        if shown is None or shown.camera != camera:
            return FrameRequest(camera, *size, not rest, version, now)
        if shown.preview and rest:
            return FrameRequest(camera, *full, False, version, now)
        if shown.version != version and self.refresh.ready(now):
            return FrameRequest(camera, *size, not rest, version, now)
        return None

    def seconds_to_next(self, now: float, version: int) -> float:
        """Seconds until :meth:`next_frame` has a frame without a new camera or model version
        (``inf``: only such a change brings one), or, while the camera moves, until the next
        beat (a moving camera's next report is likely to come before it): how long the frame
        loop may sleep.

        Example:
            >>> planner = FramePlanner(rest_seconds=0.2, max_fps=20)
            >>> planner.camera(BrowserCamera((1, 0, 0, 0), (0, 0, 0), 1.0, 64, 48, stamp=0.0))
            >>> planner.rendered(planner.next_frame(now=0.0, version=0), cost=0.0, now=0.0)
            >>> round(planner.seconds_to_next(now=0.02, version=0), 3)  # moving: the next beat
            0.03
            >>> full = planner.next_frame(now=0.2, version=0)
            >>> planner.rendered(full, cost=0.0, now=0.2)
            >>> planner.seconds_to_next(now=0.3, version=0)  # at rest: only a change brings one
            inf
        """
        camera, shown = self._camera, self._shown
        if camera is None:
            return math.inf
        beat = max(0.0, self._beat - now)
        if shown is None or shown.camera != camera:
            return beat
        waits = [math.inf]
        if shown.preview:  # moving: the full frame once it rests, and the next beat, since
            # a moving camera's next report is likely to come before it (no wake-up per report)
            waits.append(max(0.0, camera.stamp + self.rest_seconds - now))
            waits.append(self._beat_after(now) - now)
        if shown.version != version:
            waits.append(self.refresh.seconds_left(now))
        return max(beat, min(waits))

    def _beat_after(self, now: float) -> float:
        """The first beat later than ``now``."""
        if now < self._beat:
            return self._beat
        return self._beat + (math.floor((now - self._beat) / self._interval) + 1) * self._interval

    def rendered(self, request: FrameRequest, cost: float, now: float) -> None:
        """Record that ``request`` was rendered and sent, taking ``cost`` seconds."""
        self._shown = request
        self.refresh.spent(cost, now)
        interval = self._interval
        # the next beat follows this one's (at least half a beat after this frame, so that a
        # late frame is not followed back to back); a frame a beat late starts a new beat
        late = request.planned - self._beat
        if late < interval:
            self._beat = max(self._beat + interval, request.planned + interval / 2)
        else:
            self._beat = request.planned + interval
