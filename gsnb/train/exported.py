"""The model a training run exports (PLY file, video): the Gaussians as the run renders them.

Two trainer options change what a render shows without being in the stored parameters, so
an export bakes them in, and any 3DGS viewer then shows what gsnb evaluated:

- the 3D filter (``filter3d``): widened scales, compensated opacities
  (:func:`gsnb.model.bake_filter3d`);
- exposure compensation (``exposure``): a held-out photo is evaluated through the mean of the
  learned colour transforms (:meth:`gsnb.train.exposure.ExposureCorrection.mean`), the
  photos' average response, while the stored colours carry whatever common transform the
  learned ones drifted to (the loss leaves it free: on the fox, gains of 1.07-1.11 and
  offsets up to 0.06 after 7,000 steps); the mean goes into the SH colours
  (:func:`gsnb.model.bake_exposure`).

:meth:`gsnb.model.GaussianModel.load` with ``exported=True`` does the same from a checkpoint
(``gsnb export``, ``gsnb video``, ``%gs_export``).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from gsnb.model import GaussianModel, bake_exposure, bake_filter3d


def exported_model(trainer: Any) -> GaussianModel:
    """The model ``trainer``'s run exports: a copy with the 3D filter (``config.filter3d``)
    and the mean learned exposure (``config.exposure``) baked in, so that any 3DGS viewer
    shows what gsnb rendered and evaluated; with neither on, the trainer's own model.

    The copy is taken between two steps (:meth:`~gsnb.train.trainer.Trainer.live_gaussians`),
    so a run training in the background gives one step's Gaussians, filter and exposures.

    Example:
        >>> exported_model(trainer) is trainer.model  # both options are off by default
        True
    """
    config = trainer.config
    if not (config.filter3d or config.exposure):
        return trainer.model

    def bake(splats: dict[str, Tensor], variances: Tensor | None) -> GaussianModel:
        if variances is not None:
            splats = bake_filter3d(splats, variances)
        if config.exposure:
            splats = bake_exposure(splats, trainer.corrections.exposure.mean())
        return GaussianModel(splats, background=trainer.model.background)

    return trainer.live_gaussians(bake)
