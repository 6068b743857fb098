"""``StepMetrics``: what the trainer reports after every step."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepMetrics:
    """One record of the metrics stream (``Trainer.on_step`` callbacks, ``Trainer.history``).

    Attributes:
        step: steps completed, this one included.
        loss: total loss (photometric plus regularisers).
        l1: mean absolute error of the render.
        ssim: SSIM of the render.
        psnr: PSNR of the render in dB (training view).
        num_gaussians: Gaussians after this step (densification included).
        sh_degree: SH degree used by this step.
        lr_means: learning rate of the means in this step.
        step_time: seconds this step took.
        gpu_memory: peak GPU memory allocated so far in bytes, read every 20 steps and
            after densification (None on CPU).
        grad_norm: norm of all parameter gradients.
        scale_max: largest scale of any Gaussian in scene extents.
        scale_spread: standard deviation of the Gaussians' largest log-scales.
        anisotropy: geometric mean of largest / smallest scale.
        anisotropy_max: largest such ratio.
        mean_opacity: mean opacity.
        skipped: this step's update was skipped (non-finite loss or gradient).
        skipped_total: updates skipped so far.
        view: name of the training view.
        events: what densification did this step (``{"cloned": 12, ...}``).
        warnings: health warnings raised at this step.

    Example:
        >>> m = StepMetrics(step=1, loss=0.5)
        >>> m.to_dict()["loss"]
        0.5
    """

    step: int
    loss: float
    l1: float = 0.0
    ssim: float = 0.0
    psnr: float = 0.0
    num_gaussians: int = 0
    sh_degree: int = 0
    lr_means: float = 0.0
    step_time: float = 0.0
    gpu_memory: int | None = None
    grad_norm: float = 0.0
    scale_max: float = 0.0
    scale_spread: float = 0.0
    anisotropy: float = 1.0
    anisotropy_max: float = 1.0
    mean_opacity: float = 0.0
    skipped: bool = False
    skipped_total: int = 0
    view: str = ""
    events: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain types, for JSON and dataframes: :func:`dataclasses.asdict`'s result, built
        field by field (``asdict`` deep-copies every value: writing a 30,000-step run's
        ``metrics.jsonl`` took a second with it)."""
        out = {name: getattr(self, name) for name in _FIELDS}
        out["events"] = dict(self.events)
        out["warnings"] = list(self.warnings)
        return out


_FIELDS = tuple(f.name for f in dataclasses.fields(StepMetrics))
