"""error_shares: each Gaussian's blending weights times the pixels' error, summed."""

from __future__ import annotations

import pytest
import torch

from gsnb.raster.api import render_splats
from gsnb.raster.sh import rgb_to_sh0
from gsnb.train.error_shares import error_shares, pixel_error
from gsnb.train.pose_refine import MovedGaussians

W, H = 20, 16
K = torch.tensor([[[18.0, 0.0, 10.0], [0.0, 18.0, 8.0], [0.0, 0.0, 1.0]]], dtype=torch.float64)
VIEW = torch.eye(4, dtype=torch.float64)[None]


def splats(n: int = 6, seed: int = 0) -> dict[str, torch.Tensor]:
    """Overlapping Gaussians in front of the camera, float64, stored parameters."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 1.2 - 0.6
    means = torch.cat([xy, 2 + torch.rand(n, 1, generator=g)], 1)
    return {
        "means": means.double(),
        "quats": torch.randn(n, 4, generator=g).double(),
        "scales": (torch.rand(n, 3, generator=g) * 1.0 - 2.5).double(),
        "opacities": torch.randn(n, generator=g).double(),
        "sh0": torch.randn(n, 1, 3, generator=g).double(),
        "shN": torch.randn(n, 3, 3, generator=g).double(),
    }


def draw(gaussians: MovedGaussians):
    return render_splats(
        gaussians.splats, VIEW, K, W, H, sh_degree=0, backgrounds=torch.zeros(3).double(),
        backend="reference",
    )  # fmt: skip


def weights(stored: dict[str, torch.Tensor]) -> torch.Tensor:
    """``[N, H, W]`` each Gaussian's blending weight, from N forward renders in which it
    alone has colour 1 (the others 0, over black)."""
    n = stored["means"].shape[0]
    out = []
    for k in range(n):
        rgb = torch.zeros(n, 1, 3, dtype=torch.float64)
        rgb[k] = 1.0
        one_hot = stored | {"sh0": rgb_to_sh0(rgb), "shN": stored["shN"][:, :0]}
        out.append(draw(MovedGaussians(one_hot, (0.0, 0.0, 0.0))).rgb[0, ..., 0])
    return torch.stack(out)


def test_shares_are_the_weights_times_the_error_summed_over_the_pixels() -> None:
    stored = splats()
    error = torch.rand(H, W, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    shares = error_shares(stored, draw, error)
    expected = (weights(stored) * error).sum((1, 2))
    assert expected.min() > 0  # every Gaussian is seen
    rel = (shares - expected).norm() / expected.norm()
    assert rel < 1e-10, f"relative error {rel:.2e}"


def test_an_error_of_one_everywhere_gives_the_image_its_alpha() -> None:
    stored = splats(seed=3)
    shares = error_shares(stored, draw, torch.ones(H, W, dtype=torch.float64))
    alpha = draw(MovedGaussians(stored, (0.0, 0.0, 0.0))).alpha.sum()
    assert shares.sum().item() == pytest.approx(alpha.item(), rel=1e-10)


def test_no_gradient_reaches_the_gaussians() -> None:
    stored = {k: v.clone().requires_grad_(True) for k, v in splats().items()}
    error_shares(stored, draw, torch.ones(H, W, dtype=torch.float64))
    assert all(v.grad is None for v in stored.values())


def test_gaussians_out_of_view_have_no_share() -> None:
    stored = splats()
    stored["means"] = stored["means"] * torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)
    shares = error_shares(stored, draw, torch.ones(H, W, dtype=torch.float64))
    assert shares.shape == (6,) and bool((shares == 0).all())


def test_error_map_of_another_size_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\[H, W\] error"):
        error_shares(splats(), draw, torch.ones(H + 1, W, dtype=torch.float64))
    with pytest.raises(ValueError, match="one shape"):
        pixel_error(torch.zeros(H, W, 3), torch.zeros(H, W + 1, 3))
