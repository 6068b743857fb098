"""Driving a trainer from other threads, and interrupts that leave a consistent, resumable run."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

import gsnb
from gsnb.train import TrainConfig, Trainer


def wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def same_params(a: Trainer, b: Trainer) -> bool:
    return all(torch.equal(a.model.splats[k], b.model.splats[k]) for k in a.model.splats)


def test_pause_resume_stop_from_another_thread(make_scene, tmp_path: Path) -> None:
    config = TrainConfig(steps=10_000, out_dir=str(tmp_path / "run"))
    trainer = Trainer(make_scene(), config)
    trainer.start()
    assert trainer.running
    wait_for(lambda: trainer.step_count >= 3)
    trainer.pause()  # returns once the step in flight has finished
    paused_at = trainer.step_count
    time.sleep(0.3)
    assert trainer.step_count == paused_at and trainer.status == "paused"
    trainer.set(ssim_lambda=0.5)  # queued while paused
    trainer.resume()
    wait_for(lambda: trainer.step_count >= paused_at + 3)
    assert trainer.config.ssim_lambda == 0.5
    trainer.stop()
    assert not trainer.running and trainer.status == "stopped"
    stopped_at = trainer.step_count
    assert stopped_at < 10_000 and len(trainer.history) == stopped_at
    # stop() wrote a checkpoint of exactly the model in memory
    resumed = Trainer.resume_from(tmp_path / "run" / "checkpoint.pt", trainer.dataset)
    assert resumed.step_count == stopped_at and same_params(resumed, trainer)


def test_callbacks_may_drive_the_trainer(make_scene) -> None:
    trainer = Trainer(make_scene(), TrainConfig(steps=50))
    trainer.on_step(lambda m: trainer.stop() if m.step == 4 else None)
    trainer.run()
    assert trainer.step_count == 4 and trainer.status == "stopped"
    broken = Trainer(make_scene(), TrainConfig(steps=2))
    broken.on_step(lambda m: 1 / 0)
    with pytest.warns(UserWarning, match="callback .* failed: ZeroDivisionError"):
        broken.run()
    assert broken.step_count == 2


def test_background_run_finishes_and_reports_errors(make_scene) -> None:
    trainer = Trainer(make_scene(), TrainConfig(steps=5))
    trainer.start()
    trainer.wait(60)
    assert trainer.step_count == 5 and trainer.status == "finished"
    trainer.start(steps=10_000)
    with pytest.raises(RuntimeError, match="already runs"):
        trainer.start()
    with pytest.raises(RuntimeError, match="already runs in the background"):
        trainer.run()
    trainer.stop()
    assert trainer.status == "stopped" and not trainer.running

    def failing(*args, **kwargs):
        raise ValueError("renderer broke")

    bad = Trainer(make_scene(), TrainConfig(steps=5), renderer=failing)
    with pytest.warns(UserWarning, match="renderer broke"):
        bad.start()
        bad._thread.join(60)
    assert bad.status == "failed" and bad.step_count == 0
    with pytest.raises(RuntimeError, match="training failed"):
        bad.wait()


class InterruptingRenderer:
    """gsnb.render, but the main thread receives Ctrl-C (SIGINT) while step ``at`` renders."""

    def __init__(self, at: int, times: int = 1) -> None:
        self.calls = 0
        self.at = at
        self.times = times

    def __call__(self, *args, **kwargs):
        out = gsnb.render(*args, **kwargs)
        self.calls += 1
        if self.calls - 1 == self.at:
            for _ in range(self.times):
                os.kill(os.getpid(), signal.SIGINT)
        return out


def test_ctrl_c_mid_step_finishes_the_step_and_saves_a_checkpoint(make_scene, tmp_path) -> None:
    data = make_scene()
    config = TrainConfig(steps=100, out_dir=str(tmp_path))
    trainer = Trainer(data, config, renderer=InterruptingRenderer(at=5))
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    # the interrupted step (index 5) completed; nothing after it ran
    assert trainer.step_count == 6 and trainer.status == "stopped"
    resumed = Trainer.resume_from(tmp_path / "checkpoint.pt", data)
    assert resumed.step_count == 6 and same_params(resumed, trainer)
    # and the checkpointed run goes on exactly like one never interrupted
    reference = Trainer(data, TrainConfig(steps=100))
    reference.run(8)
    resumed.run(2)
    assert same_params(reference, resumed)


def test_second_ctrl_c_abandons_the_step_without_touching_the_model(make_scene) -> None:
    data = make_scene()
    config = TrainConfig(steps=100, random_background=True)
    trainer = Trainer(data, config, renderer=InterruptingRenderer(at=2, times=2))
    trainer.run(2)
    before = {k: v.detach().clone() for k, v in trainer.model.splats.items()}
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    assert trainer.step_count == 2  # the render of step 3 was cut short
    assert all(torch.equal(before[k], trainer.model.splats[k]) for k in before)
    trainer.run(1)  # the trainer is still usable
    assert trainer.step_count == 3
    # and the abandoned step left no trace, not even in the random streams
    reference = Trainer(data, TrainConfig(steps=100, random_background=True))
    reference.run(3)
    assert same_params(reference, trainer)


def test_ctrl_c_during_a_single_step_is_raised_after_it(make_scene) -> None:
    trainer = Trainer(make_scene(), TrainConfig(steps=100), renderer=InterruptingRenderer(at=0))
    with pytest.raises(KeyboardInterrupt):
        trainer.step()
    assert trainer.step_count == 0  # the render was interrupted: nothing applied
    trainer.step()
    assert trainer.step_count == 1


def test_signal_handler_is_restored(make_scene) -> None:
    before = signal.getsignal(signal.SIGINT)
    trainer = Trainer(make_scene(), TrainConfig(steps=2))
    trainer.run()
    trainer.step()
    assert signal.getsignal(signal.SIGINT) is before
    assert threading.current_thread() is threading.main_thread()


class OutOfMemoryRenderer:
    """gsnb.render, except that call ``at`` fails the way a full GPU does."""

    def __init__(self, at: int) -> None:
        self.calls = 0
        self.at = at

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls - 1 == self.at:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return gsnb.render(*args, **kwargs)


def test_out_of_memory_stops_cleanly_and_keeps_the_last_checkpoint(make_scene, tmp_path) -> None:
    data = make_scene()
    config = TrainConfig(steps=10, out_dir=str(tmp_path), checkpoint_every=2)
    trainer = Trainer(data, config, renderer=OutOfMemoryRenderer(at=3))
    with pytest.raises(RuntimeError, match=r"ran out of memory at step 3.*--downscale"):
        trainer.run()
    assert trainer.status == "failed" and trainer.step_count == 3
    saved = Trainer.resume_from(tmp_path / "checkpoint.pt", data)
    assert saved.step_count == 2  # the last good checkpoint, not overwritten
    trainer.run()  # the same trainer can go on once memory is freed
    assert trainer.step_count == 10


def test_other_threads_get_the_lock_between_steps(make_scene) -> None:
    """A step that holds the lock through GIL-free waits (like CUDA syncs on a GPU) must not
    starve a viewer's renders: they are served between two steps."""

    def render_then_wait(*args, **kwargs):
        out = gsnb.render(*args, **kwargs)
        time.sleep(0.01)  # the lock stays held, the GIL is free: as during a CUDA sync
        return out

    trainer = Trainer(make_scene(), TrainConfig(steps=100_000), renderer=render_then_wait)
    view = trainer.dataset.views[0]
    trainer.start()
    try:
        wait_for(lambda: trainer.step_count >= 3)
        steps_during = []
        for _ in range(10):
            before = trainer.step_count
            trainer.render_view(view)
            steps_during.append(trainer.step_count - before)
        steps = trainer.step_count
        wait_for(lambda: trainer.step_count >= steps + 3)  # and training goes on
    finally:
        trainer.stop()
    # Served after the step in flight (counted in steps, not seconds: a slow machine's steps
    # are slow too); a starved render would wait for many steps.
    assert max(steps_during) <= 2, steps_during


def test_the_heap_is_frozen_while_a_loop_trains_and_given_back_after(make_scene) -> None:
    """Full collections skip the objects that existed before a loop (gsnb.utils.collector)."""
    import gc

    gc.unfreeze()
    seen: list[int] = []
    trainer = Trainer(make_scene(), TrainConfig(steps=3))
    trainer.on_step(lambda m: seen.append(gc.get_freeze_count()))
    trainer.run()
    trainer.start(2)
    wait_for(lambda: not trainer.running)
    assert len(seen) == 5 and min(seen) > 0
    assert gc.get_freeze_count() == 0


def _bars(monkeypatch, **options):
    """Progress bars the runs make, each with a list of the numbers put beside it."""
    from tqdm import tqdm

    import gsnb.train.control as control

    made = []

    def bar(done: int, total: int):
        b = tqdm(total=total, initial=done, **options)
        b.shown = []
        plain = b.set_postfix
        b.set_postfix = lambda **kw: (b.shown.append(kw), plain(**kw))
        made.append(b)
        return b

    monkeypatch.setattr(control, "_progress_bar", bar)
    return made


def _numbers(m) -> str:
    return f"gaussians={m.num_gaussians}, loss={m.loss:.4f}, psnr={m.psnr:.2f}"


def test_the_progress_bar_ends_on_the_last_steps_numbers(make_scene, monkeypatch) -> None:
    bars = _bars(monkeypatch, mininterval=3600.0, disable=False)
    trainer = Trainer(make_scene(), TrainConfig(steps=6))
    last = trainer.run(progress=True)
    assert bars[0].n == 6
    # Redrawn once an hour at most: the numbers are formatted once, as the bar closes.
    assert len(bars[0].shown) == 1
    assert bars[0].postfix == _numbers(last)
    # Stopped early (a callback asks after step 3): the bar ends on step 3's numbers.
    trainer = Trainer(make_scene(), TrainConfig(steps=50))
    trainer.on_step(lambda m: trainer.stop() if m.step == 3 else None)
    trainer.run(progress=True)
    assert bars[1].n == trainer.step_count and bars[1].postfix == _numbers(trainer.history[-1])


def test_a_disabled_progress_bar_trains(make_scene, monkeypatch) -> None:
    # TQDM_DISABLE=1 makes every bar a disabled one, which has no redraw clock.
    bars = _bars(monkeypatch, disable=True)
    trainer = Trainer(make_scene(), TrainConfig(steps=4))
    assert trainer.run(progress=True).step == 4 and bars[0].disable
