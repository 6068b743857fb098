"""``TrainConfig``: every setting of a training run, documented with its default and source."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gsnb.train.knobs import check_fields, knob, named_as_options


@dataclass
class TrainConfig:
    """Settings of a training run. Fields marked live can change while it runs (``Trainer.set``).

    Defaults follow the original 3DGS paper and code (Kerbl et al. 2023,
    ``graphdeco-inria/gaussian-splatting``) as gsplat's ``simple_trainer`` uses them.

    Attributes:
        data: dataset folder (COLMAP or transforms.json); recorded so that a
            checkpoint can reload its data. Default None.
        downscale: integer image downscale factor used to load ``data`` (default 1).
        test_every: every ``test_every``-th view is held out for evaluation
            (default 8, INRIA's convention; 0 trains on every view).
        steps: length of the run in steps, one image per step (default 30000, INRIA).
            The means' learning rate decays over this many steps. Live.
        batch_size: views rendered per step, in one render call, loss averaged over them
            (default 1, INRIA). Over several processes it is the global batch, split evenly
            between them. Each learning rate is multiplied by ``sqrt(batch_size)``, Adam's
            betas become ``1 - batch_size * (1 - beta)`` (at least 0) and its epsilon
            ``1e-15 / sqrt(batch_size)``, as gsplat's ``simple_trainer`` does. ``steps`` and
            every schedule (``sh_degree_interval``, the strategy's, and the means' decay
            period: the default strategy's 10,000 unless ``lr_means_decay_steps`` is set)
            still count steps: divide them by ``batch_size`` to show each view as often as a
            run of batch 1.
        batch_lr_scaling: how the learning rates grow with ``batch_size``: ``"sqrt"``
            (times ``sqrt(batch_size)``, gsplat's rule; the default) or ``"linear"`` (times
            ``batch_size``). On the fox (downscale 2, 7,000 views, schedules divided by the
            batch, 5 runs each): batch 1 31.80 dB, batch 4 sqrt 31.67, batch 4 linear 31.85;
            linear was unstable at batch 8 (30.13 and 31.28 dB): use it up to batch 4
            (benchmarks/results/batch_quality_h200.json).
        seed: seed of every random choice of the run (view order, splits,
            noise, backgrounds); equal seeds give equal runs (default 0).
        device: ``"auto"`` (CUDA when available, else CPU), ``"cpu"`` or ``"cuda"``.
        backend: renderer backend for :func:`gsnb.render`: ``"auto"`` (CUDA when
            built and on a GPU, else the reference), ``"cuda"`` or ``"reference"``.
        sh_degree: highest spherical-harmonics degree of the colours (default 3, INRIA).
        sh_degree_interval: the SH degree in use rises by one every this many
            steps, up to ``sh_degree`` (default 1000, INRIA). Live.
        init_opacity: opacity of the initial Gaussians (default None: the strategy's
            choice, 0.1 for the default strategy as INRIA, 0.5 for MCMC as its paper).
        init_scale: factor on the kNN distance that sizes the initial Gaussians
            (default None: the strategy's choice, 1.0 default strategy, 0.1 MCMC).
        init_rotation: rotations of the initial Gaussians: ``"identity"`` (INRIA's) or
            ``"random"`` (each quaternion's four components drawn uniformly from [0, 1)
            with the run's seed, left unnormalised, as gsplat's ``simple_trainer.py`` does).
            The initial Gaussians are round, so this changes no first render, only the axes
            along which each one starts to stretch.
        max_init_points: keep at most this many initial points, chosen at random
            with the run's seed (default 0: all).
        lr_means: Adam learning rate of the means at step 0, multiplied by the
            scene extent (default 1.6e-4, INRIA). Live.
        lr_means_final: factor the means' learning rate decays to, exponentially,
            by the last step (default 0.01, INRIA: 1.6e-4 to 1.6e-6). Live.
        lr_means_decay_steps: the means' rate falls by ``lr_means_final`` every this many
            steps (0: once over the run, INRIA; default -1: the strategy's, 10000 or MCMC's 0).
            A period as long as the run or longer decays once over it. MCMC's exploration
            noise follows the means' rate, hence its 0. In a 30,000-step run, 10,000 brings
            the rate to 0.01 of its first value by step 10,000 and to 1e-6 by the last. A
            checkpoint records the period that -1 stood for. Live.
        lr_scales: Adam learning rate of the log-scales (default 5e-3, INRIA). Live.
        lr_quats: Adam learning rate of the quaternions (default 1e-3, INRIA). Live.
        lr_opacities: Adam learning rate of the opacity logits (default 5e-2, INRIA). Live.
        lr_sh0: Adam learning rate of the degree-0 SH coefficients (default 2.5e-3, INRIA). Live.
        lr_shN: Adam learning rate of the higher SH coefficients (default 2.5e-3 / 20,
            INRIA). Live.
        ssim_lambda: weight of the SSIM term in the loss
            ``(1 - lambda) * L1 + lambda * (1 - SSIM)`` (default 0.2, INRIA). Live.
        random_background: render each step over a random background colour so
            that transparency cannot hide behind a fixed colour (default False,
            INRIA and gsplat option). Live.
        aniso_reg: weight of the anisotropy regulariser, the mean over Gaussians
            of ``max(max_scale / min_scale, aniso_max_ratio) - aniso_max_ratio``
            (default 0: off; PhysGaussian, Xie et al. 2024, uses 1). Live.
        aniso_max_ratio: axis ratio the anisotropy regulariser tolerates for free
            (default 10, PhysGaussian). Live.
        big_scale_reg: weight of the large-scale regulariser, the mean over
            Gaussians of ``relu(max_scale / extent - big_scale_limit)`` (default 0: off). Live.
        big_scale_limit: largest scale, as a fraction of the scene extent, that the
            large-scale regulariser tolerates (default 0.1, the default strategy's
            prune threshold ``prune_scale3d``). Live.
        scale_grad_clip: clip the norm of the log-scales' gradient to this value
            before the optimizer step (default 0: no clipping). Live.
        skip_nonfinite: skip the optimizer step, and count it, when the loss or a
            gradient is NaN or Inf, instead of corrupting the model (default True). Live.
        warn_scale: warn when the largest Gaussian exceeds this many scene extents,
            the sign of exploding scales (default 10). Live.
        eval_every: evaluate on the test views every this many steps (default 0:
            only when asked). Live.
        checkpoint_every: write a checkpoint to ``out_dir`` every this many steps
            (default 0: by time, see ``checkpoint_minutes``). Live.
        checkpoint_minutes: with ``checkpoint_every`` 0, write a checkpoint to ``out_dir``
            every this many minutes of training, stretched so that writing takes at most
            2% of the run (default 5; 0: only when training stops or finishes). A kill
            at any moment then loses at most this much work. Live.
        keep_checkpoints: checkpoints kept in ``out_dir``: the newest as
            ``checkpoint.pt``, with it and the older ones in ``checkpoints/`` (default 3). Live.
        out_dir: folder for checkpoints; None writes none automatically.
        images_on: where the training images live, as 8-bit RGB: ``"gpu"``, ``"cpu"``
            (pinned host memory, the next views copied ahead on a side stream) or
            ``"auto"`` (the GPU when the images and a step fit in half its memory;
            default).
        cache_dir: folder for processed (undistorted, downscaled) images; None: a folder
            of the user cache directory named after the dataset (default).
        rasterize_mode: ``"classic"`` (3DGS's) or ``"antialiased"``: gsplat's option
            of that name (Mip-Splatting's 2D filter with opacity compensation, Yu et al.
            2024), for training, evaluation and the live views alike. Live.
        filter3d: Mip-Splatting's 3D smoothing filter (Yu et al. 2024): each Gaussian is
            widened by the variance ``0.2 / rate^2`` of the highest sampling rate
            ``focal / depth`` at which a training camera sees it, with its opacity
            compensated; the exported PLY has it baked in (default False). Live.
        exposure: learn an affine colour transform per training image (3x4, identity at
            the start), applied to the render before the loss, for photos whose exposure
            or white balance changes (default False; 3DGS's exposure compensation,
            ``gsnb.train.exposure``). Off: neither learned nor applied. Live.
        lr_exposure: Adam learning rate of the exposure transforms at step 0 (default 0.01,
            3DGS's exposure_lr_init). Live.
        lr_exposure_final: the exposures' learning rate at the last step, reached by an
            exponential decay (default 0.001, 3DGS's exposure_lr_final; a rate, not a
            factor). Live.
        train_test_exp: the test views train on their left halves and are evaluated on
            their right halves, 3DGS's ``--train_test_exp`` protocol (their exposure is
            learned from the left half). Default None: as ``exposure`` when the run starts;
            fixed from then on.
        pose_refine: learn a rigid correction (axis-angle rotation and translation, zero at
            the start) of each training view's pose (default False; gsplat's pose_opt,
            ``gsnb.train.pose_refine``). Off: the corrections stop learning and stay
            applied. Live.
        lr_pose: Adam learning rate of the pose corrections; translations are in scene
            extents (default 1e-5, gsplat's pose_opt_lr). Live.
        pose_weight_decay: Adam weight decay of the pose corrections, pulling them to zero
            (default 1e-6, gsplat's pose_opt_reg). Live.
        pose_refine_start: the step from which the pose corrections learn (default 0, from
            the start, as gsplat's pose_opt). Until then the views render with the
            corrections as they are (zero in a new run), so that the first blurry fit does
            not pull the cameras its way. Live.
    """

    data: str | None = None
    downscale: int = knob(1, low=1, live=False)
    test_every: int = knob(8, low=0, live=False)
    steps: int = knob(30_000, low=1)
    batch_size: int = knob(1, low=1, high=256, live=False)
    batch_lr_scaling: str = knob("sqrt", choices=("sqrt", "linear"), live=False)
    seed: int = knob(0, live=False)
    device: str = knob("auto", choices=("auto", "cpu", "cuda"), live=False)
    backend: str = knob("auto", choices=("auto", "cuda", "reference"), live=False)
    sh_degree: int = knob(3, low=0, high=3, live=False)
    sh_degree_interval: int = knob(1000, low=1)
    init_opacity: float | None = None
    init_scale: float | None = None
    init_rotation: str = knob("identity", choices=("identity", "random"), live=False)
    max_init_points: int = knob(0, low=0, live=False)
    lr_means: float = knob(1.6e-4, low=0.0, high=1.0, log=True)
    lr_means_final: float = knob(0.01, low=1e-6, high=1.0, log=True)
    lr_means_decay_steps: int = knob(-1, low=-1)
    lr_scales: float = knob(5e-3, low=0.0, high=1.0, log=True)
    lr_quats: float = knob(1e-3, low=0.0, high=1.0, log=True)
    lr_opacities: float = knob(5e-2, low=0.0, high=1.0, log=True)
    lr_sh0: float = knob(2.5e-3, low=0.0, high=1.0, log=True)
    lr_shN: float = knob(2.5e-3 / 20, low=0.0, high=1.0, log=True)
    ssim_lambda: float = knob(0.2, low=0.0, high=1.0)
    random_background: bool = knob(False)
    aniso_reg: float = knob(0.0, low=0.0, high=100.0)
    aniso_max_ratio: float = knob(10.0, low=1.0, high=1e4, log=True)
    big_scale_reg: float = knob(0.0, low=0.0, high=100.0)
    big_scale_limit: float = knob(0.1, low=1e-4, high=100.0, log=True)
    scale_grad_clip: float = knob(0.0, low=0.0)
    skip_nonfinite: bool = knob(True)
    warn_scale: float = knob(10.0, low=0.0)
    eval_every: int = knob(0, low=0)
    checkpoint_every: int = knob(0, low=0)
    checkpoint_minutes: float = knob(5.0, low=0.0, high=1e6)
    keep_checkpoints: int = knob(3, low=1, high=1000)
    out_dir: str | None = None
    images_on: str = knob("auto", choices=("auto", "gpu", "cpu"), live=False)
    cache_dir: str | None = None
    rasterize_mode: str = knob("classic", choices=("classic", "antialiased"))
    filter3d: bool = knob(False)
    exposure: bool = knob(False)
    lr_exposure: float = knob(0.01, low=0.0, high=1.0, log=True)
    lr_exposure_final: float = knob(0.001, low=0.0, high=1.0, log=True)
    train_test_exp: bool | None = None
    pose_refine: bool = knob(False)
    lr_pose: float = knob(1e-5, low=0.0, high=1.0, log=True)
    pose_weight_decay: float = knob(1e-6, low=0.0, high=1.0, log=True)
    pose_refine_start: int = knob(0, low=0)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.init_scale is not None and not self.init_scale > 0:
            raise ValueError(f"init_scale must be positive, got {self.init_scale!r}")
        if self.init_opacity is not None and not 0.0 < self.init_opacity < 1.0:
            raise ValueError(f"init_opacity must lie in (0, 1), got {self.init_opacity!r}")
        if self.batch_size > 1 and (self.exposure or self.pose_refine or self.train_test_exp):
            # Corrections and test views' left halves apply in the one-view step only.
            raise ValueError(
                "exposure, pose_refine and train_test_exp train one view per step: use "
                f"batch_size 1 (and one process) with them, got batch_size {self.batch_size}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, for checkpoints and JSON.

        Example:
            >>> TrainConfig(steps=10).to_dict()["steps"]
            10
        """
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``.

        Example:
            >>> TrainConfig.from_dict({"steps": 5}).steps
            5
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig settings {unknown}; valid: {sorted(names)}")
        return cls(**values)

    @classmethod
    def from_args(
        cls, args: Any, defaults: dict[str, Any] | None = None, **overrides: Any
    ) -> TrainConfig:
        """The settings a parsed command line names, over ``defaults``, under ``overrides``.

        The pair of :func:`gsnb.train.options.add_config_options`, which declares one
        option per field: pass the same ``defaults``. Takes each attribute of ``args`` (an
        ``argparse.Namespace``) that is a field here, except those left at ``None`` (an
        option not given keeps the default: ``defaults``, else this class's); the other
        attributes are ignored.

        Example:
            >>> import argparse
            >>> args = argparse.Namespace(steps=None, seed=3, sh_degree=None, port=8080)
            >>> c = TrainConfig.from_args(args, {"sh_degree": 0}, out_dir="runs/x")
            >>> c.steps, c.seed, c.sh_degree, c.out_dir
            (30000, 3, 0, 'runs/x')
        """
        names = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in vars(args).items() if k in names and v is not None}
        with named_as_options():
            return cls(**(dict(defaults or {}) | given | overrides))
