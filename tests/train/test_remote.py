"""Steering two CPU workers (gloo) through the store: knobs at the same step, pause and resume.

The workers are real spawned processes; every wait has a deadline, so that a hang fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from gsnb.train import TrainConfig
from gsnb.train.remote import CONTROL_ENV, ControlLink, RunControl, serve_store
from tests.train import workers

STEPS = 100_000  # more than the test needs: it stops the run (Ctrl-C) once it has seen enough
CONFIG = dict(batch_size=2, steps=STEPS, device="cpu", backend="reference", sh_degree=0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, address: str, data, out: str, config: dict) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port), **{CONTROL_ENV: address},
    )  # fmt: skip
    from gsnb.train import distributed, process_group

    process_group.init_process_group(config["device"], timeout_s=60)
    torch.set_num_threads(1)
    trainer = distributed.DistributedTrainer(data, TrainConfig(**config))
    seen: list[tuple[int, float, float]] = []  # step, ssim_lambda it used, wall time
    trainer.on_step(lambda m: seen.append((m.step, trainer.config.ssim_lambda, time.time())))
    with contextlib.suppress(KeyboardInterrupt):  # the test stops the run with Ctrl-C
        try:
            trainer.run()
        finally:
            # The test signals the workers one after the other: a worker that stopped with
            # the other may get its Ctrl-C only now, once, and must not die of it.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(seen))
    workers.leave()


def _wait(what, seconds: float, control: RunControl, context) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status, _, _ = control.read()
        if what(status):
            return status
        if not all(p.is_alive() for p in context.processes):
            pytest.fail("a worker ended early")
        time.sleep(0.05)
    pytest.fail(f"no such status within {seconds} s; last {control.status}")


def test_a_link_reads_changes_once_and_publishes_metrics() -> None:
    from gsnb.train import StepMetrics

    control = RunControl(serve_store())
    link = ControlLink.from_env({CONTROL_ENV: control.address})
    control.set_knobs({"ssim_lambda": 0.4})
    request = link.poll(force=True)
    assert link.new_changes(request) == [(1, {"ssim_lambda": 0.4})]
    assert link.new_changes(request) == []  # seen: not again
    link.applied = 1
    link.record_step(StepMetrics(step=1, loss=0.5, psnr=20.0))
    link.publish({"step": 1}, force=True)
    status, steps, _ = control.read()
    assert status["step"] == 1 and [s["psnr"] for s in steps] == [20.0]
    assert control.pending == {} and control.read()[1] == []  # chunks are read once


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_knob_from_the_store_applies_at_the_same_step_and_pause_holds_every_worker(
    make_scene, tmp_path
) -> None:
    check_steering(make_scene(views=4), CONFIG, tmp_path)


def check_steering(data, config: dict, tmp_path: Path) -> None:
    """Two workers steered through the store: a knob change applies in both before the
    same step, a pause holds both after the same step, Ctrl-C while paused stops both."""
    control = RunControl(serve_store())
    context = mp.start_processes(
        _worker, args=(_free_port(), control.address, data, str(tmp_path), config), nprocs=2,
        join=False, start_method="spawn",
    )  # fmt: skip
    try:
        _wait(lambda s: s.get("step", 0) >= 3, 150, control, context)
        control.set_knobs({"ssim_lambda": 0.5})
        status = _wait(lambda s: s.get("applied") == 1, 30, control, context)
        assert status["error"] is None
        control.pause()
        paused = _wait(lambda s: s.get("status") == "paused", 30, control, context)
        time.sleep(1.5)
        status, _, _ = control.read()
        assert status["status"] == "paused" and status["step"] == paused["step"]
        control.pause(False)
        _wait(lambda s: s["step"] >= paused["step"] + 2, 30, control, context)
        control.pause()  # and Ctrl-C while paused: both stop, after the same step
        _wait(lambda s: s.get("status") == "paused", 30, control, context)
    finally:
        for process in context.processes:  # Ctrl-C: both stop after the same step
            if process.is_alive():
                os.kill(process.pid, 2)
        deadline = time.monotonic() + 60
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                pytest.fail("the workers did not stop within 60 s")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [s[:2] for s in ranks[0]] == [s[:2] for s in ranks[1]]  # same steps, same knob
    switched = [step for step, value, _ in ranks[1] if value == 0.5]
    assert switched and switched[0] > 3
    assert all(value == 0.5 for step, value, _ in ranks[1] if step >= switched[0])
    # both waited at the pause: a gap of the pause's length after the same step
    at = paused["step"]
    for seen in ranks:
        times = {step: t for step, _, t in seen}
        assert times[at + 1] - times[at] > 1.2
