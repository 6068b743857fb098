"""Tests for gsnb/live/controls.py: every real knob gets a control that can show its value."""

from __future__ import annotations

import math

import pytest

from gsnb.live.controls import (
    ControlSpec,
    clamp_to_control,
    control_for,
    log_exponents,
    section_of,
    short_doc,
)
from gsnb.train import DefaultStrategy, MCMCStrategy, TrainConfig
from gsnb.train.knobs import Knob, describe_knobs


def every_knob() -> list[Knob]:
    return (
        describe_knobs(TrainConfig(), "train")
        + describe_knobs(DefaultStrategy(), "strategy")
        + describe_knobs(MCMCStrategy(), "strategy")
    )


@pytest.mark.parametrize("knob", every_knob(), ids=lambda k: f"{k.group}.{k.name}")
def test_every_default_fits_its_control(knob):
    spec = control_for(knob)
    assert clamp_to_control(spec, knob.default) == knob.default
    if spec.kind in ("slider", "log_slider"):
        assert spec.low <= knob.default <= spec.high
        assert (knob.low is None or spec.low >= knob.low) and spec.high <= knob.high
    if spec.kind == "log_slider":
        assert spec.low > 0
    expected = {"bool": {"checkbox"}, "int": {"slider", "number"}}
    expected |= {"float": {"slider", "log_slider", "number"}, "str": {"dropdown"}}
    assert spec.kind in expected[knob.type]
    assert spec.integer == (knob.type == "int")


def test_kinds_follow_type_bounds_and_scale():
    def knob(type_, value, low=None, high=None, log=False, choices=None):
        return Knob("k", "train", type_, value, value, low, high, log, choices, "Doc. More.")

    assert control_for(knob("float", 0.2, 0.0, 1.0)) == ControlSpec("slider", 0.0, 1.0, 0.001)
    assert control_for(knob("int", 3, 0, 3)) == ControlSpec("slider", 0, 3, 1, integer=True)
    assert control_for(knob("int", 7, 1)) == ControlSpec("number", 1, None, 1, integer=True)
    assert control_for(knob("float", 2.0, 0.0)).kind == "number"
    log = control_for(knob("float", 1e-3, 0.0, 1.0, log=True))
    assert log.kind == "log_slider" and math.isclose(log.low, 1e-6) and log.high == 1.0
    assert control_for(knob("float", 0.1, 1e-4, 10.0, log=True)).low == 1e-4
    assert control_for(knob("str", "a", choices=("a", "b"))).options == ("a", "b")
    assert control_for(knob("str", "#ff8800")).kind == "color"
    assert control_for(knob("str", "free text")).kind == "text"
    assert control_for(knob("bool", True)).kind == "checkbox"


def test_clamp_and_exponents():
    spec = ControlSpec("log_slider", low=1e-6, high=1.0)
    assert clamp_to_control(spec, 0.0) == 1e-6
    assert clamp_to_control(spec, 5.0) == 1.0
    assert clamp_to_control(ControlSpec("number", 0, None, 1, integer=True), 7.0) == 7
    assert clamp_to_control(ControlSpec("checkbox"), True) is True
    assert log_exponents(spec) == (-6.0, 0.0)
    with pytest.raises(ValueError, match="log_slider"):
        log_exponents(ControlSpec("slider", 0.0, 1.0))


def test_sections_and_docs_cover_every_knob():
    sections = {section_of(k) for k in every_knob()}
    assert sections == {
        "Learning rates",
        "Densification",
        "Loss and regularisers",
        "Rendering and corrections",
        "Schedule and checks",
    }
    rendering = {k.name for k in every_knob() if section_of(k) == "Rendering and corrections"}
    assert rendering == {"rasterize_mode", "filter3d", "exposure", "pose_refine"} | {
        "pose_weight_decay",
        "pose_refine_start",
    }
    ssim = next(k for k in every_knob() if k.name == "ssim_lambda")
    assert section_of(ssim) == "Loss and regularisers"
    assert short_doc(ssim).startswith("weight of the SSIM term")
    long = Knob("k", "train", "int", 1, 1, 0, 9, False, None, "x" * 300)
    assert len(short_doc(long, limit=50)) == 50
