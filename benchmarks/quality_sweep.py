"""Several training recipes, several runs each, sharing a GPU or several: their test PSNR side by
side.

A run's test PSNR on the fox varies by about 0.3 dB from run to run (the backward pass sums
with float atomics, so a seed does not repeat a run on a GPU), so comparing two recipes takes
about nine runs of each. This starts ``benchmarks/quality_run.py`` processes, ``--parallel``
at a time, seed by seed across the recipes (so a sweep cut short by ``--deadline`` leaves the
recipes within one run of each other, failed runs aside), and writes ``OUT/quality_sweep.json``
after every finished run:
the runs, each recipe's mean, SD and standard error, and each recipe's difference from
``--baseline`` with the standard error of that difference. Runs that share a GPU are not speed
measurements.

Recipes are named in ``RECIPES`` or given as a JSON file mapping a name to
``{"strategy": "default"|"mcmc", "strategy_kwargs": {...}, "config": {...}, "dataset": {...}}``
(``dataset``: ``{"normalize_world": true}``, see ``quality_run.py``). A JSON recipe changes
gsnb's defaults; the named ones other than ``default`` change 3DGS's schedule (``THREE_DGS``,
the recipe ``3dgs``), which was the default when they were measured::

    python benchmarks/quality_sweep.py .device/fox --recipes default,noreset,random_rotation \\
        --runs 9 --parallel 12 --steps 7000 --out out/sweep

``--anchor RUN_SH`` adds gsplat's own ``simple_trainer.py`` as the recipe ``anchor``, run
through the offline wrapper ``run.sh`` (``../shared/anchors/gsplat-simple-trainer``, copied
into a git-ignored folder) in the same pool, so that gsnb's recipes and the trainer users
know share one machine and one JSON; ``--baseline anchor`` compares every recipe with it::

    python benchmarks/quality_sweep.py .device/fox --recipes default,normalize_world \\
        --anchor .device/anchor/run.sh --baseline anchor --runs 4 --steps 30000 --out out/30k

``--screen R --keep K`` spends the runs where they can still change a decision: once every
recipe has finished its first ``R`` runs, only the ``K`` recipes of highest mean test PSNR go
on to ``--runs`` (the baseline and the anchor always do; :func:`screen`). A kept recipe's mean
over all its runs is biased upwards (its first runs chose it): ``summary_after_screen``
compares the recipes over the later runs only::

    python benchmarks/quality_sweep.py .device/fox --recipes default,noreset,mcmc,sh_int500 \\
        --runs 8 --screen 3 --keep 1 --out out/screened

Most of that spread comes from a few test views (on the fox, the two cameras farthest from
any training camera read 1-2.5 dB SD apart from run to run, the other seven 0.05-0.6 dB).
``view_spread`` gives each view's run-to-run SD within a recipe, pooled over the recipes, and
each recipe's ``steady`` entry its mean over the views within ``--steady-sd`` (1 dB) with its
difference from the baseline: a diagnostic that resolves in a few runs what the plain mean
takes dozens for. The test PSNR over every view stays the measure. Which views pass the
rule changes from sweep to sweep (a steady view can swing in a few runs); ``--steady-views``
names the set instead, so that sweeps compare over the same views::

    python benchmarks/quality_sweep.py .device/fox --recipes default,noreset --runs 3 \\
        --steady-views 0001.jpg,0009.jpg,0022.jpg,0032.jpg,0046.jpg,0073.jpg,0084.jpg

``--gpus all`` (or ``--gpus 0,1``) spreads the runs over a machine's GPUs, each run on the
one with the fewest runs in flight (``CUDA_VISIBLE_DEVICES`` set per run; ``--parallel``
counts them all): on 8 GPUs a sweep of 96 runs at once, 12 a GPU, takes the time one GPU
takes for 12::

    python benchmarks/quality_sweep.py .device/fox --recipes default,3dgs --gpus all \\
        --parallel 96 --runs 24 --anchor .device/anchor/run.sh --out out/sweep8

On a CPU (``GSNB_RUN_DEVICE=cpu GSNB_RUN_BACKEND=reference``), a tiny scene::

    python benchmarks/quality_sweep.py SCENE --downscale 1 --steps 20 --runs 2 --parallel 2 \\
        --recipes default,noreset --out out/sweep_cpu
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gsnb.train.config import TrainConfig
from gsnb.train.losses import psnr_from_mse
from gsnb.train.strategy.default import THREE_DGS_SCHEDULE

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import environment, git_commit, write_json

RUN = Path(__file__).resolve().parent / "quality_run.py"
ANCHOR = "anchor"  # the recipe name of gsplat's simple_trainer.py (--anchor)
# 3DGS's densification schedule, the default strategy's until the default became the best of
# the recipes below (no opacity reset, grow_grad2d 1.5e-4, densification to step 7,000, the
# means' rate falling 100x every 10,000 steps; docs/quality.md)
THREE_DGS: dict[str, Any] = {
    "strategy_kwargs": dict(THREE_DGS_SCHEDULE),
    "config": {"lr_means_decay_steps": 0},
}
# Recipes as changes to 3DGS's schedule (what the default was when they were measured, so that
# a name means what the committed results say it did)
ON_3DGS: dict[str, dict[str, Any]] = {
    "noreset": {"strategy_kwargs": {"opacity_reset": False}},
    "random_rotation": {"config": {"init_rotation": "random"}},
    "noreset_random_rotation": {
        "strategy_kwargs": {"opacity_reset": False},
        "config": {"init_rotation": "random"},
    },
    "revised_opacity": {"strategy_kwargs": {"revised_opacity": True}},  # the default since 929f9cd
    "no_revised_opacity": {"strategy_kwargs": {"revised_opacity": False}},
    "antialiased_filter3d": {"config": {"rasterize_mode": "antialiased", "filter3d": True}},
    "antialiased": {"config": {"rasterize_mode": "antialiased"}},
    "filter3d": {"config": {"filter3d": True}},
    "mcmc": {"strategy": "mcmc"},
    # gsplat's normalize_world_space: the capture in a canonical frame (gsnb.data.normalize)
    "normalize_world": {"dataset": {"normalize_world": True}},
    # The loss, colour and densification knobs (benchmarks/results/quality_knobs_h200.json)
    "sh1": {"config": {"sh_degree": 1}},
    "sh2": {"config": {"sh_degree": 2}},
    "sh_int500": {"config": {"sh_degree_interval": 500}},
    "sh_int250": {"config": {"sh_degree_interval": 250}},
    "lr_shN_x2": {"config": {"lr_shN": 2.5e-4}},
    "ssim0.1": {"config": {"ssim_lambda": 0.1}},
    "ssim0.3": {"config": {"ssim_lambda": 0.3}},
    "ssim0.4": {"config": {"ssim_lambda": 0.4}},
    "sh2_ssim0.1": {"config": {"sh_degree": 2, "ssim_lambda": 0.1}},
    "ssim0.3_sh_int500": {"config": {"ssim_lambda": 0.3, "sh_degree_interval": 500}},
    "stop6000": {"strategy_kwargs": {"refine_stop_iter": 6000}},
    "ssim0.3_noreset": {
        "config": {"ssim_lambda": 0.3},
        "strategy_kwargs": {"opacity_reset": False},
    },
    "ssim0.3_grow1.5e-4": {
        "config": {"ssim_lambda": 0.3},
        "strategy_kwargs": {"grow_grad2d": 1.5e-4},
    },
    "noreset_grow1.5e-4": {"strategy_kwargs": {"opacity_reset": False, "grow_grad2d": 1.5e-4}},
    # Pose refinement (gsplat's pose_opt) on the fox's right poses, from step 0 or later
    # (benchmarks/results/pose_start_7000_h200.json; pose_start_cpu.json: the synthetic
    # scene's exact poses on a CPU)
    "pose_refine": {"config": {"pose_refine": True}},
    "pose_refine_start1000": {"config": {"pose_refine": True, "pose_refine_start": 1000}},
    "pose_refine_start2000": {"config": {"pose_refine": True, "pose_refine_start": 2000}},
    "pose_refine_start3500": {"config": {"pose_refine": True, "pose_refine_start": 3500}},
    "pose_refine_start5000": {"config": {"pose_refine": True, "pose_refine_start": 5000}},
    # Pixel-GS's densification statistic: views weighted by the splat's screen extent
    "pixel_gs": {"strategy_kwargs": {"pixel_weighted": True}},
    # Error-based densification (Bulò et al. 2024) at its default threshold, half and twice
    # it (benchmarks/error_threshold.py compares the criteria on one model)
    "error_densify": {"strategy_kwargs": {"error_densify": True}},
    "error_densify_lo": {"strategy_kwargs": {"error_densify": True, "grow_error": 2.5e-6}},
    "error_densify_hi": {"strategy_kwargs": {"error_densify": True, "grow_error": 1e-5}},
    # ... under a cap on the Gaussians (their growth control), about the anchor's 30,000-step count
    "error_densify_cap400k": {"strategy_kwargs": {"error_densify": True, "cap_max": 400_000}},
    # The learning rates (3DGS's, which gsplat keeps) halved and doubled one at a time
    **{
        f"{name}_x{factor:g}": {"config": {name: value * factor}}
        for name in ("lr_means", "lr_scales", "lr_opacities", "lr_quats", "lr_sh0")
        for value in (getattr(TrainConfig(), name),)
        for factor in (0.5, 2.0)
    },
    # The two doublings that each read higher at 7,000 steps, together
    "lr_means_scales_x2": {
        "config": {name: getattr(TrainConfig, name) * 2 for name in ("lr_means", "lr_scales")}
    },
    # Exposure compensation of the training views, the test views held out whole and
    # rendered without one (the anchor's protocol, not 3DGS's right halves)
    "exposure_heldout": {"config": {"exposure": True, "train_test_exp": False}},
    # MCMC under smaller caps than gsplat's 1M
    "mcmc_300k": {"strategy": "mcmc", "strategy_kwargs": {"cap_max": 300_000}},
    "mcmc_500k": {"strategy": "mcmc", "strategy_kwargs": {"cap_max": 500_000}},
    # The best 7,000-step recipe with the filters against overfitting, or with pose refinement
    "noreset_grow1.5e-4_aa_f3d": {
        "strategy_kwargs": {"opacity_reset": False, "grow_grad2d": 1.5e-4},
        "config": {"rasterize_mode": "antialiased", "filter3d": True},
    },
    # ... with the anchor's 30,000-step count of Gaussians as a cap (their growth at 30,000
    # steps without one: 563k)
    "noreset_grow1.5e-4_aa_f3d_cap400k": {
        "strategy_kwargs": {"opacity_reset": False, "grow_grad2d": 1.5e-4, "cap_max": 400_000},
        "config": {"rasterize_mode": "antialiased", "filter3d": True},
    },
    "noreset_grow1.5e-4_pose2000": {
        "strategy_kwargs": {"opacity_reset": False, "grow_grad2d": 1.5e-4},
        "config": {"pose_refine": True, "pose_refine_start": 2000},
    },
    # Refinement by screen size until step 4,000 (nerfstudio splatfacto's schedule, gsplat's
    # thresholds), and a pause after each reset of the fox's 58 training views plus
    # refine_every (splatfacto's rule), alone and together
    "scale2d": {"strategy_kwargs": {"refine_scale2d_stop_iter": 4000}},
    "pause158": {"strategy_kwargs": {"pause_refine_after_reset": 158}},
    "scale2d_pause158": {
        "strategy_kwargs": {"refine_scale2d_stop_iter": 4000, "pause_refine_after_reset": 158}
    },
    "scale2d_aa_f3d": {
        "strategy_kwargs": {"refine_scale2d_stop_iter": 4000},
        "config": {"rasterize_mode": "antialiased", "filter3d": True},
    },
    # For 30,000 steps: densification stopped at 7,000 or 10,000 instead of 15,000. Both gsnb
    # and the anchor read lower at 30,000 than at 7,000 steps (31.7 and 31.8 against 32.0
    # dB), and more Gaussians read lower still there (noreset_grow1.5e-4: 563k, -0.09 dB):
    # the 7,000-step model, then optimised without growing
    "stop7000": {"strategy_kwargs": {"refine_stop_iter": 7000}},
    "stop10000": {"strategy_kwargs": {"refine_stop_iter": 10000}},
    # The best 7,000-step growth (no resets, a lower threshold: 32.17 dB, 341k Gaussians)
    # with densification stopped at 7,000 steps, so that a 30,000-step run keeps the
    # 7,000-step model's count (the same run as noreset_grow1.5e-4 at 7,000 steps)
    "noreset_grow1.5e-4_stop7000": {
        "strategy_kwargs": {"opacity_reset": False, "grow_grad2d": 1.5e-4, "refine_stop_iter": 7000}
    },
    # No opacity reset (what gsplat 1.5.3's simple_trainer does, which led gsnb's default by
    # 0.14-0.40 dB on the fox's steady views at 7,000 steps), with densification stopped at 7,000
    "noreset_stop7000": {"strategy_kwargs": {"opacity_reset": False, "refine_stop_iter": 7000}},
    # PhysGaussian's anisotropy regulariser at its weight (1) and a tenth of it: against the
    # long thin splats that read as streaks from test views nearer the fox than any training
    # camera (0110.jpg at 30,000 steps)
    "aniso1": {"config": {"aniso_reg": 1.0}},
    "aniso0.1": {"config": {"aniso_reg": 0.1}},
    # Every known difference from gsplat 1.5.3's simple_trainer taken its way at once: no
    # opacity reset, plain split opacities, random initial rotations, the canonical world frame
    "gsplat_like": {
        "strategy_kwargs": {"opacity_reset": False, "revised_opacity": False},
        "config": {"init_rotation": "random"},
        "dataset": {"normalize_world": True},
    },
    "stop7000_aa_f3d": {
        "strategy_kwargs": {"refine_stop_iter": 7000},
        "config": {"rasterize_mode": "antialiased", "filter3d": True},
    },
    # For 30,000 steps: the means' learning rate at 0.01 of its first value by step 10,000,
    # as in a 7,000-step run by its end, and down to 1e-6 by the last step. Evaluated every
    # 2,500 steps, the default's far test views (0097, 0110.jpg) fall while the geometry
    # still moves (steps 7,500-20,000); with this they fell less (2 runs: 25.2 and 25.6 dB at
    # 30,000 against 23.3 and 24.6). Alone and with densification stopped at 7,000 (same as
    # lr_means_final 1e-6 at 30,000 steps)
    "means_decay10k": {"config": {"lr_means_decay_steps": 10_000}},
    "stop7000_means_decay10k": {
        "strategy_kwargs": {"refine_stop_iter": 7000},
        "config": {"lr_means_decay_steps": 10_000},
    },
    # ... with the best 7,000-step growth (more Gaussians, which read lower at 30,000 steps)
    "noreset_grow1.5e-4_means_decay10k": {
        "strategy_kwargs": {"opacity_reset": False, "grow_grad2d": 1.5e-4},
        "config": {"lr_means_decay_steps": 10_000},
    },
    # ... and with densification stopped at 7,000 as well: the best 7,000-step model (it led
    # gsplat's trainer by 0.18 dB on identical factor-2 pixels), optimised on without growing.
    # The default since it was measured (the recipe "default")
    "noreset_grow1.5e-4_stop7000_means_decay10k": {
        "strategy_kwargs": {
            "opacity_reset": False,
            "grow_grad2d": 1.5e-4,
            "refine_stop_iter": 7000,
        },
        "config": {"lr_means_decay_steps": 10_000},
    },
    # For 7,000 steps: in the traced 30,000-step runs 0097.jpg fell already between steps
    # 5,000 and 7,500 (26.3 to 25.0 dB); the means at 0.01 of their first rate by step 3,500
    # or 5,000
    "means_decay3500": {"config": {"lr_means_decay_steps": 3500}},
    "means_decay5000": {"config": {"lr_means_decay_steps": 5000}},
}


def on_3dgs(recipe: dict[str, Any]) -> dict[str, Any]:
    """``recipe`` with 3DGS's schedule (``THREE_DGS``) under its own settings; an MCMC recipe
    takes only the config part (its strategy has no such fields).

    Example:
        >>> on_3dgs({"strategy_kwargs": {"opacity_reset": False}})["strategy_kwargs"]
        {'opacity_reset': False, 'grow_grad2d': 0.0002, 'refine_stop_iter': 15000}
    """
    out = {k: v for k, v in recipe.items() if k not in ("strategy_kwargs", "config")}
    out["config"] = THREE_DGS["config"] | recipe.get("config", {})
    if recipe.get("strategy", "default") == "default":
        out["strategy_kwargs"] = THREE_DGS["strategy_kwargs"] | recipe.get("strategy_kwargs", {})
    elif "strategy_kwargs" in recipe:
        out["strategy_kwargs"] = recipe["strategy_kwargs"]
    return out


# Changes to the current default: the loss and learning-rate knobs that each read higher than
# 3DGS's schedule at 7,000 steps (quality_knobs_h200.json: ssim0.3 +0.14 and +0.18, standard
# errors 0.11 and 0.14; quality_lr_error_7000_h200.json: lr_means_x2 +0.12, 0.12; sh_int500
# +0.09, 0.12), the three together, the two filters that read +0.71 dB at 30,000 steps (2
# runs), and a lower growth threshold: at 7,000 steps every recipe above +0.1 dB kept more
# Gaussians (docs/quality.md)
ON_DEFAULT: dict[str, dict[str, Any]] = {
    "default+ssim0.3": {"config": {"ssim_lambda": 0.3}},
    "default+lr_means_x2": {"config": {"lr_means": 2 * TrainConfig.lr_means}},
    "default+sh_int500": {"config": {"sh_degree_interval": 500}},
    "default+ssim0.3_lr_means_x2_sh_int500": {
        "config": {
            "ssim_lambda": 0.3,
            "lr_means": 2 * TrainConfig.lr_means,
            "sh_degree_interval": 500,
        }
    },
    "default+aa_f3d": {"config": {"rasterize_mode": "antialiased", "filter3d": True}},
    "default+grow1.2e-4": {"strategy_kwargs": {"grow_grad2d": 1.2e-4}},
}

RECIPES: dict[str, dict[str, Any]] = {
    "default": {},
    "3dgs": THREE_DGS,
    **{name: on_3dgs(recipe) for name, recipe in ON_3DGS.items()},
    **ON_DEFAULT,
}
# Each named recipe's own change, without the schedule it was measured on: what a recipe
# changes in a run that has started from a checkpoint (continue_recipes.py)
CHANGES: dict[str, dict[str, Any]] = {
    "default": {},
    "3dgs": THREE_DGS,
    **ON_3DGS,
    **ON_DEFAULT,
}


def load_recipes(spec: str, own_change: bool = False) -> dict[str, dict[str, Any]]:
    """``spec``: comma-separated names of ``RECIPES``, or the path of a JSON file of recipes.
    With ``own_change``, a named recipe is its change alone (``CHANGES``): ``noreset`` without
    the rest of 3DGS's schedule.

    Example:
        >>> sorted(load_recipes("default,noreset"))
        ['default', 'noreset']
        >>> load_recipes("noreset", own_change=True)
        {'noreset': {'strategy_kwargs': {'opacity_reset': False}}}
    """
    if spec.endswith(".json"):
        recipes = json.loads(Path(spec).read_text())
        if not isinstance(recipes, dict) or not all(isinstance(v, dict) for v in recipes.values()):
            raise ValueError(f"{spec}: expected a JSON object of name -> recipe objects")
    else:
        names = [n for n in spec.split(",") if n]
        unknown = [n for n in names if n not in RECIPES]
        if unknown:
            raise ValueError(f"unknown recipes {unknown}; known: {', '.join(RECIPES)}")
        recipes = {n: (CHANGES if own_change else RECIPES)[n] for n in names}
    for name, recipe in recipes.items():
        extra = set(recipe) - {"strategy", "strategy_kwargs", "config", "dataset"}
        if extra:
            raise ValueError(f"recipe {name!r}: unknown keys {sorted(extra)}")
    return recipes


def command(name: str, recipe: dict[str, Any], seed: int, args: argparse.Namespace) -> list[str]:
    """The ``quality_run.py`` command line of one run."""
    return [
        sys.executable, str(RUN), name, str(seed), str(args.steps), str(args.data),
        str(args.downscale), recipe.get("strategy", "default"),
        json.dumps(recipe.get("strategy_kwargs", {})), json.dumps(recipe.get("config", {})),
        json.dumps(recipe.get("dataset", {})),
    ]  # fmt: skip


def anchor_command(run_sh: Path, seed: int, args: argparse.Namespace) -> list[str]:
    """The command line of one run of gsplat's ``simple_trainer.py`` through ``run_sh``."""
    return [
        "bash",
        str(run_sh),
        str(args.data),
        str(args.downscale),
        str(args.steps),
        f"sweep{seed}",
    ]


def anchor_row(stdout: str) -> dict[str, Any] | None:
    """The result of an anchor run, from the JSON line ``run.sh`` prints, as a sweep row
    (``psnr``, ``ssim``, ``n`` Gaussians, ``wall_s`` its training time), or None.

    Example:
        >>> anchor_row('[setup] ...' + chr(10) + '{"anchor": "gsplat", "psnr": 32.1, "ssim": 0.9, '
        ...            '"num_gaussians": 220000, "train_s": 61.1}')
        {'psnr': 32.1, 'ssim': 0.9, 'n': 220000, 'wall_s': 61.1, 'anchor': 'gsplat'}
    """
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict) and "anchor" in result and "psnr" in result:
            return {
                "psnr": result["psnr"],
                "ssim": result.get("ssim"),
                "n": result.get("num_gaussians"),
                "wall_s": result.get("train_s"),
                "anchor": result["anchor"],
            }
    return None


def anchor_views(renders: Path, steps: int, names: list[str]) -> dict[str, float]:
    """Each test view's PSNR in an anchor run, from the ``[photo | render]`` PNGs that
    ``simple_trainer.py`` writes (``renders/val_step{steps - 1}_{i:04d}.png``), named by
    ``names`` (the test views in order); empty when the count does not match. The PNGs hold
    8-bit values, so a view's figure here differs slightly from the float PSNR that
    ``simple_trainer.py`` averages into the run's own.

    Example:
        >>> import numpy as np, tempfile
        >>> from PIL import Image
        >>> folder = Path(tempfile.mkdtemp())
        >>> pair = np.zeros((2, 4, 3), np.uint8); pair[:, 2:] = 10  # photo 0, render 10
        >>> Image.fromarray(pair).save(folder / "val_step9_0000.png")
        >>> anchor_views(folder, 10, ["a.jpg"])
        {'a.jpg': 28.131}
    """
    import numpy as np
    from PIL import Image

    files = sorted(renders.glob(f"val_step{steps - 1}_*.png"))
    if len(files) != len(names):
        return {}
    views = {}
    for name, file in zip(names, files, strict=True):
        pair = np.asarray(Image.open(file).convert("RGB"), dtype=np.float64) / 255.0
        width = pair.shape[1] // 2
        mse = float(np.mean((pair[:, :width] - pair[:, width : 2 * width]) ** 2))
        views[name] = round(psnr_from_mse(mse), 3)
    return views


def unbiased_views(views: dict[str, float], psnr: float) -> tuple[dict[str, float], float]:
    """An anchor run's per-view PSNRs from its 8-bit PNGs (:func:`anchor_views`), corrected to
    the run's own float figure ``psnr``, and the correction.

    ``simple_trainer.py`` writes each ``[photo | render]`` pair as ``(x * 255).astype(uint8)``:
    truncation, whose error, independent of the render's, adds about the same mean square
    ``delta`` to every view (about 5e-6, ``(0.5 ** 2 + 1 / 12) / 255 ** 2``, where the photo's
    values survive it), and reads each view some 0.05-0.08 dB low at 32-34 dB. ``delta`` is
    the one value that brings the views' mean PSNR, each from ``mse - delta``, to the float
    ``psnr`` that ``simple_trainer.py`` averages itself; gsnb's per-view figures are float.

    Example:
        >>> def db(mse): return -10 * math.log10(mse)
        >>> png = {"a": db(1e-3 + 5e-6), "b": db(4e-4 + 5e-6)}  # float mean squares + 5e-6
        >>> fixed, delta = unbiased_views(png, (db(1e-3) + db(4e-4)) / 2)
        >>> fixed, f"{delta:.2e}"
        ({'a': 30.0, 'b': 33.979}, '5.00e-06')
    """
    if not views:
        return {}, 0.0
    mses = {name: 10 ** (-value / 10) for name, value in views.items()}
    smallest = min(mses.values())

    def mean_psnr(delta: float) -> float:
        return statistics.fmean(psnr_from_mse(m - delta) for m in mses.values())

    low, high = -max(mses.values()), smallest * (1 - 1e-9)
    while mean_psnr(low) > psnr:  # mean_psnr rises with delta: widen down until below
        low *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if mean_psnr(middle) < psnr else (low, middle)
    delta = (low + high) / 2
    return {name: round(psnr_from_mse(m - delta), 3) for name, m in mses.items()}, delta


def gpu_list(spec: str) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` entries ``--gpus`` names: none for ``""`` (every run sees
    what the environment gives), every GPU for ``"all"`` (those ``CUDA_VISIBLE_DEVICES``
    already names, else every one torch counts), else the comma-separated entries.

    Example:
        >>> gpu_list(""), gpu_list("0,2")
        ([], ['0', '2'])
    """
    if not spec:
        return []
    if spec != "all":
        return [g.strip() for g in spec.split(",") if g.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        found = [g.strip() for g in visible.split(",") if g.strip()]
    else:
        import torch

        found = [str(i) for i in range(torch.cuda.device_count())]
    if not found:
        raise ValueError("--gpus all: no GPU is visible to torch")
    return found


def least_loaded(gpus: list[str], busy: list[str]) -> str | None:
    """The GPU of ``gpus`` with the fewest of the runs in flight (``busy``, one entry a run),
    the first such; None without ``gpus``.

    Example:
        >>> least_loaded(["0", "1", "2"], ["0", "1", "0"])
        '2'
    """
    if not gpus:
        return None
    return min(gpus, key=busy.count)


def one_run(
    cmd: list[str], log: Path, timeout: float | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run one training process; its RESULT row (or an anchor's, :func:`anchor_row`), or the
    tail of its output when it failed (or ran past ``timeout`` seconds)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as err:
        text = (err.stdout or b"").decode(errors="replace") + (err.stderr or b"").decode(
            errors="replace"
        )
        log.write_text(text)
        return {"error": f"ran past {timeout} s", "returncode": None}
    log.write_text(done.stdout + done.stderr)
    rows = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    anchor = None if rows else anchor_row(done.stdout)
    if done.returncode != 0 or not (rows or anchor):
        return {"error": (done.stderr or done.stdout)[-1500:], "returncode": done.returncode}
    return anchor if anchor is not None else json.loads(rows[-1].removeprefix("RESULT "))


def view_means(runs: list[dict[str, Any]], key: str = "views") -> dict[str, float]:
    """Each test view's mean PSNR over the runs that report it (``quality_run.py``'s
    ``views``, or ``views_dc``: rendered with SH degree 0 alone), to see where a recipe gains
    or loses.

    Example:
        >>> view_means([{"views": {"a.jpg": 30.0, "b.jpg": 32.0}}, {"views": {"a.jpg": 31.0}}])
        {'a.jpg': 30.5, 'b.jpg': 32.0}
    """
    per: dict[str, list[float]] = {}
    for row in runs:
        for view, psnr in row.get(key, {}).items():
            per.setdefault(view, []).append(psnr)
    return {view: round(statistics.fmean(v), 3) for view, v in per.items()}


def trace_means(runs: list[dict[str, Any]], steady: list[str] | None = None) -> dict[int, Any]:
    """Per evaluation step of the runs that traced one (``quality_run.py``'s ``trace``, a
    recipe with ``eval_every``): the mean test PSNR over those runs, each view's mean, and
    with ``steady`` the mean over those views alone. Steps that not every traced run reached
    are left out, so each mean is over the same runs.

    Example:
        >>> first = [[10, 30.0, {"a": 32.0, "b": 28.0}], [20, 31.0, {"a": 33.0, "b": 29.0}]]
        >>> second = [[10, 29.0, {"a": 31.0, "b": 27.0}]]  # stopped before step 20
        >>> runs = [{"trace": first}, {"trace": second}, {"psnr": 30.0}]
        >>> trace_means(runs, ["a"])
        {10: {'runs': 2, 'psnr': 29.5, 'views': {'a': 31.5, 'b': 27.5}, 'steady': 31.5}}
    """
    traces = [
        {step: (psnr, views) for step, psnr, views in r["trace"]} for r in runs if r.get("trace")
    ]
    if not traces:
        return {}
    steps = sorted(set.intersection(*(set(t) for t in traces)))
    out: dict[int, Any] = {}
    for step in steps:
        views = view_means([{"views": t[step][1]} for t in traces])
        mean = round(statistics.fmean(t[step][0] for t in traces), 3)
        entry: dict[str, Any] = {"runs": len(traces), "psnr": mean, "views": views}
        if steady and all(v in views for v in steady):
            entry["steady"] = round(statistics.fmean(views[v] for v in steady), 3)
        out[step] = entry
    return out


def view_spread(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Each test view's run-to-run SD of PSNR within a recipe, pooled over the recipes that
    have two or more runs reporting it (the runs' ``views``).

    A view that a capture barely constrains (far from every training camera) can read
    several dB apart from one run of a recipe to the next, and then decides most of the
    difference between two recipes' means; this says which views those are.

    Example:
        >>> rows = [{"name": "a", "views": {"near": 33.0, "far": 24.0}},
        ...         {"name": "a", "views": {"near": 33.2, "far": 28.0}},
        ...         {"name": "b", "views": {"near": 33.4, "far": 27.0}}]
        >>> view_spread(rows)
        {'near': 0.141, 'far': 2.828}
    """
    per: dict[str, dict[str, list[float]]] = {}
    for row in runs:
        for view, psnr in row.get("views", {}).items():
            if math.isfinite(psnr):
                per.setdefault(view, {}).setdefault(row.get("name", ""), []).append(psnr)
    spread = {}
    for view, groups in per.items():
        repeated = [v for v in groups.values() if len(v) > 1]
        if repeated:
            dof = sum(len(v) - 1 for v in repeated)
            pooled = sum((len(v) - 1) * statistics.variance(v) for v in repeated) / dof
            spread[view] = round(math.sqrt(pooled), 3)
    return spread


def steady_views(spread: dict[str, float], max_sd: float) -> list[str]:
    """The views whose pooled run-to-run SD (:func:`view_spread`) is at most ``max_sd``;
    none when every view is (nothing then to set apart).

    Example:
        >>> steady_views({"near": 0.14, "far": 2.8, "side": 0.4}, 1.0)
        ['near', 'side']
    """
    steady = [view for view, sd in spread.items() if sd <= max_sd]
    return steady if len(steady) < len(spread) else []


def named_views(spec: str, test_names: list[str]) -> list[str]:
    """The views of ``--steady-views`` (comma-separated names of the capture's test views),
    in the order given; a name that is not a test view is an error that lists them.

    Example:
        >>> named_views("b.jpg, a.jpg", ["a.jpg", "b.jpg", "c.jpg"])
        ['b.jpg', 'a.jpg']
    """
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise ValueError(
            f"--steady-views {spec!r} names no views: give test views, comma-separated"
        )
    unknown = [n for n in names if n not in test_names]
    if unknown:
        raise ValueError(
            f"--steady-views: {unknown} not among the capture's test views {test_names}"
        )
    return names


def _compare(values: dict[str, list[float]], baseline: str, out: dict[str, Any], key: str):
    """``out[name][key]``: each recipe's difference from ``baseline`` and its standard error."""
    base = values.get(baseline, [])
    for name, psnr in values.items():
        if name != baseline and len(psnr) > 1 and len(base) > 1:
            se = math.hypot(
                statistics.stdev(psnr) / math.sqrt(len(psnr)),
                statistics.stdev(base) / math.sqrt(len(base)),
            )
            diff = statistics.fmean(psnr) - statistics.fmean(base)
            out[name][key] = {"difference": round(diff, 3), "se": round(se, 3)}


def _stats(values: list[float]) -> dict[str, Any]:
    """Runs, mean, SD and standard error of ``values``."""
    entry: dict[str, Any] = {"runs": len(values)}
    if values:
        entry["mean"] = round(statistics.fmean(values), 3)
    if len(values) > 1:
        entry["sd"] = round(statistics.stdev(values), 3)
        entry["se"] = round(statistics.stdev(values) / math.sqrt(len(values)), 3)
    return entry


def summarize(
    runs: list[dict[str, Any]], names: list[str], baseline: str, steady: list[str] | None = None
) -> dict[str, Any]:
    """Per recipe: runs, mean, SD, standard error, Gaussians; and the difference from baseline.

    With ``steady`` (views, from :func:`steady_views`), each recipe's ``steady`` entry gives
    the same over the mean PSNR of those views alone, per run, with its difference from the
    baseline (``vs_baseline``): a comparison that the few views read far apart from run to
    run do not drown. It is a diagnostic beside the test PSNR, which stays the measure: its
    standard errors, from few runs and over views chosen for their small spread, run low.

    Example:
        >>> rows = [{"name": "a", "psnr": 30.0, "n": 5}, {"name": "a", "psnr": 31.0, "n": 7},
        ...         {"name": "b", "psnr": 31.5, "n": 6}, {"name": "b", "psnr": 32.5, "n": 6}]
        >>> s = summarize(rows, ["a", "b"], "a")
        >>> s["b"]["mean"], s["b"]["vs_baseline"]["difference"], s["b"]["vs_baseline"]["se"]
        (32.0, 1.5, 0.707)
        >>> rows = [{"name": n, "psnr": 0.0, "n": 1, "views": {"near": x, "far": y}}
        ...         for n, x, y in [("a", 33.0, 24.0), ("a", 33.2, 28.0),
        ...                         ("b", 33.5, 27.0), ("b", 33.5, 23.0)]]
        >>> summarize(rows, ["a", "b"], "a", ["near"])["b"]["steady"]["vs_baseline"]
        {'difference': 0.4, 'se': 0.1}
    """
    out: dict[str, Any] = {}
    for name in names:
        psnr = [r["psnr"] for r in runs if r.get("name") == name and "psnr" in r]
        stats = _stats(psnr)
        entry: dict[str, Any] = {"runs": len(psnr), "psnr": psnr}
        if psnr:
            entry["mean"] = stats["mean"]
            entry["gaussians_mean"] = round(
                statistics.fmean(r["n"] for r in runs if r.get("name") == name and "n" in r)
            )
        if len(psnr) > 1:
            entry["sd"], entry["se"] = stats["sd"], stats["se"]
        for key in ("views", "views_dc"):
            views = view_means([r for r in runs if r.get("name") == name], key)
            if views:
                entry[key] = views
        trace = trace_means([r for r in runs if r.get("name") == name], steady)
        if trace:
            entry["trace"] = trace
        out[name] = entry
    exact = {
        name: [r["psnr"] for r in runs if r.get("name") == name and "psnr" in r] for name in out
    }
    _compare(exact, baseline, out, "vs_baseline")
    if steady:
        means = {
            name: [
                statistics.fmean(r["views"][v] for v in steady)
                for r in runs
                if r.get("name") == name
                and all(math.isfinite(r.get("views", {}).get(v, math.nan)) for v in steady)
            ]
            for name in out
        }
        for name, values in means.items():
            if values:
                out[name]["steady"] = _stats(values) | {"views": list(steady)}
        _compare(
            {n: v for n, v in means.items() if v},
            baseline,
            {n: out[n]["steady"] for n, v in means.items() if v},
            "vs_baseline",
        )
    return out


def summary_line(label: str, entry: dict[str, Any], baseline: str) -> str:
    """``label`` with a summary entry's mean, SD, standard error and difference from the
    baseline, as far as the entry has them.

    Example:
        >>> summary_line("b", {"mean": 32.0, "sd": 0.5, "se": 0.35,
        ...                    "vs_baseline": {"difference": 1.5, "se": 0.707}}, "a")
        'b, 32.000 dB (SD 0.500, SE 0.350), +1.500 ± 0.707 against a'
    """
    line = label
    if "mean" in entry:
        line += f", {entry['mean']:.3f} dB"
    if "sd" in entry:
        line += f" (SD {entry['sd']:.3f}, SE {entry['se']:.3f})"
    if "vs_baseline" in entry:
        vs = entry["vs_baseline"]
        line += f", {vs['difference']:+.3f} ± {vs['se']:.3f} against {baseline}"
    return line


def trace_line(label: str, trace: dict[int, Any]) -> str:
    """``label`` with each traced step's mean test PSNR (and over the steady views).

    Example:
        >>> trace_line("a", {10: {"psnr": 29.5, "steady": 31.5}, 20: {"psnr": 30.0}})
        'a: step 10 29.50 (steady 31.50), step 20 30.00'
    """
    parts = []
    for step, entry in trace.items():
        part = f"step {step} {entry['psnr']:.2f}"
        if "steady" in entry:
            part += f" (steady {entry['steady']:.2f})"
        parts.append(part)
    return f"{label}: " + ", ".join(parts)


def screen(
    runs: list[dict[str, Any]], names: list[str], keep: int, always: set[str]
) -> tuple[list[str], dict[str, float | None]]:
    """The recipes that go on after screening, and the mean test PSNR of those that do not.

    The ``keep`` recipes of highest mean PSNR among those not in ``always`` go on, with every
    one in ``always`` (the baseline, the anchor); a recipe whose runs all failed (or gave no
    finite PSNR) has no mean and is dropped first.

    Example:
        >>> rows = [{"name": "base", "psnr": 31.0}, {"name": "a", "psnr": 31.5},
        ...         {"name": "b", "psnr": 30.5}, {"name": "c", "psnr": 32.0}]
        >>> screen(rows, ["base", "a", "b", "c"], keep=1, always={"base"})
        (['base', 'c'], {'a': 31.5, 'b': 30.5})
    """
    means: dict[str, float | None] = {}
    for name in names:
        psnr = [r["psnr"] for r in runs if r.get("name") == name and "psnr" in r]
        mean = statistics.fmean(psnr) if psnr else math.nan
        means[name] = mean if math.isfinite(mean) else None
    ranked = sorted(
        (n for n in names if n not in always),
        key=lambda n: -math.inf if means[n] is None else means[n],
        reverse=True,
    )
    kept = set(ranked[:keep]) | (set(names) & always)
    return [n for n in names if n in kept], {n: means[n] for n in names if n not in kept}


def held_out_names(data: Path) -> list[str]:
    """The names of a capture's test views in order (gsnb's split, every 8th view, which is
    ``simple_trainer.py``'s too)."""
    from gsnb.data.dataset import load_dataset

    return [view.name for view in load_dataset(data, downscale=1).test]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="dataset folder (COLMAP or transforms.json)")
    parser.add_argument("--recipes", default="default,noreset", help="names or a JSON file")
    parser.add_argument("--baseline", help="recipe the others are compared with (default: first)")
    parser.add_argument("--runs", type=int, default=9, help="runs per recipe (default 9)")
    parser.add_argument("--parallel", type=int, default=12, help="runs at once (default 12)")
    parser.add_argument("--steps", type=int, default=7000)
    parser.add_argument("--downscale", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--deadline", type=float, default=0.0, help="start no run after this many seconds (0: none)"
    )
    parser.add_argument(
        "--run-timeout", type=float, default=3600.0, help="seconds before a run counts as failed"
    )
    parser.add_argument(
        "--anchor", type=Path, help="run.sh of the gsplat simple_trainer anchor: adds recipe anchor"
    )
    parser.add_argument(
        "--anchor-work", type=Path, default=Path("/tmp/gs_anchor"),
        help="the anchor's work folder (its setup, once per machine, and its runs)",
    )  # fmt: skip
    parser.add_argument(
        "--screen", type=int, default=0,
        help="after this many runs of every recipe keep only the --keep best (0: no screening)",
    )  # fmt: skip
    parser.add_argument(
        "--keep",
        type=int,
        default=1,
        help="recipes kept by --screen besides the baseline and the anchor (default 1)",
    )
    parser.add_argument(
        "--steady-sd",
        type=float,
        default=1.0,
        help="views whose run-to-run SD within a recipe is at most this (dB) are compared "
        "apart too, as each recipe's 'steady' entry (default 1.0)",
    )
    parser.add_argument(
        "--steady-views",
        default="",
        help="comma-separated test views for the 'steady' entries instead of --steady-sd's "
        "rule, so that sweeps compare over the same views",
    )
    parser.add_argument(
        "--gpus",
        default="",
        help="spread the runs over these GPUs: 'all' or indices such as 0,1 (default: each "
        "run sees the GPUs the environment gives)",
    )
    parser.add_argument("--out", type=Path, default=Path("out/quality_sweep"))
    args = parser.parse_args()
    try:
        gpus = gpu_list(args.gpus)
    except ValueError as exc:
        parser.error(str(exc))
    recipes = load_recipes(args.recipes)
    if args.anchor is not None:
        if not args.anchor.is_file():
            parser.error(f"--anchor {args.anchor}: no such file (the anchor's run.sh)")
        if ANCHOR in recipes:
            parser.error(f"a recipe may not be named {ANCHOR!r} with --anchor")
        recipes[ANCHOR] = {
            "gsplat": "examples/simple_trainer.py default",
            "run_sh": str(args.anchor),
        }
    names = list(recipes)
    fixed: list[str] = []
    if args.steady_views:
        try:
            fixed = named_views(args.steady_views, held_out_names(args.data))
        except (ValueError, OSError) as exc:
            parser.error(str(exc))
    baseline = args.baseline or names[0]
    if baseline not in recipes:
        parser.error(f"--baseline {baseline!r} is not one of the recipes {names}")
    if args.runs < 1 or args.parallel < 1:
        parser.error("--runs and --parallel must be at least 1")
    if args.screen < 0 or args.keep < 0:
        parser.error("--screen and --keep must not be negative")
    if args.screen >= args.runs or args.keep >= len(set(names) - {baseline, ANCHOR}):
        args.screen = 0  # every recipe runs --runs times anyway
    screened_from = args.first_seed + args.screen if args.screen else None
    screening: dict[str, Any] = {}
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    jobs = [
        (name, seed)
        for seed in range(args.first_seed, args.first_seed + args.runs)
        for name in names
    ]
    info = environment() | {"commit": git_commit()}
    runs: list[dict[str, Any]] = []
    started = time.monotonic()

    def save() -> tuple[dict[str, float], list[str], dict[str, Any]]:
        """Write the sweep so far; its view spread, steady views and summary."""
        spread = view_spread(runs)
        steady = fixed or steady_views(spread, args.steady_sd)
        summary = summarize(runs, names, baseline, steady)
        write_json(
            args.out / "quality_sweep.json",
            {
                "benchmark": "quality_sweep",
                "environment": info,
                "settings": {
                    k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                },
                "recipes": recipes,
                "baseline": baseline,
                "note": "runs shared their device: quality is comparable, wall_s is not a speed",
                "gpus": gpus,
                "view_spread": spread,
                "steady_views": steady,
                "summary": summary,
                **({"screening": screening} if screening else {}),
                **(
                    {
                        "summary_after_screen": summarize(
                            after_screen(), screening["kept"], baseline, steady
                        )
                    }
                    if screening
                    else {}
                ),
                "runs": runs,
            },
        )
        return spread, steady, summary

    setup = args.anchor_work / "setup.json"

    def startable(name: str, seed: int) -> bool:
        # runs past the screening wait until it is decided, but for those it always keeps
        held = screened_from is not None and seed >= screened_from and not screening
        if held and name not in (baseline, ANCHOR):
            return False
        # the anchor sets itself up (gsplat's JIT build) in its first run: the others wait
        # for that to finish rather than build the same folder at once
        if name != ANCHOR or setup.is_file():
            return True
        return not any(n == ANCHOR for n, _ in pending.values())

    def after_screen() -> list[dict[str, Any]]:
        # the kept recipes' means over all their runs favour them (the screen chose them by
        # their first runs); these later runs compare them without that bias
        return [r for r in runs if screened_from is not None and r["seed"] >= screened_from]

    def decide_screening() -> None:
        unfinished = [s for _, s in [*queue, *pending.values()] if s < (screened_from or 0)]
        if screened_from is None or screening or unfinished:
            return
        kept, dropped = screen(runs, names, args.keep, {baseline, ANCHOR})
        screening.update(
            after_runs=args.screen,
            kept=kept,
            dropped={n: None if m is None else round(m, 3) for n, m in dropped.items()},
        )
        queue[:] = [job for job in queue if job[0] in kept]
        bar.total = len(runs) + len(pending) + len(queue)
        bar.refresh()
        tqdm.write(f"screening after {args.screen} runs: going on with {', '.join(kept)}")

    env = os.environ | {"GS_ANCHOR_WORK": str(args.anchor_work)}
    test_names = held_out_names(args.data) if args.anchor is not None else []
    pending: dict[Future, tuple[str, int]] = {}
    on_gpu: dict[Future, str | None] = {}
    with ThreadPoolExecutor(args.parallel) as pool, tqdm(total=len(jobs), unit="run") as bar:
        queue = list(jobs)
        while queue or pending:
            decide_screening()
            late = args.deadline > 0 and time.monotonic() - started > args.deadline
            while len(pending) < args.parallel and not late:
                ready = [job for job in queue if startable(*job)]
                if not ready:
                    break
                name, seed = ready[0]
                queue.remove((name, seed))
                log = args.out / "logs" / f"{name}_{seed}.log"
                if name == ANCHOR:
                    cmd = anchor_command(args.anchor, seed, args)
                else:
                    cmd = command(name, recipes[name], seed, args)
                gpu = least_loaded(gpus, [g for g in on_gpu.values() if g is not None])
                run_env = env if gpu is None else env | {"CUDA_VISIBLE_DEVICES": gpu}
                future = pool.submit(one_run, cmd, log, args.run_timeout, run_env)
                pending[future], on_gpu[future] = (name, seed), gpu
            if late:
                queue.clear()
            if not pending:
                break
            done, _ = wait(pending, timeout=5.0, return_when=FIRST_COMPLETED)
            for future in done:
                name, seed = pending.pop(future)
                gpu = on_gpu.pop(future)
                row = future.result() | {"name": name, "seed": seed}
                if gpu is not None:
                    row["gpu"] = gpu
                if name == ANCHOR and "psnr" in row:
                    folder = args.anchor_work / "results" / f"sweep{seed}" / "renders"
                    row["views_png"] = anchor_views(folder, args.steps, test_names)
                    row["views"], row["png_mse_offset"] = unbiased_views(
                        row["views_png"], row["psnr"]
                    )
                runs.append(row)
                bar.update()
                if "error" in row:
                    tqdm.write(f"{name} seed {seed} failed: {row['error'].splitlines()[-1:]}")
                save()
    spread, steady, summary = save()
    for name, entry in summary.items():
        print(summary_line(f"{name:28s} {entry['runs']} runs", entry, baseline))
    for name, entry in summary.items():
        part = entry.get("steady")
        if part and "mean" in part:
            print(summary_line(f"{name:28s} {len(part['views'])} steady views", part, baseline))
    for name, entry in summary.items():
        if entry.get("trace"):
            print(trace_line(f"{name:28s} trace", entry["trace"]))
    if steady and not fixed:
        unsteady = sorted(set(spread) - set(steady))
        print(f"views read far apart from run to run (SD > {args.steady_sd} dB): {unsteady}")
    print(f"wrote {args.out / 'quality_sweep.json'}")


if __name__ == "__main__":
    main()
