"""benchmarks/bench_quality_options.py runs on the CPU at a tiny size and states each protocol."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_quality_options import main

from gsnb.data.synthetic import make_synthetic_scene


def test_tiny_run_writes_every_row_with_its_protocol(tmp_path: Path) -> None:
    scene = make_synthetic_scene(tmp_path / "scene", num_views=4, size=16, num_points=100)
    out = str(tmp_path / "out")
    argv = [str(scene), "--steps", "2", "--downscale", "1", "--test-every", "4",
            "--backend", "reference", "--device", "cpu", "--out", out]  # fmt: skip
    assert main(argv) == 0
    result = json.loads((tmp_path / "out" / "quality_options_2.json").read_text())
    rows = result["runs"]
    assert list(rows) == ["baseline", "exposure", "pose_refine", "both"]
    assert [rows[r]["protocol"] for r in rows] == [
        "full images", "right halves", "full images", "right halves"
    ]  # fmt: skip
    assert rows["both"]["options"] == {"exposure": True, "pose_refine": True}
    assert all(row["test_views"] == 1 and row["num_gaussians"] > 0 for row in rows.values())
    assert {"environment", "commit", "command"} <= set(result)
    assert result["environment"]["date"] and "--steps 2" in result["command"]
