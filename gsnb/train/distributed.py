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
--nproc N`` calls :func:`launch`, and ``torchrun --nproc-per-node N -m gsnb.cli train
DATA ...`` runs the same code (it reads ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``).
NCCL connects the processes on CUDA, gloo on the CPU.

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

Example:
    >>> import os
    >>> world_from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    WorldEnv(rank=1, world_size=2, local_rank=1)
    >>> world_from_env({}) is None
    True
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from gsnb.train import batch
from gsnb.train import checkpoint as ckpt
from gsnb.train.checkpoint import TrainingState
from gsnb.train.knobs import check_value
from gsnb.train.remote import ControlLink
from gsnb.train.trainer import Trainer

PAUSE_SECONDS = 0.1
"""How often paused processes agree whether to go on."""
RUNNING_SUMS = ("grad2d", "count")
"""Strategy-state tensors that are per-process sums of what each process saw (per Gaussian)."""


@dataclasses.dataclass(frozen=True)
class WorldEnv:
    """This process's place among the workers, as the launcher's environment states it."""

    rank: int
    world_size: int
    local_rank: int


def world_from_env(environ: Mapping[str, str] | None = None) -> WorldEnv | None:
    """The ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` the launcher (or ``torchrun``) set; None
    when this process was not started by one. See the module example."""
    env = os.environ if environ is None else environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    return WorldEnv(rank, world, int(env.get("LOCAL_RANK", rank)))


class PeerLost(BaseException):
    """A collective failed: another worker died or left. This worker must stop too.

    A ``BaseException``, like ``KeyboardInterrupt``: no step or densification handler may
    take it for a recoverable error (and roll back to go on alone); the launcher reports
    which worker failed first.
    """


def _collective(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except (dist.DistError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PeerLost(f"the connection to another worker broke ({first})") from err


class TorchProcessGroup:
    """The default :mod:`torch.distributed` process group as a :class:`batch.ProcessGroup`.

    Args:
        device: where collectives run: a CUDA device for NCCL, the CPU for gloo.

    Example (two processes started by a launcher):
        >>> group = init_process_group("cpu")  # doctest: +SKIP
        >>> group.rank, group.world_size  # doctest: +SKIP
        (0, 2)
    """

    def __init__(self, device: torch.device) -> None:
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.device = torch.device(device)

    def average(self, params: list[Tensor], terms: Tensor) -> Tensor:
        """Average every gradient of ``params`` and ``terms [K]`` in one all_reduce.

        The parameters without a gradient are the same in every process (the same
        graph), so the flattened buffers line up. Returns the averaged ``terms``.
        """
        grads = [p.grad for p in params if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads] + [terms.to(grads[0].dtype)])
        _collective(lambda: dist.all_reduce(flat))
        flat.div_(self.world_size)
        start = 0
        for g in grads:
            g.copy_(flat[start : start + g.numel()].view_as(g))
            start += g.numel()
        return flat[start:].to(terms.dtype)

    def sum_(self, *tensors: Tensor) -> None:
        """Sum ``tensors`` over the processes, in place, in one all_reduce."""
        flat = torch.cat([t.reshape(-1) for t in tensors])
        _collective(lambda: dist.all_reduce(flat))
        start = 0
        for t in tensors:
            t.copy_(flat[start : start + t.numel()].view_as(t))
            start += t.numel()

    def any(self, *flags: bool) -> list[bool]:
        """Each flag, true when it is true in any process."""
        values = torch.tensor([float(f) for f in flags], device=self.device)
        _collective(lambda: dist.all_reduce(values))
        return [v > 0 for v in values.tolist()]

    def from_rank0(self, value: Any) -> Any:
        """Process 0's ``value`` (any picklable object), in every process; a barrier too."""
        box = [value]
        _collective(lambda: dist.broadcast_object_list(box, src=0))
        return box[0]


def init_process_group(device: str, timeout_s: float = 1800.0) -> TorchProcessGroup:
    """Join the launcher's workers: NCCL on this process's GPU, or gloo on the CPU.

    ``device`` is the run's ``TrainConfig.device`` (``"auto"``, ``"cuda"``, ``"cpu"``).
    With CUDA, ``LOCAL_RANK`` picks the GPU, which becomes the current device, so that
    the run's ``"cuda"`` tensors land on it.
    """
    world = world_from_env()
    if world is None:
        raise RuntimeError(
            "no RANK/WORLD_SIZE in the environment: start the workers with "
            "`gsnb train --nproc N` or torchrun"
        )
    on_cuda = device != "cpu" and torch.cuda.is_available()
    if on_cuda:
        if world.local_rank >= torch.cuda.device_count():
            raise RuntimeError(
                f"worker {world.local_rank} of this machine has no GPU "
                f"({torch.cuda.device_count()} visible); start at most that many processes"
            )
        torch.cuda.set_device(world.local_rank)
        comm = torch.device("cuda", world.local_rank)
    else:
        comm = torch.device("cpu")
        # Workers on one machine share its cores rather than each taking them all.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, world.world_size)))
    if not dist.is_initialized():
        dist.init_process_group(
            "nccl" if on_cuda else "gloo",
            timeout=timedelta(seconds=timeout_s),
            **({"device_id": comm} if on_cuda else {}),
        )
    return TorchProcessGroup(comm)


def destroy_process_group() -> None:
    """Leave the workers (when joined)."""
    if dist.is_initialized():
        dist.destroy_process_group()


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
        _collective(lambda: dist.all_gather_object(peaks, peak))
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
        """Sum the strategy's running sums over the processes into process 0's state.

        Process 0 then holds the whole run's sums (what a checkpoint must hold) and the
        others zeros, so that the next sum before a densification is still the total.
        """
        state, n = self.strategy_state, self.num_gaussians
        keys = [k for k in RUNNING_SUMS if k in state]
        if not keys:
            return
        for k in keys:
            if not isinstance(state[k], Tensor) or state[k].shape[0] != n:
                state[k] = self.model.splats["means"].new_zeros(n)
        self._group.sum_(*[state[k] for k in keys])
        if self.rank != 0:
            for k in keys:
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


# ------------------------------------------------------------------ launching
def check_workers(nproc: int, device: str, batch_size: int | None) -> None:
    """Refuse, before starting anything, ``nproc`` workers that cannot run.

    ``batch_size`` None (a resumed run) takes the checkpoint's, checked by the workers.

    Example:
        >>> check_workers(2, "cpu", 3)
        Traceback (most recent call last):
        ...
        ValueError: batch_size 3 does not split evenly over 2 processes; use a multiple of 2
    """
    if batch_size is not None:
        batch.check_batch(batch_size, nproc)
    gpus = torch.cuda.device_count() if device != "cpu" else 0
    if (device == "cuda" and gpus < nproc) or (device == "auto" and 0 < gpus < nproc):
        raise ValueError(
            f"--nproc {nproc} needs {nproc} GPUs, {gpus} visible; use --nproc {max(gpus, 1)} "
            "(or --device cpu for gloo on the CPU)"
        )


class WorkerFailed(RuntimeError):
    """A worker process died or failed; the launcher stopped the others."""


def launch(
    entry: Callable[..., int],
    args: tuple[Any, ...],
    nproc: int,
    monitor_interval: float = 0.5,
) -> int:
    """Run ``entry(*args)`` in ``nproc`` worker processes on this machine; the worst exit code.

    Uses torch's elastic launcher (the engine of ``torchrun --standalone``): a local
    rendezvous on a free port, no restarts. When a worker dies or fails, the launcher
    stops the others and this raises :class:`WorkerFailed` with a one-line reason.
    ``entry`` must be importable (a module-level function): workers are spawned.

    Example:
        >>> launch(os.getpid.__call__, (), 1)  # doctest: +SKIP
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if nproc < 1:
        raise ValueError(f"--nproc must be at least 1, got {nproc}")
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=0,
        monitor_interval=monitor_interval,
        start_method="spawn",
        # Ctrl-C reaches the workers too, which stop after the same step and save; the
        # agent would kill them at once.
        signals_to_handle="SIGTERM,SIGHUP,SIGQUIT",
    )
    # The agent's log lines would bury the one-line reason.
    loggers = [logging.getLogger(n) for n in ("torch.distributed.elastic", "torch.multiprocessing")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    presses = []

    def on_interrupt(signum: int, frame: Any) -> None:
        presses.append(signum)
        if len(presses) > 1:  # a second Ctrl-C: stop the workers now
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        results = elastic_launch(config, entry)(*args)
    except KeyboardInterrupt as err:
        raise WorkerFailed("interrupted twice; the workers were stopped at once") from err
    except ChildFailedError as err:
        raise WorkerFailed(failure_text(err, nproc)) from err
    except SignalException as err:  # the launcher itself was told to stop (Ctrl-C, kill)
        name = signal.Signals(err.sigval).name
        raise WorkerFailed(f"stopped by {name}; the workers were stopped with it") from err
    finally:
        signal.signal(signal.SIGINT, previous)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    return max(int(code or 0) for code in results.values())


def failure_text(err: Any, nproc: int) -> str:
    """One line saying which worker failed first, and how (exit code or signal)."""
    rank, failure = err.get_first_failure()
    code = failure.exitcode
    if code is not None and code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    return f"worker {rank} of {nproc} (pid {failure.pid}) {how}; the other workers were stopped"


def last_checkpoint_text(out: Path) -> str | None:
    """``"checkpoint OUT/checkpoint.pt holds step N"`` for a run folder, or None without one.

    Example:
        >>> import tempfile
        >>> last_checkpoint_text(Path(tempfile.mkdtemp())) is None
        True
    """
    kept = ckpt.history(out)
    newest = out / ckpt.NEWEST_NAME
    if not kept or not newest.is_file():
        return None
    step = int(kept[-1].stem.split("_")[-1])
    return f"checkpoint {newest} holds step {step}"


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
