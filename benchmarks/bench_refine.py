"""Time one refine step of DefaultStrategy: clone, split and prune of a trained-size cloud.

Compares ``clone_split_prune`` (every tensor rebuilt once, what DefaultStrategy runs: on
the GPU one launch of ``csrc/refine.cu``), its PyTorch path (``one_rebuild_pytorch``) and
``ops.duplicate``, ``ops.split`` and ``ops.remove`` in turn (what it ran before), on
the same random Gaussians with SH degree 3 and a stepped Adam, in turns, wall-clock
time of the whole call (host syncs included) after a GPU sync.

    python benchmarks/bench_refine.py --out OUT [--gaussians 180000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from common import environment, git_commit, write_json
from torch import nn

from gsnb.train.optim import make_optimizer
from gsnb.train.strategy import ops, refine
from gsnb.train.strategy.refine import clone_split_prune


def cloud(n: int, device: str, seed: int) -> tuple[nn.ParameterDict, torch.optim.Optimizer]:
    """``n`` random Gaussians at SH degree 3 and an Adam that has taken one step."""
    g = torch.Generator(device=device).manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device)

    params = nn.ParameterDict(
        {
            "means": nn.Parameter(rand(n, 3)),
            "quats": nn.Parameter(rand(n, 4)),
            "scales": nn.Parameter(rand(n, 3) - 4.0),
            "opacities": nn.Parameter(rand(n) + 2.0),
            "sh0": nn.Parameter(rand(n, 1, 3)),
            "shN": nn.Parameter(rand(n, 15, 3)),
        }
    )
    opt = make_optimizer(params, dict.fromkeys(params.keys(), 1e-3))
    for p in params.values():
        p.grad = torch.ones_like(p)
    opt.step()
    return params, opt


def doomed(opacities: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return (torch.sigmoid(opacities) < 0.6) | (torch.exp(scales).amax(-1) > 0.12)


def one(path: str, n: int, device: str, seed: int, rates: tuple[float, float]) -> float:
    params, opt = cloud(n, device, seed)
    state = {"grad2d": torch.zeros(n, device=device), "count": torch.zeros(n, device=device)}
    draw = torch.rand(n, device=device, generator=torch.Generator(device).manual_seed(seed))
    clone = draw < rates[0]
    split = (draw >= rates[0]) & (draw < rates[0] + rates[1])
    gen = torch.Generator(device).manual_seed(seed)
    torch.cuda.synchronize()
    start = time.perf_counter()
    if path == "one_rebuild":
        clone_split_prune(params, opt, state, clone, split, doomed, gen, revised_opacity=True)
    elif path == "one_rebuild_pytorch":
        fused, refine._fused_moments = refine._fused_moments, lambda *_: None
        try:
            clone_split_prune(params, opt, state, clone, split, doomed, gen, revised_opacity=True)
        finally:
            refine._fused_moments = fused
    else:
        cloned = ops.duplicate(params, opt, state, clone)
        to_split = torch.cat([split, clone.new_zeros(cloned)])
        ops.split(params, opt, state, to_split, gen, revised_opacity=True)
        ops.remove(params, opt, state, doomed(params["opacities"], params["scales"]))
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--gaussians", type=int, default=180_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--clone", type=float, default=0.02, help="share of Gaussians cloned")
    parser.add_argument("--split", type=float, default=0.01, help="share split")
    args = parser.parse_args()
    paths = ("one_rebuild", "one_rebuild_pytorch", "in_turn")
    times: dict[str, list[float]] = {p: [] for p in paths}
    for r in range(args.repeat + 2):
        for path in paths:
            ms = one(path, args.gaussians, "cuda", r, (args.clone, args.split))
            if r >= 2:  # two rounds of warm-up
                times[path].append(ms)
    result = {
        "benchmark": "bench_refine",
        "environment": environment(),
        "commit": git_commit(),
        "gaussians": args.gaussians,
        "rates": {"clone": args.clone, "split": args.split},
        "median_ms": {p: round(statistics.median(t), 3) for p, t in times.items()},
        "ms": {p: [round(v, 3) for v in t] for p, t in times.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "refine.json", result)
    print(result["median_ms"])


if __name__ == "__main__":
    main()
