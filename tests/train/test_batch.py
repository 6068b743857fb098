"""Several views per step: gsnb.train.batch and the trainer's batch_size."""

from __future__ import annotations

import math

import pytest
import torch
from PIL import Image

from gsnb.data.dataset import View
from gsnb.train import TrainConfig, Trainer
from gsnb.train.batch import adam_settings, apply_adam_settings, check_batch, render_batch
from gsnb.train.inputs import ViewImages
from gsnb.train.losses import photometric_terms
from gsnb.train.optim import LR_KNOBS
from gsnb.train.rendering import BackendRenderer, render_model
from gsnb.train.strategy import DefaultStrategy

BASE = dict(device="cpu", backend="reference", sh_degree=1, sh_degree_interval=5)


def small_schedule() -> DefaultStrategy:
    """Densify at steps 4, 8, 12 and reset opacities at 9: all within a short run."""
    return DefaultStrategy(
        refine_start_iter=3, refine_every=4, reset_every=9, grow_grad2d=1e-5, opacity_reset=True
    )


def test_adam_settings_follow_gsplat() -> None:
    assert adam_settings(1) == {"betas": (0.9, 0.999), "eps": 1e-15}
    four = adam_settings(4)
    assert four["betas"] == pytest.approx((0.6, 0.996))
    assert four["eps"] == pytest.approx(1e-15 / 2)
    assert adam_settings(20)["betas"][0] == 0.0  # gsplat's formula would turn negative
    with pytest.raises(ValueError, match="does not split evenly over 2 processes"):
        check_batch(3, 2)


@pytest.mark.parametrize(("rule", "factor"), [("sqrt", math.sqrt(2)), ("linear", 2.0)])
def test_batch_of_identical_views_equals_batch_one_with_scaled_rates(
    make_scene, rule: str, factor: float
) -> None:
    # One training view: a batch of 2 holds it twice. Its mean loss is that view's loss,
    # so the gradient is batch 1's, and the only differences are the learning rates
    # (times sqrt 2, or 2) and Adam's betas and eps, which the batch-1 run gets by hand here.
    data = make_scene(views=2, test_every=2)
    assert len(data.train) == 1
    config = TrainConfig(batch_size=2, batch_lr_scaling=rule, steps=14, **BASE)
    two = Trainer(data, config, strategy=small_schedule())
    rates = {k: getattr(two.config, k) * factor for k in LR_KNOBS.values()}
    one = Trainer(data, TrainConfig(steps=14, **BASE, **rates), strategy=small_schedule())
    apply_adam_settings(one.optimizer, 2)
    events = []
    for _ in range(14):
        a, b = one.step(), two.step()
        assert a.events == b.events
        # The loss is a mean over twice the pixels: summed in another order.
        assert b.loss == pytest.approx(a.loss, rel=1e-6)
        events.append(b.events)
    assert any("split" in e or "cloned" in e for e in events) and any("reset" in e for e in events)
    for name, p in one.model.splats.items():
        # Halving a gradient and adding two halves is exact in binary floating point, so
        # the models agree to rounding in the rasterizer's sums over the two cameras.
        torch.testing.assert_close(two.model.splats[name], p, rtol=1e-5, atol=1e-6)


def test_batch_two_densifies_and_resumes_exactly(make_scene, tmp_path) -> None:
    data = make_scene(views=5)
    config = TrainConfig(batch_size=2, steps=14, **BASE)
    trainer = Trainer(data, config, strategy=small_schedule())
    assert trainer.optimizer.param_groups[0]["betas"] == pytest.approx((0.8, 0.998))
    first = trainer.step()
    assert first.lr_means == pytest.approx(math.sqrt(2) * 1.6e-4 * trainer.extent)
    trainer.run(steps=7)
    assert trainer.num_gaussians != 30  # densified at steps 4 and 8
    path = trainer.save_checkpoint(tmp_path / "checkpoint.pt")
    trainer.run()
    again = Trainer.resume_from(path, data)
    assert again.optimizer.param_groups[0]["betas"] == pytest.approx((0.8, 0.998))
    again.run()
    for name, p in trainer.model.splats.items():
        assert torch.equal(again.model.splats[name], p), name


def test_views_of_two_sizes_render_once_per_size(make_scene, tmp_path) -> None:
    data = make_scene(views=3)
    small, big = data.train[0], data.train[1]
    path = tmp_path / "wide.png"
    Image.open(big.image_path).resize((24, 24)).save(path)
    K = big.K.clone()
    K[:2] *= 1.5
    images = ViewImages(
        [small, View("wide.png", path, 24, 24, K, big.viewmat)], torch.device("cpu")
    )
    trainer = Trainer(data, TrainConfig(**BASE))
    calls = []

    def render(viewmats, Ks, width, height):
        calls.append(viewmats.shape[0])
        return render_model(
            trainer.model, BackendRenderer("reference"), viewmats, Ks, width, height
        )

    (loss, _, _, mse), info = render_batch(render, images, [0, 1], [], 0.2)
    assert calls == [1, 1] and len(info["groups"]) == 2
    assert all(g["n_cameras"] == 2 for g in info["groups"])
    single = [
        photometric_terms(
            render(*images.cameras[i], v.width, v.height).rgb, images.image(i)[None], 0.2
        )
        for i, v in enumerate(images.views)
    ]
    assert loss.item() == pytest.approx((single[0][0] + single[1][0]).item() / 2, rel=1e-6)
    assert mse.item() == pytest.approx((single[0][3] + single[1][3]).item() / 2, rel=1e-6)
    loss.backward()
    state = DefaultStrategy().initialize_state(1.0)
    DefaultStrategy().accumulate(trainer.model.splats, state, info)
    assert state["count"].sum() > 0


def test_batches_refuse_per_view_corrections():
    """Exposure and pose corrections apply in the one-view step only: a batch refuses them,
    and test views' halves (a batch would train on their whole images)."""
    import pytest

    from gsnb.train import TrainConfig

    for option in ("exposure", "pose_refine", "train_test_exp"):
        with pytest.raises(ValueError, match="batch_size 1"):
            TrainConfig(batch_size=2, **{option: True})
    TrainConfig(batch_size=1, exposure=True, pose_refine=True)
