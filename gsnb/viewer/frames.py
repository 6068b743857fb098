"""Viewer frames drawn in a process of their own, from a training run's Gaussians shared in place.

A training thread and a viewer's frame loop in one process share one interpreter lock, and a
frame's Python (the render's launches, the encoder's calls) is time the training thread waits.
:class:`FrameProcess` draws and JPEG-encodes frames in a child process instead. The run's
parameter tensors reach the child by reference, once after each densification: CUDA tensors
through CUDA IPC (no copy; the child waits for the work that wrote them), CPU tensors through
shared memory. For each frame the child copies them (a few microseconds of GPU time) and renders
the copy: the copy may mix the values of two consecutive steps, which no eye can tell apart,
but the render sees one set of values. A frame comes back as
JPEG bytes over a pipe; while the parent waits for it, it does not hold the interpreter's lock.

The child takes the parent's built rasterizer (its file), never builds one, and exits when
the parent closes the pipe or dies.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from gsnb import toolchain
from gsnb.live.imaging import FrameEncoder
from gsnb.toolchain.loader import load_module
from gsnb.train.exposure import apply_exposure
from gsnb.train.pose_refine import MovedGaussians
from gsnb.train.rendering import BackendRenderer, render_model

# Seconds a frame may take before the child is taken for hung and stopped.
FRAME_TIMEOUT = 20.0
# Seconds the child may take to start (import torch and gsnb, load the rasterizer).
START_TIMEOUT = 120.0
# Bytes of /dev/shm left free beside two generations of shared CPU tensors.
SHM_SPARE = 64 * 2**20


class FrameProcessError(RuntimeError):
    """The frame process failed to start, died or could not draw a frame."""


class FrameProcess:
    """A child process that renders and JPEG-encodes frames of shared Gaussians.

    Args:
        device: where the Gaussians live (``cuda:N`` or ``cpu``); the child renders there.
        jpeg_quality: quality of the frames, 1..100.
        gpu_jpeg: encode CUDA frames on the GPU (see :class:`~gsnb.live.imaging.FrameEncoder`).
        backend: the renderer's backend in the child (``"auto"``, ``"cuda"``, ``"reference"``).

    :meth:`ready` says whether the child has started (it starts in the background: draw the
    frames meanwhile elsewhere); :meth:`share` hands it the Gaussians (only when they are
    other tensors than last time); :meth:`frame` returns one frame's JPEG bytes.

    Example:
        >>> import torch
        >>> from gsnb.model import GaussianModel
        >>> model = GaussianModel.from_points(torch.rand(30, 3) + 2, torch.rand(30, 3))
        >>> frames = FrameProcess(torch.device("cpu"), backend="reference")
        >>> frames.wait_ready()
        >>> frames.share(model.splats)
        True
        >>> K = [[16.0, 0, 8], [0, 16, 8], [0, 0, 1]]
        >>> data = frames.frame(torch.eye(4), K, 16, 16, sh_degree=0, background=(0, 0, 0))
        >>> data[:2] == b"\\xff\\xd8"
        True
        >>> frames.close()
    """

    def __init__(
        self,
        device: torch.device | str,
        jpeg_quality: int = 80,
        gpu_jpeg: bool | None = None,
        backend: str = "auto",
    ) -> None:
        if not 1 <= int(jpeg_quality) <= 100:
            raise ValueError(f"jpeg quality must lie in 1..100, got {jpeg_quality!r}")
        import torch.multiprocessing as tmp  # its reductions share tensors through the pipe

        device = torch.device(device)
        if device.type == "cuda" and device.index is None:  # the child needs the index
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.last: dict[str, float] = {}  # the latest frame's stages, in seconds
        self.backend_used: str | None = None  # the child's encoder, "nvjpeg" or "pil"
        self._key: tuple[Any, ...] | None = None
        self._shared: tuple[Any, ...] = ()  # what the child may still read: kept alive here
        self._ready = False
        self._failed: str | None = None
        context = tmp.get_context("spawn")  # CUDA cannot be used in a forked child
        self._conn, child = context.Pipe()
        extension = _extension_file() if self.device.type == "cuda" else None
        self.process = context.Process(
            target=_serve,
            args=(child, str(self.device), int(jpeg_quality), gpu_jpeg, backend, extension),
            name="gsnb-frames",
            daemon=True,
        )
        with _main_module_hidden():
            self.process.start()
        child.close()

    # ------------------------------------------------------------------ state
    @property
    def failed(self) -> str | None:
        """Why the process cannot draw frames, or None."""
        return self._failed

    def ready(self) -> bool:
        """Whether the child has started and draws frames (never blocks)."""
        if self._ready or self._failed:
            return self._ready
        try:
            if self._conn.poll():
                self._started(self._conn.recv())
            elif not self.process.is_alive():
                self._fail(f"the frame process exited with code {self.process.exitcode}")
        except (EOFError, OSError) as err:
            self._fail(f"the frame process is gone ({err})")
        return self._ready

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Block until the child has started; raises :class:`FrameProcessError` if it cannot."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self._failed:
                raise FrameProcessError(self._failed)
            if time.monotonic() > deadline:
                self._fail(f"the frame process did not start within {timeout:.0f} s")
                raise FrameProcessError(self._failed)
            self._conn.poll(0.05)

    def _started(self, message: tuple[str, Any]) -> None:
        kind, detail = message
        if kind == "ready":
            self._ready = True
        else:
            self._fail(str(detail))

    def _fail(self, reason: str) -> None:
        self._failed = reason
        self._ready = False
        self.close()

    # ----------------------------------------------------------------- frames
    def holds(self, splats: Mapping[str, Tensor]) -> bool:
        """Whether the child already has these tensors (their storage and shapes): a check
        that takes no lock, to call before reading a consistent set for :meth:`share`."""
        key = self._key
        return key is not None and key[: len(splats)] == _key(splats)

    def share(self, splats: Mapping[str, Tensor], variances: Tensor | None = None) -> bool:
        """Hand the child ``splats`` (stored parameters, as ``GaussianModel.splats``) and the 3D
        filter's ``variances`` unless they are the tensors it already has; True when sent.

        The tensors are shared, not copied: keep updating them in place as training does. The
        previous ones stay referenced here until the child has moved to these."""
        tensors = {k: v.detach() for k, v in splats.items()}
        if variances is not None:
            variances = variances.detach()
        key = _key(tensors, variances)
        if key == self._key:
            return False
        if self.device.type == "cuda":
            torch.cuda.ipc_collect()  # free what the child has let go of since the last share
        else:
            self._check_shared_memory([*tensors.values(), variances])
        self._request(("gaussians", tensors, variances))
        # CPU tensors moved to shared memory as they were sent: their address is new
        key = _key(tensors, variances)
        # the old tensors must outlive the child's last read of them: its reply to the next
        # frame (asked after these) says it has let them go
        self._shared = (*self._shared[-1:], (tensors, variances))
        self._key = key
        return True

    def _check_shared_memory(self, tensors: list[Tensor | None]) -> None:
        """Refuse CPU tensors that would not fit in ``/dev/shm`` with room to spare: writing
        past a full shared-memory filesystem kills the process (SIGBUS), not an exception
        (containers often give it 64 MiB)."""
        need = sum(
            t.untyped_storage().nbytes() for t in tensors if t is not None and not t.is_shared()
        )
        free = _shm_free_bytes()
        if need and free is not None and 2 * need + SHM_SPARE > free:
            self._fail(
                f"the Gaussians need {need / 2**20:.0f} MiB of shared memory and /dev/shm has "
                f"{free / 2**20:.0f} MiB free (a container's --shm-size raises it): frames are "
                "drawn in the training process"
            )
            raise FrameProcessError(self._failed)

    def frame(
        self,
        viewmat: Tensor,
        K: Any,
        width: int,
        height: int,
        *,
        sh_degree: int,
        background: Any,
        rasterize_mode: str = "classic",
        colour: Tensor | None = None,
    ) -> bytes:
        """JPEG bytes of the shared Gaussians seen from ``viewmat [4, 4]`` with intrinsics
        ``K [3, 3]`` at ``width`` x ``height``, over ``background`` (3 floats); ``colour``
        ``[3, 4]``, an affine colour transform of the image (a learned exposure), or None.

        :attr:`last` then holds the child's seconds per stage (``render``, ``convert``,
        ``encode``, ``copy``) and ``wait``, the whole round trip seen from here."""
        if self._failed:
            raise FrameProcessError(self._failed)
        if self._key is None:
            raise FrameProcessError("no Gaussians shared yet: call share() first")
        start = time.perf_counter()
        self._request(
            (
                "frame",
                _floats(viewmat),
                _floats(K),
                int(width),
                int(height),
                int(sh_degree),
                tuple(float(v) for v in _floats(background)),
                rasterize_mode,
                None if colour is None else _floats(colour),
            )
        )
        try:
            if not self._conn.poll(FRAME_TIMEOUT):
                self._fail(f"the frame process drew nothing for {FRAME_TIMEOUT:.0f} s")
                raise FrameProcessError(self._failed)
            kind, payload, stages = self._conn.recv()
        except (EOFError, OSError) as err:
            self._fail(f"the frame process is gone ({err})")
            raise FrameProcessError(self._failed) from err
        except BaseException:
            # interrupted (Ctrl-C) between the request and its reply: the reply would answer
            # the next request, so this pipe can no longer be trusted
            self._fail("interrupted while waiting for a frame")
            raise
        self._shared = self._shared[-1:]  # the child reads only the newest tensors now
        if kind != "frame":
            raise FrameProcessError(payload)
        self.backend_used = stages.pop("backend", None)
        self.last = {**stages, "wait": time.perf_counter() - start}
        return payload

    def _request(self, message: tuple[Any, ...]) -> None:
        if not self._ready:
            raise FrameProcessError(self._failed or "the frame process has not started yet")
        try:
            self._conn.send(message)
        except (OSError, ValueError) as err:  # a broken pipe: the child died
            self._fail(f"the frame process is gone ({err})")
            raise FrameProcessError(self._failed) from err
        except Exception as err:  # e.g. a platform without CUDA IPC: the tensors cannot go
            self._fail(f"cannot share the Gaussians with the frame process: {err}")
            raise FrameProcessError(self._failed) from err
        except BaseException:  # interrupted mid-message: the child may read half of it
            self._fail("interrupted while sending to the frame process")
            raise

    def close(self) -> None:
        """Stop the child (at once if it does not stop within a second) and free its tensors."""
        if not self._conn.closed:
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(None)
            self._conn.close()
        self.process.join(1.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(1.0)
        self._ready = False
        self._key = None
        self._shared = ()

    def __repr__(self) -> str:
        state = "ready" if self._ready else "starting"
        if self._failed:
            state = f"failed: {self._failed}"
        return f"FrameProcess({self.device}, {state})"


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start a spawned child without running the caller's script again in it.

    A spawned child imports the parent's ``__main__`` first (by its path or module name), so a
    script that makes a viewer at its top level, without ``if __name__ == "__main__":``,
    would run once more in the child: load the data, train, and make another viewer. The
    child needs nothing of it (its entry point is in this module): while it starts, the
    main module shows neither its file nor its spec.
    """
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__spec__ = None
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
            if "__spec__" not in saved:
                main.__dict__.pop("__spec__", None)


def _shm_free_bytes(folder: str = "/dev/shm") -> int | None:
    """Free bytes of the shared-memory filesystem, or None where there is none to ask."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _key(
    tensors: Mapping[str, Tensor], variances: Tensor | None = None
) -> tuple[tuple[str, int, tuple[int, ...]], ...]:
    """Which tensors these are (and the variances, if any): names, addresses and shapes."""
    named = {**tensors, "variances": variances} if variances is not None else tensors
    return tuple((k, v.data_ptr(), tuple(v.shape)) for k, v in named.items())


def _floats(value: Any) -> list[Any]:
    """A tensor, array or nested sequence of numbers as nested lists of floats."""
    if isinstance(value, Tensor):
        return value.detach().double().cpu().tolist()
    return [_floats(v) if isinstance(v, (list, tuple)) else float(v) for v in value]


def _extension_file() -> tuple[str, str] | None:
    """The module name and file of the rasterizer in use here, for the child to load."""
    from gsnb import kernels

    module = kernels.extension()
    path = getattr(module, "__file__", None)
    return (module.__name__, path) if module is not None and path else None


# ---------------------------------------------------------------------------- the child
def _serve(
    conn: multiprocessing.connection.Connection,
    device_name: str,
    quality: int,
    gpu_jpeg: bool | None,
    backend: str,
    extension: tuple[str, str] | None,
) -> None:
    """The child's loop: Gaussians in, frames out, until the parent closes the pipe."""
    # Ctrl-C in a terminal reaches the whole process group: the parent decides (it closes
    # the pipe), so that a stopped run does not print this process's traceback too
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        device = torch.device(device_name)
        if device.type == "cuda":
            torch.cuda.set_device(device)
            if extension is not None:
                toolchain.use_module(load_module(extension[0], Path(extension[1])))
        renderer = BackendRenderer(backend)
        encoder = FrameEncoder(quality, gpu=gpu_jpeg)
    except Exception as err:  # reported to the parent, which draws frames itself
        conn.send(("failed", f"the frame process could not start: {type(err).__name__}: {err}"))
        return
    conn.send(("ready", None))
    splats: dict[str, Tensor] | None = None
    variances: Tensor | None = None
    while True:
        try:
            message = conn.recv()
        except Exception:  # the parent is gone, or its tensors cannot be opened here: the
            return  # parent sees the pipe close and draws its frames itself
        if message is None:
            return
        if message[0] == "gaussians":
            splats, variances = message[1], message[2]
            continue
        try:
            conn.send(_draw(renderer, encoder, device, splats, variances, message))
        except (BrokenPipeError, OSError):
            return


def _draw(
    renderer: BackendRenderer,
    encoder: FrameEncoder,
    device: torch.device,
    splats: dict[str, Tensor] | None,
    variances: Tensor | None,
    request: tuple[Any, ...],
) -> tuple[str, Any, dict[str, Any]]:
    """One frame in the child for a ``("frame", viewmat, K, width, height, sh_degree,
    background, rasterize_mode, colour)`` request: ``("frame", jpeg, stages)`` or
    ``("error", message, {})``."""
    _, viewmat, K, width, height, degree, background, mode, colour = request
    try:
        assert splats is not None, "no Gaussians"
        start = time.perf_counter()
        with torch.no_grad():
            # A snapshot first: training writes these tensors meanwhile, and the renderer's
            # passes (count the tiles each splat covers, then fill them) must see one set of
            # values, or a splat may fill more tiles than were counted for it. The copy may mix
            # two consecutive steps' values, which no eye can tell apart.
            splats = {k: v.clone() for k, v in splats.items()}
            variances = None if variances is None else variances.clone()
            bg = torch.tensor(background, dtype=torch.float32, device=device)
            out = render_model(
                MovedGaussians(splats, background), renderer,
                torch.tensor(viewmat, dtype=torch.float32, device=device).reshape(1, 4, 4),
                torch.tensor(K, dtype=torch.float32, device=device).reshape(1, 3, 3),
                width, height, sh_degree=degree, background=bg, rasterize_mode=mode,
                filter3d=variances,
            )  # fmt: skip
            rgb = out.rgb[0]
            if colour is not None:
                matrix = torch.tensor(colour, dtype=rgb.dtype, device=device)
                rgb = apply_exposure(rgb, matrix)
            rendered = time.perf_counter()
            data = encoder.encode(rgb)
        return (
            "frame",
            data,
            {"render": rendered - start, **encoder.last, "backend": encoder.backend},
        )
    except Exception as err:  # one bad frame (say, out of memory) does not end the process
        return "error", f"{type(err).__name__}: {err}", {}
