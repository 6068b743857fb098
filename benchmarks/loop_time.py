"""Where a training run's wall time goes beyond its steps' own clock.

``summary.json``'s ``seconds`` sums each step's time (a step read back during the next one
counts from its start to the end of its launch), while ``timings.training`` is the training
loop's wall time. This trains the default recipe through ``Trainer.run`` into a run folder, so
that it writes the final checkpoint as ``gsnb train`` does, stamps each step as it is
delivered (after loading the refine step's kernels while the photos decode, as ``gsnb
train`` does), and splits the loop's wall time into parts that add up to it: the steps' clock;
the time between two deliveries that no step counts (in all, at refine steps, per step, the
largest gaps); what the first delivery took beyond its step's clock; and the time after the
last delivery, which holds the final checkpoint (its write time on its own as well). To say
what the host did in a long gap, a watcher thread samples the main thread's stack whenever no
step was delivered for ``--stall-ms``; the samples go with the largest gaps, beside the time
Python's garbage collector ran and the steps rebinned (run again with room for more
intersections). Runs on a GPU (the CUDA backend) or, slowly, a CPU::

    python benchmarks/loop_time.py --data .device/fox --out $OUT [--steps 7000]

Writes ``OUT/loop_time.json``.
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FOX, environment, git_commit, write_json

from gsnb.data.dataset import load_dataset
from gsnb.train import TrainConfig, Trainer
from gsnb.train.metrics import StepMetrics
from gsnb.train.warm import warming


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


class StallWatcher:
    """Samples the main thread's stack every ``every`` seconds once no step has been
    delivered for ``stall`` seconds (while steps come it wakes once a stall period);
    ``samples[i]``: the stacks seen while waiting for the ``i``-th delivery (0-based), most
    common first by :meth:`top`.

    Example:
        >>> w = StallWatcher(stall=0.0, every=0.001)
        >>> w.start(time.perf_counter())
        >>> time.sleep(0.05)
        >>> w.stop()
        >>> "sleep" in w.top(0)[0]["stack"]
        True
    """

    def __init__(self, stall: float, every: float = 0.005) -> None:
        self.stall, self.every = stall, every
        self.samples: dict[int, collections.Counter[str]] = {}
        self._delivered = 0
        self._last = 0.0
        self._done = threading.Event()
        self._main = threading.main_thread().ident
        self._thread = threading.Thread(target=self._watch, name="stall-watcher", daemon=True)

    def start(self, now: float) -> None:
        self._last = now
        self._thread.start()

    def delivered(self, now: float) -> None:
        self._delivered += 1
        self._last = now

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        wait = self.stall
        while not self._done.wait(wait):
            index, last = self._delivered, self._last
            # While steps come, wake once a stall period (the GIL is shared with the loop)
            wait = self.stall - (time.perf_counter() - last)
            if wait > 0:
                continue
            wait = self.every
            frame = sys._current_frames().get(self._main)
            if frame is None:
                continue
            stack = "".join(traceback.format_stack(frame, limit=14))
            self.samples.setdefault(index, collections.Counter())[stack] += 1

    def top(self, index: int, n: int = 2) -> list[dict[str, Any]]:
        """The ``n`` most common stacks sampled while waiting for delivery ``index``."""
        seen = self.samples.get(index, collections.Counter())
        return [{"samples": k, "stack": s} for s, k in seen.most_common(n)]


class GcClock:
    """The time Python's garbage collector ran, in all and its longest collection; the
    collections over ``long`` seconds in ``slow`` (generation, milliseconds, objects
    collected, ``where()`` at the time)."""

    def __init__(self, long: float = 0.02, where: Callable[[], int] = lambda: 0) -> None:
        self.seconds, self.longest, self.collections = 0.0, 0.0, 0
        self.long, self.where = long, where
        self.slow: list[dict[str, Any]] = []
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        took = time.perf_counter() - self._began
        self.seconds += took
        self.longest = max(self.longest, took)
        self.collections += 1
        if took >= self.long:
            self.slow.append(
                {"generation": info["generation"], "ms": round(took * 1e3, 3),
                 "collected": info["collected"], "step": self.where()}
            )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(FOX), help="dataset (default the fox)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--steps", type=int, default=7000)
    parser.add_argument("--downscale", type=int, default=2)
    parser.add_argument(
        "--stall-ms",
        type=float,
        default=50.0,
        help="sample the host's stack when no step came for this long",
    )
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with warming(device):  # as gsnb train: the refine step's kernels load meanwhile
        data = load_dataset(args.data, downscale=args.downscale, test_every=8)
    config = TrainConfig(
        steps=args.steps, seed=0, device=device, downscale=args.downscale,
        out_dir=str(args.out / "run"),
    )  # fmt: skip
    trainer = Trainer(data, config)
    stamps: list[tuple[int, float, float, bool]] = []
    rebinned: list[int] = []
    watcher = StallWatcher(args.stall_ms / 1e3)
    gc_clock = GcClock(where=lambda: trainer.step_count)

    def stamp(m: StepMetrics) -> None:
        now = time.perf_counter()
        stamps.append((m.step, now, m.step_time, bool(m.events)))
        rebinned.append(trainer.rebinned_steps)
        watcher.delivered(now)

    trainer.on_step(stamp)
    gc.callbacks.append(gc_clock)
    started = time.perf_counter()
    watcher.start(started)
    try:
        trainer.run()
    finally:
        ended = time.perf_counter()
        watcher.stop()
        gc.callbacks.remove(gc_clock)
    split = split_wall(started, ended, stamps, trainer.checkpoint_seconds)
    index = {s[0]: i for i, s in enumerate(stamps)}
    for gap in split["largest_gaps"]:
        i = index[gap["step"]]
        gap["rebinned_before"] = rebinned[i] - rebinned[i - 1] if i else rebinned[0]
        gap["host_stacks"] = watcher.top(i)
    result = {
        "benchmark": "a training run's loop wall time against its steps' clock",
        "environment": environment(),
        "commit": git_commit(),
        "command": f"python benchmarks/loop_time.py --data DATA --steps {args.steps}",
        "device": device,
        "steps": args.steps,
        "gaussians": trainer.num_gaussians,
        "rebinned_steps": trainer.rebinned_steps,
        "gc_seconds": round(gc_clock.seconds, 4),
        "gc_longest_ms": round(gc_clock.longest * 1e3, 3),
        "gc_collections": gc_clock.collections,
        "gc_slow_collections": gc_clock.slow[:20],
        **split,
    }
    write_json(args.out / "loop_time.json", result)
    keys = ("loop_wall_s", "steps_clock_s", "unclocked_between_s", "after_last_s")
    print({k: result[k] for k in (*keys, "final_checkpoint_write_s")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
