"""benchmarks/bench_patch.py: which kernels of a profiler table are the compositing's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_patch


def test_compositing_ms_counts_the_forward_passes_and_the_backward_only():
    # Names as profile_raster.short_name gives them.
    table = {
        "rasterize_forward_kernel<3>": 0.25,
        "segment_product_kernel": 0.01,
        "segment_blend_kernel<3>": 0.02,
        "segment_combine_kernel<3>": 0.04,
        "segment_starts_kernel": 0.5,  # the segments' layout, no compositing
        "rasterize_backward_kernel<3, 1, 8, false>": 0.6,
        "project_backward_kernel<false>": 0.07,
        "Memset (Device)": 0.01,
    }
    forward, backward = bench_patch.compositing_ms(table)
    assert forward == pytest.approx(0.32)
    assert backward == pytest.approx(0.6)
