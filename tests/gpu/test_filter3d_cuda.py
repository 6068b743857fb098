"""The 3D filter on the GPU: its recomputation inside a training step waits for nothing."""

from __future__ import annotations

import traceback
import warnings

import pytest
import torch

from gsnb import kernels
from gsnb.raster.constants import FAR_PLANE, NEAR_PLANE
from gsnb.train import TrainConfig, Trainer
from gsnb.train.filter3d import apply_filter3d
from tests.gpu.test_cuda_raster import rel_err, scene
from tests.gpu.test_fused_step import variances_for
from tests.train.conftest import build_scene

WIDTH, HEIGHT = 80, 60


def project_both_ways(g, viewmats, Ks, variances, stored, antialiased):
    """Forward and backward of the projection through the filter in the kernels, and of
    ``apply_filter3d`` (autograd) followed by the projection without it, on the same random
    output gradients: ``(got, expected)`` dicts of outputs and input gradients."""
    frame = dict(
        coeffs=g["colors"], rest=None, viewmats=viewmats, Ks=Ks, width=WIDTH, height=HEIGHT,
        near_plane=NEAR_PLANE, far_plane=FAR_PLANE, sh_degree=1,
    )  # fmt: skip
    scales = g["scales"].log() if stored else g["scales"]
    opacities = torch.logit(g["opacities"]) if stored else g["opacities"]
    leaf_s, leaf_o = scales.clone().requires_grad_(True), opacities.clone().requires_grad_(True)
    act_s = leaf_s.exp() if stored else leaf_s
    act_o = torch.sigmoid(leaf_o) if stored else leaf_o
    filtered_s, filtered_o = apply_filter3d(act_s, act_o, variances)
    none = torch.empty(0, device="cuda")
    c, n = viewmats.shape[0], g["means"].shape[0]
    gen = torch.Generator(device="cuda").manual_seed(11)
    grads_out = {
        "v_means2d": torch.randn(c, n, 2, generator=gen, device="cuda"),
        "v_conics": torch.randn(c, n, 3, generator=gen, device="cuda") * 1e-3,
        "v_feats": torch.randn(c, n, 3, generator=gen, device="cuda"),
        "v_opac": torch.randn(c, n, generator=gen, device="cuda"),
    }
    results = {}
    for way in ("kernels", "autograd"):
        inputs = (
            {"scales": scales, "opacities": opacities, "stored": stored, "filter3d": variances}
            if way == "kernels"
            else {"scales": filtered_s.detach(), "opacities": filtered_o.detach(), "stored": False,
                  "filter3d": None}
        )  # fmt: skip
        means2d, conics, _, radii, _, _, opac_cam, _ = kernels.project_forward(
            means=g["means"], quats=g["quats"], with_depth=False, antialiased=antialiased,
            backgrounds=None, check_values=False, **frame, **inputs,
        )  # fmt: skip
        visible = radii[..., 0] > 0
        if way == "autograd" and not antialiased:  # the splats blend with the filtered opacity
            opac_cam = torch.where(visible, filtered_o.detach()[None], 0.0)
        per_camera = antialiased or way == "kernels"
        v_means, v_quats, v_scales, v_coeffs, _, v_opacities = kernels.project_backward(
            means=g["means"], quats=g["quats"],
            opacities=inputs["opacities"] if per_camera else none, radii=radii,
            v_means2d=grads_out["v_means2d"], v_conics=grads_out["v_conics"],
            v_feats=grads_out["v_feats"], v_depths=none,
            v_opacities_cam=grads_out["v_opac"] if per_camera else none,
            scales=inputs["scales"], stored=inputs["stored"], antialiased=antialiased,
            filter3d=inputs["filter3d"], **frame,
        )  # fmt: skip
        if way == "autograd":
            if not antialiased:
                v_opacities = (grads_out["v_opac"] * visible).sum(0)
            v_scales, v_opacities = torch.autograd.grad(
                (filtered_s, filtered_o), (leaf_s, leaf_o), (v_scales, v_opacities)
            )
        results[way] = {
            "means2d": means2d, "conics": conics, "opacities_cam": opac_cam, "radii": radii,
            "v_means": v_means, "v_quats": v_quats, "v_scales": v_scales, "v_coeffs": v_coeffs,
            "v_opacities": v_opacities,
        }  # fmt: skip
    return results["kernels"], results["autograd"]


@pytest.mark.parametrize("stored", [True, False])
@pytest.mark.parametrize("antialiased", [False, True])
def test_the_projection_kernels_filter_as_apply_filter3d_does(cuda_ext, stored, antialiased):
    # Three cameras (per-camera gradients summed by atomics), stored and activated values,
    # either mode: the kernels' filter against apply_filter3d's, differentiated by autograd.
    g, viewmats, Ks = scene(2000, WIDTH, HEIGHT, 3, sh_degree=1, seed=5)
    variances = variances_for(g["scales"], seed=2)
    got, want = project_both_ways(g, viewmats, Ks, variances, stored, antialiased)
    same = (got["radii"] == want["radii"]).all(-1)
    assert same.float().mean() > 0.99 and (got["radii"][..., 0] > 0).sum() > 500
    errors = {k: rel_err(got[k], want[k]) for k in got if k != "radii"}
    print({k: f"{v:.1e}" for k, v in errors.items()})
    assert max(errors.values()) < 1e-3, errors


def test_recomputing_the_filter_does_not_wait_for_the_gpu(cuda_ext, tmp_path):
    data = build_scene(tmp_path / "scene", size=32, views=4, points=200)
    trainer = Trainer(data, TrainConfig(steps=5, device="cuda", backend="cuda", filter3d=True))
    splats = trainer.model.splats
    trainer.filter3d.variances(splats, 0)  # the first use: allocations settle
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a copy from the host would synchronise
    try:
        value = trainer.filter3d.variances(splats, trainer.filter3d.every)  # a recomputation
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert value.device.type == "cuda" and value.shape == (trainer.num_gaussians,)


def syncs_in_one_step(trainer: Trainer) -> list[str]:
    """The host syncs torch reports during one step, after three that create every state, each
    named by the gsnb lines that called it (so that a failure says where the new sync is)."""
    trainer.run(3)
    trainer.filter3d.every = 3  # with filter3d on, the measured step recomputes it
    torch.cuda.synchronize()
    found: list[str] = []

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" in str(message).lower():
            frames = [f for f in traceback.extract_stack()[:-1] if "/gsnb/" in f.filename]
            found.append(
                " <- ".join(
                    f"{f.filename.split('/gsnb/')[-1]}:{f.lineno}" for f in frames[::-1][:4]
                )
            )

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            trainer.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return found


def test_the_new_options_add_no_host_sync_to_a_step(cuda_ext, tmp_path):
    # A step reads its metrics in one copy to the host (values.tolist()); the 3D filter and its
    # recomputation, the exposure and pose corrections and the antialiased mode add none.
    data = build_scene(tmp_path / "scene", size=32, views=6, points=200, test_every=3)
    base = dict(steps=20, device="cuda", backend="cuda")
    plain = syncs_in_one_step(Trainer(data, TrainConfig(**base)))
    options = dict(filter3d=True, exposure=True, pose_refine=True, rasterize_mode="antialiased")
    every = syncs_in_one_step(Trainer(data, TrainConfig(**base, **options)))
    assert plain and len(every) == len(plain), (plain, every)
