"""Scenes at the edges: many cameras, no Gaussians, culled ones, extreme sizes, memory."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import gsnb

from .bruteforce import assert_images_close, render_brute
from .scenes import Scene, intrinsics, random_scene

F64 = torch.float64


def outputs(out: gsnb.RenderResult) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return out.rgb, out.alpha, out.depth


def one_gaussian(mean: list[float], scale: float, opacity: float = 0.8, size: int = 16) -> Scene:
    """One isotropic white Gaussian seen by the identity camera."""
    return Scene(
        torch.tensor([mean], dtype=F64),
        torch.tensor([[1.0, 0, 0, 0]], dtype=F64),
        torch.full((1, 3), scale, dtype=F64),
        torch.tensor([opacity], dtype=F64),
        torch.ones(1, 3, dtype=F64),
        torch.eye(4, dtype=F64)[None],
        intrinsics(size, size, float(size))[None],
        size,
        size,
    )


def concat(*scenes: Scene) -> Scene:
    """The Gaussians of several scenes, seen by the cameras of the first."""
    parts = {k: torch.cat([s.tensors()[k] for s in scenes]) for k in scenes[0].tensors()}
    parts["viewmats"], parts["Ks"] = scenes[0].viewmats, scenes[0].Ks
    return Scene(**parts, width=scenes[0].width, height=scenes[0].height)


def test_several_cameras_equal_one_camera_at_a_time() -> None:
    scene = random_scene(40, width=23, height=17, num_cams=3, seed=8, sh_degree=1).with_grad()
    out = gsnb.render(*scene.args())
    tensors = list(scene.tensors().values())
    weights = [torch.rand_like(t) for t in outputs(out)]
    loss = sum((w * t).sum() for w, t in zip(weights, outputs(out), strict=True))
    grads = torch.autograd.grad(loss, tensors)

    summed = [torch.zeros_like(t) for t in tensors]
    for c in range(3):
        single = gsnb.render(*scene.camera(c).args())
        assert_images_close(outputs(single), tuple(t[c : c + 1] for t in outputs(out)), atol=0)
        for key in ("means2d", "radii", "depths"):
            torch.testing.assert_close(
                getattr(single.meta, key), getattr(out.meta, key)[c : c + 1], rtol=0, atol=0
            )
        loss_c = sum(
            (w[c : c + 1] * t).sum() for w, t in zip(weights, outputs(single), strict=True)
        )
        for acc, g in zip(summed, torch.autograd.grad(loss_c, tensors), strict=True):
            acc += g
    for name, g, want in zip(scene.tensors(), grads, summed, strict=True):
        torch.testing.assert_close(g, want, rtol=1e-12, atol=1e-12, msg=name)


def test_non_contiguous_inputs() -> None:
    scene = random_scene(20, width=17, height=13, num_cams=2, seed=1, sh_degree=2)
    t = scene.tensors()
    strided = {
        "means": t["means"].T.contiguous().T,
        "quats": t["quats"].T.contiguous().T,
        "scales": torch.stack([t["scales"]] * 2, dim=1)[:, 0],
        "opacities": torch.stack([t["opacities"]] * 2, dim=1)[:, 0],
        "colors": t["colors"].transpose(1, 2).contiguous().transpose(1, 2),
        "viewmats": t["viewmats"].transpose(1, 2).contiguous().transpose(1, 2),
        "Ks": t["Ks"].transpose(0, 1).contiguous().transpose(0, 1),
    }
    assert not any(v.is_contiguous() for v in strided.values())
    out = gsnb.render(**strided, width=17, height=13)
    assert_images_close(outputs(out), outputs(gsnb.render(*scene.args())), atol=1e-14)


def test_no_gaussians() -> None:
    empty = random_scene(0, width=17, height=13, num_cams=2, seed=0).with_grad()
    bg = torch.tensor([0.1, 0.2, 0.3], dtype=F64)
    out = gsnb.render(*empty.args(), backgrounds=bg)
    assert out.rgb.shape == (2, 13, 17, 3)
    assert torch.equal(out.rgb, bg.expand(2, 13, 17, 3))
    assert not out.alpha.any() and not out.depth.any()
    assert out.meta.means2d.shape == (2, 0, 2) and out.meta.radii.shape == (2, 0, 2)
    assert out.meta.num_visible == 0
    (out.rgb.sum() + out.alpha.sum() + out.depth.sum()).backward()
    assert empty.means.grad is not None and empty.means.grad.shape == (0, 3)


@pytest.mark.parametrize("loss_on", ["rgb", "alpha", "depth"])
def test_all_culled_still_backpropagates(loss_on: str) -> None:
    behind = one_gaussian([0.0, 0.0, -2.0], scale=5.0).with_grad()
    out = gsnb.render(*behind.args())
    getattr(out, loss_on).sum().backward()
    assert behind.opacities.grad is not None and not behind.opacities.grad.any()


def test_gaussians_behind_the_camera_are_culled() -> None:
    front = one_gaussian([0.0, 0.0, 2.0], scale=0.1)
    behind = one_gaussian([0.0, 0.0, -2.0], scale=10.0, opacity=1.0)  # would cover everything
    both = gsnb.render(*concat(front, behind).args())
    alone = gsnb.render(*front.args())
    assert_images_close(outputs(both), outputs(alone), atol=0)
    assert both.meta.radii[0, 1].tolist() == [0, 0]
    assert both.meta.visible.tolist() == [[True, False]]


@pytest.mark.parametrize(
    ("mean", "scale", "visible"),
    [
        ([100.0, 0.0, 2.0], 0.1, False),  # 800 px right of the image
        ([0.0, -100.0, 2.0], 0.1, False),  # 800 px above
        ([1e6, 1e6, 1.0], 1.0, False),  # absurdly far off the axis
        ([1.2, 0.0, 2.0], 0.2, True),  # centre 1.6 px right of the image
        ([3.0, 0.0, 2.0], 1.0, True),  # 16 px right, beyond the 1.3x FOV clamp of the Jacobian
        ([-3.0, 1.0, 2.0], 1.0, True),  # 16 px left, beyond the clamp too
    ],
)
def test_gaussians_outside_the_image(mean: list[float], scale: float, visible: bool) -> None:
    scene = one_gaussian(mean, scale=scale)
    out = gsnb.render(*scene.args())
    assert out.meta.num_visible == int(visible)
    assert_images_close(outputs(out), render_brute(*scene.args()), atol=1e-12)
    assert bool(out.alpha.any()) == visible


def test_near_and_far_planes_are_exclusive() -> None:
    scene = concat(*(one_gaussian([0.0, 0.0, z], scale=0.2) for z in (1.0, 2.0, 3.0)))
    out = gsnb.render(*scene.args(), near_plane=1.0, far_plane=3.0)
    assert out.meta.visible.tolist() == [[False, True, False]]
    alone = gsnb.render(*one_gaussian([0.0, 0.0, 2.0], scale=0.2).args())
    assert_images_close(outputs(out), outputs(alone), atol=0)


def test_gaussian_just_beyond_the_near_plane_stays_finite() -> None:
    scene = concat(
        one_gaussian([0.3, 0.1, 0.0100001], scale=0.05), one_gaussian([0.0, 0.0, 2.0], scale=0.1)
    )
    out = gsnb.render(*scene.with_grad().args())
    assert all(torch.isfinite(t).all() for t in outputs(out))
    assert_images_close(outputs(out), render_brute(*scene.args()), atol=1e-10)


def test_huge_gaussians_cover_the_image() -> None:
    scene = concat(
        one_gaussian([0.0, 0.0, 3.0], scale=100.0, opacity=0.6),
        one_gaussian([50.0, -20.0, 5.0], scale=1e4, opacity=0.3),
    )
    leaves = scene.with_grad()
    out = gsnb.render(*leaves.args())
    assert_images_close(outputs(out), render_brute(*scene.args()), atol=1e-12)
    assert out.alpha.min() > 0.7
    assert (out.meta.radii > 16).all()
    out.rgb.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in leaves.tensors().values())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tiny_scales(dtype: torch.dtype) -> None:
    scene = random_scene(30, width=17, height=13, seed=6, scale_range=(1e-8, 2e-8))
    cast = Scene(**{k: v.to(dtype) for k, v in scene.tensors().items()}, width=17, height=13)
    out = gsnb.render(*cast.args())
    assert out.meta.num_visible > 10
    # With no extent of their own, splats are the 0.3 px^2 low-pass:
    # radius ceil(sqrt(2 ln(255 o) 0.3)) <= 2.
    assert out.meta.radii[out.meta.visible].max() <= 2
    want = render_brute(*scene.args())
    assert_images_close(tuple(t.double() for t in outputs(out)), want, atol=1e-5)


def test_meta_describes_each_gaussian_per_camera() -> None:
    scene = random_scene(20, width=17, height=13, num_cams=2, seed=9)
    out = gsnb.render(*scene.args())
    meta = out.meta
    assert meta.backend == "reference"
    assert meta.means2d.shape == (2, 20, 2) and meta.depths.shape == (2, 20)
    assert meta.radii.shape == (2, 20, 2) and meta.radii.dtype == torch.int32
    assert meta.visible.shape == (2, 20)
    assert meta.num_visible == int(meta.visible.any(0).sum())
    cam_z = (scene.means @ scene.viewmats[:, 2, :3].T + scene.viewmats[:, 2, 3]).T
    torch.testing.assert_close(meta.depths, cam_z)


MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    import torch, gsnb
    sys.path.insert(0, sys.argv[1])
    from raster.scenes import random_scene

    def vm_size():
        with open("/proc/self/status") as f:
            line = next(line for line in f if line.startswith("VmSize"))
        return int(line.split()[1]) * 1024

    # Address space: what torch mapped so far plus 3 GiB.
    resource.setrlimit(resource.RLIMIT_AS, (vm_size() + 3 * 2**30, resource.RLIM_INFINITY))
    torch.set_num_threads(1)
    n, w, h = 5000, 1024, 1024
    scene = random_scene(n, width=w, height=h, seed=1, dtype=torch.float32,
                         scale_range=(0.001, 0.005)).with_grad()
    out = gsnb.render(*scene.args(), absgrad=True)
    (out.rgb.sum() + out.alpha.sum()).backward()
    assert out.meta.num_visible > 2000 and out.alpha.max() > 0.5
    print(n * w * h * 4 / 2**30)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and RLIMIT_AS")
def test_memory_is_bounded() -> None:
    """N x H x W float32 would need 19.5 GiB; a 3 GiB address-space limit suffices."""
    tests_dir = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(tests_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout.split()[-1]) > 19


def test_without_depth_the_colours_are_the_same() -> None:
    scene = random_scene(30, width=17, height=13, num_cams=2, seed=12).with_grad()
    full = gsnb.render(*scene.args())
    lean = gsnb.render(*scene.args(), with_depth=False)
    assert lean.depth is None
    assert_images_close((lean.rgb, lean.alpha, full.depth), outputs(full), atol=1e-14)
    grads = torch.autograd.grad((full.rgb.sum() + full.alpha.sum()), [scene.means, scene.colors])
    lean_grads = torch.autograd.grad(
        (lean.rgb.sum() + lean.alpha.sum()), [scene.means, scene.colors]
    )
    for g, lg in zip(grads, lean_grads, strict=True):
        torch.testing.assert_close(lg, g, rtol=1e-12, atol=1e-12)


def test_box_over_the_edge_without_a_pixel_centre_is_visible_and_inert() -> None:
    # Radius ceil(sqrt(2 ln(255 * 0.9) * 0.3)) = 2 px. Centre at x = -1.8 px: the box reaches
    # x = 0.2, inside the image but short of the first pixel centre (0.5); at -2.1 it misses.
    def at(mx: float) -> Scene:
        return one_gaussian([(mx - 8.0) / 16.0, 0.0, 1.0], scale=1e-6, opacity=0.9)

    scene = concat(at(-1.8), at(-2.1)).with_grad()
    out = gsnb.render(*scene.args(), backgrounds=torch.full((1, 3), 0.25, dtype=F64))
    assert out.meta.radii[0].tolist() == [[2, 2], [0, 0]]
    assert (out.alpha == 0).all() and (out.rgb == 0.25).all()
    out.rgb.sum().backward()
    assert all((t.grad == 0).all() for t in scene.tensors().values() if t.grad is not None)
