"""Closed-form cases of the compositing rules of DESIGN.md.

Every camera here is the identity pose with the principal point on the centre
of pixel (16, 16) of a 33x33 image, so a Gaussian at ``(0, 0, z)`` lands exactly
on that pixel centre and its splat is isotropic with variance
``(f * s / z)^2 + 0.3`` px^2.
"""

from __future__ import annotations

import math

import pytest
import torch

import gsnb

from .bruteforce import assert_images_close

SIZE = 33
FOCAL = 40.0
CENTRE = SIZE // 2
F64 = torch.float64


def stacked(
    depths: list[float],
    opacities: list[float],
    colors: list[list[float]],
    scale: float | list[float] = 1e-8,
    offsets: list[tuple[float, float]] | None = None,
    **kwargs: object,
) -> gsnb.RenderResult:
    """Render isotropic Gaussians at ``depths``, on the optical axis or ``offsets`` px from it."""
    n = len(depths)
    scales = torch.tensor(scale if isinstance(scale, list) else [scale] * n, dtype=F64)
    offsets = offsets or [(0.0, 0.0)] * n
    means = torch.tensor(
        [[u * z / FOCAL, v * z / FOCAL, z] for z, (u, v) in zip(depths, offsets, strict=True)],
        dtype=F64,
    )
    K = torch.tensor([[FOCAL, 0, SIZE / 2], [0, FOCAL, SIZE / 2], [0, 0, 1]], dtype=F64)
    return gsnb.render(
        means,
        torch.tensor([[1.0, 0, 0, 0]] * n, dtype=F64),
        scales[:, None].expand(n, 3),
        torch.tensor(opacities, dtype=F64),
        torch.tensor(colors, dtype=F64),
        torch.eye(4, dtype=F64)[None],
        K[None],
        SIZE,
        SIZE,
        **kwargs,
    )


def squared_distances() -> torch.Tensor:
    """``[H, W]`` squared pixel distances to the centre pixel."""
    idx = torch.arange(SIZE, dtype=F64) - CENTRE
    return idx[:, None] ** 2 + idx[None, :] ** 2


def expected_alpha(opacity: float, variance: float) -> torch.Tensor:
    """``[H, W]`` alpha of one centred isotropic splat: clamp, then the 1/255 cut."""
    alpha = (opacity * torch.exp(-squared_distances() / (2 * variance))).clamp_max(0.99)
    return torch.where(alpha >= 1 / 255, alpha, torch.zeros_like(alpha))


def test_isotropic_gaussian_centre_value_and_radial_falloff() -> None:
    scale, z, opacity, color = 0.1, 2.0, 0.8, [0.2, 0.6, 1.0]
    out = stacked([z], [opacity], [color], scale=scale)
    variance = (FOCAL * scale / z) ** 2 + 0.3
    alpha = expected_alpha(opacity, variance)

    assert out.alpha[0, CENTRE, CENTRE, 0].item() == pytest.approx(opacity, abs=1e-12)
    torch.testing.assert_close(out.alpha[0, ..., 0], alpha, rtol=0, atol=1e-12)
    torch.testing.assert_close(
        out.rgb[0], alpha[..., None] * torch.tensor(color, dtype=F64), rtol=0, atol=1e-12
    )
    # Expected depth of one Gaussian is its view depth wherever it shows.
    torch.testing.assert_close(out.depth[0, ..., 0], z * (alpha > 0).to(F64), rtol=0, atol=1e-12)
    # The falloff is radial: rotating the image by 90 degrees changes nothing.
    torch.testing.assert_close(out.alpha[0, ..., 0], out.alpha[0, ..., 0].T, rtol=0, atol=1e-12)


def test_tiny_scale_leaves_only_the_lowpass() -> None:
    out = stacked([3.0], [0.7], [[1.0, 1.0, 1.0]], scale=1e-8)
    torch.testing.assert_close(out.alpha[0, ..., 0], expected_alpha(0.7, 0.3), rtol=0, atol=1e-12)


def test_front_gaussian_occludes_the_one_behind() -> None:
    red, blue = [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]
    a_front, a_back, z_front, z_back = 0.9, 0.7, 2.0, 3.0
    out = stacked([z_front, z_back], [a_front, a_back], [red, blue])
    swapped = stacked([z_back, z_front], [a_back, a_front], [blue, red])

    w_front, w_back = a_front, (1 - a_front) * a_back
    centre = out.rgb[0, CENTRE, CENTRE]
    torch.testing.assert_close(centre, torch.tensor([w_front, 0, w_back], dtype=F64))
    alpha = out.alpha[0, CENTRE, CENTRE, 0].item()
    assert alpha == pytest.approx(1 - (1 - a_front) * (1 - a_back), abs=1e-12)
    depth = (w_front * z_front + w_back * z_back) / (w_front + w_back)
    assert out.depth[0, CENTRE, CENTRE, 0].item() == pytest.approx(depth, abs=1e-12)
    # Order of the inputs does not matter, only view depth does.
    assert_images_close(
        (out.rgb, out.alpha, out.depth), (swapped.rgb, swapped.alpha, swapped.depth), atol=1e-15
    )
    # Move the blue one in front: now it dominates.
    flipped = stacked([z_back, z_front], [a_front, a_back], [red, blue])
    assert flipped.rgb[0, CENTRE, CENTRE, 2] > flipped.rgb[0, CENTRE, CENTRE, 0]


def test_equal_depths_blend_in_input_order() -> None:
    red, blue = [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]
    first_red = stacked([2.0, 2.0], [0.5, 0.5], [red, blue]).rgb[0, CENTRE, CENTRE]
    first_blue = stacked([2.0, 2.0], [0.5, 0.5], [blue, red]).rgb[0, CENTRE, CENTRE]
    torch.testing.assert_close(first_red, torch.tensor([0.5, 0, 0.25], dtype=F64))
    torch.testing.assert_close(first_blue, torch.tensor([0.25, 0, 0.5], dtype=F64))


def test_alpha_is_clamped_to_0_99() -> None:
    # Variance 100.3 px^2: exp(-r^2 / 200.6) >= 0.99 exactly for r^2 in {0, 1, 2}.
    z, scale = 2.0, 0.5
    variance = (FOCAL * scale / z) ** 2 + 0.3
    out = stacked([z], [1.0], [[1.0, 1.0, 1.0]], scale=scale)
    raw = torch.exp(-squared_distances() / (2 * variance))
    clamped = raw >= 0.99
    assert int(clamped.sum()) == 9
    torch.testing.assert_close(
        out.alpha[0, ..., 0], expected_alpha(1.0, variance), rtol=0, atol=1e-12
    )
    assert out.alpha[0, clamped, 0].eq(0.99).all()
    # The clamp leaves 1% of the light for what lies behind an opaque splat.
    behind = stacked([2.0, 3.0], [1.0, 0.5], [[1.0, 0, 0], [0, 1.0, 0]])
    assert behind.rgb[0, CENTRE, CENTRE, 1].item() == pytest.approx(0.01 * 0.5, abs=1e-12)


def test_splats_below_1_over_255_are_skipped() -> None:
    z, scale, opacity = 2.0, 0.1, 0.5
    variance = (FOCAL * scale / z) ** 2 + 0.3  # 4.3 px^2: the cut lies at r^2 = 41.7
    out = stacked([z], [opacity], [[1.0, 1.0, 1.0]], scale=scale)
    inside = opacity * math.exp(-41 / (2 * variance))  # pixel (+5, +4): 0.0042
    outside = opacity * math.exp(-45 / (2 * variance))  # pixel (+6, +3): 0.0027
    assert inside >= 1 / 255 > outside > 0
    assert out.alpha[0, CENTRE + 5, CENTRE + 4, 0].item() == pytest.approx(inside, abs=1e-15)
    assert out.alpha[0, CENTRE + 6, CENTRE + 3, 0].item() == 0.0
    torch.testing.assert_close(
        out.alpha[0, ..., 0], expected_alpha(opacity, variance), rtol=0, atol=1e-12
    )


def test_alpha_exactly_1_over_255_contributes() -> None:
    white = [[1.0, 1.0, 1.0]]
    out = stacked([2.0], [1 / 255], white)
    assert out.alpha[0, CENTRE, CENTRE, 0].item() == 1 / 255
    assert out.alpha.sum().item() == 1 / 255
    assert out.meta.num_visible == 1
    below = stacked([2.0], [math.nextafter(1 / 255, 0)], white)
    assert below.alpha.abs().sum().item() == 0
    assert below.meta.num_visible == 0


def off_axis_alpha(opacity: float, scale: float, z: float, offset: tuple[float, float]) -> float:
    """Alpha at the centre pixel of an isotropic Gaussian projected ``offset`` px away.

    Off the axis the projection stretches the splat:
    ``J J^T = (f/z)^2 [[1 + u^2, uv], [uv, 1 + v^2]]`` with ``(u, v) = offset / f``.
    """
    u, v = offset[0] / FOCAL, offset[1] / FOCAL
    jjt = torch.tensor([[1 + u * u, u * v], [u * v, 1 + v * v]], dtype=F64)
    cov = (FOCAL * scale / z) ** 2 * jjt + 0.3 * torch.eye(2, dtype=F64)
    d = torch.tensor(offset, dtype=F64)
    return opacity * math.exp(-0.5 * float(d @ torch.linalg.solve(cov, d)))


def test_skipped_splat_does_not_dim_what_lies_behind() -> None:
    # The front splat (variance about 4.3 px^2, opacity 0.5) reaches the centre
    # pixel with alpha 0.0031 from 6, 3 px away (skipped) and 0.0048 from 5, 4 px away.
    assert (
        off_axis_alpha(0.5, 0.1, 2.0, (6.0, 3.0))
        < 1 / 255
        < off_axis_alpha(0.5, 0.1, 2.0, (5.0, 4.0))
    )
    back = {"depths": [3.0], "opacities": [0.6], "colors": [[0.0, 1.0, 0.0]], "scale": [0.3]}
    alone = stacked(**back)

    def with_front(offset: tuple[float, float]) -> gsnb.RenderResult:
        return stacked(
            [2.0, 3.0], [0.5, 0.6], [[1.0, 0, 0], [0, 1.0, 0]], scale=[0.1, 0.3],
            offsets=[offset, (0.0, 0.0)],
        )  # fmt: skip

    skipped = with_front((6.0, 3.0))
    assert skipped.meta.num_visible == 2
    assert skipped.alpha[0, CENTRE + 3, CENTRE + 6, 0] > alone.alpha[0, CENTRE + 3, CENTRE + 6, 0]
    torch.testing.assert_close(
        skipped.rgb[0, CENTRE, CENTRE], alone.rgb[0, CENTRE, CENTRE], rtol=0, atol=0
    )
    torch.testing.assert_close(
        skipped.alpha[0, CENTRE, CENTRE], alone.alpha[0, CENTRE, CENTRE], rtol=0, atol=0
    )
    blended = with_front((5.0, 4.0))
    front_alpha = off_axis_alpha(0.5, 0.1, 2.0, (5.0, 4.0))
    green = alone.rgb[0, CENTRE, CENTRE, 1].item()
    assert blended.rgb[0, CENTRE, CENTRE, 0].item() == pytest.approx(front_alpha, abs=1e-12)
    assert blended.rgb[0, CENTRE, CENTRE, 1].item() == pytest.approx(
        (1 - front_alpha) * green, abs=1e-12
    )


def layered(opacities: list[float]) -> tuple[torch.Tensor, float, float]:
    """Colour, alpha and depth at the centre of unit-white Gaussians at depths 2, 3, ...

    Each layer has its own colour channel weight ``10**-k`` so that the result
    tells which layers were blended.
    """
    depths = [2.0 + k for k in range(len(opacities))]
    colors = [[10.0**-k, 1.0, float(k)] for k in range(len(opacities))]
    out = stacked(depths, opacities, colors)
    return (
        out.rgb[0, CENTRE, CENTRE],
        out.alpha[0, CENTRE, CENTRE, 0].item(),
        out.depth[0, CENTRE, CENTRE, 0].item(),
    )


def expected_layers(opacities: list[float], blended: int) -> tuple[torch.Tensor, float, float]:
    """Closed form of :func:`layered` when exactly the first ``blended`` layers are blended."""
    trans, rgb, zsum = 1.0, torch.zeros(3, dtype=F64), 0.0
    for k, a in enumerate(opacities[:blended]):
        rgb += a * trans * torch.tensor([10.0**-k, 1.0, float(k)], dtype=F64)
        zsum += a * trans * (2.0 + k)
        trans *= 1 - a
    return rgb, 1 - trans, zsum / (1 - trans)


def test_pixel_stops_before_transmittance_falls_below_1e_4() -> None:
    # T after three layers of 0.95: 1.25e-4. A fourth layer of 0.5 would take it
    # to 6.25e-5 < 1e-4: it is not blended, and the pixel is done, so the fifth
    # layer is not blended either although 1.25e-4 * 0.9 would still be >= 1e-4.
    opacities = [0.95, 0.95, 0.95, 0.5, 0.1]
    rgb, alpha, depth = layered(opacities)
    want_rgb, want_alpha, want_depth = expected_layers(opacities, blended=3)
    torch.testing.assert_close(rgb, want_rgb, rtol=0, atol=1e-14)
    assert alpha == pytest.approx(want_alpha, abs=1e-14)
    assert 1 - alpha == pytest.approx(0.05**3, rel=1e-9)
    assert depth == pytest.approx(want_depth, abs=1e-12)


def test_layer_that_keeps_transmittance_above_1e_4_is_blended() -> None:
    opacities = [0.95, 0.95, 0.95, 0.1]  # 1.25e-4 * 0.9 = 1.125e-4 >= 1e-4
    rgb, alpha, depth = layered(opacities)
    want_rgb, want_alpha, want_depth = expected_layers(opacities, blended=4)
    torch.testing.assert_close(rgb, want_rgb, rtol=0, atol=1e-14)
    assert alpha == pytest.approx(want_alpha, abs=1e-14)
    assert depth == pytest.approx(want_depth, abs=1e-12)


def test_clamp_applies_before_the_transmittance_test() -> None:
    # Unclamped, 0.999 after 0.98 would leave T = 2e-5 and stop the pixel; clamped
    # to 0.99 it leaves 2e-4, so it is blended, and so is 0.4 (1.2e-4); 0.5 is not.
    opacities = [0.98, 0.999, 0.4, 0.5]
    rgb, alpha, depth = layered(opacities)
    want_rgb, want_alpha, want_depth = expected_layers([0.98, 0.99, 0.4, 0.5], blended=3)
    torch.testing.assert_close(rgb, want_rgb, rtol=0, atol=1e-14)
    assert alpha == pytest.approx(want_alpha, abs=1e-14)
    assert depth == pytest.approx(want_depth, abs=1e-12)


@pytest.mark.parametrize("shape", [(3,), (1, 3)])
def test_background_composites_under_the_splats(shape: tuple[int, ...]) -> None:
    bg = torch.tensor([0.25, 0.5, 1.0], dtype=F64).reshape(shape)
    args = ([2.0, 3.0], [0.9, 0.7], [[1.0, 0, 0], [0, 0, 1.0]])
    plain = stacked(*args, scale=0.1)
    over = stacked(*args, scale=0.1, backgrounds=bg)
    want = plain.rgb + (1 - plain.alpha) * bg.reshape(1, 1, 1, 3)
    torch.testing.assert_close(over.rgb, want, rtol=0, atol=1e-15)
    torch.testing.assert_close(over.alpha, plain.alpha, rtol=0, atol=0)
    torch.testing.assert_close(over.depth, plain.depth, rtol=0, atol=0)
    # Far from the splats only the background shows.
    torch.testing.assert_close(over.rgb[0, 0, 0], bg.reshape(3))
