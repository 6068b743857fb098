"""Does rendering at 1080p and lanczos-upscaling to 4K look as good as rendering at 4K?

For each frame of a camera path this renders the scene natively at 3840x2160
and at 1920x1080, upscales the latter with gsnb's lanczos (and, for context,
torch's bicubic), and reports

- time per frame of both ways (CUDA events after warm-up, medians),
- PSNR and SSIM of the upscaled frames against the native 4K frames,

as JSON with the GPU, versions and date in ``--out`` (with ``--crops``, also
a crop of frame 0 of each for the eye). Nothing is trained beyond an optional
short fit: give a trained scene with ``--scene`` (PLY or checkpoint), or the
script builds one from the fox capture's COLMAP points (kNN scales) and fits
it for ``--fit-steps`` steps of plain Adam on L1 against a few fox photos
(no densification, so the scene is smoother than a fully trained one).

Run on the GPU machine (after ``gsnb build``, so the CUDA rasterizer is used;
needs gsnb's runtime dependencies, scipy and pillow among them):

    python benchmarks/bench_upscale.py --out benchmarks/results

Smoke test on a CPU (tiny sizes, reference backend):

    python benchmarks/bench_upscale.py --device cpu --native-size 128x72 --render-size 64x36 \\
        --fit-steps 3 --frames 2 --downscale 16 --out /tmp/bench_upscale
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

REPO = Path(__file__).resolve().parents[1]
FOX = REPO / ".." / "shared" / "data" / "fox"


def parse_size(text: str) -> tuple[int, int]:
    """``"3840x2160"`` -> ``(3840, 2160)``."""
    width, height = (int(part) for part in text.lower().split("x"))
    return width, height


class Timer:
    """Wall time of a callable in milliseconds: CUDA events on a GPU, perf_counter on a CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def __call__(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            result = fn()
            end.record()
            torch.cuda.synchronize()
            return result, start.elapsed_time(end)
        begin = time.perf_counter()
        result = fn()
        return result, 1000 * (time.perf_counter() - begin)


def psnr(a: Tensor, b: Tensor) -> float:
    """PSNR in dB of two ``[H, W, 3]`` images in [0, 1]."""
    mse = torch.mean((a.double() - b.double()) ** 2).item()
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def ssim(a: Tensor, b: Tensor) -> float:
    """SSIM (Wang et al. 2004; 11x11 Gaussian window, sigma 1.5) of ``[H, W, 3]`` images."""
    coords = torch.arange(11, dtype=torch.float64, device=a.device) - 5
    g = torch.exp(-(coords**2) / (2 * 1.5**2))
    window = (g[:, None] * g[None, :] / g.sum() ** 2).expand(3, 1, 11, 11)
    x, y = (t.double().permute(2, 0, 1)[None] for t in (a, b))

    def blur(t: Tensor) -> Tensor:
        return F.conv2d(t, window, groups=3)

    mu_x, mu_y = blur(x), blur(y)
    var_x, var_y = blur(x * x) - mu_x**2, blur(y * y) - mu_y**2
    cov = blur(x * y) - mu_x * mu_y
    c1, c2 = 0.01**2, 0.03**2
    score = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / (
        (mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2)
    )
    return score.mean().item()


def build_scene(args: argparse.Namespace, device: torch.device) -> tuple[Any, Any, dict]:
    """The model, the dataset (or None) and a description of how the scene was made."""
    from gsnb.model import GaussianModel

    if args.scene:
        from gsnb.export.commands import load_scene

        model = load_scene(args.scene, device)
        return model, None, {"source": str(args.scene), "gaussians": model.num_gaussians}
    from gsnb.data.dataset import load_dataset

    print(f"loading {args.data} (downscale {args.downscale})", flush=True)
    dataset = load_dataset(args.data, downscale=args.downscale, test_every=0)
    model = GaussianModel.from_points(dataset.points, dataset.points_rgb, sh_degree=3).to(device)
    info = {"source": f"COLMAP points of {Path(args.data).name}", "gaussians": model.num_gaussians}
    if args.fit_steps > 0:
        info |= fit(model, dataset, args, device)
    return model, dataset, info


def fit(model: Any, dataset: Any, args: argparse.Namespace, device: torch.device) -> dict:
    """Plain Adam on L1 against a few photos (no densification): a quick, honest-looking scene."""
    views = dataset.train[:: max(1, len(dataset.train) // args.views)][: args.views]
    images = [v.load_image().to(device) for v in views]
    extent = dataset.extent
    s = model.splats
    optimiser = torch.optim.Adam(
        [
            {"params": [s["means"]], "lr": 1.6e-4 * extent},
            {"params": [s["scales"]], "lr": 5e-3},
            {"params": [s["quats"]], "lr": 1e-3},
            {"params": [s["opacities"]], "lr": 5e-2},
            {"params": [s["sh0"]], "lr": 2.5e-3},
            {"params": [s["shN"]], "lr": 2.5e-3 / 20},
        ],
        eps=1e-15,
    )
    begin = time.perf_counter()
    for step in range(args.fit_steps):
        view, image = views[step % len(views)], images[step % len(views)]
        out = model.render(
            view.viewmat[None].to(device), view.K[None].to(device), view.width, view.height
        )
        loss = (out.rgb[0] - image).abs().mean()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        if step % 50 == 0 or step == args.fit_steps - 1:
            print(f"fit step {step + 1}/{args.fit_steps}: L1 {loss.item():.4f}", flush=True)
    return {
        "fit_steps": args.fit_steps,
        "fit_views": len(views),
        "fit_size": [views[0].width, views[0].height],
        "fit_final_l1": round(loss.item(), 5),
        "fit_seconds": round(time.perf_counter() - begin, 1),
    }


def camera_path(
    model: Any, dataset: Any, frames: int, size: tuple[int, int]
) -> tuple[Tensor, Tensor]:
    """Frames along the training cameras when there is a dataset, else an orbit."""
    from gsnb.export import paths

    if dataset is None:
        orbit = paths.fit_orbit_to_points(model.splats["means"].detach())
        return paths.orbit_path(orbit, frames, *size)
    train = dataset.train
    viewmats = torch.stack([v.viewmat for v in train])
    Ks = torch.stack([v.K for v in train])
    return paths.train_path(
        viewmats, Ks, frames, *size, source_size=(train[0].width, train[0].height)
    )


def run(args: argparse.Namespace) -> dict:
    from gsnb import __version__
    from gsnb.cameras import scale_intrinsics
    from gsnb.export.upscale import lanczos_resize

    device = torch.device(args.device)
    torch.manual_seed(0)
    model, dataset, scene = build_scene(args, device)
    if device.type == "cuda" and not _cuda_rasterizer_built():
        print("WARNING: the CUDA rasterizer is not built; run `gsnb build` first, or the "
              "reference backend renders (slowly)", flush=True)  # fmt: skip
    (nw, nh), (rw, rh) = args.native_size, args.render_size
    viewmats, Ks = camera_path(model, dataset, args.frames, (nw, nh))
    viewmats, Ks = viewmats.to(device), Ks.to(device)
    Ks_low = scale_intrinsics(Ks, (nw, nh), (rw, rh))
    timer = Timer(device)
    backend = None

    @torch.no_grad()
    def render(i: int, K: Tensor, w: int, h: int) -> Tensor:
        nonlocal backend
        out = model.render(viewmats[i : i + 1], K[i : i + 1], w, h)
        backend = out.meta.backend
        return out.rgb[0].clamp(0.0, 1.0)

    def upscaled(i: int) -> Tensor:
        return lanczos_resize(render(i, Ks_low, rw, rh), nw, nh)

    for _ in range(args.warmup):  # kernels, allocator, lanczos weights
        render(0, Ks, nw, nh)
        upscaled(0)
    rows = []
    for i in range(args.frames):
        native_ms, lanczos_ms, resize_ms = [], [], []
        for _ in range(args.repeats):
            native, ms = timer(lambda i=i: render(i, Ks, nw, nh))
            native_ms.append(ms)
            up, ms = timer(lambda i=i: upscaled(i))
            lanczos_ms.append(ms)
        low = render(i, Ks_low, rw, rh)
        for _ in range(args.repeats):
            _, ms = timer(lambda low=low: lanczos_resize(low, nw, nh))
            resize_ms.append(ms)
        chw = low.permute(2, 0, 1)[None]
        bicubic = F.interpolate(chw, size=(nh, nw), mode="bicubic", align_corners=False)
        bicubic = bicubic[0].permute(1, 2, 0).clamp(0.0, 1.0)
        row = {
            "frame": i,
            "native_ms": statistics.median(native_ms),
            "render_low_plus_lanczos_ms": statistics.median(lanczos_ms),
            "lanczos_only_ms": statistics.median(resize_ms),
            "psnr_lanczos_db": psnr(up, native),
            "ssim_lanczos": ssim(up, native),
            "psnr_bicubic_db": psnr(bicubic, native),
            "ssim_bicubic": ssim(bicubic, native),
            "native_mean_intensity": native.mean().item(),
        }
        rows.append(row)
        print(
            f"frame {i + 1}/{args.frames}: native {row['native_ms']:.1f} ms, "
            f"{rw}x{rh}+lanczos {row['render_low_plus_lanczos_ms']:.1f} ms, "
            f"PSNR {row['psnr_lanczos_db']:.2f} dB, SSIM {row['ssim_lanczos']:.4f}",
            flush=True,
        )
        if i == 0 and args.crops:
            save_crops(args.out, native, up)

    def summary(key: str) -> dict:
        values = [r[key] for r in rows]
        return {
            "median": statistics.median(values),
            "mean": statistics.fmean(values),
            "min": min(values),
        }

    native_ms = statistics.median(r["native_ms"] for r in rows)
    low_ms = statistics.median(r["render_low_plus_lanczos_ms"] for r in rows)
    return {
        "benchmark": "upscale_1080p_lanczos_vs_native_4k",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor(),
        "versions": {
            "gsnb": __version__,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "python": platform.python_version(),
        },
        "backend": backend,
        "scene": scene,
        "path": "training cameras (spline)"
        if dataset is not None
        else "orbit around the Gaussians",
        "frames": args.frames,
        "repeats": args.repeats,
        "native_size": [nw, nh],
        "render_size": [rw, rh],
        "ms_per_frame": {
            "native": native_ms,
            "render_low_plus_lanczos": low_ms,
            "lanczos_only": statistics.median(r["lanczos_only_ms"] for r in rows),
            "speedup": native_ms / low_ms,
        },
        "psnr_db": {"lanczos": summary("psnr_lanczos_db"), "bicubic": summary("psnr_bicubic_db")},
        "ssim": {"lanczos": summary("ssim_lanczos"), "bicubic": summary("ssim_bicubic")},
        "per_frame": rows,
    }


def _cuda_rasterizer_built() -> bool:
    try:
        from gsnb.raster import cuda

        return bool(cuda.is_available())
    except Exception:  # any import or build problem means: not built
        return False


def save_crops(out: Path, native: Tensor, upscaled: Tensor, side: int = 512) -> None:
    """A centre crop of frame 0, native and upscaled, as PNGs for the eye."""
    import imageio.v2 as imageio

    from gsnb.export.upscale import to_uint8

    h, w = native.shape[:2]
    side = min(side, h, w)
    top, left = (h - side) // 2, (w - side) // 2
    for name, image in (("native", native), ("lanczos", upscaled)):
        imageio.imwrite(
            out / f"bench_upscale_crop_{name}.png",
            to_uint8(image[top : top + side, left : left + side]),
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for bench_upscale.json and crops"
    )
    parser.add_argument(
        "--scene", help="a trained PLY or checkpoint (default: fit one from --data)"
    )
    parser.add_argument("--data", default=str(FOX), help="dataset for the default scene (the fox)")
    parser.add_argument("--downscale", type=int, default=4, help="fit images downscale (default 4)")
    parser.add_argument("--views", type=int, default=8, help="photos to fit against (default 8)")
    parser.add_argument(
        "--fit-steps", type=int, default=300, help="Adam steps of the fit (default 300)"
    )
    parser.add_argument("--frames", type=int, default=8, help="frames along the path (default 8)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed repeats per frame (default 3)"
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed warm-up renders (default 3)")
    parser.add_argument("--native-size", type=parse_size, default=(3840, 2160))
    parser.add_argument("--render-size", type=parse_size, default=(1920, 1080))
    parser.add_argument("--crops", action="store_true", help="also save 512px crops of frame 0")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu for a smoke test")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "no CUDA device visible; this benchmark is meant for the GPU machine", file=sys.stderr
        )
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    report = run(args)
    path = args.out / "bench_upscale.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    ms, p, s = report["ms_per_frame"], report["psnr_db"]["lanczos"], report["ssim"]["lanczos"]
    low = "x".join(map(str, args.render_size))
    print(
        f"native {ms['native']:.1f} ms/frame, {low} + lanczos "
        f"{ms['render_low_plus_lanczos']:.1f} ms/frame ({ms['speedup']:.2f}x); PSNR "
        f"{p['mean']:.2f} dB (min {p['min']:.2f}), SSIM {s['mean']:.4f} (min {s['min']:.4f}) "
        f"[backend {report['backend']}] -> {path}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
