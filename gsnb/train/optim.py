"""Adam over the Gaussians with 3DGS's per-parameter learning rates and the means' decay."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from gsnb import kernels
from gsnb.train.config import TrainConfig

LR_KNOBS = {
    "means": "lr_means",
    "quats": "lr_quats",
    "scales": "lr_scales",
    "opacities": "lr_opacities",
    "sh0": "lr_sh0",
    "shN": "lr_shN",
}
"""Parameter name -> the :class:`TrainConfig` field holding its learning rate."""

ADAM_EPS = 1e-15
"""Adam's epsilon, tiny as in the 3DGS code, since scales and SH gradients are small."""


def means_decay_steps(config: TrainConfig, strategy_decay_steps: int) -> int:
    """The means' decay period ``config`` sets: its ``lr_means_decay_steps``, or for a
    negative one (the default) ``strategy_decay_steps``, the strategy's choice.

    Example:
        >>> means_decay_steps(TrainConfig(), 10_000), means_decay_steps(TrainConfig(
        ...     lr_means_decay_steps=0), 10_000)
        (10000, 0)
    """
    decay = config.lr_means_decay_steps
    return int(strategy_decay_steps) if decay < 0 else decay


def learning_rates(
    config: TrainConfig, step: int, extent: float, strategy_decay_steps: int = 0
) -> dict[str, float]:
    """Learning rate of each parameter at ``step`` (0-based).

    The means' rate is ``lr_means * extent`` at step 0 and decays
    exponentially to ``lr_means_final`` times that at ``config.steps``, then
    stays there; the others are constant. With ``lr_means_decay_steps`` shorter
    than the run, it falls by ``lr_means_final`` every that many steps instead,
    down to ``lr_means_final ** (steps / lr_means_decay_steps)`` at the last step. A
    negative ``lr_means_decay_steps`` (the default) stands for ``strategy_decay_steps``, the
    strategy's choice (:attr:`gsnb.train.strategy.Strategy.lr_means_decay_steps`).

    Example:
        >>> from gsnb.train.config import TrainConfig
        >>> cfg = TrainConfig(steps=100)
        >>> lr = learning_rates(cfg, 100, extent=2.0)["means"]
        >>> round(lr / (1.6e-4 * 2.0), 6)
        0.01
        >>> cfg = TrainConfig(steps=300, lr_means_decay_steps=100)
        >>> [round(learning_rates(cfg, s, 1.0)["means"] / 1.6e-4, 6) for s in (100, 300, 400)]
        [0.01, 1e-06, 1e-06]
        >>> cfg = TrainConfig(steps=300)  # the strategy's: here every 100 steps
        >>> round(learning_rates(cfg, 300, 1.0, strategy_decay_steps=100)["means"] / 1.6e-4, 6)
        1e-06
    """
    decay = means_decay_steps(config, strategy_decay_steps)
    horizon = config.steps
    if 0 < decay < config.steps:
        horizon = decay
    progress = min(step, config.steps) / horizon
    rates = {name: float(getattr(config, knob)) for name, knob in LR_KNOBS.items()}
    rates["means"] = config.lr_means * extent * config.lr_means_final**progress
    return rates


class Adam(torch.optim.Adam):
    """:class:`torch.optim.Adam` that starts without importing ``torch._dynamo``.

    torch wraps ``add_param_group``, ``zero_grad``, ``state_dict`` and ``load_state_dict`` in
    a lazy ``torch._dynamo.disable``, and ``step`` in graph breaks for ``torch.compile``; the
    first call of each imports ``torch._dynamo``: one to five seconds, at a run's start-up or
    (``zero_grad``) in the middle of a run, the first time a step is taken back. gsnb
    never compiles its optimizers, so these call the wrapped functions directly
    (``inspect.unwrap``); everything else is torch's.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> opt = Adam([nn.Parameter(torch.zeros(2))], lr=0.1)
        >>> sorted(opt.state_dict())
        ['param_groups', 'state']
    """

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update (:meth:`torch.optim.Adam.step`)."""
        if self.defaults["differentiable"]:
            return super().step(closure)
        return inspect.unwrap(torch.optim.Adam.step)(self, closure)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group (:meth:`torch.optim.Optimizer.add_param_group`)."""
        inspect.unwrap(torch.optim.Optimizer.add_param_group)(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients (:meth:`torch.optim.Optimizer.zero_grad`)."""
        inspect.unwrap(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state (:meth:`torch.optim.Optimizer.state_dict`)."""
        return inspect.unwrap(torch.optim.Optimizer.state_dict)(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state (:meth:`torch.optim.Optimizer.load_state_dict`)."""
        inspect.unwrap(torch.optim.Optimizer.load_state_dict)(self, state_dict)


class GaussianAdam(Adam):
    """Adam with one parameter group per splat tensor; on the GPU one kernel launch per step.

    The update is :class:`torch.optim.Adam`'s (same state: ``step``, ``exp_avg``,
    ``exp_avg_sq``; same checkpoints). When every parameter is a CUDA float32
    tensor and the built extension is loaded, :meth:`step` updates all groups,
    each with its own learning rate, in a single launch of ``csrc/adam.cu``
    instead of a launch (or ten) per group; anywhere else it is torch's Adam.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> p = nn.Parameter(torch.ones(3))
        >>> opt = GaussianAdam([{"params": [p], "lr": 0.1, "name": "x"}], eps=1e-15)
        >>> p.grad = torch.ones(3)
        >>> opt.step()
        >>> [round(v, 4) for v in p.tolist()]
        [0.9, 0.9, 0.9]
    """

    def __init__(self, groups: list[dict[str, Any]], eps: float = ADAM_EPS) -> None:
        super().__init__(groups, eps=eps)
        self._counted: list[tuple[Tensor, dict[str, Any]]] = []  # the last update's (uncount)
        # The fused updates' step counts: each counted state's "step" is a 0-d view of one
        # float32 CPU tensor, read and advanced through numpy (see _step_counts).
        self._count_states: list[dict[str, Any]] = []
        self._count_views: list[Tensor] = []
        self._count_values: np.ndarray = np.zeros(0, dtype=np.float32)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One Adam update of every parameter that has a gradient."""
        if closure is not None or not self._fused():
            loss = super().step(closure)
            self._counted = [
                (p, self.state[p])
                for group in self.param_groups
                for p in group["params"]
                if p.grad is not None and p in self.state
            ]
            return loss
        self._fused_step()
        return None

    def update(self, gate: Tensor | None = None) -> None:
        """:meth:`step` for a training loop: the same update, without what torch's
        ``Optimizer.step`` wraps around every call (a profiler range, step hooks), which on
        the GPU cost about as much host time as the kernel launch itself. Step hooks do not
        run. ``gate``: as for :meth:`launch`, which it needs.
        """
        if self.launch(gate):
            return
        if gate is not None:
            raise ValueError("a gated update needs the fused kernel (see launch())")
        self.step()

    def launch(self, gate: Tensor | None = None, active: Mapping[str, int] | None = None) -> bool:
        """The update in one kernel launch where it applies (CUDA float32 tensors, the
        extension built); returns False, having done nothing, where it does not.

        ``active`` maps a group's ``name`` to how many leading values of each of its
        parameter's rows (``p[i]``) to update; the others are left as they are, which is
        Adam's update too while their gradients and moments are zero: the SH bands above the
        degree in use (``{"shN": 3 * ((degree + 1) ** 2 - 1)}``).

        ``gate`` (float64 ``[3]`` on the device: the gradients' sum of squares, their count
        of non-finite values and the loss) lets the kernel itself skip the update unless the
        sum fits a float32, the count is 0 and the loss finite, so that a step can launch its
        update before it reads its numbers back; :meth:`uncount` then takes back a skipped
        update's step count.

        Example:
            >>> import torch
            >>> from torch import nn
            >>> GaussianAdam([{"params": [nn.Parameter(torch.ones(3))], "lr": 0.1}]).launch()
            False
        """
        if not self._fused():
            return False
        with torch.no_grad():
            self._fused_step(gate, active)
        return True

    def uncount(self) -> None:
        """Take back the step counts of the last update, for a gated update the kernel
        skipped (:meth:`launch`); state that update made for a parameter goes too, as if
        it had never run. Called before the next update, whatever the gradients are by then.

        Example:
            >>> import torch
            >>> from torch import nn
            >>> p = nn.Parameter(torch.ones(3))
            >>> opt = GaussianAdam([{"params": [p], "lr": 0.1}])
            >>> p.grad = torch.ones(3)
            >>> opt.update(); opt.update(); opt.uncount()
            >>> float(opt.state[p]["step"])
            1.0
        """
        counted, self._counted = self._counted, []
        for p, state in counted:
            state["step"] -= 1
            if float(state["step"]) <= 0.0 and self.state.get(p) is state:
                del self.state[p]

    def clear_grads(self) -> None:
        """``zero_grad(set_to_none=True)`` without torch's per-call wrapping (as :meth:`update`)."""
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def _fused_step(
        self, gate: Tensor | None = None, active: Mapping[str, int] | None = None
    ) -> None:
        params, grads, exp_avgs, exp_avg_sqs, step_sizes, bias2_sqrts = [], [], [], [], [], []
        rows: list[int] = []
        leading: list[int] = []
        # Step counts advance, and a first update's new state joins the optimizer, once the
        # launches went out: a refused launch leaves the optimizer as it was (where the
        # parameters fit one launch, _KERNEL_TENSORS of them, as the trainer's six do).
        counted: list[tuple[Tensor, dict[str, Any]]] = []
        fresh: dict[Tensor, dict[str, Any]] = {}
        beta1, beta2 = self.param_groups[0]["betas"]
        lrs: list[float] = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.get(p)
                if not state:
                    state = fresh[p] = {
                        "step": torch.tensor(0.0),
                        "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                        "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                    }
                counted.append((p, state))
                lrs.append(group["lr"])
                params.append(p)
                grads.append(p.grad if p.grad.is_contiguous() else p.grad.contiguous())
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                row = p.numel() // p.shape[0] if p.dim() > 0 and p.shape[0] > 0 else 1
                rows.append(row)
                wanted = row if active is None else active.get(group.get("name"), row)
                leading.append(min(max(int(wanted), 0), row))
        counts = self._step_counts([state for _, state in counted])
        for lr, step in zip(lrs, counts.tolist(), strict=True):
            t = step + 1.0
            step_sizes.append(lr / (1.0 - beta1**t))
            bias2_sqrts.append(math.sqrt(1.0 - beta2**t))
        partial = rows != leading
        for i in range(0, len(params), _KERNEL_TENSORS):
            chunk = slice(i, i + _KERNEL_TENSORS)
            kernels.adam_step(
                params=params[chunk], grads=grads[chunk], exp_avgs=exp_avgs[chunk],
                exp_avg_sqs=exp_avg_sqs[chunk], step_sizes=step_sizes[chunk],
                bias2_sqrts=bias2_sqrts[chunk], beta1=beta1, beta2=beta2,
                eps=self.param_groups[0]["eps"], gate=gate,
                row_values=rows[chunk] if partial else (),
                active_values=leading[chunk] if partial else (),
            )  # fmt: skip
        self.state.update(fresh)
        counts += 1.0  # every counted state's "step" at once (its views)
        self._counted = counted

    def _step_counts(self, states: list[dict[str, Any]]) -> np.ndarray:
        """The step counts of ``states``, as a float32 array whose memory each state's
        ``"step"`` tensor views, so that reading and advancing them all costs one numpy
        operation where a torch call per count cost more host time than the kernel's
        launch. States whose ``"step"`` is not (or no longer) such a view, new states or
        ones a checkpoint or densification replaced, are linked first, counts kept."""
        linked = len(states) == len(self._count_states) and all(
            s is old and s["step"] is view
            for s, old, view in zip(states, self._count_states, self._count_views, strict=True)
        )
        if not linked:
            counts = torch.tensor([float(s["step"]) for s in states], dtype=torch.float32)
            self._count_views = list(counts.unbind())
            for s, view in zip(states, self._count_views, strict=True):
                s["step"] = view
            self._count_states = list(states)
            self._count_values = counts.numpy()
        return self._count_values

    def _fused(self) -> bool:
        """Whether the one-launch kernel applies to every group."""
        first = self.param_groups[0]
        params = []
        for group in self.param_groups:
            if (
                group["weight_decay"] != 0
                or group["amsgrad"]
                or group["maximize"]
                or group["betas"] != first["betas"]
                or group["eps"] != first["eps"]
                or not isinstance(group["lr"], float)
            ):
                return False
            for p in group["params"]:
                state = self.state.get(p)
                if state and not _kernel_state(state, p):
                    return False
                params.append(p)
        return kernels.applies("adam_step", *params)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state (also one saved by a fused or capturable torch Adam)."""
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group["fused"], group["capturable"] = None, False
            for p in group["params"]:
                state = self.state.get(p)
                if state and isinstance(state.get("step"), Tensor):
                    state["step"] = torch.tensor(float(state["step"]))


def _kernel_state(state: dict[str, Any], param: Tensor) -> bool:
    """Whether ``adam_step`` takes this state: a host-side step, float32 moments like ``param``."""
    if state["step"].is_cuda:
        return False
    index = param.get_device()  # compared by index: this runs for every parameter every step
    for m in (state["exp_avg"], state["exp_avg_sq"]):
        if not m.is_contiguous() or m.dtype != torch.float32 or m.get_device() != index:
            return False
    return True


_KERNEL_TENSORS = 8
"""Tensors one launch of ``adam_step`` takes."""


def make_optimizer(splats: Mapping[str, nn.Parameter], rates: Mapping[str, float]) -> GaussianAdam:
    """A :class:`GaussianAdam` with a parameter group per splat tensor, ``name``-d after its key.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> opt = make_optimizer({"means": nn.Parameter(torch.zeros(2, 3))}, {"means": 0.1})
        >>> opt.param_groups[0]["name"], opt.param_groups[0]["lr"]
        ('means', 0.1)
    """
    groups = [{"params": [p], "lr": rates[name], "name": name} for name, p in splats.items()]
    return GaussianAdam(groups, eps=ADAM_EPS)


def set_learning_rates(optimizer: torch.optim.Optimizer, rates: Mapping[str, float]) -> None:
    """Write ``rates`` into the optimizer's named groups."""
    for group in optimizer.param_groups:
        group["lr"] = rates[group["name"]]
