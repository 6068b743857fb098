"""``%gs_train --nproc N``: data-parallel training in worker processes, its output shown live.

The notebook kernel cannot be one of the workers (each is a fresh process that the
elastic launcher spawns), so the magic runs ``gsnb train ... --nproc N`` in the
background, as a terminal would, and shows process 0's progress and summary in a
widget. The run is steered by its options, stopped with :meth:`stop` (every worker
after the same step, with a checkpoint), and its results are read from the output
folder (``checkpoint.pt``, ``summary.json``, ``metrics.jsonl``).

Missing with ``--nproc``, since each drives a :class:`Trainer` object in the kernel:
the knobs (a change must reach every worker at the same step: process 0 would have to
broadcast its pending knobs in the collective that ends each step, and the kernel send
them to process 0), pause/resume, the live curves and render of the panel (process 0
would have to publish its metrics and a render, e.g. through a local socket), and the
3D viewer. Until then: train with ``--nproc``, then load the checkpoint in the kernel
(``Trainer.resume_from(OUT)``) for the panel, viewer and export.
"""

from __future__ import annotations

import contextlib
import html
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

MAX_LINES = 40
"""Lines of output the widget keeps (the progress bar's line is always the newest)."""


class BackgroundTraining:
    """A ``gsnb train`` command running in the background, with a widget of its output.

    Args:
        command: the command line (its first items ``python -m gsnb.cli train``).
        out: the run folder.

    Example (in a notebook)::

        run = BackgroundTraining([sys.executable, "-m", "gsnb.cli", "train", "data/fox",
                                  "--out", "runs/fox", "--nproc", "2"], Path("runs/fox"))
        run            # the widget: process 0's progress, then the summary
        run.wait()     # the exit code
    """

    def __init__(self, command: list[str], out: Path) -> None:
        import ipywidgets as widgets

        self.command = list(command)
        self.out = Path(out)
        self.lines: list[str] = []
        self.widget = widgets.HTML(value=self._html("starting the workers..."))
        env = os.environ | {"PYTHONUNBUFFERED": "1"}
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


def train_command(args: Any) -> list[str]:
    """The ``gsnb train`` command of ``%gs_train``'s parsed options (the notebook's own left out).

    Example:
        >>> from gsnb.notebook.train_magics import TRAIN_PARSER
        >>> args = TRAIN_PARSER.parse_args(["data/fox", "--out", "r", "--nproc", "2", "--steps", "9"
        ...                                 ])
        >>> train_command(args)[3:]
        ['train', 'data/fox', '--out', 'r', '--strategy', 'default', '--nproc', '2', '--steps', '9']
    """
    from gsnb.train.options import config_argv

    command = [sys.executable, "-m", "gsnb.cli", "train", str(args.data), "--out", str(args.out)]
    if args.resume:
        command += ["--resume", str(args.resume)]
    if args.overwrite:
        command.append("--overwrite")
    command += ["--strategy", args.strategy, "--nproc", str(args.nproc)]
    return command + config_argv(args)
