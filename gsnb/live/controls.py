"""Which control fits a knob: the one mapping shared by the widgets panel and the viser viewer.

:func:`control_for` turns a :class:`~gsnb.train.knobs.Knob` into a
:class:`ControlSpec` (slider, log slider, number box, checkbox, dropdown,
colour picker or text box) with its range and step, so both front ends build
the same controls from ``trainer.knobs()``. Nothing here imports a GUI library.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from gsnb.train.knobs import Knob

# How many decades a log slider spans below the default when the knob's lower bound is 0.
LOG_DECADES_BELOW = 3
# Number of positions of a linear float slider.
SLIDER_POSITIONS = 1000
_HEX_COLOUR = re.compile(r"^#[0-9a-fA-F]{6}$")


@dataclass(frozen=True)
class ControlSpec:
    """The control for one knob.

    Attributes:
        kind: ``"slider"`` (linear, bounded), ``"log_slider"`` (bounded, log scale),
            ``"number"`` (a number box; ``low`` / ``high`` may be None),
            ``"checkbox"``, ``"dropdown"``, ``"color"`` (a ``#rrggbb`` string) or ``"text"``.
        low, high: the range the control offers (for ``log_slider``: in the knob's own
            units, not exponents).
        step: slider or number step (None: free).
        integer: the knob takes integers.
        options: the dropdown's choices.

    Example:
        >>> ControlSpec("checkbox").kind
        'checkbox'
    """

    kind: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    integer: bool = False
    options: tuple[str, ...] | None = None


def control_for(knob: Knob) -> ControlSpec:
    """The control that fits ``knob``: its type, bounds and scale.

    Example:
        >>> from gsnb.train.knobs import Knob
        >>> k = Knob("lr_scales", "train", "float", 5e-3, 5e-3, 0.0, 1.0, True, None, "")
        >>> spec = control_for(k)
        >>> spec.kind, spec.low, spec.high
        ('log_slider', 5e-06, 1.0)
    """
    if knob.type == "bool":
        return ControlSpec("checkbox")
    if knob.type == "str":
        if knob.choices:
            return ControlSpec("dropdown", options=tuple(knob.choices))
        if isinstance(knob.value, str) and _HEX_COLOUR.match(knob.value):
            return ControlSpec("color")
        return ControlSpec("text")
    integer = knob.type == "int"
    low, high = knob.low, knob.high
    if knob.log and not integer and high is not None:
        return ControlSpec("log_slider", low=_log_low(knob), high=float(high))
    if low is not None and high is not None:
        if integer:
            return ControlSpec("slider", low=low, high=high, step=1, integer=True)
        return ControlSpec(
            "slider", low=low, high=high, step=(high - low) / SLIDER_POSITIONS, integer=False
        )
    return ControlSpec("number", low=low, high=high, step=1 if integer else None, integer=integer)


def _log_low(knob: Knob) -> float:
    """A positive lower end for a log slider: the knob's bound, or decades below its default."""
    if knob.low is not None and knob.low > 0:
        return float(knob.low)
    anchor = next(
        (float(v) for v in (knob.default, knob.value) if isinstance(v, (int, float)) and v > 0),
        float(knob.high or 1.0),
    )
    return anchor * 10.0**-LOG_DECADES_BELOW


def clamp_to_control(spec: ControlSpec, value: Any) -> Any:
    """``value`` moved into the range ``spec`` can show (a log slider cannot show 0).

    Example:
        >>> clamp_to_control(ControlSpec("log_slider", low=1e-6, high=1.0), 0.0)
        1e-06
    """
    if spec.kind not in ("slider", "log_slider", "number") or isinstance(value, bool):
        return value
    if spec.low is not None:
        value = max(value, spec.low)
    if spec.high is not None:
        value = min(value, spec.high)
    return int(value) if spec.integer else float(value)


def section_of(knob: Knob) -> str:
    """The heading a knob is listed under: learning rates, densification, loss, rendering
    and per-view corrections, or schedule.

    Example:
        >>> from gsnb.train.knobs import Knob
        >>> section_of(Knob("lr_sh0", "train", "float", 1.0, 1.0, 0, 1, True, None, ""))
        'Learning rates'
    """
    if knob.group == "strategy":
        return "Densification"
    if knob.name.startswith("lr_"):
        return "Learning rates"
    if knob.name.endswith(("_reg", "_ratio", "_limit", "_clip")) or knob.name in (
        "ssim_lambda",
        "random_background",
    ):
        return "Loss and regularisers"
    if knob.name in RENDERING_KNOBS:
        return "Rendering and corrections"
    return "Schedule and checks"


RENDERING_KNOBS = (
    "rasterize_mode",
    "filter3d",
    "exposure",
    "pose_refine",
    "pose_weight_decay",
    "pose_refine_start",
)
"""Knobs of how views are rendered and corrected (their learning rates sit with the others)."""


def short_doc(knob: Knob, limit: int = 160) -> str:
    """The first sentence of the knob's documentation, at most ``limit`` characters.

    Example:
        >>> from gsnb.train.knobs import Knob
        >>> short_doc(Knob("a", "train", "int", 1, 1, 0, 9, False, None, "Steps. More text."))
        'Steps.'
    """
    text = knob.doc.strip()
    end = text.find(". ")
    first = text if end < 0 else text[: end + 1]
    return first if len(first) <= limit else first[: limit - 1] + "…"


def log_exponents(spec: ControlSpec) -> tuple[float, float]:
    """``(log10(low), log10(high))`` of a log slider.

    Example:
        >>> log_exponents(ControlSpec("log_slider", low=1e-4, high=1.0))
        (-4.0, 0.0)
    """
    if spec.kind != "log_slider" or spec.low is None or spec.high is None:
        raise ValueError(f"log_exponents needs a bounded log_slider spec, got {spec}")
    return math.log10(spec.low), math.log10(spec.high)
