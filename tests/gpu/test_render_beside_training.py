"""A render on a stream of the caller's own copies the Gaussians and leaves training running."""

from __future__ import annotations

import time

import torch

from gsnb.train import TrainConfig, Trainer
from tests.train.conftest import build_scene


def _trainer(tmp_path, **config) -> Trainer:
    data = build_scene(tmp_path, size=64, views=6, gaussians=300, points=200)
    return Trainer(data, TrainConfig(device="cuda", backend="cuda", steps=100_000, **config))


def test_side_stream_render_equals_the_locked_render(cuda_ext, tmp_path):
    trainer = _trainer(tmp_path)
    for _ in range(30):
        trainer.step()
    view = trainer.dataset.views[0]
    locked = trainer.render_view(view).rgb.clone()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        copied = trainer.render_view(view).rgb
        side.synchronize()
    torch.testing.assert_close(copied, locked, rtol=0, atol=0)


def test_side_stream_renders_while_training_runs(cuda_ext, tmp_path):
    """Frames come from whole steps (finite, the scene's size) and training goes on."""
    for mode in ("classic", "antialiased"):
        trainer = _trainer(tmp_path / mode, rasterize_mode=mode)
        view = trainer.dataset.views[1]
        side = torch.cuda.Stream()
        trainer.start()
        try:
            deadline = time.perf_counter() + 20
            frames = 0
            while frames < 40 and time.perf_counter() < deadline:
                with torch.cuda.stream(side):
                    rgb = trainer.render_view(view).rgb
                    side.synchronize()
                assert rgb.shape == (1, view.height, view.width, 3)
                assert torch.isfinite(rgb).all()
                frames += 1
            start = trainer.step_count
            time.sleep(0.2)
            assert trainer.step_count > start, "training stopped while frames were rendered"
        finally:
            trainer.stop()
        assert trainer.error is None
        assert frames == 40


def test_a_side_stream_render_view_draws_outside_the_training_lock(cuda_ext, tmp_path):
    # The lock is held only for the copy of the Gaussians: a draw under it would stall the
    # training loop for the whole render (the viewer and the panel render through here).
    trainer = _trainer(tmp_path)
    trainer.step()
    held = []
    draw = trainer._draw

    def watched(*args, **kwargs):
        held.append(trainer._lock._is_owned())
        return draw(*args, **kwargs)

    trainer._draw = watched
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        trainer.render_view(trainer.dataset.views[0])
        side.synchronize()
    trainer.render_view(trainer.dataset.views[0])  # the default stream: drawn under the lock
    assert held == [False, True]
