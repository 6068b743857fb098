"""Frames drawn in a process of their own, from Gaussians shared in place (CPU: shared memory)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from PIL import Image

from gsnb.live.imaging import to_uint8
from gsnb.model import GaussianModel
from gsnb.train.pose_refine import MovedGaussians
from gsnb.train.rendering import BackendRenderer, render_model
from gsnb.viewer import frames as frames_module
from gsnb.viewer.cameras import view_from_pose
from gsnb.viewer.client import ViewerClient, look_from
from gsnb.viewer.frames import FrameProcess, FrameProcessError

EYE = (0.5, -4.0, 2.0)
FOV = 0.9


def decoded(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def rendered(model: GaussianModel, view, background=(0.0, 0.0, 0.0)) -> np.ndarray:
    with torch.no_grad():
        out = model.render(
            view.viewmat[None], view.K[None], view.width, view.height,
            backgrounds=torch.tensor(background), backend="reference",
        )  # fmt: skip
    return to_uint8(out.rgb[0])


@pytest.fixture
def frames():
    made = FrameProcess(torch.device("cpu"), backend="reference")
    yield made
    made.close()


def a_frame(frames: FrameProcess, view, degree: int = 0) -> np.ndarray:
    data = frames.frame(view.viewmat, view.K, view.width, view.height, sh_degree=degree,
                        background=(0.0, 0.0, 0.0))  # fmt: skip
    return decoded(data)


def test_frames_follow_the_shared_tensors_in_place_and_when_replaced(frames):
    torch.manual_seed(0)
    model = GaussianModel.from_points(torch.rand(80, 3) - 0.5, torch.rand(80, 3), sh_degree=0)
    with torch.no_grad():  # large opaque splats: a picture worth comparing
        model.splats["opacities"].fill_(3.0)
        model.splats["scales"].add_(1.0)
    view = view_from_pose(look_from(EYE, (0, 0, 0)), EYE, FOV, 40, 30)
    frames.wait_ready()
    assert frames.share(model.splats) and not frames.share(model.splats)  # sent once
    first = a_frame(frames, view)
    assert np.abs(first.astype(float) - rendered(model, view)).mean() < 4.0  # JPEG
    assert frames.last["render"] > 0 and frames.last["wait"] >= frames.last["render"]

    with torch.no_grad():  # training's in-place update: seen without sharing again
        model.splats["sh0"].sub_(0.5)
    assert frames.holds(model.splats)
    darker = a_frame(frames, view)
    assert np.abs(darker.astype(float) - rendered(model, view)).mean() < 4.0
    assert darker.mean() < first.mean() - 5

    # a densification: other tensors (and another count), which the child does not hold yet
    bigger = GaussianModel.from_points(torch.rand(200, 3) - 0.5, torch.rand(200, 3), sh_degree=0)
    assert not frames.holds(bigger.splats)
    assert frames.share(bigger.splats)
    again = a_frame(frames, view)
    assert np.abs(again.astype(float) - rendered(bigger, view)).mean() < 4.0


def test_a_colour_transform_applies_to_the_frame(frames):
    torch.manual_seed(1)
    model = GaussianModel.from_points(torch.rand(80, 3) - 0.5, torch.rand(80, 3), sh_degree=0)
    with torch.no_grad():
        model.splats["opacities"].fill_(3.0)
        model.splats["scales"].add_(1.0)
    view = view_from_pose(look_from(EYE, (0, 0, 0)), EYE, FOV, 40, 30)
    frames.wait_ready()
    frames.share(model.splats)
    matrix = torch.tensor([[0.5, 0.0, 0.0, 0.3], [0.0, 0.8, 0.1, 0.0], [0.0, 0.0, 1.0, -0.1]])
    data = frames.frame(view.viewmat, view.K, view.width, view.height, sh_degree=0,
                        background=(0.0, 0.0, 0.0), colour=matrix)  # fmt: skip
    with torch.no_grad():
        out = model.render(view.viewmat[None], view.K[None], view.width, view.height,
                           backgrounds=torch.zeros(3), backend="reference")  # fmt: skip
    expected = to_uint8(out.rgb[0] @ matrix[:, :3].T + matrix[:, 3])
    assert np.abs(decoded(data).astype(float) - expected).mean() < 4.0  # JPEG
    assert np.abs(a_frame(frames, view).astype(float) - expected).mean() > 10.0


def test_bad_frames_raise_and_the_process_goes_on(frames):
    frames.wait_ready()
    model = GaussianModel.from_points(torch.rand(20, 3) - 0.5, torch.rand(20, 3), sh_degree=0)
    view = view_from_pose(look_from(EYE, (0, 0, 0)), EYE, FOV, 16, 12)
    with pytest.raises(FrameProcessError, match="share"):
        a_frame(frames, view)  # nothing shared yet
    frames.share(model.splats)
    with pytest.raises(FrameProcessError, match=r"degree"):
        a_frame(frames, view, degree=3)  # more than the model has
    assert a_frame(frames, view).shape == (12, 16, 3)
    assert frames.failed is None


def test_a_dead_process_says_so_and_never_hangs(frames):
    frames.wait_ready()
    model = GaussianModel.from_points(torch.rand(20, 3) - 0.5, torch.rand(20, 3), sh_degree=0)
    frames.share(model.splats)
    frames.process.kill()
    frames.process.join(10)
    view = view_from_pose(look_from(EYE, (0, 0, 0)), EYE, FOV, 16, 12)
    start = time.monotonic()
    with pytest.raises(FrameProcessError, match=r"gone|drew nothing|exited"):
        a_frame(frames, view)
    assert time.monotonic() - start < 5
    assert frames.failed and not frames.ready()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="quality"):
        FrameProcess(torch.device("cpu"), jpeg_quality=0)


def test_the_viewer_draws_a_trainers_frames_in_the_process_and_stops_it(trainer, viewers):
    viewer = viewers(trainer, rest_seconds=0.0, frame_process=True, jpeg_quality=100)
    frames = viewer.frames
    assert frames is not None
    frames.wait_ready()
    wxyz = look_from(EYE, (0.0, 0.0, 0.5))
    moved = (EYE[0] + 0.05, *EYE[1:])
    with ViewerClient(viewer.url) as client:
        client.send_camera(wxyz, EYE, FOV, 64, 48)
        client.next_frame(min_width=64)
        stale = {k: v.detach().clone() for k, v in trainer.model.splats.items()}
        trainer.run(20)  # the Gaussians change in place; the next frame shows the new ones
        list(client.messages(2.0))  # the refreshes drawn while it trained
        client.send_camera(wxyz, moved, FOV, 64, 48)
        after = client.next_frame(min_width=64)
    assert viewer.frame_timings()["process"] == 1.0  # every frame came from the process
    assert viewer.last_error is None
    view = view_from_pose(wxyz, moved, FOV, 64, 48)
    now = to_uint8(trainer.render_view(view).rgb[0])
    then = MovedGaussians(stale, trainer.model.background)
    with torch.no_grad():
        before = render_model(
            then, BackendRenderer("reference"), view.viewmat[None], view.K[None], 64, 48,
            sh_degree=trainer.sh_degree_now, background=trainer.background,
        )  # fmt: skip
    error = np.abs(after.astype(float) - now).mean()
    assert error < 1.5  # JPEG at quality 100
    assert np.abs(after.astype(float) - to_uint8(before.rgb[0])).mean() > 5 * error
    process = frames.process
    viewer.stop()
    assert viewer.frames is None and not process.is_alive()


def test_a_script_without_a_main_guard_does_not_run_again_in_the_child(tmp_path):
    # spawn imports the parent's __main__ in the child: a script that makes a viewer at its
    # top level would load, train and serve once more there
    script = tmp_path / "script.py"
    script.write_text(
        "import torch\n"
        "from gsnb.model import GaussianModel\n"
        "from gsnb.viewer.frames import FrameProcess\n"
        "print('top level ran', flush=True)\n"
        "model = GaussianModel.from_points(torch.rand(20, 3) + 2, torch.rand(20, 3))\n"
        "frames = FrameProcess('cpu', backend='reference')\n"
        "frames.wait_ready()\n"
        "frames.share(model.splats)\n"
        "K = [[16.0, 0, 8], [0, 16, 8], [0, 0, 1]]\n"
        "data = frames.frame(torch.eye(4), K, 16, 16, sh_degree=0, background=(0, 0, 0))\n"
        "print('frame', data[:2].hex(), flush=True)\n"
        "frames.close()\n"
    )
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["top level ran", "frame ffd8"]


def test_a_viewer_falls_back_to_drawing_frames_itself_when_the_process_dies(trainer, viewers):
    viewer = viewers(trainer, rest_seconds=0.0, frame_process=True)
    viewer.frames.wait_ready()
    with ViewerClient(viewer.url) as client:
        client.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        client.next_frame(min_width=32)
        viewer.frames.process.kill()
        viewer.frames.process.join(10)
        for step in range(2):
            eye = (EYE[0] + 0.5 * (step + 1), *EYE[1:])
            client.send_camera(look_from(eye, (0, 0, 0)), eye, FOV, 32, 24)
            assert client.next_frame(min_width=32, timeout=20).shape == (24, 32, 3)
    assert isinstance(viewer.last_error, FrameProcessError)
    assert viewer.frames is None and viewer.frame_timings()["process"] < 1.0


def test_a_cpu_run_gets_a_frame_process_by_default_and_a_model_viewer_none(trainer, viewers):
    assert (viewers(trainer).frames is not None) == ((os.cpu_count() or 1) >= 2)
    assert viewers(trainer, frame_process=False).frames is None
    model = GaussianModel.from_points(torch.rand(20, 3), torch.rand(20, 3), sh_degree=0)
    assert viewers(model, mode="render").frames is None
    with pytest.raises(ValueError, match="frame_process"):
        viewers(model, frame_process=True)


def test_too_little_shared_memory_is_refused_before_writing_to_it(frames, monkeypatch):
    # a full /dev/shm (64 MiB in many containers) kills a writer with SIGBUS: never try
    frames.wait_ready()
    model = GaussianModel.from_points(torch.rand(20, 3) - 0.5, torch.rand(20, 3), sh_degree=0)
    monkeypatch.setattr(frames_module, "_shm_free_bytes", lambda: 32 * 2**20)
    with pytest.raises(FrameProcessError, match=r"MiB of shared memory.*--shm-size"):
        frames.share(model.splats)
    assert frames.failed and not model.splats["means"].is_shared()


def test_frames_follow_a_densifying_run_and_a_restarted_viewer_gets_a_new_process(trainer, viewers):
    trainer.set(refine_start_iter=2, refine_every=4, grow_grad2d=1e-9)
    viewer = viewers(trainer, rest_seconds=0.0, frame_process=True, jpeg_quality=100)
    viewer.frames.wait_ready()
    wxyz = look_from(EYE, (0.0, 0.0, 0.5))
    for cycle in range(2):
        count = trainer.num_gaussians
        with ViewerClient(viewer.url) as client:
            client.send_camera(wxyz, EYE, FOV, 64, 48)
            client.next_frame(min_width=64)
            trainer.run(12)  # densifies: the Gaussians are other tensors now
            list(client.messages(2.0))
            eye = (EYE[0] + 0.05 * (cycle + 1), *EYE[1:])
            client.send_camera(wxyz, eye, FOV, 64, 48)
            after = client.next_frame(min_width=64)
        assert trainer.num_gaussians > count
        now = to_uint8(trainer.render_view(view_from_pose(wxyz, eye, FOV, 64, 48)).rgb[0])
        assert np.abs(after.astype(float) - now).mean() < 1.5
        assert viewer.frame_timings()["process"] == 1.0 and viewer.last_error is None
        old = viewer.frames.process
        viewer.stop()
        assert not old.is_alive()
        viewer.start()  # a new process for the new start
        assert viewer.frames is not None and viewer.frames.process is not old
        viewer.frames.wait_ready()


def test_an_interrupted_wait_never_pairs_a_reply_with_the_next_request(frames, monkeypatch):
    frames.wait_ready()
    model = GaussianModel.from_points(torch.rand(20, 3) - 0.5, torch.rand(20, 3), sh_degree=0)
    frames.share(model.splats)
    view = view_from_pose(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)

    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(frames._conn, "poll", interrupted)
    with pytest.raises(KeyboardInterrupt):
        a_frame(frames, view)  # the reply is on its way: the pipe is out of step
    monkeypatch.undo()
    assert frames.failed and "interrupted" in frames.failed
    with pytest.raises(FrameProcessError, match="interrupted"):
        a_frame(frames, view)


def test_a_viewer_whose_frame_process_cannot_start_draws_its_frames_itself(
    trainer, viewers, monkeypatch
):
    from gsnb.viewer import server

    def refused(*_args, **_kwargs):
        raise AssertionError("daemonic processes are not allowed to have children")

    monkeypatch.setattr(server, "FrameProcess", refused)
    viewer = viewers(trainer, rest_seconds=0.0, frame_process=True)
    assert viewer.frames is None and "could not start" in str(viewer.last_error)
    with ViewerClient(viewer.url) as client:
        client.send_camera(look_from(EYE, (0, 0, 0)), EYE, FOV, 32, 24)
        assert client.next_frame(min_width=32).shape == (24, 32, 3)
    assert viewer.frame_timings()["process"] == 0.0


def test_hiding_the_main_module_restores_it(monkeypatch):
    import types

    main = types.ModuleType("__main__")
    main.__file__ = "/somewhere/script.py"
    spec = object()
    main.__spec__ = spec
    monkeypatch.setitem(sys.modules, "__main__", main)
    with frames_module._main_module_hidden():
        assert not hasattr(main, "__file__") and main.__spec__ is None
    assert main.__file__ == "/somewhere/script.py" and main.__spec__ is spec
    del main.__spec__
    with frames_module._main_module_hidden():
        assert main.__spec__ is None
    assert "__spec__" not in main.__dict__


def test_the_refresh_budget_is_charged_this_process_part_of_a_frame(trainer, viewers, monkeypatch):
    from gsnb.viewer.stream import FramePlanner

    costs: list[float] = []
    rendered = FramePlanner.rendered

    def recorded(self, request, cost, now):
        costs.append(cost)
        rendered(self, request, cost, now)

    monkeypatch.setattr(FramePlanner, "rendered", recorded)
    viewer = viewers(trainer, rest_seconds=0.0, frame_process=True)
    viewer.frames.wait_ready()
    with ViewerClient(viewer.url) as client:
        for step in range(3):
            eye = (EYE[0] + 0.1 * step, *EYE[1:])
            client.send_camera(look_from(eye, (0, 0, 0)), eye, FOV, 64, 48)
            client.next_frame(min_width=64)
    last = viewer._timings[-1]
    assert last["process"] == 1.0
    # the child's drawing is not this process's time: only the rest of the frame is charged
    assert costs[-1] < 0.5 * last["wait"]
