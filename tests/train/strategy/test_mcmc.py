"""MCMCStrategy: relocation of dead Gaussians, growth up to the cap, noise, regularisers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gsnb.train.optim import make_optimizer
from gsnb.train.strategy import MCMCStrategy


def gaussians(opacities: list[float], seed: int = 0) -> nn.ParameterDict:
    g = torch.Generator().manual_seed(seed)
    n = len(opacities)
    return nn.ParameterDict(
        {
            "means": nn.Parameter(torch.randn(n, 3, generator=g)),
            "quats": nn.Parameter(torch.randn(n, 4, generator=g)),
            "scales": nn.Parameter(torch.full((n, 3), -3.0)),
            "opacities": nn.Parameter(torch.logit(torch.tensor(opacities))),
            "sh0": nn.Parameter(torch.zeros(n, 1, 3)),
            "shN": nn.Parameter(torch.zeros(n, 0, 3)),
        }
    )


def run(strategy: MCMCStrategy, params: nn.ParameterDict, step: int) -> dict[str, int]:
    opt = make_optimizer(params, dict.fromkeys(params.keys(), 1e-3))
    g = torch.Generator().manual_seed(0)
    return strategy.step_post_backward(params, opt, {}, step, {}, 1.6e-4, g)


def test_dead_gaussians_are_relocated_and_the_count_grows_5_percent() -> None:
    opac = [0.001] * 3 + [0.5] * 37
    params = gaussians(opac)
    counts = run(MCMCStrategy(), params, 600)
    assert counts == {"relocated": 3, "added": 2}  # int(1.05 * 40) = 42
    assert params["means"].shape[0] == 42
    assert float(torch.sigmoid(params["opacities"].detach()).min()) > 0.005


def test_growth_stops_at_the_cap() -> None:
    params = gaussians([0.5] * 40)
    assert run(MCMCStrategy(cap_max=41), params, 600)["added"] == 1
    assert run(MCMCStrategy(cap_max=41), params, 700)["added"] == 0
    assert params["means"].shape[0] == 41


def test_no_refinement_off_schedule_but_noise_every_step() -> None:
    params = gaussians([0.001] * 2 + [0.5] * 20)
    before = params["means"].detach().clone()
    for step in (500, 550, 25_000):
        assert run(MCMCStrategy(), params, step) == {"relocated": 0, "added": 0}
    moved = (params["means"].detach() - before).norm(dim=-1)
    assert bool((moved[:2] > 0).all())  # transparent Gaussians wander
    assert float(moved[2:].max()) < float(moved[:2].min())


def test_regulariser_is_the_weighted_mean_opacity_and_scale() -> None:
    params = gaussians([0.2, 0.6])
    reg = MCMCStrategy(opacity_reg=0.1, scale_reg=0.5).regularization(params)
    expected = 0.1 * 0.4 + 0.5 * float(torch.exp(torch.tensor(-3.0)))
    assert float(reg.detach()) == pytest.approx(expected, rel=1e-5)
    assert MCMCStrategy(opacity_reg=0.0, scale_reg=0.0).regularization(params) is None
