"""benchmarks/bench_interactive.py keeps the rounds it finished when it is cut short."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_each_finished_round_is_in_the_json_when_the_run_is_killed(tmp_path: Path) -> None:
    pytest.importorskip("viser", reason="the viewer conditions need viser (gsnb[viewer])")
    out = tmp_path / "out"
    argv = ["--synthetic", "16", "--device", "cpu", "--backend", "reference", "--no-build",
            "--warmup", "3", "--window", "0.3", "--rounds", "50", "--viewer-size", "64x36",
            "--conditions", "headless,viewer_resting", "--out", str(out)]  # fmt: skip
    env = os.environ | {"OMP_WAIT_POLICY": "PASSIVE"}
    run = subprocess.Popen(
        [sys.executable, str(BENCHMARKS / "bench_interactive.py"), *argv],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    path = out / "bench_interactive.json"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and run.poll() is None:
            if path.exists() and json.loads(path.read_text())["rounds_done"] >= 2:
                break
            time.sleep(0.2)
    finally:
        run.kill()  # as a time limit would, far from the 50 rounds asked for
        output = run.communicate()[0]
    result = json.loads(path.read_text())  # whole: written atomically after each round
    assert 2 <= result["rounds_done"] < 50, output[-2000:]
    for condition in ("headless", "viewer_resting"):
        entry = result["conditions"][condition]
        assert len(entry["rounds"]["steps_per_s"]) >= result["rounds_done"]
        assert entry["steps_per_s_median"] > 0
    resting = result["conditions"]["viewer_resting"]
    assert "frames_per_s_median" in resting and "throughput_vs_headless_paired_se" in resting
