"""Where the GPU waits in a steady training step: its idle gaps, by the work that follows them.

Trains the fox (downscale 2, default strategy) to each step of ``--at``, holds the Gaussian
count still, times ``--steps`` steps (CUDA synchronised), then traces as many with the
profiler's CUDA activity only (no CPU-side recording, so the host runs at its own speed).
The timed steps also give the main thread's CPU time (which includes any spinning wait for
the GPU) and the caching allocator's cudaMalloc and cudaFree calls. From the trace: the
GPU's busy time per step (the union of its kernels, copies and memsets),
its idle time, and the idle time summed by the name of the GPU operation that ends each gap:
a gap before ``project_forward`` is the host's work between steps, one before ``emit`` the
wait for the binning's count, gaps spread over small kernels their launch latency. Needs a
GPU::

    python benchmarks/step_gaps.py --data .device/fox --out $OUT [--at 300,1500,6500]

Writes ``OUT/step_gaps.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FOX, environment, git_commit, write_json

from gsnb.data.dataset import load_dataset
from gsnb.train import TrainConfig, Trainer

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
ALLOCATOR_EVENTS = (
    "num_device_alloc",
    "num_device_free",
    "num_alloc_retries",
    "num_sync_all_streams",
)
"""torch.cuda.memory_stats counters over the timed steps: cudaMalloc and cudaFree calls (a
cudaFree waits for the device), and the caching allocator's retries after freeing its cache."""


def gpu_ops(trace: dict[str, Any]) -> list[tuple[float, float, str]]:
    """``(start, end, name)`` in microseconds of each GPU operation of a chrome trace, by start."""
    ops = [
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), str(e.get("name", "")))
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES
    ]
    return sorted(ops)


def short(name: str) -> str:
    """A kernel's name without its template arguments, namespaces and parameters."""
    name = name.replace("(anonymous namespace)::", "").split("(")[0].split("<")[0]
    return name.rsplit("::", 1)[-1][:60] or "?"


def gaps(ops: list[tuple[float, float, str]], steps: int) -> dict[str, Any]:
    """Busy and idle microseconds per step and the idle time by the operation after it."""
    busy, idle, end = 0.0, 0.0, None
    before: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for start, stop, name in ops:
        if end is not None and start > end:
            idle += start - end
            before[short(name)] += start - end
            counts[short(name)] += 1
        lo = start if end is None else max(start, end)
        busy += max(0.0, stop - lo)
        end = stop if end is None else max(end, stop)
    top = sorted(before.items(), key=lambda kv: -kv[1])[:15]
    return {
        "gpu_busy_us_per_step": round(busy / steps, 1),
        "gpu_idle_us_per_step": round(idle / steps, 1),
        "gpu_ops_per_step": round(len(ops) / steps, 1),
        "idle_us_per_step_before": {k: round(v / steps, 1) for k, v in top},
        "gaps_per_step_before": {k: round(counts[k] / steps, 2) for k, _ in top},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(FOX), help="dataset (default the fox)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--at", default="300,1500,6500", help="steps to measure from")
    parser.add_argument("--steps", type=int, default=100, help="steps timed and traced at each")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("step_gaps.py needs a CUDA GPU", file=sys.stderr)
        return 2
    config = TrainConfig(data=args.data, steps=30_000, downscale=2, device="cuda", backend="cuda")
    trainer = Trainer(load_dataset(args.data, downscale=2), config)
    points = {}
    stop_at = trainer.strategy.refine_stop_iter
    for at in sorted(int(s) for s in args.at.split(",")):
        trainer.strategy.refine_stop_iter = stop_at
        trainer.run(at - trainer.step_count)
        trainer.strategy.refine_stop_iter = 0  # the count holds still while measuring
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        wall, cpu = time.perf_counter(), time.thread_time()
        trainer.run(args.steps)
        torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        after = torch.cuda.memory_stats()
        allocator = {k: after.get(k, 0) - stats.get(k, 0) for k in ALLOCATOR_EVENTS}
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            trainer.run(args.steps)
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(path))
            trace = json.loads(path.read_text())
        point = {
            "gaussians": trainer.num_gaussians,
            "wall_us_per_step": round(wall / args.steps * 1e6, 1),
            "host_cpu_us_per_step": round(cpu / args.steps * 1e6, 1),
            "allocator_events": allocator,
        }
        point |= gaps(gpu_ops(trace), args.steps)
        points[str(at)] = point
        print(at, json.dumps(point), flush=True)
    result = {
        "benchmark": "the GPU's idle gaps in a steady training step, by the operation after each",
        "command": "python benchmarks/step_gaps.py --data DATA --out OUT --at " + args.at,
        "commit": git_commit(),
        "environment": environment(),
        "steps_per_point": args.steps,
        "points": points,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "step_gaps.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
