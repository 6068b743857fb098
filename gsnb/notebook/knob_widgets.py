"""ipywidgets controls for a trainer's live knobs; a change reaches ``trainer.set`` at once."""

from __future__ import annotations

import functools
import html
import threading
from typing import TYPE_CHECKING, Any

from gsnb.live.controls import (
    ControlSpec,
    clamp_to_control,
    control_for,
    log_exponents,
    section_of,
    short_doc,
)

if TYPE_CHECKING:
    from gsnb.train import Knob, Trainer

_LAYOUT = {"width": "420px"}
_STYLE = {"description_width": "150px"}


def knob_widget(knob: Knob, spec: ControlSpec | None = None) -> Any:
    """The ipywidgets control for ``knob`` (slider, log slider, number box, checkbox, ...).

    Example:
        >>> from gsnb.train.knobs import Knob
        >>> k = Knob("ssim_lambda", "train", "float", 0.2, 0.2, 0.0, 1.0, False, None, "")
        >>> w = knob_widget(k)
        >>> type(w).__name__, w.value
        ('FloatSlider', 0.2)
    """
    import ipywidgets as w

    spec = spec or control_for(knob)
    value = clamp_to_control(spec, knob.value)
    common: dict[str, Any] = {
        "description": knob.name,
        "tooltip": short_doc(knob),
        "layout": _LAYOUT,
        "style": _STYLE,
    }
    slider = {"continuous_update": False, **common}
    if spec.kind == "checkbox":
        return w.Checkbox(value=bool(value), indent=False, **common)
    if spec.kind == "dropdown":
        return w.Dropdown(options=list(spec.options or ()), value=value, **common)
    if spec.kind == "color":
        return w.ColorPicker(value=value, concise=False, **common)
    if spec.kind == "text":
        return w.Text(value=str(value), continuous_update=False, **common)
    if spec.kind == "log_slider":
        low, high = log_exponents(spec)
        return w.FloatLogSlider(
            value=value, base=10, min=low, max=high, step=0.01, readout_format=".3g", **slider
        )
    if spec.kind == "slider" and spec.integer:
        return w.IntSlider(value=value, min=spec.low, max=spec.high, step=1, **slider)
    if spec.kind == "slider":
        return w.FloatSlider(
            value=value, min=spec.low, max=spec.high, step=spec.step, readout_format=".3g", **slider
        )
    box = w.IntText if spec.integer else w.FloatText
    return box(value=value, continuous_update=False, **common)


class KnobControls:
    """Controls for every live knob of ``trainer`` (``trainer.knobs()``), grouped in an accordion.

    Changing a control calls ``trainer.set(name=value)``: the change applies at
    the trainer's next step. A value the trainer refuses is shown in
    :attr:`message` and the control goes back to the trainer's value.
    :meth:`sync` shows changes made elsewhere (``trainer.set`` in a cell, the viewer).

    Example:
        >>> # controls = KnobControls(trainer); controls.controls["lr_scales"].value = 2e-3
        >>> # trainer.pending_knobs  ->  {'lr_scales': 0.002}
    """

    def __init__(self, trainer: Trainer) -> None:
        import ipywidgets as w

        self.trainer = trainer
        self.controls: dict[str, Any] = {}
        self.specs: dict[str, ControlSpec] = {}
        self.message = w.HTML()
        self._local = threading.local()  # sync() in one thread must not mute a user elsewhere
        sections: dict[str, list[Any]] = {}
        for knob in trainer.knobs():
            spec = control_for(knob)
            control = knob_widget(knob, spec)
            control.observe(functools.partial(self._changed, knob.name), names="value")
            self.controls[knob.name] = control
            self.specs[knob.name] = spec
            sections.setdefault(section_of(knob), []).append(control)
        self.accordion = w.Accordion(
            children=[w.VBox(items) for items in sections.values()], titles=tuple(sections)
        )
        self.widget = w.VBox([self.accordion, self.message])

    def _changed(self, name: str, change: dict[str, Any]) -> None:
        if getattr(self._local, "syncing", False):
            return
        try:
            self.trainer.set(**{name: change["new"]})
        except ValueError as err:
            self.message.value = f"<span style='color:#b00'>{html.escape(str(err))}</span>"
            self.sync()
            return
        self.message.value = ""

    def sync(self) -> None:
        """Show the trainer's current values (queued changes included) in the controls."""
        pending = self.trainer.pending_knobs
        self._local.syncing = True
        try:
            for knob in self.trainer.knobs():
                control = self.controls.get(knob.name)
                if control is None:
                    continue
                value = clamp_to_control(self.specs[knob.name], pending.get(knob.name, knob.value))
                if control.value != value:
                    control.value = value
        finally:
            self._local.syncing = False
