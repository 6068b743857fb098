"""Binning into buffers of a chosen size (``bin_splats_within``, the fused step's
``capacity``) and the trainer's steps that run out of that room (gsnb.train.bins).

The unused entries of a larger buffer sort first and belong to no tile, so every tile's
list is the one exact binning gives: renders agree bit for bit, gradients to the order of
the float atomics.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import gsnb
from gsnb import kernels
from gsnb.train import fused_step
from gsnb.train.bins import IntersectionBudget
from tests.gpu.test_cuda_raster import rel_err, scene
from tests.gpu.test_fused_step import HEIGHT, WIDTH, inputs
from tests.gpu.test_read_behind import assert_same_run, make
from tests.gpu.test_render_splats import STORED, stored

GRAD_TOL = 1e-4


def with_room(monkeypatch, extra: int, seen: list[tuple[int, int]]) -> None:
    """Make the renderer bin into buffers ``extra`` entries larger than the count."""
    real = kernels.bin_splats

    def padded(**kw):
        offsets, flat_ids = real(**kw)
        m = flat_ids.numel()
        offsets2, flat_ids2, count = kernels.bin_splats_within(**kw, capacity=m + extra)
        seen.append((int(count), flat_ids2.numel()))
        # Each tile's list is the exact binning's, shifted past the unused entries.
        assert torch.equal(offsets2, offsets + extra)
        assert torch.equal(flat_ids2[extra:], flat_ids)
        return offsets2, flat_ids2

    monkeypatch.setattr(kernels, "bin_splats", padded)


def render_and_grads(splats, viewmats, Ks, width, height):
    params = {k: v.clone().requires_grad_(True) for k, v in splats.items()}
    out = gsnb.render_splats(params, viewmats, Ks, width, height, sh_degree=3, check_values=False)
    weights = torch.linspace(0.1, 1.0, out.rgb.numel(), device="cuda").reshape(out.rgb.shape)
    ((out.rgb * weights).sum() + out.alpha.sum()).backward()
    return out.rgb.detach(), {k: params[k].grad for k in STORED}


@pytest.mark.parametrize("segments", [0, -1, 256])
def test_larger_buffers_render_the_same(cuda_ext, monkeypatch, segments):
    g, viewmats, Ks = scene(4000, 131, 77, 2, seed=3)
    splats = stored(g)
    before = kernels.set_rasterize_segments(length=segments)
    try:
        rgb, grads = render_and_grads(splats, viewmats, Ks, 131, 77)
        seen: list[tuple[int, int]] = []
        with_room(monkeypatch, 1000, seen)
        rgb2, grads2 = render_and_grads(splats, viewmats, Ks, 131, 77)
    finally:
        kernels.set_rasterize_segments(length=before)
    assert seen and all(size == count + 1000 and count > 0 for count, size in seen)
    assert torch.equal(rgb, rgb2)
    errors = {k: rel_err(grads2[k], grads[k]) for k in STORED if grads[k].numel()}
    assert max(errors.values()) < GRAD_TOL, errors


def test_a_count_above_the_capacity_is_reported(cuda_ext, monkeypatch):
    g, viewmats, Ks = scene(3000, 64, 48, 1, seed=1)
    inputs_, out = binning_inputs(monkeypatch, g, viewmats, Ks, 64, 48)
    assert out.rgb.isfinite().all()
    _, exact, count = kernels.bin_splats_within(**inputs_, capacity=0)
    m = exact.numel()
    assert int(count) == m > 100
    offsets, flat_ids, count = kernels.bin_splats_within(**inputs_, capacity=m // 2)
    assert int(count) == m and flat_ids.numel() == m // 2
    assert int(offsets.max()) <= m // 2  # the lists stay inside the buffer


def binning_inputs(monkeypatch, g, viewmats, Ks, width, height):
    """bin_splats' arguments for these Gaussians, from the renderer's own projection, and
    the render."""
    captured = {}
    real = kernels.bin_splats

    def grab(**kw):
        captured.update(kw)
        return real(**kw)

    with monkeypatch.context() as patch:
        patch.setattr(kernels, "bin_splats", grab)
        out = gsnb.render_splats(
            stored(g), viewmats, Ks, width, height, sh_degree=3, check_values=False
        )
    return captured, out


@pytest.mark.parametrize("extra", [0, 1, 5000])
def test_the_fused_step_with_room_matches_it_without(cuda_ext, extra):
    splats, viewmats, Ks, target = inputs(3, seed=2)
    bg = torch.tensor([0.2, 0.4, 0.6], device="cuda")
    runs = []
    for capacity in (0, None):
        params = {k: v.clone().requires_grad_(True) for k, v in splats.items()}
        if capacity is None:
            capacity = int(runs[0][0].intersections) + extra
        got = fused_step.forward_backward(
            params, viewmats[0], Ks[0], WIDTH, HEIGHT, 3, bg, target, 0.2, capacity=capacity
        )
        runs.append((got, {k: params[k].grad for k in STORED}))
    (a, grads_a), (b, grads_b) = runs
    assert int(a.intersections) == int(b.intersections) > 0
    assert torch.equal(a.stats, b.stats)
    errors = {k: rel_err(grads_b[k], grads_a[k]) for k in STORED}
    assert max(errors.values()) < GRAD_TOL, errors


def test_a_fused_step_out_of_room_has_a_nan_loss(cuda_ext):
    splats, viewmats, Ks, target = inputs(3, seed=2)
    params = {k: v.clone().requires_grad_(True) for k, v in splats.items()}
    exact = fused_step.forward_backward(params, viewmats[0], Ks[0], WIDTH, HEIGHT, 3, None,
                                        target, 0.2)  # fmt: skip
    count = int(exact.intersections)
    short = fused_step.forward_backward(
        params, viewmats[0], Ks[0], WIDTH, HEIGHT, 3, None, target, 0.2, capacity=count - 1
    )
    assert int(short.intersections) == count
    assert math.isnan(float(short.stats[0])) and not math.isnan(float(exact.stats[0]))


def test_steps_out_of_room_run_again(cuda_ext, tmp_path):
    """Every step after a view's first is given half the room it needs: each runs out,
    is gated off and runs again waiting for its count; the run is the one with room."""
    roomy, short = make(tmp_path / "a"), make(tmp_path / "b")
    short._bins = IntersectionBudget(margin=0.5, slack=0)
    roomy.run(30)
    short.run(30)
    assert roomy.rebinned_steps == 0
    assert short.rebinned_steps > 20  # four views: all but their first steps
    assert_same_run(roomy, short, until=10)
    assert [m.step for m in short.history] == list(range(1, 31))
    assert not any(m.skipped for m in short.history) and short.skipped_steps == 0
    assert all(math.isfinite(m.loss) for m in short.history)
    # Step by step (each step read at once) the same.
    at_once = make(tmp_path / "c")
    at_once._bins = IntersectionBudget(margin=0.5, slack=0)
    for _ in range(12):
        at_once.step()
    assert at_once.rebinned_steps >= 8
    for x, y in itertools.islice(zip(at_once.history, roomy.history, strict=False), 10):
        assert x.step == y.step and x.loss == pytest.approx(y.loss, rel=1e-3)


def test_the_budget_grows_with_the_gaussians(cuda_ext, tmp_path):
    trainer = make(tmp_path / "a")
    trainer.run(12)
    views = trainer._bins._seen
    assert views and all(count > 0 for count, _ in views.values())
    view = next(iter(views))
    count, then = views[view]
    assert trainer._bins.capacity(view, then) >= count
    assert trainer._bins.capacity(view, 2 * then) > trainer._bins.capacity(view, then)
