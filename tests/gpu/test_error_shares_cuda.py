"""Error shares on the CUDA backend and from the fused step against the float64 reference,
and error densification in a GPU run."""

from __future__ import annotations

import pytest
import torch

from gsnb.raster.api import render_splats
from gsnb.train import TrainConfig, Trainer, fused_step
from gsnb.train.error_shares import error_shares, pixel_error
from gsnb.train.filter3d import apply_filter3d
from gsnb.train.pose_refine import MovedGaussians
from gsnb.train.strategy import DefaultStrategy
from tests.gpu.test_cuda_raster import LAYOUTS, rel_err, scene, use_layout
from tests.gpu.test_fused_step import HEIGHT, STORED, WIDTH, inputs, variances_for
from tests.train.conftest import build_scene


def stored(n: int, seed: int) -> dict[str, torch.Tensor]:
    g, _, _ = scene(n, WIDTH, HEIGHT, 1, seed=seed)
    return {
        "means": g["means"], "quats": g["quats"], "scales": g["scales"].log(),
        "opacities": torch.logit(g["opacities"]), "sh0": g["colors"][:, :1],
        "shN": g["colors"][:, 1:],
    }  # fmt: skip


@pytest.mark.parametrize("mode", ["classic", "antialiased"])
def test_cuda_shares_match_the_float64_reference(cuda_ext, mode) -> None:
    splats = stored(3000, seed=4)
    _, viewmats, Ks = scene(1, WIDTH, HEIGHT, 3)
    gen = torch.Generator("cuda").manual_seed(2)
    error = torch.rand(HEIGHT, WIDTH, device="cuda", generator=gen)
    got = {}
    for backend, dtype in (("cuda", torch.float32), ("reference", torch.float64)):

        def draw(g: MovedGaussians, backend=backend, dtype=dtype):
            return render_splats(
                g.splats, viewmats[1:2].to(dtype), Ks[1:2].to(dtype), WIDTH, HEIGHT,
                sh_degree=0, backgrounds=torch.zeros(3, device="cuda", dtype=dtype),
                backend=backend, rasterize_mode=mode,
            )  # fmt: skip

        cast = {k: v.to(dtype) for k, v in splats.items()}
        got[backend] = error_shares(cast, draw, error.to(dtype))
    assert got["reference"].count_nonzero() > 100
    err = rel_err(got["cuda"], got["reference"])
    assert err < 1e-3, f"relative L2 error {err:.2e}"  # test_cuda_raster's gradient tolerance


@pytest.mark.parametrize(
    ("mode", "with_filter", "photo_bytes", "background"),
    [
        ("classic", False, False, None),
        ("classic", False, True, (0.3, 0.6, 0.9)),
        ("antialiased", False, False, None),
        ("antialiased", True, True, (1.0, 1.0, 1.0)),
    ],
)
def test_fused_step_gathers_the_shares_of_its_own_render(
    cuda_ext, mode, with_filter, photo_bytes, background
):
    splats, viewmats, Ks, target = inputs(3, seed=5)
    if photo_bytes:
        target = (target * 255).round().to(torch.uint8)
    variances = variances_for(splats["scales"].exp(), seed=5) if with_filter else None
    bg = None if background is None else torch.tensor(background, device="cuda")
    steps = {}
    for shares in (False, True):
        params = {k: v.clone().requires_grad_(True) for k, v in splats.items()}
        got = fused_step.forward_backward(
            params, viewmats[0], Ks[0], WIDTH, HEIGHT, 3, bg, target, 0.2,
            antialiased=mode == "antialiased", filter3d=variances, error_shares=shares,
        )  # fmt: skip
        steps[shares] = got, {k: params[k].grad for k in STORED}
    (plain, grads_plain), (fused, grads) = steps[False], steps[True]
    assert plain.error is None and fused.error.shape == (3000,)
    # The fourth channel changes nothing else.
    assert rel_err(fused.stats, plain.stats) < 1e-5
    errors = {k: rel_err(grads[k], grads_plain[k]) for k in STORED if grads[k].numel()}
    errors["means2d"] = rel_err(fused.means2d.grad, plain.means2d.grad)
    assert max(errors.values()) < 1e-4, errors  # one value more in the warp sums: rounding
    # The shares: the float64 reference's, of the same error map.
    expected = reference_shares(splats, viewmats, Ks, target, mode, bg, variances)
    assert expected.count_nonzero() > 100
    err = rel_err(fused.error, expected)
    print(f"{mode} filter={with_filter}: relative L2 error {err:.1e}")
    assert err < 1e-3, err


def reference_shares(splats, viewmats, Ks, target, mode, bg, variances) -> torch.Tensor:
    """The float64 reference's error shares of the fused step's own render of camera 0."""
    photo = target.double() / 255 if target.dtype == torch.uint8 else target.double()
    ref = {k: v.double() for k, v in splats.items()}
    scales, opacities = ref["scales"].exp(), torch.sigmoid(ref["opacities"])
    if variances is not None:
        scales, opacities = apply_filter3d(scales, opacities, variances.double())
    ref["scales"], ref["opacities"] = scales.log(), torch.logit(opacities)
    cam = viewmats[:1].double(), Ks[:1].double()
    rgb = render_splats(
        ref, *cam, WIDTH, HEIGHT, sh_degree=3, rasterize_mode=mode, backend="reference",
        backgrounds=None if bg is None else bg.double(),
    ).rgb[0]  # fmt: skip

    def draw(g: MovedGaussians):
        return render_splats(
            g.splats, *cam, WIDTH, HEIGHT, sh_degree=0, rasterize_mode=mode, backend="reference",
            backgrounds=torch.zeros(3, device="cuda", dtype=torch.float64),
        )  # fmt: skip

    return error_shares(ref, draw, pixel_error(rgb, photo))


@pytest.mark.parametrize(
    "layout",
    [
        "two_rows", "one_row_unsegmented", "two_rows_segments_256", "two_rows_patch_16",
        "one_row_segments_256_recorded",
    ],
)  # fmt: skip
@pytest.mark.parametrize("absgrad", [False, True])
def test_fused_step_shares_in_other_layouts_and_with_absgrad(cuda_ext, layout, absgrad):
    """The backward's other layouts (two pixel rows a thread, no segments) and AbsGS's sums,
    whose warp sums carry one value more with the shares: the same shares, and nothing else
    changed."""
    splats, viewmats, Ks, target = inputs(3, seed=6)
    previous = use_layout(*LAYOUTS[layout])
    try:
        steps = {}
        for shares in (False, True):
            params = {k: v.clone().requires_grad_(True) for k, v in splats.items()}
            got = fused_step.forward_backward(
                params, viewmats[0], Ks[0], WIDTH, HEIGHT, 3, None, target, 0.2,
                absgrad=absgrad, error_shares=shares,
            )  # fmt: skip
            steps[shares] = got, {k: params[k].grad for k in STORED}
    finally:
        use_layout(*previous)
    (plain, grads_plain), (fused, grads) = steps[False], steps[True]
    assert rel_err(fused.stats, plain.stats) < 1e-5
    errors = {k: rel_err(grads[k], grads_plain[k]) for k in STORED if grads[k].numel()}
    errors["means2d"] = rel_err(fused.means2d.grad, plain.means2d.grad)
    if absgrad:
        errors["absgrad"] = rel_err(fused.absgrad, plain.absgrad)
    else:
        assert fused.absgrad is None
    assert max(errors.values()) < 1e-4, errors
    expected = reference_shares(splats, viewmats, Ks, target, "classic", None, None)
    err = rel_err(fused.error, expected)
    print(f"{layout} absgrad={absgrad}: relative L2 error {err:.1e}")
    assert err < 1e-3, err


def test_error_densify_trains_on_the_fused_step(cuda_ext, tmp_path, monkeypatch):
    data = build_scene(tmp_path / "scene", size=48, views=4, gaussians=60, points=200)
    asked = []
    real = fused_step.forward_backward

    def spy(*args, **kwargs):
        asked.append(kwargs["error_shares"])
        return real(*args, **kwargs)

    monkeypatch.setattr(fused_step, "forward_backward", spy)
    strategy = DefaultStrategy(
        error_densify=True, grow_error=1e-4, refine_start_iter=2, refine_every=4,
        refine_stop_iter=10,
    )  # fmt: skip
    trainer = Trainer(data, TrainConfig(steps=16, device="cuda"), strategy=strategy)
    trainer.run(10)
    assert asked and all(asked)  # every step that refines gathers the shares
    grown = [m.events for m in trainer.history if m.events.get("cloned") or m.events.get("split")]
    assert grown
    assert trainer.strategy_state["error"].shape == (trainer.num_gaussians,)
    del asked[:]
    trainer.run()
    assert asked and not any(asked)  # refining is over
