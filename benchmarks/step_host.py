"""The host's share of a steady training step: the main thread's CPU time against the wall.

The CUDA runtime is told to block, not spin, while it waits for the GPU
(``cudaDeviceScheduleBlockingSync``, set before torch starts CUDA), so the main thread's
CPU time over a run of steps is the host's own work: Python, launches, allocations. Where
it is below the wall time per step the GPU bounds the step; where it comes close, the
host does. Also writes cProfile's table of the run's first refine step (``--refine-at``),
which takes far longer than the others. Needs a GPU::

    python benchmarks/step_host.py --data .device/fox --out $OUT [--at 1000,6500]

Writes ``OUT/step_host.json`` and ``OUT/step_host_first_refine.txt``.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FOX, environment, git_commit, host_table, write_json

from gsnb.data.dataset import load_dataset
from gsnb.train import TrainConfig, Trainer

BLOCKING_SYNC = 0x04  # cudaDeviceScheduleBlockingSync


def block_while_waiting() -> bool:
    """Ask torch's CUDA runtime to block in its waits; True where it took the flag."""
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            runtime = ctypes.CDLL(name)  # the copy torch loaded, where the names agree
        except OSError:
            continue
        return runtime.cudaSetDeviceFlags(BLOCKING_SYNC) == 0
    return False


def measure(trainer: Trainer, steps: int) -> dict[str, float]:
    """Wall and main-thread CPU milliseconds per step over ``steps`` steps."""
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter(), time.thread_time()
    trainer.run(steps)
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    return {
        "gaussians": trainer.num_gaussians,
        "wall_ms_per_step": round(wall / steps * 1e3, 4),
        "host_cpu_ms_per_step": round(cpu / steps * 1e3, 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(FOX), help="dataset (default the fox)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--at", default="300,1000,6500", help="steps to measure from")
    parser.add_argument("--steps", type=int, default=200, help="steps measured at each")
    parser.add_argument("--refine-at", type=int, default=600, help="the first refine step")
    args = parser.parse_args()
    blocking = block_while_waiting()
    if not torch.cuda.is_available():
        print("step_host.py needs a CUDA GPU", file=sys.stderr)
        return 2
    config = TrainConfig(data=args.data, steps=30_000, downscale=2, device="cuda", backend="cuda")
    trainer = Trainer(load_dataset(args.data, downscale=2), config)
    points, table = {}, ""
    for at in sorted(int(s) for s in args.at.split(",")):
        if trainer.step_count < args.refine_at <= at:
            trainer.run(args.refine_at - trainer.step_count)
            start = time.perf_counter()
            table = host_table(lambda: trainer.run(1), top=30, by=("cumulative", "tottime"))
            table = f"first refine step: {(time.perf_counter() - start) * 1e3:.1f} ms\n{table}"
        trainer.run(at - trainer.step_count)
        points[str(at)] = measure(trainer, args.steps)
        print(at, points[str(at)], flush=True)
    result = {
        "benchmark": "step_host",
        "environment": environment(),
        "commit": git_commit(),
        "blocking_sync": blocking,
        "protocol": f"fox, downscale 2, default recipe; {args.steps} steps read behind",
        "points": points,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "step_host.json", result)
    (args.out / "step_host_first_refine.txt").write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
