"""Trainer checkpoints: one file, written atomically, read back as data (``weights_only=True``).

:func:`training_payload` takes a copy of a run's whole state (model, Adam,
strategy, step, settings, random streams, view order), :func:`write_checkpoint`
writes it, :func:`read_training_state` reads it back as a :class:`TrainingState`
whose methods put each piece back into a new run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import warnings
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from gsnb._version import __version__
from gsnb.model import GaussianModel
from gsnb.train.config import TrainConfig
from gsnb.train.inputs import ViewOrder
from gsnb.train.optim import means_decay_steps
from gsnb.train.strategy import Strategy, make_strategy
from gsnb.train.strategy.default import THREE_DGS_SCHEDULE
from gsnb.utils.atomic import atomic_write, make_temporary
from gsnb.utils.tensor_file import (
    MalformedTensorFile,
    file_kind,
    load_failure,
    load_tensor_file,
)

if TYPE_CHECKING:
    from gsnb.data.dataset import View

CHECKPOINT_FORMAT = "gsnb-trainer-1"
REQUIRED_KEYS = ("step", "config", "strategy", "splats", "optimizer", "rng", "data_order")
UNCHECKED = ("format", "checksum")
"""The parts of a checkpoint its checksum does not cover; it covers every other, tensors and
plain values alike."""
NEWEST_NAME = "checkpoint.pt"
"""The newest checkpoint of a run folder."""
HISTORY_DIR = "checkpoints"
"""The folder beside ``checkpoint.pt`` that keeps the run's recent checkpoints."""
_HISTORY_NAME = re.compile(r"step_(\d+)\.pt")


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


def tensor_checksum(obj: Any) -> int:
    """CRC-32 of ``obj``: every tensor's bytes and every other value's text (dicts in key
    order, lists in order).

    It detects a flipped bit on disk or in transfer; it is not a defence against tampering.

    Example:
        >>> import torch
        >>> a = {"x": torch.ones(3), "y": [torch.zeros(2, dtype=torch.int64)]}
        >>> tensor_checksum(a) == tensor_checksum({"y": [torch.zeros(2, dtype=torch.int64)],
        ...                                        "x": torch.ones(3)})
        True
        >>> tensor_checksum(a) == tensor_checksum({"x": torch.ones(3) * 2, "y": a["y"]})
        False
    """
    crc = 0

    def walk(value: Any) -> None:
        nonlocal crc
        if isinstance(value, torch.Tensor):
            flat = value.detach().to("cpu").contiguous().reshape(-1)
            crc = zlib.crc32(flat.view(torch.uint8).numpy(), crc)
        elif isinstance(value, dict):
            for key in sorted(value, key=str):
                crc = zlib.crc32(str(key).encode(), crc)
                walk(value[key])
        elif isinstance(value, (list, tuple)):
            crc = zlib.crc32(f"[{len(value)}".encode(), crc)
            for item in value:
                walk(item)
        else:  # numbers, strings, None: their text
            crc = zlib.crc32(repr(value).encode(), crc)

    walk(obj)
    return crc


def payload_bytes(payload: Any) -> int:
    """Bytes of the tensors in ``payload``: about the size of its checkpoint file.

    Example:
        >>> import torch
        >>> payload_bytes({"a": torch.zeros(10), "b": [torch.zeros(2, dtype=torch.int64)]})
        56
    """
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, dict):
        return sum(payload_bytes(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(payload_bytes(v) for v in payload)
    return 0


def write_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` (tensors and plain types) to ``path`` atomically, with a checksum.

    Missing folders are made. On any failure (full disk, unwritable folder) the
    previous file at ``path`` is left as it was, no partial file remains, and
    ``OSError`` says why; a full disk is named as such with the bytes needed.

    Example:
        >>> import tempfile, pathlib
        >>> p = write_checkpoint(pathlib.Path(tempfile.mkdtemp()) / "c.pt", {"step": 1})
        >>> p.name
        'c.pt'
    """
    target = Path(path)
    body = {"format": CHECKPOINT_FORMAT, **payload}
    body["checksum"] = tensor_checksum({k: v for k, v in body.items() if k not in UNCHECKED})
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(target, "wb") as handle:
            torch.save(body, handle)
    # torch's zip writer reports write errors as RuntimeError
    except (OSError, RuntimeError) as err:
        raise OSError(_write_failure(target, payload_bytes(body), err)) from err
    return target


def _write_failure(target: Path, needed: int, err: BaseException) -> str:
    """Why writing ``target`` failed, in words: a full disk says so, with the bytes."""
    free = _free_bytes(target.parent)
    full = any(getattr(e, "errno", None) == errno.ENOSPC for e in _chain(err))
    if full or (free is not None and free < needed):
        return (
            f"could not write checkpoint {target}: no space left on device (it needs about "
            f"{needed / 2**20:.1f} MB, {0 if free is None else free / 2**20:.1f} MB are free). "
            "Any previous checkpoint there is unchanged; free disk space or choose another folder"
        )
    return (
        f"could not write checkpoint {target}: {err}. Any previous checkpoint there is "
        "unchanged; free disk space or choose a writable folder"
    )


def _chain(err: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while err is not None and err not in seen:
        seen.append(err)
        err = err.__cause__ or err.__context__
    return seen


def _free_bytes(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def save_with_history(folder: Path, payload: dict[str, Any], keep: int) -> Path:
    """Write the run's checkpoint ``folder/checkpoint.pt`` and keep the ``keep`` newest.

    The checkpoint goes to ``folder/checkpoints/step_0001234.pt``; ``checkpoint.pt``
    then becomes the same file (a hard link, or a copy where links are not supported),
    replaced in one step; the oldest beyond ``keep`` are removed. A kill at any moment
    leaves ``checkpoint.pt`` whole: the new one or the one before.

    Example:
        >>> import tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> for step in (10, 20, 30):
        ...     _ = save_with_history(folder, {"step": step}, keep=2)
        >>> sorted(p.name for p in (folder / "checkpoints").iterdir())
        ['step_0000020.pt', 'step_0000030.pt']
        >>> read_checkpoint(folder / "checkpoint.pt", check=False)["step"]
        30
    """
    step = int(payload["step"])
    # Checkpoints beyond this step belong to a branch this run left (it resumed from an
    # earlier one): they are not newer, whatever their step says.
    for later in history(folder):
        if int(_HISTORY_NAME.fullmatch(later.name).group(1)) > step:
            with contextlib.suppress(OSError):
                later.unlink()
    stored = write_checkpoint(folder / HISTORY_DIR / f"step_{step:07d}.pt", payload)
    newest = folder / NEWEST_NAME
    fd, tmp = make_temporary(newest)
    os.close(fd)
    try:
        os.unlink(tmp)
        try:
            os.link(stored, tmp)
        except OSError:
            shutil.copyfile(stored, tmp)
        os.replace(tmp, newest)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OSError(_write_failure(newest, stored.stat().st_size, err)) from err
    for old in history(folder)[:-keep]:
        with contextlib.suppress(OSError):
            old.unlink()
    return newest


def history(folder: Path) -> list[Path]:
    """The checkpoints in ``folder/checkpoints``, oldest first (by step).

    Example:
        >>> import tempfile, pathlib
        >>> history(pathlib.Path(tempfile.mkdtemp()))
        []
    """
    kept = folder / HISTORY_DIR
    if not kept.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in kept.iterdir() if (m := _HISTORY_NAME.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def newest_checkpoint(path: str | os.PathLike[str]) -> Path:
    """The checkpoint to resume: ``path`` itself when a file, else the newest readable one of
    the run folder ``path`` (``checkpoint.pt``, then ``checkpoints/`` newest first).

    A damaged file is skipped with a warning that names it and what was wrong.

    Raises:
        FileNotFoundError: nothing to resume there.
        CheckpointError: every checkpoint there is damaged.

    Example:
        >>> import tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = save_with_history(folder, {"step": 5, **{k: {} for k in REQUIRED_KEYS[1:]}}, 3)
        >>> newest_checkpoint(folder).name
        'checkpoint.pt'
    """
    source = Path(path)
    if not source.is_dir():
        return source
    candidates = [source / NEWEST_NAME, *reversed(history(source))]
    candidates = [c for c in candidates if c.is_file()]
    if not candidates:
        raise FileNotFoundError(
            f"{source} holds no checkpoint (checkpoint.pt or {HISTORY_DIR}/step_*.pt) to resume"
        )
    problems, damaged = [], []
    for candidate in candidates:
        try:
            read_checkpoint(candidate)
        except CheckpointError as err:
            problems.append(str(err))
            damaged.append(candidate.relative_to(source).as_posix())
            continue
        if damaged:
            where = candidate.relative_to(source).as_posix()
            warnings.warn(
                f"{', '.join(damaged)} in {source} {'is' if len(damaged) == 1 else 'are'} "
                f"damaged; resuming from {where}, the newest intact checkpoint",
                stacklevel=2,
            )
        return candidate
    raise CheckpointError(f"every checkpoint in {source} is damaged: " + "; ".join(problems))


def read_checkpoint(path: str | os.PathLike[str], check: bool = True) -> dict[str, Any]:
    """Read a trainer checkpoint onto the CPU, as data only (no code runs).

    With ``check``, its required parts and the checksum of its tensors are checked (a
    file written before checksums existed has none to check).

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
        gsnb.train.checkpoint.CheckpointError: ... is not a gsnb checkpoint: ...
    """
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"checkpoint {source} does not exist")
    kind = file_kind(source)
    if kind is not None:
        raise CheckpointError(
            f"{source} is not a gsnb checkpoint: it is {kind}. A run resumes from the "
            "checkpoint.pt in its --out folder (or from that folder)"
        )
    try:
        payload = load_tensor_file(source)
    except MalformedTensorFile as err:
        raise CheckpointError(str(err)) from err
    except Exception as err:
        raise CheckpointError(
            f"{source} is not a readable checkpoint (truncated or corrupt: {load_failure(err)}); "
            "use an earlier checkpoint or train again"
        ) from err
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(
            f"{source} is not a gsnb trainer checkpoint (format {found!r}, expected "
            f"{CHECKPOINT_FORMAT!r}); a model-only file loads with GaussianModel.load"
        )
    if not check:
        return payload
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {source} lacks {missing}; it is incomplete")
    saved = payload.get("checksum")
    covered = {k: v for k, v in payload.items() if k not in UNCHECKED}
    if saved is not None and saved != tensor_checksum(covered):
        raise CheckpointError(
            f"checkpoint {source} is corrupt: its checksum does not match (a "
            "damaged disk or copy); use an earlier checkpoint (its run folder's "
            f"{HISTORY_DIR}/, or --resume FOLDER picks the newest intact one)"
        )
    return payload


def _poses(views: Sequence[View]) -> Tensor:
    """The views' world-to-camera matrices ``[V, 4, 4]`` in float64 on the CPU."""
    if not views:
        return torch.zeros(0, 4, 4, dtype=torch.float64)
    return torch.stack([v.viewmat.detach().double().cpu().reshape(4, 4) for v in views])


def training_payload(
    *,
    step: int,
    config: TrainConfig,
    strategy: Strategy,
    strategy_state: Mapping[str, Any],
    model: GaussianModel,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    view_order: ViewOrder,
    views: Sequence[View],
    skipped_steps: int = 0,
    pending_knobs: Mapping[str, Any] | None = None,
    seconds: float = 0.0,
    corrections: Mapping[str, Any] | None = None,
    filter3d: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A copy on the CPU of a run's whole state, laid out as a checkpoint holds it.

    ``generator`` is the run's device generator (random backgrounds, the
    strategy's noise); ``views`` are the training views, named so that a resume
    on other data is refused; ``seconds`` is the training time of the whole run so
    far; ``corrections`` holds the learned exposures and pose corrections with their
    Adam states (``ViewCorrections.state_dict``); ``filter3d`` the 3D filter's variances in
    use (``Filter3D.state_dict``). Take it while the run is between
    two steps, then write it with :func:`write_checkpoint`.

    Example:
        >>> import tempfile, pathlib, torch
        >>> from gsnb.train.optim import learning_rates, make_optimizer
        >>> from gsnb.train.strategy import DefaultStrategy
        >>> config, strategy = TrainConfig(), DefaultStrategy()
        >>> model = GaussianModel.from_points(torch.rand(10, 3), torch.rand(10, 3))
        >>> optimizer = make_optimizer(model.splats, learning_rates(config, 0, 1.0))
        >>> payload = training_payload(
        ...     step=0, config=config, strategy=strategy, model=model, optimizer=optimizer,
        ...     strategy_state=strategy.initialize_state(1.0), generator=torch.Generator(),
        ...     view_order=ViewOrder(2, seed=0), views=[])
        >>> path = write_checkpoint(pathlib.Path(tempfile.mkdtemp()) / "c.pt", payload)
        >>> read_training_state(path).model.num_gaussians
        10
    """
    order = view_order.state()
    # "the strategy's choice" (-1) is recorded as the period it stands for now, so that a
    # resume keeps the decay the run trained with if that choice changes later
    settings = config.to_dict()
    settings["lr_means_decay_steps"] = means_decay_steps(config, strategy.lr_means_decay_steps)
    return {
        "gsnb_version": __version__,
        "step": int(step),
        "config": settings,
        "strategy": {"settings": strategy.to_dict(), "state": to_cpu(dict(strategy_state))},
        "splats": to_cpu(dict(model.splats.items())),
        "optimizer": to_cpu(optimizer.state_dict()),
        "rng": {
            "device": generator.get_state(),
            "device_type": generator.device.type,
            "order": order["rng"],
        },
        "data_order": {
            "views": [v.name for v in views],
            "sizes": [[v.width, v.height] for v in views],
            # world-to-camera, so that a resume on moved cameras (another reconstruction, or
            # the data in another world frame) is refused rather than trained on
            "poses": _poses(views),
            "order": order["order"],
            "pos": order["pos"],
        },
        "skipped_steps": int(skipped_steps),
        "pending_knobs": dict(pending_knobs or {}),
        "background": list(model.background),
        "seconds": float(seconds),
        "corrections": to_cpu(dict(corrections or {})),
        "filter3d": to_cpu(dict(filter3d or {})),
    }


@dataclass
class TrainingState:
    """A trainer checkpoint, read and checked (:func:`read_training_state`).

    ``config``, ``strategy`` and ``model`` start the new run; the methods then
    put Adam's state, the strategy's state, the view order and the random
    streams back into it.

    Attributes:
        source: where it was read from (for messages).
        config: the run's settings.
        strategy: the densification strategy with its settings.
        model: the Gaussians.
        payload: the file's contents (:func:`training_payload`'s layout).
    """

    source: str
    config: TrainConfig
    strategy: Strategy
    model: GaussianModel
    payload: dict[str, Any]

    @property
    def step(self) -> int:
        """Steps done."""
        return int(self.payload["step"])

    @property
    def skipped_steps(self) -> int:
        """Updates skipped so far (non-finite loss or gradient)."""
        return int(self.payload.get("skipped_steps", 0))

    @property
    def seconds(self) -> float:
        """Training time of the run up to this checkpoint, all legs (0 when not recorded)."""
        return float(self.payload.get("seconds", 0.0))

    @property
    def pending_knobs(self) -> dict[str, Any]:
        """Knob changes that were queued for the next step."""
        return dict(self.payload.get("pending_knobs") or {})

    def check_views(self, views: Sequence[View]) -> None:
        """Raise :class:`CheckpointError` unless ``views`` are the training views, same sizes
        and (for checkpoints that record them) the same camera poses."""
        order = self.payload["data_order"]
        names = [v.name for v in views]
        if list(order["views"]) != names:
            raise CheckpointError(
                f"checkpoint {self.source} was trained on {len(order['views'])} views "
                f"({', '.join(list(order['views'])[:3])}, ...) but this dataset's training views "
                f"are {len(names)} ({', '.join(names[:3])}, ...); load the same data and split"
            )
        sizes = [[v.width, v.height] for v in views]
        saved = [list(size) for size in order.get("sizes", sizes)]
        if saved != sizes:
            first = next(i for i, (a, b) in enumerate(zip(saved, sizes, strict=True)) if a != b)
            raise CheckpointError(
                f"checkpoint {self.source} was trained on {names[first]} at "
                f"{saved[first][0]}x{saved[first][1]} px but the dataset has it at "
                f"{sizes[first][0]}x{sizes[first][1]}; load the data with the same downscale"
            )
        poses = order.get("poses")
        if poses is not None:
            saved_poses = torch.as_tensor(poses, dtype=torch.float64).reshape(-1, 4, 4)
            now = _poses(views)
            reach = float(saved_poses[:, :3, 3].abs().max()) if len(views) else 0.0
            moved = (saved_poses - now).abs().amax(dim=(1, 2)) > 1e-4 * max(1.0, reach)
            if bool(moved.any()):
                first = int(moved.nonzero()[0, 0])
                raise CheckpointError(
                    f"checkpoint {self.source} was trained with {names[first]} at another camera "
                    "pose than this dataset's (another reconstruction, or the data moved to "
                    "another world frame, e.g. by gsnb.data.normalize_world); load the data in "
                    "the frame it was trained in"
                )

    def restore_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Load Adam's state into ``optimizer`` (made for :attr:`model`); shapes are checked."""
        try:
            optimizer.load_state_dict(self.payload["optimizer"])
        except (KeyError, ValueError, TypeError) as err:
            raise CheckpointError(
                f"checkpoint {self.source} has an unusable optimizer state: {err}"
            ) from err
        for group in optimizer.param_groups:
            param = group["params"][0]
            for key, value in optimizer.state.get(param, {}).items():
                if key != "step" and isinstance(value, Tensor) and value.shape != param.shape:
                    raise CheckpointError(
                        f"checkpoint {self.source}: Adam state {key} of {group['name']} has shape "
                        f"{list(value.shape)} but the parameter has {list(param.shape)}"
                    )

    def restore_corrections(self, corrections: Any) -> None:
        """Continue the learned exposures and pose corrections (and their Adam states) in
        ``corrections`` (a ``ViewCorrections``); a checkpoint without them leaves them new."""
        saved = self.payload.get("corrections")
        if not saved:
            return
        try:
            corrections.load_state_dict(saved)
        except (KeyError, ValueError, TypeError, RuntimeError) as err:
            raise CheckpointError(
                f"checkpoint {self.source} has unusable exposure or pose corrections: {err}"
            ) from err

    def restore_filter3d(self, filter3d: Any, splats: Any) -> None:
        """Continue with the 3D filter's variances in use (``filter3d`` a ``Filter3D`` of the
        restored Gaussians ``splats``); a checkpoint without them recomputes them."""
        saved = self.payload.get("filter3d")
        if saved:
            filter3d.load_state_dict(saved, splats)

    def strategy_state(self, device: torch.device) -> dict[str, Any]:
        """The strategy's running state, its tensors on ``device``."""
        state = self.payload["strategy"]["state"]
        return {k: v.to(device) if isinstance(v, Tensor) else v for k, v in state.items()}

    def restore_random(self, view_order: ViewOrder, generator: torch.Generator) -> None:
        """Continue the view order and the device ``generator`` where the run left off.

        A generator on another kind of device than the saved one cannot take its
        state: it keeps its fresh seed, with a warning.
        """
        order, rng = self.payload["data_order"], self.payload["rng"]
        view_order.load_state({"order": order["order"], "pos": order["pos"], "rng": rng["order"]})
        if rng["device_type"] == generator.device.type:
            generator.set_state(rng["device"])
        else:
            warnings.warn(
                f"checkpoint {self.source} comes from a {rng['device_type']} run; on "
                f"{generator.device.type} its random draws continue from a fresh seed",
                stacklevel=4,
            )


SAVED_BEFORE: dict[str, dict[str, Any]] = {
    "config": {"lr_means_decay_steps": 0},
    "default": THREE_DGS_SCHEDULE,
}
"""What a setting was in a checkpoint saved before it was recorded: the behaviour of its time
(one decay of the means' rate over the run, 3DGS's densification schedule), not today's
default, so that an old run resumes as it began. Keyed by ``"config"`` or a strategy's name."""


def read_training_state(path: str | os.PathLike[str]) -> TrainingState:
    """Read a trainer checkpoint and check its settings and Gaussians.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: the file is unreadable, or holds invalid settings or tensors.

    See :func:`training_payload` for an example.
    """
    payload = read_checkpoint(path)
    try:
        config = TrainConfig.from_dict(SAVED_BEFORE["config"] | dict(payload["config"]))
        settings = dict(payload["strategy"]["settings"])
        name = settings.pop("name")
        strategy = make_strategy(name, **(SAVED_BEFORE.get(name, {}) | settings))
        model = GaussianModel(payload["splats"], payload.get("background", (0.0, 0.0, 0.0)))
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(
            f"checkpoint {path} holds invalid settings or tensors: {err}"
        ) from err
    return TrainingState(str(path), config, strategy, model, payload)
