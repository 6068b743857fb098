"""clone_split_prune gives what duplicate, split and remove in turn give, element for element."""

from __future__ import annotations

import pytest
import torch

from gsnb.train.strategy import ops
from gsnb.train.strategy.refine import clone_split_prune
from tests.train.strategy.test_ops import check_aligned, splats, with_adam


def doomed_rule(opacities: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Transparent or large: both parts of DefaultStrategy's rule, thresholds that bite."""
    return (torch.sigmoid(opacities) < 0.3) | (torch.exp(scales).amax(-1) > 0.08)


def run(
    sequential: bool,
    n: int,
    clone_rate: float,
    split_rate: float,
    revised: bool,
    prune: bool = False,
):
    params = splats(n, seed=3)
    opt = with_adam(params)
    # "origin": each row's first ancestor, carried along as every per-Gaussian state tensor
    state = {
        "grad2d": torch.arange(n, dtype=torch.float32), "count": torch.ones(n), "k": 2.0,
        "origin": torch.arange(n, dtype=torch.float32),
    }  # fmt: skip
    pick = torch.Generator().manual_seed(5)
    draw = torch.rand(n, generator=pick)
    clone = draw < clone_rate
    split = (draw >= clone_rate) & (draw < clone_rate + split_rate)
    # with ``prune``: every third Gaussian goes, with its clone and children
    pruned = (torch.arange(n) % 3 == 0) if prune else None
    gen = torch.Generator().manual_seed(11)
    if sequential:
        cloned = ops.duplicate(params, opt, state, clone)
        to_split = torch.cat([split, clone.new_zeros(cloned)])
        n_split = ops.split(params, opt, state, to_split, gen, revised_opacity=revised)
        mask = doomed_rule(params["opacities"], params["scales"])
        if pruned is not None:
            mask = mask | pruned[state["origin"].long()]
        counts = (cloned, n_split, ops.remove(params, opt, state, mask))
    else:
        counts = clone_split_prune(
            params, opt, state, clone, split, doomed_rule, gen, revised_opacity=revised,
            prune=pruned,
        )  # fmt: skip
    return params, opt, state, counts, gen


@pytest.mark.parametrize("prune", [False, True])
@pytest.mark.parametrize("revised", [True, False])
@pytest.mark.parametrize(("clone_rate", "split_rate"), [(0.2, 0.3), (0.0, 0.5), (0.4, 0.0)])
def test_the_same_as_duplicate_split_remove_in_turn(
    revised: bool, clone_rate: float, split_rate: float, prune: bool
) -> None:
    a, opt_a, state_a, counts_a, gen_a = run(True, 64, clone_rate, split_rate, revised, prune)
    b, opt_b, state_b, counts_b, gen_b = run(False, 64, clone_rate, split_rate, revised, prune)
    assert counts_a == counts_b
    assert counts_b[2] > 0  # the rule pruned some, children included
    check_aligned(b, opt_b)
    for name in a:
        assert torch.equal(a[name], b[name]), name
        assert b[name].requires_grad
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(opt_a.state[a[name]][key], opt_b.state[b[name]][key]), name
        assert opt_a.state[a[name]]["step"] == opt_b.state[b[name]]["step"]
    assert state_a.keys() == state_b.keys() and state_b["k"] == 2.0
    for key in ("grad2d", "count", "origin"):
        assert torch.equal(state_a[key], state_b[key])
    assert torch.equal(gen_a.get_state(), gen_b.get_state())  # one draw, the same
    if prune:  # no row descends from a pruned Gaussian
        assert not bool((state_b["origin"].long() % 3 == 0).any())


def test_new_gaussians_start_with_zero_moments_and_kept_ones_keep_theirs() -> None:
    params, opt, _, (cloned, split, pruned), _ = run(False, 40, 0.25, 0.25, True)
    n = params["means"].shape[0]
    assert n == 40 + cloned + split - pruned
    moments = opt.state[params["shN"]]["exp_avg"]
    zero_rows = (moments == 0).flatten(1).all(1)
    # the kept originals come first and carry their moments; clones and children follow
    assert not zero_rows[: n - int(zero_rows.sum())].any()
    assert zero_rows[n - int(zero_rows.sum()) :].all()


def test_masks_of_another_size_are_refused() -> None:
    params = splats(5)
    with pytest.raises(ValueError, match=r"\[N\] bool masks of the 5 Gaussians"):
        clone_split_prune(
            params, None, {}, torch.zeros(4, dtype=torch.bool), torch.zeros(5, dtype=torch.bool),
            doomed_rule,
        )  # fmt: skip
    no = torch.zeros(5, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"\[N\] bool masks of the 5 Gaussians"):
        clone_split_prune(params, None, {}, no, no, doomed_rule, prune=torch.zeros(6).bool())
    with pytest.raises(ValueError, match="bool masks"):
        clone_split_prune(params, None, {}, no, no, doomed_rule, prune=torch.zeros(5))
