"""The backward compositing's warp patches side by side: 16 pixels wide against 8.

A warp of the backward compositing sums each splat's gradients over its pixels once; a small
splat meets fewer warps when each warp's pixels form a squarer patch (8 x 4 or 8 x 8 instead
of 16 x 2 or 16 x 4). For each scene of ``benchmarks/bench_raster.py`` (and
``fox_trained_half`` seen from one camera, a training step's image): the default
``gsnb.render`` call's forward+backward ms (medians of CUDA-event timings, colour only), and
the GPU time of its forward and backward compositing kernels (torch.profiler), with the
backward's patch forced to each width (``kernels.set_rasterize_patch``; the forward does not
change with it, and so shows the rounds' noise) and the rows and segments left to gsnb (what
users get), in turns so that a slow spell of the GPU falls on both. With ``--train STEPS``,
also ``gsnb train`` on the fox (downscale 2) with each width, in turns, each in a process of
its own: training seconds, loop wall time, test PSNR and Gaussians. Writes
``OUT/patch_h200.json``.

    python benchmarks/bench_patch.py --out OUT --fox .device/fox --train 7000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_raster import calls, gsnb_render
from bench_rows import scene_options, time_scenes
from common import cuda_time_ms, environment, git_commit, write_json
from profile_raster import kernel_table

from gsnb import kernels

WIDTHS = (16, 8)
# The forward compositing's kernels: one block a tile, or the segments' three passes.
FORWARD_KERNELS = ("rasterize_forward", "segment_product", "segment_blend", "segment_combine")


def compositing_ms(table: dict[str, float]) -> tuple[float, float]:
    """The forward compositing's and the backward compositing's GPU ms in a kernel table."""
    forward = sum(v for k, v in table.items() if k.startswith(FORWARD_KERNELS))
    backward = sum(v for k, v in table.items() if k.startswith("rasterize_backward"))
    return forward, backward


def time_scene(s: dict, rounds: int, repeat: int) -> dict:
    """Per patch width: the forward+backward call's median wall ms (CUDA events; on small
    scenes the host's launches bound it), and the GPU ms of the forward and the backward
    compositing kernels (torch.profiler, medians over the rounds)."""
    _, forward_backward = calls(s, lambda s_, p: gsnb_render(s_, p, False, None), False)
    wall: dict[int, list[float]] = {w: [] for w in WIDTHS}
    fwd: dict[int, list[float]] = {w: [] for w in WIDTHS}
    bwd: dict[int, list[float]] = {w: [] for w in WIDTHS}
    for _ in range(rounds):
        for w in WIDTHS:
            kernels.set_rasterize_patch(width=w)
            wall[w].append(cuda_time_ms(forward_backward, repeat=repeat))
            forward, backward = compositing_ms(kernel_table(forward_backward, repeat))
            fwd[w].append(forward)
            bwd[w].append(backward)
    kernels.set_rasterize_patch(width=0)
    row: dict = {}
    for w in WIDTHS:
        row[f"patch_{w}_fwd_bwd_wall_ms"] = round(statistics.median(wall[w]), 4)
        row[f"patch_{w}_forward_kernels_ms"] = round(statistics.median(fwd[w]), 4)
        row[f"patch_{w}_backward_kernel_ms"] = round(statistics.median(bwd[w]), 4)
    for key in ("fwd_bwd_wall_ms", "forward_kernels_ms", "backward_kernel_ms"):
        row[f"{key.removesuffix('_ms')}_8_over_16"] = round(
            row[f"patch_8_{key}"] / row[f"patch_16_{key}"], 4
        )
    return row


def train_one(width: int, fox: Path, steps: int, out: Path) -> int:
    """``gsnb train`` in this process with the patch forced to ``width``."""
    from gsnb import cli

    kernels.set_rasterize_patch(width=width)
    argv = ["train", str(fox), "--steps", str(steps), "--downscale", "2", "--out", str(out)]
    return cli.main([*argv, "--no-progress"])


def train_turns(fox: Path, steps: int, runs: int) -> dict:
    """``runs`` fox runs per width, in turns, each in its own process."""
    rows: dict[str, list[dict]] = {str(w): [] for w in WIDTHS}
    for _ in range(runs):
        for w in WIDTHS:
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [sys.executable, __file__, "--train-one", str(w), "--fox", str(fox)]
                cmd += ["--train", str(steps), "--out", tmp]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                report = json.loads((Path(tmp) / "summary.json").read_text())
            row = {
                "seconds": report["seconds"],
                "loop_wall_seconds": report["leg"]["wall_seconds"],
                "test_psnr": round(report["test"]["psnr"], 3),
                "gaussians": report["num_gaussians"],
                "rebinned_steps": report["rebinned_steps"],
            }
            rows[str(w)].append(row)
            print(f"patch {w}: {row}", flush=True)
    summary = {
        w: {
            "seconds_mean": round(statistics.mean(r["seconds"] for r in runs_), 3),
            "seconds_range": [min(r["seconds"] for r in runs_), max(r["seconds"] for r in runs_)],
            "test_psnr_mean": round(statistics.mean(r["test_psnr"] for r in runs_), 3),
        }
        for w, runs_ in rows.items()
    }
    return {"runs": rows, "summary": summary}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    scene_options(
        parser, 5, "fox_trained_half,fox_trained_full,fox_trained_small,fox_4cams,random_1M"
    )
    parser.add_argument("--train", type=int, default=0, help="fox training steps (0: none)")
    parser.add_argument("--runs", type=int, default=3, help="training runs per width")
    parser.add_argument("--train-one", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train_one:
        return train_one(args.train_one, args.fox, args.train, args.out)
    scenes = time_scenes(args.scenes, args.fox, lambda s: time_scene(s, args.rounds, args.repeat))
    results: dict = {"environment": environment(), "commit": git_commit(), "scenes": scenes}
    if args.train:
        results["train"] = {"steps": args.train, **train_turns(args.fox, args.train, args.runs)}
    write_json(args.out / "patch_h200.json", results)
    print(f"wrote {args.out / 'patch_h200.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
