"""Which Gaussians the gradient criterion and the error criterion would grow, on one model.

Trains ``--steps`` steps (the default recipe) or loads ``--checkpoint``, then renders every
training view of that one model, back-propagates the trainer's loss and takes, per Gaussian,
what ``DefaultStrategy`` would refine on: the mean over the views of its normalised
screen-space gradient norm (against ``grow_grad2d``), and its largest share of a view's
error (``error_densify``, against ``grow_error``). Reports how many Gaussians each
threshold picks, the ``grow_error`` that picks as many as ``grow_grad2d`` does and how far
the two sets agree, and the shares' quantiles.

    python benchmarks/error_threshold.py --data <fox> --out DIR --steps 600 --downscale 2

Writes ``DIR/error_threshold_<steps>.json``. Runs on the CPU too (small downscales only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import environment, write_json
from compare_densify_inputs import render_view

from gsnb.data.dataset import load_dataset
from gsnb.train import DefaultStrategy, TrainConfig, Trainer
from gsnb.train.error_shares import error_shares, pixel_error
from gsnb.train.pose_refine import MovedGaussians
from gsnb.train.rendering import render_model


def statistics(trainer: Trainer) -> tuple[torch.Tensor, torch.Tensor]:
    """``(gradient [N], error [N])``: the mean normalised gradient norm over the training
    views that see each Gaussian, and its largest share of a view's error (per pixel)."""
    n = trainer.num_gaussians
    grad_sum = torch.zeros(n, device=trainer.device)
    count = torch.zeros(n, device=trainer.device)
    error = torch.zeros(n, device=trainer.device)
    black = torch.zeros(3, device=trainer.device)
    for idx in tqdm(range(len(trainer.train_images)), desc="views", leave=False):
        seen = render_view(trainer, "gsnb", idx)  # the trainer's render, loss and backward
        grad_sum += torch.where(seen["visible"], seen["norm"], 0.0)
        count += seen["visible"].float()
        target = trainer.train_images.images[idx]
        height, width = target.shape[:2]
        viewmat, K = trainer.train_images.cameras[idx]

        def draw(gaussians: MovedGaussians, viewmat=viewmat, K=K, width=width, height=height):
            return render_model(
                gaussians, trainer.default_renderer, viewmat, K, width, height,
                sh_degree=0, background=black,
            )  # fmt: skip

        shares = error_shares(trainer.model.splats, draw, pixel_error(seen["rgb"][0], target))
        error = torch.maximum(error, shares / (width * height))
    return grad_sum / count.clamp_min(1), error


def compare(gradient: torch.Tensor, error: torch.Tensor, grow_grad2d: float) -> dict[str, Any]:
    """How many each criterion picks, the matching ``grow_error`` and the sets' overlap."""
    by_gradient = gradient > grow_grad2d
    picked = int(by_gradient.sum())
    order = error.sort(descending=True).values
    matching = float(order[picked - 1]) if picked > 0 else float(order[0])
    by_error = error >= matching
    both = int((by_gradient & by_error).sum())
    levels = {"50%": 0.5, "90%": 0.9, "99%": 0.99, "99.9%": 0.999}
    quantiles = torch.quantile(error, torch.tensor(list(levels.values()), device=error.device))
    return {
        "gaussians": int(error.numel()),
        "picked_by_grow_grad2d": picked,
        "grow_error_picking_as_many": matching,
        "picked_by_both": both,
        "overlap_fraction": both / max(picked, 1),
        "error_quantiles": dict(zip(levels, quantiles.tolist(), strict=True)),
        "picked_by_grow_error": {
            f"{t:g}": int((error > t).sum()) for t in (1e-6, 2.5e-6, 5e-6, 1e-5, 2e-5)
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--downscale", type=int, default=2)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    data = load_dataset(args.data, downscale=args.downscale)
    config = TrainConfig(steps=args.steps, device=args.device, eval_every=0)
    trainer = Trainer(data, config, strategy=DefaultStrategy())
    trainer.run()
    gradient, error = statistics(trainer)
    result = {
        "benchmark": "the gradient and the error criteria of DefaultStrategy on one model",
        "environment": environment(),
        "data": f"{args.data.name}, downscale {args.downscale}",
        "steps": args.steps,
        "command": " ".join(sys.argv),
        **compare(gradient, error, DefaultStrategy().grow_grad2d),
    }
    print({k: v for k, v in result.items() if k != "environment"})
    write_json(args.out / f"error_threshold_{args.steps}.json", result)


if __name__ == "__main__":
    main()
