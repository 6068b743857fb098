"""How much of a steady training step a CUDA graph would take away: the step's GPU work
launched from the host as the trainer does, against the same work replayed as one graph.

Trains the fox (downscale 2, default strategy) to each step of ``--at`` and holds the
Gaussian count still. Then, on one training view, times ``--steps`` repeats of the step's GPU
work as the trainer launches it: the fused forward and backward pass with room for the
intersections (no wait for their count), the health sums, the gated one-launch Adam and the
strategy's gated sums. Then captures that same work in a ``torch.cuda.CUDAGraph`` and times
as many replays. A replay repeats the captured launch arguments: Adam's step sizes and bias
corrections, the view, its photo and camera; the trainer would have to move those into
device buffers to replay a graph from step to step, which is what this measures the worth
of. A capture that fails is reported with its error. Needs a GPU::

    python benchmarks/step_graph.py --data .device/fox --out $OUT [--at 300,1500,6500]

Writes ``OUT/step_graph.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FOX, environment, git_commit, write_json

from gsnb.data.dataset import load_dataset
from gsnb.train import TrainConfig, Trainer, fused_step
from gsnb.train.health import health_sums


def step_work(trainer: Trainer, view: int, capacity: int) -> Any:
    """A function that launches one step's GPU work on ``view`` as the trainer does."""
    cfg = trainer.config
    photo = trainer.train_images.image_bytes(view)
    height, width = photo.shape[:2]
    viewmat, K = trainer.train_images.cameras[view]
    splats, strategy = trainer.model.splats, trainer.strategy

    def work() -> torch.Tensor:
        trainer.optimizer.clear_grads()
        out = fused_step.forward_backward(
            splats, viewmat, K, width, height, trainer.sh_degree_now, trainer.background,
            photo, cfg.ssim_lambda, strategy.absgrad, capacity=capacity,
        )  # fmt: skip
        grads = [p.grad for p in splats.values()]
        values = health_sums(splats, grads, tail=[out.stats, out.intersections])
        gate = values[7:10]
        trainer.optimizer.launch(gate)
        info = {"width": width, "height": height, "n_cameras": 1, "gate": gate}
        info |= {"means2d": out.means2d, "radii": out.radii, "absgrad": out.absgrad}
        strategy.accumulate(splats, trainer.strategy_state, info)
        return values

    return work


def per_step_ms(run: Any, steps: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e3


def measure(trainer: Trainer, steps: int) -> dict[str, Any]:
    view = 0
    work = step_work(trainer, view, capacity=0)
    count = int(work()[-1])  # the view's intersections, counted once
    capacity = count + count // 4 + 4096
    work = step_work(trainer, view, capacity)
    point: dict[str, Any] = {"gaussians": trainer.num_gaussians, "intersections": count}
    point["eager_ms_per_step"] = round(per_step_ms(work, steps), 4)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # torch's warm-up before a capture
        for _ in range(3):
            work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        started = time.perf_counter()
        with torch.cuda.graph(graph):
            work()
        point["capture_ms"] = round((time.perf_counter() - started) * 1e3, 3)
    except Exception as err:  # what stops a capture is the finding
        point["capture_error"] = f"{type(err).__name__}: {err}"[:500]
        return point
    point["graph_replay_ms_per_step"] = round(per_step_ms(graph.replay, steps), 4)
    point["graph_over_eager"] = round(
        point["graph_replay_ms_per_step"] / point["eager_ms_per_step"], 3
    )
    return point


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(FOX), help="dataset (default the fox)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--at", default="300,1500,6500", help="steps to measure at")
    parser.add_argument("--steps", type=int, default=200, help="repeats timed each way")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("step_graph.py needs a CUDA GPU", file=sys.stderr)
        return 2
    config = TrainConfig(data=args.data, steps=30_000, downscale=2, device="cuda", backend="cuda")
    trainer = Trainer(load_dataset(args.data, downscale=2), config)
    stop_at = trainer.strategy.refine_stop_iter
    points = {}
    for at in sorted(int(s) for s in args.at.split(",")):
        trainer.strategy.refine_stop_iter = stop_at
        trainer.run(at - trainer.step_count)
        trainer.strategy.refine_stop_iter = 0  # the count holds still while measuring
        # The measurement changes the model (Adam steps on one view): a copy is measured.
        saved = {k: v.detach().clone() for k, v in trainer.model.splats.items()}
        points[str(at)] = measure(trainer, args.steps)
        print(at, points[str(at)], flush=True)
        with torch.no_grad():
            for k, v in trainer.model.splats.items():
                v.copy_(saved[k])
    result = {
        "benchmark": "a steady training step's GPU work launched as the trainer does, against "
        "the same work replayed as one CUDA graph",
        "command": "python benchmarks/step_graph.py --data DATA --out OUT --at " + args.at,
        "commit": git_commit(),
        "environment": environment(),
        "steps_per_point": args.steps,
        "points": points,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "step_graph.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
