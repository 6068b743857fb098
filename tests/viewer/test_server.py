"""The viewer through a raw websocket client speaking viser's protocol (no browser)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
import torch

from gsnb.live.imaging import to_uint8
from gsnb.model import GaussianModel
from gsnb.train import TrainConfig, Trainer
from gsnb.train.exposure import apply_exposure
from gsnb.viewer import Viewer
from gsnb.viewer.cameras import pose_of_view, view_from_pose
from gsnb.viewer.client import ViewerClient, look_from
from gsnb.viewer.server import STATUS_SECONDS, ViewerPortError, port_is_free
from gsnb.viewer.stream import BrowserCamera, FramePlanner
from tests.train.test_exported import drift_exposures

EYE = (0.5, -4.0, 2.0)
FOV = 0.9


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.02)


def find(client: ViewerClient, kind: str, label: str | None = None, new: bool = False) -> dict:
    """The first message of ``kind`` (with GUI ``label``) received so far (unless ``new``) or
    arriving within 10 s."""

    def match(m: dict) -> bool:
        return m["type"] == kind and (label is None or m.get("props", {}).get("label") == label)

    for message in [] if new else client.received:
        if match(message):
            return message
    for message in client.messages(10.0):
        if match(message):
            return message
    raise AssertionError(f"no {kind} {label or ''} within 10 s")


def test_streams_a_preview_then_the_full_render_at_the_browser_camera(trainer, viewers):
    viewer = viewers(trainer, rest_seconds=2.0)  # a slow machine still shows the preview first
    wxyz = look_from(EYE, (0.0, 0.0, 0.5))
    with ViewerClient(viewer.url) as client:
        client.send_camera(wxyz, EYE, FOV, 64, 48)
        preview = client.next_frame()
        assert preview.shape == (12, 16, 3)
        full = client.next_frame(min_width=64)
        assert full.shape == (48, 64, 3)
    expected = to_uint8(trainer.render_view(view_from_pose(wxyz, EYE, FOV, 64, 48)).rgb[0])
    elsewhere = to_uint8(
        trainer.render_view(
            view_from_pose(look_from((3, 3, 1), (0, 0, 0)), (3, 3, 1), FOV, 64, 48)
        ).rgb[0]
    )
    error = np.abs(full.astype(float) - expected).mean()
    assert error < 4.0  # JPEG
    assert np.abs(full.astype(float) - elsewhere).mean() > 5 * error
    assert viewer.last_error is None


@pytest.mark.parametrize("frame_process", [False, True])
def test_an_exposure_run_is_shown_through_its_mean_exposure(wide_scene, viewers, frame_process):
    run = Trainer(wide_scene, TrainConfig(steps=100, sh_degree=1, device="cpu", exposure=True))
    mean = drift_exposures(run)  # learned transforms, each its own
    viewer = viewers(run, rest_seconds=0.0, frame_process=frame_process, jpeg_quality=100)
    if frame_process:
        viewer.frames.wait_ready()
    wxyz = look_from(EYE, (0.0, 0.0, 0.5))
    with ViewerClient(viewer.url) as client:
        client.send_camera(wxyz, EYE, FOV, 64, 48)
        full = client.next_frame(min_width=64).astype(float)
    stored = run.render_view(view_from_pose(wxyz, EYE, FOV, 64, 48)).rgb[0]
    assert viewer.frame_timings()["process"] == float(frame_process)
    assert np.abs(full - to_uint8(apply_exposure(stored, mean))).mean() < 4.0  # JPEG
    assert np.abs(full - to_uint8(stored)).mean() > 20.0
    assert viewer.last_error is None
    if not frame_process:  # the splats mode (the browser draws them) takes the exported colours
        from gsnb.train.exported import exported_model

        snapshot = viewer._model_snapshot().splats["sh0"]
        torch.testing.assert_close(snapshot, exported_model(run).splats["sh0"])
        assert (snapshot - run.model.splats["sh0"].detach()).abs().max() > 0.1


def test_frames_follow_training_without_changing_it(trainer, wide_scene, viewers):
    headless = Trainer(wide_scene, TrainConfig(steps=10_000, sh_degree=1, device="cpu", seed=3))
    headless.run(12)
    viewer = viewers(trainer, max_fps=50, refresh_share=0.9, rest_seconds=0.0)
    # Steps of at least 50 ms, however fast the machine: the viewer has time to refresh.
    trainer.on_step(lambda _metrics: time.sleep(0.05))
    frames = []
    with ViewerClient(viewer.url) as client:
        client.send_camera(look_from(EYE, (0, 0, 0.5)), EYE, FOV, 32, 24)
        frames.append(client.next_frame())
        trainer.start(steps=12)
        while trainer.running:
            try:
                frames.append(client.next_frame(timeout=5))
            except TimeoutError:
                if trainer.running:  # no frame for 5 s while the model kept changing
                    raise
        trainer.wait()
    assert trainer.step_count == 12 and len(frames) >= 3
    assert len({f.tobytes() for f in frames}) >= 3  # the picture changes as training goes on
    for name, value in trainer.model.splats.items():
        assert torch.equal(value, headless.model.splats[name]), name


def test_the_knobs_in_the_browser_reach_the_trainer_and_follow_it(trainer, viewers):
    viewer = viewers(trainer)
    with ViewerClient(viewer.url) as client:
        client.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        names, labels = {k.name for k in trainer.knobs()}, set()
        for m in client.messages(30.0):
            if m["type"].startswith("Gui") and "label" in m.get("props", {}):
                labels.add(m["props"]["label"])
            if names <= labels:
                break
        assert names <= labels
        slider = find(client, "GuiSliderMessage", "ssim_lambda")
        client.send({"type": "GuiUpdateMessage", "uuid": slider["uuid"], "updates": {"value": 0.5}})
        wait_until(lambda: trainer.pending_knobs == {"ssim_lambda": 0.5})
        trainer.step()
        assert trainer.config.ssim_lambda == 0.5
        box = find(client, "GuiNumberMessage", "refine_every")
        trainer.set(refine_every=7)
        for message in client.messages(15.0):
            if message["type"] == "GuiUpdateMessage" and message["uuid"] == box["uuid"]:
                assert message["updates"] == {"value": 7}
                break
        else:
            raise AssertionError("the browser never saw refine_every=7")
        assert trainer.pending_knobs == {"refine_every": 7}  # no echo of a stale value


def test_clicking_a_training_camera_moves_the_view_there(trainer, viewers):
    viewer = viewers(trainer)
    assert len(viewer.frustums) == len(trainer.dataset.train) + len(trainer.dataset.test)
    with ViewerClient(viewer.url) as client:
        client.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        client.next_frame()
        client.send(
            {
                "type": "SceneNodeClickMessage",
                "name": "/cameras/train/0002",
                "instance_index": None,
                "ray_origin": list(EYE),
                "ray_direction": [0.0, 0.0, -1.0],
                "screen_pos": [0.5, 0.5],
                "modifier": None,
                "owner": "",
            }
        )
        moved = find(client, "SetCameraPositionMessage", new=True)
        assert np.allclose(moved["position"], pose_of_view(trainer.dataset.train[2])[1], atol=1e-5)


def test_a_model_is_shown_as_splats_and_can_be_rendered(viewers):
    g = torch.Generator().manual_seed(1)
    model = GaussianModel.from_points(
        torch.randn(40, 3, generator=g), torch.rand(40, 3, generator=g)
    )
    viewer = viewers(model)
    assert viewer.mode == "splats"
    with ViewerClient(viewer.url) as client:
        client.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        splats = find(client, "GaussianSplatsMessage")
        rows = splats["props"]["buffer"].reshape(40, 8)
        centres = rows[:, :3].copy().view(np.float32)
        assert np.array_equal(centres, model.splats["means"].detach().numpy())
        viewer.show_renders()
        assert client.next_frame(min_width=32).shape == (24, 32, 3)
        assert find(client, "RemoveSceneNodeMessage", new=False)["name"] == "/splats"


def test_a_busy_port_is_refused_clearly_and_stop_frees_the_port(viewers):
    model = GaussianModel.from_points(torch.rand(5, 3), torch.rand(5, 3), sh_degree=0)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ViewerPortError, match=rf"port {port} on 127\.0\.0\.1 is busy.*port=0"):
            Viewer(model, port=port)
    viewer = viewers(model, port=port)  # free again: taken exactly
    assert viewer.port == port and not port_is_free("127.0.0.1", port)
    other = viewers(model, port=0)
    assert other.port not in (0, port)
    viewer.stop()
    assert port_is_free("127.0.0.1", port)
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()


def test_show_prints_the_url_outside_a_notebook_and_bad_input_is_refused(viewers, capsys):
    model = GaussianModel.from_points(torch.rand(5, 3), torch.rand(5, 3), sh_degree=0)
    viewer = viewers(model, mode="render")
    viewer.show()
    assert capsys.readouterr().out.strip() == f"gsnb viewer: open {viewer.url}"
    assert "render" in repr(viewer)
    with pytest.raises(TypeError, match="Trainer or a GaussianModel"):
        Viewer("scene.ply")
    with pytest.raises(ValueError, match="mode must be"):
        Viewer(model, mode="points")
    with pytest.raises(ValueError, match="port must lie"):
        Viewer(model, port=70000)


def test_a_planner_left_by_a_client_that_is_gone_is_dropped(trainer, viewers):
    """viser may run a client's connect callback after its disconnect: the planner that
    callback leaves must not keep the frame loop busy for a browser that is not there."""
    viewer = viewers(trainer)
    orphan = FramePlanner()
    orphan.camera(BrowserCamera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24, time.monotonic()))
    with viewer._clients_lock:
        viewer._planners[987_654] = orphan
    viewer._wake.set()
    wait_until(lambda: 987_654 not in viewer._planners, timeout=10)
    assert viewer.frames_sent == 0 and viewer.last_error is None


class CountingEvent(threading.Event):
    """An event that counts the waits that ended (the frame loop's wake-ups)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0

    def wait(self, timeout: float | None = None) -> bool:
        woken = super().wait(timeout)
        self.waits += 1
        return woken


def test_a_drag_gets_frames_at_max_fps_and_wakes_the_frame_loop_once_a_frame(viewers):
    model = GaussianModel.from_points(torch.rand(60, 3) - 0.5, torch.rand(60, 3), sh_degree=0)
    viewer = viewers(model, mode="render", max_fps=20, rest_seconds=30.0)
    with ViewerClient(viewer.url) as client:
        client.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        client.next_frame()
        counting, previous = CountingEvent(), viewer._wake
        viewer._wake = counting
        previous.set()  # the loop's current wait ends and the next one is counted
        sent, frames0, start = 0, viewer.frames_sent, time.monotonic()
        while (now := time.monotonic()) - start < 2.0:
            if sent < 100 * (now - start):  # a drag reported 100 times a second
                eye = (EYE[0] + 0.001 * sent, *EYE[1:])
                client.send_camera(look_from(eye, (0, 0, 0)), eye, FOV, 32, 24)
                sent += 1
            for _ in client.messages(0.002):  # read what came (the frames among it)
                pass
        waits, frames = counting.waits, viewer.frames_sent - frames0  # both counted by the server
        elapsed = time.monotonic() - start
    assert sent >= 100
    assert 10 <= frames <= elapsed * 20 + 2  # the beat, not the drag, sets the rate
    # one wake-up a frame, the status line's and a few polls that find the drag paused
    assert waits <= frames + elapsed / STATUS_SECONDS + 8 < sent / 2
    assert viewer.last_error is None


def test_a_camera_moved_at_rest_gets_its_frame_at_once(viewers, monkeypatch):
    import gsnb.viewer.server as server

    monkeypatch.setattr(server, "STATUS_SECONDS", 60.0)  # no status tick wakes the loop
    model = GaussianModel.from_points(torch.rand(60, 3) - 0.5, torch.rand(60, 3), sh_degree=0)
    viewer = viewers(model, mode="render", rest_seconds=0.0)
    with ViewerClient(viewer.url) as client:
        client.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        client.next_frame()
        time.sleep(0.5)  # at rest, the full frame shown: the loop sleeps until a change
        for step in range(3):
            eye = (EYE[0] + 0.5 * (step + 1), *EYE[1:])
            sent = time.monotonic()
            client.send_camera(look_from(eye, (0, 0, 0)), eye, FOV, 32, 24)
            client.next_frame(timeout=10)
            assert time.monotonic() - sent < 5.0  # the camera woke the loop: not the 60 s tick
            time.sleep(0.3)
    assert viewer.last_error is None


def test_camera_reports_are_handled_on_the_event_loop_not_a_pool_thread(viewers, monkeypatch):
    # A plain callback would run in viser's thread pool: one more thread to wake (and to
    # take the interpreter's lock from training) for each of a drag's 60 reports a second.
    import asyncio

    model = GaussianModel.from_points(torch.rand(60, 3) - 0.5, torch.rand(60, 3), sh_degree=0)
    viewer = viewers(model, mode="render")
    handled: list[tuple[str, bool]] = []
    original = viewer._camera_moved

    def recording(client_id: int, camera: object) -> None:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        handled.append((threading.current_thread().name, on_loop))
        original(client_id, camera)

    monkeypatch.setattr(viewer, "_camera_moved", recording)
    with ViewerClient(viewer.url) as client:
        client.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        client.next_frame()
        for step in range(5):
            eye = (EYE[0] + 0.1 * (step + 1), *EYE[1:])
            client.send_camera(look_from(eye, (0, 0, 0)), eye, FOV, 32, 24)
        wait_until(lambda: len(handled) >= 6)
    reports = handled[1:]  # the first is the connect callback's own look at the camera
    assert reports and all(on_loop for _, on_loop in reports), handled
    assert not any(name.startswith("ThreadPoolExecutor") for name, _ in reports), handled


def test_two_tabs_share_max_fps_and_both_get_frames(viewers):
    # Each frame costs a training run the same, whichever tab it is for: two tabs dragging
    # get max_fps frames a second between them, not each.
    model = GaussianModel.from_points(torch.rand(60, 3) - 0.5, torch.rand(60, 3), sh_degree=0)
    viewer = viewers(model, mode="render", max_fps=20, rest_seconds=30.0)
    with ViewerClient(viewer.url) as one, ViewerClient(viewer.url) as two:
        for client in (one, two):
            client.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
            client.next_frame()
        got = {id(one): 0, id(two): 0}
        sent, frames0, start = 0, viewer.frames_sent, time.monotonic()
        while (now := time.monotonic()) - start < 2.0:
            if sent < 100 * (now - start):  # both tabs dragged, 50 reports a second each
                eye = (EYE[0] + 0.001 * sent, *EYE[1:])
                client = (one, two)[sent % 2]
                client.send_camera(look_from(eye, (0, 0, 0)), eye, FOV, 32, 24)
                sent += 1
            for client in (one, two):
                for message in client.messages(0.001):
                    got[id(client)] += message["type"] == "BackgroundImageMessage"
        frames, elapsed = viewer.frames_sent - frames0, time.monotonic() - start
    assert 10 <= frames <= elapsed * 20 + 2  # 20 a second in all, not 20 for each tab
    assert min(got.values()) >= 0.3 * frames  # neither tab starves
    assert viewer.last_error is None


def test_a_tab_whose_frames_fail_does_not_starve_the_others(viewers):
    # e.g. a canvas too large for the GPU's memory in one tab: the other tabs go on
    model = GaussianModel.from_points(torch.rand(60, 3) - 0.5, torch.rand(60, 3), sh_degree=0)
    viewer = viewers(model, mode="render", rest_seconds=0.0)
    render = viewer.render

    def failing_for_wide_canvases(view):
        if view.width == 40:
            raise RuntimeError("out of memory (a test's)")
        return render(view)

    viewer.render = failing_for_wide_canvases
    with ViewerClient(viewer.url) as good, ViewerClient(viewer.url) as bad:
        bad.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 40, 30)
        good.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        assert good.next_frame(timeout=10).shape == (24, 32, 3)
        for step in range(3):
            eye = (EYE[0] + 0.5 * (step + 1), *EYE[1:])
            good.send_camera(look_from(eye, (0, 0, 0)), eye, FOV, 32, 24)
            good.next_frame(timeout=10)
    assert isinstance(viewer.last_error, RuntimeError)  # the bad tab's frames did fail
