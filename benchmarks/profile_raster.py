"""Where a render's GPU time goes, kernel by kernel, for gsnb and gsplat on bench_raster's scenes.

For each scene of ``benchmarks/bench_raster.py`` and each renderer (gsnb's default call, and
gsplat 1.5.3 when it imports), profiles ``--repeat`` forward passes and ``--repeat`` forward
and backward passes with ``torch.profiler`` and writes the GPU time of every kernel per call,
largest first, with the call's total kernel time, its wall time (CUDA events, no profiler)
and its host time (the Python and launches of one call, which the GPU waits for).
Kernel names are shortened to their function name.

    python benchmarks/profile_raster.py --out DIR --fox .device/fox
    python benchmarks/profile_raster.py --out DIR --scenes fox_4cams --depth   # RGB+ED

Writes ``DIR/profile_raster.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_raster import gsnb_render, gsplat_render, scene_by_name, weighed
from common import FOX, cuda_time_ms, environment, git_commit, host_table, write_json


def short_name(name: str) -> str:
    """``void ns::(anonymous namespace)::kernel<3>(int, ...)`` -> ``kernel<3>``."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    head = name.split("(", 1)[0] if "::" in name else name
    base, bracket, args = head.partition("<")
    return (base.rsplit("::", 1)[-1] + bracket + args)[:80]


def host_ms(fn: Any, repeat: int) -> float:
    """Median host milliseconds of a call (the launches, not the GPU's work), synchronised
    between calls: when it nears the wall time, the call is bound by the host."""
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def kernel_table(fn: Any, repeat: int) -> dict[str, float]:
    """GPU milliseconds per call of each kernel (and memset/memcpy) that ``fn`` runs."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeat):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[short_name(event.name)] += event.device_time / 1000.0 / repeat
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def profile_scene(
    name: str, s: dict, renderers: tuple[str, ...], repeat: int, depth: bool = False
) -> dict[str, Any]:
    """Kernel tables of the forward and the forward+backward call of each renderer on ``s``
    (colour, or with ``depth`` colour and expected depth)."""
    params = {k: v.clone().requires_grad_(True) for k, v in s["gaussians"].items()}
    loss = weighed(
        torch.rand(
            (s["viewmats"].shape[0], s["height"], s["width"], 4 if depth else 3),
            generator=torch.Generator(device="cuda").manual_seed(0),
            device="cuda",
        )
    )
    row: dict[str, Any] = {"num_gaussians": int(s["gaussians"]["means"].shape[0])}
    for renderer in renderers:

        def render(r: str = renderer) -> tuple[torch.Tensor, ...]:
            if r == "gsnb":
                return gsnb_render(s, params, depth, None)
            return gsplat_render(s, params, False, depth)

        def forward_backward(r: str = renderer) -> None:
            for p in params.values():
                p.grad = None
            loss(render(r)).backward()

        entry: dict[str, Any] = {}
        for label, fn in (("forward", render), ("forward_backward", forward_backward)):
            kernels = kernel_table(fn, repeat)
            entry[label] = {
                "wall_ms": cuda_time_ms(fn, repeat=repeat),
                "kernel_ms": sum(kernels.values()),
                "host_ms": host_ms(fn, repeat),
                "kernels_ms": {k: round(v, 4) for k, v in kernels.items()},
            }
            print(name, renderer, label, round(entry[label]["wall_ms"], 3), "ms wall,",
                  round(entry[label]["kernel_ms"], 3), "ms kernels,",
                  round(entry[label]["host_ms"], 3), "ms host", flush=True)  # fmt: skip
            for k, v in list(kernels.items())[:12]:
                print(f"    {v:8.4f}  {k}", flush=True)
        row[renderer] = entry
    return row


def host_profile(s: dict, calls: int) -> None:
    """Print the host functions that take the most time in ``calls`` forward+backward calls of
    gsnb's default render (cProfile, time in the function itself)."""
    params = {k: v.clone().requires_grad_(True) for k, v in s["gaussians"].items()}
    for _ in range(3):
        gsnb_render(s, params, False, None)[0].sum().backward()

    def work() -> None:
        for _ in range(calls):
            gsnb_render(s, params, False, None)[0].sum().backward()

    print(host_table(work, top=30))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fox", type=Path, default=FOX)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--scenes", default="random_1M,fox_4cams")
    parser.add_argument("--depth", action="store_true", help="colour and expected depth")
    parser.add_argument(
        "--cprofile", action="store_true", help="also print cProfile's top host functions of gsnb"
    )
    args = parser.parse_args()

    try:
        import gsplat  # noqa: F401

        renderers = ("gsnb", "gsplat")
    except ImportError:
        renderers = ("gsnb",)
    results: dict[str, Any] = {
        "benchmark": "profile_raster",
        "environment": environment() | {"commit": git_commit()},
        "render_mode": "RGB+ED" if args.depth else "RGB",
        "scenes": {},
    }
    for name in args.scenes.split(","):
        s = scene_by_name(name, args.fox)
        results["scenes"][name] = profile_scene(name, s, renderers, args.repeat, args.depth)
        if args.cprofile:
            host_profile(s, args.repeat * 20)
        del s
        torch.cuda.empty_cache()
    write_json(args.out / "profile_raster.json", results)
    print(f"wrote {args.out / 'profile_raster.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
