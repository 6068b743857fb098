"""gsnb.train.fused_step: the one-call training step against the autograd path it replaces,
and against the float64 reference backend.

The autograd path is ``render_splats`` on the CUDA backend, ``photometric_terms`` and
``loss.backward()``: the same kernels launched from Python. Both sum gradients with float
atomics, so they agree to rounding, not bit for bit (relative L2 error, as
test_cuda_raster.py measures it).
"""

from __future__ import annotations

import doctest
import math

import pytest
import torch

import gsnb
from gsnb.data.dataset import bytes_to_float
from gsnb.train import TrainConfig, Trainer, fused_step
from gsnb.train.filter3d import apply_filter3d
from gsnb.train.health import TrainingHealthWarning
from gsnb.train.losses import photometric_terms
from gsnb.train.rendering import BackendRenderer
from gsnb.train.strategy import default
from tests.gpu.test_cuda_raster import rel_err, scene
from tests.gpu.test_render_splats import STORED, stored
from tests.train.conftest import build_scene

GRAD_TOL = 1e-4  # the same kernels in the same order: rounding of the atomics only
REFERENCE_TOL = 1e-3  # against float64 (test_cuda_raster.py's gradient tolerance)
WIDTH, HEIGHT = 93, 70  # tiles cut at both edges


def inputs(sh_degree: int, seed: int = 0):
    g, viewmats, Ks = scene(3000, WIDTH, HEIGHT, 1, sh_degree=sh_degree, seed=seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    target = torch.rand((HEIGHT, WIDTH, 3), generator=gen, device="cuda")
    return stored(g), viewmats, Ks, target


def autograd_step(splats, viewmat, K, degree, background, target, lam, absgrad, dtype, backend):
    params = {k: v.to(dtype).clone().requires_grad_(True) for k, v in splats.items()}
    bg = None if background is None else background.to(dtype)
    out = gsnb.render_splats(
        params, viewmat[None].to(dtype), K[None].to(dtype), WIDTH, HEIGHT, sh_degree=degree,
        backgrounds=bg, absgrad=absgrad, check_values=False, with_depth=False, backend=backend,
    )  # fmt: skip
    return backward_of(out, params, target.to(dtype), lam)


def backward_of(out, params, target, lam):
    """The photometric loss of ``out`` against ``target`` and its backward pass: ``(stats [4],
    the gradients of params and of the projected centres, out)``."""
    loss, l1, ssim, mse = photometric_terms(out.rgb[0], target, lam)
    loss.backward()
    grads = {k: params[k].grad for k in STORED}
    grads["means2d"] = out.meta.means2d.grad
    stats = torch.stack([loss.detach(), l1.detach(), ssim.detach(), mse.detach()])
    return stats, grads, out


@pytest.mark.parametrize(
    ("sh_degree", "degree", "absgrad", "background"),
    [(3, 3, False, None), (3, 1, True, (0.2, 0.5, 0.9)), (0, 0, False, (1.0, 1.0, 1.0))],
)
def test_fused_step_matches_autograd(cuda_ext, sh_degree, degree, absgrad, background):
    splats, viewmats, Ks, target = inputs(sh_degree)
    bg = None if background is None else torch.tensor(background, device="cuda")
    stats_a, grads_a, out_a = autograd_step(
        splats, viewmats[0], Ks[0], degree, bg, target, 0.2, absgrad, torch.float32, "cuda"
    )
    params = {k: v.clone().requires_grad_(True) for k, v in splats.items()}
    got = fused_step.forward_backward(
        params, viewmats[0], Ks[0], WIDTH, HEIGHT, degree, bg, target, 0.2, absgrad
    )
    assert rel_err(got.stats, stats_a) < 1e-5
    assert torch.equal(got.radii, out_a.meta.radii)
    assert (got.radii > 0).any()
    errors = {k: rel_err(params[k].grad, grads_a[k]) for k in STORED if grads_a[k].numel()}
    errors["means2d"] = rel_err(got.means2d.grad, grads_a["means2d"])
    if absgrad:
        errors["absgrad"] = rel_err(got.absgrad, out_a.meta.absgrad)
    else:
        assert got.absgrad is None
    print({k: f"{v:.1e}" for k, v in errors.items()})
    assert max(errors.values()) < GRAD_TOL, errors


def test_fused_step_reads_the_photos_bytes_as_their_floats(cuda_ext):
    splats, viewmats, Ks, target = inputs(3, seed=2)
    photo = (target * 255).round().to(torch.uint8)
    outs = []
    for image in (photo, bytes_to_float(photo)):
        params = {k: v.clone().requires_grad_(True) for k, v in splats.items()}
        got = fused_step.forward_backward(
            params, viewmats[0], Ks[0], WIDTH, HEIGHT, 3, None, image, 0.2
        )
        outs.append((got, params))
    (a, pa), (b, pb) = outs
    assert torch.equal(a.stats, b.stats)  # the forward pass sums in a fixed order
    errors = {k: rel_err(pa[k].grad, pb[k].grad) for k in STORED if pb[k].grad.numel()}
    assert max(errors.values()) < GRAD_TOL, errors


def test_fused_step_matches_the_float64_reference(cuda_ext):
    splats, viewmats, Ks, target = inputs(3, seed=4)
    bg = torch.tensor([0.3, 0.3, 0.3], device="cuda")
    stats_r, grads_r, _ = autograd_step(
        splats, viewmats[0], Ks[0], 3, bg, target, 0.2, False, torch.float64, "reference"
    )
    params = {k: v.clone().requires_grad_(True) for k, v in splats.items()}
    got = fused_step.forward_backward(params, viewmats[0], Ks[0], WIDTH, HEIGHT, 3, bg, target, 0.2)
    assert rel_err(got.stats, stats_r) < 1e-4
    errors = {k: rel_err(params[k].grad, grads_r[k]) for k in STORED}
    errors["means2d"] = rel_err(got.means2d.grad, grads_r["means2d"])
    print({k: f"{v:.1e}" for k, v in errors.items()})
    assert max(errors.values()) < REFERENCE_TOL, errors


def variances_for(scales: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """3D filter variances ``[N]`` of the size of the Gaussians' squared (linear) ``scales
    [N, 3]`` (0.1x to 2x), a quarter of them 0 (no camera sees those)."""
    gen = torch.Generator(device="cuda").manual_seed(seed + 7)
    n = scales.shape[0]
    variances = scales.mean(-1) ** 2 * (0.1 + 1.9 * torch.rand(n, generator=gen, device="cuda"))
    return torch.where(torch.rand(n, generator=gen, device="cuda") < 0.25, 0.0, variances)


def filtered_autograd_step(
    splats, viewmat, K, degree, background, target, variances, mode, dtype, backend
):
    """The trainer's autograd path with the 3D filter: activated parameters through
    ``apply_filter3d``, then ``gsnb.render`` in ``mode``, the loss and its backward."""
    params = {k: v.to(dtype).clone().requires_grad_(True) for k, v in splats.items()}
    scales, opacities = apply_filter3d(
        params["scales"].exp(), torch.sigmoid(params["opacities"]), variances.to(dtype)
    )
    colors = torch.cat([params["sh0"], params["shN"]], dim=1)
    bg = None if background is None else background.to(dtype)
    out = gsnb.render(
        params["means"], params["quats"], scales, opacities, colors, viewmat[None].to(dtype),
        K[None].to(dtype), WIDTH, HEIGHT, sh_degree=degree, backgrounds=bg, backend=backend,
        with_depth=False, check_values=False, rasterize_mode=mode,
    )  # fmt: skip
    return backward_of(out, params, target.to(dtype), 0.2)


@pytest.mark.parametrize(
    ("mode", "with_filter"),
    [("antialiased", False), ("classic", True), ("antialiased", True)],
)
def test_fused_step_in_either_mode_and_through_the_3d_filter(cuda_ext, mode, with_filter):
    # Against the float64 reference: the filter's widening and opacity factor computed in
    # the projection kernels, their gradients folded into the log-scales' and logits'.
    splats, viewmats, Ks, target = inputs(3, seed=2)
    bg = torch.tensor([0.1, 0.4, 0.7], device="cuda")
    variances = (
        variances_for(splats["scales"].exp())
        if with_filter
        else torch.zeros_like(splats["opacities"])
    )
    stats_r, grads_r, _ = filtered_autograd_step(
        splats, viewmats[0], Ks[0], 3, bg, target, variances, mode, torch.float64, "reference"
    )
    params = {k: v.clone().requires_grad_(True) for k, v in splats.items()}
    got = fused_step.forward_backward(
        params, viewmats[0], Ks[0], WIDTH, HEIGHT, 3, bg, target, 0.2,
        antialiased=mode == "antialiased", filter3d=variances if with_filter else None,
    )  # fmt: skip
    assert rel_err(got.stats, stats_r) < 1e-4
    assert (got.radii > 0).sum() > 100
    errors = {k: rel_err(params[k].grad, grads_r[k]) for k in STORED}
    errors["means2d"] = rel_err(got.means2d.grad, grads_r["means2d"])
    print({k: f"{v:.1e}" for k, v in errors.items()})
    assert max(errors.values()) < REFERENCE_TOL, errors


def test_the_3d_filter_changes_the_fused_step(cuda_ext):
    # The filter is applied, not ignored: its step differs from the unfiltered one, and
    # zero variances give the unfiltered step (through the per-camera opacities' path).
    splats, viewmats, Ks, target = inputs(1, seed=3)
    results = {}
    for name, variances in [
        ("none", None),
        ("zero", torch.zeros_like(splats["opacities"])),
        ("filter", variances_for(splats["scales"].exp(), seed=3)),
    ]:
        params = {k: v.clone().requires_grad_(True) for k, v in splats.items()}
        got = fused_step.forward_backward(
            params, viewmats[0], Ks[0], WIDTH, HEIGHT, 1, None, target, 0.2, filter3d=variances
        )
        results[name] = (got.stats, params["scales"].grad, params["opacities"].grad)
    for a, b in zip(results["none"], results["zero"], strict=True):
        assert rel_err(b, a) < GRAD_TOL
    assert rel_err(results["filter"][0], results["none"][0]) > 1e-3
    assert rel_err(results["filter"][1], results["none"][1]) > 1e-2


def test_applies_only_where_the_kernels_take_the_tensors(cuda_ext):
    splats, _, _, target = inputs(1)
    assert fused_step.applies(splats, target)
    photo = (target * 255).round().to(torch.uint8)
    assert fused_step.applies(splats, photo)
    assert not fused_step.applies(splats, photo.cpu())
    assert not fused_step.applies(splats, photo.transpose(0, 1))  # not contiguous
    assert not fused_step.applies(splats, target[:8])  # smaller than the SSIM window
    assert not fused_step.applies(splats, target.double())
    assert not fused_step.applies({k: v[:0] for k, v in splats.items()}, target)
    assert not fused_step.applies({k: v.cpu() for k, v in splats.items()}, target)


def train(data, steps: int, fused: bool, strategy=None, **config) -> tuple[Trainer, int]:
    calls, targets = 0, set()
    real = fused_step.forward_backward

    def counted(*args, **kwargs):
        nonlocal calls
        calls += 1
        targets.add(args[7].dtype)
        return real(*args, **kwargs)

    cfg = TrainConfig(**({"steps": steps, "device": "cuda", "backend": "cuda", "seed": 5} | config))
    # Densification off: a split or clone decided at a threshold could round either way.
    strategy = strategy or default.DefaultStrategy(refine_start_iter=1000)
    trainer = Trainer(data, cfg, strategy=strategy)
    trainer.fused_step = fused
    fused_step.forward_backward = counted
    try:
        trainer.run(steps)
    finally:
        fused_step.forward_backward = real
    torch.cuda.synchronize()
    assert targets <= {torch.uint8}  # the photo's bytes, no float copy of them
    return trainer, calls


@pytest.mark.parametrize(
    ("strategy", "config"),
    [
        ("default", {}),
        ("mcmc", {}),
        ("default", {"filter3d": True}),
        ("default", {"rasterize_mode": "antialiased", "filter3d": True}),
    ],
)
def test_trainer_takes_the_fused_step_and_trains_as_autograd_does(
    cuda_ext, tmp_path, strategy, config
):
    data = build_scene(tmp_path / "scene", size=48, views=4, gaussians=60, points=200)

    # MCMC adds its opacity and scale regularisers to the loss: their gradients are added
    # to the fused step's (its first relocation, after step 500, is past these 8 steps).
    def pick():
        return default.DefaultStrategy(refine_start_iter=1000) if strategy == "default" else "mcmc"

    fused, calls = train(data, 8, True, pick(), **config)
    plain, plain_calls = train(data, 8, False, pick(), **config)
    assert calls == 8 and plain_calls == 0
    for a, b in zip(fused.history, plain.history, strict=True):
        assert a.loss == pytest.approx(b.loss, rel=1e-3), (a.step, a.loss, b.loss)
        assert a.psnr == pytest.approx(b.psnr, rel=1e-3)
        assert a.grad_norm == pytest.approx(b.grad_norm, rel=1e-2)
    view = fused.dataset.views[0]
    rgb_f = fused.render_view(view).rgb
    rgb_p = plain.render_view(view).rgb
    assert rel_err(rgb_f, rgb_p) < 1e-2


@pytest.mark.parametrize(
    "config",
    [
        {"exposure": True},
        {"pose_refine": True},
        {"backend": "reference"},
        {"batch_size": 2},
    ],
)
def test_runs_that_need_autograd_keep_its_path(cuda_ext, tmp_path, config):
    data = build_scene(tmp_path / "scene", size=48, views=4, gaussians=60, points=200)
    trainer, calls = train(data, 3, True, **config)
    assert calls == 0 and len(trainer.history) == 3


def test_a_renderer_of_the_callers_own_keeps_the_autograd_path(cuda_ext, tmp_path):
    data = build_scene(tmp_path / "scene", size=48, views=4, gaussians=60, points=200)
    cfg = TrainConfig(steps=3, device="cuda", backend="cuda", seed=5)
    trainer = Trainer(data, cfg, renderer=BackendRenderer("cuda"))
    real, calls = fused_step.forward_backward, []
    fused_step.forward_backward = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        trainer.run(3)
    finally:
        fused_step.forward_backward = real
    assert not calls and len(trainer.history) == 3


def test_docstring_examples(cuda_ext):
    result = doctest.testmod(fused_step)
    assert result.attempted > 0 and result.failed == 0


def test_a_non_finite_step_is_skipped_on_the_device(cuda_ext, tmp_path, monkeypatch):
    # Adam launches before the step reads its numbers back; its gate skips the update.
    data = build_scene(tmp_path / "scene", size=48, views=4, gaussians=60, points=200)
    trainer = Trainer(data, TrainConfig(steps=10, device="cuda", backend="cuda", seed=5))
    trainer.run(2)
    assert trainer.optimizer._fused()
    real = fused_step.forward_backward

    def poisoned(splats, *args, **kwargs):
        out = real(splats, *args, **kwargs)
        splats["means"].grad[0, 0] = math.nan
        return out

    before = {k: v.detach().clone() for k, v in trainer.model.splats.items()}
    state = trainer.optimizer.state
    moments = {k: state[p]["exp_avg"].clone() for k, p in trainer.model.splats.items()}
    counts = {k: float(state[p]["step"]) for k, p in trainer.model.splats.items()}
    monkeypatch.setattr(fused_step, "forward_backward", poisoned)
    with pytest.warns(TrainingHealthWarning, match="gradient is NaN"):
        m = trainer.step()
    assert m.skipped and trainer.skipped_steps == 1
    for k, p in trainer.model.splats.items():
        assert torch.equal(p, before[k]), k
        assert torch.equal(state[p]["exp_avg"], moments[k]), k
        assert float(state[p]["step"]) == counts[k], k
    monkeypatch.setattr(fused_step, "forward_backward", real)
    m = trainer.step()
    assert not m.skipped and math.isfinite(m.loss)
    assert not torch.equal(trainer.model.splats["means"], before["means"])
