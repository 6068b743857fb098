"""One training run of the fox (or any dataset) with a recipe, printed as one JSON line.

Runs of one recipe differ on a GPU even at one seed (float atomics in the backward), so
comparisons of recipes take several runs; many can share one GPU (quality is unaffected,
times then are not measurements). Used for ``results/quality_recipes_7000_h200.json``::

    python benchmarks/quality_run.py revised 0 7000 .device/fox 2 default \\
        '{"revised_opacity": true}' '{}'
    python benchmarks/quality_run.py aa 0 7000 .device/fox 2 default '{}' \\
        '{"rasterize_mode": "antialiased"}'

Arguments: NAME SEED STEPS DATA DOWNSCALE STRATEGY STRATEGY_KWARGS_JSON CONFIG_KWARGS_JSON
[DATASET_JSON]; ``DATASET_JSON`` ``{"normalize_world": true}`` trains in the canonical world frame
of ``gsnb.data.normalize`` (gsplat's ``normalize_world_space``).
``GSNB_RUN_DEVICE`` / ``GSNB_RUN_BACKEND`` (default ``cuda``) run it elsewhere.
``GSNB_RUN_RENDERS=DIR`` also writes each test view as ``DIR/NAME_SEED/VIEW.png``: the photo,
the render and their absolute error (x4) side by side, to see where a recipe loses.

Besides each test view's PSNR (``views``), the line gives it rendered with the colours' SH
degree 0 alone (``views_dc``, the view-independent part): a view that reads much higher without
the higher bands is one whose view-dependent colour extrapolates badly from the training
cameras' directions.

A recipe whose config sets ``eval_every`` adds ``trace``: ``[step, PSNR, {view: PSNR}]`` at each
of those evaluations, to see when in a run a test view falls (the run's own time then includes
them).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from gsnb.data.dataset import load_dataset
from gsnb.data.normalize import normalize_world
from gsnb.train import EvalResult, TrainConfig, Trainer
from gsnb.train.evaluation import evaluate_views
from gsnb.train.strategy import DefaultStrategy, MCMCStrategy

STRATEGIES = {"default": DefaultStrategy, "mcmc": MCMCStrategy}
"""The STRATEGY argument's names."""
DATASET_OPTIONS = frozenset({"normalize_world"})
"""The keys DATASET_JSON may hold."""


def save_renders(trainer: Trainer, folder: Path) -> None:
    """Each test view as one PNG: photo | render | absolute error x4 (clamped)."""
    folder.mkdir(parents=True, exist_ok=True)
    for view in trainer.dataset.test:
        photo = view.load_image()
        render = trainer.render_view(view, corrected=True).rgb[0].clamp(0, 1).float().cpu()
        error = ((render - photo).abs() * 4).clamp(0, 1)
        row = torch.cat([photo, render, error], dim=1)
        pixels = (row * 255).round().to(torch.uint8).numpy()
        Image.fromarray(np.ascontiguousarray(pixels)).save(folder / f"{Path(view.name).stem}.png")


def per_view(result: EvalResult) -> dict[str, float]:
    """Each view's PSNR (dB) in an evaluation, rounded as the RESULT row gives it."""
    return {view: round(value, 3) for view, value, _ in result.per_view}


def dc_views(trainer: Trainer) -> dict[str, float]:
    """Each test view's PSNR (dB) rendered with SH degree 0 alone, measured as evaluation
    measures it (:func:`gsnb.train.evaluation.evaluate_views`: clamped to [0, 1], the view's
    corrections applied, on the right halves under the test-halves exposure protocol)."""
    views = trainer.dataset.test
    result = evaluate_views(
        lambda view: trainer.render_view(view, sh_degree=0, corrected=True).rgb[0],
        views,
        [view.load_image().to(trainer.device) for view in views],
        trainer.step_count,
        right_half=trainer.corrections.metric_columns("test"),
    )
    return per_view(result)


def main() -> None:
    name, seed, steps, data, downscale, strategy, strategy_kw, config_kw = sys.argv[1:9]
    dataset_kw = json.loads(sys.argv[9]) if len(sys.argv) > 9 else {}
    unknown = set(dataset_kw) - DATASET_OPTIONS
    if unknown:
        known = ", ".join(sorted(DATASET_OPTIONS))
        raise SystemExit(f"unknown dataset options {sorted(unknown)}; known: {known}")
    make = STRATEGIES[strategy]
    config = TrainConfig(
        data=data,
        steps=int(steps),
        seed=int(seed),
        downscale=int(downscale),
        device=os.environ.get("GSNB_RUN_DEVICE", "cuda"),
        backend=os.environ.get("GSNB_RUN_BACKEND", "cuda"),
        **json.loads(config_kw),
    )
    dataset = load_dataset(data, downscale=int(downscale))
    if dataset_kw.get("normalize_world"):
        dataset, _ = normalize_world(dataset)
    trainer = Trainer(dataset, config, strategy=make(**json.loads(strategy_kw)))
    trace: list[list] = []
    untrace = trainer.on_eval(lambda r: trace.append([r.step, round(r.psnr, 3), per_view(r)]))
    cuda = torch.cuda.is_available() and config.device != "cpu"
    if cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    trainer.run(progress=False)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    untrace()
    result = trainer.evaluate()
    row = {
        "name": name,
        "seed": int(seed),
        "steps": int(steps),
        "psnr": round(result.psnr, 3),
        "ssim": round(result.ssim, 4),
        "n": trainer.num_gaussians,
        "wall_s": round(seconds, 1),
        "normalize_world": bool(dataset_kw.get("normalize_world")),
        "views": per_view(result),
        "views_dc": dc_views(trainer),
    }
    if trace:
        row["trace"] = trace
    print("RESULT " + json.dumps(row), flush=True)
    if os.environ.get("GSNB_RUN_RENDERS"):
        save_renders(trainer, Path(os.environ["GSNB_RUN_RENDERS"]) / f"{name}_{seed}")


if __name__ == "__main__":
    main()
