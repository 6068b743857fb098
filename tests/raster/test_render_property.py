"""Property-based test of gsnb.render (reference backend, CPU): for any finite, valid
input, including extreme scales, opacities and camera poses, rendering and its backward
pass raise nothing and produce no NaN or Inf."""

from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gsnb

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
scale = st.floats(1e-8, 1e3, allow_nan=False)
unit = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def scenes(draw):
    n = draw(st.integers(0, 12))
    cams = draw(st.integers(1, 2))
    width, height = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    means = torch.tensor(draw(st.lists(st.tuples(finite, finite, finite), min_size=n, max_size=n)))
    quats = torch.tensor(
        draw(st.lists(st.tuples(finite, finite, finite, finite), min_size=n, max_size=n))
    )
    scales = torch.tensor(draw(st.lists(st.tuples(scale, scale, scale), min_size=n, max_size=n)))
    opac = torch.tensor(draw(st.lists(unit, min_size=n, max_size=n)))
    degree = draw(st.sampled_from([None, 0, 1, 2, 3]))
    if degree is None:
        colors = torch.tensor(draw(st.lists(st.tuples(unit, unit, unit), min_size=n, max_size=n)))
    else:
        k = (degree + 1) ** 2
        colors = torch.randn(n, k, 3, generator=torch.Generator().manual_seed(n)) * draw(unit)
    viewmats, Ks = [], []
    for _ in range(cams):
        angle = draw(st.floats(-math.pi, math.pi, allow_nan=False))
        axis = torch.nn.functional.normalize(
            torch.tensor([draw(finite), draw(finite), draw(finite)]) + 1e-3, dim=0
        )
        q = torch.cat([torch.tensor([math.cos(angle / 2)]), axis * math.sin(angle / 2)])
        from gsnb.raster.projection import quat_to_rotmat

        view = torch.eye(4)
        view[:3, :3] = quat_to_rotmat(q)
        view[:3, 3] = torch.tensor([draw(finite), draw(finite), draw(finite)])
        viewmats.append(view)
        f = draw(st.floats(0.1, 1e4, allow_nan=False))
        cx, cy = draw(st.floats(-50, 100)), draw(st.floats(-50, 100))
        Ks.append(torch.tensor([[f, 0, cx], [0, f * draw(st.floats(0.5, 2)), cy], [0, 0, 1]]))
    if n == 0:
        means, quats, scales = (torch.zeros(0, d) for d in (3, 4, 3))
        colors = torch.zeros(0, 3) if degree is None else torch.zeros(0, (degree + 1) ** 2, 3)
    return dict(
        means=means, quats=quats, scales=scales, opacities=opac.reshape(n), colors=colors,
        viewmats=torch.stack(viewmats), Ks=torch.stack(Ks), width=width, height=height,
    )  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes())
def test_render_is_finite_for_finite_inputs(scene):
    params = {k: scene[k].clone().requires_grad_(True) for k in ("means", "scales", "colors")}
    out = gsnb.render(**(scene | params), backend="reference")
    for name in ("rgb", "alpha", "depth"):
        t = getattr(out, name)
        assert torch.isfinite(t).all(), name
    assert (out.alpha >= 0).all() and (out.alpha <= 1).all()
    (out.rgb.sum() + out.alpha.sum() + (out.depth * out.alpha.detach()).sum()).backward()
    for name, p in params.items():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
