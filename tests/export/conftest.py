"""Fixtures for gsnb.export tests: small random scenes."""

from __future__ import annotations

import pytest
import torch

from gsnb.model import GaussianModel


def random_splats(n: int, sh_degree: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """GaussianModel parameters with random (not round) values in every tensor."""
    g = torch.Generator().manual_seed(seed)
    k = (sh_degree + 1) ** 2
    return {
        "means": torch.randn(n, 3, generator=g),
        "quats": torch.randn(n, 4, generator=g),
        "scales": torch.randn(n, 3, generator=g) - 3.0,
        "opacities": torch.randn(n, generator=g),
        "sh0": torch.randn(n, 1, 3, generator=g),
        "shN": torch.randn(n, k - 1, 3, generator=g),
    }


@pytest.fixture
def small_model() -> GaussianModel:
    """About a hundred coloured Gaussians in a unit cube around the origin."""
    g = torch.Generator().manual_seed(1)
    points = torch.rand(120, 3, generator=g) - 0.5
    return GaussianModel.from_points(
        points, torch.rand(120, 3, generator=g), sh_degree=1, init_opacity=0.8
    )
