"""Tests for gsnb/notebook/workers.py: a WorkerRun reads process 0's metrics from the store."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from gsnb.notebook.workers import WorkerRun
from gsnb.train import DefaultStrategy, StepMetrics, TrainConfig
from gsnb.train.remote import CONTROL_ENV, ControlLink, RunControl, serve_store


def test_steps_read_by_two_threads_are_delivered_in_the_order_read(tmp_path) -> None:
    """A poll that reads the next chunk while another poll still calls back the previous
    one leaves its part to that one: callbacks and history keep the steps' order."""
    control = RunControl(serve_store())
    link = ControlLink.from_env({CONTROL_ENV: control.address})
    run = WorkerRun(SimpleNamespace(out=tmp_path), control, TrainConfig(), DefaultStrategy())
    seen: list[int] = []
    first_chunk_started = threading.Event()

    def slow_callback(metrics: StepMetrics) -> None:
        first_chunk_started.set()
        time.sleep(0.05)
        seen.append(metrics.step)

    run.on_step(slow_callback)

    def publish(steps: range) -> None:
        for step in steps:
            link.record_step(StepMetrics(step=step, loss=0.5, psnr=20.0))
        link.publish({"step": steps[-1]}, force=True)

    publish(range(1, 6))
    first = threading.Thread(target=run.poll, kwargs={"force": True})
    first.start()
    assert first_chunk_started.wait(10)
    publish(range(6, 9))
    run.poll(force=True)  # reads steps 6-8 while the first thread calls back steps 1-5
    first.join(10)
    assert [m.step for m in run.history] == list(range(1, 9))
    assert seen == list(range(1, 9))
