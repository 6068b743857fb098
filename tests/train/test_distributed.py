"""Data-parallel training over CPU processes (gloo): same model as one process, failures, resume.

The workers are real processes (torch.multiprocessing spawn, or gsnb train's elastic
launcher); each wait has a deadline, so that a hang fails the test instead of CI.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gsnb.train import TrainConfig, Trainer
from gsnb.train.checkpoint import read_training_state
from gsnb.train.strategy import DefaultStrategy
from tests.train import workers


def starts_workers(test):
    """A test that starts worker processes: tens of seconds on two CPU cores, 240 s at most."""
    return pytest.mark.slow(pytest.mark.timeout(240)(test))


STEPS, SAVE_AT = 16, 10
CONFIG = dict(
    batch_size=2, steps=STEPS, device="cpu", backend="reference", sh_degree=1,
    sh_degree_interval=5,
)  # fmt: skip


def schedule(screen: bool = False) -> DefaultStrategy:
    """Densify at steps 4, 8, 12 (a checkpoint at 10 holds unreduced sums); reset at 6, 12.
    With ``screen``, also split and prune by screen size (the largest radius over the views
    of every process: each process sees only its own)."""
    by_screen = dict(refine_scale2d_stop_iter=STEPS, grow_scale2d=0.1, prune_scale2d=0.5)
    return DefaultStrategy(
        refine_start_iter=3, refine_every=4, reset_every=6, grow_grad2d=2e-5, opacity_reset=True,
        **(by_screen if screen else {}),
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, data, out: str, screen: bool) -> None:
    # The store is the test's, as an elastic launcher's agent holds it for its workers: a
    # process 0 that served it would take it down while process 1 may still be leaving.
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
        TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0",
    )  # fmt: skip
    from gsnb.train import distributed, process_group

    process_group.init_process_group("cpu", timeout_s=60)
    torch.set_num_threads(1)
    trainer = distributed.DistributedTrainer(data, TrainConfig(**CONFIG), strategy=schedule(screen))
    trainer.run(steps=SAVE_AT)
    trainer.save_checkpoint(Path(out) / "mid.pt")
    trainer.run()
    trainer.leave_group()
    if rank == 0:
        torch.save({k: v.detach() for k, v in trainer.model.splats.items()}, Path(out) / "end.pt")
    workers.leave()


def _join(context, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                pytest.fail(f"the workers did not finish within {seconds} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()


@starts_workers
@pytest.mark.parametrize("screen", [False, True])
def test_two_processes_equal_one_and_their_checkpoint_resumes_in_one(
    make_scene, tmp_path, screen
) -> None:
    data = make_scene(views=5)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    context = mp.start_processes(
        _worker, args=(2, store.port, data, str(tmp_path), screen), nprocs=2, join=False,
        start_method="spawn",
    )  # fmt: skip
    single = Trainer(data, TrainConfig(**CONFIG), strategy=schedule(screen))
    history = [single.step() for _ in range(SAVE_AT)]
    radii = single.strategy_state["radii"]
    radii = None if radii is None else radii.clone()  # the largest since the refine at 8
    history += [single.step() for _ in range(STEPS - SAVE_AT)]
    _join(context, 180)
    events = [e for m in history for e in m.events]
    assert {"split", "reset"} <= set(events) or {"cloned", "reset"} <= set(events)
    saved = read_training_state(tmp_path / "mid.pt").payload["strategy"]["state"]
    if screen:
        # the checkpoint holds the largest radius over both processes' views, and some
        # Gaussian was wide enough to split by it; and the rule changed the run
        torch.testing.assert_close(saved["radii"], radii, rtol=0, atol=0)
        assert float(radii.max()) > schedule(True).grow_scale2d
        plain = Trainer(data, TrainConfig(**CONFIG), strategy=schedule())
        plain_events = [plain.step().events for _ in range(STEPS)]
        assert plain_events != [m.events for m in history]
    both = torch.load(tmp_path / "end.pt", weights_only=True)
    for name, p in single.model.splats.items():
        # Equal up to the order of float sums (two halves all-reduced vs one batch).
        torch.testing.assert_close(both[name], p.detach(), rtol=1e-4, atol=1e-5)
    # The checkpoint holds the run's densification sums, not process 0's share of them.
    resumed = Trainer.resume_from(tmp_path / "mid.pt", data)
    assert resumed.step_count == SAVE_AT
    resumed.run()
    for name, p in single.model.splats.items():
        torch.testing.assert_close(resumed.model.splats[name], p, rtol=1e-4, atol=1e-5)


def _workers_of(parent: int) -> list[int]:
    """The pids of the spawned workers of the launcher ``parent`` (Linux: read from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            line = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue  # a process that ended meanwhile
        if ppid == parent and "spawn_main" in line and "resource_tracker" not in line:
            found.append(int(stat.parent.name))
    return found


def _start_training(tmp_path: Path, every: int) -> tuple[subprocess.Popen, Path]:
    """``gsnb train --nproc 2`` on a tiny scene, for ever, in a session of its own; returns
    once it wrote its first checkpoint."""
    from gsnb.data.synthetic import make_synthetic_scene

    scene = make_synthetic_scene(tmp_path / "scene", num_views=5, size=16, num_points=150)
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "gsnb.cli", "train", str(scene), "--out", str(out), "--nproc", "2",
        "--batch-size", "2", "--device", "cpu", "--backend", "reference", "--sh-degree", "0",
        "--steps", "1000000", "--checkpoint-every", str(every), "--no-progress",
    ]  # fmt: skip
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    run = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (out / "checkpoint.pt").exists():
        if run.poll() is not None or time.monotonic() > deadline:
            run.kill()
            pytest.fail(f"no checkpoint within 120 s: {run.communicate()}")
        time.sleep(0.2)
    return run, out


@starts_workers
def test_ctrl_c_stops_every_worker_after_the_same_step_with_a_checkpoint(tmp_path) -> None:
    run, out = _start_training(tmp_path, every=20)
    try:
        os.killpg(run.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the launcher and workers
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, err
    found = re.search(r"interrupted after step (\d+); checkpoint (\S+) holds step (\d+)", err)
    assert found and found.group(1) == found.group(3), err
    assert "continue with: gsnb train" in err and "--nproc 2" in err
    assert Trainer.resume_from(out).step_count == int(found.group(1))


@starts_workers
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers in /proc")
def test_a_killed_worker_stops_the_run_with_one_line_and_a_usable_checkpoint(tmp_path) -> None:
    run, out = _start_training(tmp_path, every=2)
    try:
        workers = _workers_of(run.pid)
        assert len(workers) == 2
        os.kill(max(workers), signal.SIGKILL)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1
    last = err.strip().splitlines()[-1]
    assert re.match(r"gsnb train: error: worker [01] of 2 \(pid \d+\) ", last), last
    assert "was killed by SIGKILL; the other workers were stopped" in last
    assert f"checkpoint {out / 'checkpoint.pt'} holds step " in last
    assert "continue with: gsnb train" in last and "--nproc 2 --resume" in last
    resumed = Trainer.resume_from(out)  # the last checkpoint is whole and continues
    start = resumed.step_count
    assert start >= 2 and start % 2 == 0
    resumed.run(steps=2)
    assert resumed.step_count == start + 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--nproc", "2"], "batch_size 1 does not split evenly over 2 processes"),
        (["--nproc", "2", "--batch-size", "3"], "use a multiple of 2"),
    ],
)
def test_workers_that_cannot_run_are_refused_before_any_starts(
    tmp_path, capsys, options, message
) -> None:
    import argparse

    from gsnb.train.commands import train, train_arguments

    parser = argparse.ArgumentParser()
    train_arguments(parser)
    out = tmp_path / "out"
    args = parser.parse_args([str(tmp_path), "--out", str(out), "--device", "cpu", *options])
    assert train(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("gsnb train: error: ") and message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_a_one_process_group_refuses_per_view_corrections(make_scene, monkeypatch) -> None:
    """Under torchrun even one process takes the data-parallel step, which has no per-view
    corrections: exposure and pose refinement are refused, at the start and as knobs."""
    from gsnb.train import distributed, process_group

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    data = make_scene()
    process_group.init_process_group("cpu", timeout_s=30)
    try:
        with pytest.raises(ValueError, match=r"exposure.* correct one view per step"):
            distributed.DistributedTrainer(data, TrainConfig(exposure=True))
        trainer = distributed.DistributedTrainer(data, TrainConfig(steps=3))
        with pytest.raises(ValueError, match="pose_refine correct one view per step"):
            trainer.set(pose_refine=True)
        trainer.set(lr_scales=1e-3)
        trainer.leave_group()
    finally:
        process_group.destroy_process_group()


def test_the_failure_named_is_the_worker_that_died_not_the_peers_that_aborted() -> None:
    """A killed worker makes its peers abort at their next collective; the launcher often
    notices all of them at one monitor tick. The message names the killed one."""
    from types import SimpleNamespace

    from gsnb.train.launcher import failure_text

    aborted = SimpleNamespace(exitcode=-signal.SIGABRT, timestamp=100, pid=11)
    killed = SimpleNamespace(exitcode=-signal.SIGKILL, timestamp=100, pid=12)
    errored = SimpleNamespace(exitcode=1, timestamp=99, pid=13)
    text = failure_text(SimpleNamespace(failures={0: aborted, 1: killed}), 2)
    assert text.startswith("worker 1 of 2 (pid 12) was killed by SIGKILL")
    text = failure_text(SimpleNamespace(failures={0: aborted, 2: errored}), 3)
    assert text.startswith("worker 2 of 3 (pid 13) exited with code 1")
