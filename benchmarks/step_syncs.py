"""Where a steady training step waits for the GPU: the host syncs torch reports and the CUDA
runtime calls per step.

Trains the fox (downscale 2, default strategy) for ``--warm`` steps, then runs ``--steps``
steps under ``torch.cuda.set_sync_debug_mode("warn")`` and records the gsnb lines of every
synchronising call, then ``--profile-steps`` steps under ``torch.profiler`` (the CUDA runtime
calls per step: launches, copies, stream syncs), then times ``--timed`` steps. A sync inside
the extension (binning's read of its intersection count) shows among the runtime calls, not
among torch's warnings. Needs a GPU::

    python benchmarks/step_syncs.py --data .device/fox --out $OUT

Writes ``OUT/step_syncs.json``.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FOX, environment, write_json

from gsnb.data.dataset import load_dataset
from gsnb.train import TrainConfig, Trainer


def sync_sites(trainer: Trainer, steps: int) -> dict[str, int]:
    """``gsnb`` call sites (innermost four frames) of each sync torch reports, counted."""
    sites: collections.Counter[str] = collections.Counter()

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" not in str(message).lower():
            return
        frames = [f for f in traceback.extract_stack()[:-1] if "/gsnb/" in f.filename]
        where = " <- ".join(f"{f.filename.split('/gsnb/')[-1]}:{f.lineno}" for f in frames[::-1])
        sites[where or "(outside gsnb)"] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                trainer.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return dict(sites.most_common())


def runtime_calls(trainer: Trainer, steps: int) -> dict[str, float]:
    """CUDA runtime calls per step (host-side profiler events named ``cuda*``)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            trainer.step()
        torch.cuda.synchronize()
    calls: collections.Counter[str] = collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CPU and event.name.startswith("cuda"):
            calls[event.name] += 1
    return {name: count / steps for name, count in calls.most_common()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(FOX), help="dataset (default the fox)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--warm", type=int, default=700, help="steps before measuring")
    parser.add_argument("--steps", type=int, default=40, help="steps under sync-debug mode")
    parser.add_argument("--profile-steps", type=int, default=20)
    parser.add_argument("--timed", type=int, default=200)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("step_syncs.py needs a CUDA GPU", file=sys.stderr)
        return 2
    config = TrainConfig(data=args.data, steps=7000, downscale=2, device="cuda", backend="cuda")
    trainer = Trainer(load_dataset(args.data, downscale=2), config)
    trainer.run(args.warm)
    sites = sync_sites(trainer, args.steps)
    calls = runtime_calls(trainer, args.profile_steps)
    torch.cuda.synchronize()
    start = time.perf_counter()
    trainer.run(args.timed)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / args.timed * 1000
    result = {
        "benchmark": "step_syncs",
        **environment(),
        "gaussians": trainer.num_gaussians,
        "wall_ms_per_step": wall,
        f"sync_sites_per_{args.steps}_steps": sites,
        "cuda_runtime_calls_per_step": calls,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "step_syncs.json", result)
    print(f"{trainer.num_gaussians} Gaussians, {wall:.2f} ms per step; syncs: {sites}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
