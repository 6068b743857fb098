"""Gradients of the reference backend: finite differences, brute force, means2d and absgrad.

``torch.autograd.gradcheck`` runs on scenes built to stay off every
discontinuity (the 1/255 skip, the 0.99 clamp, the 1e-4 stop, the FOV clamp
of the Jacobian, the clamp of SH colours at 0): each test first asserts that
its scene keeps a clear margin from all of them, so a finite-difference step
never crosses one. Larger scenes, which always have some pixel near 1/255,
compare against autograd through the brute-force renderer instead.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import gsnb
from gsnb.raster import reference

from .bruteforce import (
    camera_colors,
    composite_brute,
    project_brute,
    raw_alphas,
    render_brute,
)
from .scenes import Scene, random_scene

F64 = torch.float64


@pytest.fixture(params=["default blocks", "small blocks"])
def blocks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run with the reference's own block sizes, and with tiny ones that force many
    blocks per tile, the transmittance carry between them and activation checkpointing."""
    if request.param == "small blocks":
        monkeypatch.setattr(reference, "_BLOCK_ELEMENTS", 1 << 12)
        monkeypatch.setattr(reference, "_MAX_BLOCK_SPLATS", 8)
    return request.param


def assert_off_discontinuities(scene: Scene, sh_degree: int | None = None) -> None:
    """Fail unless every pixel and splat keeps a margin from each threshold."""
    splats = project_brute(
        scene.means, scene.quats, scene.scales, scene.viewmats, scene.Ks, scene.width, scene.height
    )
    raw = raw_alphas(splats, scene.opacities, scene.width, scene.height)  # [C, N, H, W]
    assert (raw - 1 / 255).abs().min() > 2e-5, "a pixel sits at the 1/255 threshold"
    assert raw.max() < 0.98, "a pixel sits at the 0.99 clamp"
    transmittance = (1 - raw.where(raw >= 1 / 255, 0.0)).prod(dim=1)
    assert transmittance.min() > 1e-3, "a pixel comes near the 1e-4 stop"
    x, y, z = (scene.means @ scene.viewmats[:, :3, :3].transpose(-1, -2)).unbind(-1)
    z = z + scene.viewmats[:, None, 2, 3]
    u = scene.Ks[:, 0, 0, None] * (x + scene.viewmats[:, None, 0, 3]) / z + scene.Ks[:, 0, 2, None]
    v = scene.Ks[:, 1, 1, None] * (y + scene.viewmats[:, None, 1, 3]) / z + scene.Ks[:, 1, 2, None]
    inside = (u > -0.1 * scene.width) & (u < 1.1 * scene.width)
    inside &= (v > -0.1 * scene.height) & (v < 1.1 * scene.height)
    assert inside.all(), "a centre lies near the field-of-view clamp of the Jacobian"
    if sh_degree is not None:
        colors = camera_colors(scene.means, scene.colors, scene.viewmats, sh_degree)
        assert colors.min() > 0.02, "an SH colour sits at its clamp at 0"


def small_scene(seed: int, sh_degree: int | None = None) -> Scene:
    """Three Gaussians, two cameras, 5x4 px: every pixel covered, no threshold nearby."""
    scene = random_scene(
        3, width=5, height=4, num_cams=2, seed=seed, sh_degree=sh_degree,
        opacity_range=(0.3, 0.7), scale_range=(0.6, 1.2), spread=0.25,
    )  # fmt: skip
    if sh_degree is not None:
        scene.colors[:, 0] += 0.8  # keep SH colours well above their clamp at 0
    assert_off_discontinuities(scene, sh_degree)
    return scene


def render_fn(scene: Scene, names: list[str], **kwargs: object) -> Callable[..., tuple]:
    """``f(*tensors) -> (rgb, alpha, depth)`` with ``names`` taken from the arguments."""

    def f(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args = {**scene.tensors(), **dict(zip(names, tensors, strict=True))}
        bg = args.pop("backgrounds", None)
        out = gsnb.render(**args, width=scene.width, height=scene.height, backgrounds=bg, **kwargs)
        return out.rgb, out.alpha, out.depth

    return f


def test_gradcheck_every_input(blocks: str) -> None:
    scene = small_scene(seed=1)
    bg = torch.tensor([[0.2, 0.4, 0.6], [0.9, 0.1, 0.5]], dtype=F64)
    names = [*scene.tensors(), "backgrounds"]
    inputs = [t.clone().requires_grad_() for t in (*scene.tensors().values(), bg)]
    alpha = gsnb.render(*scene.args()).alpha
    assert (alpha > 0.05).all(), "every pixel should carry gradient"
    # The full Jacobian once; random projections of it (fast mode) with small blocks.
    fast = blocks == "small blocks"
    assert torch.autograd.gradcheck(
        render_fn(scene, names), inputs, eps=1e-6, atol=1e-6, fast_mode=fast
    )


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_gradcheck_sh_colours(degree: int) -> None:
    scene = small_scene(seed=10 + degree, sh_degree=degree)
    names = ["means", "colors", "viewmats", "opacities"]
    inputs = [getattr(scene, n).clone().requires_grad_() for n in names]
    assert torch.autograd.gradcheck(
        render_fn(scene, names), inputs, eps=1e-6, atol=1e-6, fast_mode=True
    )


def weighted_loss(outputs: tuple[torch.Tensor, ...], seed: int = 0) -> torch.Tensor:
    """A random linear function of every output pixel, the same for equal shapes and
    seeds in float32 and float64."""
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(t.shape, generator=gen, dtype=F64).to(t.dtype) for t in outputs]
    return torch.stack([(w * t).sum() for w, t in zip(weights, outputs, strict=True)]).sum()


def test_gradients_match_bruteforce_on_random_scenes(blocks: str) -> None:
    scene = random_scene(40, width=33, height=20, num_cams=2, seed=4, sh_degree=2).with_grad()
    bg = torch.tensor([0.3, 0.5, 0.7], dtype=F64, requires_grad=True)
    out = gsnb.render(*scene.args(), backgrounds=bg)
    want = render_brute(*scene.args(), backgrounds=bg)
    tensors = [*scene.tensors().values(), bg]
    grads = torch.autograd.grad(weighted_loss((out.rgb, out.alpha, out.depth)), tensors)
    grads_brute = torch.autograd.grad(weighted_loss(want), tensors)
    for name, g, gb in zip([*scene.tensors(), "bg"], grads, grads_brute, strict=True):
        assert gb.abs().max() > 0
        torch.testing.assert_close(g, gb, rtol=1e-8, atol=1e-10 * (1 + gb.abs().max()), msg=name)


def test_float32_gradients_match_float64_bruteforce() -> None:
    scene = random_scene(60, width=33, height=20, num_cams=2, seed=4, sh_degree=1)
    single = Scene(**{k: v.float() for k, v in scene.tensors().items()}, width=33, height=20)
    single, double = single.with_grad(), scene.with_grad()
    out = gsnb.render(*single.args())
    grads = torch.autograd.grad(
        weighted_loss((out.rgb, out.alpha, out.depth)), list(single.tensors().values())
    )
    grads_brute = torch.autograd.grad(
        weighted_loss(render_brute(*double.args())), list(double.tensors().values())
    )
    for name, g, gb in zip(scene.tensors(), grads, grads_brute, strict=True):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g.double(), gb, rtol=0, atol=1e-4 * gb.abs().max(), msg=name)


def brute_means2d_grads(scene: Scene, per_pixel: bool) -> torch.Tensor:
    """``d loss / d means2d`` by brute force: ``[C, N, 2]``, or per pixel ``[C, H, W, N, 2]``."""
    splats = project_brute(
        scene.means, scene.quats, scene.scales, scene.viewmats, scene.Ks, scene.width, scene.height
    )
    colors = camera_colors(scene.means, scene.colors, scene.viewmats).detach()
    leaves, outs = [], []
    for c in range(scene.viewmats.shape[0]):
        m = splats.means2d[c].detach()
        if per_pixel:
            m = m.expand(scene.height, scene.width, *m.shape).clone()
        leaves.append(m.requires_grad_())
        args = (m, splats.cov2d[c].detach(), scene.opacities.detach(), colors[c])
        outs.append(composite_brute(*args, splats.depths[c].detach(), scene.width, scene.height))
    stacked = tuple(torch.stack(t) for t in zip(*outs, strict=True))
    return torch.stack(torch.autograd.grad(weighted_loss(stacked), leaves))


@pytest.mark.parametrize("num_splats", [25, 300])
def test_means2d_grad_and_absgrad_match_bruteforce(num_splats: int, blocks: str) -> None:
    scene = random_scene(num_splats, width=21, height=18, num_cams=2, seed=num_splats)
    leaves = scene.with_grad()
    out = gsnb.render(*leaves.args(), absgrad=True)
    assert out.meta.absgrad is not None and not out.meta.absgrad.any()
    weighted_loss((out.rgb, out.alpha, out.depth)).backward()

    per_pixel = brute_means2d_grads(scene, per_pixel=True)  # [C, H, W, N, 2]
    total = per_pixel.sum(dim=(1, 2))
    assert out.meta.means2d.grad is not None
    torch.testing.assert_close(out.meta.means2d.grad, total, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(brute_means2d_grads(scene, per_pixel=False), total)
    absgrad = per_pixel.abs().sum(dim=(1, 2))
    torch.testing.assert_close(out.meta.absgrad, absgrad, rtol=1e-8, atol=1e-10)
    # Pixels pull a splat in different directions: |sum| < sum |.| somewhere.
    assert (absgrad - total.abs() > 1e-6).any()


def test_means2d_grad_is_populated_by_a_loss_on_colour_only() -> None:
    scene = random_scene(10, width=16, height=16, seed=2).with_grad()
    out = gsnb.render(*scene.args())
    assert out.meta.means2d.requires_grad
    out.rgb.sum().backward()
    grad = out.meta.means2d.grad
    assert grad is not None and grad.shape == (1, 10, 2)
    assert (grad[out.meta.visible] != 0).any()
    assert (grad[~out.meta.visible] == 0).all()


def test_no_grad_inputs_give_no_graph() -> None:
    scene = random_scene(10, width=16, height=16, seed=2)
    out = gsnb.render(*scene.args(), absgrad=True)
    assert not out.rgb.requires_grad and not out.meta.means2d.requires_grad
