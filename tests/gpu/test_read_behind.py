"""Reading a step back during the next one (``Trainer.run`` and ``start``): the same run as
reading every step at once (``Trainer.step``), every step's metrics once and in order, and a
non-finite step skipped as if it had been read at once.

The fused step sums gradients with float atomics, so two runs agree to rounding, not bit
for bit, until rounding tips a densification threshold (assert_same_run); counts (steps,
skips, Adam's step counts, densification's view counts) agree exactly.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from gsnb.train import TrainConfig, Trainer, fused_step
from gsnb.train.health import TrainingHealthWarning
from gsnb.train.strategy import default
from tests.train.conftest import build_scene


def make(tmp_path, **config) -> Trainer:
    data = build_scene(tmp_path / "scene", size=48, views=4, gaussians=60, points=200)
    cfg = TrainConfig(**({"steps": 40, "device": "cuda", "backend": "cuda", "seed": 5} | config))
    # Refinement at 10, 15 and 20 (read at once), accumulation between (read behind).
    strategy = default.DefaultStrategy(refine_start_iter=9, refine_every=5, refine_stop_iter=21)
    return Trainer(data, cfg, strategy=strategy)


def behind_count(trainer: Trainer) -> list[int]:
    """Counts the steps read back during the next step or a flush (wraps ``_settle``)."""
    settled: list[int] = []
    real = trainer._settle

    def settle() -> None:
        if trainer._in_flight is not None:
            settled.append(trainer._in_flight.half.step)
        real()

    trainer._settle = settle  # type: ignore[method-assign]
    return settled


def assert_same_run(a: Trainer, b: Trainer, until: int) -> None:
    """Counts agree exactly; losses and Gaussian counts to rounding through step ``until``.

    Later the two runs part ways by more than rounding, whichever way they read their steps:
    the float atomics' order tips a densification threshold for some Gaussian, and the runs
    then split or clone different Gaussians, at different random offsets. So past ``until``
    each run changes its count only where it densifies, and the two end near each other.
    """
    assert [m.step for m in a.history] == [m.step for m in b.history]
    assert [m.skipped for m in a.history] == [m.skipped for m in b.history]
    assert a.skipped_steps == b.skipped_steps
    for x, y in zip(a.history, b.history, strict=True):
        if x.step <= until:
            assert abs(x.num_gaussians - y.num_gaussians) <= 2, x.step
            assert x.loss == pytest.approx(y.loss, rel=1e-3), x.step
    for k, p in a.model.splats.items():
        q = b.model.splats[k]
        assert float(a.optimizer.state[p]["step"]) == float(b.optimizer.state[q]["step"]), k
    for run in (a, b):
        for before, m in itertools.pairwise(run.history):
            assert m.num_gaussians == before.num_gaussians or m.events, m.step
    ends = [t.history[-1].num_gaussians for t in (a, b)]
    assert ends[0] == pytest.approx(ends[1], rel=0.1), ends
    tails = [sum(m.loss for m in t.history[-5:] if not m.skipped) for t in (a, b)]
    assert tails[0] == pytest.approx(tails[1], rel=0.2), tails


def test_a_run_read_behind_is_the_run_read_step_by_step(cuda_ext, tmp_path):
    behind, at_once = make(tmp_path / "a"), make(tmp_path / "b")
    settled = behind_count(behind)
    seen: list[int] = []
    behind.on_step(lambda m: seen.append(m.step))
    last = behind.run(30)
    for _ in range(30):
        at_once.step()
    assert last is not None and last.step == 30 and seen == list(range(1, 31))
    # Refinement (steps 10, 15 and 20, counted from 0) and the last step are read at once;
    # the others during the next step.
    assert not {10, 15, 20, 29} & set(settled) and len(settled) == 26
    assert behind._in_flight is None and not behind._ready
    assert sum(m.events.get("cloned", 0) + m.events.get("split", 0) for m in behind.history)
    assert_same_run(behind, at_once, until=10)


def test_a_non_finite_step_read_behind_is_skipped_as_at_once(cuda_ext, tmp_path, monkeypatch):
    # Step 5 (0-based 4) gets a NaN gradient: the gated Adam and accumulation skip it on the
    # device, and reading it back takes back its Adam step counts before step 6 updates.
    real = fused_step.forward_backward
    calls = {"n": 0}

    def poisoned(splats, *args, **kwargs):
        out = real(splats, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] % 100 == 5:
            splats["means"].grad[0, 0] = math.nan
        return out

    monkeypatch.setattr(fused_step, "forward_backward", poisoned)
    behind, at_once = make(tmp_path / "a"), make(tmp_path / "b")
    settled = behind_count(behind)
    with pytest.warns(TrainingHealthWarning, match="gradient is NaN"):
        behind.run(8)
    assert 4 in settled  # the poisoned step was read behind
    calls["n"] = 100
    with pytest.warns(TrainingHealthWarning, match="gradient is NaN"):
        for _ in range(8):
            at_once.step()
    assert behind.skipped_steps == 1 and behind.history[4].skipped
    assert_same_run(behind, at_once, until=8)
    # The accumulation skipped it too: about 60 views would count once more if not.
    counted = [float(t.strategy_state["count"].sum()) for t in (behind, at_once)]
    assert abs(counted[0] - counted[1]) <= 2, counted


def test_pause_returns_with_the_step_read_back(cuda_ext, tmp_path):
    trainer = make(tmp_path, steps=400)
    trainer.start()
    try:
        while trainer.step_count < 30:
            torch.cuda.synchronize()
        trainer.pause()
        assert trainer._in_flight is None
        assert trainer.history[-1].step == trainer.step_count
        count = trainer.step_count
        trainer.resume()
        while trainer.step_count < count + 20:
            torch.cuda.synchronize()
    finally:
        trainer.stop()
    steps = [m.step for m in trainer.history]
    assert steps == list(range(1, trainer.step_count + 1))


def test_checkpoints_hold_counted_steps(cuda_ext, tmp_path):
    out = tmp_path / "run"
    trainer = make(tmp_path, out_dir=str(out), checkpoint_every=7, checkpoint_minutes=0.0)
    trainer.run(16)
    resumed = Trainer.resume_from(out / "checkpoints" / "step_0000014.pt", trainer.dataset)
    assert resumed.step_count == 14
    assert [m.step for m in trainer.history] == list(range(1, 17))
    assert Trainer.resume_from(out, trainer.dataset).step_count == 16


def test_pose_refinement_reads_behind_until_its_corrections_learn(cuda_ext, tmp_path):
    # Before pose_refine_start the corrections' step does nothing and the step fuses; from
    # it on, each view's render moves with its correction and no step is read behind.
    trainer = make(tmp_path, pose_refine=True, pose_refine_start=25)
    settled = behind_count(trainer)
    trainer.run(30)
    assert settled and max(settled) < 25
    assert not {10, 15, 20} & set(settled)
    assert float(trainer.corrections.poses.params.abs().sum()) > 0  # learned from step 25
