"""benchmarks/loop_time.py: a run's loop wall time split into parts that add up to it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import loop_time

from gsnb.data.synthetic import make_synthetic_scene


def test_parts_add_up_to_the_loop_and_hold_the_final_checkpoint(tmp_path, monkeypatch):
    data = make_synthetic_scene(tmp_path / "scene", num_views=9, size=16, num_points=100)
    out = tmp_path / "out"
    argv = ["loop_time.py", "--data", str(data), "--out", str(out), "--steps", "6",
            "--downscale", "1"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    assert loop_time.main() == 0
    r = json.loads((out / "loop_time.json").read_text())
    parts = (
        r["steps_clock_s"]
        + r["before_first_unclocked_s"]
        + r["unclocked_between_s"]
        + r["after_last_s"]
    )
    assert parts == pytest.approx(r["loop_wall_s"], abs=2e-3)
    assert 0 < r["final_checkpoint_write_s"] <= r["after_last_s"]
    assert (out / "run" / "checkpoint.pt").is_file()
    assert len(r["largest_gaps"]) == 5  # six steps delivered: five gaps between them


def test_gaps_are_measured_between_deliveries():
    stamps = [(1, 1.0, 0.5, False), (2, 1.6, 0.5, False), (3, 3.0, 0.2, True)]
    r = loop_time.split_wall(0.0, 3.5, stamps, write=0.4)
    assert r["unclocked_between_s"] == pytest.approx(0.1 + 1.2)
    assert r["unclocked_at_refine_steps_s"] == pytest.approx(1.2)
    assert [g["step"] for g in r["largest_gaps"]] == [3, 2]
