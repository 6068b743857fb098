"""``%gs_train`` in a real IPython shell, loaded with ``%load_ext gsnb``."""

from __future__ import annotations

import os
import time

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gsnb.notebook.panel import TrainingPanel
from gsnb.notebook.train_magics import TrainMagics
from gsnb.train import Trainer
from gsnb.viewer.server import port_is_free as port_free

QUICK = "--device cpu --sh-degree 1 --max-init-points 40"


@pytest.fixture
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "gsnb")
    yield ip
    for name in [k for k, v in ip.user_ns.items() if isinstance(v, (Trainer, TrainingPanel))]:
        value = ip.user_ns.pop(name)
        value.stop() if isinstance(value, Trainer) else value.close()


def test_trains_a_folder_in_the_background_and_shows_the_panel(shell, scene_root, capsys):
    assert (
        shell.run_line_magic("gs_train", f"{scene_root} --steps 4 --test-every 3 {QUICK}") is None
    )
    trainer, panel = shell.user_ns["trainer"], shell.user_ns["trainer_panel"]
    assert isinstance(trainer, Trainer) and isinstance(panel, TrainingPanel)
    assert "TrainingPanel(Trainer(" in capsys.readouterr().out  # shown (as text in a terminal)
    trainer.wait(60)
    assert trainer.step_count == 4 and trainer.status == "finished"
    assert trainer.config.data == str(scene_root.resolve()) and len(trainer.dataset.test) == 2
    assert trainer.config.sh_degree == 1 and trainer.model.sh_degree == 1


def test_takes_a_dataset_variable_options_and_a_name(shell, dataset):
    shell.user_ns["scene"] = dataset
    line = f"scene --steps 3 --strategy mcmc --camera 2 --no-start --name run {QUICK}"
    shell.run_line_magic("gs_train", line)
    run, panel = shell.user_ns["run"], shell.user_ns["run_panel"]
    assert run.strategy.name == "mcmc" and run.config.steps == 3 and run.status == "idle"
    assert panel.camera.value == 2 and run.dataset is dataset


def test_refuses_a_second_run_under_a_busy_name(shell, dataset):
    shell.run_line_magic("gs_train", f"{dataset.root} --steps 100000 {QUICK}")
    with pytest.raises(UsageError, match=r"trainer is still training; call trainer\.stop\(\)"):
        shell.run_line_magic("gs_train", f"{dataset.root} {QUICK}")


def test_bad_input_is_a_usage_error(shell, tmp_path):
    with pytest.raises(UsageError, match="neither a dataset folder nor a notebook variable"):
        shell.run_line_magic("gs_train", f"{tmp_path / 'missing'} {QUICK}")
    with pytest.raises(UsageError, match="unrecognized arguments: --bogus"):
        shell.run_line_magic("gs_train", "x --bogus")
    with pytest.raises(UsageError, match="invalid choice: 'best'"):
        shell.run_line_magic("gs_train", "x --strategy best")


def test_bad_settings_are_usage_errors(shell, scene_root):
    with pytest.raises(UsageError, match=r"--steps 0 is outside its range"):
        shell.run_line_magic("gs_train", f"{scene_root} --steps 0 {QUICK}")
    with pytest.raises(UsageError, match=r"no training view named 'nope\.png'"):
        shell.run_line_magic("gs_train", f"{scene_root} --camera nope.png {QUICK}")


def test_help_lists_the_options(shell, capsys):
    shell.run_cell("%gs_train?")
    out = capsys.readouterr().out
    for option in ("--steps", "--downscale", "--strategy", "--viewer", "--resume", "--no-start"):
        assert option in out
    assert "--eval-every" in TrainMagics.gs_train.__doc__


def test_out_names_the_checkpoint_folder_and_every_setting_reaches_the_trainer(
    shell, scene_root, tmp_path
):
    out = tmp_path / "run"
    line = f"{scene_root} --steps 3 --out {out} --lr-scales 2e-3 --random-background {QUICK}"
    shell.run_line_magic("gs_train", line)
    trainer = shell.user_ns["trainer"]
    trainer.wait(60)
    assert trainer.config.lr_scales == 2e-3 and trainer.config.random_background
    assert trainer.config.out_dir == str(out) and (out / "checkpoint.pt").is_file()


def test_out_dir_is_a_deprecated_spelling_of_out(shell, scene_root, tmp_path):
    with pytest.warns(FutureWarning, match="--out-dir is deprecated; use --out"):
        shell.run_line_magic("gs_train", f"{scene_root} --out-dir {tmp_path} --no-start {QUICK}")
    assert shell.user_ns["trainer"].config.out_dir == str(tmp_path)


def test_resume_continues_a_run_and_steps_extend_it(shell, scene_root, tmp_path):
    shell.run_line_magic("gs_train", f"{scene_root} --steps 3 --out {tmp_path} {QUICK}")
    shell.user_ns["trainer"].wait(60)
    resume = f"{scene_root} --resume {tmp_path / 'checkpoint.pt'} --steps 5 --no-start"
    shell.run_line_magic("gs_train", resume)
    trainer = shell.user_ns["trainer"]
    assert (trainer.step_count, trainer.config.steps, trainer.config.sh_degree) == (3, 5, 1)


def test_resume_trains_on_the_data_given_and_names_ignored_settings(
    shell, scene_root, tmp_path, capsys
):
    shell.run_line_magic("gs_train", f"{scene_root} --steps 3 --out {tmp_path} {QUICK}")
    shell.user_ns["trainer"].wait(60)
    resume = f"{tmp_path / 'nowhere'} --resume {tmp_path / 'checkpoint.pt'} --no-start"
    with pytest.raises(UsageError, match="neither a dataset folder"):
        shell.run_line_magic("gs_train", resume)
    again = f"{scene_root} --resume {tmp_path / 'checkpoint.pt'} --sh-degree 0 --no-start"
    shell.run_line_magic("gs_train", again)
    assert shell.user_ns["trainer"].config.sh_degree == 1  # the checkpoint's
    assert "--sh-degree ignored" in capsys.readouterr().err


def test_a_new_run_stops_the_viewer_of_the_old_one_under_its_name(shell, dataset):
    pytest.importorskip("viser")
    from gsnb.viewer.server import port_is_free

    shell.run_line_magic("gs_train", f"{dataset.root} --steps 2 --viewer --no-start {QUICK}")
    first = shell.user_ns["trainer_viewer"]
    port = first.port
    assert not port_is_free("127.0.0.1", port)
    # the same port again: free because the old viewer was stopped, not orphaned
    shell.run_line_magic(
        "gs_train", f"{dataset.root} --steps 2 --viewer --no-start --port {port} {QUICK}"
    )
    second = shell.user_ns["trainer_viewer"]
    assert second is not first and second.port == port and "stopped" in repr(first)
    second.stop()
    assert port_is_free("127.0.0.1", port)


def _until(condition, seconds: float, what: str, run) -> None:
    """Wait for ``condition()``, failing after ``seconds`` (or when the workers end)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline or not run.running:
            pytest.fail(
                f"{what}: not within {seconds} s; output:\n" + "\n".join(run.background.lines)
            )
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_nproc_trains_in_worker_processes_and_shows_process_0s_output(shell, scene_root, tmp_path):
    from gsnb.notebook.workers import WorkerRun, WorkersPanel

    out = tmp_path / "run"
    line = (
        f"{scene_root} --out {out} --nproc 2 --batch-size 2 --steps 3 --backend reference {QUICK}"
    )
    shell.run_line_magic("gs_train", line)
    run, panel = shell.user_ns["trainer"], shell.user_ns["trainer_panel"]
    assert isinstance(run, WorkerRun) and isinstance(panel, WorkersPanel)
    try:
        assert run.wait(180) == 0, "\n".join(run.background.lines)
    finally:
        run.stop()
    text = "\n".join(run.background.lines)
    assert "gsnb train: 3 steps in" in text and "[exit code 0]" in text
    assert "steps/s" in run.background.widget.value
    assert (out / "checkpoint.pt").is_file()
    panel.update(force=True)  # the panel shows process 0's steps, as for one process
    assert run.status == "finished" and panel.progress.value == 3
    assert [m.step for m in run.history] == [1, 2, 3]
    assert list(panel.curves.widget.data[0].x) == [1, 2, 3]
    with pytest.raises(UsageError, match="needs --out"):
        shell.run_line_magic("gs_train", f"{scene_root} --nproc 2 {QUICK}")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_nproc_panel_shows_the_live_run_and_steers_every_worker(shell, scene_root, tmp_path):
    out = tmp_path / "run"
    line = f"{scene_root} --out {out} --nproc 2 --batch-size 2 --steps 100000 --backend reference"
    shell.run_line_magic("gs_train", f"{line} {QUICK}")
    run, panel = shell.user_ns["trainer"], shell.user_ns["trainer_panel"]
    try:
        # process 0's metrics reach the curves while the run goes on
        _until(lambda: len(panel.curves.loss) >= 3, 150, "live curves", run)
        panel.update(force=True)  # the panel thread may be between the curves and the counter
        assert run.running and panel.progress.value >= 3 and run.status == "running"
        panel.knobs.controls["ssim_lambda"].value = 0.5  # the panel's control, as a user does
        _until(lambda: run.config.ssim_lambda == 0.5, 30, "knob applied", run)
        assert not run.pending_knobs
        with pytest.raises(ValueError, match="unknown knob"):
            run.set(bogus=1)
        panel.pause_button.click()
        _until(lambda: run.status == "paused", 30, "paused", run)
        at = run.step_count
        time.sleep(1.0)
        run.poll(force=True)
        assert run.step_count == at and panel.pause_button.description == "Resume"
        panel.pause_button.click()
        _until(lambda: run.step_count > at, 30, "resumed", run)
    finally:
        code = run.stop(60)
    assert code == 130 and run.status == "stopped"
    assert (out / "checkpoint.pt").is_file()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_nproc_viewer_runs_in_process_0_and_shows_in_the_panel(shell, scene_root, tmp_path):
    pytest.importorskip("viser")
    out = tmp_path / "run"
    line = f"{scene_root} --out {out} --nproc 2 --batch-size 2 --steps 100000 --backend reference"
    shell.run_line_magic("gs_train", f"{line} --viewer {QUICK}")
    run, panel = shell.user_ns["trainer"], shell.user_ns["trainer_panel"]
    try:
        _until(lambda: getattr(panel, "viewer", None) is not None, 150, "viewer", run)
        info = panel.viewer
        assert (out / "viewer.json").stat().st_mode & 0o777 == 0o600
        assert info["secret"] in info["url"] and info["pid"] != os.getpid()
        assert not port_free("127.0.0.1", info["port"])  # served by process 0
        assert all(info["secret"] not in line for line in run.background.lines)
        assert panel.viewer_area.outputs  # the viewer, embedded
    finally:
        run.stop(60)
    assert not (out / "viewer.json").exists()
