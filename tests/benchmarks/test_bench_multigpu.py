"""benchmarks/bench_multigpu.py: the commands it runs and the speed-ups it reports."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_multigpu import speedups, train_command


def test_each_configuration_is_one_gsnb_train_command_through_nproc() -> None:
    args = argparse.Namespace(
        steps=2000, downscale=1, device="auto", backend="cuda", extra=["--seed", "1"]
    )
    command = train_command(args, Path("fox"), Path("out/b4_n2"), 4, 2)
    assert command[1:4] == ["-m", "gsnb.cli", "train"]
    joined = " ".join(command)
    assert "--nproc 2 --batch-size 4 --steps 2000 --downscale 1" in joined
    assert command[-2:] == ["--seed", "1"]


def test_speedups_compare_views_per_second_at_one_batch_size() -> None:
    rows = [
        {"batch_size": 2, "nproc": 1, "views_per_s": 100.0},
        {"batch_size": 2, "nproc": 2, "views_per_s": 180.0},
        {"batch_size": 4, "nproc": 1, "views_per_s": 120.0},
        {"batch_size": 4, "nproc": 2, "error": "out of memory"},
    ]
    assert speedups(rows) == {"batch2_nproc2_vs_1": 1.8}


def test_training_commands_keep_the_callers_python_path(monkeypatch) -> None:
    """Packages found through the caller's PYTHONPATH (e.g. ``pip install --target``) stay
    importable in the training commands, after this checkout."""
    import os

    import bench_multigpu

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/opt/site", "/tmp/extra"]))
    parts = bench_multigpu.python_path().split(os.pathsep)
    assert parts == [str(bench_multigpu.REPO), "/opt/site", "/tmp/extra"]
