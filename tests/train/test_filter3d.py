"""Mip-Splatting's 3D filter: its variances, its application, the trainer and the export."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import gsnb
from gsnb.export.ply import read_ply, write_ply
from gsnb.model import bake_filter3d
from gsnb.train import TrainConfig, Trainer, filter3d
from gsnb.train.exported import exported_model
from gsnb.train.filter3d import Filter3D, apply_filter3d, filter3d_variances


def camera(fx: float, z_offset: float = 0.0, size: int = 100) -> SimpleNamespace:
    """A camera looking down +z from (0, 0, -z_offset), principal point at the centre."""
    viewmat = torch.eye(4)
    viewmat[2, 3] = z_offset
    K = torch.tensor([[fx, 0.0, size / 2], [0.0, fx, size / 2], [0.0, 0.0, 1.0]])
    return SimpleNamespace(viewmat=viewmat, K=K, width=size, height=size)


def variances(means: torch.Tensor, cams: list[SimpleNamespace]) -> torch.Tensor:
    return filter3d_variances(
        means,
        torch.stack([c.viewmat for c in cams]),
        torch.stack([c.K for c in cams]),
        [c.width for c in cams],
        [c.height for c in cams],
    )


def test_variance_is_02_over_the_highest_sampling_rate_squared() -> None:
    means = torch.tensor([[0.0, 0.0, 4.0], [1.0, 0.0, 4.0]])
    # Camera A: fx 100 at depth 4, rate 25 px/unit. Camera B: fx 100 at depth 2, rate 50.
    # Camera C: fx 300 at depth 4 (rate 75) sees the first centre only: the second lies at
    # u = 300 * 1 / 4 + 50 = 125 px, outside its 100 px image and the 15% margin.
    a, b, c = camera(100.0), camera(100.0, z_offset=-2.0), camera(300.0)
    assert variances(means, [a]).tolist() == pytest.approx([0.2 / 25**2] * 2)
    assert variances(means, [a, b]).tolist() == pytest.approx([0.2 / 50**2] * 2)
    assert variances(means, [a, b, c]).tolist() == pytest.approx([0.2 / 75**2, 0.2 / 50**2])


def test_cameras_in_groups_give_each_cameras_own_rate(monkeypatch) -> None:
    # Many cameras around the Gaussians, projected in groups of a few (camera, Gaussian)
    # pairs: the same variances as one camera at a time by the formula.
    gen = torch.Generator().manual_seed(0)
    means = torch.randn(50, 3, generator=gen)
    cams = []
    for i in range(23):
        turn = torch.linalg.matrix_exp(torch.tensor(
            [[0.0, -0.3 * i, 0.1], [0.3 * i, 0.0, -0.2], [-0.1, 0.2, 0.0]]))  # fmt: skip
        cam = camera(60.0 + 7 * i, z_offset=3.0 + 0.1 * i, size=64 + i)
        cam.viewmat[:3, :3] = turn
        cams.append(cam)
    expected = torch.zeros(50)
    for c in cams:
        p = means @ c.viewmat[:3, :3].T + c.viewmat[:3, 3]
        zs = p[:, 2].clamp_min(0.01)
        u, v = c.K[0, 0] * p[:, 0] / zs + c.K[0, 2], c.K[1, 1] * p[:, 1] / zs + c.K[1, 2]
        lo, hi = -0.15 * c.width, 1.15 * c.width
        seen = (p[:, 2] > 0.01) & (u >= lo) & (u <= hi) & (v >= lo) & (v <= hi)
        expected = torch.where(seen, torch.maximum(expected, c.K[0, 0] / zs), expected)
    expected = torch.where(expected > 0, 0.2 / expected.clamp_min(1e-30) ** 2, 0.0)
    assert (expected > 0).sum() > 25 and (expected == 0).sum() > 0
    for chunk in (1, 120, 1 << 22):  # one camera, two cameras, all at once
        monkeypatch.setattr(filter3d, "CHUNK_ELEMENTS", chunk)
        torch.testing.assert_close(variances(means, cams), expected, rtol=1e-4, atol=0.0)


def test_a_gaussian_no_camera_sees_gets_no_filter() -> None:
    means = torch.tensor([[0.0, 0.0, -3.0], [50.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    got = variances(means, [camera(100.0)])  # behind, far outside, seen
    assert got[0] == 0 and got[1] == 0 and got[2] > 0
    scales, opacities = torch.rand(3, 3) + 0.01, torch.rand(3)
    filtered, dimmed = apply_filter3d(scales, opacities, got)
    assert torch.equal(filtered[:2], scales[:2]) and torch.equal(dimmed[:2], opacities[:2])
    assert (filtered[2] > scales[2]).all() and dimmed[2] < opacities[2]


def test_filter_widens_and_keeps_the_integral() -> None:
    # opacity * prod(scales) (the Gaussian's integral up to a constant) is kept.
    scales = torch.tensor([[0.01, 0.02, 0.5]], dtype=torch.float64)
    opacities = torch.tensor([0.7], dtype=torch.float64)
    var = torch.tensor([4e-4], dtype=torch.float64)
    filtered, dimmed = apply_filter3d(scales, opacities, var)
    torch.testing.assert_close(filtered**2, scales**2 + var)
    torch.testing.assert_close(dimmed * filtered.prod(), opacities * scales.prod())


def test_recomputed_when_the_gaussians_change_or_every_n_steps() -> None:
    cache = Filter3D([camera(100.0)], every=10)
    means = torch.tensor([[0.0, 0.0, 2.0]])
    first = cache.variances({"means": means}, step=0)
    with torch.no_grad():
        means[0, 2] = 4.0  # the optimiser moves it in place
    assert cache.variances({"means": means}, step=9) is first  # kept between recomputations
    assert cache.variances({"means": means}, step=10).item() == pytest.approx(0.2 / 25**2)
    grown = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]])  # densified: a new tensor
    assert cache.variances({"means": grown}, step=11).tolist() == pytest.approx(
        [0.2 / 100**2, 0.2 / 50**2]
    )


def test_the_exported_model_renders_what_the_trainer_renders(make_scene, tmp_path: Path) -> None:
    data = make_scene()
    trainer = Trainer(data, TrainConfig(steps=20, sh_degree=1, filter3d=True))
    trainer.run(5)
    view = data.train[0]
    shown = trainer.render_view(view).rgb
    model = exported_model(trainer)
    assert model is not trainer.model
    degree = trainer.sh_degree_now
    baked = model.render(view.viewmat[None], view.K[None], view.width, view.height,
                         sh_degree=degree, backgrounds=trainer.background)  # fmt: skip
    torch.testing.assert_close(baked.rgb, shown, rtol=1e-5, atol=1e-6)
    plain = trainer.model.render(view.viewmat[None], view.K[None], view.width, view.height,
                                 sh_degree=degree, backgrounds=trainer.background)  # fmt: skip
    assert (plain.rgb - shown).abs().max() > 1e-4  # the filter changes the image
    # Through a PLY file, as another viewer reads it.
    write_ply(tmp_path / "baked.ply", model.splats)
    again = gsnb.render_splats(read_ply(tmp_path / "baked.ply"), view.viewmat[None],
                               view.K[None], view.width, view.height, sh_degree=degree,
                               backgrounds=trainer.background)  # fmt: skip
    torch.testing.assert_close(again.rgb, shown, rtol=1e-5, atol=1e-5)


def test_training_with_the_filter_moves_every_parameter(make_scene) -> None:
    data = make_scene()
    trainer = Trainer(data, TrainConfig(steps=10, filter3d=True, sh_degree=0))
    before = {k: v.detach().clone() for k, v in trainer.model.splats.items()}
    trainer.run(3)
    for name in ("means", "scales", "opacities", "quats", "sh0"):
        assert not torch.equal(before[name], trainer.model.splats[name]), name
    assert exported_model(trainer).num_gaussians == trainer.num_gaussians


def test_bake_detaches_and_keeps_the_other_parameters() -> None:
    splats = {
        "means": torch.rand(4, 3), "quats": torch.rand(4, 4),
        "scales": torch.full((4, 3), -3.0, requires_grad=True), "opacities": torch.zeros(4),
        "sh0": torch.rand(4, 1, 3), "shN": torch.rand(4, 3, 3),
    }  # fmt: skip
    baked = bake_filter3d(splats, torch.tensor([0.0, 1e-3, 1e-2, 0.0]))
    assert not baked["scales"].requires_grad
    torch.testing.assert_close(baked["scales"][[0, 3]], splats["scales"][[0, 3]].detach())
    assert torch.equal(baked["sh0"], splats["sh0"]) and torch.equal(baked["means"], splats["means"])
    assert (baked["opacities"][1:3] < 0).all()


def test_a_resumed_run_filters_with_the_variances_the_run_had(make_scene, tmp_path: Path) -> None:
    # The variances are recomputed every 100 steps from the means of that step; a resume
    # between two recomputations must keep the old ones, not compute them afresh.
    data = make_scene()
    config = TrainConfig(steps=20, filter3d=True, sh_degree=0, backend="reference")
    trainer = Trainer(data, config)
    trainer.run(3)
    path = trainer.save_checkpoint(tmp_path / "checkpoint.pt")
    trainer.run(3)
    resumed = Trainer.resume_from(path, data)
    resumed.run(3)
    for name, value in trainer.model.splats.items():
        assert torch.equal(value, resumed.model.splats[name]), name


def test_bake_keeps_saturated_opacities_and_tiny_scales_finite() -> None:
    # sigmoid(20) rounds to 1 in float32 and exp(-60)^2 to 0: taking the logit and the log of
    # the filtered values gave inf and NaN. An unfiltered Gaussian keeps its parameters.
    splats = {
        "means": torch.zeros(4, 3), "quats": torch.tensor([[1.0, 0, 0, 0]] * 4),
        "scales": torch.tensor([[-1.0] * 3, [-1.0] * 3, [-60.0] * 3, [-60.0] * 3]),
        "opacities": torch.tensor([20.0, 20.0, 2.0, 2.0]),
        "sh0": torch.zeros(4, 1, 3), "shN": torch.zeros(4, 0, 3),
    }  # fmt: skip
    variances = torch.tensor([0.0, 1e-9, 0.0, 1e-6])
    baked = bake_filter3d(splats, variances)
    assert torch.isfinite(baked["scales"]).all() and torch.isfinite(baked["opacities"]).all()
    assert torch.equal(baked["scales"][[0, 2]], splats["scales"][[0, 2]])
    assert torch.equal(baked["opacities"][[0, 2]], splats["opacities"][[0, 2]])
    assert baked["opacities"][1] == pytest.approx(20.0, abs=0.1)
    # The tiny Gaussian becomes the filter: its scale sqrt(1e-6), its opacity times 1e-78 / 1e-18.
    assert baked["scales"][3].tolist() == pytest.approx([0.5 * math.log(1e-6)] * 3, rel=1e-6)
    want = math.log(torch.sigmoid(torch.tensor(2.0)).item()) + 3 * (-60.0 - 0.5 * math.log(1e-6))
    assert baked["opacities"][3].item() == pytest.approx(want, rel=1e-5)


def test_gsnb_export_of_a_filtered_run_bakes_the_filter(make_scene, tmp_path: Path) -> None:
    """``gsnb export`` / ``gsnb video`` read a filter3d run's checkpoint as the run rendered it."""
    import argparse

    from gsnb.export.commands import export
    from tests.train.test_exported import assert_checkpoint_exports_as_trainer

    data = make_scene()
    trainer = Trainer(data, TrainConfig(steps=20, sh_degree=0, filter3d=True, backend="reference"))
    trainer.run(4)
    trainer.render_view(data.train[0])  # the filter in use is the one of the current Gaussians
    path = trainer.save_checkpoint(tmp_path / "checkpoint.pt")
    expected = assert_checkpoint_exports_as_trainer(trainer, path)
    assert not torch.equal(expected["scales"], trainer.model.splats["scales"].detach())
    assert export(argparse.Namespace(checkpoint=str(path), ply=str(tmp_path / "m.ply"))) == 0
    torch.testing.assert_close(read_ply(tmp_path / "m.ply")["opacities"], expected["opacities"])
    # Resuming reads the parameters as stored, not the baked ones.
    resumed = Trainer.resume_from(path, data)
    assert torch.equal(resumed.model.splats["scales"], trainer.model.splats["scales"])


def test_a_checkpoint_without_a_current_filter_is_read_unfiltered_with_a_warning(
    make_scene, tmp_path: Path
) -> None:
    from gsnb.export.commands import load_scene

    data = make_scene()
    trainer = Trainer(data, TrainConfig(steps=20, sh_degree=0, filter3d=True, backend="reference"))
    trainer.run(2)
    payload = torch.load(trainer.save_checkpoint(tmp_path / "c.pt"), weights_only=True)
    payload["filter3d"] = {}
    torch.save(payload, tmp_path / "stale.pt")
    with pytest.warns(UserWarning, match="no filter for its current Gaussians"):
        loaded = load_scene(tmp_path / "stale.pt", "cpu")
    assert torch.equal(loaded.splats["scales"], trainer.model.splats["scales"].detach())
