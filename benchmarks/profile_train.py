"""Where a training step's time goes on the GPU: wall time per step, GPU kernels, CPU phases.

Trains the fox (downscale 2, default strategy) for ``--warm`` steps, stops densifying so that
the Gaussian count holds still, times ``--steps`` steps (CUDA synchronised), then profiles
``--profile-steps`` steps with ``torch.profiler``: the GPU time of each kernel per step and the
CPU time of the step's phases (the fused forward and backward call, or render, loss and
backward; health signals, Adam, strategy).

    python benchmarks/profile_train.py --out DIR                      # gsnb's renderer
    python benchmarks/profile_train.py --out DIR --renderer gsplat    # gsplat's, same trainer
    python benchmarks/profile_train.py --out DIR --pytorch-ssim       # SSIM by convolutions
    python benchmarks/profile_train.py --out DIR --autograd-step      # no fused step

Writes ``DIR/profile_train_<renderer>[_pytorch_ssim][_autograd_step].json`` and the
profiler's tables (``..._kernels.txt`` by GPU time, ``..._cpu.txt`` by CPU time; with
``--cprofile`` also ``..._host.txt``, cProfile's host functions over ``--steps`` steps). The
profiler itself slows the CPU side; the wall time per step is measured without it.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import build_gsnb, gsnb_renderer, gsplat_renderer, ssim_path
from common import FOX, environment, host_table, write_json

import gsnb.train.trainer as trainer_module
from gsnb.train import TrainConfig, Trainer

PHASES = ("fused", "render", "loss", "backward", "health", "adam", "strategy")


def label(owner: Any, name: str, phase: str) -> None:
    """Wrap ``owner.name`` so that the profiler records its calls as ``phase:<phase>``."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with record_function(f"phase:{phase}"):
            return inner(*args, **kwargs)

    setattr(owner, name, wrapped)


def ms_per_step(trainer: Trainer, steps: int) -> float:
    """Wall time per step over ``steps`` steps, CUDA synchronised."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    trainer.run(steps)
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / steps * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(FOX), help="dataset (default the fox)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--renderer", default="gsnb", choices=("gsnb", "gsplat"))
    parser.add_argument("--downscale", type=int, default=2)
    parser.add_argument("--warm", type=int, default=1500, help="steps before measuring")
    parser.add_argument("--steps", type=int, default=200, help="steps timed without profiler")
    parser.add_argument("--profile-steps", type=int, default=20)
    parser.add_argument(
        "--cprofile",
        action="store_true",
        help="also write cProfile's table of --steps steps (PREFIX_host.txt)",
    )
    parser.add_argument(
        "--autograd-step",
        action="store_true",
        help="the step through autograd's path (Trainer.fused_step = False) instead of the "
        "fused forward and backward call",
    )
    parser.add_argument(
        "--pytorch-ssim",
        action="store_true",
        help="compute the loss's SSIM with PyTorch convolutions instead of the fused kernels "
        "(through autograd's path: the fused step has its own)",
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("profile_train needs a CUDA GPU", file=sys.stderr)
        return 1
    from gsnb.data.dataset import load_dataset

    build_gsnb()
    if args.pytorch_ssim:
        from gsnb.train import fused_ssim

        fused_ssim.available = lambda *_: False  # the plain PyTorch path of losses.ssim
    renderer = gsnb_renderer() if args.renderer == "gsnb" else gsplat_renderer
    data = load_dataset(args.data, downscale=args.downscale, test_every=8)
    config = TrainConfig(
        steps=7000, seed=0, device="cuda", downscale=args.downscale, backend="cuda"
    )
    trainer = Trainer(data, config, renderer=renderer)
    # The fused step computes SSIM with its own kernels: --pytorch-ssim needs autograd's path.
    trainer.fused_step = not (args.autograd_step or args.pytorch_ssim)
    fused = trainer.fused_step and args.renderer == "gsnb"  # gsplat's renderer never fuses
    trainer.run(args.warm)
    trainer.strategy.refine_stop_iter = 0  # hold the Gaussian count still from here on
    wall = ms_per_step(trainer, args.steps)
    print(f"[{args.renderer}] {wall:.3f} ms/step, {trainer.num_gaussians} Gaussians", flush=True)
    host = None
    if args.cprofile:  # the host functions by their own time, then with their callees
        host = host_table(lambda: trainer.run(args.steps), by=("tottime", "cumtime"))

    label(trainer_module.fused_step, "forward_backward", "fused")
    label(trainer, "_render", "render")
    label(trainer_module, "photometric_terms", "loss")
    label(torch.Tensor, "backward", "backward")
    label(trainer_module, "health_sums", "health")
    # The step launches Adam through launch() (update() calls it too where it is not fused).
    label(trainer.optimizer, "launch", "adam")
    label(trainer.strategy, "step_post_backward", "strategy")
    n = args.profile_steps
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        trainer.run(n)
        torch.cuda.synchronize()
    table = prof.key_averages()
    kernels = {  # GPU work only: no ranges of user annotations (phases, Optimizer.step#...)
        e.key: e.self_device_time_total / n / 1000
        for e in table
        if e.device_type == torch.autograd.DeviceType.CUDA
        and not getattr(e, "is_user_annotation", False)
        and not e.key.startswith("phase:")
        and "#" not in e.key
    }
    phases = {
        e.key.split(":", 1)[1]: e.cpu_time_total / n / 1000
        for e in table
        if e.key.startswith("phase:") and e.device_type == torch.autograd.DeviceType.CPU
    }
    top = dict(sorted(kernels.items(), key=lambda kv: -kv[1])[:25])
    result = {
        "benchmark": "profile_train",
        "renderer": args.renderer,
        "data": Path(args.data).name,
        "downscale": args.downscale,
        "gaussians": trainer.num_gaussians,
        "ssim": ssim_path(),
        "step": "fused (default)" if fused else "autograd",
        "wall_ms_per_step": round(wall, 3),
        "gpu_kernel_ms_per_step": round(sum(kernels.values()), 3),
        "cpu_ms_per_step_by_phase_under_profiler": {k: round(v, 3) for k, v in phases.items()},
        "top_kernels_ms_per_step": {k[:120]: round(v, 4) for k, v in top.items()},
        "env": environment(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = ("_pytorch_ssim" if args.pytorch_ssim else "") + (
        "_autograd_step" if args.autograd_step else ""
    )
    stem = args.out / f"profile_train_{args.renderer}{suffix}"
    (stem.parent / f"{stem.name}_kernels.txt").write_text(
        table.table(sort_by="self_cuda_time_total", row_limit=40)
    )
    (stem.parent / f"{stem.name}_cpu.txt").write_text(
        table.table(sort_by="cpu_time_total", row_limit=60)
    )
    if host is not None:
        (stem.parent / f"{stem.name}_host.txt").write_text(host)
    write_json(stem.parent / f"{stem.name}.json", result)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
