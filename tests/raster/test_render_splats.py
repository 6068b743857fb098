"""``gsnb.render_splats``: stored parameters (log-scales, logits, sh0/shN), reference backend."""

from __future__ import annotations

import pytest
import torch

import gsnb
from gsnb.model import GaussianModel
from gsnb.raster.scenes import orbit_cameras, random_gaussians


def stored(n: int = 200, sh_degree: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    g = random_gaussians(n, sh_degree=sh_degree, seed=seed, dtype=torch.float64)
    return {
        "means": g["means"],
        "quats": g["quats"],
        "scales": g["scales"].log(),
        "opacities": torch.logit(g["opacities"]),
        "sh0": g["colors"][:, :1].clone(),
        "shN": g["colors"][:, 1:].clone(),
    }


@pytest.fixture
def cams():
    viewmats, Ks = orbit_cameras(2, 40, 30)
    return viewmats.double(), Ks.double()


def test_equals_render_of_the_activated_parameters(cams):
    viewmats, Ks = cams
    s = {k: v.requires_grad_(True) for k, v in stored().items()}
    out = gsnb.render_splats(s, viewmats, Ks, 40, 30, backend="reference")
    out.rgb.square().sum().backward()
    t = {k: v.detach().clone().requires_grad_(True) for k, v in s.items()}
    ref = gsnb.render(
        t["means"], t["quats"], t["scales"].exp(), torch.sigmoid(t["opacities"]),
        torch.cat([t["sh0"], t["shN"]], 1), viewmats, Ks, 40, 30, backend="reference",
    )  # fmt: skip
    ref.rgb.square().sum().backward()
    assert torch.equal(out.rgb, ref.rgb) and torch.equal(out.alpha, ref.alpha)
    assert float(out.alpha.detach().max()) > 0.5  # the scene is in view
    for k in s:
        assert torch.allclose(s[k].grad, t[k].grad, rtol=1e-12, atol=1e-15), k


def test_degree_zero_model_and_lower_degree(cams):
    viewmats, Ks = cams
    s = stored(sh_degree=0)
    assert s["shN"].shape == (200, 0, 3)
    out = gsnb.render_splats(s, viewmats, Ks, 40, 30, backend="reference")
    assert out.rgb.shape == (2, 30, 40, 3)
    s3 = stored(sh_degree=3)
    low = gsnb.render_splats(s3, viewmats, Ks, 40, 30, sh_degree=0, backend="reference")
    only_dc = dict(s3, shN=torch.zeros_like(s3["shN"]))
    full = gsnb.render_splats(only_dc, viewmats, Ks, 40, 30, backend="reference")
    assert torch.allclose(low.rgb, full.rgb, atol=1e-12)


def test_model_render_takes_the_stored_parameters(cams):
    viewmats, Ks = cams
    model = GaussianModel({k: v.float() for k, v in stored().items()})
    out = model.render(viewmats.float(), Ks.float(), 40, 30)
    a = model.activated()
    ref = gsnb.render(
        a["means"], a["quats"], a["scales"], a["opacities"], a["colors"], viewmats.float(),
        Ks.float(), 40, 30,
    )  # fmt: skip
    assert torch.equal(out.rgb, ref.rgb)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sh0": None}, "must map the keys"),
        ({"sh0": torch.zeros(200, 3)}, "sh0 has shape [200, 3]"),
        ({"shN": torch.zeros(200, 2, 3)}, "K = 3 coefficients"),
        ({"shN": torch.zeros(199, 3, 3)}, "shN has shape [199, 3, 3]"),
        ({"shN": None}, "shN must be a torch.Tensor of shape [N, K-1, 3]"),
        ({"opacities": torch.full((200,), float("nan"))}, "opacities"),
        ({"scales": torch.full((200, 3), float("inf"))}, "non-finite"),
    ],
)
def test_bad_input_names_the_problem(cams, change, message):
    viewmats, Ks = cams
    s = {k: v.float() for k, v in stored().items()}
    for k, v in change.items():
        if v is None and k == "sh0":
            del s[k]
        else:
            s[k] = v
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        gsnb.render_splats(s, viewmats.float(), Ks.float(), 40, 30)


def test_logits_and_log_scales_take_any_finite_value(cams):
    viewmats, Ks = cams
    s = stored()
    s["opacities"] = s["opacities"] * 0 + 30.0  # sigmoid 1 - 1e-13: not a range error
    s["scales"] = s["scales"] - 20.0  # tiny Gaussians: negative log-scales
    out = gsnb.render_splats(s, viewmats, Ks, 40, 30, backend="reference")
    assert torch.isfinite(out.rgb).all()


def test_not_a_mapping(cams):
    viewmats, Ks = cams
    with pytest.raises(ValueError, match="must map the keys"):
        gsnb.render_splats([1, 2, 3], viewmats, Ks, 40, 30)  # type: ignore[arg-type]
