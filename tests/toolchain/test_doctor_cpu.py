"""``gsnb doctor`` on a machine without an NVIDIA GPU: one cause, what works, exit code 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gsnb import cli
from gsnb.toolchain import environment
from gsnb.toolchain.gpus import GPU
from gsnb.toolchain.report import CPU_ONLY, EXIT_CPU_ONLY, EXIT_PROBLEM, DoctorReport


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch and nvidia-smi see no GPU, whatever this machine has, and none is hidden."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(environment, "torch_gpus", lambda: [])
    monkeypatch.setattr(environment, "smi_gpus", lambda host: ([], None))


def test_no_gpu_is_one_line_and_the_last_line_says_what_works(
    no_gpu: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["doctor", "--cache-dir", str(tmp_path)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == EXIT_CPU_ONLY == 3
    assert not any(line.startswith("FAIL") and ("GPU" in line or "arch" in line) for line in lines)
    assert lines[-1] == CPU_ONLY and "works on the CPU" in lines[-1]


def test_no_gpu_json_says_cpu_only_and_not_ready(
    no_gpu: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["doctor", "--json", "--cache-dir", str(tmp_path)]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["cpu_only"] is True and report["ready"] is False
    assert report["summary"] == CPU_ONLY


def test_build_without_a_gpu_still_names_the_fix(no_gpu: None, tmp_path: Path) -> None:
    env = environment.discover(cache_dir=tmp_path)
    failures = env.failures()
    assert [c.name for c in failures][:1] == ["GPU"]
    assert "--arch" in str(failures[0].diagnosis)


def test_a_gpu_nvidia_smi_sees_but_torch_does_not_is_a_problem(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(environment, "torch_gpus", lambda: [])
    hidden = GPU(0, "NVIDIA H200", (9, 0), 0, "nvidia-smi")
    monkeypatch.setattr(environment, "smi_gpus", lambda host: ([hidden], "580.1"))
    report = DoctorReport(environment.discover(cache_dir=tmp_path))
    assert not report.environment.cpu_only
    assert report.exit_code == EXIT_PROBLEM
    assert any(c.name == "GPU" and c.status == "fail" for c in report.checks)


def test_a_cpu_build_of_torch_is_right_on_a_machine_without_a_gpu(
    no_gpu: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(torch.version, "cuda", None)
    report = DoctorReport(environment.discover(cache_dir=tmp_path))
    (check,) = [c for c in report.checks if c.name == "torch"]
    assert check.status == "info" and "CPU-only build" in check.note
    assert report.exit_code == EXIT_CPU_ONLY


def test_build_without_a_gpu_says_there_is_nothing_to_build(
    no_gpu: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["build", "--cache-dir", str(tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gsnb build: nothing to build for this machine, which has no NVIDIA GPU")
    assert "--arch" in err  # and how to compile for another machine's
