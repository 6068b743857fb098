"""benchmarks/error_budget.py: the held-out views' PSNR before and after oracle colour and
pose fits."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gsnb.data.dataset import load_dataset
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.raster.api import render_splats
from gsnb.train import TrainConfig, Trainer
from gsnb.train.pose_refine import correction_matrices as corrections
from gsnb.train.pose_refine import move_splats, pose_difference

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import error_budget  # noqa: E402


def test_the_colour_fit_recovers_an_affine_transform_that_mixes_channels() -> None:
    g = torch.Generator().manual_seed(0)
    render = torch.rand(12, 10, 3, generator=g)
    A = torch.tensor([[0.9, 0.1, 0.0, 0.02], [0.05, 0.8, 0.05, -0.01], [0.0, 0.2, 0.7, 0.03]])
    target = render @ A[:, :3].T + A[:, 3]
    got, fitted = error_budget.fit_colour(render, target)
    assert torch.allclose(got, A, atol=1e-4) and torch.allclose(fitted, target, atol=1e-4)


def test_the_pose_fit_finds_a_known_pose_error() -> None:
    g = torch.Generator().manual_seed(1)
    n, size = 300, 48
    splats = {
        "means": (torch.rand(n, 3, generator=g) - 0.5) * torch.tensor([2.0, 2.0, 0.5]),
        "quats": torch.randn(n, 4, generator=g),
        "scales": torch.full((n, 3), math.log(0.06)),
        "opacities": torch.full((n,), 2.0),
        "sh0": torch.randn(n, 1, 3, generator=g),
        "shN": torch.zeros(n, 0, 3),
    }
    viewmat = torch.eye(4)
    viewmat[2, 3] = 3.0  # the blobs 3 units in front of the camera
    K = torch.tensor([[50.0, 0, size / 2], [0, 50.0, size / 2], [0, 0, 1]])
    truth = torch.tensor([0.0, 0.012, -0.008, 0.01, -0.006, 0.004])  # ~0.8 degrees, 1% extent

    def draw(params: torch.Tensor) -> torch.Tensor:
        moved = move_splats(splats, viewmat, params, 1.0)
        return render_splats(
            moved, viewmat[None], K[None], size, size, sh_degree=0, backend="reference",
            backgrounds=torch.zeros(3),
        ).rgb[0]  # fmt: skip

    target = draw(truth).detach()
    best, render, curve = error_budget.fit_pose(draw, target, steps=120, lr=2e-3)
    assert curve[0] < 30 and max(curve) > 45  # misaligned at first, then the photo's own pose
    assert error_budget.psnr(render, target) == pytest.approx(max(curve))
    # up to what a shallow scene cannot tell apart (a small turn against a small shift)
    angle, shift = pose_difference(corrections(best, 1.0), corrections(truth, 1.0))
    assert math.degrees(float(angle)) < 0.1 and float(shift) < 5e-3


def budget(run: Path, out: Path, pose_steps: int) -> dict:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "error_budget.py"), str(run), "--out", str(out),
         "--pose-steps", str(pose_steps)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "held-out views: raw" in done.stdout
    return json.loads((out / "error_budget.json").read_text())


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"rasterize_mode": "antialiased", "filter3d": True},
        {"exposure": True, "pose_refine": True},  # 3DGS's test halves, corrections learned
        {"exposure": True, "train_test_exp": False},  # held out whole: the mean exposure
    ],
    ids=["plain", "antialiased_filter3d", "exposure_pose_refine", "exposure_held_out"],
)
def test_a_run_gets_each_held_out_views_budget(tmp_path: Path, options: dict) -> None:
    scene = make_synthetic_scene(tmp_path / "scene", num_views=6, size=24, num_points=80)
    run = tmp_path / "run"
    config = TrainConfig(steps=30, test_every=3, out_dir=str(run), device="cpu", **options)
    trainer = Trainer(load_dataset(scene, test_every=3), config)
    trainer.run()
    trainer.save_checkpoint()
    evaluation = trainer.evaluate()
    evaluated = {name: p for name, p, _ in evaluation.per_view}
    # without fitting the pose, the pose columns are the render evaluation scores
    same = budget(run, tmp_path / "same", pose_steps=0)["views"]
    assert set(same) == set(evaluated) and len(same) == 2
    for name, v in same.items():
        assert v["raw"] == pytest.approx(evaluated[name], abs=2e-3)  # as evaluation sees it
        assert v["pose"] == pytest.approx(v["raw"], abs=2e-3)
        assert v["both"] == pytest.approx(v["colour"], abs=2e-3)
        assert v["pose_degrees"] == v["pose_extents"] == 0
    result = budget(run, tmp_path / "fit", pose_steps=10)
    for v in result["views"].values():
        # each fit starts from what it improves on (identity colours, the view's own pose)
        assert v["colour"] >= v["raw"] - 1e-3 and v["pose"] >= v["raw"] - 1e-3
        assert v["both"] >= v["pose"] - 1e-3
        assert v["pose_degrees"] >= 0 and v["pose_extents"] >= 0
    assert result["summary"]["raw"] == pytest.approx(evaluation.psnr, abs=2e-3)


def test_a_run_without_held_out_views_is_refused(tmp_path: Path) -> None:
    scene = make_synthetic_scene(tmp_path / "scene", num_views=3, size=16, num_points=40)
    config = TrainConfig(steps=2, test_every=0, out_dir=str(tmp_path / "run"), device="cpu")
    trainer = Trainer(load_dataset(scene, test_every=0), config)
    trainer.run()
    trainer.save_checkpoint()
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "error_budget.py"), str(tmp_path / "run"),
         "--out", str(tmp_path / "budget")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "no held-out views" in done.stderr
