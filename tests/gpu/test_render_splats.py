"""``gsnb.render_splats`` on the CUDA backend (exp, sigmoid and the sh0/shN split inside the
kernels) against the reference backend run in float64 on the same stored parameters.

Error measure as in test_cuda_raster.py: relative L2 error over a whole output or gradient.
"""

from __future__ import annotations

import pytest
import torch

import gsnb
from tests.gpu.test_cuda_raster import OUTPUT_TOL, check, rel_err, scene, weighted_loss

STORED = ("means", "quats", "scales", "opacities", "sh0", "shN")


def stored(g: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Render-ready Gaussians as 3DGS stores them: log-scales, logits, sh0 and shN."""
    colors = g["colors"]
    return {
        "means": g["means"],
        "quats": g["quats"],
        "scales": g["scales"].log(),
        "opacities": torch.logit(g["opacities"].clamp(1e-4, 1 - 1e-4)),
        "sh0": colors[:, :1].contiguous(),
        "shN": colors[:, 1:].contiguous(),
    }


def run(splats, viewmats, Ks, width, height, backend, dtype, weights, **kw):
    params = {k: v.to(dtype).clone().requires_grad_(True) for k, v in splats.items()}
    if kw.get("backgrounds") is not None:
        kw = kw | {"backgrounds": kw["backgrounds"].to(dtype)}
    out = gsnb.render_splats(
        params, viewmats.to(dtype), Ks.to(dtype), width, height, backend=backend, **kw
    )
    weighted_loss(out, weights, dtype).backward()
    grads = {k: params[k].grad for k in STORED}
    grads["means2d"] = out.meta.means2d.grad
    return out, grads


def compare(splats, viewmats, Ks, width, height, **kw):
    gen = torch.Generator(device="cuda").manual_seed(2)
    c = viewmats.shape[0]
    weights = tuple(
        torch.rand((c, height, width, ch), generator=gen, device="cuda") for ch in (3, 1, 1)
    )
    out_c, grads_c = run(splats, viewmats, Ks, width, height, "cuda", torch.float32, weights, **kw)
    out_r, grads_r = run(
        splats, viewmats, Ks, width, height, "reference", torch.float64, weights, **kw
    )
    assert out_c.meta.backend == "cuda" and out_r.meta.backend == "reference"
    errors = {"rgb": rel_err(out_c.rgb, out_r.rgb), "alpha": rel_err(out_c.alpha, out_r.alpha)}
    if out_r.depth is not None:
        errors["depth"] = rel_err(out_c.depth * out_r.alpha, out_r.depth * out_r.alpha)
    for k, ref in grads_r.items():
        if ref is not None and ref.numel():
            errors[f"grad_{k}"] = rel_err(grads_c[k], ref)
        assert grads_c[k] is not None and grads_c[k].shape == ref.shape, k
    if kw.get("absgrad"):
        errors["absgrad"] = rel_err(out_c.meta.absgrad, out_r.meta.absgrad)
    errors["radii_mismatch"] = float((out_c.meta.radii > 0).ne(out_r.meta.radii > 0).float().mean())
    return errors, out_c


@pytest.mark.parametrize(
    ("n", "width", "height", "cams", "sh_degree", "used"),
    [
        (1, 64, 48, 1, 0, None),  # shN [N, 0, 3]
        (300, 97, 61, 1, 1, None),
        (3000, 129, 77, 2, 3, 1),  # several cameras: atomics; degree 1 of 3 stored
        (20000, 256, 173, 3, 3, None),
        (50000, 321, 241, 1, 3, 2),
    ],
)
def test_stored_parameters_match_reference(cuda_ext, n, width, height, cams, sh_degree, used):
    g, viewmats, Ks = scene(n, width, height, cams, sh_degree=sh_degree, seed=n + 1)
    errors, _ = compare(stored(g), viewmats, Ks, width, height, sh_degree=used)
    check(errors)


def test_training_call_matches_reference(cuda_ext):
    # The trainer's call: one camera, a background, no depth channel, absgrad.
    g, viewmats, Ks = scene(4000, 150, 101, 1, seed=31)
    bg = torch.tensor([0.3, 0.6, 0.1], device="cuda")
    errors, out = compare(
        stored(g), viewmats, Ks, 150, 101, backgrounds=bg, with_depth=False, absgrad=True
    )
    check(errors)
    assert out.depth is None and float(out.meta.absgrad.sum()) > 0


def test_equals_render_of_activated_parameters(cuda_ext):
    g, viewmats, Ks = scene(5000, 140, 90, 2, seed=8)
    s = stored(g)
    a = gsnb.render(
        s["means"], s["quats"], s["scales"].exp(), torch.sigmoid(s["opacities"]),
        torch.cat([s["sh0"], s["shN"]], 1), viewmats, Ks, 140, 90, backend="cuda",
    )  # fmt: skip
    b = gsnb.render_splats(s, viewmats, Ks, 140, 90, backend="cuda")
    # The kernels' exp and sigmoid round like torch's to within float32 ulps.
    assert rel_err(b.rgb, a.rgb) < OUTPUT_TOL and rel_err(b.alpha, a.alpha) < OUTPUT_TOL
    assert torch.equal(a.meta.radii > 0, b.meta.radii > 0)


def test_parameter_dict_and_no_gaussians(cuda_ext):
    g, viewmats, Ks = scene(0, 40, 30, 2)
    params = torch.nn.ParameterDict({k: torch.nn.Parameter(v) for k, v in stored(g).items()})
    out = gsnb.render_splats(params, viewmats, Ks, 40, 30, backend="cuda")
    assert out.rgb.shape == (2, 30, 40, 3) and float(out.alpha.detach().abs().sum()) == 0
    out.rgb.sum().backward()
    assert params["shN"].grad is not None and params["shN"].grad.shape == (0, 15, 3)
