"""What a run exports: the mean learned exposure baked into the colours (the 3D filter's
bake is tested in test_filter3d.py), from a trainer and from its checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

import gsnb
from gsnb.export.commands import export, load_scene
from gsnb.export.ply import read_ply
from gsnb.model import GaussianModel, bake_exposure
from gsnb.train import TrainConfig, Trainer
from gsnb.train.exported import exported_model
from gsnb.train.exposure import apply_exposure
from tests.train.test_exposure import gained_scene


def random_splats(count: int, degree: int) -> dict[str, torch.Tensor]:
    """Opaque-ish Gaussians in front of a camera at the origin looking down +z, colours
    near 0.5 (no channel is clamped at 0)."""
    g = torch.Generator().manual_seed(3)
    bases = (degree + 1) ** 2
    return {
        "means": (torch.rand(count, 3, generator=g) - 0.5) * torch.tensor([1.5, 1.5, 0.5])
        + torch.tensor([0.0, 0.0, 3.0]),
        "quats": torch.randn(count, 4, generator=g),
        "scales": torch.log(0.15 + 0.2 * torch.rand(count, 3, generator=g)),
        "opacities": 2.0 + torch.rand(count, generator=g),
        "sh0": 0.4 * torch.randn(count, 1, 3, generator=g),
        "shN": 0.05 * torch.randn(count, bases - 1, 3, generator=g),
    }  # fmt: skip


def camera(size: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    K = torch.tensor([[[size, 0.0, size / 2], [0.0, size, size / 2], [0.0, 0.0, 1.0]]], dtype=dtype)
    return torch.eye(4, dtype=dtype)[None], K


def drift_exposures(trainer: Trainer) -> torch.Tensor:
    """Set ``trainer``'s learned exposures as if they had drifted, each image its own (gains
    0.2-0.6, +0.1, red taking some green), and return their mean ``[3, 4]``."""
    matrices = trainer.corrections.exposure.matrices
    with torch.no_grad():
        matrices[:, :, :3] *= torch.linspace(0.2, 0.6, len(matrices))[:, None, None]
        matrices[:, :, 3] += 0.1
        matrices[:, 0, 1] += 0.2
    return matrices.detach().mean(0)


def assert_checkpoint_exports_as_trainer(trainer: Trainer, path: Path) -> dict[str, torch.Tensor]:
    """``gsnb export`` / ``load_scene`` of the checkpoint ``path`` give exactly
    ``exported_model(trainer)``'s parameters (returned)."""
    expected = exported_model(trainer).splats
    loaded = load_scene(path, "cpu").splats
    for name, value in expected.items():
        torch.testing.assert_close(loaded[name], value, rtol=0, atol=0, msg=name)
    return expected


def transformed_background(background: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    return apply_exposure(background.reshape(1, 1, 3), matrix).reshape(3)


@pytest.mark.parametrize("degree", [0, 1, 3])
def test_a_render_of_the_baked_colours_is_the_render_through_the_transform(degree: int) -> None:
    dtype = torch.float64
    splats = {k: v.to(dtype) for k, v in random_splats(30, degree).items()}
    g = torch.Generator().manual_seed(4)
    gain = torch.eye(3) + 0.15 * torch.randn(3, 3, generator=g)
    matrix = torch.cat([gain, 0.05 * torch.randn(3, 1, generator=g)], dim=1).to(dtype)
    viewmats, Ks = camera(32, dtype)
    background = torch.tensor([0.2, 0.5, 0.9], dtype=dtype)
    kwargs = {"sh_degree": degree, "backend": "reference"}
    plain = gsnb.render_splats(splats, viewmats, Ks, 32, 32, backgrounds=background, **kwargs)
    baked = bake_exposure(splats, matrix)
    moved = transformed_background(background, matrix)
    shown = gsnb.render_splats(baked, viewmats, Ks, 32, 32, backgrounds=moved, **kwargs)
    expected = apply_exposure(plain.rgb, matrix)
    assert (expected - plain.rgb).abs().max() > 0.05  # the transform changes the image
    torch.testing.assert_close(shown.rgb, expected, rtol=0, atol=1e-12)
    # The geometry and the inputs are left as they were.
    for name in ("means", "quats", "scales", "opacities"):
        assert torch.equal(baked[name], splats[name]), name
    assert not torch.equal(baked["sh0"], splats["sh0"])


def test_the_identity_changes_nothing_and_a_wrong_shape_is_refused() -> None:
    splats = random_splats(5, 3)
    baked = bake_exposure(splats, torch.eye(3, 4))
    torch.testing.assert_close(baked["sh0"], splats["sh0"], rtol=0, atol=1e-6)
    assert torch.equal(baked["shN"], splats["shN"])
    with pytest.raises(ValueError, match=r"\[3, 4\] matrix"):
        bake_exposure(splats, torch.eye(3))


def exposure_run(tmp_path: Path, **config) -> Trainer:
    data, *_ = gained_scene(tmp_path, test_ids=[2, 5], size=16)
    trainer = Trainer(
        data,
        TrainConfig(steps=40, backend="reference", sh_degree=1, exposure=True, **config),
    )
    trainer.run(25)
    return trainer


@pytest.mark.parametrize("filter3d", [False, True])
def test_the_exported_model_renders_a_held_out_view_as_evaluation_does(
    tmp_path: Path, filter3d: bool
) -> None:
    trainer = exposure_run(tmp_path, train_test_exp=False, filter3d=filter3d)
    mean = trainer.corrections.exposure.mean()
    assert (mean - torch.eye(3, 4)).abs().max() > 1e-3  # the transforms learned and drifted
    model = exported_model(trainer)
    assert model is not trainer.model and model.num_gaussians == trainer.num_gaussians
    view = trainer.dataset.test[0]
    evaluated = trainer.render_view(view, corrected=True).rgb  # through the mean
    background = transformed_background(trainer.background.float(), mean)
    shown = model.render(view.viewmat[None], view.K[None], view.width, view.height,
                         sh_degree=trainer.sh_degree_now, backgrounds=background)  # fmt: skip
    # Equal but where a baked colour falls below 0 and is clamped (bake_exposure's docstring;
    # exact in float64 without clamping above): a few dark Gaussians here.
    error = (shown.rgb - evaluated).abs()
    assert error.max() < 1e-3 and error.mean() < 2e-5, (error.max(), error.mean())
    stored = trainer.render_view(view).rgb
    assert (stored - evaluated).abs().mean() > 1e-2  # without the bake, the export would differ


def test_gsnb_export_of_an_exposure_run_bakes_the_mean_and_resume_does_not(
    tmp_path: Path,
) -> None:
    trainer = exposure_run(tmp_path)  # the test-halves protocol: every image has a transform
    path = trainer.save_checkpoint(tmp_path / "checkpoint.pt")
    expected = assert_checkpoint_exports_as_trainer(trainer, path)
    assert not torch.equal(expected["sh0"], trainer.model.splats["sh0"].detach())
    ply = tmp_path / "m.ply"
    assert export(argparse.Namespace(checkpoint=str(path), ply=str(ply))) == 0
    torch.testing.assert_close(read_ply(ply)["sh0"], expected["sh0"])
    resumed = Trainer.resume_from(path, trainer.dataset)
    assert torch.equal(resumed.model.splats["sh0"], trainer.model.splats["sh0"])


def test_a_checkpoint_with_unusable_transforms_is_read_as_stored_with_a_warning(
    tmp_path: Path,
) -> None:
    trainer = exposure_run(tmp_path)
    path = trainer.save_checkpoint(tmp_path / "checkpoint.pt")
    payload = torch.load(path, weights_only=True)
    payload["corrections"]["exposure"]["matrices"] = torch.full((3, 3, 4), float("nan"))
    torch.save(payload, tmp_path / "broken.pt")
    with pytest.warns(UserWarning, match="no usable colour transforms"):
        model = GaussianModel.load(tmp_path / "broken.pt", exported=True)
    assert torch.equal(model.splats["sh0"], trainer.model.splats["sh0"].detach())
    # A run without exposure reads as stored, with no warning.
    assert torch.equal(GaussianModel.load(path).splats["sh0"], trainer.model.splats["sh0"].detach())


def test_malformed_transforms_are_refused_before_any_work(tmp_path: Path) -> None:
    """A checkpoint is data from anywhere: transforms of another count than the images or
    of an integer type read as stored, warned; a tiny tensor that claims 2^40 of them is
    refused as the file is read."""
    trainer = exposure_run(tmp_path)
    path = trainer.save_checkpoint(tmp_path / "checkpoint.pt")
    payload = torch.load(path, weights_only=True)
    names = payload["corrections"]["exposure"]["names"]
    stored = trainer.model.splats["sh0"].detach()
    for matrices in (
        torch.eye(3, 4).repeat(len(names) + 1, 1, 1),  # one more than the images
        torch.ones(len(names), 3, 4, dtype=torch.int64),
    ):
        payload["corrections"]["exposure"]["matrices"] = matrices
        torch.save(payload, tmp_path / "bad.pt")
        with pytest.warns(UserWarning, match="no usable colour transforms"):
            model = GaussianModel.load(tmp_path / "bad.pt", exported=True)
        assert torch.equal(model.splats["sh0"], stored)
    payload["corrections"]["exposure"]["matrices"] = torch.eye(3, 4).expand(2**40, 3, 4)
    torch.save(payload, tmp_path / "huge.pt")  # 48 bytes of storage
    with pytest.raises(ValueError, match=r"malformed: the tensor at \['corrections'\]"):
        GaussianModel.load(tmp_path / "huge.pt", exported=True)


def test_a_run_training_in_the_background_exports_one_steps_state(tmp_path: Path) -> None:
    trainer = exposure_run(tmp_path, filter3d=True)
    trainer.start(200)
    try:
        models = [exported_model(trainer) for _ in range(5)]  # between two steps each time
    finally:
        trainer.stop(timeout=60)
    for model in models:
        count = model.num_gaussians
        assert all(v.shape[0] == count for v in model.splats.values())
        assert all(bool(torch.isfinite(v).all()) for v in model.splats.values())
    assert trainer.step_count > 25  # it did train meanwhile
