"""Steering a data-parallel run from outside it, through a :class:`torch.distributed.TCPStore`.

A notebook that runs ``gsnb train --nproc N`` in the background holds a store
(:func:`serve_store`) and names it to the workers in the ``GSNB_CONTROL``
environment variable (``127.0.0.1:PORT/KEY``: the store listens on the loopback
only, and every key lies under the secret ``KEY``). Two sides speak through it:

- the controller (:class:`RunControl`, in the notebook) writes ``control``: knob
  changes, each with a sequence number, the wanted pause state and evaluation
  requests; it reads ``status`` (process 0's step, state, knob values, the last
  change it took) and the metric chunks ``m/1``, ``m/2``, ... (``m`` counts them);
- process 0 (:class:`ControlLink`) reads ``control`` at step boundaries, at most
  every :data:`POLL_SECONDS` (a local round trip, not one per step), and publishes
  its status and the metrics of the steps since the last chunk every
  :data:`PUBLISH_SECONDS`. It hands the changes to the training loop, which
  broadcasts them to every process inside the collective that ends a step
  (:class:`gsnb.train.distributed.DistributedTrainer`), so that every process
  applies them before the same step.

Example:
    >>> control = RunControl(serve_store())
    >>> link = ControlLink.from_env({CONTROL_ENV: control.address})
    >>> control.set_knobs({"lr_means": 1e-4})
    1
    >>> link.poll(force=True)["changes"]
    [[1, {'lr_means': 0.0001}]]
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
import warnings
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

if TYPE_CHECKING:
    from gsnb.train.evaluation import EvalResult
    from gsnb.train.metrics import StepMetrics

CONTROL_ENV = "GSNB_CONTROL"
"""Environment variable naming the store: ``HOST:PORT/KEY``."""
POLL_SECONDS = 0.25
"""How often process 0 reads the controller's requests while training."""
PUBLISH_SECONDS = 0.5
"""How often process 0 publishes its status and metrics while training."""
STORE_TIMEOUT = timedelta(seconds=10)


class StoreServer:
    """A :class:`torch.distributed.TCPStore` listening on ``127.0.0.1`` only, with a fresh key.

    (A store's own server listens on every interface; here it takes a socket
    bound to the loopback.) :attr:`address` is the ``GSNB_CONTROL`` value.
    """

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self.port = self._socket.getsockname()[1]
        self.key = secrets.token_hex(16)
        self.store = dist.TCPStore(
            "127.0.0.1",
            self.port,
            is_master=True,
            wait_for_workers=False,
            timeout=STORE_TIMEOUT,
            master_listen_fd=self._socket.fileno(),
            use_libuv=True,
        )
        self.keyed = dist.PrefixStore(self.key, self.store)

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT/KEY``."""
        return f"127.0.0.1:{self.port}/{self.key}"


def serve_store() -> StoreServer:
    """A new loopback store for one run (see :class:`StoreServer`)."""
    return StoreServer()


def connect(address: str) -> Any:
    """A client of the store at ``HOST:PORT/KEY``, its keys under ``KEY``.

    Raises ``ValueError`` for a malformed address, ``RuntimeError`` when nothing answers.
    """
    hostport, _, key = address.partition("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit() or not key:
        raise ValueError(f"{CONTROL_ENV} must read HOST:PORT/KEY, got {address!r}")
    store = dist.TCPStore(host, int(port), is_master=False, timeout=STORE_TIMEOUT)
    return dist.PrefixStore(key, store)


def _get_json(store: Any, key: str) -> Any:
    if not store.check([key]):
        return None
    return json.loads(store.get(key))


class RunControl:
    """The controller's side: send knob changes and pause/resume, read process 0's progress.

    Args:
        server: the run's :class:`StoreServer` (pass :attr:`address` to the workers).

    Example:
        >>> control = RunControl(serve_store())
        >>> _ = control.set_knobs({"ssim_lambda": 0.3}); control.pending
        {'ssim_lambda': 0.3}
    """

    def __init__(self, server: StoreServer) -> None:
        self.server = server
        self.address = server.address
        self._store = server.keyed
        self._seq = 0
        self._changes: list[tuple[int, dict[str, Any]]] = []
        self._pause = False
        self._evaluate = 0
        self._chunks_read = 0
        self.status: dict[str, Any] = {}
        self._lock = threading.RLock()  # a widget's thread sends while the panel's reads
        self._write()

    def _write(self) -> None:
        with self._lock:
            message = {
                "seq": self._seq,
                "changes": [[seq, knobs] for seq, knobs in self._changes],
                "pause": self._pause,
                "evaluate": self._evaluate,
            }
            self._store.set("control", json.dumps(message))

    def set_knobs(self, knobs: Mapping[str, Any]) -> int:
        """Queue knob changes for every process; returns their sequence number."""
        with self._lock:
            self._seq += 1
            self._changes.append((self._seq, dict(knobs)))
            self._write()
            return self._seq

    def pause(self, paused: bool = True) -> None:
        """Ask every process to pause (or, ``paused=False``, to go on) at the same step."""
        with self._lock:
            self._pause = bool(paused)
            self._write()

    def evaluate(self) -> None:
        """Ask process 0 to evaluate on the test views at its next step boundary."""
        with self._lock:
            self._evaluate += 1
            self._write()

    @property
    def paused_wanted(self) -> bool:
        """The pause state asked for."""
        return self._pause

    @property
    def pending(self) -> dict[str, Any]:
        """Knob changes sent but not yet taken by process 0."""
        applied = int(self.status.get("applied", 0))
        merged: dict[str, Any] = {}
        for seq, knobs in self._changes:
            if seq > applied:
                merged |= knobs
        return merged

    def read(self) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
        """Process 0's latest status, and the step and evaluation records published since the
        last call (dicts of :class:`StepMetrics` and :class:`EvalResult` fields)."""
        with self._lock:
            return self._read()

    def _read(self) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
        store = self._store
        status = _get_json(store, "status")
        if status is not None:
            self.status = status
            applied = int(status.get("applied", 0))
            if any(seq <= applied for seq, _ in self._changes):
                self._changes = [(s, k) for s, k in self._changes if s > applied]
                self._write()
        steps: list[dict[str, Any]] = []
        evals: list[dict[str, Any]] = []
        count = int(store.get("m")) if store.check(["m"]) else 0
        if count > self._chunks_read:
            keys = [f"m/{i}" for i in range(self._chunks_read + 1, count + 1)]
            for raw in store.multi_get(keys):
                chunk = json.loads(raw)
                steps += chunk["steps"]
                evals += chunk["evals"]
            for key in keys:
                store.delete_key(key)
            self._chunks_read = count
        return self.status, steps, evals


class ControlLink:
    """Process 0's side: read the controller's requests, publish status and metrics.

    Made by :meth:`from_env` (None without ``GSNB_CONTROL``). A store that stops
    answering (the notebook closed) ends the link with one warning; training goes on.
    """

    def __init__(self, store: Any) -> None:
        self._store = store
        self._next_poll = 0.0
        self._next_publish = 0.0
        self._seen_seq = 0
        self._chunks = 0
        self._steps: list[dict[str, Any]] = []
        self._evals: list[dict[str, Any]] = []
        self.applied = 0
        self.error: str | None = None
        self.broken = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ControlLink | None:
        """The link named by ``environ[GSNB_CONTROL]``, or None when unset."""
        address = environ.get(CONTROL_ENV)
        return None if not address else cls(connect(address))

    def _failed(self, err: Exception) -> None:
        self.broken = True
        warnings.warn(
            f"the run's controller stopped answering ({err}); training goes on", stacklevel=3
        )

    def poll(self, force: bool = False) -> dict[str, Any] | None:
        """The controller's request when it is due to be read (or ``force``), else None."""
        now = time.monotonic()
        if self.broken or (not force and now < self._next_poll):
            return None
        self._next_poll = now + POLL_SECONDS
        try:
            return _get_json(self._store, "control")
        except (RuntimeError, ValueError) as err:
            self._failed(err)
            return None

    def new_changes(self, request: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """The knob changes of ``request`` not seen before (marks them seen)."""
        fresh = [(int(s), dict(k)) for s, k in request.get("changes", []) if s > self._seen_seq]
        if fresh:
            self._seen_seq = fresh[-1][0]
        return fresh

    def record_step(self, metrics: StepMetrics) -> None:
        """Keep a step's metrics for the next chunk (an ``on_step`` callback)."""
        self._steps.append(metrics.to_dict())

    def record_eval(self, result: EvalResult) -> None:
        """Keep an evaluation's result for the next chunk (an ``on_eval`` callback)."""
        self._evals.append({"step": result.step, "psnr": result.psnr, "ssim": result.ssim})

    def publish_due(self) -> bool:
        """Whether :meth:`publish` would write now (so that the status is built only then)."""
        return not self.broken and time.monotonic() >= self._next_publish

    def publish(self, status: Mapping[str, Any], force: bool = False) -> None:
        """Write ``status`` (with the last change taken) and a chunk of the new metrics."""
        now = time.monotonic()
        if self.broken or (not force and now < self._next_publish):
            return
        self._next_publish = now + PUBLISH_SECONDS
        try:
            if self._steps or self._evals:
                self._chunks += 1
                chunk = {"steps": self._steps, "evals": self._evals}
                self._store.set(f"m/{self._chunks}", json.dumps(chunk))
                self._store.set("m", str(self._chunks))  # after the chunk: the reader sees it
                self._steps, self._evals = [], []
            full = dict(status) | {"applied": self.applied, "error": self.error}
            self._store.set("status", json.dumps(full, default=str))
        except (RuntimeError, ValueError) as err:
            self._failed(err)
