"""Training images off the GPU: peak GPU memory and step time vs the number of views.

1. A capture of N views at 1080x1920 is generated in a temporary folder: random
   Gaussians rendered on the GPU from cameras around them, written as JPEGs on a
   thread pool, with a COLMAP text model (its generation time is reported). For each
   N, a run trains ``--steps`` steps with ``images_on="cpu"`` (pinned host memory,
   the next views copied ahead on a side stream) and with ``images_on="gpu"``: peak
   GPU memory and the median step time of each.
2. The fox at ``--fox-downscale`` for ``--fox-steps`` steps, images on the CPU and on
   the GPU: test PSNR and wall time of each.

    python benchmarks/bench_images.py --out benchmarks/results
    python benchmarks/bench_images.py --tiny --out /tmp/bench  # a CPU smoke run
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FOX, REPO, environment, git_commit, write_json

import gsnb
from gsnb.cameras import intrinsics, look_at
from gsnb.data.colmap import ColmapModel, write_colmap_text
from gsnb.data.dataset import load_dataset
from gsnb.raster.scenes import random_gaussians
from gsnb.train import TrainConfig, Trainer
from gsnb.train.inputs import ViewImages


def generate_capture(
    root: Path, views: int, width: int, height: int, device: str, gaussians: int
) -> float:
    """Write ``views`` rendered JPEGs and a COLMAP model under ``root``; seconds taken."""
    start = time.perf_counter()
    scene = random_gaussians(gaussians, sh_degree=None, extent=1.0, device=device)
    K = intrinsics(width, height, 50.0, axis="x").to(device)
    (root / "images").mkdir(parents=True)
    images = {}
    golden = math.pi * (3.0 - math.sqrt(5.0))  # views on a Fibonacci sphere
    with ThreadPoolExecutor(max_workers=16) as pool:
        jobs = []
        for i in tqdm(range(views), desc="rendering views", unit="view"):
            z = 1.0 - 2.0 * (i + 0.5) / views
            r = math.sqrt(1.0 - z * z)
            eye = 3.0 * torch.tensor([r * math.cos(golden * i), r * math.sin(golden * i), z])
            up = torch.tensor([0.0, 0.0, 1.0]) if abs(z) < 0.95 else torch.tensor([0.0, 1.0, 0.0])
            viewmat = look_at(eye, torch.zeros(3), up=up)
            out = gsnb.render(
                scene["means"], scene["quats"], scene["scales"], scene["opacities"],
                scene["colors"], viewmat[None].to(device), K[None], width, height,
            )  # fmt: skip
            pixels = (out.rgb[0].clamp(0, 1) * 255).round().to(torch.uint8).cpu().numpy()
            name = f"{i:05d}.jpg"
            jobs.append(pool.submit(cv2.imwrite, str(root / "images" / name), pixels[..., ::-1]))
            w2c = viewmat.double().numpy()
            images[i + 1] = (name, _qvec(w2c[:3, :3]), w2c[:3, 3], 1)
        for job in jobs:
            assert job.result(), "a JPEG could not be written"
    k = K.double().cpu().numpy()
    cameras = {1: ("PINHOLE", width, height, (k[0, 0], k[1, 1], k[0, 2], k[1, 2]))}
    points = scene["means"].double().cpu().numpy()[:INIT_POINTS]
    rgb = (scene["colors"][:INIT_POINTS].clamp(0, 1) * 255).to(torch.uint8).cpu().numpy()
    (root / "sparse" / "0").mkdir(parents=True)
    write_colmap_text(ColmapModel(cameras, images, points, rgb), root / "sparse" / "0")
    return time.perf_counter() - start


INIT_POINTS = 20_000  # the generated capture's points3D, which the Gaussians start from


def _qvec(rot: np.ndarray) -> np.ndarray:
    """Hamilton quaternion (w, x, y, z) of a rotation matrix."""
    w = math.sqrt(max(0.0, 1.0 + rot[0, 0] + rot[1, 1] + rot[2, 2])) / 2.0
    x = math.copysign(
        math.sqrt(max(0.0, 1.0 + rot[0, 0] - rot[1, 1] - rot[2, 2])) / 2.0, rot[2, 1] - rot[1, 2]
    )
    y = math.copysign(
        math.sqrt(max(0.0, 1.0 - rot[0, 0] + rot[1, 1] - rot[2, 2])) / 2.0, rot[0, 2] - rot[2, 0]
    )
    z = math.copysign(
        math.sqrt(max(0.0, 1.0 - rot[0, 0] - rot[1, 1] + rot[2, 2])) / 2.0, rot[1, 0] - rot[0, 1]
    )
    return np.array([w, x, y, z])


def train_views(data, images_on: str, steps: int, device: str) -> dict[str, Any]:
    """Peak GPU memory and median step time of ``steps`` steps with ``images_on``."""
    cuda = device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    config = TrainConfig(steps=steps, device=device, images_on=images_on, test_every=0)
    trainer = Trainer(data, config, progress=True)
    load_s = time.perf_counter() - start
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.step()  # its metrics read is the step's host sync
        times.append(time.perf_counter() - t0)
    if cuda:
        torch.cuda.synchronize()
    result = {
        "images_on": trainer.train_images.images_on,
        "load_s": round(load_s, 2),
        "step_ms_median": round(1000 * statistics.median(times[steps // 5 :]), 3),
        "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3) if cuda else None,
        "host_image_mib": round(trainer.train_images.host_nbytes / 2**20, 1),
        "gaussians": trainer.num_gaussians,
    }
    del trainer
    return result


def train_fox(fox: Path, images_on: str, steps: int, downscale: int, device: str, cache: Path):
    """Test PSNR and wall time of a fox run with ``images_on``."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    data = load_dataset(fox, downscale=downscale, cache_dir=cache)
    config = TrainConfig(steps=steps, device=device, images_on=images_on, downscale=downscale)
    trainer = Trainer(data, config)
    loaded = time.perf_counter()
    trainer.run(progress=True)
    if device == "cuda":
        torch.cuda.synchronize()
    end = time.perf_counter()
    wall, train_s, load_s = end - start, end - loaded, loaded - start
    result = trainer.evaluate("test")
    return {
        "images_on": trainer.train_images.images_on,
        "steps": steps,
        "wall_s": round(wall, 1),
        "load_s": round(load_s, 2),
        "train_s": round(train_s, 2),
        "psnr": round(result.psnr, 3),
        "ssim": round(result.ssim, 4),
        "gaussians": trainer.num_gaussians,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for images_<gpu>.json")
    parser.add_argument("--views", default="200,1000,2000", help="view counts, comma-separated")
    parser.add_argument("--size", default="1080x1920", help="WIDTHxHEIGHT of the generated views")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per view count")
    parser.add_argument("--fox", type=Path, default=None, help="the fox capture (default: found)")
    parser.add_argument("--fox-steps", type=int, default=7000)
    parser.add_argument("--fox-downscale", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="a CPU smoke run at tiny sizes")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    if args.tiny:
        args.views, args.size, args.steps, args.fox_steps, args.fox_downscale = (
            "12,24", "48x64", 4, 10, 16,
        )  # fmt: skip
    width, height = (int(v) for v in args.size.split("x"))
    counts = [int(v) for v in args.views.split(",")]
    payload: dict[str, Any] = {
        "environment": environment(),
        "commit": git_commit(),
        "device": device,
    }
    payload["settings"] = {"views": counts, "size": [width, height], "steps": args.steps}
    payload["views"] = []
    with tempfile.TemporaryDirectory(prefix="gsnb-bench-images-") as tmp:
        root = Path(tmp) / "capture"
        gaussians = 2_000 if args.tiny else 50_000
        gen_s = generate_capture(root, max(counts), width, height, device, gaussians)
        payload["generation_s"] = round(gen_s, 1)
        print(f"generated {max(counts)} views of {width}x{height} in {gen_s:.1f} s")
        for count in counts:
            data = load_dataset(root, test_every=0, cache_dir=Path(tmp) / "cache")
            data.train_ids = data.train_ids[:count]
            row: dict[str, Any] = {"views": count}
            for images_on in ("cpu", "gpu"):
                row[images_on] = train_views(data, images_on, args.steps, device)
                print(count, images_on, row[images_on])
            payload["views"].append(row)
            write_json(args.out / _name(device), payload)
        fox = args.fox or next((p for p in (REPO / ".device" / "fox", FOX) if p.is_dir()), None)
        if fox is not None:
            # Fill the downscaled-image cache first, so neither run pays for making it.
            warm = load_dataset(fox, downscale=args.fox_downscale, cache_dir=Path(tmp) / "fox")
            ViewImages(warm.views, torch.device("cpu"))
            payload["fox"] = {
                place: train_fox(
                    fox, place, args.fox_steps, args.fox_downscale, device, Path(tmp) / "fox"
                )
                for place in ("cpu", "gpu")
            }
            print("fox", payload["fox"])
    write_json(args.out / _name(device), payload)
    print(f"wrote {args.out / _name(device)}")
    return 0


def _name(device: str) -> str:
    if device != "cuda":
        return "images_cpu_smoke.json"
    gpu = torch.cuda.get_device_properties(0).name.lower()
    return f"images_{'h200' if 'h200' in gpu else gpu.replace(' ', '_')}.json"


if __name__ == "__main__":
    sys.exit(main())
