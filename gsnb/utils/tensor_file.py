"""Read files of tensors that users share (checkpoints) as data, with bounded memory.

``torch.load(..., weights_only=True)`` runs no code from the file, but a tensor in it may
still be a view that reads one stored element many times (stride 0): a file of a few bytes
can then describe a tensor of billions of elements, and the first copy of it (``clone``,
``contiguous``, moving it to a GPU) allocates them all; so can many tensors that read one
stored block. :func:`load_tensor_file` refuses such files, so that copying every tensor it
returns costs at most the bytes the file stores.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

_MAX_DEPTH = 64  # a checkpoint nests a few levels; deeper is a crafted file


class MalformedTensorFile(ValueError):
    """A file of tensors that no gsnb version writes: one would cost unbounded memory."""


def _leaves(payload: Any, where: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """``(where, tensor)`` for each tensor in ``payload``'s dicts, lists and tuples, and
    ``(where, None)`` where the nesting goes deeper than a gsnb file's."""
    if depth > _MAX_DEPTH:
        yield where or "the top level", None
    elif isinstance(payload, Tensor):
        yield where or "the top level", payload
    elif isinstance(payload, (dict, list, tuple)):
        items = payload.items() if isinstance(payload, dict) else enumerate(payload)
        for key, value in items:
            yield from _leaves(value, f"{where}[{key!r}]", depth + 1)


def overlapping_tensor(payload: Any) -> str | None:
    """Where in ``payload`` a tensor holds more elements than its storage, or None.

    A tensor of ``n`` elements that is not sparse needs ``n`` distinct stored elements
    unless some of its strides repeat them (an ``expand``-ed view); one saved that way
    reads fewer bytes from the file than it will take once copied. Sparse or other
    non-strided layouts, and nesting deeper than a gsnb file's, are refused too.

    Example:
        >>> import torch
        >>> overlapping_tensor({"a": torch.zeros(4, 3)}) is None
        True
        >>> overlapping_tensor({"a": [torch.zeros(1).expand(1000)]})
        "['a'][0]"
    """
    for where, tensor in _leaves(payload):
        if tensor is None or tensor.layout != torch.strided:
            return where
        stored = tensor.untyped_storage().nbytes() // max(tensor.element_size(), 1)
        if tensor.numel() > stored:
            return where
    return None


def repeated_bytes(payload: Any) -> int:
    """Bytes by which ``payload``'s tensors exceed the distinct storages they read (0 for a
    file whose tensors each read their own elements, as gsnb's do).

    Example:
        >>> import torch
        >>> block = torch.zeros(1000)
        >>> repeated_bytes({"a": block, "b": block[:10]})
        40
        >>> repeated_bytes({"a": torch.zeros(1000), "b": torch.zeros(10)})
        0
    """
    storages: dict[tuple[int, int], int] = {}
    total = 0
    for _, tensor in _leaves(payload):
        if tensor is not None and tensor.layout == torch.strided:
            storage = tensor.untyped_storage()
            storages[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
            total += tensor.numel() * tensor.element_size()
    return max(0, total - sum(storages.values()))


def load_tensor_file(path: str | os.PathLike[str], map_location: Any = "cpu") -> Any:
    """``torch.load`` of ``path`` as data (``weights_only=True``), refusing tensors that
    would take more memory once copied than the file stores for them.

    Raises:
        MalformedTensorFile: a tensor in the file reads its stored elements more than once
            (the message names where), or is not a dense tensor, or is nested implausibly
            deep, or several tensors read the same stored bytes.
        Exception: whatever ``torch.load`` raises for a file it cannot read.

    Example:
        >>> import tempfile, torch
        >>> path = tempfile.mkdtemp() + "/t.pt"
        >>> torch.save({"x": torch.arange(3.0)}, path)
        >>> load_tensor_file(path)["x"].tolist()
        [0.0, 1.0, 2.0]
    """
    payload = torch.load(path, map_location="cpu", weights_only=True)
    where = overlapping_tensor(payload)
    if where is not None:
        raise MalformedTensorFile(
            f"{os.fspath(path)} is malformed: the tensor at {where} repeats its stored "
            "elements (or is not a dense tensor), so copying it could take far more memory "
            "than the file holds; gsnb never writes such a file. Use the file as it was "
            "written, or train again"
        )
    extra = repeated_bytes(payload)
    if extra:
        raise MalformedTensorFile(
            f"{os.fspath(path)} is malformed: its tensors read the same stored bytes more "
            f"than once ({extra} bytes more than it stores), so copying them could take far "
            "more memory than the file holds; gsnb never writes such a file. Use the file as "
            "it was written, or train again"
        )
    if map_location in (None, "cpu") or str(map_location) == "cpu":
        return payload
    return _moved(payload, torch.device(map_location))


def file_kind(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it is plainly not a file of tensors (``torch.save`` writes a zip
    archive), in words; None for a zip archive or a file that cannot be opened.

    Example:
        >>> import tempfile
        >>> path = tempfile.mkdtemp() + "/notes.pt"
        >>> _ = open(path, "w").write('{"a": 1}')
        >>> print(file_kind(path))
        a file of another format (it starts with b'{"a"')
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
    except OSError:
        return None
    if head.startswith(b"PK"):
        return None
    if head.startswith(b"ply"):
        return "a PLY file (exported Gaussians)"
    if head.startswith(b"\x80"):
        return "a pickle, which gsnb never loads"
    return f"a file of another format (it starts with {head[:4]!r})"


def load_failure(err: BaseException) -> str:
    """Why ``torch.load`` could not read a file, in one short clause: its first sentence,
    without its advice to load the file as code.

    Example:
        >>> load_failure(RuntimeError("PytorchStreamReader failed reading zip archive: "
        ...     "failed finding central directory. This is an internal miniz error."))
        'PytorchStreamReader failed reading zip archive: failed finding central directory'
    """
    text = str(err).strip()
    if text.startswith("Weights only load failed"):
        return "it holds objects other than tensors and plain data, which gsnb never loads"
    first = text.split(". ")[0].splitlines()[0].rstrip(".") if text else type(err).__name__
    return first if len(first) <= 200 else first[:199] + "…"


def _moved(payload: Any, device: torch.device) -> Any:
    """``payload`` with each tensor on ``device`` (after the check, so each copy is bounded)."""
    if isinstance(payload, Tensor):
        return payload.to(device)
    if isinstance(payload, dict):
        return {k: _moved(v, device) for k, v in payload.items()}
    if isinstance(payload, list):
        return [_moved(v, device) for v in payload]
    if isinstance(payload, tuple):
        return tuple(_moved(v, device) for v in payload)
    return payload
