"""benchmarks/continue_recipes.py continues one checkpoint under each recipe's live knobs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gsnb.data.dataset import load_dataset
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.train import TrainConfig, Trainer
from gsnb.train.strategy import DefaultStrategy

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import continue_recipes  # noqa: E402


def checkpoint(tmp_path: Path) -> Path:
    """A run of 12 steps on a tiny synthetic scene that refines every 5 steps from step 5."""
    scene = make_synthetic_scene(tmp_path / "scene", num_views=6, size=24, num_points=80)
    run = tmp_path / "run"
    # a checkpoint every 2 steps: a continuation that wrote to the run folder would show
    config = TrainConfig(steps=12, test_every=3, out_dir=str(run), device="cpu", checkpoint_every=2)
    strategy = DefaultStrategy(refine_start_iter=4, refine_every=5, reset_every=1000)
    trainer = Trainer(load_dataset(scene, test_every=3), config, strategy=strategy)
    trainer.run()
    return trainer.save_checkpoint()


def test_each_recipe_continues_the_same_checkpoint(tmp_path: Path) -> None:
    saved = checkpoint(tmp_path)
    before = {p.name: p.read_bytes() for p in saved.parent.rglob("*") if p.is_file()}
    recipes = tmp_path / "recipes.json"
    wide = {"refine_scale2d_stop_iter": 100, "grow_scale2d": 1e-3}  # every visible splat
    recipes.write_text(json.dumps({"default": {}, "wide": {"strategy_kwargs": wide}}))
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "continue_recipes.py"), str(saved), "--recipes",
         str(recipes), "--steps", "9", "--out", str(tmp_path / "out"), "--no-progress"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    runs = json.loads((tmp_path / "out" / "continue_recipes.json").read_text())["runs"]
    # the run folder, its checkpoint and metrics are as they were
    assert {p.name: p.read_bytes() for p in saved.parent.rglob("*") if p.is_file()} == before
    plain, split = runs["default"], runs["wide"]
    assert plain["from_step"] == split["from_step"] == 12
    assert plain["to_step"] == split["to_step"] == 21
    assert plain["knobs"] == {} and split["knobs"] == wide
    # both refine at steps 15 and 20 (metrics count from 1): the wide recipe splits more
    assert [e["step"] for e in split["events"]] == [16, 21]
    assert [e["step"] for e in plain["events"]] in ([16, 21], [16], [21], [])
    grown = split["events"][0]
    assert grown["split"] > sum(e.get("split", 0) for e in plain["events"][:1])
    assert split["gaussians"] > plain["gaussians"]
    for run in (plain, split):
        assert 0 < run["test_psnr"] < 100 and len(run["views"]) == 2
        assert sum(run["views"].values()) / 2 == pytest.approx(run["test_psnr"], abs=2e-3)


def test_a_recipe_a_started_run_cannot_take_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="strategy mcmc"):
        continue_recipes.live_knobs({"strategy": "mcmc"}, "default")
    with pytest.raises(ValueError, match="normalize_world"):
        continue_recipes.live_knobs({"dataset": {"normalize_world": True}}, "default")
    saved = checkpoint(tmp_path)
    with pytest.raises(ValueError, match="unknown knob"):  # fixed at the start
        continue_recipes.continue_recipe(saved, {"sh_degree": 1}, 3, progress=False)


def test_a_named_recipe_continues_as_its_own_change_alone() -> None:
    """A recipe measured on 3DGS's schedule sets its own knob, not that whole schedule, on a
    checkpoint of today's defaults; the recipe ``3dgs`` sets the schedule."""
    import quality_sweep

    assert set(quality_sweep.CHANGES) == set(quality_sweep.RECIPES)
    (scale2d,) = quality_sweep.load_recipes("scale2d", own_change=True).values()
    assert continue_recipes.live_knobs(scale2d, "default") == {"refine_scale2d_stop_iter": 4000}
    (whole,) = quality_sweep.load_recipes("scale2d").values()  # as the sweep trains it
    assert continue_recipes.live_knobs(whole, "default")["opacity_reset"] is True
    (three,) = quality_sweep.load_recipes("3dgs", own_change=True).values()
    assert continue_recipes.live_knobs(three, "default")["refine_stop_iter"] == 15000
