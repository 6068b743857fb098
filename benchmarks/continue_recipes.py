"""Continue one trained checkpoint under several recipes: what each does from the same model.

A whole run's test PSNR varies from run to run by more than most knobs change it
(``quality_sweep.py``), and on a CPU a whole run of a real capture takes hours. Continuing one
checkpoint for a few hundred steps under each recipe shows what the recipe does at that point
of training, from the same start: what each refine step clones, splits and prunes, the
Gaussian count, and the test PSNR and SSIM after (with each test view's PSNR). On a CPU the
continuation is deterministic: the same recipe gives the same numbers again::

    python benchmarks/continue_recipes.py RUN/checkpoint.pt --recipes default,scale2d \\
        --steps 300 --out DIR

Recipes are ``quality_sweep.py``'s, each as its own change (``CHANGES``: ``noreset`` sets
``opacity_reset`` alone, not the rest of 3DGS's schedule it was measured on, which would
change the checkpoint's own schedule beside it; the recipe ``3dgs`` sets that schedule), and
only live knobs can change in a run that has started: a recipe's ``strategy_kwargs`` and
``config`` are set through
:meth:`Trainer.set <gsnb.train.Trainer.set>`, and a recipe of another strategy, of dataset
options or of a knob fixed at the start is refused before any step. The recipes run in turn,
each from a fresh load of the checkpoint, in memory: nothing is written to the checkpoint's
run folder. Writes ``DIR/continue_recipes.json`` after each.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import environment, git_commit, write_json
from quality_sweep import load_recipes

from gsnb.train import Trainer
from gsnb.train.checkpoint import newest_checkpoint, read_training_state


def live_knobs(recipe: dict[str, Any], strategy: str) -> dict[str, Any]:
    """The knobs ``recipe`` (a ``quality_sweep.py`` recipe) sets, for a run of ``strategy``;
    ValueError for what a started run cannot change.

    Example:
        >>> live_knobs({"strategy_kwargs": {"grow_grad2d": 3e-4}, "config": {"lr_sh0": 1e-3}},
        ...            "default")
        {'grow_grad2d': 0.0003, 'lr_sh0': 0.001}
        >>> live_knobs({"strategy": "mcmc"}, "default")
        Traceback (most recent call last):
        ...
        ValueError: the recipe trains with strategy mcmc; the checkpoint's is default
    """
    wanted = recipe.get("strategy", "default")
    if wanted != strategy:
        raise ValueError(
            f"the recipe trains with strategy {wanted}; the checkpoint's is {strategy}"
        )
    if recipe.get("dataset"):
        raise ValueError(f"dataset options {sorted(recipe['dataset'])} apply at the start only")
    return {**recipe.get("strategy_kwargs", {}), **recipe.get("config", {})}


def continue_recipe(
    checkpoint: Path, knobs: dict[str, Any], steps: int, progress: bool = True
) -> dict[str, Any]:
    """Load ``checkpoint``, set ``knobs``, train ``steps`` more steps and evaluate the test
    views; returns the start and end steps, each step's events with the Gaussian count after
    it, the count, PSNR, SSIM and each test view's PSNR at the end, and the seconds taken."""
    trainer = Trainer.resume_from(checkpoint)
    # In memory only: no periodic checkpoint or metrics may land in the run folder the
    # checkpoint came from, whose own checkpoint is every recipe's start.
    trainer.config.out_dir = None
    trainer.set(**knobs)  # refused here, before any step, when not a live knob
    start = trainer.step_count
    events = []
    started = time.perf_counter()
    for _ in tqdm(range(steps), desc=f"{knobs or 'as saved'}", unit="step", disable=not progress):
        metrics = trainer.step()
        if metrics.events:
            events.append({"step": metrics.step, **metrics.events, "n": metrics.num_gaussians})
    seconds = time.perf_counter() - started
    result = trainer.evaluate()
    return {
        "knobs": knobs,
        "from_step": start,
        "to_step": trainer.step_count,
        "events": events,
        "gaussians": trainer.num_gaussians,
        "test_psnr": round(result.psnr, 3),
        "test_ssim": round(result.ssim, 4),
        "views": {name: round(psnr, 3) for name, psnr, _ in result.per_view},
        "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, help="a gsnb checkpoint (or run folder)")
    parser.add_argument("--recipes", required=True, help="quality_sweep.py recipe names or JSON")
    parser.add_argument("--steps", type=int, required=True, help="steps to continue each")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    recipes = load_recipes(args.recipes, own_change=True)
    # the checkpoint's settings only: each recipe loads the whole run (and its photos) anew
    strategy = read_training_state(newest_checkpoint(args.checkpoint)).strategy.name
    try:
        knobs = {name: live_knobs(recipe, strategy) for name, recipe in recipes.items()}
    except ValueError as err:
        parser.error(str(err))
    result: dict[str, Any] = {
        "benchmark": "continue_recipes",
        "environment": environment() | {"commit": git_commit()},
        "checkpoint": str(args.checkpoint),
        "steps": args.steps,
        "runs": {},
    }
    path = args.out / "continue_recipes.json"
    for name, chosen in knobs.items():
        run = continue_recipe(args.checkpoint, chosen, args.steps, not args.no_progress)
        result["runs"][name] = run
        write_json(path, result)
        print(
            f"{name}: steps {run['from_step']}-{run['to_step']}, {run['gaussians']:,} Gaussians, "
            f"test PSNR {run['test_psnr']:.3f} dB"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
