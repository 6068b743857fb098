"""The reference backend equals a brute-force evaluation over all Gaussians.

Radii and tiles only accelerate: any difference from the per-pixel loop of
``bruteforce.py`` is a bug (an edge artefact, a missed tile, a wrong block carry).
"""

from __future__ import annotations

import pytest
import torch

import gsnb

from .bruteforce import assert_images_close, render_brute
from .scenes import Scene, random_scene


def render_both(scene: Scene, **kwargs: object) -> tuple[gsnb.RenderResult, tuple]:
    out = gsnb.render(*scene.args(), backend="reference", **kwargs)
    return out, render_brute(*scene.args(), **kwargs)


def outputs(out: gsnb.RenderResult) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return out.rgb, out.alpha, out.depth


@pytest.mark.parametrize(
    ("width", "height"),
    [(17, 13), (13, 17), (1, 1), (33, 20), (20, 33), (16, 16), (49, 17), (2, 31)],
)
def test_odd_sizes_match_bruteforce(width: int, height: int) -> None:
    scene = random_scene(40, width=width, height=height, num_cams=2, seed=width * 100 + height)
    out, want = render_both(scene)
    assert_images_close(outputs(out), want, atol=1e-10)
    # The scene reaches the last row and column, so edge artefacts would show.
    alpha = want[1][..., 0]
    assert (alpha[:, -1, :] > 0.01).any() and (alpha[:, :, -1] > 0.01).any()
    assert (alpha > 0).float().mean() > 0.3


def test_float32_matches_float64_bruteforce() -> None:
    scene = random_scene(60, width=33, height=20, num_cams=2, seed=7)
    single = Scene(**{k: v.float() for k, v in scene.tensors().items()}, width=33, height=20)
    out = gsnb.render(*single.args())
    assert out.rgb.dtype == torch.float32
    assert_images_close(
        tuple(t.double() for t in outputs(out)), render_brute(*scene.args()), atol=2e-4
    )


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_sh_colours_match_bruteforce(degree: int) -> None:
    scene = random_scene(30, width=21, height=18, num_cams=2, seed=degree, sh_degree=degree)
    out, want = render_both(scene)
    assert_images_close(outputs(out), want, atol=1e-10)


def test_lower_sh_degree_uses_the_first_coefficients() -> None:
    scene = random_scene(30, width=21, height=18, seed=5, sh_degree=3)
    out, want = render_both(scene, sh_degree=1)
    assert_images_close(outputs(out), want, atol=1e-10)
    truncated = Scene(**{**scene.tensors(), "colors": scene.colors[:, :4]}, width=21, height=18)
    assert_images_close(outputs(out), outputs(gsnb.render(*truncated.args())), atol=0)


@pytest.mark.parametrize(("near", "far"), [(3.9, 1e10), (0.01, 4.1), (3.8, 4.2)])
def test_near_and_far_planes_match_bruteforce(near: float, far: float) -> None:
    scene = random_scene(40, width=24, height=19, num_cams=2, seed=11)
    out, want = render_both(scene, near_plane=near, far_plane=far)
    assert_images_close(outputs(out), want, atol=1e-10)
    depths = out.meta.depths
    culled = (depths <= near) | (depths >= far)
    assert culled.any() and (~culled).any()
    assert (out.meta.radii[culled] == 0).all()


def test_backgrounds_per_camera_match_bruteforce() -> None:
    scene = random_scene(30, width=17, height=13, num_cams=3, seed=3)
    bg = torch.rand(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    out, want = render_both(scene, backgrounds=bg)
    assert_images_close(outputs(out), want, atol=1e-10)


def crowded_scene(n: int, opacity_range: tuple[float, float], seed: int) -> Scene:
    """``n`` wide faint Gaussians over every pixel of a 32x32 image (4 full tiles)."""
    return random_scene(
        n, width=32, height=32, seed=seed, opacity_range=opacity_range,
        scale_range=(1.0, 3.0), spread=0.3,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("n", "opacity_range", "saturated"),
    [
        # More splats per tile than one block holds; the 1e-4 stop falls in the
        # last block for some pixels: the transmittance must carry across blocks.
        (1100, (0.004, 0.014), False),
        # Every pixel stops long before the last splat: compositing may end early.
        (1500, (0.01, 0.03), True),
    ],
)
def test_crowded_tiles_match_bruteforce_with_gradients(
    n: int, opacity_range: tuple[float, float], saturated: bool
) -> None:
    scene = crowded_scene(n, opacity_range, seed=n).with_grad()
    out, want = render_both(scene)
    assert_images_close(outputs(out), want, atol=1e-10)
    final_t = 1 - want[1]
    assert (
        (final_t < 1.1e-4).all()
        if saturated
        else ((final_t < 1.1e-4).any() and (final_t > 2e-4).any())
    )

    weights = [torch.randn_like(t) for t in want]
    loss = sum((w * t).sum() for w, t in zip(weights, outputs(out), strict=True))
    loss_brute = sum((w * t).sum() for w, t in zip(weights, want, strict=True))
    tensors = list(scene.tensors().values())
    grads = torch.autograd.grad(loss, tensors)
    grads_brute = torch.autograd.grad(loss_brute, tensors)
    for name, g, gb in zip(scene.tensors(), grads, grads_brute, strict=True):
        torch.testing.assert_close(g, gb, rtol=1e-9, atol=1e-9 * gb.abs().max(), msg=name)
