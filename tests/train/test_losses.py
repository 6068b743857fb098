"""SSIM, PSNR and the 3DGS photometric loss."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from gsnb.train.losses import photometric_loss, psnr, ssim


def direct_ssim(x: torch.Tensor, y: torch.Tensor) -> float:
    """SSIM with a full 11x11 window in float64, valid region, straight from the definition."""
    c = torch.arange(11, dtype=torch.float64) - 5
    g = torch.exp(-(c**2) / (2 * 1.5**2))
    w = (g[:, None] * g[None, :]) / (g.sum() ** 2)
    a = x.double().permute(2, 0, 1)[:, None]
    b = y.double().permute(2, 0, 1)[:, None]
    k = w[None, None]

    def blur(t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(t, k)

    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a**2
    var_b = blur(b * b) - mu_b**2
    cov = blur(a * b) - mu_a * mu_b
    c1, c2 = 0.01**2, 0.03**2
    num = (2 * mu_a * mu_b + c1) * (2 * cov + c2)
    s = num / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return s.mean().item()


def test_ssim_matches_the_definition() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(24, 30, 3, generator=g)
    y = (x + 0.1 * torch.randn(24, 30, 3, generator=g)).clamp(0, 1)
    assert ssim(x[None], y[None]).item() == pytest.approx(direct_ssim(x, y), abs=1e-5)


def test_ssim_properties() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.rand(2, 20, 20, 3, generator=g)
    assert ssim(x, x).item() == pytest.approx(1.0, abs=1e-6)
    y = (x + 0.05 * torch.randn(x.shape, generator=g)).clamp(0, 1)
    z = (x + 0.3 * torch.randn(x.shape, generator=g)).clamp(0, 1)
    assert ssim(x, y).item() == pytest.approx(ssim(y, x).item(), abs=1e-6)
    assert 1 > ssim(x, y).item() > ssim(x, z).item()
    per_image = ssim(x, y, reduce=False)
    assert per_image.shape == (2,) and per_image.mean().item() == pytest.approx(ssim(x, y).item())
    # small images fall back to zero padding instead of an empty valid region
    tiny = torch.rand(1, 6, 6, 3, generator=g)
    assert ssim(tiny, tiny).item() == pytest.approx(1.0, abs=1e-6)
    assert ssim(x, y, padding="same").item() != ssim(x, y).item()
    with pytest.raises(ValueError, match="equal shapes"):
        ssim(x, tiny)
    with pytest.raises(ValueError, match="padding"):
        ssim(x, y, padding="reflect")


def test_psnr() -> None:
    a = torch.zeros(8, 8, 3)
    assert psnr(a, a + 0.01).item() == pytest.approx(40.0, abs=1e-4)
    assert math.isfinite(psnr(a, a).item())


def test_photometric_loss_is_the_3dgs_blend_and_differentiable() -> None:
    g = torch.Generator().manual_seed(2)
    target = torch.rand(1, 16, 16, 3, generator=g)
    render = torch.rand(1, 16, 16, 3, generator=g, requires_grad=True)
    loss, l1, s = photometric_loss(render, target, 0.2)
    assert l1.item() == pytest.approx((render - target).abs().mean().item())
    assert loss.item() == pytest.approx(0.8 * l1.item() + 0.2 * (1 - s.item()))
    loss.backward()
    assert render.grad is not None and bool(torch.isfinite(render.grad).all())
