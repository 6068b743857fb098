"""``gsnb process`` on the fox's 67 photos (CPU): time per stage, registered images, points,
reprojection error, and agreement with the fox's own COLMAP poses after a similarity transform.

    python benchmarks/bench_sfm.py --out benchmarks/results/sfm_fox_cpu.json \
        --keep /tmp/fox_processed

Sizes: ``full`` (1080x1920, the photos as they are) and ``half`` (``--max-image-size 960``).
``--keep DIR`` leaves each processed dataset at ``DIR/<size>`` (the dataset only, its work
folder removed) for ``gsnb train``; otherwise they are written to a temporary folder.
The machine's load average at the start is recorded: other work on the same cores slows
every stage.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FOX, REPO, environment, write_json

from gsnb.data.colmap import read_colmap_model
from gsnb.data.sfm import ProcessOptions, process
from gsnb.data.sfm.agreement import compare_poses

SIZES = {"full": None, "half": 960}


def agreement(out: Path, fox: Path) -> dict[str, Any]:
    """Pose agreement of the processed model with the fox's own, over the images both hold."""
    own = read_colmap_model(fox / "sparse" / "0")
    ours = read_colmap_model(out / "sparse" / "0")
    truth = {name: own.viewmat(i) for i, (name, *_) in own.images.items()}
    found = {name: ours.viewmat(i) for i, (name, *_) in ours.images.items()}
    names = sorted(set(truth) & set(found))
    fit = compare_poses(np.stack([found[n] for n in names]), np.stack([truth[n] for n in names]))
    return {
        "images_compared": fit.count,
        "max_center_error_of_extent": round(fit.center_error, 5),
        "mean_center_error_of_extent": round(fit.mean_center_error, 5),
        "max_rotation_error_deg": round(fit.rotation_error_deg, 4),
        "mean_rotation_error_deg": round(fit.mean_rotation_error_deg, 4),
        "max_rotation_error_deg_after_common_tilt": round(fit.offset_rotation_error_deg, 4),
    }


def run_size(fox: Path, size: str, folder: Path) -> dict[str, Any]:
    """Process the fox at one size into ``folder``; the numbers of the run."""
    shutil.rmtree(folder, ignore_errors=True)
    start = time.perf_counter()
    summary = process(fox / "images", folder, ProcessOptions(max_image_size=SIZES[size]))
    total = time.perf_counter() - start
    print(f"{size}: " + "; ".join(summary.lines()), flush=True)
    return {
        "max_image_size": SIZES[size],
        "image_size": summary.image_size,
        "images_in": summary.images_in,
        "registered": summary.registered,
        "unregistered": summary.unregistered,
        "points": summary.points,
        "mean_reprojection_error_px": round(summary.mean_reprojection_error, 4),
        "pieces": summary.pieces,
        "matcher": summary.matcher,
        "seconds": summary.seconds,
        "total_seconds": round(total, 1),
        "agreement_with_fox_colmap": agreement(folder, fox),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fox", type=Path, default=FOX, help=f"the fox capture (default {FOX})")
    parser.add_argument("--out", type=Path, required=True, help="the result JSON file")
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["half", "full"])
    parser.add_argument("--keep", type=Path, default=None, help="keep the datasets here")
    args = parser.parse_args(argv)
    import pycolmap

    load = os.getloadavg()
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    result: dict[str, Any] = {
        "benchmark": "gsnb process on the fox's 67 photos, CPU",
        "environment": environment() | {"pycolmap": pycolmap.__version__, "commit": commit},
        "loadavg_at_start": [round(x, 2) for x in load],
        "sizes": {},
    }
    with tempfile.TemporaryDirectory() as scratch:
        base = args.keep if args.keep is not None else Path(scratch)
        for size in args.sizes:
            result["sizes"][size] = run_size(args.fox.resolve(), size, base / size)
            if args.keep is not None:
                shutil.rmtree(base / size / "work", ignore_errors=True)
                shutil.rmtree(base / size / ".gsnb-cache", ignore_errors=True)
            write_json(args.out, result)  # each size as soon as it is measured
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
