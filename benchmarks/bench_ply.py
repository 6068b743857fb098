"""Peak memory of writing and reading a large 3DGS PLY file (CPU only).

Each step runs in a fresh process and reports its peak resident set size
(``ru_maxrss``) above the process's size before the step, next to the size of
the Gaussians' tensors, so "no extra full copy" shows as a ratio close to 1
for reading and close to 0 for writing.

    python benchmarks/bench_ply.py --gaussians 5000000 --out out/bench_ply
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _make_splats(n: int, sh_degree: int):
    import torch

    generator = torch.Generator().manual_seed(0)
    k = (sh_degree + 1) ** 2
    return {
        "means": torch.randn(n, 3, generator=generator),
        "quats": torch.randn(n, 4, generator=generator),
        "scales": torch.randn(n, 3, generator=generator),
        "opacities": torch.randn(n, generator=generator),
        "sh0": torch.randn(n, 1, 3, generator=generator),
        "shN": torch.randn(n, k - 1, 3, generator=generator),
    }


def _step(step: str, path: str, n: int, sh_degree: int) -> dict:
    """Run one step in this process; returns its numbers."""
    from gsnb.export.ply import read_ply, write_ply

    splats = _make_splats(n, sh_degree) if step == "write" else None
    tensor_bytes = 4 * n * (3 + 4 + 3 + 1 + 3 * (sh_degree + 1) ** 2)
    before = _peak_rss_bytes()
    start = time.perf_counter()
    if step == "write":
        write_ply(path, splats)
    else:
        splats = read_ply(path)
        assert splats["means"].shape[0] == n
    seconds = time.perf_counter() - start
    added = _peak_rss_bytes() - before
    return {
        "step": step,
        "seconds": round(seconds, 2),
        "tensor_mib": round(tensor_bytes / 2**20, 1),
        "peak_rss_mib": round(_peak_rss_bytes() / 2**20, 1),
        "peak_rss_added_mib": round(added / 2**20, 1),
        "added_over_tensors": round(added / tensor_bytes, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gaussians", type=int, default=5_000_000)
    parser.add_argument("--sh-degree", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="folder for bench_ply.json")
    parser.add_argument("--step", choices=["write", "read"], help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(_step(args.step, args.file, args.gaussians, args.sh_degree)))
        return 0
    results = []
    with tempfile.TemporaryDirectory() as folder:
        file = str(Path(folder) / "scene.ply")
        for step in ("write", "read"):
            command = [sys.executable, __file__, "--step", step, "--file", file]
            command += ["--gaussians", str(args.gaussians), "--sh-degree", str(args.sh_degree)]
            line = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            results.append(json.loads(line.strip().splitlines()[-1]))
            results[-1]["file_mib"] = round(Path(file).stat().st_size / 2**20, 1)
            print(results[-1], flush=True)
    report = {
        "benchmark": "ply_memory",
        "gaussians": args.gaussians,
        "sh_degree": args.sh_degree,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "versions": {
            "python": platform.python_version(),
            **{name: metadata.version(name) for name in ("torch", "numpy", "plyfile")},
        },
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "results": results,
    }
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_ply.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
