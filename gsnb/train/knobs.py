"""Live knobs: dataclass fields a user may change while training runs.

A knob is a dataclass field declared with :func:`knob`; its documentation is
the field's entry in the class docstring's ``Attributes:`` section, so the
docstring stays the one place a knob is described. :func:`describe_knobs`
turns the knobs of a config object into :class:`Knob` records from which a
widgets panel or a viser GUI can build its controls, and :func:`check_value`
validates a new value before it is queued.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

COUNT_LIMIT = 10**9
"""Largest step count or interval a knob takes unless its own range says more."""


def knob(
    default: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    log: bool = False,
    choices: tuple[str, ...] | None = None,
    live: bool = True,
) -> Any:
    """A dataclass field that is also a knob.

    Args:
        default: the default value (int, float, bool or str).
        low, high: inclusive bounds for numbers (``None``: unbounded).
        log: a slider for it should move on a log scale (learning rates).
        choices: the allowed values of a string knob.
        live: whether it may change while training runs (``False``: only at start).

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Demo:
        ...     '''Attributes:
        ...         rate: How fast (default 0.1).
        ...     '''
        ...     rate: float = knob(0.1, low=0.0, high=1.0)
        >>> [k.name for k in describe_knobs(Demo())]
        ['rate']
    """
    meta = {"knob": True, "low": low, "high": high, "log": log, "choices": choices, "live": live}
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Knob:
    """The description of one settable knob.

    Attributes:
        name: keyword for ``Trainer.set(name=value)``.
        group: ``"train"`` (the :class:`~gsnb.train.config.TrainConfig`) or
            ``"strategy"`` (the densification strategy).
        type: ``"float"``, ``"int"``, ``"bool"`` or ``"str"``.
        value: current value.
        default: default value.
        low, high: inclusive bounds (numbers), ``None`` when unbounded.
        log: a slider should move on a log scale.
        choices: allowed values of a string knob.
        doc: the field's documentation.

    Example:
        >>> Knob("ssim_lambda", "train", "float", 0.2, 0.2, 0.0, 1.0, False, None, "weight").type
        'float'
    """

    name: str
    group: str
    type: str
    value: Any
    default: Any
    low: float | None
    high: float | None
    log: bool
    choices: tuple[str, ...] | None
    doc: str


def attribute_docs(cls: type) -> dict[str, str]:
    """Parse the ``Attributes:`` section of ``cls``'s docstring into ``{name: text}``.

    Example:
        >>> class A:
        ...     '''Attributes:
        ...         x: first
        ...             line two.
        ...         y: second.
        ...     '''
        >>> attribute_docs(A)
        {'x': 'first line two.', 'y': 'second.'}
    """
    doc = inspect.getdoc(cls) or ""
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        return {}
    docs: dict[str, list[str]] = {}
    current: str | None = None
    indent: int | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width < indent:
            break
        match = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)", line)
        if width == indent and match:
            current = match.group(1)
            docs[current] = [match.group(2).strip()]
        elif current is not None:
            docs[current].append(line.strip())
    return {k: " ".join(v).strip() for k, v in docs.items()}


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "str"


def describe_knobs(obj: Any, group: str = "train", live_only: bool = True) -> list[Knob]:
    """The knobs of the dataclass instance ``obj``, in field order.

    Example:
        >>> from gsnb.train.config import TrainConfig
        >>> k = {k.name: k for k in describe_knobs(TrainConfig())}["ssim_lambda"]
        >>> k.value, k.low, k.high
        (0.2, 0.0, 1.0)
    """
    docs = attribute_docs(type(obj))
    out = []
    for f in dataclasses.fields(obj):
        meta = f.metadata
        if not meta.get("knob") or (live_only and not meta.get("live", True)):
            continue
        out.append(
            Knob(
                name=f.name,
                group=group,
                type=_type_name(f.default),
                value=getattr(obj, f.name),
                default=f.default,
                low=meta.get("low"),
                high=meta.get("high"),
                log=bool(meta.get("log")),
                choices=meta.get("choices"),
                doc=docs.get(f.name, ""),
            )
        )
    return out


def check_value(k: Knob, value: Any) -> Any:
    """``value`` converted to the knob's type; ``ValueError`` naming the knob when it does not fit.

    Example:
        >>> k = Knob("steps", "train", "int", 10, 10, 1, None, False, None, "")
        >>> check_value(k, 20.0)
        20
    """
    value = _plain(value)
    if k.type == "bool":
        if not isinstance(value, (bool, int)) or value not in (0, 1, True, False):
            raise ValueError(f"knob {k.name} takes True or False, got {value!r}")
        return bool(value)
    if k.type == "str":
        if not isinstance(value, str) or (k.choices is not None and value not in k.choices):
            raise ValueError(f"knob {k.name} takes one of {list(k.choices or [])}, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"knob {k.name} takes a {k.type}, got {value!r}")
    if k.type == "int":
        if not math.isfinite(value) or float(value) != int(value):
            raise ValueError(f"knob {k.name} takes an int, got {value!r}")
        value = int(value)
        if abs(value) > COUNT_LIMIT and (k.high is None or value > k.high):
            raise ValueError(
                f"knob {k.name}={value!r} is beyond any run (at most {COUNT_LIMIT:.0e})"
            )
    else:
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"knob {k.name} takes a finite number, got {value!r}")
    if (k.low is not None and value < k.low) or (k.high is not None and value > k.high):
        lo = "-inf" if k.low is None else k.low
        hi = "inf" if k.high is None else k.high
        raise ValueError(f"knob {k.name}={value!r} is outside its range [{lo}, {hi}]")
    return value


@contextlib.contextmanager
def named_as_options() -> Iterator[None]:
    """Settings made from a command line's options: a ``ValueError`` raised in the block
    names them as the command line does, each ``knob name=value`` as ``--name value`` and
    each other ``knob name`` as ``--name``.

    Example:
        >>> from gsnb.train.config import TrainConfig
        >>> with named_as_options():
        ...     TrainConfig(downscale=0)
        Traceback (most recent call last):
        ...
        ValueError: --downscale 0 is outside its range [1, inf]
    """

    def option(match: re.Match) -> str:
        name = "--" + match[1].replace("_", "-")
        return name if match[2] is None else f"{name} {match[2]}"

    try:
        yield
    except ValueError as err:
        raise ValueError(re.sub(r"\bknob (\w+)(?:=(\S+))?", option, str(err))) from err


def check_fields(obj: Any, group: str = "train") -> None:
    """Validate (and convert in place) every knob field of the dataclass instance ``obj``,
    then the order its ``ORDERED`` pairs require (:func:`check_order`).

    Example:
        >>> from gsnb.train.config import TrainConfig
        >>> TrainConfig(steps=0)
        Traceback (most recent call last):
        ...
        ValueError: knob steps=0 is outside its range [1, inf]
    """
    for k in describe_knobs(obj, group, live_only=False):
        object.__setattr__(obj, k.name, check_value(k, k.value))
    check_order(obj)


def check_order(obj: Any) -> None:
    """Raise ``ValueError`` unless ``obj``'s knobs keep the order its ``ORDERED`` rules state.

    A rule ``(a, "<", b)`` or ``(a, "<=", b)`` relates two knobs that are valid alone but
    can contradict each other (densification that stops before it starts, an opacity
    reset at every densification); the message names both and their values.

    Example:
        >>> from gsnb.train.strategy import DefaultStrategy
        >>> DefaultStrategy(refine_start_iter=5000, refine_stop_iter=1000)
        Traceback (most recent call last):
        ...
        ValueError: refine_start_iter=5000 must not exceed refine_stop_iter=1000
    """
    for first, op, second in getattr(obj, "ORDERED", ()):
        a, b = getattr(obj, first), getattr(obj, second)
        if op == "<" and not a < b:
            raise ValueError(f"{first}={a!r} must be below {second}={b!r}")
        if op == "<=" and not a <= b:
            raise ValueError(f"{first}={a!r} must not exceed {second}={b!r}")


def _plain(value: Any) -> Any:
    """A numpy scalar or a 0-d array or tensor as the Python number it holds."""
    if not isinstance(value, (bool, int, float, str)) and getattr(value, "ndim", None) == 0:
        item = getattr(value, "item", None)
        if callable(item):
            return item()
    return value
