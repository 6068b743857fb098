"""benchmarks/error_threshold.py: both densification criteria on one model, compared."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from gsnb.data.dataset import load_dataset
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.train import DefaultStrategy, TrainConfig, Trainer

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import error_threshold  # noqa: E402


def test_matching_threshold_picks_as_many_and_the_overlap_is_counted() -> None:
    gradient = torch.tensor([5e-4, 3e-4, 1e-4, 0.0, 2.5e-4])
    error = torch.tensor([1e-5, 1e-7, 3e-5, 2e-6, 4e-6])
    got = error_threshold.compare(gradient, error, 2e-4)
    assert got["picked_by_grow_grad2d"] == 3  # Gaussians 0, 1, 4
    assert got["grow_error_picking_as_many"] == pytest.approx(4e-6)  # picks 2, 0, 4
    assert got["picked_by_both"] == 2 and got["overlap_fraction"] == pytest.approx(2 / 3)
    assert got["picked_by_grow_error"]["5e-06"] == 2


def test_statistics_cover_every_gaussian_of_a_trained_model(tmp_path: Path) -> None:
    scene = make_synthetic_scene(tmp_path / "scene", num_views=3, size=24, num_points=80)
    trainer = Trainer(load_dataset(scene), TrainConfig(steps=2), strategy=DefaultStrategy())
    trainer.run()
    gradient, error = error_threshold.statistics(trainer)
    assert gradient.shape == error.shape == (trainer.num_gaussians,)
    assert bool((gradient >= 0).all() and (error >= 0).all()) and error.max() > 0
