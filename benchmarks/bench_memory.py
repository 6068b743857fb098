"""Peak GPU memory of a training step, measured, beside gsnb.estimate_peak_memory.

A step is what the trainer does: render with the CUDA backend, the 3DGS loss
(0.8 L1 + 0.2 (1 - SSIM)) against a target image, backward, and an Adam step
over the INRIA parameters. Scenes: random clouds of 100k to 5M Gaussians (SH
degree 3) at 0.3 to 8 megapixels. The table (measured, estimated, error) goes
to --out as memory_h200.json.

    python benchmarks/bench_memory.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import environment, write_json

from gsnb.cameras import intrinsics, look_at
from gsnb.memory import estimate_peak_memory
from gsnb.model import GaussianModel
from gsnb.raster.scenes import random_gaussians
from gsnb.train.losses import photometric_loss

SIZES = {"0.3MP": (640, 480), "2MP": (1920, 1080), "8MP": (3840, 2160)}
COUNTS = (100_000, 500_000, 1_000_000, 2_000_000, 5_000_000)


def measure(n: int, width: int, height: int) -> tuple[int, float]:
    """Peak bytes of one step (everything it allocates, parameters included); tiles/splat."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    g = random_gaussians(n, sh_degree=3, scale_range=(0.001, 0.01), seed=n)
    splats = {
        "means": g["means"],
        "quats": g["quats"],
        "scales": torch.log(g["scales"]),
        "opacities": torch.logit(g["opacities"]),
        "sh0": g["colors"][:, :1],
        "shN": g["colors"][:, 1:],
    }
    model = GaussianModel(splats).cuda()
    optim = torch.optim.Adam(
        [{"params": [p], "lr": 1e-3} for p in model.splats.values()], eps=1e-15
    )
    view = look_at(torch.tensor([0.0, -0.8, -3.2]), torch.zeros(3))[None].cuda()
    K = intrinsics(width, height, 60.0, axis="x")[None].cuda()
    target = torch.rand(1, height, width, 3, device="cuda")
    tiles = 0.0
    for _ in range(2):  # the second step has Adam's state allocated
        out = model.render(view, K, width, height, with_depth=False, check_values=False)
        loss, _, _ = photometric_loss(out.rgb, target, 0.2)
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        visible = max(int(out.meta.visible.sum()), 1)
        tiles = float(out.meta.radii.prod(-1).float().sum()) / visible  # informative only
        del out, loss
    peak = torch.cuda.max_memory_allocated() - base
    del model, optim, target, splats, g
    return peak, tiles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    rows = []
    for n in COUNTS:
        for label, (w, h) in SIZES.items():
            peak, _ = measure(n, w, h)
            est = estimate_peak_memory(n, w, h, sh_degree=3)
            row = {
                "gaussians": n,
                "size": label,
                "width": w,
                "height": h,
                "measured_mib": round(peak / 2**20, 1),
                "estimated_mib": round(est / 2**20, 1),
                "error": round(est / peak - 1.0, 4),
            }
            rows.append(row)
            print(row, flush=True)
    worst = max(abs(r["error"]) for r in rows)
    write_json(
        args.out / "memory_h200.json",
        {"environment": environment(), "rows": rows, "worst_abs_error": worst},
    )
    print(f"worst relative error {worst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
