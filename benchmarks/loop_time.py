"""Where a training run's wall time goes beyond its steps' own clock.

``summary.json``'s ``seconds`` sums each step's time (a step read back during the next one
counts from its start to the end of its launch), while ``timings.training`` is the training
loop's wall time. This trains the default recipe through ``Trainer.run`` into a run folder, so
that it writes the final checkpoint as ``gsnb train`` does, stamps each step as it is
delivered, and splits the loop's wall time into parts that add up to it: the steps' clock;
the time between two deliveries that no step counts (in all, at refine steps, per step, the
largest gaps); what the first delivery took beyond its step's clock; and the time after the
last delivery, which holds the final checkpoint (its write time on its own as well). Runs on
a GPU (the CUDA backend) or, slowly, a CPU::

    python benchmarks/loop_time.py --data .device/fox --out $OUT [--steps 7000]

Writes ``OUT/loop_time.json``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FOX, environment, git_commit, write_json

from gsnb.data.dataset import load_dataset
from gsnb.train import TrainConfig, Trainer
from gsnb.train.metrics import StepMetrics


def split_wall(
    started: float, ended: float, stamps: list[tuple[int, float, float, bool]], write: float
) -> dict[str, Any]:
    """The loop's wall time ``ended - started`` split by ``stamps`` (step, delivery time,
    step_time, refine step?) in delivery order; ``write``: the final checkpoint's seconds.

    Example:
        >>> stamps = [(1, 1.0, 0.5, False), (2, 2.0, 0.5, True), (3, 2.5, 0.4, False)]
        >>> r = split_wall(0.0, 3.0, stamps, write=0.3)
        >>> r["loop_wall_s"], r["steps_clock_s"], r["unclocked_between_s"], r["after_last_s"]
        (3.0, 1.4, 0.6, 0.5)
        >>> r["unclocked_at_refine_steps_s"], r["before_first_unclocked_s"]
        (0.5, 0.5)
        >>> r["largest_gaps"][0]["step"]
        2
    """
    gaps = [
        (step, at - before - clock, refine)
        for (_, before, _, _), (step, at, clock, refine) in itertools.pairwise(stamps)
    ]
    between = [g for _, g, _ in gaps]
    return {
        "loop_wall_s": round(ended - started, 4),
        "steps_clock_s": round(sum(s[2] for s in stamps), 4),
        # Parts that add up to the loop's wall time with the steps' clock:
        "before_first_unclocked_s": round(stamps[0][1] - started - stamps[0][2], 4)
        if stamps
        else None,
        "unclocked_between_s": round(sum(between), 4),
        "unclocked_at_refine_steps_s": round(sum(g for _, g, r in gaps if r), 4),
        "unclocked_median_ms_per_step": round(statistics.median(between) * 1e3, 4)
        if between
        else None,
        "after_last_s": round(ended - stamps[-1][1], 4) if stamps else None,
        "final_checkpoint_write_s": round(write, 4),
        "largest_gaps": [
            {"step": s, "unclocked_ms": round(g * 1e3, 3), "refine": r}
            for s, g, r in sorted(gaps, key=lambda x: -x[1])[:10]
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(FOX), help="dataset (default the fox)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--steps", type=int, default=7000)
    parser.add_argument("--downscale", type=int, default=2)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    data = load_dataset(args.data, downscale=args.downscale, test_every=8)
    config = TrainConfig(
        steps=args.steps, seed=0, device=device, downscale=args.downscale,
        out_dir=str(args.out / "run"),
    )  # fmt: skip
    trainer = Trainer(data, config)
    stamps: list[tuple[int, float, float, bool]] = []

    def stamp(m: StepMetrics) -> None:
        stamps.append((m.step, time.perf_counter(), m.step_time, bool(m.events)))

    trainer.on_step(stamp)
    started = time.perf_counter()
    trainer.run()
    ended = time.perf_counter()
    result = {
        "benchmark": "a training run's loop wall time against its steps' clock",
        "environment": environment(),
        "commit": git_commit(),
        "command": f"python benchmarks/loop_time.py --data DATA --steps {args.steps}",
        "device": device,
        "steps": args.steps,
        "gaussians": trainer.num_gaussians,
        **split_wall(started, ended, stamps, trainer.checkpoint_seconds),
    }
    write_json(args.out / "loop_time.json", result)
    keys = ("loop_wall_s", "steps_clock_s", "unclocked_between_s", "after_last_s")
    print({k: result[k] for k in (*keys, "final_checkpoint_write_s")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
