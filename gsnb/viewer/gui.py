"""viser controls for a trainer's live knobs, built from the same specs as the notebook panel."""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any

from gsnb.live.controls import ControlSpec, clamp_to_control, control_for, section_of, short_doc

if TYPE_CHECKING:
    from gsnb.train import Knob, Trainer


def hex_to_rgb(value: str) -> tuple[int, int, int]:
    """``"#rrggbb"`` to ``(r, g, b)`` integers.

    Example:
        >>> hex_to_rgb("#ff8000")
        (255, 128, 0)
    """
    return tuple(int(value[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def rgb_to_hex(rgb: tuple[int, int, int]) -> str:
    """``(r, g, b)`` integers to ``"#rrggbb"``.

    Example:
        >>> rgb_to_hex((255, 128, 0))
        '#ff8000'
    """
    return "#" + "".join(f"{int(c):02x}" for c in rgb)


def _number_step(spec: ControlSpec, value: float) -> float | None:
    """A step fine enough for a log-scale knob shown in a number box."""
    anchors = [abs(v) for v in (spec.low, value) if v]
    return 10.0 ** (math.floor(math.log10(min(anchors))) - 1) if anchors else None


def add_knob_control(gui: Any, knob: Knob, spec: ControlSpec) -> Any:
    """Add the viser control for ``knob`` to ``gui`` (a ``server.gui`` or a folder of it).

    Example:
        >>> # handle = add_knob_control(server.gui, knob, control_for(knob))
    """
    value = clamp_to_control(spec, knob.value)
    hint = short_doc(knob)
    if spec.kind == "checkbox":
        return gui.add_checkbox(knob.name, bool(value), hint=hint)
    if spec.kind == "dropdown":
        return gui.add_dropdown(knob.name, list(spec.options or ()), initial_value=value, hint=hint)
    if spec.kind == "color":
        return gui.add_rgb(knob.name, hex_to_rgb(value), hint=hint)
    if spec.kind == "text":
        return gui.add_text(knob.name, str(value), hint=hint)
    if spec.kind == "slider":
        return gui.add_slider(
            knob.name, min=spec.low, max=spec.high, step=spec.step, initial_value=value, hint=hint
        )
    step = _number_step(spec, value) if spec.kind == "log_slider" else spec.step
    return gui.add_number(knob.name, value, min=spec.low, max=spec.high, step=step, hint=hint)


class KnobPanel:
    """viser controls for every live knob of ``trainer``, in folders like the notebook panel's.

    A change in the browser calls ``trainer.set`` (applied at the next step); a
    refused value is reported in :attr:`message` and the control goes back.
    :meth:`sync` shows changes made elsewhere (the notebook panel, a cell). viser
    stores a browser's value before it runs the change callback on its thread
    pool, so :meth:`sync` leaves alone a control whose value it did not show
    itself (that edit is still on its way to the trainer), and writes a control only
    when the trainer's value changed since it last showed one.

    Example:
        >>> # knobs = KnobPanel(server.gui, trainer); knobs.sync()
    """

    def __init__(self, gui: Any, trainer: Trainer) -> None:
        self.trainer = trainer
        self.handles: dict[str, Any] = {}
        self.specs: dict[str, ControlSpec] = {}
        self._shown: dict[str, Any] = {}  # the value each control last got from the trainer
        self._lock = threading.Lock()
        folders: dict[str, Any] = {}
        self.message = gui.add_markdown("")
        for knob in trainer.knobs():
            section = section_of(knob)
            if section not in folders:
                folders[section] = gui.add_folder(section, expand_by_default=False)
            spec = control_for(knob)
            with folders[section]:
                handle = add_knob_control(gui, knob, spec)
            handle.on_update(self._callback(knob.name))
            self.handles[knob.name] = handle
            self.specs[knob.name] = spec
            self._shown[knob.name] = handle.value

    def _callback(self, name: str) -> Any:
        def changed(event: Any) -> None:
            if event.client is None:  # our own sync() set it
                return
            with self._lock:
                shown = self._shown[name] = event.target.value
                value = rgb_to_hex(shown) if self.specs[name].kind == "color" else shown
                try:
                    self.trainer.set(**{name: value})
                    refused = ""
                except ValueError as err:
                    refused = f"**{name}:** {err}"
            self.message.content = refused
            if refused:
                self.sync()

        return changed

    def sync(self) -> None:
        """Show the trainer's current values (queued changes included)."""
        with self._lock:
            pending = self.trainer.pending_knobs
            for knob in self.trainer.knobs():
                handle = self.handles.get(knob.name)
                if handle is None or handle.value != self._shown[knob.name]:
                    continue  # a browser edit whose callback has not run yet
                spec = self.specs[knob.name]
                value = clamp_to_control(spec, pending.get(knob.name, knob.value))
                if spec.kind == "color":
                    value = hex_to_rgb(value)
                if value != self._shown[knob.name]:  # changed elsewhere: only then written
                    handle.value = self._shown[knob.name] = value
