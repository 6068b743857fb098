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

``RUN_DIR`` is a ``gsnb train`` output folder (or a checkpoint), loaded on the device and
with the dataset the run records. Every number is taken where evaluation takes it: a view
with a learned pose correction or exposure (3DGS's test halves) starts from them, and under
that protocol only the right half counts, in the fits too. Writes ``DIR/error_budget.json``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import environment, git_commit, write_json

from gsnb.data.dataset import View
from gsnb.train import Trainer, losses
from gsnb.train.exposure import apply_exposure, left_columns
from gsnb.train.pose_refine import MovedGaussians, move_splats
from gsnb.train.rendering import render_model

Draw = Callable[[Tensor], Tensor]
"""``draw(params [6]) -> [H, W, 3]``: the view rendered with the pose correction ``params``."""


def psnr(render: Tensor, target: Tensor) -> float:
    """PSNR in dB of ``render`` (clamped to [0, 1], as evaluation does) against ``target``.

    Example:
        >>> import torch
        >>> round(psnr(torch.full((4, 4, 3), 1.5), torch.full((4, 4, 3), 0.9)), 2)
        20.0
    """
    # evaluation's PSNR (image_metrics) without its SSIM: the pose fit asks at every step
    return float(losses.psnr(render.detach().clamp(0.0, 1.0), target))


def fit_colour(render: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """The least-squares affine colour transform ``A [3, 4]`` from ``render [H, W, 3]``
    (clamped to [0, 1] as evaluation sees it, so that the identity is among the candidates)
    to ``target``, and the render through it.

    Example:
        >>> import torch
        >>> render = torch.rand(8, 8, 3, dtype=torch.float64)
        >>> target = 0.8 * render + 0.05
        >>> A, fitted = fit_colour(render, target)
        >>> bool(torch.allclose(fitted, target)), [round(v, 3) + 0 for v in A[0].tolist()]
        (True, [0.8, 0.0, 0.0, 0.05])
    """
    x = render.detach().clamp(0.0, 1.0).reshape(-1, 3).double()
    x1 = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)  # [P, 4]
    y = target.reshape(-1, 3).double()
    # the normal equations in float64: 4 x 4, well conditioned unless the render is flat
    gram = x1.T @ x1 + 1e-9 * torch.eye(4, dtype=torch.float64, device=x.device)
    A = torch.linalg.solve(gram, x1.T @ y).T  # [3, 4]
    return A.to(render.dtype), (x1 @ A.T).reshape(render.shape).to(render.dtype)


def fit_pose(
    draw: Draw, target: Tensor, steps: int, lr: float = 1e-3, start: Tensor | None = None
) -> tuple[Tensor, Tensor, list[float]]:
    """The pose correction ``[6]`` whose render matches ``target [H, W, 3]`` best (least
    squares), by Adam from ``start`` (default zero) with a cosine decay of ``lr``; the best
    of the steps it tried (``start`` included), that render and the PSNR of every step.

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
    first = torch.zeros(6, device=target.device) if start is None else start.detach()
    params = first.clone().to(target.device).requires_grad_(True)
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


def view_budget(
    trainer: Trainer, view: View, target: Tensor, pose_steps: int, lr: float
) -> dict[str, float]:
    """The four PSNRs of one held-out view and how far its pose fit moved the camera.

    The render is the one :meth:`Trainer.evaluate <gsnb.train.Trainer.evaluate>` scores:
    with the view's learned pose correction and exposure when it has them, on the right
    half under 3DGS's test-halves protocol; the fits start from it and see what it scores.
    """
    corrections = trainer.corrections
    index = corrections.index_of(view.name)
    splats = {name: value.detach() for name, value in trainer.model.splats.items()}
    variances = (
        trainer.filter3d.variances(trainer.model.splats, trainer.step_count)
        if trainer.config.filter3d
        else None
    )
    viewmat = view.viewmat.to(trainer.device, torch.float32).reshape(1, 4, 4)
    K = view.K.to(trainer.device, torch.float32).reshape(1, 3, 3)
    extent = trainer.dataset.extent
    learned = index is not None and corrections.poses.learned
    start = corrections.poses.params[index].detach() if learned else None
    exposure = None
    if trainer.config.exposure:  # its own, or (held out whole) the mean of the learned ones
        own = index is not None
        exposure = corrections.exposure.matrices[index].detach() if own else None
        exposure = corrections.exposure.mean() if exposure is None else exposure
    cut = left_columns(view.width) if corrections.metric_columns("test") else 0
    target = target[:, cut:]

    def draw(params: Tensor) -> Tensor:
        moved = MovedGaussians(move_splats(splats, viewmat[0], params, extent), (0.0, 0.0, 0.0))
        rgb = render_model(
            moved, trainer.renderer, viewmat, K, view.width, view.height,
            sh_degree=trainer.sh_degree_now, background=trainer.background,
            rasterize_mode=trainer.config.rasterize_mode, filter3d=variances,
        ).rgb[0]  # fmt: skip
        if exposure is not None:
            rgb = apply_exposure(rgb, exposure)
        return rgb[:, cut:]

    with torch.no_grad():
        render = trainer.render_view(view, corrected=True).rgb[0][:, cut:]
    raw = psnr(render, target)
    colour = psnr(fit_colour(render, target)[1], target)
    params, posed, _ = fit_pose(draw, target, pose_steps, lr, start=start)
    change = params - (torch.zeros_like(params) if start is None else start.to(params.device))
    return {
        "raw": round(raw, 3),
        "colour": round(colour, 3),
        "pose": round(psnr(posed, target), 3),
        "both": round(psnr(fit_colour(posed, target)[1], target), 3),
        # the fit's change to the correction: its angle, and its shift in scene extents
        "pose_degrees": round(math.degrees(float(change[:3].norm())), 4),
        "pose_extents": round(float(change[3:].norm()), 5),
    }


def summary(views: dict[str, dict[str, float]]) -> dict[str, float]:
    """Means over the views, and what each fit adds to ``raw`` on average.

    Example:
        >>> s = summary({"a": {"raw": 30.0, "colour": 31.0, "pose": 30.5, "both": 31.5},
        ...              "b": {"raw": 32.0, "colour": 32.0, "pose": 33.5, "both": 33.5}})
        >>> s["raw"], s["colour_adds"], s["pose_adds"], s["both_adds"]
        (31.0, 0.5, 1.0, 1.5)
    """
    means = {
        key: round(statistics.fmean(v[key] for v in views.values()), 3)
        for key in ("raw", "colour", "pose", "both")
    }
    return means | {
        "colour_adds": round(means["colour"] - means["raw"], 3),
        "pose_adds": round(means["pose"] - means["raw"], 3),
        "both_adds": round(means["both"] - means["raw"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a gsnb train output folder or a checkpoint")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pose-steps", type=int, default=200, help="Adam steps of a pose fit")
    parser.add_argument("--pose-lr", type=float, default=1e-3, help="their first learning rate")
    args = parser.parse_args()
    if args.pose_steps < 0:
        parser.error("--pose-steps must not be negative")
    trainer = Trainer.resume_from(args.run)
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
        f"{s['colour_adds']:+.2f}, the best pose {s['pose_adds']:+.2f}, both {s['both_adds']:+.2f}"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
