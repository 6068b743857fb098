"""``rasterize_mode="antialiased"`` of the reference backend: gsplat's semantics, gradients.

The antialiased mode multiplies each splat's opacity by ``sqrt(det(S) / det(S + 0.3 I))``
of its 2D covariance ``S`` (Mip-Splatting's 2D filter as gsplat implements it); the
rest of the render is the classic one.
"""

from __future__ import annotations

import math

import pytest
import torch

import gsnb

from .bruteforce import project_brute, raw_alphas
from .scenes import intrinsics, random_scene
from .test_gradients import render_fn, small_scene

F64 = torch.float64


def brute_compensations(scene) -> torch.Tensor:
    """``[C, N]`` sqrt(det(S) / det(S + 0.3 I)) from the brute-force projection."""
    splats = project_brute(
        scene.means, scene.quats, scene.scales, scene.viewmats, scene.Ks, scene.width, scene.height
    )
    blurred = splats.cov2d
    raw = blurred - 0.3 * torch.eye(2, dtype=blurred.dtype)
    return torch.sqrt(torch.linalg.det(raw) / torch.linalg.det(blurred))


def test_single_isotropic_gaussian_is_dimmed_by_s2_over_s2_plus_lowpass() -> None:
    # An isotropic Gaussian of std sigma at depth z on the optical axis projects to a
    # circle of std s = f sigma / z px: compensation s^2 / (s^2 + 0.3).
    f, z, sigma, opacity = 20.0, 4.0, 0.1, 0.8
    s = f * sigma / z  # 0.5 px
    K = intrinsics(16, 16, f)[None]
    args = (
        torch.tensor([[0.0, 0.0, z]], dtype=F64), torch.tensor([[1.0, 0, 0, 0]], dtype=F64),
        torch.full((1, 3), sigma, dtype=F64), torch.tensor([opacity], dtype=F64),
        torch.ones(1, 3, dtype=F64), torch.eye(4, dtype=F64)[None], K, 16, 16,
    )  # fmt: skip
    classic = gsnb.render(*args)
    aa = gsnb.render(*args, rasterize_mode="antialiased")
    comp = s * s / (s * s + 0.3)
    # The centre (8, 8) lies between four pixel centres at distance sqrt(0.5) px.
    falloff = math.exp(-0.5 * 0.5 / (s * s + 0.3))
    assert classic.alpha[0, 7, 7, 0].item() == pytest.approx(opacity * falloff, rel=1e-12)
    assert aa.alpha[0, 7, 7, 0].item() == pytest.approx(opacity * comp * falloff, rel=1e-12)
    # Everywhere: the antialiased image is the classic one of the dimmed Gaussian.
    dimmed = gsnb.render(*args[:3], args[3] * comp, *args[4:])
    torch.testing.assert_close(aa.rgb, dimmed.rgb, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(aa.alpha, dimmed.alpha, rtol=1e-12, atol=1e-15)
    assert not torch.allclose(aa.alpha, classic.alpha)


def test_antialiased_is_classic_with_compensated_opacities_on_random_scenes() -> None:
    scene = random_scene(60, width=31, height=22, num_cams=2, seed=7, sh_degree=1)
    comp = brute_compensations(scene)  # [C, N]
    assert comp.min() > 0 and comp.max() < 1
    for c in range(2):
        one = scene.camera(c)
        aa = gsnb.render(*one.args(), rasterize_mode="antialiased")
        args = list(one.args())
        args[3] = scene.opacities * comp[c]
        want = gsnb.render(*args)
        torch.testing.assert_close(aa.rgb, want.rgb, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(aa.alpha, want.alpha, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(aa.depth, want.depth, rtol=1e-9, atol=1e-12)
        # Culling follows the compensated opacity (as gsplat): the same splats are kept.
        assert torch.equal(aa.meta.radii, want.meta.radii)


def test_render_splats_takes_the_mode_too() -> None:
    scene = random_scene(20, width=16, height=12, seed=3, sh_degree=0)
    splats = {
        "means": scene.means, "quats": scene.quats, "scales": scene.scales.log(),
        "opacities": torch.logit(scene.opacities), "sh0": scene.colors[:, :1],
        "shN": scene.colors[:, 1:],
    }  # fmt: skip
    views = (scene.viewmats, scene.Ks, scene.width, scene.height)
    got = gsnb.render_splats(splats, *views, rasterize_mode="antialiased")
    want = gsnb.render(*scene.args(), rasterize_mode="antialiased")
    torch.testing.assert_close(got.rgb, want.rgb)
    assert not torch.allclose(got.rgb, gsnb.render_splats(splats, *views).rgb)


def test_an_unknown_mode_is_a_clear_error() -> None:
    scene = random_scene(2, width=8, height=8, seed=0)
    with pytest.raises(ValueError, match="rasterize_mode must be one of"):
        gsnb.render(*scene.args(), rasterize_mode="mip")


def test_gradcheck_every_input_antialiased() -> None:
    scene = small_scene(seed=1)
    # The compensated opacities must keep the scene off the thresholds too.
    splats = project_brute(
        scene.means, scene.quats, scene.scales, scene.viewmats, scene.Ks, scene.width, scene.height
    )
    raw = raw_alphas(splats, scene.opacities, scene.width, scene.height)
    raw = raw * brute_compensations(scene)[..., None, None]
    assert (raw - 1 / 255).abs().min() > 2e-5 and raw.max() < 0.98
    names = list(scene.tensors())
    inputs = [t.clone().requires_grad_() for t in scene.tensors().values()]
    assert torch.autograd.gradcheck(
        render_fn(scene, names, rasterize_mode="antialiased"), inputs, eps=1e-6, atol=1e-6
    )
