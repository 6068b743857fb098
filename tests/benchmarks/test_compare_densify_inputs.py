"""benchmarks/compare_densify_inputs.py: the comparison itself, on CPU, with the reference
backend standing in for gsplat."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import gsnb
from gsnb.train import TrainConfig, Trainer
from tests.train.conftest import build_scene

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import compare_densify_inputs as cdi


@pytest.fixture
def trainer(tmp_path):
    scene = build_scene(tmp_path, size=16, views=3, gaussians=30, points=40)
    t = Trainer(scene, TrainConfig(steps=3, seed=0, device="cpu", backend="reference"))
    t.run(progress=False)
    return t


def test_the_same_renderer_twice_sees_the_same_inputs(trainer, monkeypatch):
    monkeypatch.setattr(cdi, "gsplat_renderer", gsnb.render)
    r = cdi.compare(trainer)
    assert r["views"] == 3 and r["gaussians"] == trainer.num_gaussians
    assert r["visible_pairs"]["gsnb"] == r["visible_pairs"]["gsplat"] > 0
    assert r["visible_pairs_differing"] == 0
    assert r["above_threshold"]["gsnb"] == r["above_threshold"]["gsplat"]
    assert all(v["max"] == 0 for v in r["relative_l2_per_view"].values())
    assert trainer.renderer is trainer.default_renderer


def test_a_different_renderer_shows(trainer, monkeypatch):
    def dimmer(means, quats, scales, opacities, *args, **kwargs):
        return gsnb.render(means, quats, scales, 0.5 * opacities, *args, **kwargs)

    monkeypatch.setattr(cdi, "gsplat_renderer", dimmer)
    r = cdi.compare(trainer)
    assert r["relative_l2_per_view"]["rgb"]["mean"] > 1e-3
    assert r["relative_l2_per_view"]["opacities"]["mean"] > 1e-3
    assert torch.isfinite(torch.tensor(r["relative_l2_per_view"]["means2d"]["max"]))
