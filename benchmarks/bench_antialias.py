"""Anti-aliasing: test quality of classic, antialiased and antialiased + 3D filter training,
at the training resolution and at others.

Trains the fox (default ``.device/fox``) from scratch at ``--downscale`` (default 2) for
``--steps`` (default 7000) once per mode: ``classic`` (3DGS), ``antialiased`` (gsplat's
``rasterize_mode="antialiased"``: Mip-Splatting's 2D filter with opacity compensation) and
``antialiased+filter3d`` (plus Mip-Splatting's 3D filter). Each trained model is evaluated on
the held-out views (every 8th) by PSNR and SSIM:

- ``train_res``: at the training size, against the test photos;
- ``half`` and ``quarter``: rendered at 1/2 and 1/4 of the training size (intrinsics scaled)
  against the test photos area-downscaled to that size (zooming out: where classic 3DGS
  dilates small splats);
- ``double``: rendered at 2x the training size against the photos loaded at half the
  downscale (downscale 1 for a downscale 2 run; zooming in: where the 3D filter matters);
- ``lanczos_double``: rendered at the training size and lanczos-upscaled 2x
  (:func:`gsnb.export.upscale.lanczos_resize`, the path of ``gsnb video``) against the same
  double-size photos.

Writes ``OUT/antialias_<steps>.json`` with the GPU name, torch and gsnb versions, the commit,
the date and the command; runs of other modes already in that file (same data, steps,
downscale, seed and backend) are kept, so the modes can run as separate commands. On the GPU
machine (a few minutes per mode on one H200):

    python benchmarks/bench_antialias.py .device/fox --out $OUT
    python benchmarks/bench_antialias.py .device/fox --out $OUT --modes antialiased+filter3d

On a CPU, at a tiny size (a check of the script, not a measurement):

    python benchmarks/bench_antialias.py PATH --steps 30 --downscale 8 --backend reference \\
        --device cpu --max-init-points 2000 --max-views 2 --out /tmp/aa
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import environment, git_commit, write_json

import gsnb
from gsnb.data.dataset import SceneDataset, View, load_dataset
from gsnb.export.upscale import lanczos_resize
from gsnb.train import TrainConfig, Trainer
from gsnb.train.evaluation import image_metrics

MODES = {
    "classic": {"rasterize_mode": "classic", "filter3d": False},
    "antialiased": {"rasterize_mode": "antialiased", "filter3d": False},
    "antialiased+filter3d": {"rasterize_mode": "antialiased", "filter3d": True},
}


def scaled_camera(view: View, width: int, height: int) -> torch.Tensor:
    """``K [3, 3]`` of ``view`` for an image resized to ``width x height`` (pixel centres at
    ``i + 0.5``, so the principal point scales with the size).

    Example:
        >>> from pathlib import Path
        >>> v = View("a", Path("a"), 8, 4, torch.tensor([[8.0, 0, 4], [0, 8, 2], [0, 0, 1]]),
        ...          torch.eye(4))
        >>> scaled_camera(v, 4, 2).tolist()
        [[4.0, 0.0, 2.0], [0.0, 4.0, 1.0], [0.0, 0.0, 1.0]]
    """
    K = view.K.clone().double()
    K[0] *= width / view.width
    K[1] *= height / view.height
    return K.float()


def area_downscale(image: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """``[H, W, 3]`` -> ``[height, width, 3]`` by averaging the pixels each output pixel covers.

    Example:
        >>> area_downscale(torch.arange(16.0).reshape(2, 8, 1).expand(2, 8, 3), 4, 1)[0, :, 0]
        tensor([ 4.5,  6.5,  8.5, 10.5])
    """
    nchw = image.permute(2, 0, 1)[None]
    return F.interpolate(nchw, size=(height, width), mode="area")[0].permute(1, 2, 0)


def mean_metrics(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, Any]:
    """Mean PSNR and SSIM of ``(render, target)`` pairs."""
    values = [image_metrics(render, target, with_lpips=False)[:2] for render, target in pairs]
    return {
        "psnr": round(sum(v[0] for v in values) / len(values), 3),
        "ssim": round(sum(v[1] for v in values) / len(values), 4),
        "views": len(values),
    }


@torch.no_grad()
def evaluate_resolutions(
    trainer: Trainer, views: list[View], double: dict[str, View] | None
) -> dict[str, Any]:
    """PSNR / SSIM at the training size, 1/2, 1/4, 2x and the lanczos-upscaled path."""
    pairs: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {
        "train_res": [], "half": [], "quarter": [], "double": [], "lanczos_double": [],
    }  # fmt: skip
    device = trainer.device
    for view in tqdm(views, desc="evaluating", leave=False):
        target = view.load_image().to(device)
        rgb = trainer.render_view(view).rgb[0]
        pairs["train_res"].append((rgb, target))
        for name, factor in (("half", 2), ("quarter", 4)):
            w, h = max(1, round(view.width / factor)), max(1, round(view.height / factor))
            small = trainer.render_camera(view.viewmat, scaled_camera(view, w, h), w, h).rgb[0]
            pairs[name].append((small, area_downscale(target, w, h)))
        big_view = None if double is None else double.get(view.name)
        if big_view is not None:
            big_target = big_view.load_image().to(device)
            w, h = big_view.width, big_view.height
            big = trainer.render_camera(big_view.viewmat, big_view.K, w, h).rgb[0]
            pairs["double"].append((big, big_target))
            upscaled = lanczos_resize(rgb.clamp(0, 1), w, h)
            pairs["lanczos_double"].append((upscaled, big_target))
    return {name: mean_metrics(p) if p else None for name, p in pairs.items()}


def train_mode(name: str, data: SceneDataset, args: argparse.Namespace) -> Trainer:
    config = TrainConfig(
        steps=args.steps, seed=args.seed, downscale=args.downscale, backend=args.backend,
        device=args.device, max_init_points=args.max_init_points, **MODES[name],
    )  # fmt: skip
    trainer = Trainer(data, config, progress=True)
    print(f"[{name}] training {args.steps} steps: {trainer!r}", flush=True)
    trainer.run(progress=True)
    return trainer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", default=".device/fox", help="dataset folder")
    parser.add_argument("--out", required=True, type=Path, help="folder for the JSON result")
    parser.add_argument("--steps", type=int, default=7000)
    parser.add_argument("--downscale", type=int, default=2, help="training downscale (2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="cuda", choices=("auto", "cuda", "reference"))
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--modes", default=",".join(MODES), help="comma list: " + ", ".join(MODES))
    parser.add_argument("--max-init-points", type=int, default=0, help="0: all (default)")
    parser.add_argument("--max-views", type=int, default=0, help="test views evaluated (0: all)")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; choose from {list(MODES)}")
    root = Path(args.data)
    if not root.is_dir():
        parser.error(f"no dataset folder at {root}; give the fox folder as the first argument")

    data = load_dataset(root, downscale=args.downscale, test_every=8)
    views = data.test[: args.max_views or None]
    if not views:
        parser.error(f"{root} has no test views (every 8th image is held out)")
    double = None
    if args.downscale % 2 == 0:  # photos at twice the training size exist
        big = load_dataset(root, downscale=args.downscale // 2, test_every=8)
        double = {v.name: v for v in big.test}
    double_size = None if not double else [next(iter(double.values())).width,
                                          next(iter(double.values())).height]  # fmt: skip

    payload: dict[str, Any] = {
        "benchmark": "antialias",
        "command": shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "gsnb": gsnb.__version__,
        "environment": environment(),
        "data": str(root),
        "steps": args.steps,
        "downscale": args.downscale,
        "seed": args.seed,
        "backend": args.backend,
        "train_size": [data.train[0].width, data.train[0].height],
        "double_size": double_size,
        "runs": {},
    }
    out = args.out / f"antialias_{args.steps}.json"
    keep = ("data", "steps", "downscale", "seed", "backend")
    if out.is_file():  # modes run as separate commands merge into one file
        earlier = json.loads(out.read_text())
        if all(earlier.get(k) == payload[k] for k in keep):
            payload["runs"] = {k: v for k, v in earlier["runs"].items() if k not in modes}
    for name in modes:
        started = time.perf_counter()
        trainer = train_mode(name, data, args)
        seconds = time.perf_counter() - started
        times = [m.step_time for m in trainer.history]
        run = {
            **MODES[name],
            "train_s": round(seconds, 1),
            "median_step_ms": round(1000 * sorted(times)[len(times) // 2], 3),
            "num_gaussians": trainer.num_gaussians,
            **evaluate_resolutions(trainer, views, double),
        }
        payload["runs"][name] = run
        print(f"[{name}] {json.dumps(run)}", flush=True)
        write_json(out, payload)  # each finished mode is kept even if a later one fails
        del trainer
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
