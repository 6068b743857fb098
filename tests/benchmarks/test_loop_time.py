"""benchmarks/loop_time.py: a run's loop wall time split into parts that add up to it."""

from __future__ import annotations

import gc
import json
import sys
import time
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
    assert all("host_stacks" in g and g["rebinned_before"] >= 0 for g in r["largest_gaps"])
    assert r["gc_seconds"] >= 0 and r["rebinned_steps"] >= 0


def test_gaps_are_measured_between_deliveries():
    stamps = [(1, 1.0, 0.5, False), (2, 1.6, 0.5, False), (3, 3.0, 0.2, True)]
    r = loop_time.split_wall(0.0, 3.5, stamps, write=0.4)
    assert r["unclocked_between_s"] == pytest.approx(0.1 + 1.2)
    assert r["unclocked_at_refine_steps_s"] == pytest.approx(1.2)
    assert [g["step"] for g in r["largest_gaps"]] == [3, 2]


def test_watcher_samples_the_main_thread_only_while_no_step_comes():
    watcher = loop_time.StallWatcher(stall=0.02, every=0.002)
    now = time.perf_counter()
    watcher.start(now)
    watcher.delivered(time.perf_counter())  # delivery 0 came at once
    time.sleep(0.1)  # then nothing for 100 ms: delivery 1 is waited for
    watcher.stop()
    assert 0 not in watcher.samples
    top = watcher.top(1)
    assert top and "test_watcher_samples" in top[0]["stack"]


def test_gc_clock_times_collections_and_keeps_the_slow_ones():
    clock = loop_time.GcClock(long=0.0, where=lambda: 7)
    gc.callbacks.append(clock)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(clock)
    assert clock.collections >= 1 and clock.seconds >= clock.longest > 0
    assert clock.slow[-1]["generation"] == 2 and clock.slow[-1]["step"] == 7
