"""``gsnb train`` and ``gsnb demo`` end to end on small synthetic scenes."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import pytest
import torch

from gsnb.cli import main
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.export.ply import read_ply
from gsnb.train import Trainer, commands
from gsnb.train.checkpoint import read_checkpoint


def test_demo_writes_checkpoint_ply_and_video(tmp_path: Path, capsys) -> None:
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--steps", "8", "--size", "24", "--views", "8"]
    assert main([*args, "--no-progress", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "gsnb demo: 8 steps" in text and "PSNR" in text
    for name in ("checkpoint.pt", "point_cloud.ply", "orbit.mp4", "summary.json", "metrics.jsonl"):
        assert (out / name).is_file(), name
        assert str(out / name) in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["test"]["views"] == 1
    assert summary["files"]["video"] == str(out / "orbit.mp4")
    ply = read_ply(out / "point_cloud.ply")
    model = Trainer.resume_from(out / "checkpoint.pt").model
    assert torch.equal(ply["means"], model.splats["means"].detach())
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 8


def test_train_then_resume_to_more_steps(tmp_path: Path, capsys) -> None:
    data = make_synthetic_scene(tmp_path / "scene", num_views=9, size=20, num_points=200)
    out = tmp_path / "run"
    common = [str(data), "--out", str(out), "--no-progress", "--device", "cpu"]
    assert main(["train", *common, "--steps", "4"]) == 0
    assert "test:       PSNR" in capsys.readouterr().out
    first = json.loads((out / "summary.json").read_text())
    assert first["steps"] == 4 and first["test"]["views"] == 2  # views 0 and 8
    assert main(["train", *common, "--steps", "6", "--resume", str(out / "checkpoint.pt")]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 6
    capsys.readouterr()
    assert main(["train", *common, "--steps", "3", "--resume", str(out)]) == 1
    assert "--steps 3 is below the step the checkpoint holds (6)" in capsys.readouterr().err
    assert read_checkpoint(out / "checkpoint.pt")["step"] == 6  # the run folder as it was


def test_train_without_steps_uses_the_default(tmp_path: Path, monkeypatch) -> None:
    data = make_synthetic_scene(tmp_path / "scene", num_views=4, size=16, num_points=100)
    made = []

    def report(trainer, *_args, **_kwargs):  # stands in for the 30000-step run
        made.append(trainer)
        return 0

    monkeypatch.setattr("gsnb.train.commands._train_and_report", report)
    args = ["train", str(data), "--out", str(tmp_path / "o"), "--seed", "2", "--device", "cpu"]
    assert main([*args, "--no-progress"]) == 0
    config = made[0].config
    assert (config.steps, config.seed, config.out_dir) == (30_000, 2, str(tmp_path / "o"))
    assert config.data == str(data.resolve())


def test_train_reports_bad_input_in_one_line(tmp_path: Path, capsys) -> None:
    assert main(["train", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("gsnb train: error:") and "does not exist" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("command", ["train", "demo"])
def test_help_lists_the_options(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--strategy" in capsys.readouterr().out


def _interrupt_at(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """Ctrl-C arrives during training step number ``call``."""
    original = Trainer._step_locked
    calls = []

    def step(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "_step_locked", step)


@pytest.mark.parametrize("command", ["demo", "train"])
def test_the_resume_command_printed_after_ctrl_c_works(
    command: str, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    if command == "demo":
        argv = ["demo", "--out", str(out), "--size", "16", "--views", "6", "--no-video"]
    else:
        data = make_synthetic_scene(tmp_path / "scene", num_views=6, size=16, num_points=100)
        argv = ["train", str(data), "--out", str(out)]
    _interrupt_at(monkeypatch, 4)
    assert main([*argv, "--steps", "9", "--device", "cpu", "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert f"checkpoint {out / 'checkpoint.pt'} holds step 3" in err
    line = next(x for x in err.splitlines() if "continue with:" in x)
    resume = shlex.split(line.split("continue with:", 1)[1])
    assert resume[:2] == ["gsnb", command]
    monkeypatch.undo()
    assert main([*resume[1:], "--no-progress"]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 9


def test_demo_without_video_removes_an_earlier_video(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    out.mkdir()
    (out / "orbit.mp4").write_bytes(b"an earlier run's video")
    args = ["demo", "--out", str(out), "--steps", "3", "--size", "16", "--views", "6"]
    assert main([*args, "--no-video", "--no-progress", "--device", "cpu", "--overwrite"]) == 0
    assert not (out / "orbit.mp4").exists()
    assert "video" not in json.loads((out / "summary.json").read_text())["files"]


def test_missing_data_leaves_no_output_folder(tmp_path: Path, capsys) -> None:
    assert main(["train", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_no_checkpoint_written_is_said_and_no_command_offered(tmp_path: Path) -> None:
    from gsnb.data.dataset import load_dataset
    from gsnb.train import TrainConfig
    from gsnb.train.commands import interrupted_text

    data = make_synthetic_scene(tmp_path / "scene", num_views=4, size=16, num_points=50)
    trainer = Trainer(load_dataset(data), TrainConfig(steps=5, device="cpu"))
    text = interrupted_text("gsnb train", trainer, lambda p: ["gsnb", "train", str(p)])
    assert "wrote no checkpoint" in text and "continue with" not in text


def test_summary_says_which_pixels_the_test_metrics_measured(tmp_path: Path, capsys) -> None:
    # With exposure the test views are measured on their right halves: a number that is not
    # comparable with a run's on whole images, so the summary names the protocol.
    data = make_synthetic_scene(tmp_path / "scene", num_views=9, size=16, num_points=100)
    common = [str(data), "--no-progress", "--device", "cpu", "--steps", "2"]
    for option, protocol in (("--no-exposure", "full images"), ("--exposure", "right halves")):
        out = tmp_path / option
        assert main(["train", *common, "--out", str(out), option]) == 0
        assert json.loads((out / "summary.json").read_text())["test"]["protocol"] == protocol
        text = capsys.readouterr().out
        assert ("right halves" in text) == (protocol == "right halves"), text


def test_strategy_options_reach_the_run_and_its_checkpoint(tmp_path: Path, capsys) -> None:
    data = make_synthetic_scene(tmp_path / "scene", num_views=4, size=16, num_points=100)
    out = tmp_path / "run"
    common = [str(data), "--out", str(out), "--no-progress", "--device", "cpu", "--steps", "2"]
    given = ["--no-opacity-reset", "--grow-grad2d", "3e-4", "--refine-every", "50"]
    assert main(["train", *common, *given]) == 0
    strategy = Trainer.resume_from(out / "checkpoint.pt").strategy
    assert (strategy.opacity_reset, strategy.grow_grad2d, strategy.refine_every) == (
        False, 3e-4, 50
    )  # fmt: skip
    assert strategy.reset_every == 3000  # an option left out keeps the strategy's default
    capsys.readouterr()
    # another strategy's option is refused before anything is loaded or written
    assert main(["train", *common[:1], "--out", str(tmp_path / "o"), "--noise-lr", "9"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "gsnb train: error: --noise-lr applies to --strategy mcmc, not default"
    assert not (tmp_path / "o").exists()
    # a range the strategy refuses, in one line
    assert main(["train", *common[:1], "--out", str(tmp_path / "p"), "--prune-opa", "2"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("gsnb train: error: --prune-opa 2.0 is outside its range")
    assert len(err.splitlines()) == 1


def test_demo_takes_strategy_options_over_its_own(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--steps", "4", "--size", "16", "--views", "4"]
    assert main([*args, "--no-progress", "--device", "cpu", "--refine-stop-iter", "2"]) == 0
    strategy = Trainer.resume_from(out / "checkpoint.pt").strategy  # the demo's MCMC
    assert strategy.refine_stop_iter == 2  # given
    assert strategy.cap_max == commands.demo_strategy("mcmc", 4, 3000).cap_max == 3000  # its own


def test_summary_times_each_phase_of_the_command(tmp_path: Path, capsys) -> None:
    data = make_synthetic_scene(tmp_path / "scene", num_views=9, size=20, num_points=200)
    out = tmp_path / "run"
    began = time.perf_counter()
    assert main(["train", str(data), "--out", str(out), "--steps", "3", "--no-progress",
                 "--device", "cpu"]) == 0  # fmt: skip
    wall = time.perf_counter() - began
    summary = json.loads((out / "summary.json").read_text())
    timings = summary["timings"]
    assert list(timings) == ["imports", "data", "checks", "training", "evaluation", "files"]
    assert all(seconds >= 0 for seconds in timings.values())
    assert sum(timings.values()) <= wall + 0.01  # phases of this call, none counted twice
    assert timings["training"] >= summary["seconds"] - 0.01  # the loop holds the steps
    assert timings["training"] == pytest.approx(summary["leg"]["wall_seconds"], abs=2e-3)
    # The checkpoint written as the run stopped is part of the loop's time, and said apart.
    assert 0 < summary["last_checkpoint_seconds"] <= timings["training"] - summary["seconds"] + 0.01
    line = next(t for t in capsys.readouterr().out.splitlines() if t.startswith("  time:"))
    assert "in all: imports" in line and "training" in line and "files" in line


def test_demo_times_its_video(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--steps", "2", "--size", "16", "--views", "4"]
    assert main([*args, "--no-progress", "--device", "cpu"]) == 0
    timings = json.loads((out / "summary.json").read_text())["timings"]
    assert list(timings)[-1] == "video" and timings["video"] > 0
    assert main([*args, "--no-video", "--overwrite", "--no-progress", "--device", "cpu"]) == 0
    timings = json.loads((out / "summary.json").read_text())["timings"]
    assert list(timings)[-2:] == ["evaluation", "files"]  # no video, no phase for it
