"""Exposure compensation: the transform, its schedule, what training recovers, the protocol."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gsnb.train import TrainConfig, Trainer
from gsnb.train.evaluation import evaluate_views
from gsnb.train.exposure import (
    ExposureCorrection,
    apply_exposure,
    exposure_rate,
    identity_exposures,
)
from tests.train.known_scene import known_scene, starting_copy, with_photos


def test_transform_is_a_matrix_and_an_offset_per_image() -> None:
    g = torch.Generator().manual_seed(0)
    rgb = torch.rand(2, 5, 4, 3, generator=g)
    A = torch.rand(2, 3, 4, generator=g)
    expected = torch.einsum("cij,chwj->chwi", A[:, :, :3], rgb) + A[:, None, None, :, 3]
    assert torch.allclose(apply_exposure(rgb, A), expected, atol=1e-6)
    assert torch.allclose(apply_exposure(rgb[1], A[1]), rgb[1] @ A[1, :, :3].T + A[1, :, 3])
    assert torch.equal(apply_exposure(rgb, identity_exposures(2)), rgb)


def test_rate_decays_exponentially_from_3dgs_start_to_end() -> None:
    config = TrainConfig()
    assert (config.lr_exposure, config.lr_exposure_final) == (0.01, 0.001)
    rates = [exposure_rate(0.01, 0.001, step, 1000) for step in (0, 250, 500, 1000, 5000)]
    assert rates[0] == pytest.approx(0.01) and rates[3] == rates[4] == 0.001
    assert rates[1] == pytest.approx(0.01 * 0.1**0.25)
    assert rates[2] == pytest.approx(0.01 * 0.1**0.5)


def gained_scene(tmp_path: Path, test_ids: list[int] | None = None, size: int = 24):
    """The known scene whose photo ``i`` went through ``gain_i * colour + offset_i``
    (photo 0 untouched); gains in [0.75, 0.95] and offsets in [0, 0.05] never clip."""
    data, model, photos = known_scene(tmp_path / "scene", size=size)
    g = torch.Generator().manual_seed(1)
    gains = 0.75 + 0.2 * torch.rand(len(photos), 3, generator=g)
    offsets = 0.05 * torch.rand(len(photos), 3, generator=g)
    gains[0], offsets[0] = 1.0, 0.0
    exposed = [p * gains[i] + offsets[i] for i, p in enumerate(photos)]
    dataset = with_photos(data, tmp_path / "exposed", exposed, test_ids=test_ids)
    return dataset, model, photos, gains, offsets


def affine(matrices: torch.Tensor) -> torch.Tensor:
    out = torch.eye(4).repeat(len(matrices), 1, 1)
    out[:, :3] = matrices
    return out


def test_training_recovers_known_gains_and_beats_training_without(tmp_path: Path) -> None:
    data, truth, photos, gains, offsets = gained_scene(tmp_path, size=16)
    results = {}
    for on in (False, True):
        config = TrainConfig(steps=120, backend="reference", sh_degree=0, exposure=on)
        trainer = Trainer(data, config, model=starting_copy(truth, data.background))
        trainer.run()
        results[on] = (trainer.evaluate("train").psnr, trainer.corrections.exposure.matrices)
    assert results[True][0] > results[False][0] + 5.0, results
    # The colours and the transforms trade a common transform (scaling all colours and
    # dividing every exposure leaves the images alike), so photo i's transform is compared
    # relative to photo 0's. And a 3x4 matrix is only determined on the colours the photos
    # hold, so it is judged by what it does to them: the true transform applied to each clean
    # photo against the recovered one. Tolerance 0.02 (5 of 255 levels) per channel on
    # average; leaving photos untransformed errs by 0.04 to 0.09 here.
    learned = affine(results[True][1].detach())
    relative = (learned @ torch.linalg.inv(learned[0]))[:, :3]
    for i, photo in enumerate(photos):
        truth_image = photo * gains[i] + offsets[i]
        error = (apply_exposure(photo, relative[i]) - truth_image).abs().mean().item()
        untouched = (photo - truth_image).abs().mean().item()
        assert error < 0.02 and (i == 0 or error < 0.25 * untouched), (i, error, untouched)


def test_test_views_train_on_left_halves_and_are_measured_on_right_halves(
    tmp_path: Path,
) -> None:
    data, truth, *_ = gained_scene(tmp_path, test_ids=[0, 3])
    config = TrainConfig(steps=20, backend="reference", sh_degree=0, exposure=True)
    trainer = Trainer(data, config, model=starting_copy(truth, data.background))
    assert config.train_test_exp is True  # resolved when the run starts
    names = [v.name for v in trainer.train_images.views]
    assert names == [v.name for v in data.train] + [v.name for v in data.test]
    rgb, target = trainer.corrections.for_loss(torch.rand(24, 24, 3), torch.rand(24, 24, 3), 5)
    assert rgb.shape == target.shape == (24, 12, 3)
    trainer.run()
    fix = trainer.corrections.exposure
    assert not torch.equal(fix.matrices[fix.index_of(data.test[0].name)], torch.eye(3, 4))

    result = trainer.evaluate("test")
    assert result.protocol == "right halves" and result.num_views == 2

    def right(view):
        image = trainer.render_view(view, corrected=True).rgb[0]
        return image[:, 12:]

    targets = [v.load_image()[:, 12:] for v in data.test]
    by_hand = evaluate_views(right, data.test, targets, trainer.step_count)
    assert result.psnr == pytest.approx(by_hand.psnr, abs=1e-5)
    assert trainer.evaluate("train").num_views == len(data.train)
    assert trainer.evaluate("train").protocol == "full images"


def test_without_exposure_evaluation_is_unchanged(tmp_path: Path) -> None:
    data, *_ = gained_scene(tmp_path, test_ids=[0, 3])
    trainer = Trainer(data, TrainConfig(steps=5, backend="reference", sh_degree=0))
    trainer.run()
    assert [v.name for v in trainer.train_images.views] == [v.name for v in data.train]
    result = trainer.evaluate("test")
    images = [v.load_image() for v in data.test]
    before = evaluate_views(lambda v: trainer.render_view(v).rgb[0], data.test, images, 5)
    assert result.protocol == "full images"
    assert (result.psnr, result.ssim) == (before.psnr, before.ssim)


def test_switched_off_it_is_neither_learned_nor_applied(tmp_path: Path) -> None:
    data, truth, *_ = gained_scene(tmp_path)
    config = TrainConfig(steps=30, backend="reference", sh_degree=0, exposure=True)
    trainer = Trainer(data, config, model=starting_copy(truth, data.background))
    trainer.run(10)
    learned = trainer.corrections.exposure.matrices.detach().clone()
    assert not torch.equal(learned, identity_exposures(len(learned)))
    trainer.set(exposure=False)
    trainer.run(10)
    assert torch.equal(trainer.corrections.exposure.matrices.detach(), learned)
    image = torch.rand(24, 24, 3)
    assert torch.equal(trainer.corrections.for_loss(image, image, 1)[0], image)
    view = data.train[1]
    plain = trainer.render_view(view).rgb
    assert torch.equal(trainer.render_view(view, corrected=True).rgb, plain)
    trainer.set(exposure=True)
    trainer.step()
    assert not torch.equal(trainer.corrections.exposure.matrices.detach(), learned)


def test_state_refuses_other_images() -> None:
    exposure = ExposureCorrection(["a.png", "b.png"])
    with pytest.raises(ValueError, match="other images"):
        ExposureCorrection(["a.png"]).load_state_dict(exposure.state_dict())
    assert math.isclose(exposure.optimizer.param_groups[0]["eps"], 1e-8)


def test_a_view_held_out_whole_renders_through_the_mean_exposure(tmp_path: Path) -> None:
    # every photo is darker than the scene (gains 0.75-0.95, photo 0 aside): the held-out
    # photos too, so the learned transforms' mean predicts them better than the identity
    data, truth, *_ = gained_scene(tmp_path, test_ids=[2, 5], size=16)
    config = TrainConfig(
        steps=120, backend="reference", sh_degree=0, exposure=True, train_test_exp=False
    )
    trainer = Trainer(data, config, model=starting_copy(truth, data.background))
    trainer.run()
    mean = trainer.corrections.exposure.mean()
    assert mean.shape == (3, 4) and float(mean[:, :3].diagonal().mean()) < 0.99
    result = trainer.evaluate("test")
    assert result.protocol == "full images" and result.num_views == 2
    targets = [v.load_image() for v in data.test]

    def through(matrix):
        def render(view):
            return apply_exposure(trainer.render_view(view).rgb[0], matrix)

        return evaluate_views(render, data.test, targets, trainer.step_count).psnr

    assert result.psnr == pytest.approx(through(mean), abs=1e-4)
    assert result.psnr > through(torch.eye(3, 4)) + 1.0
