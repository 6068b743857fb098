"""Shared helpers of the GPU benchmarks: CUDA-event timing, memory, environment info."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
FOX = REPO.parent / "shared" / "data" / "fox"


def environment() -> dict[str, Any]:
    """GPU, driver-visible versions and the date, for the result JSON."""
    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info |= {
            "gpu": props.name,
            "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "compute_capability": f"{props.major}.{props.minor}",
        }
    try:
        import gsplat

        info["gsplat"] = gsplat.__version__
    except Exception:  # gsplat is optional outside the side-by-side runs
        info["gsplat"] = None
    return info


def cuda_time_ms(fn: Callable[[], Any], warmup: int = 3, repeat: int = 10) -> float:
    """Median milliseconds of ``fn`` over ``repeat`` runs after ``warmup``, by CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def peak_extra_mib(fn: Callable[[], Any]) -> float:
    """Peak memory allocated by ``fn`` above what was allocated before it, in MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR in dB of ``a`` against ``b``, both clamped to [0, 1]."""
    mse = torch.mean((a.clamp(0, 1).double() - b.clamp(0, 1).double()) ** 2).item()
    return float("inf") if mse == 0 else -10.0 * torch.log10(torch.tensor(mse)).item()


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    tmp.replace(path)


def host_table(work: Callable[[], Any], top: int = 40, by: tuple[str, ...] = ("tottime",)) -> str:
    """cProfile's table of the host functions of ``work()``, CUDA synchronised before and
    after (a wait for the GPU shows in the call that syncs), sorted by each of ``by``."""
    import cProfile
    import io
    import pstats

    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    work()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    for key in by:
        stats.sort_stats(key).print_stats(top)
    return text.getvalue()


def git_commit() -> str | None:
    """This checkout's commit (``-dirty`` when tracked files have changes), or None outside
    a git checkout.

    Example:
        >>> commit = git_commit()
        >>> commit is None or len(commit.removesuffix("-dirty")) == 40
        True
    """
    git = ["git", "-C", str(REPO)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")
