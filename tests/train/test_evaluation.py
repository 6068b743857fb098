"""evaluate_views: image quality of any renderer on a set of views, without a trainer."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gsnb.data.dataset import SceneDataset, load_dataset
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.train.evaluation import evaluate_views
from gsnb.train.inputs import ViewImages, initial_model
from gsnb.train.rendering import BackendRenderer, render_model


@pytest.fixture
def scene(tmp_path: Path) -> SceneDataset:
    return load_dataset(make_synthetic_scene(tmp_path, num_views=4, size=16), test_every=2)


def test_known_errors_give_known_psnr(scene: SceneDataset) -> None:
    views = scene.test
    targets = [torch.full((v.height, v.width, 3), 0.6) for v in views]
    grey = {v.name: torch.full((v.height, v.width, 3), 0.5) for v in views}
    result = evaluate_views(lambda view: grey[view.name], views, targets, step=12)
    assert result.step == 12 and result.num_views == 2
    assert [row[0] for row in result.per_view] == [v.name for v in views]
    assert result.psnr == pytest.approx(20.0, abs=1e-4)  # MSE 0.01
    assert all(row[1] == pytest.approx(20.0, abs=1e-4) for row in result.per_view)
    assert result.seconds >= 0 and result.lpips is None and "LPIPS" in result.lpips_note


def test_a_model_on_a_synthetic_scene(scene: SceneDataset) -> None:
    model = initial_model(
        scene.points, scene.points_rgb, sh_degree=0, init_opacity=0.5, init_scale=1.0
    )
    renderer = BackendRenderer("reference")
    test = ViewImages(scene.test, torch.device("cpu"))

    def render_view(view):
        viewmat, K = test.cameras[test.views.index(view)]
        return render_model(model, renderer, viewmat, K, view.width, view.height).rgb[0]

    result = evaluate_views(render_view, test.views, test.images, step=0)
    assert result.num_views == 2 and math.isfinite(result.psnr) and 0 < result.psnr < 60
    assert result.psnr == pytest.approx(sum(r[1] for r in result.per_view) / 2)
    assert result.ssim == pytest.approx(sum(r[2] for r in result.per_view) / 2)
    assert -1 <= result.ssim < 1
    exact = evaluate_views(lambda view: test.images[test.views.index(view)], test.views,
                           test.images, step=0)  # fmt: skip
    assert exact.psnr > 100 and exact.ssim == pytest.approx(1.0) and exact.psnr > result.psnr


def test_mismatched_or_empty_inputs_are_refused(scene: SceneDataset) -> None:
    target = torch.zeros(16, 16, 3)
    with pytest.raises(ValueError, match="2 views but 1 target images"):
        evaluate_views(lambda view: target, scene.test, [target], step=0)
    with pytest.raises(ValueError, match="no views"):
        evaluate_views(lambda view: target, [], [], step=0)
