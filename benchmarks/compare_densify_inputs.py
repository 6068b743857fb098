"""What densification sees from gsnb's renderer and from gsplat's, on one model.

Trains ``--steps`` steps on the fox (downscale 2, gsnb's renderer, seed 0), then
renders every training view of that one model twice, with gsnb's renderer (the
trainer's default) and with gsplat 1.5.3's ``rasterization``, backpropagates the
trainer's loss through each, and compares what the default strategy accumulates:
which (view, Gaussian) pairs count as visible (``radii > 0``), the normalised
screen-space gradient norms, how many Gaussians would be densified at the
2e-4 threshold, and the relative L2 difference of images and parameter gradients.

    python benchmarks/compare_densify_inputs.py --data <fox> --out DIR --steps 3000

Writes ``DIR/densify_inputs_<steps>.json``. Needs a CUDA GPU and gsplat.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import build_gsnb, gsplat_renderer
from common import REPO, environment, write_json

from gsnb.train import TrainConfig, Trainer
from gsnb.train.losses import photometric_terms
from gsnb.train.rendering import render_model

RENDERERS = ("gsnb", "gsplat")
THRESHOLD = 2e-4  # grow_grad2d of gsplat's DefaultStrategy and of 3DGS


def render_view(trainer: Trainer, name: str, idx: int) -> dict[str, torch.Tensor]:
    """One training view through renderer ``name``: image, visibility and gradients."""
    splats = trainer.model.splats
    target = trainer.train_images.images[idx]
    height, width = target.shape[:2]
    viewmat, K = trainer.train_images.cameras[idx]
    renderer = trainer.default_renderer if name == "gsnb" else gsplat_renderer
    for p in splats.values():
        p.grad = None
    out = render_model(
        trainer.model, renderer, viewmat, K, width, height,
        sh_degree=trainer.sh_degree_now, background=trainer.background,
    )  # fmt: skip
    means2d = out.meta.means2d
    means2d.retain_grad()
    photometric_terms(out.rgb.squeeze(0), target, trainer.config.ssim_lambda)[0].backward()
    n = trainer.num_gaussians
    grad = means2d.grad.reshape(-1, n, 2)[0]
    scale = grad.new_tensor([width / 2, height / 2])  # the strategy's normalisation
    return {
        "rgb": out.rgb.detach().clone(),
        "visible": (out.meta.radii.reshape(-1, n, 2)[0] > 0).all(-1),
        "means2d": grad.clone(),
        "norm": (grad * scale).norm(dim=-1),
        **{k: p.grad.clone() for k, p in splats.items() if p.grad is not None},
    }


def compare(trainer: Trainer) -> dict[str, Any]:
    """Accumulate both renderers' densification statistics over all training views."""
    n, device = trainer.num_gaussians, trainer.model.splats["means"].device
    grad2d = {k: torch.zeros(n, device=device) for k in RENDERERS}
    count = {k: torch.zeros(n, device=device) for k in RENDERERS}
    rel: dict[str, list[float]] = {}
    mismatch = 0
    for idx in range(len(trainer.train_images)):
        views = {name: render_view(trainer, name, idx) for name in RENDERERS}
        for name, v in views.items():
            grad2d[name] += torch.where(v["visible"], v["norm"], 0.0)
            count[name] += v["visible"].float()
        a, b = views["gsnb"], views["gsplat"]
        mismatch += int((a["visible"] != b["visible"]).sum())
        for key in ("rgb", "means2d", *trainer.model.splats.keys()):
            if key in a and key in b:
                err = (a[key] - b[key]).norm() / b[key].norm().clamp_min(1e-30)
                rel.setdefault(key, []).append(float(err))
    mean = {k: grad2d[k] / count[k].clamp_min(1) for k in RENDERERS}
    high = {k: mean[k] > THRESHOLD for k in RENDERERS}
    return {
        "gaussians": n,
        "views": len(trainer.train_images),
        "visible_pairs": {k: int(count[k].sum()) for k in RENDERERS},
        "visible_pairs_differing": mismatch,
        "above_threshold": {k: int(high[k].sum()) for k in RENDERERS}
        | {"both": int((high["gsnb"] & high["gsplat"]).sum()), "threshold": THRESHOLD},
        "relative_l2_per_view": {
            k: {"mean": float(torch.tensor(v).mean()), "max": float(torch.tensor(v).max())}
            for k, v in rel.items()
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "fox"))
    parser.add_argument("--out", required=True, help="folder for densify_inputs_<steps>.json")
    parser.add_argument("--steps", type=int, default=3000, help="training steps before comparing")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("compare_densify_inputs needs a CUDA GPU", file=sys.stderr)
        return 1
    from gsnb.data.dataset import load_dataset

    data = load_dataset(args.data, downscale=2, test_every=8)
    build_gsnb()
    config = TrainConfig(steps=args.steps, seed=0, device="cuda", downscale=2, backend="cuda")
    trainer = Trainer(data, config)
    trainer.run(progress=True)
    result = {"benchmark": "compare_densify_inputs", "steps": args.steps}
    result |= compare(trainer) | {"env": environment()}
    out = Path(args.out) / f"densify_inputs_{args.steps}.json"
    write_json(out, result)
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
