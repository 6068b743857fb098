"""Spherical harmonics: the INRIA basis against scipy, and how render() uses it."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special
import torch

import gsnb
from gsnb.raster.sh import (
    eval_sh,
    num_sh_bases,
    rgb_to_sh0,
    sh0_to_rgb,
    sh_degree_from_bases,
)

from .bruteforce import assert_images_close
from .scenes import Scene, random_scene


def scipy_real_sh(degree: int, order: int, dirs: np.ndarray) -> np.ndarray:
    """Real SH from scipy's complex ones (Condon-Shortley phase), as the 3DGS basis orders them:
    ``sqrt(2) Im Y_l^|m|`` for m < 0, ``Y_l^0``, ``sqrt(2) Re Y_l^m`` for m > 0."""
    x, y, z = (dirs / np.linalg.norm(dirs, axis=-1, keepdims=True)).T
    theta, phi = np.arccos(np.clip(z, -1, 1)), np.mod(np.arctan2(y, x), 2 * np.pi)
    if hasattr(scipy.special, "sph_harm_y"):
        value = scipy.special.sph_harm_y(degree, abs(order), theta, phi)
    else:  # scipy < 1.15
        value = scipy.special.sph_harm(abs(order), degree, phi, theta)
    if order < 0:
        return np.sqrt(2) * value.imag
    if order > 0:
        return np.sqrt(2) * value.real
    return value.real


def test_basis_matches_scipy_real_spherical_harmonics() -> None:
    dirs = torch.randn(200, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for degree in range(4):
        for order in range(-degree, degree + 1):
            k = degree**2 + degree + order
            coeffs = torch.zeros(200, 16, 3, dtype=torch.float64)
            coeffs[:, k, 0] = 0.1  # small: SH + 0.5 stays above the clamp at 0
            basis = (eval_sh(3, coeffs, dirs)[:, 0] - 0.5) / 0.1
            want = scipy_real_sh(degree, order, dirs.numpy())
            np.testing.assert_allclose(
                basis.numpy(), want, atol=1e-12, err_msg=f"l={degree} m={order}"
            )


def test_lower_degree_uses_only_the_first_coefficients() -> None:
    gen = torch.Generator().manual_seed(1)
    coeffs = torch.randn(50, 16, 3, generator=gen, dtype=torch.float64) * 0.2
    dirs = torch.randn(50, 3, generator=gen, dtype=torch.float64)
    for degree in range(4):
        k = num_sh_bases(degree)
        torch.testing.assert_close(
            eval_sh(degree, coeffs, dirs), eval_sh(degree, coeffs[:, :k], dirs), rtol=0, atol=0
        )
    assert not torch.allclose(eval_sh(1, coeffs, dirs), eval_sh(3, coeffs, dirs))


def test_directions_need_not_be_unit_length() -> None:
    gen = torch.Generator().manual_seed(2)
    coeffs = torch.randn(20, 16, 3, generator=gen, dtype=torch.float64) * 0.2
    dirs = torch.randn(20, 3, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(eval_sh(3, coeffs, dirs), eval_sh(3, coeffs, 7.5 * dirs))


def test_colour_is_clamped_at_zero() -> None:
    coeffs = torch.zeros(1, 4, 3, dtype=torch.float64)
    coeffs[0, 0] = torch.tensor([-5.0, 0.0, 5.0])
    out = eval_sh(1, coeffs, torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64))
    assert out[0].tolist() == [0.0, 0.5, 0.5 + 5 * 0.28209479177387814]


def test_degree_0_broadcasts_over_directions() -> None:
    coeffs = torch.rand(1, 6, 1, 3)
    dirs = torch.randn(4, 6, 3)
    out = eval_sh(0, coeffs, dirs)
    assert out.shape == (4, 6, 3)
    torch.testing.assert_close(
        out, eval_sh(1, torch.cat([coeffs, 0 * coeffs.expand(1, 6, 3, 3)], 2), dirs)
    )


def test_sh_gradients() -> None:
    gen = torch.Generator().manual_seed(3)
    coeffs = (0.2 * torch.randn(6, 16, 3, generator=gen, dtype=torch.float64)).requires_grad_()
    dirs = torch.randn(6, 3, generator=gen, dtype=torch.float64).requires_grad_()
    assert eval_sh(3, coeffs, dirs).min() > 0  # away from the clamp
    assert torch.autograd.gradcheck(lambda c, d: eval_sh(3, c, d), (coeffs, dirs))


def test_sh0_round_trip_and_render_equivalence() -> None:
    scene = random_scene(30, width=17, height=13, num_cams=2, seed=4)
    sh0 = rgb_to_sh0(scene.colors)[:, None, :]
    torch.testing.assert_close(sh0_to_rgb(sh0[:, 0]), scene.colors)
    as_sh = Scene(**{**scene.tensors(), "colors": sh0}, width=17, height=13)
    rgb_out, sh_out = gsnb.render(*scene.args()), gsnb.render(*as_sh.args())
    assert_images_close(
        (sh_out.rgb, sh_out.alpha, sh_out.depth),
        (rgb_out.rgb, rgb_out.alpha, rgb_out.depth),
        atol=1e-12,
    )


def test_view_dependent_colour_follows_the_camera() -> None:
    # Degree 1 with only the z coefficient: colour = 0.5 + C1 * dir_z * c, with dir
    # pointing from the camera to the Gaussian.
    c = 0.5
    colors = torch.zeros(1, 4, 3, dtype=torch.float64)
    colors[0, 2] = c
    ident = torch.eye(4, dtype=torch.float64)
    turned = torch.diag(torch.tensor([-1.0, 1.0, -1.0, 1.0], dtype=torch.float64))  # looks along -z
    K = torch.tensor([[16.0, 0, 8.5], [0, 16, 8.5], [0, 0, 1]], dtype=torch.float64)
    common = (
        torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64),
        torch.full((1, 3), 1e-8, dtype=torch.float64),
        torch.tensor([0.5], dtype=torch.float64),
        colors,
    )
    front = gsnb.render(
        torch.tensor([[0.0, 0, 2]], dtype=torch.float64), *common, ident[None], K[None], 16, 16
    )
    back = gsnb.render(
        torch.tensor([[0.0, 0, -2]], dtype=torch.float64), *common, turned[None], K[None], 16, 16
    )
    c1 = 0.4886025119029199
    assert front.rgb[0, 8, 8, 0].item() == pytest.approx(0.5 * (0.5 + c1 * c), abs=1e-9)
    assert back.rgb[0, 8, 8, 0].item() == pytest.approx(0.5 * (0.5 - c1 * c), abs=1e-9)


def test_basis_counts() -> None:
    assert [num_sh_bases(d) for d in range(4)] == [1, 4, 9, 16]
    assert [sh_degree_from_bases(k) for k in (1, 4, 9, 16)] == [0, 1, 2, 3]
    for bad in (0, 2, 5, 25):
        with pytest.raises(ValueError, match=f"{bad} SH coefficients"):
            sh_degree_from_bases(bad)
