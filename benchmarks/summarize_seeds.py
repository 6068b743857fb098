"""Summarise bench_train runs over several seeds: per seed and mean, SD and standard error.

Each input is a ``train_<steps>.json`` holding a gsnb and a gsplat run of one seed
(``bench_train.py --renderers gsnb,gsplat`` or two runs merged with ``--merge``):

    python benchmarks/summarize_seeds.py benchmarks/results/train_7000.json \\
        benchmarks/results/train_seeds/seed*/train_7000.json \\
        --out benchmarks/results/train_seeds/summary_7000.json

Differences are gsnb minus gsplat (dB); ratios gsnb / gsplat. The wall ratio is
summarised over the seeds whose two runs had the GPU to themselves (files where
neither run is marked ``overlapped``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_json


def spread(values: list[float]) -> dict[str, float]:
    """Mean, median, SD, standard error, min and max of ``values`` (rounded)."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {
        "mean": round(statistics.mean(values), 3),
        "median": round(statistics.median(values), 3),
        "sd": round(sd, 3),
        "standard_error": round(sd / len(values) ** 0.5, 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def summarize(files: list[Path]) -> dict[str, Any]:
    """Per-seed rows and the spread of each quantity over the seeds."""
    rows = []
    for path in files:
        payload = json.loads(path.read_text())
        a, b = payload["runs"]["gsnb"], payload["runs"]["gsplat"]
        versus = payload["gsnb_vs_gsplat"]  # written by bench_train once both runs exist
        row = {
            "seed": payload["seed"],
            "steps": payload["steps"],
            "test_psnr": [a["test_psnr"], b["test_psnr"]],
            "test_psnr_diff_db": versus["psnr_db"],
            "wall_s": [a["wall_s"], b["wall_s"]],
            "wall_ratio": versus["wall_ratio"],  # None where a run shared the GPU
            "num_gaussians": [a["num_gaussians"], b["num_gaussians"]],
            "file": str(path),
        }
        if "train_psnr" in a and "train_psnr" in b:
            row["train_psnr_diff_db"] = round(a["train_psnr"] - b["train_psnr"], 3)
        rows.append(row)
    if len({r["steps"] for r in rows}) > 1:
        raise SystemExit("the files hold runs of different step counts")
    rows.sort(key=lambda r: r["seed"])
    summary: dict[str, Any] = {
        "benchmark": "bench_train seeds",
        "steps": rows[0]["steps"],
        "seeds": [r["seed"] for r in rows],
        "test_psnr_diff_db": spread([r["test_psnr_diff_db"] for r in rows]),
        "wall_ratio": None,
        "num_gaussians_ratio": spread(
            [r["num_gaussians"][0] / r["num_gaussians"][1] for r in rows]
        ),
        "test_psnr_gsnb": spread([r["test_psnr"][0] for r in rows]),
        "test_psnr_gsplat": spread([r["test_psnr"][1] for r in rows]),
    }
    walls = [r["wall_ratio"] for r in rows if r["wall_ratio"] is not None]
    if walls:
        summary["wall_ratio"] = spread(walls) | {"runs": len(walls)}
    train = [r["train_psnr_diff_db"] for r in rows if "train_psnr_diff_db" in r]
    if train:
        summary["train_psnr_diff_db"] = spread(train) | {"runs": len(train)}
    summary["rows"] = rows
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "files", nargs="+", type=Path, help="train_<steps>.json files, one per seed"
    )
    parser.add_argument("--out", type=Path, help="write the summary here as JSON")
    args = parser.parse_args()
    summary = summarize(args.files)
    if args.out:
        write_json(args.out, summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
