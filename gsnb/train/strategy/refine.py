"""A refine step's clone, split and prune, each tensor rebuilt once.

The original 3DGS refinement clones small Gaussians of high gradient, splits large ones
in two and then prunes the transparent (and too large) ones. Done in turn with
:func:`~gsnb.train.strategy.ops.duplicate`, :func:`~gsnb.train.strategy.ops.split` and
:func:`~gsnb.train.strategy.ops.remove`, each of the three rewrites every parameter, both
Adam moments and the strategy's running sums: about 150 tensor operations and a dozen
host syncs, 5.4 ms at 180,000 Gaussians on an H200 (``benchmarks/bench_refine.py``),
where a training step takes 1.4.
:func:`clone_split_prune` first works out where each Gaussian of the result comes from, then
builds each tensor once, in one gather where its rows are copies. The result is the
three in turn's, element for element, random draws included; it takes 3.4 ms there.
On the GPU, with the extension built, one kernel (``csrc/refine.cu``) writes every
parameter and moment from a plan of a few scans, with one host sync where the PyTorch path
has five: 1.05 ms there (``benchmarks/results/refine_h200.json``). The result is the same,
the children's drawn means, log-scales and opacities to float32 rounding.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping

import torch
from torch import Tensor

from gsnb import kernels
from gsnb.raster.projection import quat_to_rotmat
from gsnb.train.strategy import ops

Doomed = Callable[[Tensor, Tensor], Tensor]
"""``doomed(opacities [M], scales [M, 3]) -> [M] bool``: which Gaussians of the grown set
(logits and log-scales, as stored) to prune."""


@torch.no_grad()
def clone_split_prune(
    params: ops.Params,
    optimizer: torch.optim.Optimizer | None,
    state: MutableMapping,
    clone: Tensor,
    split: Tensor,
    doomed: Doomed,
    generator: torch.Generator | None = None,
    shrink: float = 1.6,
    revised_opacity: bool = False,
    prune: Tensor | None = None,
) -> tuple[int, int, int]:
    """Clone the Gaussians in ``clone [N]``, split those in ``split [N]``, then remove
    those ``doomed`` picks, and those in ``prune [N]`` with their clones and children;
    returns ``(cloned, split, pruned)``.

    The same as ``ops.duplicate(..., clone)``, then ``ops.split`` of ``split`` (the clones
    never split), then ``ops.remove`` of ``doomed``'s mask over the grown Gaussians: the
    same rows in the same order, Adam moments zero for every new Gaussian, the strategy's
    per-Gaussian ``state`` tensors carried along, and one draw of ``generator``. ``doomed``
    decides each Gaussian by its own values (the fused path asks it about the Gaussians
    and about their would-be children separately).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> shapes = {"means": (3,), "quats": (4,), "scales": (3,), "opacities": ()}
        >>> p = nn.ParameterDict({k: nn.Parameter(torch.zeros(3, *s)) for k, s in shapes.items()})
        >>> never = lambda opacities, scales: torch.zeros_like(opacities, dtype=torch.bool)
        >>> clone_split_prune(p, None, {}, torch.tensor([True, False, False]),
        ...        torch.tensor([False, True, False]), never)
        (1, 1, 0)
        >>> p["means"].shape[0]  # 3 + 1 clone + 2 children - 1 split parent
        5
    """
    n = params["means"].shape[0]
    masks = (clone, split) if prune is None else (clone, split, prune)
    if any(m.shape != (n,) or m.dtype != torch.bool for m in masks):
        raise ValueError(
            f"clone, split and prune must be [N] bool masks of the {n} Gaussians; got "
            f"{tuple(clone.shape)}, {tuple(split.shape)} and "
            f"{None if prune is None else tuple(prune.shape)}"
        )
    moments = _fused_moments(params, optimizer)
    if moments is not None:
        return _fused(
            params, optimizer, state, moments, clone, split, doomed, generator, shrink,
            revised_opacity, prune,
        )  # fmt: skip
    rest = torch.where(~split)[0]  # kept in place: neither split nor (yet) pruned
    copies = torch.where(clone)[0]
    parents = torch.where(split)[0]
    n_split = len(parents)
    # The children's draws, as ops.split makes them.
    scales = torch.exp(params["scales"][parents])
    rot = quat_to_rotmat(params["quats"][parents])
    noise = torch.randn(
        (2, n_split, 3), generator=generator, device=scales.device, dtype=scales.dtype
    )
    offsets = ops.child_offsets(rot, scales, noise)  # [2, S, 3]
    drawn: dict[str, Tensor] = {
        "means": (params["means"][parents][None] + offsets).reshape(-1, 3),
        "scales": torch.log(scales / shrink).repeat(2, 1),
    }
    if revised_opacity:
        drawn["opacities"] = ops.revised_logits(params["opacities"][parents]).repeat(2)
    # Where each row of the grown set comes from: [rest, clones, children, children].
    source = torch.cat([rest, copies, parents.repeat(2)])

    copied = source[: len(rest) + len(copies)]
    # The grown set's values where children are drawn, not copied (each computed once).
    grown = {name: torch.cat([params[name][copied], children]) for name, children in drawn.items()}
    opacities = grown.get("opacities", params["opacities"][source])
    dead = doomed(opacities, grown["scales"])
    if prune is not None:
        dead = dead | prune.to(dead.device)[source]
    keep = torch.where(~dead)[0]
    # Moments: the rows kept in place carry theirs, every new Gaussian starts at zero.
    kept_in_place = rest[keep[keep < len(rest)]]
    n_new = len(keep) - len(kept_in_place)

    def moments(m: Tensor) -> Tensor:
        return torch.cat([m[kept_in_place], m.new_zeros((n_new, *m.shape[1:]))])

    rows = source[keep]
    for name in list(params.keys()):
        value = grown[name][keep] if name in grown else params[name][rows]
        ops.replace_param(params, optimizer, name, value, moments)
    for key, v in list(state.items()):
        if isinstance(v, Tensor) and v.dim() > 0:
            state[key] = v[rows]
    return len(copies), n_split, len(source) - len(keep)


def _fused_moments(
    params: ops.Params, optimizer: torch.optim.Optimizer | None
) -> dict[str, dict[str, Tensor]] | None:
    """Each parameter's optimizer tensors (Adam's moments) where ``csrc/refine.cu`` takes them
    all (float32 CUDA tensors of the parameters' shapes, at most 24 in all), else None."""
    if not {"means", "quats", "scales", "opacities"} <= set(params.keys()):
        return None
    n = params["means"].shape[0]
    found: dict[str, dict[str, Tensor]] = {}
    tensors: list[Tensor] = []
    for name, p in params.items():
        state = optimizer.state.get(p, {}) if optimizer is not None else {}
        found[name] = {
            k: v for k, v in state.items() if isinstance(v, Tensor) and k != "step" and v.dim() > 0
        }
        if p.dim() == 0 or p.shape[0] != n or p.numel() == 0:
            return None
        if any(v.shape != p.shape for v in found[name].values()):
            return None
        tensors += [p, *found[name].values()]
    if len(tensors) > 24 or not kernels.applies("refine_rows", *tensors):
        return None
    return found


def _fused(
    params: ops.Params,
    optimizer: torch.optim.Optimizer | None,
    state: MutableMapping,
    moments: dict[str, dict[str, Tensor]],
    clone: Tensor,
    split: Tensor,
    doomed: Doomed,
    generator: torch.Generator | None,
    shrink: float,
    revised_opacity: bool,
    prune: Tensor | None,
) -> tuple[int, int, int]:
    """:func:`clone_split_prune` through ``csrc/refine.cu``: the plan's scans, one host
    sync for their totals, the children's draws, then one launch for every tensor."""
    n = params["means"].shape[0]
    log_s, logits = params["scales"].detach(), params["opacities"].detach()
    clone, split = clone.to(log_s.device), split.to(log_s.device)
    child_logits = ops.revised_logits(logits) if revised_opacity else logits
    child_doomed = doomed(child_logits, torch.log(log_s.exp() / shrink))
    keep = ~doomed(logits, log_s)
    if prune is not None:
        prune = prune.to(log_s.device)
        child_doomed, keep = child_doomed | prune, keep & ~prune
    # The plan's rows (csrc/launch.h's RefinePlanRow), then the clones for the count.
    flags = torch.stack([~split & keep, clone & keep, split & ~child_doomed, split, clone])
    pos = flags.cumsum(1, dtype=torch.int32)  # [5, N]
    kept, cloned, children, n_split, n_clone = pos[:, -1].tolist()  # the one host sync
    noise = torch.randn(
        (2, n_split, 3), generator=generator, device=log_s.device, dtype=log_s.dtype
    )
    m = kept + cloned + 2 * children
    kinds = kernels.REFINE_KINDS
    drawn = {"means": kinds["means"], "scales": kinds["log_scales"]}
    if revised_opacity:
        drawn["opacities"] = kinds["revised_logit"]
    sources, outputs, codes = [], [], []
    new_params: dict[str, Tensor] = {}
    new_moments: dict[int, Tensor] = {}
    for name, p in params.items():
        new_params[name] = p.new_empty((m, *p.shape[1:]))
        sources.append(p.detach())
        outputs.append(new_params[name])
        codes.append(drawn.get(name, kinds["copy"]))
        for v in moments[name].values():
            new_moments[id(v)] = v.new_empty((m, *v.shape[1:]))
            sources.append(v)
            outputs.append(new_moments[id(v)])
            codes.append(kinds["moment"])
    rows = torch.empty(m, dtype=torch.int64, device=log_s.device)
    kernels.refine_rows(
        pos=pos[:4].contiguous(), kept=kept, cloned=cloned, children=children,
        quats=params["quats"].detach(), log_scales=log_s, noise=noise, shrink=float(shrink),
        sources=sources, outputs=outputs, kinds=codes, rows=rows,
    )  # fmt: skip
    for name, value in new_params.items():
        ops.replace_param(params, optimizer, name, value, lambda v: new_moments[id(v)])
    for key, v in list(state.items()):
        if isinstance(v, Tensor) and v.dim() > 0:
            state[key] = v[rows]
    return n_clone, n_split, n - n_split + n_clone + 2 * n_split - m
