"""Training quality and speed: gsnb's trainer with gsnb's renderer beside gsplat's.

The fox at downscale 2 (540 x 960), the default strategy, the same seed: once
with gsnb's renderer (the trainer's default: ``gsnb.render_splats`` on the CUDA
backend, which takes the stored log-scales, opacity logits and sh0/shN and applies
the activations in its kernels) and once with gsplat 1.5.3's ``rasterization``
(which takes activated tensors: the trainer applies exp, sigmoid and the SH
concatenation first) wrapped into the renderer interface, so the only difference
is the rasterizer. Reports test PSNR / SSIM (every 8th view), wall time of the
training loop (CUDA synchronised), peak GPU memory, Gaussian count, and the
ratios gsnb / gsplat. Goal: PSNR at least gsplat's minus 0.1 dB in at most 0.8x
its wall time.

    python benchmarks/bench_train.py --out benchmarks/results                  # 7000 steps
    python benchmarks/bench_train.py --out benchmarks/results --steps 30000 --renderers gsnb
    python benchmarks/bench_train.py --out benchmarks/results --steps 30000 --renderers gsplat

On one H200: building gsnb's rasterizer takes about 45 s and gsplat's JIT
compile about 60 s; 7000 steps take about one to two minutes per renderer, so
the default run finishes in about five minutes. A 30000-step run takes a few
minutes per renderer: run the two renderers as two commands (or on two GPUs at once,
each with its own ``--out``, then ``--merge`` their JSON files). Results merge into
``OUT/train_<steps>.json``; logs go to stdout. Every run records GPU memory against the
Gaussian count every ``--memory-every`` steps (a leak shows as memory growing while the
count does not).

Many seeds: the test PSNR of one run spreads by about 0.3 dB from seed to seed, so
the quality comparison wants many runs. ``--overlapped`` marks runs that shared the
GPU with other training processes (several seeds at once): their wall time is not a
speed measurement, and ``gsnb_vs_gsplat`` leaves their wall ratio out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, environment, write_json

from gsnb.train import TrainConfig, Trainer


def gsplat_renderer(
    means,
    quats,
    scales,
    opacities,
    colors,
    viewmats,
    Ks,
    width,
    height,
    *,
    sh_degree=None,
    backgrounds=None,
    absgrad=False,
    **_: Any,
) -> SimpleNamespace:
    """``gsplat.rasterization`` behind gsnb's renderer interface (rgb, alpha, depth, meta)."""
    import gsplat

    cams = viewmats.shape[0]
    bg = None if backgrounds is None else backgrounds.expand(cams, 3)
    rgb, alpha, meta = gsplat.rasterization(
        means,
        quats,
        scales,
        opacities,
        colors,
        viewmats,
        Ks,
        width,
        height,
        sh_degree=sh_degree,
        backgrounds=bg,
        packed=False,
        absgrad=absgrad,
        rasterize_mode="classic",
    )
    radii = meta["radii"]
    if radii.dim() == 2:  # gsplat before 1.5 returns one radius per splat
        radii = radii[..., None].expand(*radii.shape, 2)
    info = SimpleNamespace(
        means2d=meta["means2d"], radii=radii, depths=meta["depths"], absgrad=None
    )
    return SimpleNamespace(rgb=rgb, alpha=alpha, depth=None, meta=info)


def build_gsnb() -> None:
    """Build gsnb's extension (or take it from the cache): the renderer and the fused SSIM.

    Every run needs it, the gsplat-backed one too, so that both train with the same loss
    kernels and differ only in the rasterizer.
    """
    from gsnb.toolchain import build

    started = time.perf_counter()
    build(progress=True)
    print(f"gsnb extension ready in {time.perf_counter() - started:.1f} s", flush=True)


def gsnb_renderer() -> None:
    """gsnb's renderer: the trainer's default (``gsnb.render_splats``, CUDA backend)."""
    return None


def ssim_path() -> str:
    """Which SSIM the trainer's loss uses here: ``"fused"`` (CUDA kernels) or ``"pytorch"``."""
    from gsnb.train import fused_ssim

    probe = torch.zeros(1, 16, 16, 3, device="cuda")
    return "fused" if fused_ssim.available(probe, probe, 11) else "pytorch"


def warm_up(renderer: Any) -> None:
    """One tiny render and backward, so JIT compilation is not timed."""
    means = torch.tensor([[0.0, 0.0, 2.0]], device="cuda", requires_grad=True)
    out = renderer(
        means,
        torch.tensor([[1.0, 0, 0, 0]], device="cuda"),
        torch.full((1, 3), 0.1, device="cuda"),
        torch.tensor([0.9], device="cuda"),
        torch.rand(1, 16, 3, device="cuda"),
        torch.eye(4, device="cuda")[None],
        torch.tensor([[[32.0, 0, 16], [0, 32, 16], [0, 0, 1]]], device="cuda"),
        32,
        32,
        sh_degree=3,
        backgrounds=None,
        absgrad=False,
    )
    out.rgb.sum().backward()
    torch.cuda.synchronize()


def run_one(name: str, renderer: Any, data: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Train from scratch with ``renderer``; quality, time, memory and count."""
    import gsnb

    warm_up(renderer or gsnb.render)
    config = TrainConfig(
        steps=args.steps, seed=args.seed, device="cuda", downscale=args.downscale, backend="cuda"
    )
    trainer = Trainer(data, config, renderer=renderer)
    trainer.fused_step = name != "gsnb_autograd"  # gsnb.train.fused_step, the default
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    trace: list[list[float]] = []

    def sample(metrics: Any) -> None:  # memory against the Gaussian count, for leaks
        if metrics.step % args.memory_every == 0 or metrics.step == args.steps:
            mib = 2**20
            trace.append([
                metrics.step, metrics.num_gaussians,
                round(torch.cuda.memory_allocated() / mib, 1),
                round(torch.cuda.memory_reserved() / mib, 1),
                round(torch.cuda.max_memory_allocated() / mib, 1),
            ])  # fmt: skip

    trainer.on_step(sample)
    print(f"[{name}] training {args.steps} steps: {trainer!r} (SSIM: {ssim_path()})", flush=True)
    started = time.perf_counter()
    trainer.run(progress=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated()
    result = trainer.evaluate()
    # The training views too: 58 images average out much of the 9 test views' spread.
    train = trainer.evaluate("train")
    times = sorted(m.step_time for m in trainer.history)
    run = {
        "test_psnr": round(result.psnr, 3),
        "test_ssim": round(result.ssim, 4),
        "test_views": result.num_views,
        "train_psnr": round(train.psnr, 3),
        "train_ssim": round(train.ssim, 4),
        "wall_s": round(seconds, 2),
        "median_step_ms": round(1000 * times[len(times) // 2], 3),
        "peak_memory_gib": round(peak / 2**30, 3),
        "num_gaussians": trainer.num_gaussians,
        "skipped_steps": trainer.skipped_steps,
        "eval_s": round(result.seconds, 2),
        "ssim": ssim_path(),
        "memory_trace_columns": [
            "step",
            "gaussians",
            "allocated_mib",
            "reserved_mib",
            "peak_allocated_mib",
        ],
        "memory_trace": trace,
    }
    print(f"[{name}] {json.dumps(run)}", flush=True)
    del trainer
    torch.cuda.empty_cache()
    return run


def compare(payload: dict[str, Any]) -> dict[str, Any]:
    """Add ``gsnb_vs_gsplat`` (PSNR difference, wall and memory ratios) once both runs exist.

    The wall ratio is ``None`` when either run shared the GPU (``overlapped``).
    """
    runs = payload["runs"]
    if {"gsnb", "gsplat"} <= set(runs):
        a, b = runs["gsnb"], runs["gsplat"]
        shared = a.get("overlapped", False) or b.get("overlapped", False)
        payload["gsnb_vs_gsplat"] = {
            "psnr_db": round(a["test_psnr"] - b["test_psnr"], 3),
            "wall_ratio": None if shared else round(a["wall_s"] / b["wall_s"], 3),
            "memory_ratio": round(a["peak_memory_gib"] / b["peak_memory_gib"], 3),
        }
    return payload


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        default=str(REPO.parent / "shared" / "data" / "fox"),
        help="the fox dataset folder (default ../shared/data/fox)",
    )
    parser.add_argument("--out", required=True, help="folder for train_<steps>.json")
    parser.add_argument("--steps", type=int, default=7000, help="7000 (default) or 30000")
    parser.add_argument("--downscale", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--renderers",
        default="gsnb,gsplat",
        help="comma list: gsnb, gsplat, gsnb_autograd (gsnb's renderer through autograd's "
        "path instead of the fused training step: Trainer.fused_step = False)",
    )
    parser.add_argument(
        "--memory-every", type=int, default=1000, help="sample GPU memory every this many steps"
    )
    parser.add_argument(
        "--overlapped",
        action="store_true",
        help="other training processes share the GPU (many seeds at once): the wall time is "
        "recorded but is not a speed measurement",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        help="no training: merge the runs of these train_<steps>.json files (e.g. two renderers "
        "trained on two GPUs at once) into OUT/train_<steps>.json",
    )
    args = parser.parse_args()
    out = Path(args.out) / f"train_{args.steps}.json"
    if args.merge:
        payload = json.loads(out.read_text()) if out.is_file() else {"runs": {}}
        for part in args.merge:
            found = json.loads(part.read_text())
            runs = {**payload["runs"], **found["runs"]}
            payload |= found
            payload["runs"] = runs
        write_json(out, compare(payload))
        print(json.dumps(payload.get("gsnb_vs_gsplat"), indent=1))
        return 0
    if not torch.cuda.is_available():
        print("bench_train needs a CUDA GPU", file=sys.stderr)
        return 1
    from gsnb.data.dataset import load_dataset

    started = time.perf_counter()
    data = load_dataset(args.data, downscale=args.downscale, test_every=8)
    print(f"data: {data!r} in {time.perf_counter() - started:.1f} s", flush=True)
    build_gsnb()
    makers = {
        "gsnb": gsnb_renderer,
        "gsnb_autograd": gsnb_renderer,
        "gsplat": lambda: gsplat_renderer,
    }
    payload = json.loads(out.read_text()) if out.is_file() else {"runs": {}}
    payload |= {
        "benchmark": "bench_train",
        "data": Path(args.data).name,
        "downscale": args.downscale,
        "image_size": [data.views[0].width, data.views[0].height],
        "steps": args.steps,
        "seed": args.seed,
        "strategy": "default",
    }
    for name in args.renderers.split(","):
        run = run_one(name, makers[name](), data, args) | {"env": environment()}
        if args.overlapped:
            run["overlapped"] = True
        payload["runs"][name] = run
        write_json(out, compare(payload))
    print(json.dumps(payload, indent=1))
    print(f"wrote {out} in {time.perf_counter() - started:.0f} s total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
