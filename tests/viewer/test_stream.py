"""Tests for gsnb/viewer/stream.py: previews while moving, full frames at rest, refresh budget."""

from __future__ import annotations

import itertools

import pytest

from gsnb.viewer.stream import (
    Beat,
    BrowserCamera,
    FramePacing,
    FramePlanner,
    FrameRequest,
    fit_size,
    pick_frame,
)


def camera(stamp: float, x: float = 0.0, width: int = 640, height: int = 360) -> BrowserCamera:
    return BrowserCamera((1.0, 0.0, 0.0, 0.0), (x, 0.0, 0.0), 1.0, width, height, stamp)


def test_fit_size():
    assert fit_size(1920, 1080, 1920) == (1920, 1080)
    assert fit_size(3840, 2160, 1920) == (1920, 1080)
    assert fit_size(1920, 1080, 1920, 0.25) == (480, 270)
    assert fit_size(10, 10, 1920, 0.01) == (1, 1)


def test_moving_camera_gets_previews_then_the_full_frame_at_rest():
    planner = FramePlanner(preview_scale=0.25, rest_seconds=0.2)
    assert planner.next_frame(0.0, version=0) is None  # no camera yet
    sizes = []
    for i in range(10):  # a drag: a new camera every 50 ms
        now = i * 0.05
        planner.camera(camera(now, x=i))
        request = planner.next_frame(now + 0.001, version=0)
        assert request is not None and request.preview
        sizes.append((request.width, request.height))
        planner.rendered(request, cost=0.001, now=now + 0.002)
        assert planner.next_frame(now + 0.01, version=0) is None
    assert set(sizes) == {(160, 90)}
    assert planner.next_frame(0.45 + 0.1, version=0) is None  # not yet at rest
    full = planner.next_frame(0.45 + 0.2, version=0)
    assert (full.width, full.height, full.preview) == (640, 360, False)
    planner.rendered(full, cost=0.01, now=0.7)
    assert planner.next_frame(5.0, version=0) is None  # nothing changed


def test_training_refreshes_are_capped_by_rate_and_time_share():
    planner = FramePlanner(max_fps=10, refresh_share=0.25, rest_seconds=0.0)
    planner.camera(camera(0.0))
    request = planner.next_frame(0.0, version=0)
    assert not request.preview  # a resting camera: straight to full size
    cost = 0.1  # each render holds the trainer's lock for 100 ms
    planner.rendered(request, cost, now=cost)
    now, frames, busy, version = cost, 0, 0.0, 0
    while now < 20.0:
        version += 1  # the model changes every 10 ms
        request = planner.next_frame(now, version)
        if request is not None:
            assert request.version == version and not request.preview
            frames += 1
            busy += cost
            now += cost
            planner.rendered(request, cost, now)
        now += 0.01
    assert busy / now <= 0.25 + 0.01
    assert frames >= 0.9 * 20.0 * 0.25 / cost
    cheap = FramePlanner(max_fps=10, rest_seconds=0.0)
    cheap.camera(camera(0.0))
    shown = 0
    for tick in range(1000):  # 10 s, cheap renders: the fps cap rules
        request = cheap.next_frame(tick * 0.01, version=tick)
        if request is not None:
            cheap.rendered(request, 0.001, tick * 0.01)
            shown += 1
    assert 90 <= shown <= 101


def test_size_caps_hidden_canvases_and_forget():
    planner = FramePlanner(max_size=1000, rest_seconds=0.0)
    planner.camera(camera(0.0, width=0, height=0))
    assert planner.current is None
    planner.camera(camera(0.0, width=4000, height=2000))
    request = planner.next_frame(1.0, version=0)
    assert (request.width, request.height) == (1000, 500)
    planner.rendered(request, 0.01, 1.0)
    assert planner.next_frame(2.0, version=0) is None
    planner.forget()
    assert planner.next_frame(2.0, version=0) is not None
    with pytest.raises(ValueError, match="preview_scale"):
        FramePlanner(preview_scale=0.0)
    with pytest.raises(ValueError, match="max_fps"):
        FramePlanner(max_fps=0)
    with pytest.raises(ValueError, match="finite"):
        FramePlanner(max_fps=float("inf"))


def test_every_frame_keeps_to_the_beat_of_max_fps_previews_included():
    planner = FramePlanner(max_fps=30, rest_seconds=0.5)
    shown, now, tick = [], 0.0, 1 / 240
    while now < 2.0:  # a drag reported 120 times a second, the loop waking at 240 Hz
        if round(now / tick) % 2 == 0:
            planner.camera(camera(now, x=now))
        request = planner.next_frame(now + 0.0004, version=0)  # a little late: wake-up jitter
        if request is not None:
            assert request.preview
            planner.rendered(request, cost=0.002, now=now + 0.003)
            shown.append(now)
        now += tick
    assert len(shown) in (60, 61)  # 30 a second, not a little under: late frames keep the beat
    gaps = [b - a for a, b in itertools.pairwise(shown)]
    assert min(gaps) >= 1 / 30 - tick - 1e-9


def test_a_frame_more_than_a_beat_late_starts_a_new_beat():
    planner = FramePlanner(max_fps=10, rest_seconds=10.0)
    planner.camera(camera(0.0))
    first = planner.next_frame(0.0, version=0)
    planner.rendered(first, cost=0.0, now=0.0)
    planner.camera(camera(0.05, x=1.0))
    assert planner.next_frame(0.05, version=0) is None  # before the beat
    assert 0.049 < planner.seconds_to_next(0.05, version=0) < 0.051
    late = planner.next_frame(0.35, version=0)  # no frame for a long while, then one
    planner.rendered(late, cost=0.0, now=0.35)
    planner.camera(camera(0.36, x=2.0))
    assert planner.next_frame(0.40, version=0) is None  # no catch-up burst after a pause
    assert planner.next_frame(0.45, version=0) is not None


def test_a_beat_keeps_its_rate_refuses_bad_rates_and_says_when_the_next_is():
    beat = Beat(20.0)
    assert beat.ready(0.0) and beat.wait(0.0) == 0.0
    beat.mark(0.0)
    assert not beat.ready(0.049) and beat.ready(0.05)
    assert beat.after(0.01) == pytest.approx(0.05) and beat.after(0.06) == pytest.approx(0.10)
    beat.mark(0.06)  # 10 ms late: the beat stays on its grid
    assert beat.next == pytest.approx(0.10)
    beat.mark(0.3)  # a long pause: a new beat, no burst to catch up
    assert beat.next == pytest.approx(0.35)
    for rate in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="finite number > 0"):
            Beat(rate)


def test_pick_frame_serves_a_moving_camera_then_a_waiting_full_frame_then_refreshes():
    cam = camera(0.0)
    planners = [FramePlanner() for _ in range(4)]
    for p, served in zip(planners, [10.0, 9.8, 9.9, 9.7], strict=True):
        p.served_at = served
    refresh = FrameRequest(cam, 640, 360, preview=False, version=5, refresh=True)
    full = FrameRequest(cam, 640, 360, preview=False, version=5)
    preview = FrameRequest(cam, 160, 90, preview=True, version=5)
    entries = [
        ("refresh, served at 9.7", planners[3], refresh),
        ("full", planners[0], full),
        ("preview, served at 9.9", planners[2], preview),
        ("preview, served at 9.8", planners[1], preview),
    ]

    def order(now: float) -> list[str]:
        due, picked = list(entries), []
        while due:
            chosen = pick_frame(due, now)
            picked.append(chosen[0])
            due.remove(chosen)
        return picked

    # within half a second of their last frames: by kind, then the longest waiting
    assert order(10.1) == [
        "preview, served at 9.8", "preview, served at 9.9", "full", "refresh, served at 9.7"
    ]  # fmt: skip
    # the refresh has waited 0.55 s: it goes first, so no tab freezes during another's drag
    assert order(10.25)[0] == "refresh, served at 9.7"
    with pytest.raises(ValueError, match="at least one"):
        pick_frame([], 0.0)


def test_planners_sharing_a_pacing_share_its_beat_and_refresh_budget():
    pacing = FramePacing(max_fps=10, refresh_share=0.25)
    a, b = (
        FramePlanner(rest_seconds=0.0, pacing=pacing),
        FramePlanner(rest_seconds=0.0, pacing=pacing),
    )
    for planner in (a, b):
        planner.camera(camera(0.0))
    first = a.next_frame(0.0, version=0)
    a.rendered(first, cost=0.01, now=0.01)
    assert b.next_frame(0.05, version=0) is None  # a's frame took this beat from b too
    second = b.next_frame(0.1, version=0)
    assert second is not None and not second.refresh
    b.rendered(second, cost=0.1, now=0.2)  # a slow frame: the refresh budget waits 0.3 s
    assert a.next_frame(0.3, version=1) is None  # a's refresh waits for b's frame's share
    assert 0.19 < a.seconds_to_next(0.3, version=1) < 0.21
    refresh = a.next_frame(0.5, version=1)
    assert refresh is not None and refresh.refresh
    alone = FramePlanner(rest_seconds=0.0, max_fps=10)
    assert alone.beat is not a.beat and alone.max_fps == 10.0
    with pytest.raises(ValueError, match="finite number > 0"):
        FramePacing(max_fps=0.0)
