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
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping

import torch
from torch import Tensor

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
) -> tuple[int, int, int]:
    """Clone the Gaussians in ``clone [N]``, split those in ``split [N]``, then remove
    those ``doomed`` picks; returns ``(cloned, split, pruned)``.

    The same as ``ops.duplicate(..., clone)``, then ``ops.split`` of ``split`` (the clones
    never split), then ``ops.remove`` of ``doomed``'s mask over the grown Gaussians: the
    same rows in the same order, Adam moments zero for every new Gaussian, the strategy's
    per-Gaussian ``state`` tensors carried along, and one draw of ``generator``.

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
    if clone.shape != (n,) or split.shape != (n,):
        raise ValueError(
            f"clone and split must be [N] masks of the {n} Gaussians; got "
            f"{tuple(clone.shape)} and {tuple(split.shape)}"
        )
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
        opacity = torch.sigmoid(params["opacities"][parents])
        drawn["opacities"] = torch.logit(1.0 - torch.sqrt(1.0 - opacity)).repeat(2)
    # Where each row of the grown set comes from: [rest, clones, children, children].
    source = torch.cat([rest, copies, parents.repeat(2)])

    copied = source[: len(rest) + len(copies)]
    # The grown set's values where children are drawn, not copied (each computed once).
    grown = {name: torch.cat([params[name][copied], children]) for name, children in drawn.items()}
    opacities = grown.get("opacities", params["opacities"][source])
    keep = torch.where(~doomed(opacities, grown["scales"]))[0]
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
