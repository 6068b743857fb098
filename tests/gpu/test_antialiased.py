"""``rasterize_mode="antialiased"`` on the CUDA backend against the float64 reference.

Error measure as in test_cuda_raster.py: relative L2 error ``|cuda - ref| / |ref|`` over a
whole output or gradient tensor (printed by ``check``), below 1e-4 for the images and 1e-3
for each gradient. The opacities' gradient reaches the compensation's too: it flows from
the rasterizer's per-camera opacities through the projection's backward.
"""

from __future__ import annotations

import pytest
import torch

import gsnb
from gsnb.train import TrainConfig, Trainer
from gsnb.train.exported import exported_model
from gsnb.train.strategy import default
from tests.gpu import test_render_splats as stored_tests
from tests.gpu.test_cuda_raster import check, compare, rel_err, scene
from tests.train.conftest import build_scene

AA = {"rasterize_mode": "antialiased"}


@pytest.mark.parametrize(
    ("n", "width", "height", "cams", "sh_degree"),
    [
        (1, 64, 48, 1, 0),
        (100, 97, 61, 1, 1),
        (1000, 129, 77, 2, 2),  # several cameras: atomics over per-camera opacities
        (5000, 200, 150, 3, 3),
        (20000, 256, 173, 4, None),
    ],
)
def test_matches_reference(cuda_ext, n, width, height, cams, sh_degree):
    g, viewmats, Ks = scene(n, width, height, cams, sh_degree=sh_degree, seed=n)
    errors, out_c, _ = compare(g, viewmats, Ks, width, height, **AA)
    check(errors)
    _, classic, _ = compare(g, viewmats, Ks, width, height)
    assert rel_err(out_c.rgb, classic.rgb) > 1e-3 or n == 1  # the mode changes the image


def test_small_splats_and_absgrad(cuda_ext):
    # Splats of about a pixel, where the compensation is far from 1.
    g, viewmats, Ks = scene(4000, 120, 90, 2, seed=3, scale_range=(0.001, 0.01))
    errors, out_c, _ = compare(g, viewmats, Ks, 120, 90, absgrad=True, **AA)
    check(errors)
    assert float(out_c.meta.absgrad.sum()) > 0


def test_tiny_and_degenerate_scales(cuda_ext):
    g, viewmats, Ks = scene(2000, 120, 80, 1, seed=5)
    g["scales"][:500] = 1e-8
    g["scales"][500:1000, 1:] = 1e-7  # needles: the compensation goes to 0
    g["scales"][1000:1500, 0] = 1e-7  # discs
    errors, _, _ = compare(g, viewmats, Ks, 120, 80, **AA)
    check(errors)


@pytest.mark.parametrize(("n", "cams", "used"), [(300, 1, None), (3000, 2, 1), (20000, 3, None)])
def test_stored_parameters_match_reference(cuda_ext, n, cams, used):
    g, viewmats, Ks = scene(n, 129, 77, cams, sh_degree=3, seed=n + 1)
    errors, _ = stored_tests.compare(
        stored_tests.stored(g), viewmats, Ks, 129, 77, sh_degree=used, **AA
    )
    check(errors)


def test_training_call_matches_reference(cuda_ext):
    # The trainer's call: one camera, a background, no depth channel, absgrad.
    g, viewmats, Ks = scene(4000, 150, 101, 1, seed=31)
    bg = torch.tensor([0.3, 0.6, 0.1], device="cuda")
    errors, out = stored_tests.compare(
        stored_tests.stored(g), viewmats, Ks, 150, 101, backgrounds=bg, with_depth=False,
        absgrad=True, **AA,
    )  # fmt: skip
    check(errors)
    assert out.depth is None and float(out.meta.absgrad.sum()) > 0


def test_several_cameras_equal_one_at_a_time(cuda_ext):
    g, viewmats, Ks = scene(3000, 100, 70, 3, seed=12)
    size = {"width": 100, "height": 70}
    together = gsnb.render(**g, viewmats=viewmats, Ks=Ks, **size, backend="cuda", **AA)
    for c in range(3):
        alone = gsnb.render(
            **g, viewmats=viewmats[c : c + 1], Ks=Ks[c : c + 1], **size, backend="cuda", **AA
        )
        assert rel_err(together.rgb[c : c + 1], alone.rgb) < 1e-6
        assert torch.equal(together.meta.radii[c : c + 1], alone.meta.radii)


@pytest.mark.parametrize("filter3d", [False, True])
def test_training_on_the_gpu_matches_the_reference_backend(cuda_ext, tmp_path, filter3d):
    # The trainer's antialiased (and 3D-filtered) step on the CUDA kernels against the same
    # run on the reference backend, float32 both: they differ by rounding only.
    data = build_scene(tmp_path / "scene", size=48, views=4, gaussians=60, points=200)
    runs = []
    for backend in ("cuda", "reference"):
        cfg = TrainConfig(
            steps=10, device="cuda", backend=backend, seed=3, rasterize_mode="antialiased",
            filter3d=filter3d,
        )  # fmt: skip
        trainer = Trainer(data, cfg, strategy=default.DefaultStrategy(refine_start_iter=1000))
        trainer.run()
        runs.append(trainer)
    for a, b in zip(runs[0].history, runs[1].history, strict=True):
        assert a.loss == pytest.approx(b.loss, rel=1e-3), (a.step, a.loss, b.loss)
    view = data.views[0]
    shown = runs[0].render_view(view).rgb
    assert rel_err(shown, runs[1].render_view(view).rgb) < 1e-3
    # The exported (baked) model renders the same image through the classic entry point.
    model = exported_model(runs[0])
    baked = gsnb.render_splats(
        model.splats, view.viewmat[None].cuda(), view.K[None].cuda(), view.width, view.height,
        sh_degree=runs[0].sh_degree_now, backgrounds=runs[0].background, backend="cuda",
        rasterize_mode="antialiased",
    )  # fmt: skip
    assert rel_err(baked.rgb, shown) < 1e-4
