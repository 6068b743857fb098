"""render_model: gsnb's renderer on the stored parameters, any other on the activated ones."""

from __future__ import annotations

import torch

import gsnb
from gsnb.cameras import intrinsics, look_at
from gsnb.model import GaussianModel
from gsnb.train.rendering import BackendRenderer, render_model, screen_absgrad


def test_both_paths_render_the_same_image_and_gradients() -> None:
    g = torch.Generator().manual_seed(0)
    model = GaussianModel.from_points(torch.rand(30, 3, generator=g) - 0.5,
                                      torch.rand(30, 3, generator=g), sh_degree=1)  # fmt: skip
    viewmat = look_at(torch.tensor([0.0, -3.0, 0.5]), torch.zeros(3))[None]
    K = intrinsics(24, 20, 50.0, axis="x")[None]
    background = torch.tensor([0.2, 0.3, 0.4])
    outputs = []
    for renderer in (BackendRenderer("reference"), gsnb.render):
        for p in model.splats.values():
            p.grad = None
        out = render_model(model, renderer, viewmat, K, 24, 20, sh_degree=1,
                           background=background, absgrad=True)  # fmt: skip
        out.meta.means2d.retain_grad()
        out.rgb.square().sum().backward()
        grads = {k: p.grad.clone() for k, p in model.splats.items()}
        outputs.append((out, grads))
    (a, grads_a), (b, grads_b) = outputs
    assert a.rgb.shape == (1, 20, 24, 3) and a.depth is None  # training renders skip depth
    assert torch.allclose(a.rgb, b.rgb, atol=1e-6)
    assert (a.rgb[0, 0, 0] - background).abs().max() < 0.5  # composited over the background
    for key in grads_a:
        assert torch.allclose(grads_a[key], grads_b[key], atol=1e-5, rtol=1e-4), key
    absgrad = screen_absgrad(a)
    assert absgrad is not None and absgrad.shape == (1, 30, 2) and bool((absgrad >= 0).all())
