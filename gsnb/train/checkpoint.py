"""Trainer checkpoints: one file, written atomically, read back as data (``weights_only=True``).

:func:`training_payload` takes a copy of a run's whole state (model, Adam,
strategy, step, settings, random streams, view order), :func:`write_checkpoint`
writes it, :func:`read_training_state` reads it back as a :class:`TrainingState`
whose methods put each piece back into a new run.
"""

from __future__ import annotations

import os
import warnings
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
from gsnb.train.strategy import Strategy, make_strategy
from gsnb.utils.atomic import atomic_write

if TYPE_CHECKING:
    from gsnb.data.dataset import View

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

    Missing folders are made. On any failure (full disk, unwritable folder) the
    previous file at ``path`` is left as it was, no partial file remains, and
    ``OSError`` says why.

    Example:
        >>> import tempfile, pathlib
        >>> p = write_checkpoint(pathlib.Path(tempfile.mkdtemp()) / "c.pt", {"step": 1})
        >>> p.name
        'c.pt'
    """
    target = Path(path)
    body = {"format": CHECKPOINT_FORMAT, **payload}
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(target, "wb") as handle:
            torch.save(body, handle)
    # torch's zip writer reports write errors as RuntimeError
    except (OSError, RuntimeError) as err:
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
) -> dict[str, Any]:
    """A copy on the CPU of a run's whole state, laid out as a checkpoint holds it.

    ``generator`` is the run's device generator (random backgrounds, the
    strategy's noise); ``views`` are the training views, named so that a resume
    on other data is refused. Take it while the run is between two steps, then
    write it with :func:`write_checkpoint`.

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
    return {
        "gsnb_version": __version__,
        "step": int(step),
        "config": config.to_dict(),
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
            "order": order["order"],
            "pos": order["pos"],
        },
        "skipped_steps": int(skipped_steps),
        "pending_knobs": dict(pending_knobs or {}),
        "background": list(model.background),
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
    def pending_knobs(self) -> dict[str, Any]:
        """Knob changes that were queued for the next step."""
        return dict(self.payload.get("pending_knobs") or {})

    def check_views(self, views: Sequence[View]) -> None:
        """Raise :class:`CheckpointError` unless ``views`` are the training views, same sizes."""
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


def read_training_state(path: str | os.PathLike[str]) -> TrainingState:
    """Read a trainer checkpoint and check its settings and Gaussians.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: the file is unreadable, or holds invalid settings or tensors.

    See :func:`training_payload` for an example.
    """
    payload = read_checkpoint(path)
    try:
        config = TrainConfig.from_dict(dict(payload["config"]))
        settings = dict(payload["strategy"]["settings"])
        strategy = make_strategy(settings.pop("name"), **settings)
        model = GaussianModel(payload["splats"], payload.get("background", (0.0, 0.0, 0.0)))
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(
            f"checkpoint {path} holds invalid settings or tensors: {err}"
        ) from err
    return TrainingState(str(path), config, strategy, model, payload)
