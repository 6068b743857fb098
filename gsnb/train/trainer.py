"""``Trainer``: optimise Gaussians on posed photos, step by step, with live knobs."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor

from gsnb.data.dataset import bytes_to_float
from gsnb.model import GaussianModel, checked_background
from gsnb.raster import RenderResult
from gsnb.train import batch, fused_step, regularizers
from gsnb.train import checkpoint as ckpt
from gsnb.train.bins import IntersectionBudget
from gsnb.train.config import TrainConfig
from gsnb.train.control import TrainingControl
from gsnb.train.corrections import ViewCorrections, training_views
from gsnb.train.error_shares import error_shares, pixel_error
from gsnb.train.evaluation import EvalResult, evaluate_views
from gsnb.train.filter3d import Filter3D
from gsnb.train.health import SUMS, HealthMonitor, health_sums, signals_from_sums
from gsnb.train.inputs import PREFETCH, ViewImages, ViewOrder, initial_model, step_background
from gsnb.train.interrupts import InterruptGuard
from gsnb.train.knobs import Knob, check_value, describe_knobs
from gsnb.train.losses import photometric_terms, psnr_from_mse
from gsnb.train.memory import MemoryWatch, choose_images_on
from gsnb.train.metrics import StepMetrics
from gsnb.train.metrics_file import MetricLines, write_metrics
from gsnb.train.optim import learning_rates, make_optimizer, set_learning_rates
from gsnb.train.pose_refine import MovedGaussians
from gsnb.train.rendering import BackendRenderer, Renderer, render_model, screen_absgrad
from gsnb.train.rundir import RunFolder
from gsnb.train.strategy import Strategy, make_strategy
from gsnb.train.transaction import DensifySnapshot

if TYPE_CHECKING:
    from gsnb.data.dataset import SceneDataset, View

T = TypeVar("T")

CHECKPOINT_NAME = ckpt.NEWEST_NAME


class DensifyError(RuntimeError):
    """A strategy step failed; the run was put back to just before it (see the message).

    ``cause`` says what failed, without the advice on continuing in this process.
    """

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


@dataclasses.dataclass
class _HalfStep:
    """A step whose loss, gradients and Adam update are done; the strategy comes next."""

    step: int
    start: float
    rates: dict[str, float]
    degree: int
    view: int
    host: dict[str, float]
    skipped: bool
    info: dict[str, Any]
    # Where the step began (the view order's and the generator's states), whether its
    # Adam update went out gated before its numbers were read, and the intersections it
    # made room for (0: it waited for their count): what a step that ran out of room needs
    # to run again (Trainer._rebin).
    order_state: dict[str, Any] = dataclasses.field(default_factory=dict)
    gen_state: Tensor | None = None
    early: bool = False
    capacity: int = 0


class _Rebin(Exception):
    """A step's render had more splat-tile intersections than it made room for: the step
    runs again (Trainer._train_step), with room for all of them."""

    def __init__(self, half: _HalfStep) -> None:
        super().__init__(f"step {half.step + 1} ran out of room for its intersections")
        self.half = half


@dataclasses.dataclass
class _InFlight:
    """A step whose work is all launched and whose numbers are not read back yet.

    ``values`` is the pinned host copy of the step's sums (health, gradient, loss and, for
    a fused step, its count of intersections), known once ``ready`` has passed.
    """

    half: _HalfStep
    events: dict[str, int]
    values: Tensor
    ready: torch.cuda.Event
    launched: float  # time.perf_counter() once its work was launched


class Trainer(TrainingControl):
    """Train a :class:`~gsnb.model.GaussianModel` on a :class:`~gsnb.data.dataset.SceneDataset`.

    One step renders one training view, or ``config.batch_size`` of them in one call
    (:mod:`gsnb.train.batch`), in a shuffled order that repeats every epoch, takes the
    loss ``(1 - lambda) * L1 + lambda * (1 - SSIM)`` plus any regularisers, runs Adam
    and then the densification strategy. Everything random draws from generators
    seeded by ``config.seed``, so equal seeds give equal runs, and a run resumed from a
    checkpoint continues exactly.

    Interactive use: :meth:`step`, :meth:`run`, :meth:`start` (a background
    thread), :meth:`pause`, :meth:`resume`, :meth:`stop`, :meth:`set` (applied
    at the next step), :meth:`knobs`, :meth:`on_step`, :meth:`on_eval`,
    :meth:`evaluate`, :meth:`save_checkpoint` and :meth:`resume_from`. All of
    them may be called from any thread; the model is consistent at every step
    boundary.

    In :meth:`run` and :meth:`start` a step is read back during the next one where it
    only accumulates densification statistics: its update and the strategy's sums are
    launched gated on the device (a non-finite step changes nothing, as when it is read
    at once), and the next step is launched before the host waits for the numbers, so
    that the GPU never idles while Python counts a step. Such a step's metrics reach
    ``history`` and the :meth:`on_step` callbacks once the next step is launched
    (``step_count`` may then be one ahead of ``metrics.step``); a step that densifies,
    the last step of a run and a step after which an evaluation or checkpoint is due are
    read at once, and :meth:`pause`, :meth:`stop` and checkpoints read back the step in
    flight first. :meth:`step` always reads its step at once.

    A fused step bins its splats into tiles without waiting for the GPU to count their
    intersections: it makes room for what the view's last render counted, with a margin
    (:mod:`gsnb.train.bins`). A render that needs more closes the step's gate (nothing
    learns from it) and the step runs again, waiting for the count (``rebinned_steps``);
    the run is the same either way.

    What a run holds: ``model``, ``optimizer``, ``strategy`` and its
    ``strategy_state``, ``train_images`` (the training views' images and cameras
    on ``device``), ``background`` (``[3]``), ``renderer`` (``default_renderer``
    unless one was passed), ``history`` (every step's metrics), ``evals`` and
    ``corrections`` (the learned exposures and pose corrections, when switched on:
    :mod:`gsnb.train.corrections`). ``fused_step`` (True): a step of one view on the
    CUDA backend renders, scores and back-propagates in one call of the extension
    (:mod:`gsnb.train.fused_step`) where nothing else needs autograd's path; False
    always takes it.

    Args:
        dataset: the views, split and initial points.
        config: settings (:class:`TrainConfig`); default settings when None.
        strategy: a strategy object, or ``"default"`` / ``"mcmc"`` (default ``"default"``).
        renderer: callable with :func:`gsnb.render`'s signature, returning an object
            with ``rgb``, ``alpha``, ``depth`` and ``meta`` (``means2d``, ``radii [C, N, 2]``,
            ``absgrad``); default ``gsnb.render`` with ``config.backend``.
        model: start from these Gaussians instead of the dataset's points.
        progress: show a progress bar while the training images load.

    Example:
        >>> import tempfile
        >>> from gsnb.data.dataset import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> from gsnb.train import Trainer, TrainConfig
        >>> data = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=4, size=24))
        >>> trainer = Trainer(data, TrainConfig(steps=3, max_init_points=200))
        >>> trainer.run().step
        3
    """

    def __init__(
        self,
        dataset: SceneDataset,
        config: TrainConfig | None = None,
        *,
        strategy: Strategy | str | None = None,
        renderer: Renderer | None = None,
        model: GaussianModel | None = None,
        progress: bool = False,
    ) -> None:
        self.config = config if config is not None else TrainConfig()
        cfg = self.config
        if cfg.data is None and getattr(dataset, "root", None) is not None:
            cfg.data = str(Path(dataset.root).resolve())
        # Checkpoints record how the data was loaded, so that a resume reloads it the same way.
        for name in ("downscale", "test_every"):
            if isinstance(getattr(dataset, name, None), int):
                setattr(cfg, name, getattr(dataset, name))
        self.dataset = dataset
        self.strategy = (
            strategy if isinstance(strategy, Strategy) else make_strategy(strategy or "default")
        )
        _check_error_shares(cfg, self.strategy)
        self.device = _resolve_device(cfg.device)
        self._device_index = _device_index(self.device)
        self.default_renderer = BackendRenderer(cfg.backend)
        self.renderer: Renderer = renderer or self.default_renderer
        self.fused_step = True
        self.extent = float(dataset.extent)
        if not math.isfinite(self.extent) or self.extent <= 0:
            raise ValueError(f"dataset.extent must be a positive number, got {dataset.extent!r}")
        if not dataset.train:
            raise ValueError(
                "the dataset has no training views (zero images, or every view is held out); "
                "check the image folder, or load it with a larger test_every"
            )
        self._gen = torch.Generator(self.device).manual_seed(cfg.seed)
        views = training_views(dataset, cfg)  # with test views' left halves for 3DGS's protocol
        self._order = ViewOrder(len(views), cfg.seed)
        if model is None:
            model = initial_model(
                dataset.points,
                dataset.points_rgb,
                sh_degree=cfg.sh_degree,
                init_opacity=_or_default(cfg.init_opacity, self.strategy.init_opacity),
                init_scale=_or_default(cfg.init_scale, self.strategy.init_scale),
                max_points=cfg.max_init_points,
                rotation=cfg.init_rotation,
                generator=self._order.generator,
            )
        self.model = model.to(self.device)
        images_on = choose_images_on(
            cfg.images_on,
            self.device,
            [(v.width, v.height) for v in views],
            self.model.num_gaussians,
            self.model.sh_degree,
        )
        self.train_images = ViewImages(views, self.device, progress, images_on)
        self.filter3d = Filter3D(views, device=self.device)  # used while config.filter3d is on
        self._test_images: ViewImages | None = None
        self.background = torch.tensor(dataset.background, dtype=torch.float32, device=self.device)
        self.model.background = checked_background(dataset.background)  # saved with it
        self.optimizer = make_optimizer(self.model.splats, learning_rates(cfg, 0, self.extent))
        halves = len(views) - len(dataset.train)
        self.corrections = ViewCorrections(cfg, views, halves, self.extent, self.device)
        batch.apply_adam_settings(self.optimizer, cfg.batch_size)
        # The processes of a data-parallel run (gsnb.train.distributed); None: this one alone.
        self.process_group: batch.ProcessGroup | None = None
        self.strategy_state: dict[str, Any] = self.strategy.initialize_state(self.extent)
        self._step = 0
        self.skipped_steps = 0
        self.history: list[StepMetrics] = []
        # The checkpoint this trainer last wrote and the step it holds.
        self.last_checkpoint: tuple[Path, int] | None = None
        self.evals: list[EvalResult] = []
        self.error: BaseException | None = None
        self._health = HealthMonitor()
        self._step_callbacks: list[Callable[[StepMetrics], Any]] = []
        self._eval_callbacks: list[Callable[[EvalResult], Any]] = []
        self._pending: dict[str, Any] = {}
        self._pending_lock = threading.Lock()
        self._init_control()
        self._committing = False
        self._stepping = False  # inside _train_step
        self._unfinished: _HalfStep | None = None
        # Room for each view's splat-tile intersections (gsnb.train.bins), and the steps
        # that ran out of it and ran again.
        self._bins = IntersectionBudget()
        self.rebinned_steps = 0
        # Read one step behind (run and start): the step launched, not yet read back, and
        # the step count before which the loop reads every step at once (None: always).
        self._in_flight: _InFlight | None = None
        self._read_slots: list[tuple[Tensor, Tensor, torch.cuda.Event]] = []  # _read_slot
        self._read_behind_until: int | None = None
        self._ready: list[StepMetrics] = []  # counted, not yet given to _after_step
        self._save_lock = threading.Lock()
        # The output folder this run holds (locked), when a command claimed one.
        self.run_folder: RunFolder | None = None
        # Training time of the whole run (all legs), and since the last checkpoint.
        self.train_seconds = 0.0
        self.leg_start_step = 0
        self._metric_lines = MetricLines()  # each counted step's line of metrics.jsonl
        self.leg_start_seconds = 0.0
        self._since_checkpoint = 0.0
        # Seconds the last checkpoint took to write (0.0 before the first): sets their interval.
        self.checkpoint_seconds = 0.0
        width, height = self.train_images.max_size
        self._memory = MemoryWatch(self.device, width, height, self.train_images.nbytes)
        self._memory.check(self.num_gaussians, self.model.sh_degree)

    # --------------------------------------------------------------- the step
    @property
    def step_count(self) -> int:
        """Steps completed so far."""
        return self._step

    @property
    def num_gaussians(self) -> int:
        """Number of Gaussians now."""
        return self.model.num_gaussians

    @property
    def sh_degree_now(self) -> int:
        """The SH degree the next step uses."""
        return min(self._step // self.config.sh_degree_interval, self.model.sh_degree)

    def step(self) -> StepMetrics:
        """Run one training step now and return its metrics.

        Knobs queued by :meth:`set` are applied first. In the main thread a
        Ctrl-C never leaves a half-applied step: it either abandons the step
        before any parameter changed or is raised once the step is complete.
        """
        if self._guard is None and threading.current_thread() is threading.main_thread():
            guard = InterruptGuard(graceful=False)
            with guard.installed(), self._guarded(guard):
                self._step_locked(gated=False)
        else:
            self._step_locked(gated=False)
        metrics = self._deliver()
        assert metrics is not None and metrics.step == self._step
        return metrics

    def _step_locked(self, gated: bool, read_behind_until: int | None = None) -> bool:
        """One step under the lock; False when ``gated`` and paused or stopped. Its metrics
        (and an earlier step's, read behind) wait in ``_ready`` for :meth:`_deliver`.

        ``read_behind_until``: where the step allows, launch it whole and read its numbers
        back during the next one (:meth:`_settle`), unless it is the step before this count.
        """
        with self._lock:
            if gated:
                if self._pause.is_set() or self._stop.is_set():
                    return False
                # under the lock: a pause() that waits for this step sets "paused" after it
                self._status = "running"
            self._apply_pending()
            if self._unfinished is not None:  # a step whose densification failed: finish it
                self._densify_and_count(self._unfinished)
                return True
            self._read_behind_until = read_behind_until
            try:
                self._train_step()
                return True
            except torch.cuda.OutOfMemoryError as err:
                self.optimizer.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
                raise RuntimeError(
                    f"the GPU ran out of memory at step {self._step} with {self.num_gaussians} "
                    "Gaussians; the model is unchanged. Train at a larger --downscale, or cap the "
                    "Gaussians (--cap-max, the strategy's cap_max)"
                ) from err
            finally:
                self._read_behind_until = None

    def _settle(self) -> None:
        """Read back the step in flight (waits for the GPU only if it is not done) and
        count it: its metrics join ``_ready``. Called under the lock before anything that
        needs every step read: the next step's update, a checkpoint, the end of a loop."""
        flight = self._in_flight
        if flight is None:
            return
        self._in_flight = None
        flight.ready.synchronize()
        half = flight.half
        read = flight.values.tolist()
        if self._overflowed(half, read):
            if self._stepping:  # the step that reads it starts over with this one
                raise _Rebin(half)
            self._rebin(half)
            self._train_step()  # read at once: _read_behind_until is None out of a step
            return
        self._judge(half, read)
        # Its share of the run's time: until the next step began, or until now.
        end = time.perf_counter() if self._read_behind_until is None else flight.launched
        self._count(half, flight.events, end - half.start)

    def _deliver(self) -> StepMetrics | None:
        """Hand the counted steps to :meth:`_after_step` in order; returns the last one."""
        last = None
        while self._ready:
            last = self._deliver_one()
        return last

    def _deliver_one(self) -> StepMetrics:
        metrics = self._ready.pop(0)
        self._after_step(metrics)
        return metrics

    def _reads_behind(self, step: int, early: bool, fused: bool) -> bool:
        """Whether ``step`` may be read back during the next one: in a loop, not its last
        step, a one-view fused step whose update went out gated (or ungated), a strategy
        that gates itself at this step, no exposure or pose correction learning at it (before
        ``pose_refine_start`` the corrections' step does nothing), and no evaluation or
        checkpoint due after it (those read the state as of a counted step)."""
        end, cfg = self._read_behind_until, self.config
        if end is None or step + 1 >= end or not (early and fused) or self.process_group:
            return False
        if cfg.exposure or self.corrections.learns_poses(step):
            return False
        if not self.strategy.gates_at(step):
            return False
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and self.dataset.test_ids:
            return False
        return not self._checkpoint_due(step + 1)

    def _train_step(self) -> None:
        # An exception before the commit (Ctrl-C, a renderer error, out of memory)
        # must leave no trace, not even in the random streams, so that the run
        # stays equal to one that never saw it.
        while True:
            saved_order, saved_gen = self._order.state(), self._gen.get_state()
            step = self._step
            self._stepping = True
            try:
                self._train_step_unsafe(saved_order, saved_gen)
                return
            except BaseException as err:
                if self._step == step and not self._committing:
                    self._order.load_state(saved_order)
                    self._gen.set_state(saved_gen)
                    self.optimizer.zero_grad(set_to_none=True)
                if not isinstance(err, _Rebin):
                    raise
                self._rebin(err.half)  # then that step again
            finally:
                self._committing = False
                self._stepping = False

    def _overflowed(self, half: _HalfStep, read: list[float]) -> bool:
        """Record the intersections ``half``'s render counted (``read[13]``, after the
        health sums and the loss terms, where a fused step gave them); whether there were
        more than it made room for."""
        if len(read) <= 13:
            return False
        count = int(read[13])
        self._bins.observe(half.view, count, self.num_gaussians)
        return 0 < half.capacity < count

    def _rebin(self, half: _HalfStep) -> None:
        """Go back to the start of ``half``'s step, whose render ran out of room for its
        intersections, so that the next step runs it again, waiting for their count. Its
        update was gated off on the device (the render's loss was NaN) and its strategy
        added nothing; what is left of it on the host are Adam's step counts."""
        if half.early:
            self.optimizer.uncount()
        self.optimizer.zero_grad(set_to_none=True)
        self._order.load_state(half.order_state)
        if half.gen_state is not None:
            self._gen.set_state(half.gen_state)
        self._step = half.step
        self._bins.forget(half.view)
        self.rebinned_steps += 1

    def _train_step_unsafe(self, order_state: dict[str, Any], gen_state: Tensor) -> None:
        start = time.perf_counter()
        cfg, step = self.config, self._step
        rates = batch.scaled_rates(
            learning_rates(cfg, step, self.extent, self.strategy.lr_means_decay_steps),
            cfg.batch_size,
            cfg.batch_lr_scaling,
        )
        set_learning_rates(self.optimizer, rates)
        group = self.process_group
        fused: fused_step.StepGrads | None = None
        capacity = 0
        if cfg.batch_size > 1 or group is not None:  # several views per step: gsnb.train.batch
            if self.strategy.needs_error(step):  # a data-parallel run of one view a step
                raise ValueError(
                    "error_densify needs each Gaussian's share of one view's error a step, "
                    "which a data-parallel run does not give; train in one process, or turn "
                    "error_densify off"
                )
            rank, world = (0, 1) if group is None else (group.rank, group.world_size)
            ids, upcoming = batch.draw_views(self._order, cfg.batch_size, rank, world)
            idx = ids[0]
            degree = self.sh_degree_now
            bg = step_background(self.background, cfg.random_background, self._gen)
            self.optimizer.clear_grads()

            def render(viewmats: Tensor, Ks: Tensor, width: int, height: int) -> RenderResult:
                return self._render(viewmats, Ks, width, height, degree, bg, self.strategy.absgrad)

            terms, info = batch.render_batch(
                render, self.train_images, ids, upcoming, cfg.ssim_lambda
            )
            loss, l1, ssim_value, mse = terms
            info["process_group"] = group
        else:
            idx = self._order.next()
            # The photo's bytes: the fused step reads them, other paths take its floats.
            photo = self.train_images.image_bytes(idx, self._order.peek(PREFETCH))
            height, width = photo.shape[:2]
            viewmat, K = self.train_images.cameras[idx]
            degree = self.sh_degree_now
            bg = step_background(self.background, cfg.random_background, self._gen)
            self.optimizer.clear_grads()

            info = {"width": width, "height": height, "n_cameras": 1}
            if self._fuses(idx, photo):  # render, loss and backward pass in one call
                # Room for the intersections, where the gate can discard a render that
                # lacks some (skip_nonfinite): then binning does not wait for their count.
                if cfg.skip_nonfinite:
                    capacity = self._bins.capacity(idx, self.num_gaussians)
                fused = fused_step.forward_backward(
                    self.model.splats, viewmat, K, width, height, degree, bg, photo,
                    cfg.ssim_lambda, self.strategy.absgrad,
                    antialiased=cfg.rasterize_mode == "antialiased",
                    filter3d=self._filter3d_variances(), capacity=capacity,
                    error_shares=self.strategy.needs_error(step),
                )  # fmt: skip
                info |= {"means2d": fused.means2d, "radii": fused.radii, "absgrad": fused.absgrad}
                if fused.error is not None:
                    info["error"] = fused.error
            else:
                target = bytes_to_float(photo)
                out = self._render(
                    viewmat, K, width, height, degree, bg, self.strategy.absgrad, view=idx
                )
                means2d = out.meta.means2d
                if means2d.requires_grad:
                    means2d.retain_grad()
                rgb = out.rgb.squeeze(0)  # a view: its backward launches nothing (indexing's)
                rgb, target = self.corrections.for_loss(rgb, target, idx)
                loss, l1, ssim_value, mse = photometric_terms(rgb, target, cfg.ssim_lambda)
                info |= {
                    "means2d": means2d,
                    "radii": out.meta.radii,
                    "absgrad": screen_absgrad(out),
                }
                if self.strategy.needs_error(step):
                    info["error"] = self._error_shares(viewmat, K, width, height, idx, rgb, target)
        extra = regularizers.regularization(
            self.model.splats, cfg, self.extent, self.strategy.regularization(self.model.splats)
        )
        if fused is not None:  # the gradients are in .grad: the regularisers' add to them
            metrics = fused.stats
            if extra is not None:
                if extra.requires_grad:
                    extra.backward()
                metrics = torch.cat([metrics[:1] + extra.detach(), metrics[1:]])
        else:
            if extra is not None:
                loss = loss + extra
            loss.backward()
            with torch.no_grad():
                metrics = torch.stack(
                    [loss.detach(), l1.detach(), ssim_value.detach(), mse.detach()]
                )
        params = list(self.model.splats.values())
        if group is not None:  # the mean over the processes, of the gradients and of the loss
            metrics = group.average(params, metrics)
        if cfg.scale_grad_clip > 0 and self.model.splats["scales"].grad is not None:
            torch.nn.utils.clip_grad_norm_([self.model.splats["scales"]], cfg.scale_grad_clip)
        grads = [p.grad for p in params if p.grad is not None] + self.corrections.grads()
        with torch.no_grad():
            # The gradient norm comes with the health sums (a NaN/Inf gradient is counted
            # there); values[7:10] are the gradients' sum of squares and that count, and the
            # loss: the skip rule's inputs (health.signals_from_sums).
            # A fused step's count of intersections comes last (exact in float64).
            counts = [] if fused is None else [fused.intersections]
            tail = [metrics, *counts]
            # Copied to the host as it is made, for a step read behind (_densify_and_count).
            on_cuda = self._device_index >= 0
            slot = self._read_slot(SUMS + sum(t.numel() for t in tail)) if on_cuda else None
            values = health_sums(
                self.model.splats, grads, tail=tail, host=None if slot is None else slot[0]
            )
        # The one-launch Adam goes before the read, so that its host work overlaps the GPU's
        # backward pass; the kernel itself skips a non-finite step (the gate).
        guard = self._guard
        with guard.commit() if guard is not None else contextlib.nullcontext():
            self._settle()  # the step before, read behind: known since binning waited
            self._committing = True
            gate = values[7:10] if cfg.skip_nonfinite else None
            early = self.optimizer.launch(gate, self._active_sh(degree, extra is None))
            half = _HalfStep(
                step, start, rates, degree, idx, {}, False, info,
                order_state, gen_state, early, capacity,
            )  # fmt: skip
            if slot is not None and self._reads_behind(step, early, fused is not None):
                info["gate"] = gate  # the strategy adds nothing on a step the gate closes
                return self._densify_and_count(half, values, slot)
            read = values.tolist()  # the step's one host sync
            if self._overflowed(half, read):
                raise _Rebin(half)
            self._judge(half, read)
            if not half.skipped:
                if not early:
                    self.optimizer.update()
                self.corrections.step(step)
            return self._densify_and_count(half)

    def _active_sh(self, degree: int, render_only: bool) -> dict[str, int] | None:
        """What Adam updates of ``shN`` at a step that renders at SH ``degree``: the bands in
        use, where gsnb's own renderer alone gave the gradients (``render_only``), so that
        the bands above have zero gradients and moments and Adam would leave them as they
        are; None (every value) otherwise."""
        if not render_only or degree >= self.model.sh_degree:
            return None
        if self.renderer is not self.default_renderer:  # it may read every band
            return None
        return {"shN": 3 * ((degree + 1) ** 2 - 1)}

    def _judge(self, half: _HalfStep, read: list[float]) -> None:
        """Finish ``half``'s numbers from its sums read back (``read``: the health sums,
        then loss, L1, SSIM, MSE) and decide whether it is skipped (a non-finite loss or
        gradient, with ``skip_nonfinite``); a skipped step's gated update (``half.early``) gives
        its Adam step counts back."""
        host = dict(zip(("loss", "l1", "ssim", "mse"), read[9:13], strict=True))
        host["psnr"] = psnr_from_mse(host["mse"])
        host |= signals_from_sums(read[:9], self.num_gaussians, self.extent)
        half.host = host
        ok = math.isfinite(host["loss"]) and host["grads_finite"] > 0.5
        half.skipped = not ok and self.config.skip_nonfinite
        if half.skipped:
            if half.early:  # the kernel skipped it: Adam's step counts go back
                self.optimizer.uncount()
            self.skipped_steps += 1

    def _densify_and_count(
        self,
        half: _HalfStep,
        values: Tensor | None = None,
        slot: tuple[Tensor, torch.cuda.Event] | None = None,
    ) -> None:
        """The rest of a step after Adam's update: the strategy, then the step is counted.

        A failure inside the strategy puts the Gaussians, Adam's and the strategy's
        state back as they were after the update and keeps ``half``, so that the next
        step finishes this one and the run stays equal to an uninterrupted one.

        ``values`` (the step's sums on the device, not read yet) and ``slot`` (the pinned
        copy they are queued into, and its event, :meth:`_read_slot`): the strategy gates
        itself (``half.info["gate"]``), and the step is read back and counted by
        :meth:`_settle`.
        """
        events: dict[str, int] = {}
        guard = self._guard
        with guard.commit() if guard is not None else contextlib.nullcontext():
            if not half.skipped:
                snapshot = None
                try:
                    # A step that only adds to the strategy's sums, gated on the device,
                    # changes nothing a snapshot could put back: none is taken then.
                    if not self.strategy.gates_at(half.step):
                        snapshot = DensifySnapshot.take(
                            self.model.splats,
                            self.optimizer,
                            self.strategy_state,
                            self._gen,
                            copy_state=self.strategy.densifies_at(half.step),
                        )
                    counts = self.strategy.step_post_backward(
                        self.model.splats,
                        self.optimizer,
                        self.strategy_state,
                        half.step,
                        half.info,
                        half.rates["means"],
                        self._gen,
                    )
                except Exception as err:
                    if snapshot is not None:  # else none was needed, or taking it failed
                        snapshot.restore(
                            self.model.splats, self.optimizer, self.strategy_state, self._gen
                        )
                    self.optimizer.zero_grad(set_to_none=True)
                    if values is not None:  # read now: the retry needs the step's numbers
                        half.info.pop("gate", None)
                        self._judge(half, values.tolist())
                    self._unfinished = half
                    if isinstance(err, torch.cuda.OutOfMemoryError):
                        torch.cuda.empty_cache()
                    raise self._densify_failure(half.step, err) from err
                events = {k: v for k, v in counts.items() if v}
            self._unfinished = None
            self.optimizer.clear_grads()
            self._step += 1
            if values is not None and slot is not None:
                copy, ready = slot
                # On the current stream, named by an int: current_stream() of no device asks
                # torch.cuda.is_available(), a driver call of up to 0.1 ms, every step.
                ready.record(torch.cuda.current_stream(self._device_index))
                self._in_flight = _InFlight(half, events, copy, ready, time.perf_counter())
                return
        self._count(half, events, time.perf_counter() - half.start)

    def _read_slot(self, length: int) -> tuple[Tensor, torch.cuda.Event]:
        """``length`` values of a pinned float64 host tensor and an event, for a step read
        behind: two pairs, reused (a new pinned allocation and event cost more host time a
        step than the copy's launch), the one that the step in flight does not hold (its
        copy is not read yet). The copy into them is queued by ``health_sums`` itself, which
        torch's pinned allocator does not see: they are dropped only for longer ones, once
        the stream has passed every copy queued into them (an abandoned step's too)."""
        slots = self._read_slots  # (whole tensor, its first `length` values, event) twice
        if not slots or slots[0][0].numel() < length:
            if slots:
                torch.cuda.current_stream(self._device_index).synchronize()
            size = max(length, 16)
            whole = [torch.empty(size, dtype=torch.float64, pin_memory=True) for _ in range(2)]
            slots[:] = [(t, t, torch.cuda.Event()) for t in whole]
        if slots[0][1].numel() != length:
            slots[:] = [(t, t[:length], event) for t, _, event in slots]
        flight = self._in_flight
        busy = flight is not None and flight.values.data_ptr() == slots[0][0].data_ptr()
        _, values, event = slots[1] if busy else slots[0]
        return values, event

    def _count(self, half: _HalfStep, events: dict[str, int], seconds: float) -> None:
        """The metrics of a finished, read step into ``history`` and ``_ready``."""
        step = half.step + 1
        if events:
            self._memory.check_growth(self.num_gaussians, self.model.sh_degree)
        host = half.host
        cfg = self.config
        warns = self._health.check(step, host, cfg.warn_scale, cfg.skip_nonfinite)
        gpu_mem = self._memory.peak(step, changed=bool(events))
        metrics = StepMetrics(
            step=step,
            loss=host["loss"],
            l1=host["l1"],
            ssim=host["ssim"],
            psnr=host["psnr"],
            num_gaussians=self.num_gaussians,
            sh_degree=half.degree,
            lr_means=half.rates["means"],
            step_time=seconds,
            gpu_memory=gpu_mem,
            grad_norm=host["grad_norm"],
            scale_max=host["scale_max"],
            scale_spread=host["scale_spread"],
            anisotropy=host["anisotropy"],
            anisotropy_max=host["anisotropy_max"],
            mean_opacity=host["mean_opacity"],
            skipped=half.skipped,
            skipped_total=self.skipped_steps,
            view=self.train_images.views[half.view].name,
            events=events,
            warnings=warns,
        )
        self.history.append(metrics)
        self._ready.append(metrics)
        self._metric_lines(metrics)  # made now, between steps, not at the checkpoint

    def _densify_failure(self, step: int, err: BaseException) -> DensifyError:
        what = (
            "the GPU ran out of memory"
            if isinstance(err, torch.cuda.OutOfMemoryError)
            else (f"{type(err).__name__}: {err}")
        )
        saved = (
            "no checkpoint was written yet"
            if self.last_checkpoint is None
            else f"the last checkpoint, {self.last_checkpoint[0]}, holds step "
            f"{self.last_checkpoint[1]}"
        )
        cause = (
            f"densification after step {step + 1} failed ({what}) with {self.num_gaussians} "
            "Gaussians"
        )
        return DensifyError(
            f"{cause}. The model, Adam and the strategy are as after step {step + 1}'s update "
            "and before its densification, which the next step retries first, so the run "
            "continues as if nothing had happened. To densify less, set cap_max, or a lower "
            f"one (or raise grow_grad2d), before continuing; {saved}",
            cause,
        )

    def _after_step(self, metrics: StepMetrics) -> None:
        cfg = self.config
        for callback in list(self._step_callbacks):
            self._call(callback, metrics)
        if cfg.eval_every and metrics.step % cfg.eval_every == 0 and self.dataset.test_ids:
            self.evaluate()
        self.train_seconds += metrics.step_time
        self._since_checkpoint += metrics.step_time
        if self._checkpoint_due(metrics.step):
            self._autosave()

    def _checkpoint_due(self, step: int) -> bool:
        """Whether a periodic checkpoint is due after ``step`` (see ``checkpoint_every``)."""
        cfg = self.config
        if cfg.out_dir is None:
            return False
        if cfg.checkpoint_every:
            return step % cfg.checkpoint_every == 0
        if not cfg.checkpoint_minutes:
            return False
        # Writing may take at most 2% of the training time.
        interval = max(60.0 * cfg.checkpoint_minutes, 50.0 * self.checkpoint_seconds)
        return self._since_checkpoint >= interval

    def _call(self, callback: Callable[[Any], Any], value: Any) -> None:
        try:
            callback(value)
        except Exception as err:  # a broken plot must not stop training
            warnings.warn(f"a trainer callback {callback!r} failed: {err!r}", stacklevel=3)

    # -------------------------------------------------------------- knobs
    def knobs(self) -> list[Knob]:
        """The live knobs (training settings, then the strategy's): name, type, range, doc.

        Example:
            >>> [k.name for k in trainer.knobs()][:2]
            ['steps', 'sh_degree_interval']
        """
        return describe_knobs(self.config, "train") + describe_knobs(self.strategy, "strategy")

    def set(self, **knobs: Any) -> None:
        """Queue knob changes; they apply at the start of the next step.

        Raises ``ValueError`` at once for an unknown knob (listing the valid
        ones) or a value of the wrong type or outside its range.

        Example:
            >>> trainer.set(lr_scales=2e-3, grow_grad2d=3e-4)
            >>> trainer.pending_knobs
            {'lr_scales': 0.002, 'grow_grad2d': 0.0003}
        """
        table = {k.name: k for k in self.knobs()}
        unknown = sorted(set(knobs) - set(table))
        if unknown:
            raise ValueError(f"unknown knob(s) {unknown}; the valid knobs are: {', '.join(table)}")
        checked = {name: check_value(table[name], value) for name, value in knobs.items()}
        with self._pending_lock:
            merged = self._pending | checked
            # Knobs valid alone can contradict each other (see knobs.check_order).
            in_config = {k: v for k, v in merged.items() if hasattr(self.config, k)}
            in_strategy = {k: v for k, v in merged.items() if k not in in_config}
            config = dataclasses.replace(self.config, **in_config)
            _check_error_shares(config, dataclasses.replace(self.strategy, **in_strategy))
            self._pending.update(checked)

    @property
    def pending_knobs(self) -> dict[str, Any]:
        """Knob changes queued for the next step."""
        with self._pending_lock:
            return dict(self._pending)

    def _apply_pending(self) -> None:
        with self._pending_lock:  # set, then unqueued: a reader sees the new value either way
            try:
                for name, value in self._pending.items():
                    owner = self.config if hasattr(self.config, name) else self.strategy
                    setattr(owner, name, value)
            finally:
                self._pending = {}

    # ---------------------------------------------------------- callbacks
    def on_step(self, callback: Callable[[StepMetrics], Any]) -> Callable[[], None]:
        """Call ``callback(metrics)`` after every step, once its numbers are read back (in
        :meth:`run` and :meth:`start` possibly after the next step was launched: see the
        class); returns a function that removes it."""
        self._step_callbacks.append(callback)
        return lambda: self._step_callbacks.remove(callback)

    def on_eval(self, callback: Callable[[EvalResult], Any]) -> Callable[[], None]:
        """Call ``callback(result)`` after every evaluation; returns a function that removes it."""
        self._eval_callbacks.append(callback)
        return lambda: self._eval_callbacks.remove(callback)

    # -------------------------------------------------------- evaluation
    def _render(
        self,
        viewmat: Tensor,
        K: Tensor,
        width: int,
        height: int,
        degree: int,
        background: Tensor,
        absgrad: bool,
        view: int | None = None,
    ) -> RenderResult:
        # pose refinement: `view` is the training view whose correction applies, or None
        model = self.corrections.gaussians(self.model, viewmat, view, self._step)
        variances = self._filter3d_variances()
        return self._draw(model, variances, viewmat, K, width, height, degree, background, absgrad)

    def _draw(
        self,
        model: GaussianModel | MovedGaussians,
        variances: Tensor | None,
        viewmat: Tensor,
        K: Tensor,
        width: int,
        height: int,
        degree: int,
        background: Tensor,
        absgrad: bool,
    ) -> RenderResult:
        """Render ``model`` (with the 3D filter's ``variances``) in the run's rasterize mode."""
        return render_model(
            model, self.renderer, viewmat, K, width, height,
            sh_degree=degree, background=background, absgrad=absgrad,
            rasterize_mode=self.config.rasterize_mode, filter3d=variances,
        )  # fmt: skip

    @torch.no_grad()
    def render_camera(
        self,
        viewmat: Tensor,
        K: Tensor,
        width: int,
        height: int,
        sh_degree: int | None = None,
        view_index: int | None = None,
    ) -> RenderResult:
        """Render the current Gaussians from a camera (``viewmat [4, 4]`` world-to-camera, ``K``).

        Safe while training runs in the background (it waits for the step in
        flight). The image is ``result.rgb[0]`` ``[height, width, 3]``. ``view_index``
        (a position in ``train_images.views``) applies that view's learned pose correction.

        Called on a CUDA stream of the caller's own (inside ``torch.cuda.stream(s)``, as
        the viewer does), the render does not hold up training: the Gaussians are copied
        on that stream between two steps, and the render runs from the copy while the next
        steps train. The result belongs to that stream. Without room for the copy (a
        quarter of the free GPU memory), or on the default stream, training waits for
        the render instead.

        Example:
            >>> view = trainer.dataset.views[0]
            >>> K = view.K.clone()
            >>> K[:2] *= 2  # twice the resolution
            >>> trainer.render_camera(view.viewmat, K, 2 * view.width, 2 * view.height).rgb.shape
            torch.Size([1, 32, 32, 3])
        """
        viewmat = torch.as_tensor(viewmat, dtype=torch.float32, device=self.device).reshape(1, 4, 4)
        K = torch.as_tensor(K, dtype=torch.float32, device=self.device).reshape(1, 3, 3)
        side = self._caller_stream()
        with self._shared_access():
            degree = self.sh_degree_now if sh_degree is None else sh_degree
            if side is None or view_index is not None:
                return self._render(
                    viewmat, K, width, height, degree, self.background, False, view=view_index
                )
            model, variances = self._copy_for(side)
        with torch.cuda.stream(side):
            return self._draw(
                model, variances, viewmat, K, width, height, degree, self.background, False
            )

    def _caller_stream(self) -> torch.cuda.Stream | None:
        """The caller's own CUDA stream when a copy of the Gaussians fits beside training."""
        if self.device.type != "cuda":
            return None
        stream = torch.cuda.current_stream(self.device)
        if stream == torch.cuda.default_stream(self.device):
            return None
        free, _ = torch.cuda.mem_get_info(self.device)
        size = sum(p.numel() * p.element_size() for p in self.model.splats.values())
        return stream if 4 * size <= free else None

    def _copy_for(self, side: torch.cuda.Stream) -> tuple[MovedGaussians, Tensor | None]:
        """The Gaussians (and 3D filter) as they are now, copied on ``side`` (under the lock).

        ``side`` waits for the steps queued so far; the next step's updates wait for the
        copy (a few microseconds of device time), so training never blocks on the render.
        """
        main = torch.cuda.default_stream(self.device)  # the stream the loop trains on
        side.wait_stream(main)
        variances = self._filter3d_variances()
        with torch.cuda.stream(side):
            # plain tensors: a GaussianModel (a module, its checks) would cost the trainer,
            # which waits on this lock, more than the copy itself
            copied = {k: v.detach().clone() for k, v in self.model.splats.items()}
            model = MovedGaussians(copied, self.model.background)
            if variances is not None:
                variances = variances.clone()
        main.wait_stream(side)
        return model, variances

    def live_gaussians(self, use: Callable[[dict[str, Tensor], Tensor | None], T]) -> T:
        """Call ``use(splats, variances)`` between two steps and return what it returns.

        ``splats`` are the Gaussians' parameter tensors themselves (detached, not copied:
        training goes on updating them in place, and a densification replaces them);
        ``variances`` the 3D filter's ``[N]`` variances (None when it is off). No step runs
        while ``use`` does: sharing a tensor with another process rewraps its storage
        (``torch.multiprocessing``), which must not race a step that reads it. For a renderer
        that shares the Gaussians rather than copying them, such as the viewer's frame
        process (:class:`~gsnb.viewer.frames.FrameProcess`).

        Example:
            >>> trainer.live_gaussians(lambda splats, variances: splats["means"].data_ptr()) == (
            ...     trainer.model.splats["means"].data_ptr())
            True
        """
        with self._shared_access():
            splats = {k: v.detach() for k, v in self.model.splats.items()}
            return use(splats, self._filter3d_variances())

    def _fuses(self, index: int, target: Tensor) -> bool:
        """Whether view ``index``'s step runs through :func:`fused_step.forward_backward`:
        gsnb's own renderer on the CUDA backend (either mode, with or without the 3D filter),
        nothing between the render and the loss, and tensors the fused kernels take."""
        cfg = self.config
        if not self.fused_step or self.renderer is not self.default_renderer:
            return False
        if cfg.backend == "reference":
            return False
        if not self.corrections.passes(index, self._step):
            return False
        return fused_step.applies(self.model.splats, target)

    def _error_shares(
        self,
        viewmat: Tensor,
        K: Tensor,
        width: int,
        height: int,
        view: int,
        rgb: Tensor,
        target: Tensor,
    ) -> Tensor:
        """``[N]`` each Gaussian's share of the error of the step's image ``rgb`` against
        ``target`` (both as the loss saw them: a test view's left half, ``[H, cut, 3]``, has
        no error on its right), rendered as the step rendered it: the view's pose correction,
        the rasterize mode and the 3D filter."""
        model = self.corrections.gaussians(self.model, viewmat, view, self._step)
        variances = self._filter3d_variances()
        black = torch.zeros(3, device=self.device)

        def draw(gaussians: MovedGaussians) -> RenderResult:
            return self._draw(gaussians, variances, viewmat, K, width, height, 0, black, False)

        error = pixel_error(rgb, target)
        if error.shape[1] < width:  # the loss saw the left columns only
            error = torch.nn.functional.pad(error, (0, width - error.shape[1]))
        return error_shares(model.splats, draw, error)

    def _filter3d_variances(self) -> Tensor | None:
        """The 3D filter's ``[N]`` variances at this step, or None while it is off."""
        if not self.config.filter3d:
            return None
        return self.filter3d.variances(self.model.splats, self._step)

    def render_view(
        self, view: View, sh_degree: int | None = None, corrected: bool = False
    ) -> RenderResult:
        """Render the current Gaussians from ``view``'s camera (over the dataset background).

        With ``corrected``, as evaluation sees it: a view that trains is rendered with its
        learned pose correction and, while ``exposure`` is on, its exposure transform (any
        other view through the mean of the learned transforms, the photos' average response).

        Example:
            >>> trainer.render_view(trainer.dataset.views[0]).rgb[0].shape
            torch.Size([16, 16, 3])
        """
        index = self.corrections.index_of(view.name) if corrected else None
        if not corrected or not self.config.exposure:
            # render_camera holds the lock only while it copies the Gaussians (on a stream
            # of the caller's own): holding it here too would stall training for the render
            return self.render_camera(
                view.viewmat, view.K, view.width, view.height, sh_degree, index
            )
        with self._shared_access():  # the exposures too are read between two steps
            out = self.render_camera(
                view.viewmat, view.K, view.width, view.height, sh_degree, index
            )
            return self.corrections.for_metrics(out, index)

    def shown_exposure(self) -> Tensor | None:
        """``[3, 4]``: the colour transform live views (viewer, panel) show the scene through,
        or None: while ``exposure`` is on, the mean of the learned transforms, which exports
        bake in and held-out views are evaluated through (the stored colours carry the
        transforms' free common drift); without exposure, None (the colours as stored).

        Read without waiting for the step in flight (a viewer's frame must not): during a
        step it may mix two steps' values, which no eye can tell apart. On a GPU it is
        computed on the caller's stream.

        Example:
            >>> trainer.shown_exposure() is None  # exposure is off by default
            True
        """
        if not self.config.exposure:
            return None
        return self.corrections.exposure.mean()

    def evaluate(self, split: str = "test", max_views: int | None = None) -> EvalResult:
        """PSNR, SSIM (and LPIPS when its weights are on disk) on the test or train views.

        Views are rendered as :meth:`render_view` with ``corrected`` does. Protocol
        (``result.protocol``): without ``train_test_exp`` the test views are held out
        whole and measured on whole images (as always); with it (3DGS's exposure protocol,
        the default when the run starts with ``exposure``) each test view trained on its
        left half and every test metric is computed on its right half, columns
        ``[W // 2, W)``, rendered with the exposure learned from the left half.

        Example:
            >>> trainer.evaluate("train").num_views
            3
        """
        if split not in ("test", "train"):
            raise ValueError(f"split must be 'test' or 'train', got {split!r}")
        with self._shared_access():
            if split == "train":
                images = self.train_images  # its first len(dataset.train) views

            elif not self.dataset.test:
                raise ValueError(
                    "the dataset has no test views (loaded with test_every=0); "
                    "use evaluate('train')"
                )
            else:
                if self._test_images is None:
                    self._test_images = ViewImages(
                        self.dataset.test, self.device, images_on=self.train_images.images_on
                    )
                images = self._test_images
            total = len(self.dataset.train) if split == "train" else len(images)
            count = total if max_views is None else min(max_views, total)
            result = evaluate_views(
                lambda view: self.render_view(view, corrected=True).rgb[0],
                images.views[:count],
                images.images[:count],
                self._step,
                right_half=self.corrections.metric_columns(split),
            )
            self.evals.append(result)
        for callback in list(self._eval_callbacks):
            self._call(callback, result)
        return result

    # -------------------------------------------------------- checkpoints
    def default_checkpoint_path(self) -> Path | None:
        """``out_dir/checkpoint.pt``, or None without an ``out_dir``."""
        return None if self.config.out_dir is None else Path(self.config.out_dir) / CHECKPOINT_NAME

    def write_metrics(self, folder: str | os.PathLike[str]) -> Path:
        """Write ``folder/metrics.jsonl`` atomically (the folder made if missing): the lines it
        holds of the legs before a resume, then every step of :attr:`history`, one JSON line
        each (made once per step)."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        return write_metrics(Path(folder), self.history, self.leg_start_step, self._metric_lines)

    def save_checkpoint(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the whole training state (model, Adam, strategy, step, config, RNGs) atomically.

        ``path`` defaults to the run folder ``out_dir``: ``checkpoint.pt`` there is the
        newest and ``checkpoints/`` keeps the ``keep_checkpoints`` newest. If writing fails
        (full disk, unwritable folder), the previous file is left intact and ``OSError``
        says why.
        """
        if path is None and self.config.out_dir is None:
            raise ValueError("no checkpoint path: pass one, or set config.out_dir")
        started = time.perf_counter()
        with self._shared_access():
            self._settle()  # a step in flight is counted first (its Adam counts, if skipped)
            if self._unfinished is not None:
                raise OSError(
                    f"step {self._unfinished.step + 1} is half done (its densification failed); "
                    "a checkpoint can be written once the next step has finished it"
                )
            payload = ckpt.training_payload(
                step=self._step,
                config=self.config,
                strategy=self.strategy,
                strategy_state=self.strategy_state,
                model=self.model,
                optimizer=self.optimizer,
                generator=self._gen,
                view_order=self._order,
                views=self.train_images.views,
                skipped_steps=self.skipped_steps,
                pending_knobs=self.pending_knobs,
                seconds=self.train_seconds,
                corrections=self.corrections.state_dict(),
                filter3d=self.filter3d.state_dict(self.model.splats),
            )
            history = [m for m in self.history if m.step <= self._step]
        with self._save_lock:  # one writer at a time: the newest step ends up newest
            if path is None:
                folder = Path(str(self.config.out_dir))
                # The metrics up to this step go first, so that a kill between the two
                # leaves no checkpoint newer than its metrics (a resume drops metrics
                # newer than its checkpoint when it next writes them).
                folder.mkdir(parents=True, exist_ok=True)
                write_metrics(folder, history, self.leg_start_step, self._metric_lines)
                written = ckpt.save_with_history(folder, payload, self.config.keep_checkpoints)
            else:
                written = ckpt.write_checkpoint(path, payload)
            self.last_checkpoint = (written, payload["step"])
            self._since_checkpoint = 0.0
            self.checkpoint_seconds = time.perf_counter() - started
        return written

    @classmethod
    def resume_from(
        cls,
        path: str | os.PathLike[str],
        dataset: SceneDataset | None = None,
        *,
        renderer: Renderer | None = None,
        device: str | None = None,
    ) -> Trainer:
        """A trainer that continues exactly where the checkpoint at ``path`` left off.

        ``path`` is a checkpoint file, or a run folder (its newest intact checkpoint).
        ``dataset`` defaults to reloading ``config.data`` with the checkpoint's
        ``downscale`` and ``test_every``.

        Example:
            >>> import tempfile
            >>> path = trainer.save_checkpoint(tempfile.mkdtemp() + "/checkpoint.pt")
            >>> Trainer.resume_from(path).step_count == trainer.step_count
            True
        """
        state = ckpt.read_training_state(ckpt.newest_checkpoint(path))
        config = state.config
        if device is not None:
            config.device = device
        if dataset is None:
            if config.data is None:
                raise ValueError(f"checkpoint {path} records no dataset path; pass dataset=")
            from gsnb.data.dataset import load_dataset

            dataset = load_dataset(
                config.data,
                downscale=config.downscale,
                test_every=config.test_every,
                cache_dir=config.cache_dir,
            )
        trainer = cls(
            dataset, config, strategy=state.strategy, renderer=renderer, model=state.model
        )
        trainer._restore(state)
        return trainer

    def _restore(self, state: ckpt.TrainingState) -> None:
        state.check_views(self.train_images.views)
        state.restore_optimizer(self.optimizer)
        state.restore_corrections(self.corrections)
        state.restore_filter3d(self.filter3d, self.model.splats)
        self.strategy_state = state.strategy_state(self.device)
        self._step = state.step
        self._memory.forget_peak()
        state.restore_random(self._order, self._gen)
        self._bins.forget()
        self.skipped_steps = state.skipped_steps
        self.train_seconds = state.seconds
        self.leg_start_step = state.step
        self.leg_start_seconds = state.seconds
        if state.pending_knobs:
            self.set(**state.pending_knobs)

    def __repr__(self) -> str:
        return (
            f"Trainer(step {self._step}/{self.config.steps}, {self.num_gaussians} Gaussians, "
            f"strategy {self.strategy.name}, {self.device}, {self._status})"
        )


def _check_error_shares(config: TrainConfig, strategy: Strategy) -> None:
    """Refuse a strategy that needs each step's error shares in a run of several views a step."""
    if config.batch_size > 1 and strategy.needs_error(0):
        raise ValueError(
            f"error_densify needs each Gaussian's share of one view's error a step; batch_size "
            f"is {config.batch_size}: train with batch_size 1, or turn error_densify off"
        )


def _or_default(value: float | None, default: float) -> float:
    return default if value is None else value


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "device 'cuda' asked for, but torch sees no CUDA device; train on the CPU with "
            "device 'cpu' (--device cpu) or let 'auto' choose"
        )
    return torch.device(name)


def _device_index(device: torch.device) -> int:
    """``device``'s CUDA index (the current device where it names none); -1 off CUDA."""
    if device.type != "cuda":
        return -1
    return device.index if device.index is not None else torch.cuda.current_device()
