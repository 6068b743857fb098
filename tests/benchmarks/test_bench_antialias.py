"""benchmarks/bench_antialias.py on a tiny synthetic capture (CPU, reference backend)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_antialias import area_downscale, main

from gsnb.data.synthetic import make_synthetic_scene


def test_every_mode_and_resolution_is_reported(tmp_path: Path) -> None:
    root = make_synthetic_scene(tmp_path / "scene", num_views=9, size=32, num_points=300)
    code = main([
        str(root), "--out", str(tmp_path / "out"), "--steps", "2", "--downscale", "2",
        "--backend", "reference", "--device", "cpu", "--max-views", "1",
    ])  # fmt: skip
    assert code == 0
    result = json.loads((tmp_path / "out" / "antialias_2.json").read_text())
    assert list(result["runs"]) == ["classic", "antialiased", "antialiased+filter3d"]
    assert result["train_size"] == [16, 16] and result["double_size"] == [32, 32]
    assert result["commit"] is None or len(result["commit"]) >= 40
    for run in result["runs"].values():
        for name in ("train_res", "half", "quarter", "double", "lanczos_double"):
            assert run[name]["views"] == 1 and 0 < run[name]["psnr"] < 100, name
    classic, aa = result["runs"]["classic"], result["runs"]["antialiased"]
    assert classic["half"] != aa["half"]  # the modes render differently
    # A second command for one mode keeps the others' runs in the file.
    main([
        str(root), "--out", str(tmp_path / "out"), "--steps", "2", "--downscale", "2",
        "--backend", "reference", "--device", "cpu", "--max-views", "1", "--modes", "classic",
    ])  # fmt: skip
    again = json.loads((tmp_path / "out" / "antialias_2.json").read_text())
    assert sorted(again["runs"]) == sorted(result["runs"])
    assert again["runs"]["antialiased"] == aa


def test_area_downscale_averages_blocks() -> None:
    image = torch.rand(8, 12, 3)
    small = area_downscale(image, 3, 2)
    torch.testing.assert_close(small[1, 2], image[4:, 8:].mean(dim=(0, 1)))
