"""Tensor surgery keeps parameters, Adam moments and running state aligned."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gsnb.train.optim import make_optimizer
from gsnb.train.strategy import ops


def splats(n: int, seed: int = 0) -> nn.ParameterDict:
    g = torch.Generator().manual_seed(seed)
    return nn.ParameterDict(
        {
            "means": nn.Parameter(torch.randn(n, 3, generator=g)),
            "quats": nn.Parameter(torch.randn(n, 4, generator=g)),
            "scales": nn.Parameter(torch.randn(n, 3, generator=g) - 3.0),
            "opacities": nn.Parameter(torch.randn(n, generator=g)),
            "sh0": nn.Parameter(torch.randn(n, 1, 3, generator=g)),
            "shN": nn.Parameter(torch.randn(n, 3, 3, generator=g)),
        }
    )


def with_adam(params: nn.ParameterDict) -> torch.optim.Adam:
    """An Adam that has taken one step, so every moment is non-zero."""
    opt = make_optimizer(params, dict.fromkeys(params.keys(), 0.01))
    sum((p**2).sum() for p in params.values()).backward()
    opt.step()
    return opt


def moments(opt: torch.optim.Optimizer, params: nn.ParameterDict, name: str) -> torch.Tensor:
    return opt.state[params[name]]["exp_avg"]


def check_aligned(params: nn.ParameterDict, opt: torch.optim.Optimizer) -> None:
    n = params["means"].shape[0]
    for group in opt.param_groups:
        (p,) = group["params"]
        assert p is params[group["name"]]
        assert p.shape[0] == n
        for key in ("exp_avg", "exp_avg_sq"):
            assert opt.state[p][key].shape == p.shape


def test_duplicate_appends_copies_with_zero_moments() -> None:
    params = splats(5)
    opt = with_adam(params)
    before = params["means"].detach().clone()
    state = {"grad2d": torch.arange(5.0), "scene_scale": 2.0}
    assert ops.duplicate(params, opt, state, torch.tensor([0, 1, 0, 1, 0], dtype=torch.bool)) == 2
    check_aligned(params, opt)
    assert torch.equal(params["means"][5:], before[[1, 3]])
    assert torch.equal(params["means"][:5], before)
    assert bool((moments(opt, params, "means")[5:] == 0).all())
    assert bool((moments(opt, params, "means")[:5] != 0).all())
    assert state["grad2d"].tolist() == [0, 1, 2, 3, 4, 1, 3]
    assert state["scene_scale"] == 2.0


def test_split_replaces_parents_by_two_smaller_children() -> None:
    params = splats(4)
    opt = with_adam(params)
    scales = params["scales"].detach().clone()
    means = params["means"].detach().clone()
    mask = torch.tensor([False, True, False, False])
    n = ops.split(params, opt, {}, mask, torch.Generator().manual_seed(0))
    assert n == 1 and params["means"].shape[0] == 5
    check_aligned(params, opt)
    kept = torch.tensor([0, 2, 3])
    assert torch.equal(params["means"][:3], means[kept])
    expected = scales[1] - math.log(1.6)
    assert torch.allclose(params["scales"][3:], expected.expand(2, 3))
    # children are drawn within a few parent standard deviations of the parent
    spread = (params["means"][3:] - means[1]).norm(dim=-1)
    assert bool((spread < 6 * scales[1].exp().max()).all()) and bool((spread > 0).all())
    assert bool((moments(opt, params, "scales")[3:] == 0).all())


def test_split_revised_opacity_keeps_the_pair_as_opaque_as_the_parent() -> None:
    params = splats(2)
    parent = torch.sigmoid(params["opacities"][0]).item()
    ops.split(params, None, {}, torch.tensor([True, False]), revised_opacity=True)
    child = torch.sigmoid(params["opacities"][1]).item()
    assert 1 - (1 - child) ** 2 == pytest.approx(parent, rel=1e-5)


def test_remove_drops_rows_everywhere() -> None:
    params = splats(4)
    opt = with_adam(params)
    keep = moments(opt, params, "sh0")[[0, 3]].clone()
    state = {"count": torch.tensor([1.0, 2.0, 3.0, 4.0])}
    assert ops.remove(params, opt, state, torch.tensor([False, True, True, False])) == 2
    check_aligned(params, opt)
    assert torch.equal(moments(opt, params, "sh0"), keep)
    assert state["count"].tolist() == [1.0, 4.0]


def test_reset_opacity_clamps_and_zeroes_moments() -> None:
    params = splats(6)
    opt = with_adam(params)
    ops.reset_opacity(params, opt, 0.01)
    opac = torch.sigmoid(params["opacities"].detach())
    assert float(opac.max()) <= 0.01 + 1e-6
    assert bool((moments(opt, params, "opacities") == 0).all())
    assert bool((moments(opt, params, "means") != 0).all())


def test_relocation_params_preserve_the_rendered_opacity() -> None:
    opac = torch.tensor([0.3, 0.8, 0.95])
    for n in (1, 2, 5, 40):
        new_o, _ = ops.relocation_params(opac, torch.ones(3, 3), torch.full((3,), n))
        # n copies stacked on one another are as opaque as the original
        assert torch.allclose(1 - (1 - new_o) ** n, opac, atol=1e-5)
    o1, s1 = ops.relocation_params(opac, torch.full((3, 3), 2.0), torch.ones(3, dtype=torch.long))
    assert torch.allclose(o1, opac) and torch.allclose(s1, torch.full((3, 3), 2.0))
    _, s2 = ops.relocation_params(opac, torch.ones(3, 3), torch.full((3,), 4))
    assert bool((s2 < 1.5).all()) and bool((s2 > 0).all())


def test_relocate_moves_dead_onto_live_and_keeps_count() -> None:
    params = splats(6)
    with torch.no_grad():
        params["opacities"][:] = torch.tensor([-9.0, 2.0, -9.0, 1.0, 3.0, -9.0])
    opt = with_adam(params)
    dead = torch.sigmoid(params["opacities"]) <= 0.005
    moved = ops.relocate(params, opt, {}, dead, 0.005, torch.Generator().manual_seed(1))
    assert moved == 3 and params["means"].shape[0] == 6
    check_aligned(params, opt)
    assert float(torch.sigmoid(params["opacities"].detach()).min()) > 0.005
    live_means = {tuple(m) for m in params["means"][[1, 3, 4]].tolist()}
    assert all(tuple(params["means"][i].tolist()) in live_means for i in (0, 2, 5))
    assert bool((moments(opt, params, "means")[[0, 2, 5]] == 0).all())


def test_sample_add_grows_by_n_with_zero_moments() -> None:
    params = splats(10)
    opt = with_adam(params)
    assert ops.sample_add(params, opt, {}, 3, 0.005, torch.Generator().manual_seed(0)) == 3
    check_aligned(params, opt)
    assert params["means"].shape[0] == 13
    assert bool((moments(opt, params, "quats")[10:] == 0).all())


def test_sample_by_weight_never_picks_zero_weight() -> None:
    w = torch.tensor([0.0, 2.0, 0.0, 1.0])
    picks = ops.sample_by_weight(w, 2000, torch.Generator().manual_seed(0))
    counts = torch.bincount(picks, minlength=4)
    assert counts[0] == 0 and counts[2] == 0
    assert 1.6 < counts[1] / counts[3] < 2.5


def test_inject_noise_moves_transparent_gaussians_only() -> None:
    params = splats(4)
    with torch.no_grad():
        params["opacities"][:] = torch.tensor([-12.0, -12.0, 5.0, 5.0])
    before = params["means"].detach().clone()
    ops.inject_noise(params, 1e3, torch.Generator().manual_seed(0))
    moved = (params["means"] - before).norm(dim=-1)
    assert bool((moved[:2] > 0).all()) and bool((moved[2:] < 1e-6).all())
