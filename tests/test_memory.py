"""gsnb.estimate_peak_memory: shape of the model and agreement with the measured table."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

import gsnb.memory
from gsnb import estimate_peak_memory

TABLE = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "memory_h200.json"


def test_grows_with_gaussians_pixels_cameras_and_sh_degree():
    base = estimate_peak_memory(500_000, 1280, 720)
    assert estimate_peak_memory(1_000_000, 1280, 720) > base
    assert estimate_peak_memory(500_000, 1920, 1080) > base
    assert estimate_peak_memory(500_000, 1280, 720, cameras=2) > base
    assert estimate_peak_memory(500_000, 1280, 720, sh_degree=0) < base
    assert estimate_peak_memory(500_000, 1280, 720, dataset_bytes=10**9) == base + 10**9


@pytest.mark.parametrize("args", [(-1, 10, 10), (10, 0, 10), (10, 10, -5)])
def test_bad_arguments(args):
    with pytest.raises(ValueError, match="need num_gaussians"):
        estimate_peak_memory(*args)


def test_within_15_percent_of_the_measured_peaks():
    rows = json.loads(TABLE.read_text())["rows"]
    assert len(rows) >= 15
    for row in rows:
        estimate = estimate_peak_memory(row["gaussians"], row["width"], row["height"], sh_degree=3)
        measured = row["measured_mib"] * 2**20
        assert abs(estimate / measured - 1) <= 0.15, row


def test_docstring_example():
    assert doctest.testmod(gsnb.memory).failed == 0
