"""The per-view corrections a run may learn beside the Gaussians: exposure and pose.

:class:`ViewCorrections` is what the trainer holds: the exposure transforms
(:mod:`gsnb.train.exposure`), the pose corrections (:mod:`gsnb.train.pose_refine`),
which views train on their left half only (3DGS's evaluation protocol with
exposure), and their optimizers, which step with the Gaussians' Adam, are
skipped with it on a non-finite step, and are never touched by densification.

Live switches (``Trainer.set``, the panel), applied at the next step:

- ``exposure`` off: the transforms are neither learned nor applied (training and
  evaluation see the raw render); on again: they continue from where they were.
- ``pose_refine`` off: the corrections stop learning but stay applied, since the
  Gaussians were fitted to the corrected cameras; on again: they learn on. They learn
  from step ``pose_refine_start`` on.

Which views train is fixed when the run starts (``train_test_exp``, by default
``exposure`` at the start), because it decides which pixels are training data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from gsnb.raster import RenderResult
from gsnb.train.config import TrainConfig
from gsnb.train.exposure import (
    PROTOCOL_FULL,
    PROTOCOL_HALVES,
    ExposureCorrection,
    apply_exposure,
    exposure_rate,
    left_columns,
)
from gsnb.train.pose_refine import MovedGaussians, PoseRefinement

if TYPE_CHECKING:
    from gsnb.data.dataset import SceneDataset, View


def training_views(dataset: SceneDataset, config: TrainConfig) -> list[View]:
    """The views a run trains on: the training views, then the test views when they train on
    their left halves (``config.train_test_exp``, resolved to ``exposure`` when None).

    Sets ``config.train_test_exp`` when it was None, so that a checkpoint resumes
    with the same views.

    Example:
        >>> import tempfile
        >>> from gsnb.data.dataset import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> data = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=3, size=8))
        >>> [len(training_views(data, TrainConfig(exposure=on))) for on in (False, True)]
        [2, 3]
    """
    if config.train_test_exp is None:
        config.train_test_exp = bool(config.exposure)
    return list(dataset.train) + (list(dataset.test) if config.train_test_exp else [])


class ViewCorrections:
    """Exposure transforms and pose corrections of a run's training views.

    Args:
        config: the run's settings (read at every call: the switches are live).
        views: the views the run trains on (:func:`training_views`).
        num_halves: how many of them, at the end, are test views that train on
            their left half.
        extent: the scene extent (pose translations are in extents).
        device: where the corrections live.

    Example:
        >>> import torch
        >>> config = TrainConfig(exposure=True)
        >>> fix = ViewCorrections(config, ["a.png", "b.png"], num_halves=1, extent=1.0)
        >>> rgb, target = fix.for_loss(torch.rand(4, 6, 3), torch.rand(4, 6, 3), 1)
        >>> tuple(rgb.shape)  # a test view: its left half
        (4, 3, 3)
    """

    def __init__(
        self,
        config: TrainConfig,
        views: Sequence[View] | Sequence[str],
        num_halves: int,
        extent: float,
        device: torch.device | str = "cpu",
    ) -> None:
        self.config = config
        names = [v if isinstance(v, str) else v.name for v in views]
        self.first_half = len(names) - num_halves
        self.exposure = ExposureCorrection(names, device)
        self.poses = PoseRefinement(names, extent, device)

    @property
    def protocol(self) -> str:
        """How test views are evaluated (:data:`~gsnb.train.exposure.PROTOCOL_HALVES` or full)."""
        return PROTOCOL_HALVES if self.config.train_test_exp else PROTOCOL_FULL

    # ----------------------------------------------------------- a step
    def learns_poses(self, step: int) -> bool:
        """Whether the pose corrections learn at ``step``.

        Example:
            >>> fix = ViewCorrections(TrainConfig(pose_refine=True, pose_refine_start=500),
            ...                       ["a.png"], num_halves=0, extent=1.0)
            >>> fix.learns_poses(499), fix.learns_poses(500)
            (False, True)
        """
        return self.config.pose_refine and step >= self.config.pose_refine_start

    def gaussians(self, model: Any, viewmat: Tensor, index: int | None, step: int) -> Any:
        """``model``, or its Gaussians moved by view ``index``'s pose correction when it has one
        (:class:`~gsnb.train.pose_refine.MovedGaussians`): once a correction learned, or
        where they learn at ``step``."""
        if index is None or not (self.learns_poses(step) or self.poses.learned):
            return model
        moved = self.poses.moved(model.splats, viewmat, index)
        return MovedGaussians(moved, model.background)

    def passes(self, index: int, step: int) -> bool:
        """Whether view ``index`` trains at ``step`` on the plain render of its whole image: no
        pose correction, no exposure transform, not a test view's half (:meth:`gaussians` and
        :meth:`for_loss` change nothing); clears last step's gradients as ``for_loss`` does.

        Example:
            >>> fix = ViewCorrections(TrainConfig(), ["a.png", "b.png"], num_halves=1, extent=1.0)
            >>> fix.passes(0, step=0), fix.passes(1, step=0)  # view 1: a test view's left half
            (True, False)
        """
        self._clear_grads()
        if self.config.exposure or self.learns_poses(step) or self.poses.learned:
            return False
        return index < self.first_half

    def for_loss(self, rgb: Tensor, target: Tensor, index: int) -> tuple[Tensor, Tensor]:
        """The render ``[H, W, 3]`` through view ``index``'s exposure (when on) and the target,
        both cut to the left half for a test view; clears last step's gradients first."""
        self._clear_grads()
        if self.config.exposure:
            rgb = self.exposure.apply(rgb, index)
        if index >= self.first_half:
            cut = left_columns(rgb.shape[-2])
            rgb, target = rgb[..., :cut, :], target[..., :cut, :]
        return rgb, target

    def _clear_grads(self) -> None:
        self.exposure.matrices.grad = None
        self.poses.params.grad = None

    def grads(self) -> list[Tensor]:
        """This step's gradients of the corrections being learned (for the finite check)."""
        params = (self.exposure.matrices, self.poses.params)
        return [p.grad for p in params if p.grad is not None]

    def step(self, step: int) -> None:
        """The corrections' Adam updates at ``step`` (0-based), for those switched on."""
        cfg = self.config
        if cfg.exposure:
            lr = exposure_rate(cfg.lr_exposure, cfg.lr_exposure_final, step, cfg.steps)
            self.exposure.step(lr)
        if self.learns_poses(step):
            self.poses.step(cfg.lr_pose, cfg.pose_weight_decay)

    # ------------------------------------------------------- evaluation
    def index_of(self, name: str) -> int | None:
        """The training-view index of the view ``name``, or None when it does not train."""
        return self.exposure.index_of(name)

    def for_metrics(self, out: RenderResult, index: int | None) -> RenderResult:
        """A render through the exposure of training view ``index``, when exposure is on; a
        view with no exposure of its own (``index`` None: held out whole) goes through the
        mean of the learned ones, the photos' average response
        (:meth:`~gsnb.train.exposure.ExposureCorrection.mean`)."""
        if not self.config.exposure:
            return out
        with torch.no_grad():
            if index is None:
                rgb = apply_exposure(out.rgb, self.exposure.mean())
            else:
                rgb = self.exposure.apply(out.rgb, torch.tensor([index], device=out.rgb.device))
        return dataclasses.replace(out, rgb=rgb)

    def metric_columns(self, split: str) -> bool:
        """Whether metrics of ``split`` are taken on right halves (test views, halves protocol)."""
        return split == "test" and bool(self.config.train_test_exp)

    # ------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Both corrections and their Adam states, on the CPU."""
        return {"exposure": self.exposure.state_dict(), "poses": self.poses.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`."""
        self.exposure.load_state_dict(state["exposure"])
        self.poses.load_state_dict(state["poses"])
