"""Faults injected into training runs: kills, full disks, a second run, damaged files.

Each test names the fault it injects; together they are the fault table of a run's
robustness (what a user expects, what happens).
"""

from __future__ import annotations

import errno
import io
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gsnb.cli import main
from gsnb.data.dataset import load_dataset
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.train import TrainConfig, Trainer
from gsnb.train.checkpoint import CheckpointError, newest_checkpoint, read_checkpoint
from gsnb.train.strategy import DefaultStrategy, MCMCStrategy, ops
from gsnb.train.trainer import DensifyError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_synthetic_scene(
        tmp_path_factory.mktemp("scene"), num_views=9, size=16, num_points=150
    )


def _cli(scene: Path, out: Path, *extra: str) -> list[str]:
    return ["train", str(scene), "--out", str(out), "--no-progress", "--device", "cpu", *extra]


def _same_model(a: Path, b: Path) -> None:
    first, second = read_checkpoint(a), read_checkpoint(b)
    assert first["step"] == second["step"]
    for name, value in first["splats"].items():
        assert torch.equal(value, second["splats"][name]), name
    state_a, state_b = first["optimizer"]["state"], second["optimizer"]["state"]
    for key in state_a:
        for moment in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state_a[key][moment], state_b[key][moment])


# ------------------------------------------------------------------ kill (SIGTERM)
def test_sigterm_stops_as_ctrl_c_does_with_a_checkpoint(scene: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "gsnb.cli", *_cli(scene, out, "--steps", "100000")]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for line in process.stdout:  # the line before the steps start
        if "renderer:" in line:
            break
    time.sleep(2.0)  # in the steps
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-2000:]
    assert "terminated (SIGTERM)" in err and "--resume" in err
    saved = read_checkpoint(out / "checkpoint.pt")
    assert 0 < saved["step"] < 100000


# ------------------------------------------------------------------ kill -9
def test_kill_9_at_random_moments_leaves_a_checkpoint_that_resumes_exactly(
    scene: Path, tmp_path: Path
) -> None:
    steps = ["--steps", "60", "--checkpoint-every", "4"]
    whole = tmp_path / "whole"
    assert main(_cli(scene, whole, *steps)) == 0
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    moments = random.Random(0)
    for attempt in range(3):
        out = tmp_path / f"killed{attempt}"
        command = [sys.executable, "-m", "gsnb.cli", *_cli(scene, out, *steps)]
        process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while not (out / "checkpoint.pt").exists() and process.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.02)
        time.sleep(moments.uniform(0.0, 0.6))
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert process.returncode in (-signal.SIGKILL, 0)
        # A kill leaves whole files only, and the newest checkpoint resumes.
        saved = read_checkpoint(newest_checkpoint(out))["step"]
        assert saved > 0
        resumed = ["--resume", str(out), "--steps", "60", "--checkpoint-every", "4"]
        assert main(["train", str(scene), "--out", str(out), "--no-progress", *resumed]) == 0
        _same_model(out / "checkpoint.pt", whole / "checkpoint.pt")
        assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
        # The metrics of the killed leg up to its checkpoint were written with it.
        lines = (out / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(line)["step"] for line in lines] == list(range(1, 61))


# --------------------------------------------------------- one run per folder
HOLDER = textwrap.dedent(
    """
    import sys, time
    from gsnb.train.rundir import RunFolder
    folder = RunFolder(sys.argv[1])
    folder.claim()
    open(sys.argv[1] + "/.checkpoint.pt.x1y2.tmp", "wb").write(b"half a checkpoint")
    print("held", flush=True)
    time.sleep(60)
    """
)


def test_a_second_run_on_the_same_folder_refuses_and_a_killed_ones_lock_is_recovered(
    scene: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(_cli(scene, out, "--steps", "2")) == 1
        err = capsys.readouterr().err
        assert f"another run is writing to {out} (pid {holder.pid}" in err
        assert not (out / "checkpoint.pt").exists()
    finally:
        holder.kill()
        holder.wait()
    assert main(_cli(scene, out, "--steps", "2")) == 0
    err = capsys.readouterr().err
    assert f"left by a run that was killed (pid {holder.pid}); removed 1 unfinished" in err
    assert not (out / ".checkpoint.pt.x1y2.tmp").exists()


def test_a_folder_holding_another_run_needs_resume_or_overwrite(
    scene: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    assert main(_cli(scene, out, "--steps", "3")) == 0
    first = (out / "summary.json").read_text()
    capsys.readouterr()
    assert main(_cli(scene, out, "--steps", "2")) == 1
    err = capsys.readouterr().err
    assert "holds another run (checkpoint.pt, point_cloud.ply, metrics.jsonl" in err
    assert f"--resume {out}" in err and "--overwrite" in err
    assert (out / "summary.json").read_text() == first  # untouched
    assert main(_cli(scene, out, "--steps", "2", "--overwrite")) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step_0000002.pt"]


# --------------------------------------------------------- before the first step
def test_an_unwritable_output_folder_fails_before_the_first_step(
    scene: Path, tmp_path: Path, capsys
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(_cli(scene, blocker / "run", "--steps", "2")) == 1
    err = capsys.readouterr().err
    assert "cannot write to the output folder" in err and "training" not in err


def test_too_little_disk_fails_before_the_first_step(
    scene: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    from gsnb.train import rundir

    monkeypatch.setattr(rundir, "free_bytes", lambda folder: 1000)
    out = tmp_path / "run"
    assert main(_cli(scene, out, "--steps", "2")) == 1
    err = capsys.readouterr().err
    assert "no space left on device for 3 checkpoints and the PLY of 150 Gaussians" in err
    assert "1000" not in err and "MB needed, 0.0 MB free" in err
    assert not (out / "metrics.jsonl").exists()


def test_a_corrupt_test_image_fails_before_the_first_step(tmp_path: Path, capsys) -> None:
    root = make_synthetic_scene(tmp_path / "scene", num_views=9, size=16, num_points=50)
    data = load_dataset(root)
    broken = data.test[0].image_path
    encoded = io.BytesIO()
    Image.open(broken).convert("RGB").save(encoded, "JPEG")
    broken.write_bytes(encoded.getvalue()[:-50])  # its header reads, its pixels do not
    out = tmp_path / "run"
    assert main(_cli(root, out, "--steps", "2")) == 1
    err = capsys.readouterr().err
    assert f"1 of 2 test images cannot be read: {broken}" in err
    assert "while writing results" not in err
    assert not out.exists()  # the folder this run made is removed again


# --------------------------------------------------------------- a full disk
class _FullDisk(io.RawIOBase):
    """A file on a disk that fills after ``room`` bytes (writes then fail with ENOSPC)."""

    def __init__(self, real: io.BufferedWriter, room: int) -> None:
        self.real, self.room = real, room

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.real.write(data)

    def fileno(self) -> int:
        return self.real.fileno()

    def flush(self) -> None:
        if not self.real.closed:
            self.real.flush()

    def close(self) -> None:
        self.real.close()
        super().close()


def test_a_disk_that_fills_during_a_checkpoint_says_so_and_keeps_the_last_one(
    scene: Path, tmp_path: Path, monkeypatch
) -> None:
    out = tmp_path / "run"
    trainer = Trainer(load_dataset(scene), TrainConfig(steps=10, out_dir=str(out)))
    trainer.run(2)
    before = (out / "checkpoint.pt").read_bytes()
    trainer.step()
    real_fdopen = os.fdopen
    monkeypatch.setattr(
        "gsnb.utils.atomic.os.fdopen", lambda fd, mode: _FullDisk(real_fdopen(fd, mode), 2000)
    )
    with pytest.raises(OSError, match=r"no space left on device \(it needs about [\d.]+ MB"):
        trainer.save_checkpoint()
    monkeypatch.undo()
    assert (out / "checkpoint.pt").read_bytes() == before
    assert trainer.last_checkpoint == (out / "checkpoint.pt", 2)  # what the Ctrl-C text names
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------- a failure inside densification
def _densifying(seed: int = 0) -> DefaultStrategy:
    return DefaultStrategy(
        refine_start_iter=2, refine_every=3, grow_grad2d=1e-7, reset_every=7, opacity_reset=True
    )


def _fail_once(monkeypatch, target: str, error: BaseException) -> list[int]:
    calls: list[int] = []
    real = getattr(ops, target)

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            real(*args, **kwargs)  # the change happens, then memory runs out
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(ops, target, flaky)
    return calls


@pytest.mark.parametrize(
    ("strategy", "target"),
    [
        (_densifying, "replace_param"),
        (lambda: MCMCStrategy(refine_start_iter=2, refine_every=3, cap_max=400), "sample_add"),
    ],
)
def test_out_of_memory_inside_densification_continues_to_the_uninterrupted_model(
    scene: Path, monkeypatch, strategy, target
) -> None:
    data = load_dataset(scene)
    whole = Trainer(data, TrainConfig(steps=12), strategy=strategy())
    whole.run()
    trainer = Trainer(data, TrainConfig(steps=12), strategy=strategy())
    calls = _fail_once(monkeypatch, target, torch.cuda.OutOfMemoryError("injected"))
    with pytest.raises(RuntimeError, match=r"densification after step \d+ failed") as caught:
        trainer.run()
    failure = caught.value if isinstance(caught.value, DensifyError) else caught.value.__cause__
    assert isinstance(failure, DensifyError), caught.value
    assert "the GPU ran out of memory" in str(failure) and "retries first" in str(failure)
    stuck = trainer.step_count
    with pytest.raises(OSError, match="half done"):
        trainer.save_checkpoint("unused.pt")
    trainer.run()  # finishes the failed step's densification first
    assert len(calls) >= 2 and trainer.step_count == 12 and stuck < 12
    for name, value in whole.model.splats.items():
        assert torch.equal(value, trainer.model.splats[name]), name


# ----------------------------------------------------------- damaged checkpoints
def test_a_flipped_byte_is_refused_and_a_folder_resume_takes_the_previous_checkpoint(
    scene: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    trainer = Trainer(load_dataset(scene), TrainConfig(steps=6, out_dir=str(out)))
    trainer.run(3)
    trainer.run(3)
    means = trainer.model.splats["means"].detach().numpy().tobytes()
    raw = bytearray((out / "checkpoint.pt").read_bytes())
    at = raw.find(means[:64])
    assert at > 0
    raw[at + 5] ^= 0x10
    (out / "checkpoint.pt").unlink()  # a new file: the history keeps its own copy
    (out / "checkpoint.pt").write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="is corrupt: its checksum does not match"):
        read_checkpoint(out / "checkpoint.pt")
    with pytest.warns(UserWarning, match=r"checkpoint.pt in .* is damaged; resuming from "
                      r"checkpoints/step_0000006.pt, the newest intact checkpoint"):  # fmt: skip
        assert newest_checkpoint(out) == out / "checkpoints" / "step_0000006.pt"
    (out / "checkpoints" / "step_0000006.pt").write_bytes(bytes(raw))
    with pytest.warns(UserWarning, match=r"checkpoint.pt, checkpoints/step_0000006.pt in .* "
                      r"are damaged; resuming from checkpoints/step_0000003.pt"):  # fmt: skip
        assert Trainer.resume_from(out).step_count == 3
    # on the command line: one line, no source path
    command = [sys.executable, "-m", "gsnb.cli", *_cli(scene, out, "--steps", "4")]
    done = subprocess.run([*command, "--resume", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "warning: checkpoint.pt, checkpoints/step_0000006.pt in" in done.stderr
    assert "UserWarning" not in done.stderr and ".py:" not in done.stderr


def test_a_ply_given_to_resume_is_named_as_such(scene: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(_cli(scene, out, "--steps", "2")) == 0
    capsys.readouterr()
    args = _cli(scene, tmp_path / "other", "--resume", str(out / "point_cloud.ply"))
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "is not a gsnb checkpoint: it is a PLY file" in err
    assert "weights_only" not in err


# ---------------------------------------------------------------- resumes
def test_an_api_checkpoint_resumes_from_the_command_line_with_its_downscale(
    tmp_path: Path,
) -> None:
    root = make_synthetic_scene(tmp_path / "scene", num_views=6, size=32, num_points=50)
    data = load_dataset(root, downscale=2, test_every=3)
    trainer = Trainer(data, TrainConfig(steps=4))
    trainer.run(2)
    saved = trainer.save_checkpoint(tmp_path / "api.pt")
    assert read_checkpoint(saved)["config"]["downscale"] == 2
    out = tmp_path / "run"
    assert (
        main(["train", str(root), "--out", str(out), "--no-progress", "--resume", str(saved)]) == 0
    )
    assert read_checkpoint(out / "checkpoint.pt")["step"] == 4


def test_a_resume_appends_metrics_and_the_summary_reports_the_whole_run(
    scene: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    assert main(_cli(scene, out, "--steps", "3")) == 0
    assert main(_cli(scene, out, "--steps", "5", "--resume", str(out))) == 0
    text = capsys.readouterr().out
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["leg"]["from_step"] == 3
    assert summary["leg"]["steps"] == 2
    step_times = [json.loads(line)["step_time"] for line in (out / "metrics.jsonl").open()]
    # the whole run and this leg in training time, one clock: sums of the steps' times
    assert summary["seconds"] == pytest.approx(sum(step_times), abs=2e-3)
    assert summary["leg"]["seconds"] == pytest.approx(sum(step_times[3:]), abs=2e-3)
    assert summary["leg"]["wall_seconds"] >= summary["leg"]["seconds"]
    assert "gsnb train: 2 steps in" in text and "resumed at step 3, the whole run: 5 steps" in text


# ---------------------------------------------------------- periodic checkpoints
def test_checkpoints_come_by_time_by_default_and_the_newest_few_are_kept(
    scene: Path, tmp_path: Path
) -> None:
    assert TrainConfig().checkpoint_minutes > 0 and TrainConfig().checkpoint_every == 0
    out = tmp_path / "run"
    config = TrainConfig(steps=20, out_dir=str(out), checkpoint_minutes=1e-9)
    trainer = Trainer(load_dataset(scene), config)
    trainer.step()
    assert read_checkpoint(out / "checkpoint.pt")["step"] == 1  # the time was up
    # A write that took long stretches the interval: writing stays under 2% of the time.
    trainer.checkpoint_seconds = 1e6
    trainer.step()
    assert read_checkpoint(out / "checkpoint.pt")["step"] == 1
    trainer.set(checkpoint_every=1, keep_checkpoints=2)
    for _ in range(3):
        trainer.step()
    assert read_checkpoint(out / "checkpoint.pt")["step"] == 5
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == ["step_0000004.pt", "step_0000005.pt"]
    newest = out / "checkpoints" / "step_0000005.pt"
    assert (out / "checkpoint.pt").read_bytes() == newest.read_bytes()


# ------------------------------------------------------------------ knobs
def test_knobs_are_checked_as_a_set_and_take_numpy_and_tensor_scalars(scene: Path) -> None:
    trainer = Trainer(load_dataset(scene), TrainConfig(steps=10))
    with pytest.raises(ValueError, match="refine_start_iter=20000 must not exceed refine_stop"):
        trainer.set(refine_start_iter=20000)
    with pytest.raises(ValueError, match="refine_every=100 must be below reset_every=1"):
        trainer.set(reset_every=1)
    with pytest.raises(ValueError, match="steps=100000000000000000000 is beyond any run"):
        trainer.set(steps=1e20)
    assert trainer.pending_knobs == {}
    trainer.set(refine_stop_iter=30000)
    trainer.set(refine_start_iter=20000)  # valid with the change queued before it
    trainer.set(lr_scales=np.float32(2e-3), steps=np.int64(12), ssim_lambda=torch.tensor(0.3))
    trainer.set(random_background=np.bool_(True))
    assert trainer.pending_knobs["steps"] == 12 and type(trainer.pending_knobs["steps"]) is int
    assert trainer.pending_knobs["ssim_lambda"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="takes a float"):
        trainer.set(lr_scales=torch.tensor([1e-3, 2e-3]))
    with pytest.raises(ValueError, match="must not exceed"):
        DefaultStrategy(refine_start_iter=9, refine_stop_iter=3)


def test_the_checksum_covers_settings_and_the_view_order_too(scene: Path, tmp_path: Path) -> None:
    trainer = Trainer(load_dataset(scene), TrainConfig(steps=4))
    trainer.run(2)
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    for part, edit in (
        ("config", lambda p: p["config"].update(lr_scales=0.5)),
        ("data_order", lambda p: p["data_order"]["order"].add_(1)),
    ):
        payload = torch.load(path, weights_only=True)
        edit(payload)
        torch.save(payload, tmp_path / f"{part}.pt")
        with pytest.raises(CheckpointError, match="its checksum does not match"):
            read_checkpoint(tmp_path / f"{part}.pt")


def test_a_resume_from_an_earlier_checkpoint_drops_the_abandoned_branch(
    scene: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    assert main(_cli(scene, out, "--steps", "9", "--checkpoint-every", "3")) == 0
    # the run's last checkpoint is checkpoint.pt itself (one file, not written twice)
    assert (out / "checkpoint.pt").stat().st_ino == (
        out / "checkpoints/step_0000009.pt"
    ).stat().st_ino
    earlier = out / "checkpoints" / "step_0000003.pt"
    again = ["--resume", str(earlier), "--steps", "5", "--checkpoint-every", "100"]
    assert main(_cli(scene, out, *again)) == 0
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == ["step_0000003.pt", "step_0000005.pt"]  # 6 and 9 were another branch
    assert read_checkpoint(newest_checkpoint(out))["step"] == 5
    capsys.readouterr()
    assert main(_cli(scene, out, "--resume", str(out), "--keep-checkpoints", "0")) == 1
    assert "--keep-checkpoints 0 is outside its range" in capsys.readouterr().err
