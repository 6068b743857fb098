"""Densification strategies: when to add, remove or move Gaussians.

``DefaultStrategy`` is the original adaptive density control of 3DGS;
``MCMCStrategy`` is 3DGS-MCMC. Both are dataclasses whose fields are live
knobs; their tensor surgery lives in :mod:`gsnb.train.strategy.ops`.
"""

from __future__ import annotations

from gsnb.train.strategy.base import Strategy
from gsnb.train.strategy.default import DefaultStrategy
from gsnb.train.strategy.mcmc import MCMCStrategy

STRATEGIES: dict[str, type[Strategy]] = {"default": DefaultStrategy, "mcmc": MCMCStrategy}
"""Strategy classes by name."""


def make_strategy(name: str, **settings: object) -> Strategy:
    """A strategy by name (``"default"`` or ``"mcmc"``) with optional settings.

    Example:
        >>> make_strategy("mcmc", cap_max=1000).cap_max
        1000
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {sorted(STRATEGIES)}")
    return STRATEGIES[name](**settings)  # type: ignore[arg-type]


__all__ = ["STRATEGIES", "DefaultStrategy", "MCMCStrategy", "Strategy", "make_strategy"]
