"""What every densification strategy provides to the trainer."""

from __future__ import annotations

import dataclasses
from collections.abc import MutableMapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gsnb.train.knobs import check_fields


class Strategy:
    """Base of the densification strategies (dataclasses whose fields are live knobs).

    A strategy keeps no tensors itself: its running state is the plain dict
    :meth:`initialize_state` returns, which the trainer stores in checkpoints.
    After each optimizer step the trainer calls :meth:`step_post_backward` with
    ``info`` holding the render's ``means2d`` (its ``.grad`` filled), ``radii
    [C, N, 2]``, ``absgrad`` (or None), ``width``, ``height`` and ``n_cameras`` (the
    views of the step in this process: each view's loss carries ``1 / n_cameras``), or
    ``groups``, a list of such dicts (views of several sizes), and ``error`` where
    :meth:`needs_error` asks for it; in a data-parallel run
    also ``process_group`` (:class:`gsnb.train.batch.ProcessGroup`), whose ``sum_`` a
    strategy calls on its running sums before it decides, so that every process decides
    alike.

    Example:
        >>> from gsnb.train.strategy import DefaultStrategy
        >>> DefaultStrategy().name, DefaultStrategy.init_opacity
        ('default', 0.1)
    """

    name: ClassVar[str] = "base"
    init_opacity: ClassVar[float] = 0.1
    init_scale: ClassVar[float] = 1.0
    lr_means_decay_steps: ClassVar[int] = 0
    """The means' learning-rate decay period that ``TrainConfig.lr_means_decay_steps = -1``
    (its default) stands for; 0: one decay over the whole run."""
    absgrad: bool = False

    def __post_init__(self) -> None:
        check_fields(self, "strategy")

    def initialize_state(self, scene_scale: float) -> dict[str, Any]:
        """The running state at step 0 for a scene of radius ``scene_scale``."""
        return {"scene_scale": float(scene_scale)}

    def step_post_backward(
        self,
        params: MutableMapping[str, nn.Parameter],
        optimizer: torch.optim.Optimizer,
        state: dict[str, Any],
        step: int,
        info: dict[str, Any],
        lr_means: float,
        generator: torch.Generator | None = None,
    ) -> dict[str, int]:
        """Densify, prune or move Gaussians after step ``step`` (0-based); returns what changed."""
        raise NotImplementedError

    def needs_error(self, step: int) -> bool:
        """Whether ``info`` at ``step`` must also hold ``error`` ``[N]``: each Gaussian's share
        of the view's error, in pixels (:func:`gsnb.train.error_shares.error_shares`): the
        fused GPU step gathers them in its backward pass, other steps render the view again.
        False (the default): not needed.

        Example:
            >>> from gsnb.train.strategy import MCMCStrategy
            >>> MCMCStrategy().needs_error(600)
            False
        """
        return False

    def densifies_at(self, step: int) -> bool:
        """Whether step ``step`` may add, remove or reset Gaussians (not only accumulate).

        The trainer copies the strategy's running state before such a step, so that a
        failure half-way can be undone; True (the default) is always safe.
        """
        return True

    def gates_at(self, step: int) -> bool:
        """Whether :meth:`step_post_backward` at ``step`` honours ``info["gate"]``.

        The gate (float64 ``[3]`` on the device: the gradients' sum of squares, their count of
        non-finite values, the loss) closes on a step the trainer skips; a strategy that
        gates changes nothing then, decided on the device, so that the trainer may run it
        before it reads the step's numbers back. False (the default) is always safe: the
        trainer reads them first and calls the strategy only on steps it keeps.

        Example:
            >>> from gsnb.train.strategy import DefaultStrategy, MCMCStrategy
            >>> DefaultStrategy().gates_at(600), MCMCStrategy().gates_at(10)
            (False, False)
        """
        return False

    def regularization(self, params: MutableMapping[str, nn.Parameter]) -> Tensor | None:
        """A loss term this strategy adds (None: none)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """The strategy's name and settings, plain types only.

        Example:
            >>> from gsnb.train.strategy import MCMCStrategy
            >>> MCMCStrategy(cap_max=1000).to_dict()["cap_max"]
            1000
        """
        return {"name": self.name, **dataclasses.asdict(self)}  # type: ignore[call-overload]
