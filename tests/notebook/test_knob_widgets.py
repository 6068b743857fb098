"""Tests for gsnb/notebook/knob_widgets.py with a real trainer (no front end needed)."""

from __future__ import annotations

import ipywidgets as w
import pytest

from gsnb.live.controls import control_for
from gsnb.notebook.knob_widgets import KnobControls, knob_widget
from gsnb.train.knobs import Knob


def test_widget_types_follow_the_controls():
    def knob(type_, value, low=None, high=None, log=False, choices=None):
        return Knob("k", "train", type_, value, value, low, high, log, choices, "Doc.")

    cases = {
        w.FloatSlider: knob("float", 0.2, 0.0, 1.0),
        w.FloatLogSlider: knob("float", 1e-3, 0.0, 1.0, log=True),
        w.IntSlider: knob("int", 2, 0, 3),
        w.IntText: knob("int", 5, 1),
        w.FloatText: knob("float", 0.0, 0.0),
        w.Checkbox: knob("bool", True),
        w.Dropdown: knob("str", "b", choices=("a", "b")),
        w.ColorPicker: knob("str", "#102030"),
        w.Text: knob("str", "x"),
    }
    for kind, k in cases.items():
        control = knob_widget(k)
        assert type(control) is kind
        assert control.value == k.value
        assert control.description == "k" and control.tooltip == "Doc."
    log = knob_widget(cases[w.FloatLogSlider], control_for(cases[w.FloatLogSlider]))
    assert (log.min, log.max) == pytest.approx((-6.0, 0.0))


def test_a_change_is_queued_and_applies_at_the_next_step(make_trainer):
    trainer = make_trainer()
    controls = KnobControls(trainer)
    assert set(controls.controls) == {k.name for k in trainer.knobs()}
    controls.controls["ssim_lambda"].value = 0.5
    controls.controls["grow_grad2d"].value = 3e-4
    assert trainer.pending_knobs == {"ssim_lambda": 0.5, "grow_grad2d": 3e-4}
    assert trainer.config.ssim_lambda == 0.2 and trainer.strategy.grow_grad2d == 1.5e-4
    trainer.step()
    assert trainer.config.ssim_lambda == 0.5 and trainer.strategy.grow_grad2d == 3e-4
    assert trainer.pending_knobs == {}


def test_a_refused_value_is_shown_and_the_control_goes_back(make_trainer):
    trainer = make_trainer()
    controls = KnobControls(trainer)
    controls.controls["scale_grad_clip"].value = -1.0
    assert (
        "scale_grad_clip" in controls.message.value
        and "outside its range" in controls.message.value
    )
    assert controls.controls["scale_grad_clip"].value == 0.0
    assert trainer.pending_knobs == {}
    controls.controls["scale_grad_clip"].value = 2.0
    assert controls.message.value == "" and trainer.pending_knobs == {"scale_grad_clip": 2.0}


def test_sync_shows_changes_made_elsewhere_without_echoing_them(make_trainer):
    trainer = make_trainer()
    controls = KnobControls(trainer)
    trainer.set(refine_every=7)
    controls.sync()
    assert controls.controls["refine_every"].value == 7
    trainer.step()
    assert trainer.pending_knobs == {}
    controls.sync()
    assert controls.controls["refine_every"].value == 7 and trainer.pending_knobs == {}
