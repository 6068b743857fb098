"""``Viewer``: a viser server that shows a training run (or a finished model) in the browser."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import math
import os
import socket
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gsnb.live.imaging import FrameEncoder
from gsnb.model import GaussianModel
from gsnb.raster import RenderResult
from gsnb.train.exported import exported_model
from gsnb.train.exposure import apply_exposure
from gsnb.viewer.access import Gate, new_secret, page_url
from gsnb.viewer.cameras import pose_of_view, vertical_fov, view_from_pose
from gsnb.viewer.frames import FrameProcess, FrameProcessError
from gsnb.viewer.splats import splat_arrays
from gsnb.viewer.stream import (
    BrowserCamera,
    FramePacing,
    FramePlanner,
    FrameRequest,
    pick_frame,
)

if TYPE_CHECKING:
    from gsnb.data.dataset import SceneDataset, View
    from gsnb.train import Trainer

MODES = ("render", "splats")
# Seconds between updates of the status text and the knob values in the browser.
STATUS_SECONDS = 1.0
# Frames a second at most by default: while training (a video's rate; each frame costs the
# training thread), and for a finished model
TRAINING_FPS = 30.0
MODEL_FPS = 60.0
# Frames whose stage timings :attr:`Viewer.frame_timings` averages.
TIMED_FRAMES = 60
# A frame racing a closing tab is dropped by viser with this warning; nothing is lost.
warnings.filterwarnings("ignore", message="Queued a BackgroundImageMessage on a closed connection")


class ViewerPortError(OSError):
    """The requested port is taken."""


def port_is_free(host: str, port: int) -> bool:
    """Whether a TCP server could bind ``host:port`` now.

    Example:
        >>> port_is_free("127.0.0.1", 0)
        True
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        # as a server binds: connections lingering in TIME_WAIT do not make the port busy
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


class Viewer:
    """Show a :class:`~gsnb.train.Trainer` (live) or a :class:`~gsnb.model.GaussianModel` in a
    browser, through a viser server.

    - The training (and test) cameras are drawn as frustums; clicking one moves
      the browser's camera there.
    - In ``"render"`` mode the server renders the scene at the browser's camera
      with gsnb's renderer and streams it as the background image: a small
      preview while the camera moves, the full canvas size once it rests, and
      refreshed while training changes the model. A trainer renders through its
      lock-protected ``render_view`` (no gradients), so viewing never disturbs a step;
      with ``frame_process`` (the default on a CPU) a child process draws the frames
      from the run's tensors instead.
    - In ``"splats"`` mode the browser draws the Gaussians itself (viser's
      Gaussian splats, colours without view dependence): for a finished model.
    - The trainer's live knobs appear as controls (the same ones as the
      notebook panel), with pause/resume and stop buttons.
    - Only a browser given :attr:`url` sees anything: the URL carries a secret
      of this viewer, and a websocket without it is closed before it gets a
      frame or reaches a control (see :mod:`gsnb.viewer.access`).
    - Frames are JPEG-encoded on the GPU (torchvision's nvJPEG) when the render
      is on a GPU and torchvision is installed, else on the CPU;
      :meth:`frame_timings` says where a frame's time goes.

    Args:
        source: a trainer or a model.
        host: interface to bind (default ``127.0.0.1``: this machine only).
        port: TCP port; ``0`` takes a free one. A busy port raises :class:`ViewerPortError`.
        dataset: cameras to draw for a model (a trainer brings its own).
        mode: ``"render"``, ``"splats"`` or ``"auto"`` (render a trainer, splat a model).
        preview_scale, rest_seconds, max_size, refresh_share: see
            :class:`~gsnb.viewer.stream.FramePlanner`.
        max_fps: frames a second at most, previews included, for all the browser tabs
            together (default: 30 for a trainer, a video's rate: each frame takes the
            interpreter's lock from the training thread for its launches; 60 for a model).
            With several tabs open, a tab whose camera moves is served first, then full
            frames a camera waits for, then refreshes, and no tab waits more than half a
            second (:func:`~gsnb.viewer.stream.pick_frame`); ``refresh_share`` too is for the
            tabs together.
        jpeg_quality: quality of the streamed frames.
        gpu_jpeg: encode frames on the GPU: ``None`` (where possible), ``True`` or ``False``.
        frame_process: draw a trainer's frames in a process of their own
            (:class:`~gsnb.viewer.frames.FrameProcess`), which reads the training run's
            Gaussians in place (shared memory on a CPU, CUDA IPC on a GPU), so that frames
            take no time from the training thread's interpreter lock or its cores; the
            refresh share then counts only this process's part of a frame. ``None``
            (default): for a trainer on the CPU with gsnb's own renderer and two cores or
            more for this process, where the renders are the cost: on 2 cores a moving
            camera then cost training 3% of its speed, against 51%
            (benchmarks/bench_interactive.py, ``viewer_*_process``). Off for a GPU: there
            it took the viewer's thread from 12% to 3% busy but did not measurably raise
            throughput, and costs a second CUDA context (its memory; two processes share
            the GPU by time slices). Frames are drawn in this process while the child
            starts (a few seconds) and if it fails (:attr:`last_error` says why).
        background: background colour of a model's renders (default: the one it was trained
            over, which its checkpoint records; a trainer uses its dataset's).

    Example:
        >>> import torch
        >>> from gsnb.model import GaussianModel
        >>> model = GaussianModel.from_points(torch.rand(50, 3), torch.rand(50, 3), sh_degree=0)
        >>> viewer = Viewer(model, port=0)
        >>> viewer.url.startswith("http://127.0.0.1:")
        True
        >>> viewer.stop()
        >>> viewer.start()  # the same viewer again, on the same port when it is free
        >>> viewer.stop()
    """

    def __init__(
        self,
        source: Trainer | GaussianModel,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        dataset: SceneDataset | None = None,
        mode: str = "auto",
        preview_scale: float = 0.25,
        rest_seconds: float = 0.1,
        max_fps: float | None = None,
        max_size: int = 1920,
        refresh_share: float = 0.25,
        jpeg_quality: int = 80,
        gpu_jpeg: bool | None = None,
        background: tuple[float, float, float] | None = None,
        frame_process: bool | None = None,
    ) -> None:
        _import_viser()
        self.trainer: Trainer | None = None
        self.model: GaussianModel | None = None
        if isinstance(source, GaussianModel):
            self.model = source
        elif hasattr(source, "render_view") and hasattr(source, "knobs"):
            self.trainer = source  # type: ignore[assignment]
            dataset = source.dataset  # type: ignore[union-attr]
        else:
            raise TypeError(
                f"Viewer shows a Trainer or a GaussianModel, got {type(source).__name__}"
            )
        if mode == "auto":
            mode = "render" if self.trainer is not None else "splats"
        if mode not in MODES:
            raise ValueError(f"mode must be 'render', 'splats' or 'auto', got {mode!r}")
        port = int(port)
        if not 0 <= port <= 65535:
            raise ValueError(f"port must lie in 0..65535, got {port}")
        if port and not port_is_free(host, port):
            raise _busy(host, port)
        if max_fps is None:
            max_fps = TRAINING_FPS if self.trainer is not None else MODEL_FPS
        self._planner_args = {
            "preview_scale": preview_scale,
            "rest_seconds": rest_seconds,
            "max_fps": max_fps,
            "max_size": max_size,
            "refresh_share": refresh_share,
        }
        FramePlanner(**self._planner_args)  # check the arguments before binding a port
        self.encoder = FrameEncoder(jpeg_quality, gpu=gpu_jpeg)
        if frame_process is None:
            frame_process = self.trainer is not None and _frame_process_pays(self.trainer)
        elif frame_process and self.trainer is None:
            raise ValueError("frame_process draws a trainer's frames; a model is drawn here")
        self._frame_process_args = (
            {
                "jpeg_quality": jpeg_quality,
                "gpu_jpeg": gpu_jpeg,
                "backend": self.trainer.config.backend,  # type: ignore[union-attr]
            }
            if frame_process
            else None
        )
        self.frames: FrameProcess | None = None
        self._frame_stream: torch.cuda.Stream | None = None
        if background is None:  # what the scene was trained over
            background = self.model.background if self.model is not None else (0.0, 0.0, 0.0)
        self.background = torch.tensor(background, dtype=torch.float32)
        self.dataset = dataset
        self.host = host
        self.port = port
        self._planners: dict[int, FramePlanner] = {}
        self._clients_lock = threading.Lock()
        self._wake = threading.Event()
        # when the frame loop wakes by itself next (None while it is awake): a camera message
        # wakes it only for a frame due sooner, not for each of a drag's 60 reports a second
        self._wake_at: float | None = None
        self._step_wakes = True  # whether a training step wakes the frame loop
        self._stopped = threading.Event()
        self._stopped.set()
        self._mode = mode
        self.frames_sent = 0
        self.last_error: BaseException | None = None
        self._timings: deque[dict[str, float]] = deque(maxlen=TIMED_FRAMES)
        self.start()

    def start(self) -> None:
        """Start serving (done on creation; after :meth:`stop`, serves again).

        The port is the one it had when still free, else a free one; each start
        makes a new secret, so URLs of the previous run no longer connect.
        """
        if not self._stopped.is_set():
            return
        old = getattr(self, "_thread", None)
        if old is not None and old.is_alive() and old is not threading.current_thread():
            # the previous frame loop must not share this start's frame process (stop()
            # closed the old one, so a loop waiting on it wakes at once)
            old.join(30.0)
        import viser

        port = self.port if self.port and port_is_free(self.host, self.port) else 0
        with _quiet_viser():  # viser's banner; show() gives the URL
            self.server = viser.ViserServer(host=self.host, port=port, verbose=False)
        self.port = self.server.get_port()
        if port and self.port != port:  # someone took it between our check and viser's bind
            self.server.stop()
            raise _busy(self.host, port)
        self.secret = new_secret()
        self._gate = Gate(self.server, self.secret)
        with self._clients_lock:
            self._planners.clear()
            # the tabs' frames together keep to max_fps and the refresh share: each costs
            # training the same, whichever tab it is for
            self._pacing = FramePacing(
                self._planner_args["max_fps"], self._planner_args["refresh_share"]
            )
        self._splats: Any = None
        self._stopped.clear()
        mode = self._mode
        self._build_scene()
        self._build_gui()
        self.server.on_client_connect(self._client_connected)
        self.server.on_client_disconnect(self._client_disconnected)
        if mode == "splats":
            self.show_splats()
        if self._frame_process_args is not None:
            assert self.trainer is not None
            # starts in the background; frames are drawn here until it is ready, or for good
            # when it cannot start (a daemonic process, say, may have no children)
            try:
                self.frames = FrameProcess(self.trainer.device, **self._frame_process_args)
            except Exception as err:
                self.last_error = FrameProcessError(f"the frame process could not start: {err}")
        # a training step may make a refresh due: the frame loop wakes instead of polling
        self._unhook = self.trainer.on_step(self._step_done) if self.trainer else None
        self._thread = threading.Thread(target=self._loop, name="gsnb-viewer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ scene
    @property
    def url(self) -> str:
        """The address to open in a browser; it carries this viewer's secret."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return page_url(f"http://{host}:{self.port}", f"ws://{host}:{self.port}", self.secret)

    @property
    def mode(self) -> str:
        """``"render"`` (server renders) or ``"splats"`` (the browser draws the Gaussians)."""
        return self._mode

    def _build_scene(self) -> None:
        scene = self.server.scene
        self.frustums: list[Any] = []
        if self.dataset is None:
            return
        extent = float(self.dataset.extent)
        size = 0.05 * extent if math.isfinite(extent) and extent > 0 else 0.1
        groups = (
            ("train", self.dataset.train, (40, 90, 220)),
            ("test", self.dataset.test, (230, 120, 20)),
        )
        for group, views, colour in groups:
            for i, view in enumerate(views):
                wxyz, position = pose_of_view(view)
                handle = scene.add_camera_frustum(
                    f"/cameras/{group}/{i:04d}",
                    fov=vertical_fov(view),
                    aspect=view.width / view.height,
                    scale=size,
                    thickness=1.5,
                    thickness_units="screen",
                    color=colour,
                    wxyz=wxyz,
                    position=position,
                )
                handle.on_click(self._go_to_frustum)
                self.frustums.append(handle)
        views = self.dataset.train or self.dataset.views
        centre = np.asarray(self.dataset.center, dtype=np.float64)
        first = pose_of_view(views[0])[1]
        self.server.initial_camera.up = _up_direction(views)
        self.server.initial_camera.position = centre + 1.5 * (first - centre)
        self.server.initial_camera.look_at = centre

    @staticmethod
    def _go_to_frustum(event: Any) -> None:
        frustum = event.target
        client = event.client
        with client.atomic():
            client.camera.wxyz = frustum.wxyz
            client.camera.position = frustum.position

    def _build_gui(self) -> None:
        gui = self.server.gui
        self.status = gui.add_markdown("")
        self.mode_control = gui.add_dropdown("mode", list(MODES), initial_value=self._mode)
        self.mode_control.on_update(lambda event: self._mode_changed(event.target.value))
        self.knob_panel = None
        if self.trainer is None:
            return
        self.pause_button = gui.add_button("Pause", icon="player-pause")
        self.stop_button = gui.add_button("Stop", icon="player-stop", color="red")
        self.pause_button.on_click(lambda _: self._toggle_pause())
        self.stop_button.on_click(lambda _: self.trainer.stop())  # type: ignore[union-attr]
        from gsnb.viewer.gui import KnobPanel

        with gui.add_folder("Knobs", expand_by_default=False):
            self.knob_panel = KnobPanel(gui, self.trainer)

    def _toggle_pause(self) -> None:
        trainer = self.trainer
        assert trainer is not None
        if trainer.status == "paused":
            trainer.resume()
        else:
            trainer.pause()
        self._update_status()

    def _mode_changed(self, mode: str) -> None:
        if mode == self._mode:
            return
        if mode == "splats":
            self.show_splats()
        else:
            self.show_renders()

    # ------------------------------------------------------------ modes
    def show_splats(self) -> None:
        """Let the browser draw the Gaussians (viser's splats) instead of streaming renders.

        The splats are a snapshot of the model now; call again to refresh them.
        """
        arrays = splat_arrays(self._model_snapshot())
        if self._splats is not None:
            self._splats.remove()
        self._splats = self.server.scene.add_gaussian_splats("/splats", **arrays)
        self._mode = "splats"
        self.mode_control.value = "splats"
        for client in self.server.get_clients().values():
            client.scene.set_background_image(None)

    def show_renders(self) -> None:
        """Stream gsnb's renders at the browser's camera (the default for a trainer)."""
        if self._splats is not None:
            self._splats.remove()
            self._splats = None
        self._mode = "render"
        self.mode_control.value = "render"
        with self._clients_lock:
            for planner in self._planners.values():
                planner.forget()
        self._wake.set()

    def _model_snapshot(self) -> GaussianModel:
        """The model between two steps: a running trainer pauses for the copy."""
        if self.trainer is None:
            assert self.model is not None
            return self.model
        trainer = self.trainer
        pause = trainer.running and trainer.status != "paused"
        if pause:
            trainer.pause()  # returns once the current step has finished
        try:
            # as the run's exports hold it: the 3D filter and the mean exposure baked in
            model = exported_model(trainer)
            return GaussianModel({k: v.detach().cpu() for k, v in model.splats.items()})
        finally:
            if pause:
                trainer.resume()

    # ---------------------------------------------------------- clients
    def _client_connected(self, client: Any) -> None:
        if not self._gate.allowed(client.client_id):
            return  # closed by the gate: no camera, no frames
        with self._clients_lock:
            planner = FramePlanner(**self._planner_args, pacing=self._pacing)
            self._planners[client.client_id] = planner

        async def moved(camera: Any) -> None:
            # a coroutine: viser runs it on its event loop, where the report was decoded. A
            # plain function would go to viser's thread pool, one more thread waking for
            # the interpreter's lock on every report (60 a second while dragging), taken
            # from the training thread
            try:
                self._camera_moved(client.client_id, camera)
            except Exception as err:  # kept for last_error; viser's handler must go on
                self.last_error = err

        client.camera.on_update(moved)
        self._camera_moved(client.client_id, client.camera)

    def _client_disconnected(self, client: Any) -> None:
        self._gate.forget(client.client_id)
        with self._clients_lock:
            self._planners.pop(client.client_id, None)

    def _camera_moved(self, client_id: int, camera: Any) -> None:
        try:
            state = BrowserCamera(
                tuple(float(v) for v in camera.wxyz),  # type: ignore[arg-type]
                tuple(float(v) for v in camera.position),  # type: ignore[arg-type]
                float(camera.fov),
                int(camera.image_width),
                int(camera.image_height),
                time.monotonic(),
            )
        except AssertionError:  # viser: no camera message from this client yet
            return
        with self._clients_lock:
            planner = self._planners.get(client_id)
            if planner is None:
                return
            planner.camera(state)
            due = state.stamp + planner.seconds_to_next(state.stamp, self._version())
            wake_at = self._wake_at  # None while the loop is awake: it will see this camera
            if wake_at is not None and due < wake_at:
                self._wake.set()

    # ---------------------------------------------------------- frames
    def _version(self) -> int:
        return self.trainer.step_count if self.trainer is not None else 0

    def _step_done(self, _metrics: Any) -> None:
        # Runs in the training thread after every step: wake the frame loop only when it
        # sleeps waiting for a new model (not when a refresh limit or a preview's rest is
        # what it waits for), since every wake takes the GIL away from training.
        if self._step_wakes:
            self._wake.set()

    def _loop(self) -> None:
        next_status = 0.0
        timeout = 0.0
        while not self._stopped.is_set():
            self._wake.wait(timeout)
            self._wake_at = None  # awake: the waits computed below will see any new camera
            self._wake.clear()
            now = time.monotonic()
            if now >= next_status:
                next_status = now + STATUS_SECONDS
                self._guarded(self._update_status)
            timeout = max(0.0, next_status - now)
            if self._mode != "render":
                # showing splats: only the status line updates, and cameras need no frame
                # (show_renders wakes the loop itself)
                self._step_wakes = False
                continue
            version = self._version()
            with self._clients_lock:
                due = [
                    (cid, p, request)
                    for cid, p in self._planners.items()
                    if (request := p.next_frame(now, version)) is not None
                ]
            if due and not self._stopped.is_set():
                # the tabs share one beat: one frame now, the most wanted of them
                chosen = pick_frame(due, now)
                self._guarded(lambda: self._send_frame(*chosen))  # noqa: B023
                # served, or failed: either way the other tabs come first next time (a tab
                # whose frames keep failing must not take every beat)
                chosen[1].served_at = max(chosen[1].served_at, time.monotonic())
            # sleep until the next frame is due (a camera or a training step wakes it sooner);
            # under the clients' lock, so that a camera that comes later sees when that is
            with self._clients_lock:
                now, version = time.monotonic(), self._version()
                waits = [
                    p.seconds_to_next(now, version)
                    for p in self._planners.values()
                    if p.current is not None  # no camera yet: its first report wakes the loop
                ]
                first = min(waits, default=math.inf)
                self._step_wakes = bool(waits) and first == math.inf
                if self._step_wakes and self._version() != version:
                    first = 0.0  # a step ended while deciding: its frame is due now
                timeout = min(max(0.0, next_status - now), first)
                self._wake_at = now + timeout

    def _guarded(self, action: Any) -> None:
        try:
            action()
        except Exception as err:  # a failed frame must not end the viewer
            self.last_error = err
            self._stopped.wait(0.2)

    def _send_frame(self, client_id: int, planner: FramePlanner, request: FrameRequest) -> None:
        client = self.server.get_clients().get(client_id)
        if client is None:
            # gone, perhaps before its connect callback ran: a planner left behind would
            # keep asking for frames and the loop would never sleep
            with self._clients_lock:
                if self._planners.get(client_id) is planner:
                    del self._planners[client_id]
            return
        from viser._messages import BackgroundImageMessage

        start = time.perf_counter()
        cam = request.camera
        view = view_from_pose(cam.wxyz, cam.position, cam.fov, request.width, request.height)
        data, stages, cost = self._encoded_frame(view)
        encoded = time.perf_counter()
        # the JPEG as it is: viser's set_background_image would decode nothing but re-encode
        client.scene._websock_interface.queue_message(
            BackgroundImageMessage(format="jpeg", rgb_data=data, depth_data=None)
        )
        done = time.perf_counter()
        # the share of time that limits refreshes is what the frame took from this process:
        # the render here (the wait for the step in flight, the copy of the Gaussians or the
        # render under the lock), or the frame process's part that is not its own drawing
        planner.rendered(request, cost, time.monotonic())
        self.frames_sent += 1
        self._timings.append(
            {
                **stages,
                "send": done - encoded,
                "total": done - start,
                "pixels": float(request.width * request.height),
                "bytes": float(len(data)),
            }
        )

    def _encoded_frame(self, view: View) -> tuple[bytes, dict[str, float], float]:
        """A frame's JPEG bytes, its stages' seconds and the seconds it cost this process:
        from the frame process when it is ready (``process`` 1.0; the cost is this side's
        work, a share of the Gaussians after a densification, not the wait for the child),
        else drawn here (``process`` 0.0; the cost is the render)."""
        frames = self.frames
        if frames is not None and frames.ready():
            start = time.perf_counter()
            try:
                data = self._process_frame(frames, view)
                cost = max(0.0, time.perf_counter() - start - frames.last["wait"])
                return data, {**frames.last, "process": 1.0}, cost
            except FrameProcessError as err:  # dead or failed: frames are drawn here from now
                self.last_error = err
                if frames.failed:
                    self.frames = None
        start = time.perf_counter()
        with self._frame_stream_context():
            rgb = self.render(view).rgb[0]
            rendered = time.perf_counter()
            data = self.encoder.encode(rgb)
        render = rendered - start
        return data, {"render": render, **self.encoder.last, "process": 0.0}, render

    def _process_frame(self, frames: FrameProcess, view: View) -> bytes:
        trainer = self.trainer
        assert trainer is not None
        if trainer.config.filter3d or not frames.holds(trainer.model.splats):
            # densified (or the 3D filter may have moved on): a consistent set, between steps
            # shared inside: a share rewraps the tensors' storage, which must not race a step
            trainer.live_gaussians(frames.share)
        with self._frame_stream_context():  # the copy to the host waits for no training step
            colour = trainer.shown_exposure()
            colour = None if colour is None else colour.cpu()
        return frames.frame(
            view.viewmat, view.K, view.width, view.height,
            sh_degree=trainer.sh_degree_now, background=trainer.model.background,
            rasterize_mode=trainer.config.rasterize_mode, colour=colour,
        )  # fmt: skip

    def _frame_stream_context(self) -> contextlib.AbstractContextManager[Any]:
        """A CUDA stream of the viewer's own for a training run's frames: a trainer renders
        on it from a copy of its Gaussians, so frames do not hold up training."""
        trainer = self.trainer
        if trainer is None or trainer.device.type != "cuda":
            return contextlib.nullcontext()
        if self._frame_stream is None:
            self._frame_stream = torch.cuda.Stream(trainer.device)
        return torch.cuda.stream(self._frame_stream)

    def frame_timings(self) -> dict[str, float]:
        """Mean seconds per stage over the latest frames (``render``: the trainer's lock held;
        ``convert``: float to 8 bits; ``encode``; ``copy``: to the host; ``send``: handing the
        JPEG to the server's queue; ``total``), their mean ``pixels`` and ``bytes``, and
        ``frames``; with ``frame_process``, ``process`` (the share of frames drawn by the
        frame process) and ``wait`` (its round trip); empty before the first frame.

        Example:
            >>> # viewer.frame_timings()["encode"] * 1000   # ms spent encoding a frame
        """
        frames = list(self._timings)
        if not frames:
            return {}
        keys = frames[-1].keys()
        means = {k: sum(f.get(k, 0.0) for f in frames) / len(frames) for k in keys}
        return {**means, "frames": float(len(frames))}

    def render(self, view: View) -> RenderResult:
        """Render the scene at ``view`` without gradients (a trainer's ``render_view``, locked;
        with exposure compensation, through the mean learned exposure, as exports show it).

        Example:
            >>> # image = viewer.render(view_from_pose(wxyz, position, fov, 1920, 1080)).rgb[0]
        """
        if self.trainer is not None:
            out = self.trainer.render_view(view)
            matrix = self.trainer.shown_exposure()
            if matrix is None:
                return out
            return dataclasses.replace(out, rgb=apply_exposure(out.rgb, matrix))
        model = self.model
        assert model is not None
        device = model.splats["means"].device
        with torch.no_grad():
            return model.render(
                view.viewmat[None].to(device),
                view.K[None].to(device),
                view.width,
                view.height,
                backgrounds=self.background.to(device),
            )

    def _update_status(self) -> None:
        if self.trainer is None:
            model = self.model
            assert model is not None
            self.status.content = f"**{model.num_gaussians:,}** Gaussians"
            return
        t = self.trainer
        last = t.history[-1] if t.history else None
        metrics = f" · loss {last.loss:.4f} · PSNR {last.psnr:.2f} dB" if last else ""
        self.status.content = (
            f"**{t.status}** · step {t.step_count} / {t.config.steps} · "
            f"{t.num_gaussians:,} Gaussians{metrics}"
        )
        self.pause_button.label = "Resume" if t.status == "paused" else "Pause"
        self.pause_button.disabled = not t.running
        self.stop_button.disabled = not t.running
        if self.knob_panel is not None:
            self.knob_panel.sync()

    # ---------------------------------------------------------- notebook
    def show(self, height: int = 600) -> None:
        """Embed the viewer in the notebook, or print its address in a terminal.

        Under a Jupyter server with jupyter-server-proxy the viewer is embedded
        through that server (``{base_url}proxy/PORT/``), so a browser that reaches
        the notebook reaches the viewer, wherever the kernel runs. Without the
        proxy the IFrame loads this machine's ``127.0.0.1``, and one line says what
        to do when the browser runs elsewhere. A stopped viewer starts again.
        """
        self.start()
        from gsnb.viewer.jupyter import show_viewer

        show_viewer(self.url, self.host, self.port, self.secret, height)

    def stop(self) -> None:
        """Stop streaming and close the server; the port is free when this returns."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._wake.set()
        if self._unhook is not None:
            self._unhook()
        frames = self.frames
        if frames is not None:  # first: a frame loop waiting on it wakes at once
            frames.close()
        if self._thread is not threading.current_thread():
            self._thread.join(10.0)
        self.frames = None
        with _quiet_viser():  # viser's "Server stopped"
            self.server.stop()
        # viser's stop waits a bounded time for its thread: the port must be free on return
        deadline = time.monotonic() + 5.0
        while not port_is_free(self.host, self.port) and time.monotonic() < deadline:
            time.sleep(0.02)

    def __enter__(self) -> Viewer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stopped.is_set() else self.url
        return f"Viewer({state}, mode {self._mode}, {len(self._planners)} client(s))"


@contextlib.contextmanager
def _quiet_viser() -> Iterator[None]:
    """Silence viser's banner and its "Server stopped": in a notebook rich displays them in the
    cell (bypassing stdout), with a URL that lacks the secret."""
    import rich

    console = rich.get_console()
    quiet = console.quiet
    console.quiet = True
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        console.quiet = quiet


def _frame_process_pays(trainer: Trainer) -> bool:
    """Whether a trainer's frames are better drawn in a frame process by default: a run on the
    CPU with gsnb's own renderer and two cores or more for this process, not from a daemonic
    process (which may have no children)."""
    import multiprocessing

    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))  # what this process may use (taskset, cgroups)
    else:
        cores = os.cpu_count() or 1
    return (
        trainer.device.type == "cpu"
        and trainer.renderer is trainer.default_renderer
        and cores >= 2
        and not multiprocessing.current_process().daemon
    )


def _import_viser() -> None:
    try:
        import viser  # noqa: F401
    except ImportError as err:
        raise ImportError(
            "the viewer needs viser: pip install 'gsnb[viewer]' (or pip install viser)"
        ) from err


def _busy(host: str, port: int) -> ViewerPortError:
    return ViewerPortError(
        errno.EADDRINUSE,
        f"port {port} on {host} is busy (another viewer or server holds it); pass port=0 to "
        "take a free port, or stop the other server (viewer.stop())",
    )


def _up_direction(views: list[View]) -> tuple[float, float, float]:
    """The mean of the cameras' up vectors (OpenCV: up is -y), normalised; +z if they cancel."""
    ups = [-pose_rotation(view)[:, 1] for view in views]
    up = np.mean(ups, axis=0)
    norm = float(np.linalg.norm(up))
    if norm < 1e-6:
        return (0.0, 0.0, 1.0)
    return tuple(float(v) for v in up / norm)  # type: ignore[return-value]


def pose_rotation(view: View) -> np.ndarray:
    """``[3, 3]`` camera-to-world rotation of ``view``."""
    return torch.as_tensor(view.viewmat, dtype=torch.float64).cpu().numpy()[:3, :3].T
