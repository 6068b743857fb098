"""Undo a densification that failed half-way (out of memory, any exception).

A strategy's post-backward work (accumulate statistics, clone, split, prune, reset,
relocate, add noise) changes the Gaussians, Adam's state and the strategy's running
state. The operations of :mod:`gsnb.train.strategy.ops` build new tensors and swap
them in, so remembering the objects that were in place before is enough to put
them back; the strategy's statistics, which are added to in place, are copied on
the steps where the strategy says it densifies (:meth:`Strategy.densifies_at`).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn


@dataclass
class DensifySnapshot:
    """What a strategy step may change, as it was before the step.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from gsnb.train.strategy import ops
        >>> p = nn.ParameterDict({"x": nn.Parameter(torch.zeros(2))})
        >>> opt = torch.optim.Adam([{"params": [p["x"]], "name": "x"}])
        >>> state = {"count": torch.zeros(2)}
        >>> snap = DensifySnapshot.take(p, opt, state, torch.Generator(), copy_state=True)
        >>> ops.replace_param(p, opt, "x", torch.ones(3), lambda m: torch.zeros(3))
        >>> state["count"] += 1
        >>> snap.restore(p, opt, state, torch.Generator())
        >>> p["x"].tolist(), state["count"].tolist(), opt.param_groups[0]["params"][0] is p["x"]
        ([0.0, 0.0], [0.0, 0.0], True)
    """

    params: dict[str, nn.Parameter]
    groups: list[list[Tensor]]
    adam: dict[Tensor, Any]
    strategy_state: dict[str, Any]
    generator_state: Tensor

    @classmethod
    def take(
        cls,
        params: MutableMapping[str, nn.Parameter],
        optimizer: torch.optim.Optimizer,
        strategy_state: dict[str, Any],
        generator: torch.Generator,
        copy_state: bool,
    ) -> DensifySnapshot:
        """Remember the current objects; with ``copy_state``, copy the strategy's tensors."""
        held = dict(params.items())
        state = {
            k: v.clone() if copy_state and isinstance(v, Tensor) else v
            for k, v in strategy_state.items()
        }
        return cls(
            params=held,
            groups=[list(group["params"]) for group in optimizer.param_groups],
            adam={p: optimizer.state[p] for p in held.values() if p in optimizer.state},
            strategy_state=state,
            generator_state=generator.get_state(),
        )

    def restore(
        self,
        params: MutableMapping[str, nn.Parameter],
        optimizer: torch.optim.Optimizer,
        strategy_state: dict[str, Any],
        generator: torch.Generator,
    ) -> None:
        """Put everything back as it was when the snapshot was taken."""
        for name in list(params.keys()):
            if name not in self.params:
                del params[name]
        for name, param in self.params.items():
            params[name] = param
        for group, saved in zip(optimizer.param_groups, self.groups, strict=True):
            group["params"] = list(saved)
        for param in list(optimizer.state.keys()):
            if param not in self.adam:
                del optimizer.state[param]
        for param, value in self.adam.items():
            optimizer.state[param] = value
        strategy_state.clear()
        strategy_state.update(self.strategy_state)
        generator.set_state(self.generator_state)
