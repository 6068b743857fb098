"""Where a trained run's test-view error comes from: colour, camera pose, or the scene.

For each held-out view of a run, the PSNR of its render as evaluation sees it (``raw``), and
three oracle fits that look at the held-out photo itself:

- ``colour``: the render through the affine colour transform (3 x 4, least squares) that
  matches the photo best: what exposure or white balance of that one photo costs;
- ``pose``: the render from the camera pose that matches the photo best (a rigid correction
  of 6 numbers, Adam on the pixels' squared error with the Gaussians frozen): what the
  error of that photo's own pose costs;
- ``both``: the pose fit, then the colour fit.

The fits are not a protocol to report a model by (they use the test photos); they bound
what exposure compensation and pose refinement of the training views could ever give the
held-out views under the usual protocol, and tell a recipe's loss in the scene's structure
from a loss in colour or alignment. The same numbers from two recipes' runs say whether a
gain lies in what the scene reconstructs (``both`` moves) or in how it lines up (only
``raw`` moves)::

    python benchmarks/error_budget.py RUN_DIR --out DIR [--pose-steps 200]

``RUN_DIR`` is a ``gsnb train`` output folder (or a checkpoint); the dataset is the one the
run records (``--data`` for another path to it). Writes ``DIR/error_budget.json``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import environment, git_commit, write_json

from gsnb.data.dataset import load_dataset
from gsnb.train import Trainer
from gsnb.train.evaluation import image_metrics
from gsnb.train.pose_refine import MovedGaussians, move_splats, pose_difference
from gsnb.train.pose_refine import correction_matrices as corrections
from gsnb.train.rendering import render_model

Draw = Callable[[Tensor], Tensor]
"""``draw(params [6]) -> [H, W, 3]``: the view rendered with the pose correction ``params``."""


def psnr(render: Tensor, target: Tensor) -> float:
    """PSNR in dB of ``render`` (clamped to [0, 1], as evaluation does) against ``target``."""
    return image_metrics(render.detach(), target, with_lpips=False)[0]


def fit_colour(render: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """The least-squares affine colour transform ``A [3, 4]`` from ``render [H, W, 3]`` to
    ``target``, and the render through it.

    Example:
        >>> import torch
        >>> render = torch.rand(8, 8, 3, dtype=torch.float64)
        >>> target = 0.8 * render + 0.05
        >>> A, fitted = fit_colour(render, target)
        >>> bool(torch.allclose(fitted, target)), [round(v, 3) for v in A[0].tolist()]
        (True, [0.8, 0.0, 0.0, 0.05])
    """
    x = render.detach().reshape(-1, 3)
    x1 = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)  # [P, 4]
    y = target.reshape(-1, 3).to(x1.dtype)
    # the normal equations in float64: 4 x 4, well conditioned unless the render is flat
    gram = (x1.T @ x1).double() + 1e-9 * torch.eye(4, dtype=torch.float64, device=x.device)
    A = torch.linalg.solve(gram, (x1.T @ y).double()).T.to(x.dtype)  # [3, 4]
    return A, (x1 @ A.T).reshape(render.shape)


def fit_pose(
    draw: Draw, target: Tensor, steps: int, lr: float = 1e-3
) -> tuple[Tensor, Tensor, list[float]]:
    """The pose correction ``[6]`` whose render matches ``target [H, W, 3]`` best (least
    squares), by Adam from zero with a cosine decay of ``lr``; the best of the steps it
    tried (zero included), that render and the PSNR of every step.

    Example:
        >>> import torch
        >>> shift = torch.tensor([0.0, 0, 0, 0.05, 0, 0])
        >>> def draw(p):  # a bright square that moves with the correction's first translation
        ...     x = torch.linspace(-1, 1, 32)[None, :, None]
        ...     return torch.sigmoid(20 * (0.5 - (x + p[3]).abs())).expand(32, 32, 3)
        >>> best, _, curve = fit_pose(draw, draw(shift).detach(), steps=150, lr=5e-3)
        >>> abs(float(best[3]) - 0.05) < 5e-3, curve[-1] > curve[0] + 20
        (True, True)
    """
    params = torch.zeros(6, device=target.device, requires_grad=True)
    optim = torch.optim.Adam([params], lr=lr)
    best, best_render, best_psnr = params.detach().clone(), None, -math.inf
    curve: list[float] = []
    for step in range(steps + 1):
        with torch.enable_grad():
            render = draw(params)
            loss = (render - target).square().mean()
        value = psnr(render, target)
        curve.append(value)
        if value > best_psnr:
            best, best_render, best_psnr = params.detach().clone(), render.detach(), value
        if step == steps:
            break
        optim.zero_grad(set_to_none=True)
        loss.backward()
        for group in optim.param_groups:
            group["lr"] = lr * 0.5 * (1.0 + math.cos(math.pi * step / steps))
        optim.step()
    assert best_render is not None
    return best, best_render, curve


def view_budget(trainer: Trainer, view: Any, target: Tensor, pose_steps: int, lr: float) -> dict:
    """The four PSNRs of one held-out view and the pose correction its fit found."""
    splats = {name: value.detach() for name, value in trainer.model.splats.items()}
    variances = (
        trainer.filter3d.variances(trainer.model.splats, trainer.step_count)
        if trainer.config.filter3d
        else None
    )
    viewmat = view.viewmat.to(trainer.device, torch.float32).reshape(1, 4, 4)
    K = view.K.to(trainer.device, torch.float32).reshape(1, 3, 3)
    extent = trainer.dataset.extent

    def draw(params: Tensor) -> Tensor:
        moved = MovedGaussians(move_splats(splats, viewmat[0], params, extent), (0.0, 0.0, 0.0))
        return render_model(
            moved, trainer.renderer, viewmat, K, view.width, view.height,
            sh_degree=trainer.sh_degree_now, background=trainer.background,
            rasterize_mode=trainer.config.rasterize_mode, filter3d=variances,
        ).rgb[0]  # fmt: skip

    with torch.no_grad():
        render = trainer.render_view(view, corrected=True).rgb[0]
    raw = psnr(render, target)
    colour = psnr(fit_colour(render, target)[1], target)
    params, posed, _ = fit_pose(draw, target, pose_steps, lr)
    angle, shift = pose_difference(
        corrections(params.double(), extent) @ viewmat[0].double(), viewmat[0].double()
    )
    return {
        "raw": round(raw, 3),
        "colour": round(colour, 3),
        "pose": round(psnr(posed, target), 3),
        "both": round(psnr(fit_colour(posed, target)[1], target), 3),
        "pose_degrees": round(math.degrees(float(angle)), 4),
        "pose_extents": round(float(shift) / extent, 5),
    }


def summary(views: dict[str, dict[str, float]]) -> dict[str, float]:
    """Means over the views, and what each fit adds to ``raw`` on average.

    Example:
        >>> s = summary({"a": {"raw": 30.0, "colour": 31.0, "pose": 30.5, "both": 31.5},
        ...              "b": {"raw": 32.0, "colour": 32.0, "pose": 33.5, "both": 33.5}})
        >>> s["raw"], s["colour_adds"], s["pose_adds"], s["both_add"]
        (31.0, 0.5, 1.0, 1.5)
    """
    means = {
        key: round(statistics.fmean(v[key] for v in views.values()), 3)
        for key in ("raw", "colour", "pose", "both")
    }
    return means | {
        "colour_adds": round(means["colour"] - means["raw"], 3),
        "pose_adds": round(means["pose"] - means["raw"], 3),
        "both_add": round(means["both"] - means["raw"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a gsnb train output folder or a checkpoint")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, help="the dataset, if not where the run records it")
    parser.add_argument("--pose-steps", type=int, default=200, help="Adam steps of a pose fit")
    parser.add_argument("--pose-lr", type=float, default=1e-3, help="their first learning rate")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="default: the run's device")
    args = parser.parse_args()
    if args.pose_steps < 0:
        parser.error("--pose-steps must not be negative")
    dataset = None
    if args.data is not None:
        from gsnb.train import checkpoint as ckpt

        config = ckpt.read_training_state(ckpt.newest_checkpoint(args.run)).config
        dataset = load_dataset(args.data, downscale=config.downscale, test_every=config.test_every)
    trainer = Trainer.resume_from(args.run, dataset, device=args.device)
    if not trainer.dataset.test:
        parser.error("the run's dataset has no held-out views (trained with test_every 0)")
    views: dict[str, dict[str, float]] = {}
    for view in tqdm(trainer.dataset.test, desc="held-out views", unit="view"):
        target = view.load_image().to(trainer.device)
        views[view.name] = view_budget(trainer, view, target, args.pose_steps, args.pose_lr)
    result = {
        "benchmark": "error_budget",
        "environment": environment() | {"commit": git_commit()},
        "run": str(args.run),
        "step": trainer.step_count,
        "num_gaussians": trainer.num_gaussians,
        "pose_steps": args.pose_steps,
        "pose_lr": args.pose_lr,
        "note": "colour, pose and both are oracle fits on the held-out photos themselves: "
        "bounds, not a protocol",
        "summary": summary(views),
        "views": views,
    }
    path = args.out / "error_budget.json"
    write_json(path, result)
    s = result["summary"]
    print(
        f"{len(views)} held-out views: raw {s['raw']:.2f} dB; the best colour transform adds "
        f"{s['colour_adds']:+.2f}, the best pose {s['pose_adds']:+.2f}, both {s['both_add']:+.2f}"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
