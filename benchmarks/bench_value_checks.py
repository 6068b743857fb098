"""What ``check_values`` costs on the CUDA backend: the projection kernel alone and the
whole forward, with the checks (the default) and without, classic and antialiased.

Scenes: random clouds of 1M and 4M Gaussians (SH degree 3, 1920x1080, one camera), as
bench_raster.py. Per configuration: median ms of CUDA-event timings after warm-up of
``kernels.project_forward`` and of ``gsnb.render`` forward and forward+backward, the
ratios checked / unchecked, and whether the outputs are bit-identical.

    python benchmarks/bench_value_checks.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_raster import random_scene
from common import cuda_time_ms, environment, git_commit, write_json

import gsnb
from gsnb import kernels


def project(s: dict, check: bool, antialiased: bool) -> list[torch.Tensor]:
    g = s["gaussians"]
    return kernels.project_forward(
        means=g["means"], quats=g["quats"], scales=g["scales"], opacities=g["opacities"],
        coeffs=g["colors"], rest=None, viewmats=s["viewmats"], Ks=s["Ks"], width=s["width"],
        height=s["height"], near_plane=0.01, far_plane=1e10, sh_degree=3, with_depth=True,
        stored=False, antialiased=antialiased, check_values=check,
    )  # fmt: skip


def render(s: dict, params: dict, check: bool, mode: str):
    return gsnb.render(
        **params, viewmats=s["viewmats"], Ks=s["Ks"], width=s["width"], height=s["height"],
        backend="cuda", check_values=check, rasterize_mode=mode,
    )  # fmt: skip


def measure(s: dict, mode: str, repeat: int) -> dict:
    aa = mode == "antialiased"
    row: dict = {}
    outs = {}
    for check in (False, True):
        key = "checked" if check else "unchecked"
        params = {k: v.clone().requires_grad_(True) for k, v in s["gaussians"].items()}

        def forward_backward(p=params, c=check):
            for t in p.values():
                t.grad = None
            out = render(s, p, c, mode)
            (out.rgb.sum() + out.depth.sum()).backward()

        with torch.no_grad():
            out = render(s, params, check, mode)
        outs[key] = [out.rgb, out.alpha, out.depth, *project(s, check, aa)[:7]]
        row[key] = {
            "project_ms": cuda_time_ms(lambda c=check: project(s, c, aa), repeat=repeat),
            "forward_ms": cuda_time_ms(
                lambda p=params, c=check: render(s, p, c, mode), repeat=repeat
            ),
            "forward_backward_ms": cuda_time_ms(forward_backward, repeat=repeat),
        }
    for k in ("project_ms", "forward_ms", "forward_backward_ms"):
        row[f"ratio_{k[:-3]}"] = row["checked"][k] / row["unchecked"][k]
    row["identical_outputs"] = all(
        torch.equal(a, b) for a, b in zip(outs["checked"], outs["unchecked"], strict=True)
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--sizes", default="1,4", help="millions of Gaussians, comma-separated")
    args = parser.parse_args()
    if not torch.cuda.is_available() or kernels.extension() is None:
        print("needs a CUDA device and the built rasterizer (python3 -m gsnb.cli build)")
        return 1

    results = {"environment": environment() | {"commit": git_commit()}, "scenes": {}}
    for size in args.sizes.split(","):
        s = random_scene(int(float(size) * 1_000_000))
        name = f"random_{size}M"
        results["scenes"][name] = {}
        for mode in ("classic", "antialiased"):
            row = measure(s, mode, args.repeat)
            results["scenes"][name][mode] = row
            print(name, mode, row, flush=True)
        del s
        torch.cuda.empty_cache()
    write_json(args.out / "value_checks_h200.json", results)
    print(f"wrote {args.out / 'value_checks_h200.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
