"""Quality of the correction options on a phone capture: baseline, +exposure, +pose_refine, both.

Trains the fox (67 phone photos) four times from the same seed with the default
strategy, each with the trainer's defaults except the options named, and reports
per run: test PSNR / SSIM (LPIPS when its weights are on disk) under the run's
evaluation protocol, the same metrics on the right halves of the test views for
every run (the one number all four share), the Gaussian count and the training
seconds (the trainer's own step timing, CUDA synchronised at the end).

Evaluation protocols (``protocol`` in each row):

- ``full images``: the test views (every 8th) are held out whole and measured whole;
  the baseline and ``pose_refine`` runs, and today's evaluation.
- ``right halves``: 3DGS's protocol with exposure compensation (``--train_test_exp``):
  the test views train on their left halves (their exposure and, with ``pose_refine``,
  their pose correction are learned there) and are measured on their right halves.

GPU (the numbers to compare; about 4 x 1-2 minutes on one H200)::

    python benchmarks/bench_quality_options.py .device/fox --out "$OUT"

CPU smoke test (seconds per run)::

    python benchmarks/bench_quality_options.py ../shared/data/fox --steps 20 --downscale 8 \\
        --backend reference --out /tmp/quality

Writes ``OUT/quality_options_<steps>.json`` (``..._<steps>_<runs>.json`` for a subset
given with ``--runs``, e.g. two commands of two runs each) with the GPU name, versions,
commit, date and command, after every run.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import environment, git_commit, write_json

from gsnb.train import TrainConfig, Trainer

RUNS: dict[str, dict[str, bool]] = {
    "baseline": {},
    "exposure": {"exposure": True},
    "pose_refine": {"pose_refine": True},
    "both": {"exposure": True, "pose_refine": True},
}
"""Each run's options over the trainer's defaults."""


def run_one(name: str, data: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Train from scratch with run ``name``'s options; its quality, count and time."""
    from gsnb.train.evaluation import evaluate_views

    options = RUNS[name]
    config = TrainConfig(
        steps=args.steps, seed=args.seed, device=args.device, backend=args.backend,
        downscale=args.downscale, test_every=args.test_every, **options,
    )  # fmt: skip
    trainer = Trainer(data, config)
    with tqdm(total=args.steps, desc=name, unit="step", mininterval=2.0) as bar:
        remove = trainer.on_step(lambda m: bar.update(1))
        trainer.run()
        remove()
    if trainer.device.type == "cuda":
        torch.cuda.synchronize()
    result = trainer.evaluate("test")
    views = data.test
    targets = [v.load_image().to(trainer.device) for v in views]
    halves = evaluate_views(
        lambda view: trainer.render_view(view, corrected=True).rgb[0],
        views, targets, trainer.step_count, right_half=True,
    )  # fmt: skip
    row = {
        "options": options,
        "protocol": result.protocol,
        "protocol_text": trainer.corrections.protocol,
        "test_psnr": result.psnr,
        "test_ssim": result.ssim,
        "test_lpips": result.lpips,
        "test_right_half_psnr": halves.psnr,
        "test_right_half_ssim": halves.ssim,
        "test_views": result.num_views,
        "num_gaussians": trainer.num_gaussians,
        "train_seconds": trainer.train_seconds,
        "skipped_steps": trainer.skipped_steps,
    }
    print(
        f"{name:12s} test PSNR {result.psnr:6.2f} dB, SSIM {result.ssim:.4f} ({result.protocol}); "
        f"right halves {halves.psnr:6.2f} dB; {trainer.num_gaussians} Gaussians; "
        f"{trainer.train_seconds:.1f} s",
        flush=True,
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", default=".device/fox", help="dataset folder")
    parser.add_argument("--out", required=True, help="folder for the result JSON")
    parser.add_argument("--steps", type=int, default=7000, help="steps per run (default 7000)")
    parser.add_argument("--downscale", type=int, default=2, help="image downscale (default 2)")
    parser.add_argument("--test-every", type=int, default=8, help="held-out views (default 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="cuda", choices=("cuda", "reference", "auto"))
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    parser.add_argument(
        "--runs", default=",".join(RUNS), help=f"comma list of {', '.join(RUNS)} (default all)"
    )
    parser.add_argument("--commit", default=None, help="commit to record (default: git's)")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        parser.error(f"unknown runs {unknown}; choose from {list(RUNS)}")
    if not Path(args.data).is_dir():
        parser.error(f"{args.data} is not a dataset folder; pass the fox's path")
    if args.backend == "cuda":
        from gsnb.toolchain import build

        build(progress=True)
    from gsnb.data.dataset import load_dataset

    started = time.perf_counter()
    data = load_dataset(args.data, downscale=args.downscale, test_every=args.test_every)
    print(f"data: {data!r} in {time.perf_counter() - started:.1f} s", flush=True)
    payload: dict[str, Any] = {
        "benchmark": "bench_quality_options",
        "environment": environment(),
        "commit": args.commit or git_commit(),
        "command": shlex.join(["python", "benchmarks/bench_quality_options.py", *argv]),
        "data": Path(args.data).name,
        "downscale": args.downscale,
        "image_size": [data.views[0].width, data.views[0].height],
        "steps": args.steps,
        "seed": args.seed,
        "backend": args.backend,
        "strategy": "default",
        "protocols": {
            "full images": "test views (every 8th) held out whole and measured whole",
            "right halves": "test views train on their left halves (3DGS train_test_exp) and "
            "are measured on their right halves",
        },
        "runs": {},
    }
    subset = "" if runs == list(RUNS) else "_" + "_".join(runs)
    out = Path(args.out) / f"quality_options_{args.steps}{subset}.json"
    for name in runs:
        payload["runs"][name] = run_one(name, data, args)
        write_json(out, payload)  # after every run, so a stopped benchmark keeps its rows
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
