"""Data-parallel training speed: the fox at full resolution, batches of 2 and 4, on 1 and 2 GPUs.

Each configuration is one ``gsnb train DATA --nproc N --batch-size B`` command (the path
users take: one process for N = 1, torch.distributed's elastic launcher for N > 1), run
for the same number of steps with the default strategy and seed. From each run's
``summary.json`` it reports steps/s and views/s (over the summed step times, which hold
the gradient all-reduce and the wait for the slowest process), the test PSNR (every 8th
view held out), the Gaussian count and the peak allocated memory of every GPU, and for
each batch the speed-up of N GPUs over one. At one batch size, N = 1 and N = 2 train the
same model (up to the order of float sums), so their PSNR should agree; across batch
sizes they differ, since a batch of 4 shows twice the views per step.

On a 2-GPU machine (NCCL; NVLink multicast off)::

    python3 -m gsnb.cli build
    export NCCL_NVLS_ENABLE=0
    python3 benchmarks/bench_multigpu.py --data .device/fox --out $OUT --steps 2000

A smoke test on the CPU (gloo, the reference renderer, a tiny synthetic scene)::

    python benchmarks/bench_multigpu.py --synthetic 24 --device cpu --steps 6 --out /tmp/mg

Writes ``OUT/multigpu.json`` (and each run's folder and log under ``OUT/runs/``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, environment, git_commit, write_json


def gpu_names() -> list[str]:
    """The name of every visible GPU."""
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def train_command(
    args: argparse.Namespace, data: Path, out: Path, batch: int, nproc: int
) -> list[str]:
    """The ``gsnb train`` command of one configuration."""
    return [
        sys.executable, "-m", "gsnb.cli", "train", str(data), "--out", str(out),
        "--nproc", str(nproc), "--batch-size", str(batch), "--steps", str(args.steps),
        "--downscale", str(args.downscale), "--device", args.device, "--backend", args.backend,
        "--checkpoint-every", "0", "--checkpoint-minutes", "0", "--overwrite", "--no-progress",
        *args.extra,
    ]  # fmt: skip


def python_path() -> str:
    """This checkout first, then the caller's own ``PYTHONPATH`` (packages installed beside
    the interpreter's, e.g. with ``pip install --target``), for the training commands.

    Example:
        >>> python_path().split(os.pathsep)[0] == str(REPO)
        True
    """
    parts = [str(REPO), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    return os.pathsep.join(p for p in parts if p)


def run_one(args: argparse.Namespace, data: Path, batch: int, nproc: int) -> dict[str, Any]:
    """Train one configuration; its numbers from ``summary.json`` (or the error)."""
    name = f"b{batch}_n{nproc}"
    out = Path(args.out) / "runs" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    command = train_command(args, data, out, batch, nproc)
    env = os.environ | {"PYTHONPATH": python_path()}
    started = time.perf_counter()
    with open(out.parent / f"{name}.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    row: dict[str, Any] = {
        "batch_size": batch,
        "nproc": nproc,
        "command": shlex.join(command),
        "wall_s": round(time.perf_counter() - started, 1),
        "returncode": done.returncode,
    }
    if done.returncode != 0:
        tail = (out.parent / f"{name}.log").read_text().strip().splitlines()[-3:]
        return row | {"error": " | ".join(tail)}
    report = json.loads((out / "summary.json").read_text())
    seconds = report["seconds"]
    return row | {
        "steps": report["steps"],
        "train_seconds": seconds,
        "steps_per_s": round(report["steps"] / seconds, 3),
        "views_per_s": round(report["steps"] * batch / seconds, 3),
        "test_psnr": report.get("test", {}).get("psnr"),
        "num_gaussians": report["num_gaussians"],
        "peak_gpu_memory_gib_per_process": report.get(
            "peak_gpu_memory_gib_per_process",
            [report["peak_gpu_memory_gib"]] if "peak_gpu_memory_gib" in report else None,
        ),
    }


def speedups(rows: list[dict[str, Any]]) -> dict[str, float]:
    """views/s of N processes over 1 process, per batch size."""
    found = {}
    for row in rows:
        one = [r for r in rows if r["batch_size"] == row["batch_size"] and r["nproc"] == 1]
        if row["nproc"] > 1 and one and "views_per_s" in row and "views_per_s" in one[0]:
            key = f"batch{row['batch_size']}_nproc{row['nproc']}_vs_1"
            found[key] = round(row["views_per_s"] / one[0]["views_per_s"], 3)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, help="dataset folder (the fox)")
    source.add_argument("--synthetic", type=int, metavar="PX", help="a synthetic scene of PX px")
    parser.add_argument("--out", type=Path, required=True, help="folder for multigpu.json")
    parser.add_argument("--batches", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--nprocs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--downscale", type=int, default=1)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--backend", default=None, help="default: cuda on GPUs, else reference")
    parser.add_argument("extra", nargs="*", help="more gsnb train options, after --")
    args = parser.parse_args()
    on_gpu = args.device != "cpu" and torch.cuda.is_available()
    args.backend = args.backend or ("cuda" if on_gpu else "reference")
    if on_gpu and max(args.nprocs) > torch.cuda.device_count():
        parser.error(f"--nprocs {max(args.nprocs)} but {torch.cuda.device_count()} GPUs visible")
    data = args.data
    if data is None:
        from gsnb.data.synthetic import make_synthetic_scene

        data = make_synthetic_scene(args.out / "scene", num_views=9, size=args.synthetic)
    configs = [(b, n) for b in args.batches for n in args.nprocs]
    rows = []
    for batch, nproc in tqdm(configs, desc="configurations", unit="run"):
        rows.append(run_one(args, Path(data), batch, nproc))
        tqdm.write(json.dumps(rows[-1]))
    result = {
        "benchmark": "bench_multigpu",
        "environment": environment() | {"gpus": gpu_names(), "commit": git_commit()},
        "command": shlex.join([sys.executable, *sys.argv]),
        "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"),
        "data": str(data),
        "runs": rows,
        "speedup_views_per_s": speedups(rows),
    }
    write_json(args.out / "multigpu.json", result)
    print(json.dumps(result["speedup_views_per_s"]))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
