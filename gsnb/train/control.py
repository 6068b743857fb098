"""Running a trainer: in this thread (``run``) or in a background thread (``start``).

:class:`TrainingControl` holds the run loop, pause/resume/stop and the automatic
checkpoint when training stops; :class:`~gsnb.train.trainer.Trainer` inherits it.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from gsnb.train.interrupts import InterruptGuard
from gsnb.utils.collector import frozen_heap

if TYPE_CHECKING:
    from gsnb.train.metrics import StepMetrics


class CheckpointWarning(UserWarning):
    """An automatic checkpoint could not be written; training went on."""


class TrainingControl:
    """Run, start, pause, resume, stop and wait: the loop around ``Trainer.step``.

    Every method may be called from any thread. The state the loop needs
    (``_lock``, ``_pause``, ``_stop``, ``_thread``, ``_status``, ``_guard``) is
    made by :meth:`_init_control`.

    Example:
        >>> trainer.start()                   # `trainer`: a Trainer; returns at once
        >>> trainer.pause()                   # returns once the step in flight is done
        >>> trainer.set(lr_means=1e-4)        # applied at the next step
        >>> trainer.resume()
        >>> trainer.stop()                    # waits for the thread (and checkpoints)
        >>> trainer.status, trainer.running
        ('stopped', False)
    """

    def _init_control(self) -> None:
        self._lock = threading.RLock()
        self._pause = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status = "idle"
        self._guard: InterruptGuard | None = None
        # Threads beside the loop (a viewer's renders, an evaluation) that wait for the
        # lock. A lock is not fair: a loop whose steps hold it through GIL-free waits (CUDA
        # syncs) takes it back before a woken waiter runs, so the loop lets them in.
        self._waiting = 0
        self._waiting_lock = threading.Lock()
        self._served = threading.Condition(self._waiting_lock)  # notified: no one waits

    @contextlib.contextmanager
    def _shared_access(self) -> Iterator[None]:
        """Hold the training lock for work beside the loop; served between two steps."""
        with self._waiting_lock:
            self._waiting += 1
        try:
            with self._lock:
                yield
        finally:
            with self._served:
                self._waiting -= 1
                if not self._waiting:
                    self._served.notify_all()

    def _let_waiting_in(self, timeout: float = 0.25) -> None:
        """Between two steps: hold back while other threads wait for the lock (woken as the
        last one leaves, not by polling: every poll would cost the loop a sleep's slack)."""
        with self._served:
            self._served.wait_for(lambda: not self._waiting or self._stop.is_set(), timeout)

    @contextlib.contextmanager
    def _guarded(self, guard: InterruptGuard) -> Iterator[InterruptGuard]:
        self._guard = guard
        try:
            yield guard
        finally:
            self._guard = None

    @property
    def status(self) -> str:
        """What training is doing now.

        ``running``, ``paused``, ``stopped`` (by stop or Ctrl-C), ``finished``
        (all ``config.steps`` done), ``failed`` (see ``error``), or ``idle``.
        """
        return self._status

    @property
    def running(self) -> bool:
        """Whether a background thread is training."""
        return self._thread is not None and self._thread.is_alive()

    def _target(self, steps: int | None) -> Callable[[], int]:
        if steps is None:
            return lambda: self.config.steps
        end = self._step + int(steps)
        return lambda: end

    def run(self, steps: int | None = None, progress: bool = False) -> StepMetrics | None:
        """Train in this thread for ``steps`` more steps (default: until ``config.steps``).

        Returns the last step's metrics. Steps are read back one behind where they allow
        (see :class:`~gsnb.train.trainer.Trainer`); every step is read once this returns.
        Ctrl-C stops at the next step boundary,
        writes ``out_dir/checkpoint.pt`` when ``config.out_dir`` is set, then
        raises ``KeyboardInterrupt``; :meth:`stop` from another thread ends it too.
        """
        if self.running:
            raise RuntimeError("training already runs in the background; call stop() first")
        self._stop.clear()
        end = self._target(steps)
        bar = _progress_bar(self._step, end()) if progress else None
        guard = InterruptGuard(graceful=True)
        last = None
        self._status = "running"
        try:
            with guard.installed(), self._guarded(guard), frozen_heap():
                while (
                    self._step < end() and not self._stop.is_set() and not self._interrupted(guard)
                ):
                    self._step_locked(gated=False, read_behind_until=end())
                    last = self._deliver_to(bar) or last
                self._flush()
                last = self._deliver_to(bar) or last
        except KeyboardInterrupt:
            self._flush(quietly=True)
            self._deliver_to(bar)
            self._finish("stopped")
            raise
        except BaseException:
            self._flush(quietly=True)  # the step in flight was whole: into the history
            self._status = "failed"
            raise
        finally:
            if bar is not None:
                if self.history:  # the numbers of the step it stopped at, however it stopped
                    _show(bar, self.history[-1])
                bar.close()
        if guard.requested:
            self._finish("stopped")
            raise KeyboardInterrupt(f"training interrupted after step {self._step}")
        self._finish(self._end_status())
        return last

    def _flush(self, quietly: bool = False) -> None:
        """Read back and count the step in flight, if any (``quietly``: an error reading it
        is dropped, for paths that already fail)."""
        try:
            with self._lock:
                self._settle()
        except Exception:
            if not quietly:
                raise

    def _deliver_to(self, bar: Any) -> StepMetrics | None:
        """:meth:`_deliver` the counted steps, each shown on the progress ``bar`` (or None)."""
        last = None
        while self._ready:
            last = self._deliver_one()
            if bar is not None:
                # The numbers only where this update redraws the bar (tqdm redraws at most
                # every mininterval seconds; run() shows the last step's as it closes it):
                # formatting them every step cost host time that early, host-bound steps
                # wait for. A disabled bar (TQDM_DISABLE) has no redraw clock.
                if not bar.disable and time.time() - bar.last_print_t >= bar.mininterval:
                    _show(bar, last)
                bar.update(1)
        return last

    def _interrupted(self, guard: InterruptGuard) -> bool:
        """Whether Ctrl-C asked :meth:`run` to stop after this step (several processes agree)."""
        return guard.requested

    def start(self, steps: int | None = None) -> None:
        """Train in a background thread (``steps`` more, default until ``config.steps``)."""
        if self.running:
            raise RuntimeError("training already runs in the background")
        self._stop.clear()
        self._pause.clear()
        self.error = None
        end = self._target(steps)
        self._status = "running"
        self._thread = threading.Thread(
            target=self._loop, args=(end,), name="gsnb-trainer", daemon=True
        )
        self._thread.start()

    def _loop(self, end: Callable[[], int]) -> None:
        with frozen_heap():  # no full collections over the objects that were there before
            self._loop_frozen(end)

    def _loop_frozen(self, end: Callable[[], int]) -> None:
        try:
            while not self._stop.is_set() and self._step < end():
                if self._pause.is_set():
                    self._flush()
                    self._deliver_to(None)
                    self._status = "paused"
                    time.sleep(0.02)
                    continue
                if self._step_locked(gated=True, read_behind_until=end()):
                    self._deliver_to(None)
                self._let_waiting_in()
            self._flush()
            self._deliver_to(None)
        except BaseException as err:
            self._flush(quietly=True)
            self.error = err
            self._status = "failed"
            warnings.warn(
                f"training stopped by an error at step {self._step}: {err!r}", stacklevel=1
            )
            return
        self._finish(self._end_status())

    def pause(self) -> None:
        """Pause the background loop; returns once the current step has finished (and has
        been read back: its metrics are in ``history``)."""
        self._pause.set()
        with self._lock:
            self._settle()
            if self.running:
                self._status = "paused"

    def resume(self) -> None:
        """Continue after :meth:`pause`."""
        self._pause.clear()
        if self.running:
            self._status = "running"

    def stop(self, timeout: float | None = None) -> None:
        """Stop training at the next step boundary and wait for the background thread to end.

        With ``config.out_dir`` set, a checkpoint is written there first.
        """
        self._stop.set()
        self._pause.clear()
        with self._served:  # a loop letting others in looks at the stop flag again
            self._served.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the background thread to end; re-raises its error, if any."""
        if self._thread is not None:
            self._thread.join(timeout)
        if self.error is not None:
            raise RuntimeError(f"training failed at step {self._step}") from self.error

    def _end_status(self) -> str:
        if self._stop.is_set():
            return "stopped"
        return "finished" if self._step >= self.config.steps else "idle"

    def _finish(self, status: str) -> None:
        self._status = status
        self._autosave()

    def _autosave(self) -> None:
        if self.config.out_dir is None:
            return
        try:
            self.save_checkpoint()
        except OSError as err:
            warnings.warn(str(err), CheckpointWarning, stacklevel=2)


def _show(bar: Any, metrics: StepMetrics) -> None:
    """Put a step's loss, PSNR and Gaussian count beside the progress ``bar``."""
    bar.set_postfix(
        loss=f"{metrics.loss:.4f}",
        psnr=f"{metrics.psnr:.2f}",
        gaussians=metrics.num_gaussians,
        refresh=False,
    )


def _progress_bar(done: int, total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="training", unit="step", dynamic_ncols=True)
