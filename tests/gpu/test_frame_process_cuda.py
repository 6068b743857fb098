"""The viewer's frame process on a GPU: the trainer's Gaussians through CUDA IPC, in place."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import torch
from PIL import Image

from gsnb.live.imaging import to_uint8
from gsnb.train import TrainConfig, Trainer
from gsnb.viewer.frames import FrameProcess
from tests.train.conftest import build_scene


def _trainer(tmp_path, **config) -> Trainer:
    data = build_scene(tmp_path, size=64, views=6, gaussians=300, points=200)
    return Trainer(data, TrainConfig(device="cuda", backend="cuda", steps=100_000, **config))


def _frame(frames: FrameProcess, trainer: Trainer, view) -> np.ndarray:
    data = frames.frame(
        view.viewmat, view.K, view.width, view.height, sh_degree=trainer.sh_degree_now,
        background=trainer.model.background, rasterize_mode=trainer.config.rasterize_mode,
    )  # fmt: skip
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _matches(frame: np.ndarray, trainer: Trainer, view) -> float:
    expected = to_uint8(trainer.render_view(view).rgb[0])
    return float(np.abs(frame.astype(float) - expected).mean())


def test_frames_of_a_training_run_follow_it_in_place_and_after_densifying(cuda_ext, tmp_path):
    for mode in ("classic", "antialiased"):
        trainer = _trainer(tmp_path / mode, rasterize_mode=mode, filter3d=mode == "antialiased")
        trainer.set(refine_start_iter=5, refine_every=10, grow_grad2d=1e-6)
        view = trainer.dataset.views[0]
        frames = FrameProcess(trainer.device)
        try:
            frames.wait_ready()
            assert trainer.live_gaussians(frames.share)
            first = _frame(frames, trainer, view)
            assert _matches(first, trainer, view) < 3.0, mode  # JPEG
            assert frames.backend_used == "nvjpeg"
            for _ in range(3):  # updates in place: the same tensors, new values
                trainer.step()
            assert frames.holds(trainer.model.splats)
            assert _matches(_frame(frames, trainer, view), trainer, view) < 3.0, mode
            before = trainer.num_gaussians
            while trainer.num_gaussians == before:  # a densification: other tensors
                trainer.step()
            assert not frames.holds(trainer.model.splats)
            assert trainer.live_gaussians(frames.share)
            assert _matches(_frame(frames, trainer, view), trainer, view) < 3.0, mode
        finally:
            frames.close()


def test_a_viewer_of_a_gpu_run_draws_in_its_frame_process_while_training(cuda_ext, tmp_path):
    pytest.importorskip("viser", reason="the viewer needs viser (gsnb[viewer])")
    from gsnb.viewer import Viewer
    from gsnb.viewer.client import ViewerClient, look_from

    trainer = _trainer(tmp_path)
    viewer = Viewer(trainer, port=0, rest_seconds=0.0, frame_process=True)
    try:
        assert viewer.frames is not None
        viewer.frames.wait_ready()
        eye = (0.5, -4.0, 2.0)
        trainer.start()
        with ViewerClient(viewer.url) as client:
            deadline = time.monotonic() + 20
            got = 0
            while got < 20 and time.monotonic() < deadline:
                eye = (eye[0] + 0.01, *eye[1:])
                client.send_camera(look_from(eye, (0, 0, 0)), eye, 0.9, 96, 64)
                assert client.next_frame(timeout=10).shape[2] == 3
                got += 1
        assert got == 20
        assert trainer.error is None and trainer.running
        assert viewer.frame_timings()["process"] == 1.0
        assert viewer.last_error is None
    finally:
        trainer.stop()
        process = viewer.frames.process if viewer.frames else None
        viewer.stop()
    assert process is None or not process.is_alive()
    torch.cuda.synchronize()
