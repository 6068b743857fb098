"""Tests for gsnb/notebook/panel.py: the widget logic with a real trainer, no browser."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable

import pytest
from PIL import Image

import gsnb
from gsnb.notebook.panel import TrainingPanel


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.01)


def panel_threads() -> int:
    return sum(t.name == "gsnb-panel" and t.is_alive() for t in threading.enumerate())


class FailingRender:
    """``gsnb.render``, except that the training thread's call number ``fail_at`` raises (as
    a lost device would); the panel's own renders are not counted."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail_at = -1

    def __call__(self, *args, **kwargs):
        if threading.current_thread().name == "gsnb-trainer":
            self.calls += 1
            if self.calls == self.fail_at:
                raise RuntimeError("the device went away")
        return gsnb.render(*args, **kwargs)


@pytest.fixture
def panels():
    made: list[TrainingPanel] = []
    yield made
    for panel in made:
        panel.close()


def test_a_knob_change_reaches_the_trainer_at_the_next_step(make_trainer, panels):
    trainer = make_trainer()
    panels.append(panel := TrainingPanel(trainer))
    before = trainer.step()
    panel.knobs.controls["lr_means"].value = 1e-3
    assert trainer.config.lr_means == pytest.approx(1.6e-4)
    after = trainer.step()
    assert trainer.config.lr_means == 1e-3
    assert after.lr_means / before.lr_means == pytest.approx(1e-3 / 1.6e-4, rel=1e-2)


def test_pause_really_stops_steps_resume_goes_on_and_stop_joins(make_trainer, panels):
    trainer = make_trainer(steps=100_000)
    panels.append(panel := TrainingPanel(trainer))
    panel.start_button.click()
    wait_until(lambda: trainer.step_count >= 2)
    assert panel.start_button.disabled and not panel.pause_button.disabled
    panel.pause_button.click()
    assert trainer.status == "paused" and panel.pause_button.description == "Resume"
    paused_at = trainer.step_count
    time.sleep(0.6)
    assert trainer.step_count == paused_at
    panel.pause_button.click()
    wait_until(lambda: trainer.step_count > paused_at + 1)
    assert panel.pause_button.description == "Pause"
    panel.stop_button.click()
    assert not trainer.running and trainer.status == "stopped"
    assert not any(t.name == "gsnb-trainer" and t.is_alive() for t in threading.enumerate())
    stopped_at = trainer.step_count
    time.sleep(0.3)
    assert trainer.step_count == stopped_at
    assert not panel.start_button.disabled and panel.stop_button.disabled


def test_an_error_in_the_thread_shows_with_its_traceback_and_start_runs_again(make_trainer, panels):
    render = FailingRender()
    trainer = make_trainer(steps=6, renderer=render)
    panels.append(panel := TrainingPanel(trainer))
    render.fail_at = 3  # the third training step
    with pytest.warns(UserWarning, match="the device went away"):
        panel.start_button.click()
        # "failed" is set before the warning and the thread's end: wait for both
        wait_until(lambda: trainer.status == "failed" and not trainer.running)
    panel.update(force=True)
    assert "failed" in panel.status.value
    assert "the device went away" in panel.error.value
    assert "Traceback (most recent call last)" in panel.error.value
    assert "_train_step" in panel.error.value  # the frames of the training thread
    assert trainer.step_count == 2 and not panel.start_button.disabled
    panel.start_button.click()
    assert panel.error.value == ""
    trainer.wait(60)
    panel.update(force=True)
    assert trainer.status == "finished" and trainer.step_count == 6
    assert panel.progress.value == 6 and "failed" not in panel.status.value


def test_curves_counters_and_images_follow_training(make_trainer, panels):
    trainer = make_trainer(steps=5)
    panels.append(panel := TrainingPanel(trainer, image_width=12))
    panel.start_button.click()
    trainer.wait(60)
    spent = panel.redraw_seconds
    panel.update(force=True)
    assert panel.redraw_seconds > spent > 0
    assert panel.progress.value == panel.progress.max == 5
    assert panel.progress_label.value.startswith("step 5 / 5")
    loss = panel.curves.widget.data[0]
    assert list(loss.x) == [1, 2, 3, 4, 5]
    assert list(loss.y) == pytest.approx([m.loss for m in trainer.history])
    assert f"<b>{trainer.num_gaussians:,}</b>" in panel.gaussians.value
    assert "cpu" in panel.memory_label.value
    live = Image.open(io.BytesIO(panel.live_image.value))
    photo = Image.open(io.BytesIO(panel.truth_image.value))
    assert live.format == "JPEG" and live.size == photo.size == (12, 12)
    first_photo = panel.truth_image.value
    panel.camera.value = 1
    assert panel.truth_image.value != first_photo
    panel.evaluate_button.click()
    wait_until(lambda: len(trainer.evals) == 1)
    wait_until(lambda: len(panel.curves.widget.data[2].x or ()) == 1)
    assert panel.curves.widget.data[2].y[0] == pytest.approx(trainer.evals[0].psnr)


def test_start_past_the_last_step_says_what_to_do(make_trainer, panels):
    trainer = make_trainer(steps=1)
    trainer.run()
    panels.append(panel := TrainingPanel(trainer))
    panel.start_button.click()
    assert "raise the steps knob" in panel.message.value and not trainer.running


def test_close_ends_the_panel_thread_and_detaches(make_trainer):
    trainer = make_trainer(steps=3)
    threads = panel_threads()
    panel = TrainingPanel(trainer)
    assert panel_threads() == threads + 1
    panel.close()
    assert panel_threads() == threads
    trainer.run()
    assert panel._steps.take() == []  # no more metrics delivered


def test_bad_camera_names_the_views(make_trainer):
    trainer = make_trainer()
    with pytest.raises(ValueError, match="no training view named 'nope'"):
        TrainingPanel(trainer, camera="nope")
    with pytest.raises(ValueError, match="out of range"):
        TrainingPanel(trainer, camera=99)


def test_the_live_image_of_an_exposure_run_goes_through_the_mean_exposure(dataset, panels):
    import numpy as np

    from gsnb.data.dataset import scaled_view
    from gsnb.live.imaging import to_uint8
    from gsnb.train import TrainConfig, Trainer
    from gsnb.train.exposure import apply_exposure
    from tests.train.test_exported import drift_exposures

    config = TrainConfig(steps=10, max_init_points=60, sh_degree=1, device="cpu", exposure=True)
    trainer = Trainer(dataset, config)
    mean = drift_exposures(trainer)  # learned transforms, each its own
    panels.append(panel := TrainingPanel(trainer, image_width=12))
    panel.update(force=True)
    live = np.asarray(Image.open(io.BytesIO(panel.live_image.value)).convert("RGB"), float)
    view = scaled_view(trainer.dataset.train[panel.camera.value], 12)
    stored = trainer.render_view(view).rgb[0]
    shown = to_uint8(apply_exposure(stored, mean))
    assert np.abs(live - shown).mean() < 4.0  # JPEG
    assert np.abs(live - to_uint8(stored)).mean() > 20.0
