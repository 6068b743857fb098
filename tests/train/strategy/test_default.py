"""DefaultStrategy: clone, split, prune and opacity reset on hand-built Gaussians."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gsnb.train.optim import make_optimizer
from gsnb.train.strategy import DefaultStrategy

W, H = 100, 80


def gaussians(scales: list[float], opacities: list[float]) -> nn.ParameterDict:
    n = len(scales)
    return nn.ParameterDict(
        {
            "means": nn.Parameter(torch.arange(n * 3.0).reshape(n, 3)),
            "quats": nn.Parameter(torch.tensor([[1.0, 0, 0, 0]]).repeat(n, 1)),
            "scales": nn.Parameter(torch.log(torch.tensor(scales))[:, None].repeat(1, 3)),
            "opacities": nn.Parameter(torch.logit(torch.tensor(opacities))),
            "sh0": nn.Parameter(torch.zeros(n, 1, 3)),
            "shN": nn.Parameter(torch.zeros(n, 3, 3)),
        }
    )


def info(grads: list[tuple[float, float]], visible: list[bool]) -> dict:
    """A render's by-products: screen-space gradients in pixels^-1 and radii."""
    means2d = torch.zeros(1, len(grads), 2, requires_grad=True)
    means2d.grad = torch.tensor([grads])
    radii = torch.tensor([[[3, 3] if v else [0, 0] for v in visible]], dtype=torch.int32)
    return {"means2d": means2d, "radii": radii, "width": W, "height": H, "n_cameras": 1}


def setup(scales: list[float], opacities: list[float], strategy: DefaultStrategy):
    params = gaussians(scales, opacities)
    opt = make_optimizer(params, dict.fromkeys(params.keys(), 1e-3))
    state = strategy.initialize_state(scene_scale=1.0)
    return params, opt, state


def test_clone_small_split_large_prune_transparent() -> None:
    s = DefaultStrategy()
    # 0: small, high gradient -> clone; 1: large, high gradient -> split;
    # 2: transparent -> pruned; 3: high gradient but never visible -> kept as is.
    params, opt, state = setup([0.005, 0.05, 0.005, 0.005], [0.5, 0.5, 0.001, 0.5], s)
    grad = 2e-4 / (W / 2) * 1.5  # 1.5x the threshold after normalisation
    grads = [(grad, 0.0), (grad, 0.0), (0.0, 0.0), (grad, 0.0)]
    counts = s.step_post_backward(
        params, opt, state, 600, info(grads, [True, True, True, False]), 1e-4
    )
    assert counts == {"cloned": 1, "split": 1, "pruned": 1, "reset": 0}
    assert params["means"].shape[0] == 4 + 1 + 1 - 1
    # survivors keep their order, then the clone, then the two children
    scales = torch.exp(params["scales"][:, 0]).tolist()
    assert scales == pytest.approx([0.005, 0.005, 0.005, 0.05 / 1.6, 0.05 / 1.6], rel=1e-5)
    assert state["grad2d"].shape == (5,) and bool((state["grad2d"] == 0).all())
    for group in opt.param_groups:
        assert group["params"][0] is params[group["name"]]


def test_gradient_is_normalised_by_half_the_image_size() -> None:
    s = DefaultStrategy()
    params, _opt, state = setup([0.005], [0.5], s)
    s.accumulate(params, state, info([(1e-3, 2e-3)], [True]))
    expected = math.hypot(1e-3 * W / 2, 2e-3 * H / 2)
    assert state["grad2d"].item() == pytest.approx(expected)
    assert state["count"].item() == 1


def test_pixel_weighted_averages_over_the_views_by_screen_extent() -> None:
    # One Gaussian seen by two views: small (radii 2 x 3) with a large gradient, large
    # (radii 10 x 10) with a small one; a third view does not see it.
    means2d = torch.zeros(3, 1, 2, requires_grad=True)
    means2d.grad = torch.tensor([[[4e-3, 0.0]], [[1e-3, 0.0]], [[9.0, 9.0]]])
    radii = torch.tensor([[[2, 3]], [[10, 10]], [[0, 0]]], dtype=torch.int32)
    data = {"means2d": means2d, "radii": radii, "width": W, "height": H, "n_cameras": 3}
    norms = [4e-3 * W / 2 * 3, 1e-3 * W / 2 * 3]
    for weighted, weights in ((False, [1.0, 1.0]), (True, [6.0, 100.0])):
        s = DefaultStrategy(pixel_weighted=weighted)
        params, _opt, state = setup([0.005], [0.5], s)
        s.accumulate(params, state, data)
        mean = state["grad2d"].item() / state["count"].item()
        expected = sum(w * g for w, g in zip(weights, norms, strict=True)) / sum(weights)
        assert mean == pytest.approx(expected, rel=1e-6)
        assert state["count"].item() == pytest.approx(sum(weights))


def test_error_densify_grows_by_the_largest_share_of_a_views_error() -> None:
    s = DefaultStrategy(error_densify=True, grow_error=1e-3)
    # 0: small, a large share in one view of two -> clone; 1: large, shares below the
    # threshold in every view, however large its gradient -> kept; 2: large, a large share
    # -> split.
    params, opt, state = setup([0.005, 0.05, 0.05], [0.5, 0.5, 0.5], s)
    pixels = W * H
    views = ([2e-3 * pixels, 0.9e-3 * pixels, 0.0], [0.0, 0.9e-3 * pixels, 5e-3 * pixels])
    huge = [(1.0, 0.0)] * 3
    for shares in views:
        s.accumulate(params, state, info(huge, [True] * 3) | {"error": torch.tensor(shares)})
    assert state["error"].tolist() == pytest.approx([2e-3, 0.9e-3, 5e-3])
    counts = s.step_post_backward(
        params, opt, state, 600, info(huge, [True] * 3) | {"error": torch.zeros(3)}, 1e-4
    )
    assert counts == {"cloned": 1, "split": 1, "pruned": 0, "reset": 0}
    scales = torch.exp(params["scales"][:, 0]).tolist()
    assert scales == pytest.approx([0.005, 0.05, 0.005, 0.05 / 1.6, 0.05 / 1.6], rel=1e-5)
    assert state["error"].shape == (5,) and bool((state["error"] == 0).all())


def test_a_cap_grows_the_gaussians_of_highest_gradient_only() -> None:
    # four above the threshold (gradients 4x, 3x, 2x, 1.5x it), one below; the cap leaves
    # room for two: the two of highest gradient, both large, grow by a split each
    scales = [0.005, 0.05, 0.005, 0.05, 0.005]
    grads = [(2e-4 / (W / 2) * k, 0.0) for k in (2.0, 4.0, 1.5, 3.0, 0.5)]
    s = DefaultStrategy(cap_max=7)
    params, opt, state = setup(scales, [0.5] * 5, s)
    counts = s.step_post_backward(params, opt, state, 600, info(grads, [True] * 5), 1e-4)
    assert counts == {"cloned": 0, "split": 2, "pruned": 0, "reset": 0}
    assert params["means"].shape[0] == 7
    # no room: nothing grows, while pruning goes on
    s = DefaultStrategy(cap_max=5)
    params, opt, state = setup(scales, [0.5, 0.5, 0.5, 0.5, 0.001], s)
    counts = s.step_post_backward(params, opt, state, 600, info(grads, [True] * 5), 1e-4)
    assert counts == {"cloned": 0, "split": 0, "pruned": 1, "reset": 0}
    # room enough: the cap changes nothing
    s = DefaultStrategy(cap_max=100)
    params, opt, state = setup(scales, [0.5] * 5, s)
    counts = s.step_post_backward(params, opt, state, 600, info(grads, [True] * 5), 1e-4)
    assert counts == {"cloned": 2, "split": 2, "pruned": 0, "reset": 0}


def test_a_cap_with_error_densify_ranks_by_share_of_the_error() -> None:
    s = DefaultStrategy(error_densify=True, grow_error=1e-3, cap_max=4)
    params, opt, state = setup([0.005, 0.005, 0.005], [0.5] * 3, s)
    shares = torch.tensor([2e-3, 5e-3, 3e-3]) * W * H  # all three above the threshold
    s.accumulate(params, state, info([(0.0, 0.0)] * 3, [True] * 3) | {"error": shares})
    counts = s.step_post_backward(
        params, opt, state, 600, info([(0.0, 0.0)] * 3, [True] * 3) | {"error": shares}, 1e-4
    )
    assert counts["cloned"] == 1  # room for one: Gaussian 1, of the largest share
    assert params["means"][-1].tolist() == params["means"][1].tolist()


def test_error_densify_without_error_shares_names_the_fix() -> None:
    s = DefaultStrategy(error_densify=True)
    params, _opt, state = setup([0.005], [0.5], s)
    with pytest.raises(RuntimeError, match="batch_size 1"):
        s.accumulate(params, state, info([(0.0, 0.0)], [True]))
    assert s.needs_error(600) and not s.needs_error(15_000)
    assert not DefaultStrategy().needs_error(600)


def test_error_densify_keeps_nothing_from_a_closed_gate_and_checks_the_shape() -> None:
    s = DefaultStrategy(error_densify=True)
    params, _opt, state = setup([0.005, 0.005], [0.5, 0.5], s)
    shares = torch.tensor([3.0, float("nan")]) * W * H
    nan_gate = torch.tensor([1.0, 0.0, float("nan")], dtype=torch.float64)  # a NaN loss
    s.accumulate(
        params, state, info([(0.0, 0.0)] * 2, [True] * 2) | {"error": shares, "gate": nan_gate}
    )
    assert state["error"].tolist() == [0.0, 0.0]
    open_gate = torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)
    good = torch.tensor([3.0, 1.0]) * W * H
    s.accumulate(
        params, state, info([(0.0, 0.0)] * 2, [True] * 2) | {"error": good, "gate": open_gate}
    )
    assert state["error"].tolist() == pytest.approx([3.0, 1.0])
    with pytest.raises(ValueError, match=r"\[N\] = \[2\]"):
        s.accumulate(params, state, info([(0.0, 0.0)] * 2, [True] * 2) | {"error": torch.ones(3)})


def test_below_threshold_nothing_grows() -> None:
    s = DefaultStrategy()
    params, opt, state = setup([0.005, 0.05], [0.5, 0.5], s)
    grad = 2e-4 / (W / 2) * 0.5
    counts = s.step_post_backward(params, opt, state, 600, info([(grad, 0.0)] * 2, [True] * 2), 0)
    assert counts["cloned"] == counts["split"] == 0 and params["means"].shape[0] == 2


def test_refine_only_on_schedule() -> None:
    s = DefaultStrategy()
    params, opt, state = setup([0.005], [0.5], s)
    grad = [(1.0, 0.0)]
    for step in (500, 550):  # not after refine_start_iter, not a multiple of refine_every
        counts = s.step_post_backward(params, opt, state, step, info(grad, [True]), 0)
        assert counts["cloned"] == 0
    assert state["count"].item() == 2
    counts = s.step_post_backward(params, opt, state, 15_000, info(grad, [True]), 0)
    assert counts == {"cloned": 0, "split": 0, "pruned": 0, "reset": 0}
    assert state["count"].item() == 2  # nothing accumulates after refine_stop_iter


def test_too_large_pruned_only_after_first_reset() -> None:
    s = DefaultStrategy()
    params, opt, state = setup([0.5, 0.005], [0.5, 0.5], s)
    zero = info([(0.0, 0.0)] * 2, [True] * 2)
    assert s.step_post_backward(params, opt, state, 2900, zero, 0)["pruned"] == 0
    assert s.step_post_backward(params, opt, state, 3100, zero, 0)["pruned"] == 1
    assert params["means"].shape[0] == 1


def test_opacity_reset_every_reset_every() -> None:
    assert not DefaultStrategy().resets_at(3000)  # off by default, as gsplat 1.5.3 runs
    s = DefaultStrategy(reset_every=300, opacity_reset=True)
    params, opt, state = setup([0.005] * 3, [0.9, 0.5, 0.004], s)
    zero = info([(0.0, 0.0)] * 3, [True] * 3)
    counts = s.step_post_backward(params, opt, state, 300, zero, 0)
    assert counts["reset"] == 1
    opac = torch.sigmoid(params["opacities"].detach())
    assert opac.tolist() == pytest.approx([0.01, 0.01, 0.004], rel=1e-4)


def test_without_opacity_reset_opacities_stay_and_large_ones_are_still_pruned() -> None:
    s = DefaultStrategy(refine_start_iter=100, reset_every=300, opacity_reset=False)
    params, opt, state = setup([0.005, 0.005, 0.5], [0.9, 0.5, 0.5], s)
    zero = info([(0.0, 0.0)] * 3, [True] * 3)
    before = params["opacities"].detach().clone()
    assert not s.resets_at(300) and s.densifies_at(300)
    assert s.step_post_backward(params, opt, state, 300, zero, 0)["reset"] == 0
    assert torch.equal(params["opacities"].detach(), before[:3])
    # the schedule of the large-Gaussian prune still counts from reset_every
    counts = s.step_post_backward(params, opt, state, 400, zero, 0)
    assert counts == {"cloned": 0, "split": 0, "pruned": 1, "reset": 0}
    assert torch.equal(params["opacities"].detach(), before[:2])
    s.opacity_reset = True  # a live knob: the next reset step clamps again
    two = info([(0.0, 0.0)] * 2, [True] * 2)
    assert s.step_post_backward(params, opt, state, 600, two, 0)["reset"] == 1
    assert torch.sigmoid(params["opacities"].detach()).tolist() == pytest.approx([0.01] * 2)


def test_no_reset_from_refine_stop_iter_on() -> None:
    s = DefaultStrategy(reset_every=300, refine_stop_iter=600, opacity_reset=True)
    assert s.resets_at(300) and not s.resets_at(600) and not s.resets_at(900)


def test_absgrad_uses_the_absolute_gradient() -> None:
    s = DefaultStrategy(absgrad=True)
    params, _opt, state = setup([0.005], [0.5], s)
    data = info([(0.0, 0.0)], [True])
    data["absgrad"] = torch.tensor([[[1e-3, 0.0]]])
    s.accumulate(params, state, data)
    assert state["grad2d"].item() == pytest.approx(1e-3 * W / 2)
    with pytest.raises(RuntimeError, match="absgrad"):
        s.accumulate(params, state, info([(0.0, 0.0)], [True]))


def test_a_step_where_nothing_was_visible_adds_nothing() -> None:
    s = DefaultStrategy()
    params, _opt, state = setup([0.005], [0.5], s)
    data = info([(0.0, 0.0)], [False])
    data["means2d"].grad = None
    s.accumulate(params, state, data)
    assert state["grad2d"] is None


def test_knob_ranges_are_checked() -> None:
    with pytest.raises(ValueError, match="grow_grad2d"):
        DefaultStrategy(grow_grad2d=-1.0)


@pytest.mark.parametrize(("loss", "updates"), [(0.25, True), (math.nan, False)])
def test_a_closed_gate_accumulates_nothing(loss, updates) -> None:
    params = gaussians([0.1, 0.2, 0.3], [0.5, 0.5, 0.5])
    means2d = torch.zeros(1, 3, 2, requires_grad=True)
    means2d.grad = torch.tensor([[[1e-3, 0.0], [0.0, 2e-3], [1e-3, 1e-3]]])
    radii = torch.tensor([[[2, 2], [0, 0], [3, 1]]], dtype=torch.int32)
    info = {"means2d": means2d, "radii": radii, "width": W, "height": H, "n_cameras": 1}
    strategy = DefaultStrategy()
    state = strategy.initialize_state(1.0)
    gate = torch.tensor([1e-6, 0.0, loss], dtype=torch.float64)
    strategy.accumulate(params, state, info | {"gate": gate})
    assert state["count"].tolist() == ([1.0, 0.0, 1.0] if updates else [0.0, 0.0, 0.0])
    assert bool((state["grad2d"] > 0).any()) == updates
    assert strategy.gates_at(5) and not strategy.gates_at(600)


def sized(radii: list[int], grad: float = 0.0) -> dict:
    """A render's by-products where every Gaussian is visible with the screen ``radii``."""
    data = info([(grad, 0.0)] * len(radii), [True] * len(radii))
    data["radii"] = torch.tensor([[[r, r] for r in radii]], dtype=torch.int32)
    return data


def test_screen_size_splits_wide_gaussians_and_prunes_wider_ones_after_the_first_reset() -> None:
    # Radii over the image's larger side (100): 0.03 (kept), 0.1 (split, though small
    # and of no gradient) and 0.2 (split before the first reset, pruned after it).
    s = DefaultStrategy(refine_scale2d_stop_iter=4000)
    params, opt, state = setup([0.005, 0.005, 0.005], [0.5] * 3, s)
    counts = s.step_post_backward(params, opt, state, 600, sized([3, 10, 20]), 0)
    assert counts == {"cloned": 0, "split": 2, "pruned": 0, "reset": 0}
    assert params["means"].shape[0] == 5
    assert state["radii"].shape == (5,) and bool((state["radii"] == 0).all())
    params, opt, state = setup([0.005, 0.005, 0.005], [0.5] * 3, s)
    counts = s.step_post_backward(params, opt, state, 3100, sized([3, 10, 20]), 0)
    assert counts == {"cloned": 0, "split": 1, "pruned": 1, "reset": 0}
    assert params["means"].shape[0] == 3  # the first, and the second's two children
    assert torch.exp(params["scales"][:, 0]).tolist() == pytest.approx(
        [0.005, 0.005 / 1.6, 0.005 / 1.6], rel=1e-5
    )
    # From refine_scale2d_stop_iter on, the screen size neither counts nor is kept.
    params, opt, state = setup([0.005, 0.005, 0.005], [0.5] * 3, s)
    counts = s.step_post_backward(params, opt, state, 4000, sized([3, 10, 20]), 0)
    assert counts == {"cloned": 0, "split": 0, "pruned": 0, "reset": 0}
    assert state["radii"] is None


def test_screen_size_is_off_by_default_as_in_gsplat() -> None:
    s = DefaultStrategy()
    params, opt, state = setup([0.005, 0.005], [0.5] * 2, s)
    counts = s.step_post_backward(params, opt, state, 3100, sized([10, 50]), 0)
    assert counts == {"cloned": 0, "split": 0, "pruned": 0, "reset": 0}
    assert state["radii"] is None


def test_screen_size_is_the_largest_since_the_last_refine_step() -> None:
    s = DefaultStrategy(refine_scale2d_stop_iter=4000)
    params, opt, state = setup([0.005, 0.005], [0.5] * 2, s)
    s.step_post_backward(params, opt, state, 650, sized([10, 2]), 0)
    gate = torch.tensor([1.0, 0.0, math.nan], dtype=torch.float64)  # a skipped step
    s.step_post_backward(params, opt, state, 660, sized([2, 30]) | {"gate": gate}, 0)
    hidden = sized([2, 2])
    hidden["radii"][0, 0] = torch.tensor([40, 0])  # not visible: its radius does not count
    s.step_post_backward(params, opt, state, 670, hidden, 0)
    assert state["radii"].tolist() == pytest.approx([0.1, 0.02])
    counts = s.step_post_backward(params, opt, state, 700, sized([1, 1]), 0)
    assert counts["split"] == 1 and params["means"].shape[0] == 3


def test_a_cap_grows_the_wide_gaussians_first() -> None:
    # room for one: the wide one of no gradient splits before the one of high gradient
    s = DefaultStrategy(refine_scale2d_stop_iter=4000, cap_max=3)
    params, opt, state = setup([0.005, 0.005], [0.5] * 2, s)
    data = sized([1, 10])
    data["means2d"].grad = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    counts = s.step_post_backward(params, opt, state, 600, data, 0)
    assert counts == {"cloned": 0, "split": 1, "pruned": 0, "reset": 0}
    # after the first reset a Gaussian wide enough to be pruned takes no room: the one of
    # high gradient grows
    params, opt, state = setup([0.005, 0.005], [0.5] * 2, s)
    data = sized([1, 20])
    data["means2d"].grad = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    counts = s.step_post_backward(params, opt, state, 3100, data, 0)
    assert counts == {"cloned": 1, "split": 0, "pruned": 1, "reset": 0}


def test_a_pause_after_each_reset_refines_nothing_and_keeps_the_sums() -> None:
    s = DefaultStrategy(pause_refine_after_reset=200, opacity_reset=True)
    params, opt, state = setup([0.005, 0.005], [0.5, 0.5], s)
    zero = info([(0.0, 0.0)] * 2, [True] * 2)
    counts = s.step_post_backward(params, opt, state, 3000, zero, 0)
    assert counts == {"cloned": 0, "split": 0, "pruned": 0, "reset": 1}
    # both at 0.01 after the reset; the second falls below prune_opa during the pause
    params["opacities"].data[1] = math.log(0.004 / 0.996)
    counts = s.step_post_backward(params, opt, state, 3100, zero, 0)
    assert counts["pruned"] == 0 and state["count"].tolist() == [2.0, 2.0]
    assert not s.densifies_at(3100) and s.gates_at(3100) and s.densifies_at(3200)
    counts = s.step_post_backward(params, opt, state, 3200, zero, 0)
    assert counts["pruned"] == 1 and state["count"].tolist() == [0.0]
    # Without resets there is nothing to pause after.
    kept = DefaultStrategy(pause_refine_after_reset=200, opacity_reset=False)
    assert kept.refines_at(3000) and kept.refines_at(3100)
    with pytest.raises(ValueError, match="pause_refine_after_reset"):
        DefaultStrategy(pause_refine_after_reset=3000)
