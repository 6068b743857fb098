"""Per-parameter learning rates and the means' exponential decay."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gsnb.train.config import TrainConfig
from gsnb.train.optim import GaussianAdam, learning_rates, make_optimizer, set_learning_rates


def test_learning_rates_follow_3dgs() -> None:
    cfg = TrainConfig(steps=1000)
    start = learning_rates(cfg, 0, extent=3.0)
    assert start == pytest.approx(
        {"means": 1.6e-4 * 3.0, "quats": 1e-3, "scales": 5e-3, "opacities": 5e-2,
         "sh0": 2.5e-3, "shN": 2.5e-3 / 20}
    )  # fmt: skip
    assert learning_rates(cfg, 500, 3.0)["means"] == pytest.approx(1.6e-4 * 3.0 * 0.1)
    assert learning_rates(cfg, 1000, 3.0)["means"] == pytest.approx(1.6e-6 * 3.0)
    assert learning_rates(cfg, 5000, 3.0)["means"] == pytest.approx(1.6e-6 * 3.0)


def test_the_means_decay_over_a_shorter_horizon_when_asked() -> None:
    # 10,000-step decay in a 30,000-step run is the whole-run decay to 0.01 ** 3 = 1e-6
    fast = TrainConfig(steps=30_000, lr_means_decay_steps=10_000)
    whole = TrainConfig(steps=30_000, lr_means_final=1e-6)
    for step in (0, 2_500, 10_000, 17_000, 30_000, 40_000):
        rate = learning_rates(fast, step, 3.0)
        assert rate == pytest.approx(learning_rates(whole, step, 3.0), rel=1e-9)
        assert rate["scales"] == 5e-3  # only the means' rate changes
    assert learning_rates(fast, 10_000, 3.0)["means"] == pytest.approx(1.6e-6 * 3.0)
    # a horizon at or past the run's length is the run: a 7,000-step run keeps INRIA's decay
    for horizon in (7_000, 10_000):
        short = TrainConfig(steps=7_000, lr_means_decay_steps=horizon)
        for step in (0, 3_500, 7_000):
            plain = learning_rates(TrainConfig(steps=7_000), step, 3.0)
            assert learning_rates(short, step, 3.0) == plain


def test_the_means_decay_horizon_is_a_live_knob(make_scene) -> None:
    from gsnb.train import Trainer

    trainer = Trainer(make_scene(), TrainConfig(steps=100, device="cpu", backend="reference"))
    trainer.run(10)
    trainer.set(lr_means_decay_steps=5)  # from the next step on: 0.01 every 5 steps
    trainer.run(1)
    means = next(g for g in trainer.optimizer.param_groups if g["name"] == "means")
    assert means["lr"] == pytest.approx(1.6e-4 * trainer.extent * 0.01 ** (10 / 5))


def test_by_default_the_means_decay_on_the_strategys_horizon(make_scene) -> None:
    from gsnb.train import Trainer
    from gsnb.train.strategy import DefaultStrategy, MCMCStrategy

    assert TrainConfig().lr_means_decay_steps == -1
    assert (DefaultStrategy.lr_means_decay_steps, MCMCStrategy.lr_means_decay_steps) == (10_000, 0)
    run, once = TrainConfig(steps=30_000), TrainConfig(steps=30_000, lr_means_decay_steps=0)
    assert learning_rates(run, 10_000, 3.0, 10_000)["means"] == pytest.approx(1.6e-6 * 3.0)
    assert learning_rates(once, 10_000, 3.0, 10_000)["means"] == pytest.approx(
        1.6e-4 * 3.0 * 0.01 ** (1 / 3)
    )  # 0 asks for one decay over the run, whatever the strategy's choice

    class EveryFive(DefaultStrategy):
        lr_means_decay_steps = 5

    for strategy, period in ((EveryFive(), 5), (MCMCStrategy(), 100)):
        config = TrainConfig(steps=100, device="cpu", backend="reference")
        trainer = Trainer(make_scene(), config, strategy=strategy)
        trainer.run(10)
        means = next(g for g in trainer.optimizer.param_groups if g["name"] == "means")
        assert means["lr"] == pytest.approx(1.6e-4 * trainer.extent * 0.01 ** (9 / period))


def test_optimizer_groups_are_named_and_settable() -> None:
    params = {"means": nn.Parameter(torch.zeros(2, 3)), "sh0": nn.Parameter(torch.zeros(2, 1, 3))}
    opt = make_optimizer(params, {"means": 0.1, "sh0": 0.2})
    assert [(g["name"], g["lr"]) for g in opt.param_groups] == [("means", 0.1), ("sh0", 0.2)]
    assert opt.defaults["eps"] == 1e-15
    set_learning_rates(opt, {"means": 0.3, "sh0": 0.4})
    assert [g["lr"] for g in opt.param_groups] == [0.3, 0.4]


def test_gaussian_adam_is_torch_adam_off_the_gpu() -> None:
    gen = torch.Generator().manual_seed(0)
    shapes = {"means": (5, 3), "scales": (5, 3), "shN": (5, 15, 3)}
    ours = {k: nn.Parameter(torch.randn(s, generator=gen)) for k, s in shapes.items()}
    theirs = {k: nn.Parameter(v.detach().clone()) for k, v in ours.items()}
    rates = {"means": 0.01, "scales": 0.005, "shN": 0.001}
    opt = make_optimizer(ours, rates)
    ref = torch.optim.Adam([{"params": [p], "lr": rates[k]} for k, p in theirs.items()], eps=1e-15)
    for _ in range(3):
        for k in ours:
            ours[k].grad = theirs[k].grad = torch.randn(shapes[k], generator=gen)
        opt.step()
        ref.step()
    for k in ours:
        assert torch.equal(ours[k], theirs[k])
    saved = opt.state_dict()
    saved["param_groups"][0]["fused"] = True  # as a fused torch Adam writes it
    again = make_optimizer({k: nn.Parameter(v.detach().clone()) for k, v in ours.items()}, rates)
    again.load_state_dict(saved)
    assert all(g["fused"] is None for g in again.param_groups)
    assert float(next(iter(again.state.values()))["step"]) == 3.0


def test_the_one_launch_adam_takes_only_float32_host_step_states() -> None:
    from gsnb.train.optim import _kernel_state

    p = torch.zeros(4, 3)
    good = {
        "step": torch.tensor(1.0),
        "exp_avg": torch.zeros(4, 3),
        "exp_avg_sq": torch.zeros(4, 3),
    }
    assert _kernel_state(good, p)
    assert not _kernel_state(good | {"exp_avg_sq": torch.zeros(4, 3, dtype=torch.float64)}, p)
    assert not _kernel_state(good | {"exp_avg": torch.zeros(3, 4).t()}, p)


def test_a_trainer_starts_steps_and_saves_without_importing_torch_dynamo(tmp_path) -> None:
    """torch's optimizers import torch._dynamo (over a second) on their first add_param_group,
    step, zero_grad or state_dict; a trainer's optimizers (Gaussians, exposures, poses) do
    not, nor does a step taken back (a rebin or an out-of-memory error clears the gradients)."""
    import subprocess
    import sys

    from gsnb.data.synthetic import make_synthetic_scene

    make_synthetic_scene(tmp_path / "scene", num_views=3, size=(16, 12), num_points=20, samples=1)
    script = f"""
import sys
from gsnb.data.dataset import load_dataset
from gsnb.train import TrainConfig, Trainer
config = TrainConfig(steps=5, device="cpu", exposure=True, pose_refine=True)
trainer = Trainer(load_dataset({str(tmp_path / "scene")!r}), config)
trainer.run(3)
state = trainer.optimizer.state_dict()
trainer.optimizer.load_state_dict(state)
corrections = trainer.corrections.state_dict()
trainer.corrections.load_state_dict(corrections)
trainer.optimizer.zero_grad(set_to_none=True)
trainer.optimizer.zero_grad(set_to_none=False)
trainer.corrections.exposure.optimizer.zero_grad()
trainer.corrections.poses.optimizer.zero_grad()
print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_adam_without_the_dynamo_wrappers_saves_and_loads_as_torch_adam() -> None:
    from gsnb.train.optim import Adam

    p, q = nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(3))
    ours, theirs = Adam([p], lr=0.1), torch.optim.Adam([q], lr=0.1)
    for param, opt in ((p, ours), (q, theirs)):
        param.grad = torch.tensor([1.0, -2.0, 3.0])
        opt.step()
    assert torch.equal(p, q)
    assert str(ours.state_dict()) == str(theirs.state_dict())
    fresh = Adam([nn.Parameter(torch.ones(3))], lr=0.5)
    fresh.load_state_dict(theirs.state_dict())
    assert fresh.param_groups[0]["lr"] == 0.1
    assert torch.equal(fresh.state_dict()["state"][0]["exp_avg"], theirs.state[q]["exp_avg"])


def test_a_gated_update_needs_the_fused_kernel() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    opt = GaussianAdam([{"params": [p], "lr": 0.1, "name": "x"}])
    p.grad = torch.ones(3)
    assert not opt._fused()  # a CPU tensor: torch's Adam
    with pytest.raises(ValueError, match="fused kernel"):
        opt.update(torch.zeros(3, dtype=torch.float64))
    assert torch.equal(p, torch.ones(3))  # refused before anything changed
    opt.update()
    assert float(opt.state[p]["step"]) == 1.0
    opt.update()
    opt.uncount()
    assert float(opt.state[p]["step"]) == 1.0
    opt.uncount()  # the last update's counts only, and once
    assert float(opt.state[p]["step"]) == 1.0
    first = GaussianAdam([{"params": [p], "lr": 0.1, "name": "x"}])
    first.update()
    first.uncount()  # back to no update at all: no state either
    assert not first.state.get(p)


def _refuse_launches(monkeypatch) -> None:
    """The one-launch path taken, and its kernel refusing every launch."""
    from gsnb import kernels

    def refused(**_):
        raise RuntimeError("adam_step: refused")

    monkeypatch.setattr(GaussianAdam, "_fused", lambda self: True)
    monkeypatch.setattr(kernels, "adam_step", refused)


@pytest.mark.parametrize("updated_before", [True, False])
def test_a_launch_that_fails_changes_no_state(monkeypatch, updated_before) -> None:
    # The one-launch path advances Adam's step counts, and makes a parameter's state on its
    # first update, only once its launches went out.
    p = torch.nn.Parameter(torch.ones(3))
    opt = GaussianAdam([{"params": [p], "lr": 0.1, "name": "x"}])
    p.grad = torch.ones(3)
    if updated_before:
        opt.update()  # torch's Adam on the CPU: one step counted
    _refuse_launches(monkeypatch)
    with pytest.raises(RuntimeError, match="refused"):
        opt.update()
    if updated_before:
        assert float(opt.state[p]["step"]) == 1.0
    else:
        assert not opt.state.get(p)


def test_a_launch_names_the_leading_values_of_each_row_it_updates(monkeypatch) -> None:
    # What reaches the kernel: each tensor as rows of its parameter's rows, every value of
    # them unless the launch names fewer; all of them without a name; steps counted once.
    from gsnb import kernels

    seen = []
    monkeypatch.setattr(GaussianAdam, "_fused", lambda self: True)
    monkeypatch.setattr(kernels, "adam_step", lambda **kw: seen.append(kw))
    shapes = {"means": (5, 3), "opacities": (5,), "shN": (5, 15, 3)}
    params = {k: torch.nn.Parameter(torch.zeros(s)) for k, s in shapes.items()}
    opt = GaussianAdam([{"params": [p], "lr": 0.1, "name": k} for k, p in params.items()])
    for p in params.values():
        p.grad = torch.ones_like(p)
    assert opt.launch(active={"shN": 9, "absent": 2})
    assert seen[-1]["row_values"] == [3, 1, 45] and seen[-1]["active_values"] == [3, 1, 9]
    assert opt.launch(active={"shN": 99})  # at most the row
    assert seen[-1]["row_values"] == () and seen[-1]["active_values"] == ()
    assert opt.launch()
    assert seen[-1]["row_values"] == ()
    assert all(float(opt.state[p]["step"]) == 3.0 for p in params.values())
