"""The processes of a data-parallel run: who they are, and the collectives they share.

:func:`init_process_group` joins the default :mod:`torch.distributed` group that the
launcher (``gsnb train --nproc N``, ``torchrun``) set up through ``RANK``, ``WORLD_SIZE``
and ``LOCAL_RANK`` (NCCL on CUDA, gloo on the CPU); :class:`TorchProcessGroup` is what
the trainer's step uses of it (one flattened all_reduce of the gradients, sums, agreed
flags, process 0's objects). A collective that fails because a peer died raises
:class:`PeerLost`.

Example:
    >>> world_from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    WorldEnv(rank=1, world_size=2, local_rank=1)
    >>> world_from_env({}) is None
    True
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


@dataclasses.dataclass(frozen=True)
class WorldEnv:
    """This process's place among the workers, as the launcher's environment states it."""

    rank: int
    world_size: int
    local_rank: int


def world_from_env(environ: Mapping[str, str] | None = None) -> WorldEnv | None:
    """The ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` the launcher (or ``torchrun``) set; None
    when this process was not started by one. See the module example."""
    env = os.environ if environ is None else environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    return WorldEnv(rank, world, int(env.get("LOCAL_RANK", rank)))


class PeerLost(BaseException):
    """A collective failed: another worker died or left. This worker must stop too.

    A ``BaseException``, like ``KeyboardInterrupt``: no step or densification handler may
    take it for a recoverable error (and roll back to go on alone); the launcher reports
    which worker failed first.
    """


def collective(run: Callable[[], Any]) -> Any:
    """``run()``, a collective; a failure because a peer died becomes :class:`PeerLost`."""
    try:
        return run()
    except (dist.DistError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PeerLost(f"the connection to another worker broke ({first})") from err


class TorchProcessGroup:
    """The default :mod:`torch.distributed` process group as a :class:`batch.ProcessGroup`.

    Args:
        device: where collectives run: a CUDA device for NCCL, the CPU for gloo.

    Example (two processes started by a launcher):
        >>> group = init_process_group("cpu")  # doctest: +SKIP
        >>> group.rank, group.world_size  # doctest: +SKIP
        (0, 2)
    """

    def __init__(self, device: torch.device) -> None:
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.device = torch.device(device)

    def average(self, params: list[Tensor], terms: Tensor) -> Tensor:
        """Average every gradient of ``params`` and ``terms [K]`` in one all_reduce.

        The parameters without a gradient are the same in every process (the same
        graph), so the flattened buffers line up. Returns the averaged ``terms``.
        """
        grads = [p.grad for p in params if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads] + [terms.to(grads[0].dtype)])
        collective(lambda: dist.all_reduce(flat))
        flat.div_(self.world_size)
        start = 0
        for g in grads:
            g.copy_(flat[start : start + g.numel()].view_as(g))
            start += g.numel()
        return flat[start:].to(terms.dtype)

    def sum_(self, *tensors: Tensor) -> None:
        """Sum ``tensors`` over the processes, in place, in one all_reduce."""
        self._reduce_(tensors, dist.ReduceOp.SUM)

    def max_(self, *tensors: Tensor) -> None:
        """Take the elementwise maximum of ``tensors`` over the processes, in place, in one
        all_reduce."""
        self._reduce_(tensors, dist.ReduceOp.MAX)

    def _reduce_(self, tensors: tuple[Tensor, ...], op: dist.ReduceOp.RedOpType) -> None:
        flat = torch.cat([t.reshape(-1) for t in tensors])
        collective(lambda: dist.all_reduce(flat, op=op))
        start = 0
        for t in tensors:
            t.copy_(flat[start : start + t.numel()].view_as(t))
            start += t.numel()

    def any(self, *flags: bool) -> list[bool]:
        """Each flag, true when it is true in any process."""
        values = torch.tensor([float(f) for f in flags], device=self.device)
        collective(lambda: dist.all_reduce(values))
        return [v > 0 for v in values.tolist()]

    def from_rank0(self, value: Any) -> Any:
        """Process 0's ``value`` (any picklable object), in every process; a barrier too."""
        box = [value]
        collective(lambda: dist.broadcast_object_list(box, src=0))
        return box[0]


def init_process_group(device: str, timeout_s: float = 1800.0) -> TorchProcessGroup:
    """Join the launcher's workers: NCCL on this process's GPU, or gloo on the CPU.

    ``device`` is the run's ``TrainConfig.device`` (``"auto"``, ``"cuda"``, ``"cpu"``).
    With CUDA, ``LOCAL_RANK`` picks the GPU, which becomes the current device, so that
    the run's ``"cuda"`` tensors land on it.
    """
    world = world_from_env()
    if world is None:
        raise RuntimeError(
            "no RANK/WORLD_SIZE in the environment: start the workers with "
            "`gsnb train --nproc N` or torchrun"
        )
    on_cuda = device != "cpu" and torch.cuda.is_available()
    if on_cuda:
        if world.local_rank >= torch.cuda.device_count():
            raise RuntimeError(
                f"worker {world.local_rank} of this machine has no GPU "
                f"({torch.cuda.device_count()} visible); start at most that many processes"
            )
        torch.cuda.set_device(world.local_rank)
        comm = torch.device("cuda", world.local_rank)
    else:
        comm = torch.device("cpu")
        # Workers on one machine share its cores rather than each taking them all.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, world.world_size)))
    if not dist.is_initialized():
        dist.init_process_group(
            "nccl" if on_cuda else "gloo",
            timeout=timedelta(seconds=timeout_s),
            **({"device_id": comm} if on_cuda else {}),
        )
    return TorchProcessGroup(comm)


def destroy_process_group() -> None:
    """Leave the workers (when joined)."""
    if dist.is_initialized():
        dist.destroy_process_group()
