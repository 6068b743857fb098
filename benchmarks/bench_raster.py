"""Rasterizer speed and memory, gsnb beside gsplat, on the same inputs in one process.

Scenes: random clouds of 1M and 4M Gaussians (SH degree 3, 1920x1080, one camera);
the fox's COLMAP points as Gaussians (kNN scales, SH degree 3) seen from 4 of
its cameras at full resolution (1080x1920) in one batch; and a trained fox (gsnb's
default recipe, ``--trained-steps`` steps at downscale 2, trained once at the start of
the first such scene) seen from the same 4 cameras at 1080x1920 (``fox_trained_full``),
540x960 (``fox_trained_half``) and 135x240 (``fox_trained_small``, where fixed costs
dominate). For each: forward ms,
forward+backward ms (medians of CUDA-event timings after warm-up), peak extra
memory, and the PSNR of gsnb's render against gsplat's. Each scene runs twice:
colour only (gsplat render_mode "RGB") and colour with expected depth ("RGB+ED"). The
backward is of each output as the renderer returns it (gsnb's ``rgb`` and ``depth``,
gsplat's one RGB+ED image) times fixed random weights, the same for both.
gsnb runs twice: ``gsnb`` with ``check_values=False`` and ``gsnb_default``, the call
with every option at its default (value checks inside the projection kernel).

    python benchmarks/bench_raster.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FOX, cuda_time_ms, environment, peak_extra_mib, psnr, write_json

import gsnb
from gsnb.cameras import intrinsics, look_at
from gsnb.raster.scenes import random_gaussians


def random_scene(n: int) -> dict:
    g = random_gaussians(n, sh_degree=3, scale_range=(0.002, 0.02), seed=0, device="cuda")
    g["opacities"] = g["opacities"].clamp(0.05, 0.95)
    eye = torch.tensor([0.0, -0.8, -3.2])
    viewmats = look_at(eye, torch.zeros(3))[None].cuda()
    Ks = intrinsics(1920, 1080, 60.0, axis="x")[None].cuda()
    return {"gaussians": g, "viewmats": viewmats, "Ks": Ks, "width": 1920, "height": 1080}


def fox_scene(root: Path, with_points: bool = True) -> dict:
    """4 of the fox's cameras at full resolution; ``with_points``: its COLMAP points as
    Gaussians (else ``gaussians`` is ``None``, for the caller to fill)."""
    from gsnb.data.dataset import load_dataset
    from gsnb.model import GaussianModel

    data = load_dataset(root, downscale=1, test_every=0)
    a = None
    if with_points:
        model = GaussianModel.from_points(data.points, data.points_rgb, sh_degree=3)
        a = {k: v.detach().cuda() for k, v in model.activated().items()}
        a["colors"] = a["colors"].clone()
        gen = torch.Generator(device="cuda").manual_seed(0)
        shape = a["colors"][:, 1:].shape
        a["colors"][:, 1:] = 0.1 * torch.randn(shape, generator=gen, device="cuda")
    views = [data.views[i] for i in (0, 17, 34, 51)]
    sizes = {(v.width, v.height) for v in views}
    assert len(sizes) == 1, f"views differ in size: {sizes}"
    width, height = sizes.pop()
    viewmats = torch.stack([v.viewmat for v in views]).cuda()
    Ks = torch.stack([v.K for v in views]).cuda()
    return {"gaussians": a, "viewmats": viewmats, "Ks": Ks, "width": width, "height": height}


TRAINED_SCALES = {"fox_trained_full": 1, "fox_trained_half": 2, "fox_trained_small": 8}


@functools.cache
def trained_fox(root: Path, steps: int) -> dict:
    """The fox's Gaussians after ``steps`` steps of gsnb's default recipe at downscale 2,
    activated; trained once per process."""
    from gsnb.data.dataset import load_dataset
    from gsnb.train import TrainConfig, Trainer

    config = TrainConfig(data=str(root), steps=steps, downscale=2)
    trainer = Trainer(load_dataset(root, downscale=2), config)
    trainer.run(progress=False)
    return {k: v.detach() for k, v in trainer.model.activated().items()}


def trained_fox_scene(root: Path, steps: int, downscale: int) -> dict:
    """:func:`trained_fox` seen from ``fox_scene``'s 4 cameras with the images ``downscale``
    times smaller."""
    s = fox_scene(root, with_points=False)
    s["gaussians"] = trained_fox(root, steps)
    s["width"], s["height"] = s["width"] // downscale, s["height"] // downscale
    s["Ks"] = s["Ks"].clone()
    s["Ks"][:, :2] /= downscale
    return s


def scene_by_name(name: str, fox: Path, trained_steps: int = 7000) -> dict:
    """The scene a ``--scenes`` name gives: ``random_<N>M`` (N million random Gaussians),
    ``fox_4cams`` (the fox's points at ``fox``) or one of ``TRAINED_SCALES``."""
    if name.startswith("random_"):
        return random_scene(int(float(name.split("_")[1].rstrip("M")) * 1_000_000))
    if name in TRAINED_SCALES:
        return trained_fox_scene(fox, trained_steps, TRAINED_SCALES[name])
    if name != "fox_4cams":
        known = ["random_<N>M", "fox_4cams", *TRAINED_SCALES]
        raise SystemExit(f"unknown scene {name!r}; known: {', '.join(known)}")
    return fox_scene(fox)


def gsnb_render(
    s: dict, params: dict, with_depth: bool, check_values: bool | None = False
) -> tuple[torch.Tensor, ...]:
    """``(rgb,)`` or ``(rgb, depth)``, as ``gsnb.render`` returns them. ``check_values=None``:
    the argument is left out, so the call is the default one."""
    checks = {} if check_values is None else {"check_values": check_values}
    out = gsnb.render(
        params["means"], params["quats"], params["scales"], params["opacities"], params["colors"],
        s["viewmats"], s["Ks"], s["width"], s["height"], backend="cuda", with_depth=with_depth,
        **checks,
    )  # fmt: skip
    return (out.rgb, out.depth) if with_depth else (out.rgb,)


def gsplat_render(
    s: dict, params: dict, packed: bool, with_depth: bool
) -> tuple[torch.Tensor, ...]:
    """``(image,)``: RGB, or RGB and expected depth in one ``[C, H, W, 4]`` image."""
    import gsplat

    image, _, _ = gsplat.rasterization(
        params["means"], params["quats"], params["scales"], params["opacities"], params["colors"],
        s["viewmats"], s["Ks"], s["width"], s["height"], sh_degree=3, packed=packed,
        rasterize_mode="classic", render_mode="RGB+ED" if with_depth else "RGB",
    )  # fmt: skip
    return (image,)


def weighed(weight: torch.Tensor):
    """The loss ``sum(output * weight)`` over a render's outputs, whose channels split
    ``weight``'s last dimension in order; each split is made contiguous once."""
    pieces: dict[tuple[int, ...], list[torch.Tensor]] = {}

    def loss(outputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        key = tuple(t.shape[-1] for t in outputs)
        if key not in pieces:
            pieces[key] = [w.contiguous() for w in weight.split(list(key), dim=-1)]
        total = (outputs[0] * pieces[key][0]).sum()
        for t, w in zip(outputs[1:], pieces[key][1:], strict=True):
            total = total + (t * w).sum()
        return total

    return loss


def calls(s: dict, render, with_depth: bool) -> tuple:
    """``(forward, forward_backward)`` of ``render`` on fresh leaf copies of the scene's
    Gaussians; the backward is of the outputs times fixed random weights (weighed)."""
    params = {k: v.clone().requires_grad_(True) for k, v in s["gaussians"].items()}
    channels = 4 if with_depth else 3
    loss = weighed(torch.rand(
        (s["viewmats"].shape[0], s["height"], s["width"], channels),
        generator=torch.Generator(device="cuda").manual_seed(0), device="cuda",
    ))  # fmt: skip

    def forward():
        return render(s, params)

    def forward_backward():
        for p in params.values():
            p.grad = None
        loss(render(s, params)).backward()

    return forward, forward_backward


def measure(s: dict, render, repeat: int, with_depth: bool) -> dict:
    forward, forward_backward = calls(s, render, with_depth)
    with torch.no_grad():
        image = forward()[0][..., :3].detach()
    return {
        "forward_ms": cuda_time_ms(forward, repeat=repeat),
        "forward_backward_ms": cuda_time_ms(forward_backward, repeat=repeat),
        "peak_extra_mib": peak_extra_mib(forward_backward),
        "image": image,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--fox", type=Path, default=FOX)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument(
        "--scenes",
        default="random_1M,random_4M,fox_4cams,fox_trained_full,fox_trained_half,fox_trained_small",
    )
    parser.add_argument("--trained-steps", type=int, default=7000)
    args = parser.parse_args()

    results = {"environment": environment(), "scenes": {}}
    for name in args.scenes.split(","):
        print(f"== {name}", flush=True)
        s = scene_by_name(name, args.fox, args.trained_steps)
        row: dict = {
            "num_gaussians": int(s["gaussians"]["means"].shape[0]),
            "cameras": int(s["viewmats"].shape[0]),
            "width": s["width"],
            "height": s["height"],
        }
        if name in TRAINED_SCALES:
            row["trained_steps"] = args.trained_steps
        for mode, with_depth in (("rgb", False), ("rgb_depth", True)):
            ours = measure(
                s, lambda s_, p, d=with_depth: gsnb_render(s_, p, d), args.repeat, with_depth
            )
            res = {"gsnb": {k: v for k, v in ours.items() if k != "image"}}
            default = measure(
                s, lambda s_, p, d=with_depth: gsnb_render(s_, p, d, None), args.repeat, with_depth
            )
            res["gsnb_default"] = {k: v for k, v in default.items() if k != "image"}
            assert torch.equal(default["image"], ours["image"]), "the checks changed the image"
            for packed in (False, True):
                key = "gsplat_packed" if packed else "gsplat"

                def theirs_render(s_, p, k=packed, d=with_depth):
                    return gsplat_render(s_, p, k, d)

                theirs = measure(s, theirs_render, args.repeat, with_depth)
                res[key] = {k: v for k, v in theirs.items() if k != "image"}
                res[key]["psnr_gsnb_vs_gsplat"] = psnr(ours["image"], theirs["image"])
            # gsplat's faster and its leaner configuration are the anchors.
            fastest = min(
                (res["gsplat"], res["gsplat_packed"]), key=lambda r: r["forward_backward_ms"]
            )
            leanest = min(res["gsplat"]["peak_extra_mib"], res["gsplat_packed"]["peak_extra_mib"])
            res["ratio_forward"] = res["gsnb"]["forward_ms"] / fastest["forward_ms"]
            res["ratio_forward_backward"] = (
                res["gsnb"]["forward_backward_ms"] / fastest["forward_backward_ms"]
            )
            res["ratio_peak_memory"] = res["gsnb"]["peak_extra_mib"] / leanest
            for key in ("forward", "forward_backward"):
                ms = f"{key}_ms"
                res[f"ratio_{key}_default"] = res["gsnb_default"][ms] / fastest[ms]
                res[f"ratio_{key}_default_over_unchecked"] = (
                    res["gsnb_default"][ms] / res["gsnb"][ms]
                )
            row[mode] = res
            print(mode, res, flush=True)
        results["scenes"][name] = row
        del s
        torch.cuda.empty_cache()
    write_json(args.out / "raster_h200.json", results)
    print(f"wrote {args.out / 'raster_h200.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
