"""Start CUDA and load the refine step's kernels while the photos decode.

CUDA loads each kernel the first time it runs. Training runs gsnb's own kernels, so the
first refine step (step 600 by default) is the first to run torch's: exp, sigmoid,
reductions, norms, random draws, gathers. Loading them took that one step 170-310 ms on
an H200, against 6 ms for the refine steps after it. :func:`start_warming` runs a refine
step of eight made-up Gaussians in a background thread, with CUDA's start-up before it,
while ``gsnb train`` reads and decodes the dataset (torch and the image decoders let go
of the GIL while they work), so that training meets the kernels loaded.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

from gsnb.model import GaussianModel


def warm_refine(device: torch.device) -> tuple[int, int, int]:
    """Run :class:`~gsnb.train.strategy.DefaultStrategy`'s refine step once on eight
    made-up Gaussians (SH degree 3, as a run's) on ``device``, on a stream of its own, with
    a generator of its own: nothing of a run's state is touched. Returns the step's
    ``(cloned, split, pruned)``: all three happen, so that all their kernels load.

    Example:
        >>> import torch
        >>> warm_refine(torch.device("cpu"))
        (4, 4, 8)
    """
    from gsnb.train.strategy import DefaultStrategy

    gen = torch.Generator(device).manual_seed(0)
    points = torch.rand((8, 3), generator=torch.Generator().manual_seed(0))
    model = GaussianModel.from_points(points, torch.full((8, 3), 0.5)).to(device)
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        params = model.splats
        # four small (cloned), four large (split), two of each transparent (pruned)
        params["scales"].data.copy_(torch.tensor([-6.0] * 4 + [-3.5] * 4, device=device)[:, None])
        params["opacities"].data -= torch.tensor([8.0, 0.0] * 4, device=device)
        strategy = DefaultStrategy()
        state = strategy.initialize_state(scene_scale=1.0)
        state["grad2d"] = torch.ones(8, device=device)
        state["count"] = torch.ones(8, device=device)
        counts = strategy.refine(params, None, state, strategy.reset_every + 1, gen)
    if stream is not None:
        stream.synchronize()
    return counts


def start_warming(device: str) -> threading.Thread | None:
    """Start :func:`warm_refine` in a daemon thread where ``device`` (``"auto"``, ``"cuda"``
    or ``"cpu"``, as :class:`~gsnb.train.TrainConfig` takes it) means a CUDA GPU; returns
    the thread (join it before training) or None. The warm-up is an optimisation only: any
    error in it is dropped, and training then meets the same error where it would anyway.

    Example:
        >>> start_warming("cpu") is None
        True
    """
    if device == "cpu" or not torch.cuda.is_available():
        return None

    def work() -> None:
        with contextlib.suppress(Exception):  # best effort; the run reports its own errors
            warm_refine(torch.device("cuda", torch.cuda.current_device()))

    thread = threading.Thread(target=work, name="gsnb-warm-kernels", daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def warming(device: str, strategy: str = "default") -> Iterator[None]:
    """:func:`start_warming` for the ``with`` block (loading the data, say), joined when the
    block ends, however it ends: no thread is left in CUDA after it. Only for the default
    strategy, whose refine step it loads.

    Example:
        >>> with warming("cpu"):
        ...     pass
    """
    thread = start_warming(device) if strategy == "default" else None
    try:
        yield
    finally:
        if thread is not None:
            thread.join()
