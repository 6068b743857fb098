"""What watching costs: training steps per second headless, with the widgets panel attached and
with viewer clients connected, and the viewer's frames per second at 1080p while training.

One trainer trains in its background thread for the whole run; the conditions take turns in
short windows, several rounds, in reversed order every other round. By default the model grows
(densifies) during ``--warmup`` steps and then keeps its size (``--grow`` densifies throughout):
a model that grows makes every later window slower, and windows measured in one order would
charge that growth to the conditions measured last. Medians over rounds are reported with
their ratio to headless training, and each round's ratio to the headless window of that round.
Viewer clients run in their own processes (as a browser would) and speak viser's websocket
protocol; those processes start once and serve every window, so that a window's start costs
seconds less and a run of fixed length measures more rounds.

Conditions:
- ``headless``: nothing attached.
- ``panel``: a ``TrainingPanel`` (widgets built without a front end; its thread redraws the
  curves and the live render as in a notebook).
- ``viewer_moving``: a client whose camera (a 1920x1080 canvas, ``--viewer-size``) moves
  ``--move-hz`` times a second, as a browser reports a drag (it gets previews at a quarter of
  the size, and refreshes between moves while training changes the model).
- ``viewer_resting``: a client whose camera rests (full-size frames refreshed while training,
  with the default limits).
- ``viewer_moving_process`` and ``viewer_resting_process``: moving and resting with the frames
  drawn in a process of their own (``Viewer(frame_process=True)``, ``gsnb.viewer.frames``)
  instead of the training process: what taking the frames' Python off the training process's
  interpreter lock wins. Its process is started and ready before the window begins.
- ``viewer_resting_cpu_jpeg``: the same with frames encoded on the CPU (``gpu_jpeg=False``):
  what encoding on the GPU wins.
- ``viewer_moving_60fps``: the same as moving with ``max_fps=60`` (the default while training is
  30): what twice the frame rate costs.
- ``viewer_moving_switch1ms``: the same as moving with the interpreter's thread switch interval
  at 1 ms instead of 5 ms (``sys.setswitchinterval``) for the window: whether the training thread
  waits for the GIL that the viewer's threads hold.
- ``viewer_moving_no_render`` and ``viewer_moving_no_encode``: ablations of moving, not uses: the
  viewer reuses its first render (no render, no trainer lock) or its first JPEG (no encoding) of
  each size, so the rest of a frame's path is what the window costs: which stage costs training.
- ``viewer_settle``: a client that jumps to another pose every ``--settle-period`` seconds and
  times the wait from the jump to the first full-size frame of the new pose.
- ``viewer_two_tabs_resting``: two clients at rest, as a notebook's embedded viewer and the
  same viewer opened in a browser tab: they share ``max_fps`` (``frames_per_s`` counts both,
  ``frames_per_s_per_tab`` each).
- ``viewer_max``: the same as resting with the limits lifted (``max_fps=240``,
  ``refresh_share=0.95``): the viewer's frame rate at full size while training.

Before training starts, one frame at the viewer size is timed stage by stage (render, float to
8 bits, encode, copy to the host) with each encoder: where a frame's time goes. Each viewer
condition also reports the viewer's own per-stage means (``Viewer.frame_timings``).

Run on the GPU machine (the extension is built first; a cache hit when built already)::

    python benchmarks/bench_interactive.py ../shared/data/fox --out out/bench_interactive

On a CPU, a small synthetic scene::

    python benchmarks/bench_interactive.py --synthetic 48 --max-init-points 300 --device cpu \
        --viewer-size 480x270 --warmup 30 --rounds 5 --out out/bench_cpu
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # gsnb, without installing it
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FOX, environment, write_json

CONDITIONS = (
    "headless",
    "panel",
    "viewer_moving",
    "viewer_resting",
    "viewer_moving_process",
    "viewer_resting_process",
    "viewer_resting_cpu_jpeg",
    "viewer_moving_60fps",
    "viewer_moving_switch1ms",
    "viewer_moving_no_render",
    "viewer_moving_no_encode",
    "viewer_settle",
    "viewer_two_tabs_resting",
    "viewer_max",
)
SWITCH_INTERVAL = sys.getswitchinterval()
PACKAGES = (
    "viser",
    "websockets",
    "ipywidgets",
    "plotly",
    "anywidget",
    "msgspec",
    "zstandard",
    "torchvision",
)


def client_process(conn) -> None:
    """Viewer clients in a process of their own, one window after another: the parent sends
    ``(url, poses, fov, size, motion)`` to watch a viewer (report a camera, time every frame)
    until it sends ``"stop"``, and gets the frames; ``None`` ends the process. One process
    serves every window, so a window's start waits for no interpreter and no imports.

    ``motion``: ``{"move_hz": H}`` (a new pose H times a second; 0: resting) or
    ``{"settle_period": S}`` (a jump every S seconds, timing the wait for the full frame).
    """
    import io

    from PIL import Image

    from gsnb.viewer.client import ViewerClient

    while True:
        try:
            job = conn.recv()
        except EOFError:  # the benchmark is gone
            return
        if job is None:
            return
        url, poses, fov, size, motion = job
        frames: list[tuple[float, int, int]] = []
        settles: list[float] = []
        move_hz = motion.get("move_hz", 0.0)
        period = motion.get("settle_period", 0.0)
        with ViewerClient(url) as client:
            client.send_camera(*poses[0], fov, *size)
            ready, index, next_move = False, 0, time.monotonic()
            jumped: float | None = None  # when the latest jump was sent, until its full frame
            seen_preview = False
            while not conn.poll():
                now = time.monotonic()
                if (move_hz > 0 or (period > 0 and ready)) and now >= next_move:
                    index = (index + 1) % len(poses)
                    client.send_camera(*poses[index], fov, *size)
                    next_move = now + (1.0 / move_hz if move_hz > 0 else period)
                    jumped, seen_preview = now, False
                for message in client.messages(0.002):
                    if message["type"] == "BackgroundImageMessage" and message.get("rgb_data"):
                        width, height = Image.open(io.BytesIO(message["rgb_data"])).size
                        arrived = time.monotonic()
                        frames.append((arrived, width, height))
                        if jumped is not None and period > 0:
                            if width < size[0]:
                                seen_preview = True
                            elif seen_preview:  # the new pose's full frame, after its preview
                                settles.append(arrived - jumped)
                                jumped = None
                        if not ready:
                            ready = True
                            conn.send("ready")
        conn.recv()  # "stop"
        conn.send((frames, settles))


class Client:
    """A process of :func:`client_process`: started once, then watches one window at a time."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=client_process, args=(child,), daemon=True)
        self.process.start()

    def watch(self, url: str, poses: list, fov: float, size: tuple[int, int], motion: dict):
        """Connect to the viewer at ``url``; returns once its first frame has arrived."""
        self.conn.send((url, poses, fov, size, motion))
        if not self.conn.poll(120) or self.conn.recv() != "ready":
            raise RuntimeError("the viewer client got no frame within 120 s")

    def finish(self) -> tuple[list[tuple[float, int, int]], list[float]]:
        """Disconnect; the frames (arrival time, width, height) and settle times (seconds)."""
        self.conn.send("stop")
        return self.conn.recv()

    def close(self) -> None:
        """End the process."""
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.process.join(10)


def make_dataset(args: argparse.Namespace):
    from gsnb.data.dataset import load_dataset

    if args.synthetic:
        from gsnb.data.synthetic import make_synthetic_scene

        folder = make_synthetic_scene(
            tempfile.mkdtemp(prefix="gsnb-bench-"), num_views=12, size=args.synthetic, samples=1
        )
        return load_dataset(folder, test_every=0)
    if not args.data.exists():
        raise SystemExit(f"no dataset at {args.data}; pass its path (default {FOX})")
    return load_dataset(args.data, downscale=args.downscale, test_every=0)


def render_time_ms(trainer, view, repeat: int = 10) -> float:
    """Median time of one render at ``view`` through the trainer's locked ``render_view``."""
    times = []
    for i in range(repeat + 3):
        if trainer.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        trainer.render_view(view).rgb.sum().item()
        if i >= 3:
            times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def frame_breakdown(trainer, view, gpu: bool, repeat: int = 10) -> dict[str, Any]:
    """Median milliseconds of each stage of one frame at ``view``: the render (through the
    trainer's lock), then the encoder's stages (float to 8 bits, encode, copy to the host)."""
    from gsnb.live.imaging import FrameEncoder

    encoder = FrameEncoder(80, gpu=gpu)
    rows: list[dict[str, float]] = []
    size = 0
    for i in range(repeat + 3):
        if trainer.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        rgb = trainer.render_view(view).rgb[0]
        if trainer.device.type == "cuda":
            torch.cuda.synchronize()
        render = time.perf_counter() - start
        size = len(encoder.encode(rgb))
        if i >= 3:
            rows.append({"render": render, **encoder.last})
    stages = {k: 1000 * statistics.median(r[k] for r in rows) for k in rows[0]}
    return {
        "backend": encoder.backend,
        "gpu_error": encoder.gpu_error,
        "ms": stages,
        "total_ms": sum(stages.values()),
        "jpeg_bytes": size,
    }


SCHEDULES = {"auto": 0, "spin": 1, "yield": 2, "block": 4}  # cudaDeviceSchedule* flags


def set_cuda_schedule(name: str) -> None:
    """Set how host threads wait for the GPU (``cudaSetDeviceFlags``) in this process; must run
    before the CUDA context exists. ``auto`` leaves the driver's choice."""
    if name == "auto" or not torch.cuda.is_available():
        return
    import ctypes

    with open("/proc/self/maps") as maps:  # the CUDA runtime torch loaded
        path = next(line.split()[-1] for line in maps if "libcudart" in line)
    code = ctypes.CDLL(path).cudaSetDeviceFlags(ctypes.c_uint(SCHEDULES[name]))
    if code != 0:
        raise RuntimeError(f"cudaSetDeviceFlags({name}) failed with CUDA error {code}")


@contextlib.contextmanager
def window_range(name: str) -> Any:
    """An NVTX range named ``name`` on a CUDA machine (``nsys`` shows it), else nothing."""
    if not torch.cuda.is_available():
        yield
        return
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()


def reuse_first(stage: Any, key: Any) -> Any:
    """``stage`` that computes once per ``key(argument)`` and then returns that first result:
    an ablation that takes the stage's work out of a frame's path."""
    first: dict[Any, Any] = {}

    def reused(argument: Any) -> Any:
        k = key(argument)
        if k not in first:
            first[k] = stage(argument)
        return first[k]

    return reused


def thread_cpu(trainer: Any, viewer: Any) -> dict[str, float]:
    """CPU seconds so far of the training thread and of the viewer's frame thread (Linux)."""
    found: dict[str, float] = {}
    threads = (("train", trainer._thread), ("viewer", getattr(viewer, "_thread", None)))
    for name, thread in threads:
        if thread is None or thread.ident is None or not hasattr(time, "pthread_getcpuclockid"):
            continue
        with contextlib.suppress(OSError):  # the thread has ended
            found[name] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return found


def summarize(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each condition's medians, its paired throughput against headless, and its rounds."""
    headless_rounds = results["headless"]["steps_per_s"]
    headless = statistics.median(headless_rounds)
    summary = {}
    for condition, row in results.items():
        entry: dict[str, Any] = {"steps_per_s_median": statistics.median(row["steps_per_s"])}
        entry["throughput_vs_headless"] = entry["steps_per_s_median"] / headless
        # each round against that round's headless window: steadier on a busy machine
        paired = [s / h for s, h in zip(row["steps_per_s"], headless_rounds, strict=True)]
        entry["throughput_vs_headless_paired_median"] = statistics.median(paired)
        # the mean of the paired ratios and its standard error: whether a goal such as 90%
        # is met, or within the rounds' spread
        entry["throughput_vs_headless_paired_mean"] = statistics.fmean(paired)
        if len(paired) > 1:
            se = statistics.stdev(paired) / len(paired) ** 0.5
            entry["throughput_vs_headless_paired_se"] = se
        cpu = statistics.median(row["cpu_s_per_step"])
        entry["cpu_s_per_step_median"] = cpu
        entry["cpu_per_step_vs_headless"] = cpu / statistics.median(
            results["headless"]["cpu_s_per_step"]
        )
        if "frames_per_s" in row:
            entry["frames_per_s_median"] = statistics.median(row["frames_per_s"])
            entry["full_size_frames_per_s_median"] = statistics.median(row["full_frames_per_s"])
            entry["frame_sizes"] = [list(s) for s in sorted(row["frame_sizes"])]
            entry["encoder"] = row["encoder"]
            entry["frame_process"] = row.get("frame_process")
            entry["errors"] = row.get("errors", [])
        if row.get("frames_per_s_per_tab"):
            entry["frames_per_s_per_tab_median"] = [
                statistics.median(tab) for tab in zip(*row["frames_per_s_per_tab"], strict=True)
            ]
        if row.get("settle_s"):
            entry["settle_s_median"] = statistics.median(row["settle_s"])
            entry["settle_s_max"] = max(row["settle_s"])
        for key in ("train_thread_cpu_s_per_step", "train_thread_cpu_share"):
            if row.get(key):
                entry[f"{key}_median"] = statistics.median(row[key])
        if row.get("viewer_thread_cpu_share"):
            entry["viewer_thread_cpu_share_median"] = statistics.median(
                row["viewer_thread_cpu_share"]
            )
        if "panel_busy_share" in row:
            entry["panel_busy_share_median"] = statistics.median(row["panel_busy_share"])
        rounds = {k: v for k, v in row.items() if k not in ("frame_sizes", "encoder")}
        summary[condition] = entry | {"rounds": rounds}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=FOX, help="dataset (default fox)")
    parser.add_argument("--out", type=Path, default=Path("out/bench_interactive"))
    parser.add_argument("--downscale", type=int, default=2, help="image downscale (default 2)")
    parser.add_argument("--synthetic", type=int, help="use the synthetic scene at this size")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--backend", default="auto", choices=("auto", "cuda", "reference"))
    parser.add_argument("--max-init-points", type=int, default=0, help="cap (default 0: all)")
    parser.add_argument(
        "--warmup", type=int, default=4000, help="steps before measuring (default 4000)"
    )
    parser.add_argument("--window", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--viewer-size", default="1920x1080", help="canvas (default 1920x1080)")
    parser.add_argument(
        "--conditions", default=",".join(CONDITIONS), help="comma-separated subset (default all)"
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--grow", action="store_true", help="keep densifying while measuring (windows differ)"
    )
    size.add_argument(
        "--fixed-size", action="store_true", help="no densification at all, warm-up included"
    )
    parser.add_argument("--no-build", action="store_true", help="do not build the extension")
    parser.add_argument(
        "--move-hz", type=float, default=60.0, help="camera reports a second while moving"
    )
    parser.add_argument(
        "--settle-period", type=float, default=1.0, help="seconds between jumps (viewer_settle)"
    )
    parser.add_argument(
        "--cuda-schedule",
        default="auto",
        choices=tuple(SCHEDULES),
        help="how a CUDA wait waits (cudaSetDeviceFlags): the driver's choice, spin, yield or "
        "block (default auto: spin when there are more cores than GPUs)",
    )
    args = parser.parse_args()
    set_cuda_schedule(args.cuda_schedule)  # before anything makes the CUDA context
    conditions = args.conditions.split(",")
    if "headless" not in conditions or not set(conditions) <= set(CONDITIONS):
        parser.error(f"--conditions: headless plus any of {', '.join(CONDITIONS)}")

    from gsnb.data.dataset import scaled_view
    from gsnb.train import TrainConfig, Trainer
    from gsnb.viewer import Viewer
    from gsnb.viewer.cameras import pose_of_view, vertical_fov, view_from_pose

    info = environment()
    info["packages"] = {name: _version(name) for name in PACKAGES}
    if torch.cuda.is_available() and args.backend != "reference" and not args.no_build:
        from gsnb.toolchain import build

        print("building the CUDA rasterizer (a cache hit when built already) ...", flush=True)
        result = build(progress=False)
        print(f"  {result}", flush=True)
    data = make_dataset(args)
    config = TrainConfig(
        steps=10**7,
        device=args.device,
        backend=args.backend,
        max_init_points=args.max_init_points,
        seed=0,
    )
    trainer = Trainer(data, config)
    print(f"{trainer}; {len(data.train)} views of {data.train[0].width}x{data.train[0].height}")
    if args.fixed_size:
        trainer.set(refine_start_iter=0, refine_stop_iter=0)
    trainer.run(args.warmup, progress=False)
    if not args.grow and not args.fixed_size:
        # the model keeps the size it grew to: every window measures a model of one size
        trainer.set(refine_stop_iter=max(trainer.step_count, trainer.strategy.refine_start_iter))
    backend = trainer.render_view(scaled_view(data.train[0], 16)).meta.backend
    print(f"warmed up {args.warmup} steps ({backend} backend), {trainer.num_gaussians} Gaussians")

    poses = [tuple(map(tuple, pose_of_view(v))) for v in data.train]
    fov = vertical_fov(data.train[0])
    canvas = tuple(int(v) for v in args.viewer_size.lower().split("x"))
    render_ms = render_time_ms(trainer, view_from_pose(*poses[0], fov, *canvas))
    print(f"one {args.viewer_size} render through render_view: {render_ms:.2f} ms (median)")
    breakdown = {
        name: frame_breakdown(trainer, view_from_pose(*poses[0], fov, *canvas), gpu)
        for name, gpu in (("gpu_jpeg", True), ("cpu_jpeg", False))
    }
    for name, row in breakdown.items():
        stages = ", ".join(f"{k} {v:.2f}" for k, v in row["ms"].items())
        print(f"one {args.viewer_size} frame, {row['backend']}: {stages} ms; {row['jpeg_bytes']} B")
        if row["gpu_error"] and name == "gpu_jpeg":
            print(f"  (GPU encoding unavailable: {row['gpu_error']})")

    results: dict[str, dict[str, Any]] = {c: {"steps_per_s": []} for c in conditions}
    path = args.out / "bench_interactive.json"

    def report(rounds_done: int) -> dict[str, dict[str, Any]]:
        # written after every round: a run cut short keeps the rounds it finished
        summary = summarize(results)
        payload = {
            "benchmark": "bench_interactive",
            "environment": info,
            "settings": vars(args) | {"data": str(args.data), "out": str(args.out)},
            "backend": backend,
            "device": str(trainer.device),
            "image_size": [data.train[0].width, data.train[0].height],
            "gaussians_at_end": trainer.num_gaussians,
            "viewer_size": list(canvas),
            "render_ms_at_viewer_size": render_ms,
            "frame_breakdown_at_viewer_size": breakdown,
            "rounds_done": rounds_done,
            "conditions": summary,
        }
        write_json(path, payload)
        return summary

    pool: list[Client] = []  # client processes, started once, reused by every window
    trainer.start()
    try:
        for round_ in range(args.rounds):
            for condition in conditions if round_ % 2 == 0 else conditions[::-1]:
                row = results[condition]
                panel = viewer = None
                clients: list[Client] = []
                if condition == "panel":
                    # ipywidgets and plotly only when the panel is measured
                    from gsnb.notebook.panel import TrainingPanel

                    panel = TrainingPanel(trainer)
                elif condition.startswith("viewer"):
                    options: dict[str, Any] = {}
                    if condition == "viewer_max":
                        options = {"max_fps": 240, "refresh_share": 0.95}
                    if condition == "viewer_resting_cpu_jpeg":
                        options = {"gpu_jpeg": False}
                    if condition == "viewer_moving_60fps":
                        options = {"max_fps": 60}
                    if condition.endswith("_process"):
                        options = {"frame_process": True}
                    viewer = Viewer(trainer, port=0, **options)
                    if viewer.frames is not None:
                        viewer.frames.wait_ready()  # its start is not the window's
                    if condition == "viewer_moving_switch1ms":
                        sys.setswitchinterval(0.001)
                    if condition == "viewer_moving_no_render":
                        viewer.render = reuse_first(viewer.render, lambda v: (v.width, v.height))
                    if condition == "viewer_moving_no_encode":
                        encoder = viewer.encoder
                        encoder.encode = reuse_first(encoder.encode, lambda rgb: tuple(rgb.shape))
                    motion: dict[str, float] = {}
                    if condition.startswith("viewer_moving"):
                        motion = {"move_hz": args.move_hz}
                    elif condition == "viewer_settle":
                        motion = {"settle_period": args.settle_period}
                    tabs = 2 if condition == "viewer_two_tabs_resting" else 1
                    while len(pool) < tabs:
                        pool.append(Client())
                    clients = pool[:tabs]
                    for client in clients:
                        client.watch(viewer.url, poses, fov, canvas, motion)
                time.sleep(0.5)  # settle
                start, steps0, cpu0 = time.monotonic(), trainer.step_count, time.process_time()
                threads0 = thread_cpu(trainer, viewer)
                busy0 = panel.redraw_seconds if panel is not None else 0.0
                with window_range(condition):  # a profiler's timeline shows the window
                    time.sleep(args.window)
                end, steps1, cpu1 = time.monotonic(), trainer.step_count, time.process_time()
                threads1 = thread_cpu(trainer, viewer)
                row["steps_per_s"].append((steps1 - steps0) / (end - start))
                # CPU seconds of this process per step: what watching adds, even on a busy machine
                row.setdefault("cpu_s_per_step", []).append((cpu1 - cpu0) / max(1, steps1 - steps0))
                # ... and each thread's share of the wall time: a training thread whose share
                # drops waits (for the GIL, a lock, the GPU); one whose CPU per step grows
                # contends (for the CPU, the driver)
                for name in sorted(threads0.keys() & threads1.keys()):
                    used = threads1[name] - threads0[name]
                    row.setdefault(f"{name}_thread_cpu_share", []).append(used / (end - start))
                    if name == "train":
                        per_step = used / max(1, steps1 - steps0)
                        row.setdefault("train_thread_cpu_s_per_step", []).append(per_step)
                note = ""
                if clients and viewer is not None:
                    finished = [c.finish() for c in clients]
                    settles = [s for _, tab_settles in finished for s in tab_settles]
                    per_tab = [[f for f in tab if start <= f[0] <= end] for tab, _ in finished]
                    frames = sorted(f for tab in per_tab for f in tab)
                    if len(per_tab) > 1:
                        row.setdefault("frames_per_s_per_tab", []).append(
                            [len(tab) / (end - start) for tab in per_tab]
                        )
                    timings = viewer.frame_timings()
                    drawn = viewer.frames
                    if viewer.last_error is not None:
                        row.setdefault("errors", []).append(repr(viewer.last_error))
                    row["frame_process"] = drawn is not None
                    row["encoder"] = (drawn and drawn.backend_used) or viewer.encoder.backend
                    viewer.stop()
                    sys.setswitchinterval(SWITCH_INTERVAL)
                    row.setdefault("frames_per_s", []).append(len(frames) / (end - start))
                    full = [f for f in frames if f[1] == canvas[0]]
                    row.setdefault("full_frames_per_s", []).append(len(full) / (end - start))
                    sizes = sorted({(w, h) for _, w, h in frames})
                    row.setdefault("frame_sizes", set()).update(sizes)
                    row.setdefault("stage_ms", []).append(
                        {
                            k: 1000 * v
                            for k, v in timings.items()
                            if k not in ("pixels", "bytes", "frames")
                        }
                        | {k: timings.get(k) for k in ("pixels", "bytes", "frames")}
                    )
                    note = f", {len(frames) / (end - start):.1f} frames/s {sizes}"
                    if settles:
                        row.setdefault("settle_s", []).extend(settles)
                        settle = 1000 * statistics.median(settles)
                        note += f", full frame {settle:.0f} ms after a jump"
                if panel is not None:
                    busy = panel.redraw_seconds - busy0
                    # what the panel showed: the memory gauge's text, and any error it reported
                    row["memory_gauge"] = panel.memory_label.value
                    row["panel_messages"] = [
                        m for m in (panel.message.value, panel.error.value) if m
                    ]
                    panel.close()
                    row.setdefault("panel_busy_share", []).append(busy / (end - start))
                    note = f", panel redraws {100 * row['panel_busy_share'][-1]:.1f} % of the time"
                print(
                    f"round {round_ + 1}/{args.rounds} {condition:17s} "
                    f"{row['steps_per_s'][-1]:7.2f} steps/s{note} "
                    f"({trainer.num_gaussians} Gaussians)",
                    flush=True,
                )
            report(round_ + 1)
    finally:
        trainer.stop()
        for client in pool:
            client.close()
    if trainer.error is not None:
        raise RuntimeError("training failed during the benchmark") from trainer.error

    summary = report(args.rounds)
    for condition, entry in summary.items():
        frames = entry.get("frames_per_s_median")
        extra = f", {frames:.1f} frames/s" if frames is not None else ""
        print(
            f"{condition:17s} {entry['steps_per_s_median']:7.2f} steps/s "
            f"({100 * entry['throughput_vs_headless']:.0f} % of headless; paired rounds "
            f"{100 * entry['throughput_vs_headless_paired_median']:.0f} %"
            + (
                f", mean {100 * entry['throughput_vs_headless_paired_mean']:.1f}"
                f" ± {100 * entry['throughput_vs_headless_paired_se']:.1f} %"
                if "throughput_vs_headless_paired_se" in entry
                else ""
            )
            + f"; CPU time per step "
            f"{100 * entry['cpu_per_step_vs_headless']:.0f} % of headless){extra}"
        )
        if "train_thread_cpu_s_per_step_median" in entry:
            ms = 1000 * entry["train_thread_cpu_s_per_step_median"]
            print(
                f"{'':17s} training thread: {ms:.2f}"
                f" ms CPU per step, busy {100 * entry['train_thread_cpu_share_median']:.0f} %"
                + (
                    f"; viewer thread busy {100 * entry['viewer_thread_cpu_share_median']:.0f} %"
                    if "viewer_thread_cpu_share_median" in entry
                    else ""
                )
            )
    print(f"wrote {path}")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
