"""CPU time of the PyTorch reference renderer: 10k random Gaussians at 256x256.

Times ``gsnb.render(..., backend="reference")`` on the CPU: the forward pass
without autograd, the forward pass with autograd (as in training) and forward
plus backward, each the median of several runs after warm-up. Every variant
runs in a fresh child process, because OpenMP settings only take effect at
start-up:

- ``default``: torch's own thread count and the environment as it is;
- ``omp-passive``: the same with ``OMP_WAIT_POLICY=PASSIVE`` (idle OpenMP
  threads sleep instead of spinning, which matters on small VMs);
- ``1-thread``: ``torch.set_num_threads(1)``.

Run from the repository root::

    python benchmarks/bench_reference.py --out benchmarks/results

and it writes ``reference_cpu.json`` there (machine, torch version, date,
settings, every time in ms). ``--profile`` also prints the operators that
dominate forward and backward (torch.profiler).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import gsnb
from gsnb.cameras import intrinsics
from gsnb.utils.atomic import atomic_write

VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "omp-passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "1-thread": {"GSNB_BENCH_THREADS": "1"},
}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform``)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def source_identity() -> dict[str, str | None]:
    """The git commit of this checkout (if any) and a hash of the renderer's sources."""
    render_dir = Path(gsnb.__file__).resolve().parent / "render"
    digest = hashlib.sha256()
    for path in sorted(render_dir.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    try:
        commit = subprocess.run(
            ["git", "-C", str(render_dir), "rev-parse", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"git_commit": commit, "render_sources_sha256": digest.hexdigest()[:16]}


def random_scene(n: int, size: int, sh_degree: int, seed: int = 0) -> dict[str, Any]:
    """``n`` Gaussians in the cube [-1, 1]^3, seen from 3 units away with a 60 degree FOV."""
    gen = torch.Generator().manual_seed(seed)
    K = intrinsics(size, size, 60.0, axis="x")
    viewmat = torch.eye(4)
    viewmat[2, 3] = 3.0
    log_scales = torch.empty(n, 3).uniform_(math.log(0.005), math.log(0.05), generator=gen)
    return {
        "means": 2 * torch.rand(n, 3, generator=gen) - 1,
        "quats": torch.randn(n, 4, generator=gen),
        "scales": log_scales.exp(),
        "opacities": torch.empty(n).uniform_(0.1, 0.9, generator=gen),
        "colors": 0.3 * torch.randn(n, (sh_degree + 1) ** 2, 3, generator=gen),
        "viewmats": viewmat[None],
        "Ks": K[None],
        "width": size,
        "height": size,
    }


def median_ms(fn: Callable[[], Any], warmup: int, repeat: int, label: str) -> dict[str, Any]:
    """Median wall-clock and process CPU times of ``fn`` in ms, after ``warmup`` untimed runs.

    CPU time sums over threads (spinning OpenMP threads included); it is less
    disturbed than wall time when other processes share the machine.
    """
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for i in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(1000 * (time.perf_counter() - start))
        cpu.append(1000 * (time.process_time() - start_cpu))
        print(
            f"  {label}: run {i + 1}/{repeat} {wall[-1]:.0f} ms wall, {cpu[-1]:.0f} ms CPU",
            flush=True,
        )
    return {
        "median_ms": round(statistics.median(wall), 1),
        "median_cpu_ms": round(statistics.median(cpu), 1),
        "times_ms": [round(t, 1) for t in wall],
        "cpu_times_ms": [round(t, 1) for t in cpu],
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Time one variant in this process."""
    if os.environ.get("GSNB_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["GSNB_BENCH_THREADS"]))
    scene = random_scene(args.n, args.size, args.sh_degree)
    leaves = {
        k: v.requires_grad_()
        for k, v in scene.items()
        if k in ("means", "quats", "scales", "opacities", "colors")
    }

    def forward() -> gsnb.RenderResult:
        return gsnb.render(**scene, backend="reference")

    def forward_no_grad() -> None:
        with torch.no_grad():
            forward()

    def forward_backward() -> None:
        out = forward()
        (out.rgb.sum() + out.alpha.sum()).backward()
        for t in leaves.values():
            t.grad = None

    probe = forward()
    result: dict[str, Any] = {
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "visible_gaussians": probe.meta.num_visible,
        "mean_alpha": round(probe.alpha.mean().item(), 3),
    }
    for name, fn in (
        ("forward_no_grad", forward_no_grad),
        ("forward", forward),
        ("forward_backward", forward_backward),
    ):
        result[name] = median_ms(fn, args.warmup, args.repeat, name)
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        for name, fn in (("forward", forward_no_grad), ("forward_backward", forward_backward)):
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                fn()
            print(f"--- {name}: operators by self CPU time")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results"), help="output folder"
    )
    parser.add_argument("--n", type=int, default=10_000, help="number of Gaussians")
    parser.add_argument("--size", type=int, default=256, help="image width and height in px")
    parser.add_argument("--sh-degree", type=int, default=3, help="SH degree of the colours")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs (median reported)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    parser.add_argument("--profile", action="store_true", help="print the dominant operators")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print("RESULT " + json.dumps(measure(args)), flush=True)
        return

    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    results: dict[str, Any] = {}
    for variant in args.variants.split(","):
        print(f"== {variant}", flush=True)
        env = {**os.environ, **VARIANTS[variant]}
        child = [sys.executable, __file__, "--child", *sys.argv[1:]]
        proc = subprocess.run(child, env=env, stdout=subprocess.PIPE, text=True, check=True)
        lines = proc.stdout.splitlines()
        print("\n".join(line for line in lines if not line.startswith("RESULT ")), flush=True)
        results[variant] = json.loads(
            next(line for line in lines if line.startswith("RESULT "))[7:]
        )

    payload = {
        "benchmark": "reference renderer on the CPU",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15_min_before": load_before,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gsnb": gsnb.__version__,
        **source_identity(),
        "settings": {
            "gaussians": args.n,
            "width": args.size,
            "height": args.size,
            "sh_degree": args.sh_degree,
            "dtype": "float32",
            "warmup": args.warmup,
            "repeat": args.repeat,
            "loss": "rgb.sum() + alpha.sum()",
        },
        "variants": results,
    }
    path = args.out / "reference_cpu.json"
    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as f:
        f.write(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")
    for variant, r in results.items():
        line = [f"{variant:12s} threads={r['torch_threads']}"]
        for key in ("forward_no_grad", "forward", "forward_backward"):
            line.append(
                f"{key} {r[key]['median_ms']:.0f} ms ({r[key]['median_cpu_ms']:.0f} ms CPU)"
            )
        print("  ".join(line))


if __name__ == "__main__":
    main()
