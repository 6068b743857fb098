"""Starting the workers of a data-parallel run on this machine: torch's elastic launcher.

``gsnb train DATA --nproc N`` checks that the workers can run (:func:`check_workers`),
starts them (:func:`launch`), and when one fails says which, how, and which checkpoint
remains (:func:`failure_text`, :func:`last_checkpoint_text`).

Example:
    >>> check_workers(1, "cpu", 2)
"""

from __future__ import annotations

import logging
import signal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gsnb.train import batch
from gsnb.train import checkpoint as ckpt


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


MONITOR_SECONDS = 0.5
"""How often the launcher looks at its workers. It reports the first failure it finds in rank
order, so a worker that loses a peer waits :data:`LINGER_SECONDS` before it exits: the
launcher then sees the worker that died, not the one that noticed."""

LINGER_SECONDS = 3 * MONITOR_SECONDS


def launch(
    entry: Callable[..., int],
    args: tuple[Any, ...],
    nproc: int,
    monitor_interval: float = MONITOR_SECONDS,
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


def root_failure(failures: dict[int, Any]) -> tuple[int, Any]:
    """The worker failure (``rank -> failure`` with ``exitcode``, ``timestamp``) that most
    likely caused the others: a worker killed by a signal first, then one that exited with
    an error, then one that aborted (the others abort when a collective loses a peer); the
    earliest, then the lowest rank, among equals. The launcher notices failures at its
    monitor ticks, so their times alone often tie.

    Example:
        >>> from types import SimpleNamespace as F
        >>> root_failure({0: F(exitcode=-6, timestamp=5), 1: F(exitcode=-9, timestamp=5)})[0]
        1
    """

    def order(item: tuple[int, Any]) -> tuple[int, float, int]:
        rank, failure = item
        code = failure.exitcode
        if code is not None and code < 0 and code != -signal.SIGABRT:
            kind = 0
        elif code is None or code >= 0:
            kind = 1
        else:
            kind = 2
        return kind, float(failure.timestamp or 0), rank

    return min(failures.items(), key=order)


def failure_text(err: Any, nproc: int) -> str:
    """One line saying which worker failed first, and how (exit code or signal)."""
    rank, failure = root_failure(err.failures) if err.failures else err.get_first_failure()
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
