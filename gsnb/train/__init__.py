"""Training: ``Trainer``, its settings, losses, densification strategies and checkpoints.

Example:
    >>> from gsnb.train import Trainer, TrainConfig, DefaultStrategy, MCMCStrategy
    >>> TrainConfig().ssim_lambda, DefaultStrategy().grow_grad2d, MCMCStrategy().cap_max
    (0.2, 0.00015, 1000000)
"""

from __future__ import annotations

from gsnb.train.checkpoint import CheckpointError
from gsnb.train.config import TrainConfig
from gsnb.train.control import CheckpointWarning
from gsnb.train.evaluation import EvalResult
from gsnb.train.health import TrainingHealthWarning
from gsnb.train.knobs import Knob
from gsnb.train.metrics import StepMetrics
from gsnb.train.strategy import DefaultStrategy, MCMCStrategy, Strategy
from gsnb.train.trainer import Trainer

__all__ = [
    "CheckpointError",
    "CheckpointWarning",
    "DefaultStrategy",
    "EvalResult",
    "Knob",
    "MCMCStrategy",
    "StepMetrics",
    "Strategy",
    "TrainConfig",
    "Trainer",
    "TrainingHealthWarning",
]
