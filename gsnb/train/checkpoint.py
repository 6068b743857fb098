"""Trainer checkpoints: one file, written atomically, read back as data (``weights_only=True``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from gsnb.utils.atomic import atomic_write

CHECKPOINT_FORMAT = "gsnb-trainer-1"
REQUIRED_KEYS = ("step", "config", "strategy", "splats", "optimizer", "rng", "data_order")


class CheckpointError(ValueError):
    """A checkpoint file is unreadable, corrupt, or not a gsnb trainer checkpoint."""


def to_cpu(obj: Any) -> Any:
    """A copy of ``obj`` with every tensor (in dicts, lists, tuples) detached and on the CPU.

    Example:
        >>> import torch
        >>> to_cpu({"a": [torch.ones(1, requires_grad=True)]})["a"][0].requires_grad
        False
    """
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def write_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` (tensors and plain types) to ``path`` atomically.

    On any failure (full disk, unwritable folder) the previous file at ``path``
    is left as it was, no partial file remains, and ``OSError`` says why.

    Example:
        >>> import tempfile, pathlib
        >>> p = write_checkpoint(pathlib.Path(tempfile.mkdtemp()) / "c.pt", {"step": 1})
        >>> p.name
        'c.pt'
    """
    target = Path(path)
    body = {"format": CHECKPOINT_FORMAT, **payload}
    try:
        with atomic_write(target, "wb") as handle:
            torch.save(body, handle)
    except (
        OSError,
        RuntimeError,
    ) as err:  # torch's zip writer reports write errors as RuntimeError
        raise OSError(
            f"could not write checkpoint {target}: {err}. Any previous checkpoint there is "
            "unchanged; free disk space or choose a writable folder"
        ) from err
    return target


def read_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a trainer checkpoint onto the CPU, as data only (no code runs).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: the file is truncated, corrupt, or not a trainer checkpoint.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "bad.pt"
        >>> _ = p.write_bytes(b"not a checkpoint")
        >>> read_checkpoint(p)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        gsnb.train.checkpoint.CheckpointError: ... is not a readable checkpoint ...
    """
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"checkpoint {source} does not exist")
    try:
        payload = torch.load(source, map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointError(
            f"{source} is not a readable checkpoint (truncated or corrupt: {err}); "
            "use an earlier checkpoint or train again"
        ) from err
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(
            f"{source} is not a gsnb trainer checkpoint (format {found!r}, expected "
            f"{CHECKPOINT_FORMAT!r}); a model-only file loads with GaussianModel.load"
        )
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {source} lacks {missing}; it is incomplete")
    return payload
