"""Data-parallel training over several processes (GPUs) with :mod:`torch.distributed`.

Every process holds the same Gaussians and renders its share of each step's global
batch (``batch_size / world_size`` views). After the backward pass one flattened
``all_reduce`` averages every parameter's gradient (and the loss terms, so that every
process logs the same numbers); before each densification decision the strategy sums
its running statistics (``grad2d``, ``count``) over the processes. Seeds are equal, so
every process draws the same view order, backgrounds and densification noise and
makes the same decisions; a process differs from another only in the views it takes
from each batch. The model therefore stays identical everywhere, without broadcasts.

Checkpoints are written by process 0 alone (the others wait at a barrier) and hold
the whole run's state, the strategy's sums included, so that they resume with any
number of processes (``batch_size`` must split evenly over them).

Processes are started by torch.distributed's elastic launcher: ``gsnb train DATA
--nproc N`` calls :func:`gsnb.train.launcher.launch`, and ``torchrun --nproc-per-node N
-m gsnb.cli train DATA ...`` runs the same code (it reads ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK``). NCCL connects the processes on CUDA, gloo on the CPU.

Stopping: Ctrl-C reaches every worker (the launcher leaves the first one to them); they
agree at the end of a step to stop after it, write a checkpoint and exit with 130. A
second Ctrl-C, or a worker that dies, makes the launcher stop them all at once: the last
checkpoint written remains. Every step ends with one tiny all_reduce for these agreed
decisions (and process 0's time-based checkpoint decision, knob changes and pause).

Knobs and pause: :meth:`DistributedTrainer.set` and :meth:`~DistributedTrainer.pause`
in process 0 (its viewer, or a notebook through the store of :mod:`gsnb.train.remote`,
named by ``GSNB_CONTROL``) are agreed in that same all_reduce; pending knob changes are
then broadcast (only when there are some) and every process applies them before the same
step, and a pause holds every process after the same step.

What differs from one process: ``save_checkpoint`` must be called by every process at
the same step (the training loop does so), and ``eval_every`` evaluates in every process
(the same numbers; process 0 reports them).

The processes and their collectives: :mod:`gsnb.train.process_group`; starting them:
:mod:`gsnb.train.launcher`.

Example:
    >>> from gsnb.train.distributed import DistributedTrainer
    >>> DistributedTrainer.__mro__[1].__name__
    'Trainer'
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from gsnb.train import batch
from gsnb.train.checkpoint import TrainingState
from gsnb.train.knobs import check_value
from gsnb.train.process_group import TorchProcessGroup, collective
from gsnb.train.remote import ControlLink
from gsnb.train.trainer import Trainer

PAUSE_SECONDS = 0.1
"""How often paused processes agree whether to go on."""
RUNNING_SUMS = ("grad2d", "count")
"""Strategy-state tensors that are per-process sums of what each process saw (per Gaussian)."""

RUNNING_MAXES = ("radii",)
"""Strategy-state tensors that are per-process maxima of what each process saw (per Gaussian)."""


class DistributedTrainer(Trainer):
    """A :class:`Trainer` that is one of several data-parallel processes.

    Takes :class:`Trainer`'s arguments, plus ``process_group`` (default: the one
    :func:`init_process_group` joined). Every process builds it from the same data and
    settings, calls :meth:`run` (or :meth:`step`) the same number of times, and gets
    the same model. Only process 0 writes checkpoints. :meth:`leave_group` turns it
    into a plain one-process trainer (after the run: evaluation, export).

    Example (in each of two workers):
        >>> group = init_process_group("cpu")  # doctest: +SKIP
        >>> trainer = DistributedTrainer(data, TrainConfig(batch_size=2))  # doctest: +SKIP
        >>> trainer.run()  # doctest: +SKIP
    """

    def __init__(
        self, *args: Any, process_group: TorchProcessGroup | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        _refuse_per_view_corrections(self.config.to_dict())
        group = process_group if process_group is not None else _joined_group(self.device)
        batch.check_batch(self.config.batch_size, group.world_size)
        self.process_group = group
        self._group = group
        self._stop_wanted = False
        self._agreed_stop = False
        # Knob changes made in a process, sent to all at the next step boundary (process 0's).
        self._outgoing: dict[str, Any] = {}
        self._evaluations_asked = 0
        self.link: ControlLink | None = None
        if self.rank == 0:
            self.link = ControlLink.from_env(os.environ)
            if self.link is not None:
                self.on_step(self.link.record_step)
                self.on_eval(self.link.record_eval)
                self._publish(force=True)

    @property
    def rank(self) -> int:
        """This process's rank (0 writes checkpoints and reports)."""
        return self._group.rank

    def leave_group(self) -> None:
        """Train (or save) on as a one-process trainer; every process's sums are gathered.

        Every process calls it at the same step (a collective). ``process_peaks`` then
        holds each process's peak allocated GPU memory in bytes (None on the CPU), by
        rank. After a stopped run, whose last checkpoint already gathered the sums, use
        :meth:`detach` instead: a process that was interrupted may not call this.
        """
        if self.process_group is None:
            return
        self._gather_sums()
        on_cuda = self.device.type == "cuda"
        peak = torch.cuda.max_memory_allocated() if on_cuda else None
        peaks: list[Any] = [None] * self._group.world_size
        collective(lambda: dist.all_gather_object(peaks, peak))
        self.process_peaks: list[int | None] = peaks
        self.process_group = None

    def detach(self) -> None:
        """Go on as a one-process trainer now, without a collective (see :meth:`leave_group`)."""
        self.process_group = None

    # ------------------------------------------------------- agreed decisions
    def _checkpoint_due(self, step: int) -> bool:
        """Process 0's decisions (the time, knob changes, pause), and a stop wanted by any
        process, agreed in one tiny all_reduce at the end of every step.

        Ctrl-C or :meth:`stop` in any process stops all of them after the same step.
        Knob changes queued in process 0 (:meth:`set`, or the controller of
        :mod:`gsnb.train.remote`) are then broadcast, only when there are some, and
        every process queues them for the next step. While process 0 is paused every
        process waits here, agreeing every :data:`PAUSE_SECONDS` (so that a stop or a
        knob change still reaches them all).
        """
        if self.process_group is None:
            return super()._checkpoint_due(step)
        due = self.rank == 0 and super()._checkpoint_due(step)
        checkpoint = False
        while True:
            self._serve_controller()
            interrupted = self._guard is not None and self._guard.requested
            paused_here = self.rank == 0 and self._pause.is_set()
            due, stop, send, paused = self._group.any(
                due, self._stop_wanted or interrupted, bool(self._outgoing), paused_here
            )
            checkpoint = checkpoint or due
            if stop:
                self._agreed_stop = True
                self._stop.set()
                self._pause.clear()
                return checkpoint
            if send:
                with self._pending_lock:  # taken at once: a change made meanwhile waits a step
                    mine, self._outgoing = self._outgoing, {}
                self._take_knobs(self._group.from_rank0(mine))
            if not paused:
                if self._status == "paused":
                    self._status = "running"
                self._publish()
                return checkpoint
            self._status = "paused"
            self._publish(force=True)
            due = False
            time.sleep(PAUSE_SECONDS)

    def _take_knobs(self, knobs: dict[str, Any]) -> None:
        """Queue process 0's broadcast knob changes here, for the next step (every process)."""
        try:
            Trainer.set(self, **knobs)
        except ValueError as err:  # the same in every process: none takes them
            warnings.warn(f"knob changes {knobs} refused: {err}", stacklevel=2)

    def _serve_controller(self) -> None:
        """Process 0: take the controller's new requests (read every few steps at most)."""
        link = self.link
        if link is None:
            return
        request = link.poll(force=self._pause.is_set())
        if request is None:
            return
        for seq, knobs in link.new_changes(request):
            try:
                self.set(**knobs)
                link.error = None
            except ValueError as err:
                link.error = str(err)
            link.applied = seq
        if request.get("pause") and not self._pause.is_set():
            self.pause()
        elif not request.get("pause") and self._pause.is_set():
            self.resume()
        asked = int(request.get("evaluate", 0))
        if asked > self._evaluations_asked:
            self._evaluations_asked = asked
            if self.dataset.test_ids:
                self.evaluate()  # process 0 alone: the others wait in the next all_reduce
        self._publish(force=True)

    def _publish(self, force: bool = False) -> None:
        if self.link is not None and (force or self.link.publish_due()):
            self.link.publish(self.progress_status(), force=True)

    def progress_status(self) -> dict[str, Any]:
        """What process 0 publishes: step, state, Gaussians, knob values, the run's settings."""
        return {
            "step": self._step,
            "steps": self.config.steps,
            "status": self._status,
            "num_gaussians": self.num_gaussians,
            "knobs": {k.name: k.value for k in self.knobs()},
            "pending": self.pending_knobs,
            "device": str(self.device),
            "strategy": self.strategy.name,
            "world_size": self._group.world_size,
            "time": time.time(),
        }

    def _finish(self, status: str) -> None:
        super()._finish(status)
        self._publish(force=True)

    # ------------------------------------------------------------ knobs, pause
    def set(self, **knobs: Any) -> None:
        """Queue knob changes for every process; they apply before the same step everywhere.

        Checked at once as :meth:`Trainer.set` does; the changes travel to the other
        processes at the end of the step in flight (process 0's: a call in another
        process is ignored; a checkpoint's pending knobs, the same in all, are queued at once).
        """
        if self.process_group is None or getattr(self, "_restoring", False):
            return super().set(**knobs)
        self._check_knobs(knobs)
        with self._pending_lock:
            self._outgoing = self._outgoing | knobs
        return None

    def _check_knobs(self, knobs: dict[str, Any]) -> None:
        table = {k.name: k for k in self.knobs()}
        unknown = sorted(set(knobs) - set(table))
        if unknown:
            raise ValueError(f"unknown knob(s) {unknown}; the valid knobs are: {', '.join(table)}")
        for name, value in knobs.items():
            knobs[name] = check_value(table[name], value)
        merged = self.pending_knobs | knobs
        in_config = {k: v for k, v in merged.items() if hasattr(self.config, k)}
        in_strategy = {k: v for k, v in merged.items() if k not in in_config}
        _refuse_per_view_corrections(dataclasses.asdict(self.config) | in_config)
        dataclasses.replace(self.config, **in_config)  # raises on knobs that contradict
        dataclasses.replace(self.strategy, **in_strategy)

    @property
    def pending_knobs(self) -> dict[str, Any]:
        """Knob changes queued: those on their way to every process, then those taken."""
        with self._pending_lock:
            return dict(self._pending) | dict(getattr(self, "_outgoing", {}))

    def pause(self) -> None:
        """Pause every process after the same step (process 0's call; see :meth:`resume`)."""
        if self.process_group is None:
            return super().pause()
        self._pause.set()
        with self._lock:  # as Trainer.pause: returns once the step in flight has finished
            return None

    def resume(self) -> None:
        """Go on after :meth:`pause`, every process at the same step."""
        if self.process_group is None:
            return super().resume()
        self._pause.clear()
        return None

    def _interrupted(self, guard: Any) -> bool:
        if self.process_group is None:
            return super()._interrupted(guard)
        return self._agreed_stop

    def stop(self, timeout: float | None = None) -> None:
        """Stop every process at the same step boundary (agreed at the end of a step)."""
        if self.process_group is None:
            return super().stop(timeout)
        self._stop_wanted = True
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the checkpoint from process 0 (all processes call it at the same step)."""
        if self.process_group is None:
            return super().save_checkpoint(path)
        self._gather_sums()
        written, error = None, None
        if self.rank == 0:
            try:
                written = super().save_checkpoint(path)
            except OSError as err:
                error = err
        shared = self._group.from_rank0(None if written is None else str(written))
        if error is not None:
            raise error
        if shared is None:
            raise OSError("process 0 could not write the checkpoint (see its warning)")
        self.last_checkpoint = (Path(shared), self._step)
        return Path(shared)

    def _gather_sums(self) -> None:
        """Sum the strategy's running sums over the processes into process 0's state, and
        take its running maxima over them in every process.

        Process 0 then holds the whole run's sums (what a checkpoint must hold) and the
        others zeros, so that the next sum before a densification is still the total.
        """
        state, n = self.strategy_state, self.num_gaussians
        # The keys the strategy declares, the same in every process (a checkpoint from before
        # a key existed lacks it in all of them; a process that saw nothing may lack it alone).
        declared = self.strategy.initialize_state(self.extent)
        sums = [k for k in RUNNING_SUMS if k in declared]
        maxes = [k for k in RUNNING_MAXES if k in declared]
        for k in (*sums, *maxes):
            if not isinstance(state.get(k), Tensor) or state[k].shape[0] != n:
                state[k] = self.model.splats["means"].new_zeros(n)
        if maxes:  # a maximum may be taken twice: every process keeps the whole run's
            self._group.max_(*[state[k] for k in maxes])
        if not sums:
            return
        self._group.sum_(*[state[k] for k in sums])
        if self.rank != 0:
            for k in sums:
                state[k].zero_()

    def _restore(self, state: TrainingState) -> None:
        # The checkpoint's pending knobs are the same in every process: queued here at once.
        self._restoring = True
        try:
            super()._restore(state)
        finally:
            self._restoring = False
        # The checkpoint's sums are the run's totals: process 0 carries them on alone.
        if self.rank != 0:
            for k in RUNNING_SUMS:
                if isinstance(self.strategy_state.get(k), Tensor):
                    self.strategy_state[k].zero_()


def _joined_group(device: torch.device) -> TorchProcessGroup:
    if not dist.is_initialized():
        raise RuntimeError(
            "DistributedTrainer needs the workers' process group: call init_process_group() "
            "first (gsnb train --nproc N does)"
        )
    return TorchProcessGroup(device if dist.get_backend() == "nccl" else torch.device("cpu"))


def _refuse_per_view_corrections(settings: dict[str, Any]) -> None:
    """Exposure, pose refinement and the test halves correct one view at a time, in the
    one-process step only: a data-parallel run (even of one process) refuses them.

    Example:
        >>> _refuse_per_view_corrections({"exposure": False, "pose_refine": False})
    """
    used = [k for k in ("exposure", "pose_refine", "train_test_exp") if settings.get(k)]
    if used:
        raise ValueError(
            f"{', '.join(used)} correct one view per step: train without --nproc / torchrun "
            "to use them"
        )
