"""``%gs_train --nproc N``: data-parallel training in worker processes, steered from the notebook.

The notebook kernel cannot be one of the workers (each is a fresh process that the
elastic launcher spawns), so the magic runs ``gsnb train ... --nproc N`` in the
background (:class:`BackgroundTraining`) and steers it through a
:class:`torch.distributed.TCPStore` that the kernel serves on ``127.0.0.1`` (see
:mod:`gsnb.train.remote`). :class:`WorkerRun` stands for the run in the kernel with
a trainer's surface, and :class:`WorkersPanel` shows it as the single-process panel
does. What works with ``--nproc``:

- the knobs: a change (the panel's controls, or ``NAME.set(...)``) is checked here,
  sent to process 0, broadcast by it in the collective that ends a step, and applied
  by every worker before the same step;
- pause/resume (every worker waits after the same step) and stop (every worker stops
  after the same step and writes a checkpoint; the exit code then says ``stopped``);
- the progress bar, status, Gaussian count, process 0's peak GPU memory and the live
  curves (loss, train PSNR, Gaussians, test PSNR), from the step metrics process 0
  publishes every half second; Evaluate asks process 0 to evaluate on the test views;
- the 3D viewer (``--viewer``): served by process 0 around its trainer, and shown
  below the panel as :meth:`Viewer.show` does (its URL, with the viewer's secret, is
  read from ``OUT/viewer.json``, a file only its owner can read).

Not with ``--nproc``: the panel's live render beside a photo (the model lives in the
workers; the viewer shows it live), Start after the run has ended (continue it with
``--resume OUT``), and the trainer object itself (after the run,
``Trainer.resume_from(OUT)`` loads it into the kernel for export and more).
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gsnb.notebook.panel import TrainingPanel
from gsnb.train import EvalResult, StepMetrics
from gsnb.train.knobs import Knob, check_value, describe_knobs
from gsnb.train.remote import RunControl

MAX_LINES = 40
"""Lines of output the widget keeps (the progress bar's line is always the newest)."""


class BackgroundTraining:
    """A ``gsnb train`` command running in the background, with a widget of its output.

    Args:
        command: the command line (its first items ``python -m gsnb.cli train``).
        out: the run folder.
        env: variables added to the workers' environment.

    Example (in a notebook)::

        run = BackgroundTraining([sys.executable, "-m", "gsnb.cli", "train", "data/fox",
                                  "--out", "runs/fox", "--nproc", "2"], Path("runs/fox"))
        run            # the widget: process 0's progress, then the summary
        run.wait()     # the exit code
    """

    def __init__(self, command: list[str], out: Path, env: dict[str, str] | None = None) -> None:
        import ipywidgets as widgets

        self.command = list(command)
        self.out = Path(out)
        self.lines: list[str] = []
        self.widget = widgets.HTML(value=self._html("starting the workers..."))
        env = os.environ | {"PYTHONUNBUFFERED": "1"} | (env or {})
        # A session of its own: the kernel's interrupt does not reach the workers.
        self.process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name="gsnb-workers", daemon=True)
        self._reader.start()

    @property
    def running(self) -> bool:
        """Whether the command still runs."""
        return self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit code (0: finished), or None while it runs."""
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end of the run; its exit code."""
        code = self.process.wait(timeout)
        self._reader.join(5.0)
        return code

    def stop(self, timeout: float = 60.0) -> int | None:
        """Stop every worker after the same step, with a checkpoint, as Ctrl-C in a terminal.

        Past ``timeout`` seconds the launcher is told to stop them at once (the last
        periodic checkpoint then remains). Returns the exit code (130: stopped).
        """
        if not self.running:
            return self.returncode
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGINT)  # the launcher's session: all workers
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGINT)  # twice: at once
            return self.wait(timeout)

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        pending = b""
        while chunk := stream.read1(4096):  # type: ignore[attr-defined]
            pending += chunk
            *done, pending = pending.replace(b"\r\n", b"\n").split(b"\n")
            for line in done:
                self._add(line.decode(errors="replace").split("\r")[-1], newline=True)
            if b"\r" in pending:  # a progress bar redrawing its line
                *_, pending = pending.split(b"\r")
                self._add(pending.decode(errors="replace"), newline=False)
        if pending:
            self._add(pending.decode(errors="replace"), newline=True)
        code = self.process.wait()
        self._add(f"[exit code {code}]", newline=True)

    def _add(self, text: str, newline: bool) -> None:
        if "?websocket=" in text:  # the viewer's URL carries its secret: not in the output
            return
        if self.lines and self.lines[-1].startswith("\r"):
            self.lines.pop()  # the previous progress line, now redrawn
        self.lines.append(text if newline else "\r" + text)
        del self.lines[:-MAX_LINES]
        self.widget.value = self._html("\n".join(line.lstrip("\r") for line in self.lines))

    def _html(self, text: str) -> str:
        return f"<pre style='font-size: 12px; margin: 0'>{html.escape(text)}</pre>"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        return bundle

    def __repr__(self) -> str:
        state = "running" if self.running else f"exit code {self.returncode}"
        return f"BackgroundTraining({self.out}, {state})"


# How often the kernel reads process 0's status and metrics from the store.
READ_SECONDS = 0.25
EXIT_STATUS = {0: "finished", 130: "stopped"}


class WorkerRun:
    """A ``gsnb train --nproc N`` run in worker processes, steered like a :class:`Trainer`.

    It offers the trainer methods that steer a run (``set``, ``pause``, ``resume``,
    ``stop``, ``wait``, ``knobs``, ``on_step``, ``on_eval``) and its progress
    (``status``, ``step_count``, ``num_gaussians``, ``history``, ``evals``), read
    from what process 0 publishes (:meth:`poll`; the panel calls it). A knob change
    applies in every worker before the same step.

    Args:
        background: the running command, started with ``GSNB_CONTROL`` naming ``control``.
        control: the kernel's side of the store (:class:`~gsnb.train.remote.RunControl`).
        config, strategy: the run's settings as given (the workers' values replace them
            as they arrive).

    Example (in a notebook)::

        %gs_train data/fox --out runs/fox --nproc 2 --batch-size 2
        trainer.set(lr_means=1e-4)   # every worker, before the same step
        trainer.pause(); trainer.resume(); trainer.stop()
    """

    def __init__(
        self, background: BackgroundTraining, control: RunControl, config: Any, strategy: Any
    ) -> None:
        self.background = background
        self.control = control
        self.config = config
        self.strategy = strategy
        self.out = background.out
        self.history: list[StepMetrics] = []
        self.evals: list[EvalResult] = []
        self.device = torch.device("cpu" if config.device == "cpu" else "cuda")
        self._step_callbacks: list[Callable[[StepMetrics], Any]] = []
        self._eval_callbacks: list[Callable[[EvalResult], Any]] = []
        self._lock = threading.Lock()
        self._next_read = 0.0
        self._undelivered: list[StepMetrics | EvalResult] = []  # read, not yet called back
        self._delivering = False

    # ---------------------------------------------------------- progress
    def poll(self, force: bool = False) -> None:
        """Read process 0's status and new metrics (at most every :data:`READ_SECONDS`)."""
        now = time.monotonic()
        with self._lock:
            if not force and now < self._next_read:
                return
            self._next_read = now + READ_SECONDS
            try:
                status, steps, evals = self.control.read()
            except (RuntimeError, ValueError):  # no answer yet; the next poll tries again
                return
            self._take_knob_values(status.get("knobs", {}))
            new_steps = [StepMetrics(**d) for d in steps]
            new_evals = [EvalResult(step=d["step"], psnr=d["psnr"], ssim=d["ssim"]) for d in evals]
            self.history += new_steps  # in the order read, whichever thread polls
            self.evals += new_evals
            self._undelivered += new_steps + new_evals
        self._deliver()

    def _deliver(self) -> None:
        """Call back what was read, in the order read: one thread at a time delivers (another
        poll meanwhile leaves its part to it), and no lock is held during a callback."""
        with self._lock:
            if self._delivering:
                return
            self._delivering = True
        try:
            while True:
                with self._lock:
                    batch, self._undelivered = self._undelivered, []
                    if not batch:
                        self._delivering = False  # in the same hold: nothing is left behind
                        return
                for item in batch:
                    if isinstance(item, StepMetrics):
                        for on_step in list(self._step_callbacks):
                            on_step(item)
                    else:
                        for on_eval in list(self._eval_callbacks):
                            on_eval(item)
        except BaseException:
            with self._lock:
                self._delivering = False
            raise

    def _take_knob_values(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            owner = self.config if hasattr(self.config, name) else self.strategy
            if hasattr(owner, name):
                object.__setattr__(owner, name, value)

    @property
    def status(self) -> str:
        """``starting``, then process 0's (``running``, ``paused``), then ``finished``,
        ``stopped`` or ``failed`` by the command's exit code."""
        code = self.background.returncode
        if code is not None:
            return EXIT_STATUS.get(code, "failed")
        return str(self.control.status.get("status") or "starting")

    @property
    def running(self) -> bool:
        """Whether the workers still run."""
        return self.background.running

    @property
    def error(self) -> BaseException | None:
        """The failure's last lines of output, once the run failed."""
        if self.status != "failed":
            return None
        tail = [line for line in self.background.lines if line.strip()][-3:]
        return RuntimeError("\n".join(tail) or f"exit code {self.background.returncode}")

    @property
    def step_count(self) -> int:
        """Steps process 0 has completed (as last published)."""
        return int(self.control.status.get("step", 0))

    @property
    def num_gaussians(self) -> int:
        """Gaussians in process 0's model (as last published)."""
        return int(self.control.status.get("num_gaussians", 0))

    # ------------------------------------------------------------- knobs
    def knobs(self) -> list[Knob]:
        """The live knobs, with the workers' latest values."""
        return describe_knobs(self.config, "train") + describe_knobs(self.strategy, "strategy")

    def set(self, **knobs: Any) -> None:
        """Send knob changes to every worker; they apply before the same step in all.

        Raises ``ValueError`` at once, as :meth:`Trainer.set` does, for an unknown knob
        or a bad value; process 0 checks again against its own values.
        """
        table = {k.name: k for k in self.knobs()}
        unknown = sorted(set(knobs) - set(table))
        if unknown:
            raise ValueError(f"unknown knob(s) {unknown}; the valid knobs are: {', '.join(table)}")
        checked = {name: check_value(table[name], value) for name, value in knobs.items()}
        merged = self.pending_knobs | checked
        in_config = {k: v for k, v in merged.items() if hasattr(self.config, k)}
        in_strategy = {k: v for k, v in merged.items() if k not in in_config}
        dataclasses.replace(self.config, **in_config)  # knobs that contradict each other
        dataclasses.replace(self.strategy, **in_strategy)
        if not self.running:
            raise ValueError("the workers have ended; continue the run with --resume OUT")
        self.control.set_knobs(checked)

    @property
    def pending_knobs(self) -> dict[str, Any]:
        """Changes on their way: sent, or taken by process 0 for its next step."""
        return dict(self.control.status.get("pending") or {}) | self.control.pending

    @property
    def knob_error(self) -> str | None:
        """Process 0's reason for refusing the last change, if it did."""
        return self.control.status.get("error")

    # --------------------------------------------------------- steering
    def start(self, steps: int | None = None) -> None:
        """The workers start at once; a run that has ended continues with a new command."""
        if not self.running:
            raise ValueError(
                f"the workers' run has ended ({self.status}); continue it with "
                f"%gs_train DATA --out {self.out} --nproc N --resume {self.out}"
            )

    def pause(self) -> None:
        """Pause every worker after the same step."""
        self.control.pause(True)

    def resume(self) -> None:
        """Go on after :meth:`pause`."""
        self.control.pause(False)

    def evaluate(self) -> None:
        """Ask process 0 to evaluate on the test views (the result joins :attr:`evals`)."""
        self.control.evaluate()

    def stop(self, timeout: float = 60.0) -> int | None:
        """Stop every worker after the same step, with a checkpoint; the exit code (130)."""
        return self.background.stop(timeout)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end of the run; its exit code."""
        code = self.background.wait(timeout)
        self.poll(force=True)
        return code

    def on_step(self, callback: Callable[[StepMetrics], Any]) -> Callable[[], None]:
        """Call ``callback(metrics)`` for every step process 0 published; returns the remover."""
        self._step_callbacks.append(callback)
        return lambda: self._step_callbacks.remove(callback)

    def on_eval(self, callback: Callable[[EvalResult], Any]) -> Callable[[], None]:
        """Call ``callback(result)`` for every evaluation; returns the remover."""
        self._eval_callbacks.append(callback)
        return lambda: self._eval_callbacks.remove(callback)

    def __repr__(self) -> str:
        return f"WorkerRun({self.out}, {self.status}, step {self.step_count}/{self.config.steps})"


LIVE_NOTE = (
    "<small>The live render needs the model in this kernel; with --nproc it lives in the "
    "workers. Add <code>--viewer</code> to watch process 0's model live, or load the result "
    "after the run with <code>Trainer.resume_from(OUT)</code>.</small>"
)


class WorkersPanel(TrainingPanel):
    """The training panel for a :class:`WorkerRun`: the same buttons, curves and knobs.

    The live render is replaced by a note (and, with a viewer, by the viewer once
    process 0 serves it: :meth:`show_viewer_when_ready`); the workers' text output
    is shown below.

    Example (in a notebook)::

        panel = WorkersPanel(run)    # `run`: a WorkerRun; %gs_train --nproc N makes both
        panel
    """

    def __init__(self, run: WorkerRun, **kwargs: Any) -> None:
        import ipywidgets as w

        self.viewer_area = w.Output()
        super().__init__(run, **kwargs)  # type: ignore[arg-type]
        self.widget.children = (*self.widget.children, self.viewer_area, run.background.widget)

    def _live_section(self, w: Any, camera: int | str) -> Any:
        self._views = []
        return w.HTML(LIVE_NOTE)

    def _camera_changed(self) -> None:
        return None

    def _render_live(self) -> None:
        self._rendered_step = self.trainer.step_count

    def _settings_text(self) -> str:
        run = self.trainer
        assert isinstance(run, WorkerRun)
        return (
            f"<small>{html.escape(' '.join(run.background.command[3:]))}"
            f" (fixed for this run: set them with <code>%gs_train</code> options)</small>"
        )

    def _stop(self) -> None:
        run = self.trainer
        assert isinstance(run, WorkerRun)
        # the panel must not wait for the workers: they say when they have stopped
        threading.Thread(target=run.stop, name="gsnb-stop", daemon=True).start()

    def _evaluate(self) -> None:
        self.trainer.evaluate()
        self.message.value = "evaluation asked of process 0: its test PSNR joins the curves"

    def _update_memory(self, peak: int | None) -> None:
        self.memory.layout.visibility = "hidden"
        if self.trainer.device.type != "cuda":
            self.memory_label.value = "training on the CPU: no GPU memory to show"
        elif peak:
            self.memory_label.value = f"process 0's GPU: peak allocated {peak / 2**30:.2f} GiB"

    def _redraw_due(self, force: bool) -> None:
        run = self.trainer
        assert isinstance(run, WorkerRun)
        run.poll(force=force)
        refused = run.knob_error
        if refused:
            self.knobs.message.value = (
                f"<span style='color:#b00'>process 0 refused: {html.escape(refused)}</span>"
            )
        super()._redraw_due(force)

    def show_viewer_when_ready(self, timeout: float = 600.0) -> None:
        """Show process 0's viewer below the panel once its URL file appears (a thread)."""
        threading.Thread(
            target=self._wait_for_viewer, args=(timeout,), name="gsnb-viewer-wait", daemon=True
        ).start()

    def _wait_for_viewer(self, timeout: float) -> None:
        from gsnb.viewer.jupyter import viewer_display
        from gsnb.viewer.runs import read_viewer_file

        run = self.trainer
        assert isinstance(run, WorkerRun)
        deadline = time.monotonic() + timeout
        self.viewer_area.append_stdout("waiting for process 0's viewer...\n")
        while (info := read_viewer_file(run.out)) is None:
            if not run.running or time.monotonic() > deadline:
                self.viewer_area.outputs = ()
                self.viewer_area.append_stdout("process 0 started no viewer (see its output)\n")
                return
            time.sleep(0.2)
        self.viewer = info
        shown, note = viewer_display(info["url"], info["host"], info["port"], info["secret"])
        self.viewer_area.outputs = ()
        self.viewer_area.append_display_data(shown)
        if note is not None:
            self.viewer_area.append_stdout(note + "\n")


def train_command(args: Any) -> list[str]:
    """The ``gsnb train`` command of ``%gs_train``'s parsed options (the notebook's own left out).

    Example:
        >>> from gsnb.notebook.train_magics import TRAIN_PARSER
        >>> args = TRAIN_PARSER.parse_args(["data/fox", "--out", "r", "--nproc", "2", "--steps", "9"
        ...                                 ])
        >>> train_command(args)[3:]
        ['train', 'data/fox', '--out', 'r', '--strategy', 'default', '--nproc', '2', '--steps', '9']
    """
    from gsnb.train.options import config_argv, strategy_argv

    command = [sys.executable, "-m", "gsnb.cli", "train", str(args.data), "--out", str(args.out)]
    if args.resume:
        command += ["--resume", str(args.resume)]
    if args.overwrite:
        command.append("--overwrite")
    command += [*strategy_argv(args), "--nproc", str(args.nproc)]
    if args.viewer:
        command += ["--viewer", "--viewer-port", str(args.port)]
    return command + config_argv(args)


def forget_stale_viewer(out: Path) -> None:
    """Remove ``out/viewer.json`` left by a run whose process has gone (killed), so that the
    next run's viewer is not mistaken for it."""
    from gsnb.viewer.runs import VIEWER_FILE, read_viewer_file

    info = read_viewer_file(out)
    if info is None:
        return
    pid = info.get("pid")
    if isinstance(pid, int) and pid > 0:
        try:
            os.kill(pid, 0)  # no signal: whether it lives
            return
        except PermissionError:  # alive, another user's
            return
        except ProcessLookupError:
            pass
    with contextlib.suppress(OSError):
        (out / VIEWER_FILE).unlink()
