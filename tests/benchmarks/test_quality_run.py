"""benchmarks/quality_run.py trains a recipe on the CPU and prints its one result line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gsnb.data.synthetic import make_synthetic_scene

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "quality_run.py"


def test_a_recipe_run_prints_its_result(tmp_path: Path, monkeypatch) -> None:
    scene = make_synthetic_scene(tmp_path / "scene", num_views=4, size=16, num_points=100)
    monkeypatch.setenv("GSNB_RUN_DEVICE", "cpu")
    monkeypatch.setenv("GSNB_RUN_BACKEND", "reference")
    argv = ["revised", "3", "2", str(scene), "1", "default", '{"revised_opacity": true}',
            '{"rasterize_mode": "antialiased"}']  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    row = json.loads(line.removeprefix("RESULT "))
    assert row["name"] == "revised" and row["seed"] == 3 and row["steps"] == 2
    assert row["n"] > 0 and 0 < row["psnr"] < 100
    views = row["views"]  # each test view's PSNR, whose mean is the run's
    assert views and sum(views.values()) / len(views) == pytest.approx(row["psnr"], abs=2e-3)
