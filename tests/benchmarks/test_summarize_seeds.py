"""benchmarks/summarize_seeds.py: the spread of gsnb-vs-gsplat differences over seeds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_train import compare
from summarize_seeds import summarize


def run_file(
    tmp_path: Path,
    seed: int,
    psnr: tuple[float, float],
    wall: tuple[float, float],
    overlapped: tuple[bool, bool] = (False, False),
):
    runs = {
        name: {
            "test_psnr": p,
            "wall_s": w,
            "train_psnr": p + 3,
            "peak_memory_gib": 1.0,
            "num_gaussians": 1000 + seed,
        }
        | ({"overlapped": True} if shared else {})
        for name, p, w, shared in zip(("gsnb", "gsplat"), psnr, wall, overlapped, strict=True)
    }
    payload = compare({"seed": seed, "steps": 7000, "runs": runs})  # as bench_train writes it
    path = tmp_path / f"seed{seed}.json"
    path.write_text(json.dumps(payload))
    return path


def test_differences_and_ratios_over_seeds(tmp_path):
    files = [
        run_file(tmp_path, 1, (31.0, 31.5), (18.0, 24.0)),
        run_file(tmp_path, 0, (32.0, 31.7), (20.0, 25.0)),
        run_file(tmp_path, 2, (31.4, 31.4), (21.0, 25.0)),
    ]
    s = summarize(files)
    assert s["seeds"] == [0, 1, 2]
    assert s["test_psnr_diff_db"]["mean"] == pytest.approx((0.3 - 0.5 + 0.0) / 3, abs=1e-3)
    assert s["test_psnr_diff_db"]["min"] == -0.5 and s["test_psnr_diff_db"]["max"] == 0.3
    assert s["wall_ratio"]["mean"] == pytest.approx((0.8 + 0.75 + 0.84) / 3, abs=1e-3)
    assert s["test_psnr_diff_db"]["standard_error"] == pytest.approx(
        s["test_psnr_diff_db"]["sd"] / 3**0.5, abs=1e-3
    )
    assert s["train_psnr_diff_db"]["runs"] == 3


def test_mixed_step_counts_are_refused(tmp_path):
    a = run_file(tmp_path, 0, (31.0, 31.0), (1.0, 1.0))
    b = tmp_path / "b.json"
    payload = json.loads(a.read_text()) | {"steps": 30000, "seed": 1}
    b.write_text(json.dumps(payload))
    with pytest.raises(SystemExit, match="different step counts"):
        summarize([a, b])


def test_runs_that_shared_the_gpu_keep_their_psnr_but_not_their_wall_ratio(tmp_path):
    files = [
        run_file(tmp_path, 0, (32.0, 31.7), (20.0, 25.0)),
        run_file(tmp_path, 1, (31.0, 31.5), (50.0, 24.0), overlapped=(True, False)),
        run_file(tmp_path, 2, (31.4, 31.4), (40.0, 60.0), overlapped=(False, True)),
    ]
    assert json.loads(files[1].read_text())["gsnb_vs_gsplat"]["wall_ratio"] is None
    s = summarize(files)
    assert s["test_psnr_diff_db"]["mean"] == pytest.approx((0.3 - 0.5 + 0.0) / 3, abs=1e-3)
    assert s["wall_ratio"]["runs"] == 1 and s["wall_ratio"]["mean"] == 0.8
    assert s["num_gaussians_ratio"]["mean"] == 1.0
    shared = [run_file(tmp_path, 3, (31.0, 31.0), (9.0, 9.0), overlapped=(True, True))]
    assert summarize(shared)["wall_ratio"] is None
