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
rate is ``max_fps`` itself, not a little under it (:class:`Beat`). The browser tabs
of one viewer share the beat and the refresh budget (:class:`FramePacing`): each frame
costs a training run alike, whichever tab it is for, and :func:`pick_frame` chooses
which tab's frame comes next.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

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
    refresh: bool = False  # the camera's frame again, for a new model version


class Beat:
    """A steady beat of at most ``rate`` events a second: when the next one may start.

    The beat after an event follows the event's own beat, and comes at least half an
    interval after the event, so that a late event is not followed back to back: an
    event late by less than one interval keeps the beat, and the rate is ``rate``
    itself. An event a whole interval late starts a new beat.

    Example:
        >>> beat = Beat(10.0)
        >>> beat.ready(0.0), beat.mark(0.0), beat.ready(0.05), round(beat.wait(0.05), 3)
        (True, None, False, 0.05)
        >>> beat.mark(0.13)  # 0.03 s late: the next beat is still 0.2
        >>> round(beat.next, 3)
        0.2
    """

    def __init__(self, rate: float) -> None:
        if not 0 < rate < math.inf:
            raise ValueError(f"the rate must be a finite number > 0, got {rate!r}")
        self.interval = 1.0 / float(rate)
        self.next = -math.inf  # the earliest time the next event may start

    def ready(self, now: float) -> bool:
        """Whether an event may start at ``now``."""
        return now >= self.next

    def wait(self, now: float) -> float:
        """Seconds from ``now`` until an event may start (0 when it may now)."""
        return max(0.0, self.next - now)

    def after(self, now: float) -> float:
        """The first beat later than ``now``."""
        if now < self.next:
            return self.next
        return self.next + (math.floor((now - self.next) / self.interval) + 1) * self.interval

    def mark(self, planned: float) -> None:
        """Record an event planned for time ``planned``."""
        interval = self.interval
        if planned - self.next < interval:
            self.next = max(self.next + interval, planned + interval / 2)
        else:
            self.next = planned + interval


def fit_size(width: int, height: int, max_size: int, scale: float = 1.0) -> tuple[int, int]:
    """``(width, height)`` times ``scale``, shrunk so that neither side exceeds ``max_size``.

    Example:
        >>> fit_size(3840, 2160, 1920), fit_size(640, 480, 1920, 0.25)
        ((1920, 1080), (160, 120))
    """
    factor = min(scale, max_size / max(width, height))
    return max(1, round(width * factor)), max(1, round(height * factor))


class FramePacing:
    """The pace of frames that several browsers (one viewer's tabs) share: a :class:`Beat` of
    ``max_fps`` for every frame, and a share ``refresh_share`` of the wall time at most for
    the frames' render time while training changes the model (a ``TimeBudget``).

    Example:
        >>> pacing = FramePacing(max_fps=30, refresh_share=0.25)
        >>> a, b = FramePlanner(pacing=pacing), FramePlanner(pacing=pacing)
        >>> a.beat is b.beat and a.refresh is b.refresh
        True
    """

    def __init__(self, max_fps: float = 60.0, refresh_share: float = 0.25) -> None:
        if not 0 < max_fps < math.inf:
            raise ValueError(f"max_fps must be a finite number > 0, got {max_fps!r}")
        self.max_fps = float(max_fps)
        self.beat = Beat(self.max_fps)
        self.refresh = TimeBudget(0.0, refresh_share)


class FramePlanner:
    """Decides, for one browser, when a frame is due and at which size.

    Args:
        preview_scale: size of a preview relative to the full frame (while moving).
        rest_seconds: a camera unchanged this long is at rest: the full frame follows.
        max_fps: at most this many frames a second (previews while moving, refreshes while
            training), on a steady beat.
        max_size: longest side of a full frame in pixels.
        refresh_share: largest share of wall time spent on refreshes driven by training.
        pacing: a :class:`FramePacing` shared with other planners, whose ``max_fps`` and
            ``refresh_share`` then apply to all of them together instead of the two above
            (default None: a pacing of this planner's own).

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
        pacing: FramePacing | None = None,
    ) -> None:
        if not 0.0 < preview_scale <= 1.0:
            raise ValueError(f"preview_scale must lie in (0, 1], got {preview_scale!r}")
        if not max_size >= 16 or not rest_seconds >= 0:
            raise ValueError(
                f"max_size must be >= 16 and rest_seconds >= 0, got {max_size!r}, {rest_seconds!r}"
            )
        self.preview_scale = preview_scale
        self.rest_seconds = rest_seconds
        self.max_size = int(max_size)
        if pacing is None:  # checks max_fps
            pacing = FramePacing(max_fps, refresh_share)
        self.max_fps = pacing.max_fps
        self.beat = pacing.beat  # the earliest time the next frame may start
        self.refresh = pacing.refresh
        self.served_at = -math.inf  # when a frame was last sent (or failed) for this browser
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
        if camera is None or not self.beat.ready(now):
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
            return FrameRequest(camera, *size, not rest, version, now, refresh=True)
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
        beat = self.beat.wait(now)
        if shown is None or shown.camera != camera:
            return beat
        waits = [math.inf]
        if shown.preview:  # moving: the full frame once it rests, and the next beat, since
            # a moving camera's next report is likely to come before it (no wake-up per report)
            waits.append(max(0.0, camera.stamp + self.rest_seconds - now))
            waits.append(self.beat.after(now) - now)
        if shown.version != version:
            waits.append(self.refresh.seconds_left(now))
        return max(beat, min(waits))

    def rendered(self, request: FrameRequest, cost: float, now: float) -> None:
        """Record that ``request`` was rendered and sent, taking ``cost`` seconds."""
        self._shown = request
        self.served_at = now
        self.refresh.spent(cost, now)
        self.beat.mark(request.planned)


Key = TypeVar("Key")


def pick_frame(
    due: Sequence[tuple[Key, FramePlanner, FrameRequest]],
    now: float,
    patience: float = 0.5,
) -> tuple[Key, FramePlanner, FrameRequest]:
    """The first to send of several tabs' due frames ``(key, planner, request)`` at ``now``:
    a moving camera's preview, then a full frame a camera waits for, then a refresh for a
    new model; among equals, the tab served longest ago. A tab not served for ``patience``
    seconds comes before all of these, so that a drag in one tab slows the others down to
    a frame every ``patience`` seconds but never freezes them.

    A viewer's tabs share its frame rate (each frame costs a training run alike), so a
    tab being dragged is served before tabs that only follow training.

    Example:
        >>> cam = BrowserCamera((1.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0), 1.0, 64, 48, 0.0)
        >>> a, b = FramePlanner(), FramePlanner()
        >>> a.served_at = b.served_at = 9.9
        >>> refresh = FrameRequest(cam, 64, 48, preview=False, version=2, refresh=True)
        >>> preview = FrameRequest(cam, 16, 12, preview=True, version=2)
        >>> pick_frame([("a", a, refresh), ("b", b, preview)], now=10.0)[0]
        'b'
        >>> pick_frame([("a", a, refresh), ("b", b, preview)], now=10.5)[0]  # a waited 0.6 s
        'a'
    """
    if not due:
        raise ValueError("pick_frame needs at least one due frame")

    def rank(entry: tuple[Key, FramePlanner, FrameRequest]) -> tuple[int, float]:
        _, planner, request = entry
        if now - planner.served_at >= patience:
            return -1, planner.served_at
        kind = 2 if request.refresh else 0 if request.preview else 1
        return kind, planner.served_at

    return min(due, key=rank)
