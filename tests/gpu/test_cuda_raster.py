"""The CUDA backend against the reference backend run in float64.

Error measure: relative L2 error ``|cuda - ref| / |ref|`` over a whole output or
gradient tensor. The CUDA kernels compute in float32; pixels whose splats sit
exactly at the 1/255 or 1e-4 thresholds may round differently, which the
relative L2 measure absorbs while still catching any systematic difference.
"""

from __future__ import annotations

import pytest
import torch

import gsnb
from gsnb import kernels
from gsnb.raster.scenes import orbit_cameras, random_gaussians

OUTPUT_TOL = 1e-4  # relative L2 error of rgb, alpha, depth
GRAD_TOL = 1e-3  # relative L2 error of each gradient
KEYS = ("means", "quats", "scales", "opacities", "colors")


# The compositing's layouts: pixels a thread of the backward, segments of the tiles' splat
# lists (0: gsnb's choice by the grid's size, which for these small images is one pixel a
# thread and segments of 512 splats; -1: none; 256: forced short ones, several a tile), and
# whether the forward walks the segments at once (0: gsnb's choice, which for these small
# images is yes; -1: one block a tile, recording the segments' states on its way), and the
# width of a backward compositing warp's pixel patch (0: gsnb's choice, 8; 16: whole rows
# of the tile).
LAYOUTS = {
    "one_row": (1, 0, 0, 0),
    "two_rows": (2, 0, 0, 0),
    "one_row_unsegmented": (1, -1, 0, 0),
    "one_row_segments_256": (1, 256, 0, 0),
    "two_rows_segments_256": (2, 256, 0, 0),
    "one_row_segments_256_recorded": (1, 256, -1, 0),
    "one_row_recorded": (1, 0, -1, 0),
    "one_row_patch_16": (1, 0, 0, 16),
    "two_rows_patch_16": (2, 0, 0, 16),
    "one_row_segments_256_patch_16": (1, 256, 0, 16),
    "two_rows_segments_256_patch_16": (2, 256, 0, 16),
    "one_row_segments_256_recorded_patch_16": (1, 256, -1, 16),
}


def use_layout(rows: int, segments: int, forward: int, patch: int) -> tuple[int, int, int, int]:
    """Sets the compositing's layout; returns the previous one."""
    return (
        kernels.set_rasterize_rows(rows=rows),
        kernels.set_rasterize_segments(length=segments),
        kernels.set_rasterize_forward_segments(mode=forward),
        kernels.set_rasterize_patch(width=patch),
    )


@pytest.fixture(autouse=True, params=list(LAYOUTS.values()), ids=list(LAYOUTS))
def layout(request, cuda_ext):
    """Every test here runs with each layout of the backward compositing."""
    previous = use_layout(*request.param)
    yield request.param
    use_layout(*previous)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative L2 error; a tensor that is zero in exact arithmetic (e.g. the rotation
    gradient of an isotropic Gaussian) is compared against an RMS floor of 1e-5."""
    a, b = a.detach().double(), b.detach().double()
    floor = 1e-5 * max(b.numel(), 1) ** 0.5
    return float((a - b).norm() / max(float(b.norm()), floor))


def scene(n, width, height, cams, sh_degree=3, seed=0, scale_range=(0.005, 0.05)):
    g = random_gaussians(n, sh_degree=sh_degree, seed=seed, scale_range=scale_range, device="cuda")
    viewmats, Ks = orbit_cameras(cams, width, height)
    return g, viewmats.cuda(), Ks.cuda()


def facing(uv, z, sigma_px, size):
    """Means and scales of Gaussians seen by a size x size pinhole camera at the origin looking
    down +z (focal length size): centres at pixel ``uv`` [N, 2], depth ``z`` [N], axes of
    ``sigma_px`` [N, 3] pixels. Returns means, scales, viewmats, Ks."""
    means = torch.cat([(uv - size / 2) * z[:, None] / size, z[:, None]], 1)
    viewmats = torch.eye(4, device=uv.device)[None]
    Ks = torch.tensor([[[size, 0, size / 2], [0, size, size / 2], [0, 0, 1.0]]], device=uv.device)
    return means, sigma_px * z[:, None] / size, viewmats, Ks


def run(g, viewmats, Ks, width, height, backend, dtype, weights=None, absgrad=False, **kw):
    params = {k: v.to(dtype).clone().requires_grad_(True) for k, v in g.items()}
    if kw.get("backgrounds") is not None:
        kw = kw | {"backgrounds": kw["backgrounds"].to(dtype)}
    out = gsnb.render(
        **params, viewmats=viewmats.to(dtype), Ks=Ks.to(dtype), width=width, height=height,
        backend=backend, absgrad=absgrad, **kw,
    )  # fmt: skip
    if weights is None:
        gen = torch.Generator(device="cuda").manual_seed(1)
        shape = out.rgb.shape[:3]
        weights = (
            torch.rand((*shape, 3), generator=gen, device="cuda"),
            torch.rand((*shape, 1), generator=gen, device="cuda"),
            torch.rand((*shape, 1), generator=gen, device="cuda"),
        )
    weighted_loss(out, weights, dtype).backward()
    grads = {k: params[k].grad for k in KEYS}
    grads["means2d"] = out.meta.means2d.grad
    return out, grads, weights


def weighted_loss(out, weights, dtype):
    """A loss that reaches every output: random weights on rgb, alpha and depth."""
    w_rgb, w_alpha, w_depth = (w.to(dtype) for w in weights)
    # Depth enters weighted by alpha so that near-empty pixels do not dominate.
    loss = (out.rgb * w_rgb).sum() + (out.alpha * w_alpha).sum()
    if out.depth is not None:
        loss = loss + (out.depth * out.alpha.detach() * w_depth).sum() * 0.1
    return loss


def compare(g, viewmats, Ks, width, height, absgrad=False, **kw):
    out_c, grads_c, weights = run(
        g, viewmats, Ks, width, height, "cuda", torch.float32, absgrad=absgrad, **kw
    )
    out_r, grads_r, _ = run(
        g, viewmats, Ks, width, height, "reference", torch.float64, weights, absgrad=absgrad, **kw
    )
    errors = {"rgb": rel_err(out_c.rgb, out_r.rgb), "alpha": rel_err(out_c.alpha, out_r.alpha)}
    if out_r.depth is not None:
        errors["depth"] = rel_err(out_c.depth * out_r.alpha, out_r.depth * out_r.alpha)
    for k in grads_r:
        errors[f"grad_{k}"] = rel_err(grads_c[k], grads_r[k])
    if absgrad:
        errors["absgrad"] = rel_err(out_c.meta.absgrad, out_r.meta.absgrad)
    for t in (out_c.rgb, out_c.alpha, out_c.depth, *grads_c.values()):
        assert t is None or torch.isfinite(t).all()
    vis_c, vis_r = out_c.meta.radii > 0, out_r.meta.radii > 0
    errors["radii_mismatch"] = float((vis_c != vis_r).float().mean())
    return errors, out_c, out_r


def check(errors, output_tol=OUTPUT_TOL, grad_tol=GRAD_TOL):
    print({k: f"{v:.2e}" for k, v in errors.items()})
    for k, v in errors.items():
        if k == "radii_mismatch":
            assert v < 1e-3, (k, v)
        elif k.startswith("grad") or k == "absgrad":
            assert v < grad_tol, (k, v)
        else:
            assert v < output_tol, (k, v)


@pytest.mark.parametrize(
    ("n", "width", "height", "cams", "sh_degree"),
    [
        (1, 64, 48, 1, 0),
        (100, 97, 61, 1, 1),
        (1000, 129, 77, 2, 2),
        (5000, 200, 150, 3, 3),
        (20000, 256, 173, 4, None),
        (50000, 321, 241, 1, 3),
    ],
)
def test_matches_reference(cuda_ext, n, width, height, cams, sh_degree):
    g, viewmats, Ks = scene(n, width, height, cams, sh_degree=sh_degree, seed=n)
    errors, _, _ = compare(g, viewmats, Ks, width, height)
    check(errors)


def test_absgrad_matches_reference(cuda_ext):
    g, viewmats, Ks = scene(3000, 113, 90, 2, seed=7)
    errors, out_c, _ = compare(g, viewmats, Ks, 113, 90, absgrad=True)
    check(errors)
    assert out_c.meta.absgrad is not None and float(out_c.meta.absgrad.sum()) > 0


def test_without_depth_channel(cuda_ext):
    g, viewmats, Ks = scene(4000, 150, 101, 2, seed=21)
    errors, out_c, _ = compare(g, viewmats, Ks, 150, 101, with_depth=False, absgrad=True)
    check(errors)
    assert out_c.depth is None


def test_depth_in_meta_gets_gradients(cuda_ext):
    g, viewmats, Ks = scene(500, 64, 48, 2, seed=4)
    grads = {}
    for backend, dtype in (("cuda", torch.float32), ("reference", torch.float64)):
        means = g["means"].to(dtype).clone().requires_grad_(True)
        rest = {k: v.to(dtype) for k, v in g.items() if k != "means"}
        out = gsnb.render(
            means, **rest, viewmats=viewmats.to(dtype), Ks=Ks.to(dtype), width=64, height=48,
            backend=backend,
        )  # fmt: skip
        (out.meta.depths * out.meta.visible).sum().backward()
        grads[backend] = means.grad
    assert rel_err(grads["cuda"], grads["reference"]) < GRAD_TOL


def test_backgrounds_and_lower_sh_degree(cuda_ext):
    g, viewmats, Ks = scene(2000, 90, 70, 2, seed=3)
    bg = torch.tensor([[0.2, 0.5, 0.9], [1.0, 1.0, 1.0]], device="cuda")
    errors, _, _ = compare(g, viewmats, Ks, 90, 70, backgrounds=bg, sh_degree=1)
    check(errors)


def test_one_background_colour_inside_the_kernels(cuda_ext):
    # [3] for all cameras, no depth channel, absgrad: the training loop's call.
    g, viewmats, Ks = scene(3000, 120, 80, 1, seed=5)
    bg = torch.tensor([0.3, 0.6, 0.1], device="cuda")
    errors, out_c, _ = compare(
        g, viewmats, Ks, 120, 80, backgrounds=bg, with_depth=False, absgrad=True
    )
    check(errors)
    plain = gsnb.render(**g, viewmats=viewmats, Ks=Ks, width=120, height=80, backend="cuda")
    expected = plain.rgb + (1.0 - plain.alpha) * bg
    assert (out_c.rgb.detach() - expected).abs().max() < 1e-5


def test_background_with_a_gradient(cuda_ext):
    g, viewmats, Ks = scene(1500, 64, 64, 2, seed=6)
    grads = {}
    for backend, dtype in (("cuda", torch.float32), ("reference", torch.float64)):
        bg = torch.tensor([0.2, 0.4, 0.8], device="cuda", dtype=dtype, requires_grad=True)
        rest = {k: v.to(dtype) for k, v in g.items()}
        out = gsnb.render(
            **rest, viewmats=viewmats.to(dtype), Ks=Ks.to(dtype), width=64, height=64,
            backgrounds=bg, backend=backend,
        )  # fmt: skip
        out.rgb.square().sum().backward()
        grads[backend] = bg.grad
    assert rel_err(grads["cuda"], grads["reference"]) < GRAD_TOL


def test_the_backward_layouts_give_the_same_gradients(layout):
    if layout != LAYOUTS["one_row"]:
        pytest.skip("compares all the layouts itself: once is enough")
    # Long lists: 20,000 Gaussians over 16x11 tiles of two cameras.
    g, viewmats, Ks = scene(20000, 256, 173, 2, seed=3)
    grads, images = {}, {}
    for name, setting in LAYOUTS.items():
        use_layout(*setting)
        params = {k: v.clone().requires_grad_(True) for k, v in g.items()}
        out = gsnb.render(
            **params, viewmats=viewmats, Ks=Ks, width=256, height=173, backend="cuda",
            with_depth=True,
        )  # fmt: skip
        (out.rgb.sum() + out.alpha.square().sum() + out.depth.sum()).backward()
        grads[name] = {k: p.grad for k, p in params.items()}
        images[name] = (out.rgb.detach(), out.alpha.detach(), out.depth.detach())
    use_layout(*layout)
    for name in LAYOUTS:
        # A segment's transmittance in front is the product of the earlier segments'.
        for a, b in zip(images[name], images["two_rows"], strict=True):
            assert rel_err(a, b) < 1e-5, name
        for k in KEYS:
            # The same sums in another order (atomics; a segment's start from the forward's
            # running sums).
            assert rel_err(grads[name][k], grads["two_rows"][k]) < 1e-4, (name, k)
    with pytest.raises(RuntimeError, match=r"rows must be 0 \(by the grid's size\), 1 or 2"):
        kernels.set_rasterize_rows(rows=3)
    with pytest.raises(RuntimeError, match="a positive multiple of 256"):
        kernels.set_rasterize_segments(length=300)
    with pytest.raises(RuntimeError, match=r"mode must be 0 \(by the grid's size\)"):
        kernels.set_rasterize_forward_segments(mode=2)
    with pytest.raises(RuntimeError, match=r"width must be 0 \(the default\), 8 or 16"):
        kernels.set_rasterize_patch(width=4)


def test_several_cameras_equal_one_at_a_time(cuda_ext):
    g, viewmats, Ks = scene(4000, 130, 97, 3, seed=11)
    together = gsnb.render(**g, viewmats=viewmats, Ks=Ks, width=130, height=97, backend="cuda")
    for c in range(3):
        alone = gsnb.render(
            **g, viewmats=viewmats[c : c + 1], Ks=Ks[c : c + 1], width=130, height=97,
            backend="cuda",
        )  # fmt: skip
        assert torch.equal(alone.rgb[0], together.rgb[c])
        assert torch.equal(alone.meta.radii[0], together.meta.radii[c])


def test_box_over_the_edge_without_a_pixel_centre(cuda_ext):
    # As tests/raster/test_edge_cases.py: radius 2 px, centres at x = -1.8 px (visible, no
    # pixel centre in its box: no tile, no colour, no gradient) and -2.1 px (culled).
    means = torch.tensor([[-0.6125, 0.0, 1.0], [-0.63125, 0.0, 1.0]], device="cuda")
    params = {
        "means": means.requires_grad_(),
        "quats": torch.tensor([[1.0, 0, 0, 0]] * 2, device="cuda", requires_grad=True),
        "scales": torch.full((2, 3), 1e-6, device="cuda", requires_grad=True),
        "opacities": torch.full((2,), 0.9, device="cuda", requires_grad=True),
        "colors": torch.ones(2, 3, device="cuda", requires_grad=True),
    }
    Ks = torch.tensor([[[16.0, 0, 8], [0, 16, 8], [0, 0, 1]]], device="cuda")
    out = gsnb.render(
        **params,
        viewmats=torch.eye(4, device="cuda")[None],
        Ks=Ks,
        width=16,
        height=16,
        backend="cuda",
        backgrounds=torch.full((1, 3), 0.25, device="cuda"),
    )
    assert out.meta.radii[0].tolist() == [[2, 2], [0, 0]]
    assert (out.alpha == 0).all() and (out.rgb == 0.25).all()
    out.rgb.sum().backward()
    assert all((p.grad == 0).all() for p in params.values() if p.grad is not None)


@pytest.mark.parametrize(("width", "height"), [(1, 1), (17, 13), (33, 20), (1921, 1081)])
def test_odd_sizes(cuda_ext, width, height):
    g, viewmats, Ks = scene(3000 if width > 100 else 300, width, height, 1, seed=width)
    errors, _, _ = compare(g, viewmats, Ks, width, height)
    check(errors)


def test_no_gaussians(cuda_ext):
    g, viewmats, Ks = scene(0, 40, 30, 2)
    params = {k: v.clone().requires_grad_(True) for k, v in g.items()}
    out = gsnb.render(**params, viewmats=viewmats, Ks=Ks, width=40, height=30, backend="cuda")
    assert out.rgb.shape == (2, 30, 40, 3) and float(out.alpha.abs().sum()) == 0
    out.rgb.sum().backward()
    assert out.meta.num_visible == 0


def test_all_behind_camera(cuda_ext):
    g, viewmats, Ks = scene(500, 64, 64, 1)
    g["means"] = g["means"] * 0.1 - viewmats[0, 2, :3] * 10.0  # far behind along -forward
    out = gsnb.render(**g, viewmats=viewmats, Ks=Ks, width=64, height=64, backend="cuda")
    assert out.meta.num_visible == 0 and float(out.alpha.sum()) == 0


def test_one_huge_gaussian_covers_image(cuda_ext):
    g, viewmats, Ks = scene(1, 300, 200, 1, sh_degree=None)
    g["means"][:] = 0
    g["scales"][:] = torch.tensor(
        [50.0, 40.0, 30.0], device="cuda"
    )  # anisotropic: rotations matter
    g["opacities"][:] = 0.8
    errors, out_c, _ = compare(g, viewmats, Ks, 300, 200)
    check(errors)
    assert float(out_c.alpha.min()) > 0.79


def test_large_splats_among_small_ones(cuda_ext):
    # Splats of more than 32 tiles are emitted by their whole warp, a tile row per lane; a
    # 720 px tall image has 45 tile rows, so the tallest splats take their rows in two turns.
    g, viewmats, Ks = scene(400, 160, 720, 2, sh_degree=1, seed=11)
    large = torch.arange(0, 400, 20, device="cuda")
    g["scales"][large] = torch.linspace(0.8, 2.5, 20, device="cuda")[:, None] * torch.tensor(
        [1.0, 0.6, 0.8], device="cuda"
    )
    errors, out_c, _ = compare(g, viewmats, Ks, 160, 720)
    check(errors)
    # Some boxes, clipped to the image, span more than 32 tile rows.
    ry = out_c.meta.radii[..., 1].float()
    my = out_c.meta.means2d[..., 1].detach()
    top = (my - ry).clamp(min=0).floor() // 16
    bottom = (my + ry).clamp(max=719).floor() // 16
    rows = torch.where(ry > 0, bottom - top + 1, torch.zeros_like(ry))
    assert int((rows > 32).sum()) > 0


def test_walks_past_65534_splats_of_a_tile(cuda_ext):
    # A pixel's walk end is kept in 16 bits past its tile's first splat; one that ends
    # farther stores none, and the backward pass walks the tile again to find it. 70,000
    # faint splats (each reaches 1/255 within 0.2 px of its centre, so a pixel sees about 34
    # of them) lie in front of an opaque one over the left of the one-tile image.
    gen = torch.Generator(device="cuda").manual_seed(4)
    n = 70_000
    z = torch.cat([2.0 + torch.rand(n, generator=gen, device="cuda"), torch.tensor([5.0]).cuda()])
    uv = torch.rand(n + 1, 2, generator=gen, device="cuda") * 16.0
    uv[n] = torch.tensor([4.0, 8.0])
    sigma = torch.ones(n + 1, device="cuda")
    sigma[n] = 4.0  # pixels
    opacities = torch.full((n + 1,), 0.004, device="cuda")
    opacities[n] = 0.9
    means, scales, viewmats, Ks = facing(uv, z, sigma[:, None].repeat(1, 3), 16)
    g = {
        "means": means,
        "quats": torch.tensor([1.0, 0.0, 0.0, 0.0], device="cuda").repeat(n + 1, 1),
        "scales": scales,
        "opacities": opacities,
        "colors": torch.rand(n + 1, 3, generator=gen, device="cuda"),
    }
    errors, out_c, _ = compare(g, viewmats, Ks, 16, 16)
    check(errors)
    assert int((out_c.meta.radii[0, :, 0] > 0).sum()) > 65_535  # all in the one tile


def test_thin_tilted_splats_pixel_by_pixel(cuda_ext):
    # Each thread of the backward compositing shades two adjacent rows. Opaque, thin, tilted
    # splats centred on, half a pixel off and between the rows' pairs: a row shaded with its
    # neighbour's splats or centre would be off by about a splat's alpha, far above the
    # 1/255 at which float32 and float64 may round a splat in or out.
    gen = torch.Generator(device="cuda").manual_seed(12)
    n, size = 400, 64
    z = 2.0 + torch.rand(n, generator=gen, device="cuda")
    uv = torch.rand(n, 2, generator=gen, device="cuda") * size
    # Centres on the boundary of two row pairs, half a pixel off it, or anywhere.
    uv[: n // 3, 1] = torch.randint(0, size // 2, (n // 3,), generator=gen, device="cuda") * 2.0
    uv[n // 3 : 2 * n // 3, 1] = uv[: n // 3, 1] + 0.5
    sigma_px = torch.stack(
        [
            1.0 + 6.0 * torch.rand(n, generator=gen, device="cuda"),
            0.2 + 1.5 * torch.rand(n, generator=gen, device="cuda"),
            torch.full((n,), 0.5, device="cuda"),
        ],
        1,
    )
    angle = torch.rand(n, generator=gen, device="cuda") * torch.pi
    quats = torch.stack(
        [
            torch.cos(angle / 2),
            torch.zeros_like(angle),
            torch.zeros_like(angle),
            torch.sin(angle / 2),
        ],
        1,
    )
    means, scales, viewmats, Ks = facing(uv, z, sigma_px, size)
    g = {
        "means": means,
        "quats": quats,
        "scales": scales,
        "opacities": 0.3 + 0.69 * torch.rand(n, generator=gen, device="cuda"),
        "colors": torch.ones(n, 3, device="cuda"),
    }
    errors, out_c, out_r = compare(g, viewmats, Ks, size, size)
    check(errors)
    # Pixel by pixel: only splats at the 1/255 threshold may round either way.
    assert float((out_c.alpha - out_r.alpha).abs().max()) < 5e-3
    assert float((out_c.rgb - out_r.rgb).abs().max()) < 5e-3


def test_faint_long_splats_reach_every_row_they_touch(cuda_ext):
    # Faint and opaque splats, long and thin at every angle, whose reach (where alpha passes
    # 1/255, from the opacity and conic) runs from a pixel to tens: the backward's per-splat
    # moments and the forward's walk must cover every pixel the reference does. A reach cut
    # short drops the splat's outer pixels, whose alpha lies well above the 1/255 at which
    # float32 and float64 may round a pixel either way.
    gen = torch.Generator(device="cuda").manual_seed(31)
    n, size = 300, 96
    z = 2.0 + torch.rand(n, generator=gen, device="cuda")
    uv = torch.rand(n, 2, generator=gen, device="cuda") * size
    sigma_px = torch.stack(
        [
            0.5 + 20.0 * torch.rand(n, generator=gen, device="cuda"),
            0.3 + 1.0 * torch.rand(n, generator=gen, device="cuda"),
            torch.full((n,), 0.5, device="cuda"),
        ],
        1,
    )
    angle = torch.rand(n, generator=gen, device="cuda") * torch.pi
    zeros = torch.zeros_like(angle)
    quats = torch.stack([torch.cos(angle / 2), zeros, zeros, torch.sin(angle / 2)], 1)
    means, scales, viewmats, Ks = facing(uv, z, sigma_px, size)
    opacities = torch.where(
        torch.rand(n, generator=gen, device="cuda") < 0.5,
        (1.2 + 4.0 * torch.rand(n, generator=gen, device="cuda")) / 255.0,  # faint
        0.2 + 0.79 * torch.rand(n, generator=gen, device="cuda"),
    )
    g = {
        "means": means,
        "quats": quats,
        "scales": scales,
        "opacities": opacities,
        "colors": torch.ones(n, 3, device="cuda"),
    }
    errors, out_c, out_r = compare(g, viewmats, Ks, size, size)
    check(errors)
    off = (out_c.alpha - out_r.alpha).abs()
    assert float(off.max()) < 5e-3
    assert float((off > 1e-4).float().mean()) < 2e-3


def test_tiny_and_degenerate_scales(cuda_ext):
    g, viewmats, Ks = scene(2000, 120, 80, 1, seed=5)
    g["scales"][:500] = 1e-8
    g["scales"][500:1000, 1:] = 1e-7  # needles: near-singular 3D covariances
    g["scales"][1000:1500, 0] = 1e-7  # discs
    errors, _, _ = compare(g, viewmats, Ks, 120, 80)
    check(errors)


def test_distant_and_clipped_gaussians(cuda_ext):
    g, viewmats, Ks = scene(3000, 100, 80, 1, seed=9)
    g["means"][:1000] *= 20.0  # many far outside the view
    errors, _, _ = compare(g, viewmats, Ks, 100, 80, near_plane=2.5, far_plane=3.5)
    # Splats cut by the near plane and seen at the edge of the clamped Jacobian: float32
    # cancellation there measured about 1e-4 on outputs and 8e-4 on gradients.
    check(errors, output_tol=5e-4, grad_tol=3e-3)


@pytest.mark.parametrize("used", ["alpha", "rgb", "depth"])
def test_gradients_when_the_loss_uses_one_output(cuda_ext, used):
    """Outputs the loss ignores have no gradient buffers; the kernels must read them as zero."""
    g, viewmats, Ks = scene(3000, 120, 90, 2, seed=31)
    grads = {}
    for backend, dtype in (("cuda", torch.float32), ("reference", torch.float64)):
        params = {k: v.to(dtype).clone().requires_grad_(True) for k, v in g.items()}
        out = gsnb.render(
            **params, viewmats=viewmats.to(dtype), Ks=Ks.to(dtype), width=120, height=90,
            backend=backend,
        )  # fmt: skip
        target = {"alpha": out.alpha, "rgb": out.rgb, "depth": out.depth * out.alpha.detach()}
        (
            target[used] * torch.linspace(0, 1, 90, device="cuda", dtype=dtype)[:, None, None]
        ).sum().backward()
        grads[backend] = params
    for k in KEYS:
        # An input outside the loss's graph has no .grad in the reference; CUDA gives zeros.
        ref = grads["reference"][k].grad
        ref = torch.zeros_like(grads["reference"][k]) if ref is None else ref
        err = rel_err(grads["cuda"][k].grad, ref)
        assert err < GRAD_TOL, (used, k, err)


def test_backward_zeroes_its_gradients_on_reused_memory(cuda_ext):
    # The backward compositing adds into zeroed buffers: the allocator hands the second pass
    # blocks that held NaN just before, and none may leak in; the opacities' gradient holds
    # only its own memory (the others may be freed).
    g, viewmats, Ks = scene(3000, 93, 70, 2, sh_degree=1, seed=6)
    _, grads, weights = run(g, viewmats, Ks, 93, 70, "cuda", torch.float32, absgrad=True)
    want = {k: v.clone() for k, v in grads.items()}
    del grads
    n = g["means"].shape[0]
    poison = [torch.full((k * n,), float("nan"), device="cuda") for k in (1, 2, 3, 4, 6, 8)]
    del poison  # their blocks go back to the cache, NaN inside
    _, again, _ = run(g, viewmats, Ks, 93, 70, "cuda", torch.float32, weights, absgrad=True)
    for k, a in want.items():
        assert torch.isfinite(again[k]).all() and rel_err(again[k], a) < 1e-5, k
    grad = again["opacities"]
    assert grad.untyped_storage().nbytes() == grad.numel() * grad.element_size()
