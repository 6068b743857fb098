"""Tests for gsnb/viewer/gui.py: colour conversions and the controls made for each knob kind."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gsnb.live.controls import control_for
from gsnb.train.knobs import Knob
from gsnb.viewer.gui import add_knob_control, hex_to_rgb, rgb_to_hex


@pytest.mark.parametrize("rgb", [(0, 0, 0), (255, 128, 1), (18, 52, 86)])
def test_colours_round_trip(rgb):
    assert hex_to_rgb(rgb_to_hex(rgb)) == rgb
    assert rgb_to_hex(rgb) == "#{:02x}{:02x}{:02x}".format(*rgb)


def test_each_kind_gets_its_viser_control():
    import viser

    server = viser.ViserServer(host="127.0.0.1", port=0, verbose=False)
    try:

        def knob(type_, value, low=None, high=None, log=False, choices=None):
            return Knob("k", "train", type_, value, value, low, high, log, choices, "Doc.")

        cases = [
            (knob("float", 0.2, 0.0, 1.0), "GuiSliderHandle", 0.2),
            (knob("int", 5, 1), "GuiNumberHandle", 5),
            (knob("float", 1.6e-4, 0.0, 1.0, log=True), "GuiNumberHandle", 1.6e-4),
            (knob("bool", True), "GuiCheckboxHandle", True),
            (knob("str", "b", choices=("a", "b")), "GuiDropdownHandle", "b"),
            (knob("str", "#ff8000"), "GuiRgbHandle", (255, 128, 0)),
            (knob("str", "hello"), "GuiTextHandle", "hello"),
        ]
        for k, kind, value in cases:
            handle = add_knob_control(server.gui, k, control_for(k))
            assert type(handle).__name__ == kind and handle.value == value
        log = add_knob_control(server.gui, cases[2][0], control_for(cases[2][0]))
        assert log.step <= 1e-5  # fine enough for a learning rate
    finally:
        server.stop()


def test_a_browser_edit_survives_a_sync_that_runs_before_its_callback(trainer):
    """viser stores the browser's value, then runs the callback on a thread pool; a
    sync() in between must not put the trainer's old value back."""
    import viser

    from gsnb.viewer.gui import KnobPanel

    server = viser.ViserServer(host="127.0.0.1", port=0, verbose=False)
    try:
        panel = KnobPanel(server.gui, trainer)
        handle = panel.handles["ssim_lambda"]
        assert handle.value == trainer.config.ssim_lambda != 0.5
        handle._impl.value = 0.5  # what viser's GuiUpdateMessage handler does first
        panel.sync()
        assert handle.value == 0.5
        browser = SimpleNamespace(client=object(), target=handle)
        panel._callback("ssim_lambda")(browser)  # the callback, late
        assert trainer.pending_knobs == {"ssim_lambda": 0.5}
        trainer.set(ssim_lambda=0.25)  # a change made in the notebook still shows
        panel.sync()
        assert handle.value == 0.25
        handle._impl.value = 2.0  # refused: the control goes back and says why
        panel._callback("ssim_lambda")(browser)
        assert handle.value == 0.25 and "ssim_lambda" in panel.message.content
    finally:
        server.stop()
