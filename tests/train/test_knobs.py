"""Knob descriptions come from the dataclass fields and their docstrings."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gsnb.train.knobs import Knob, attribute_docs, check_fields, check_value, describe_knobs, knob


@dataclass
class Panel:
    """A demo.

    Attributes:
        rate: how fast, a long sentence
            that wraps.
        mode: which way.
        fixed: set once.
    """

    rate: float = knob(0.5, low=0.0, high=1.0, log=True)
    mode: str = knob("a", choices=("a", "b"))
    fixed: int = knob(3, live=False)
    other: int = 7


def test_describe_knobs_reads_fields_and_docs() -> None:
    knobs = describe_knobs(Panel(rate=0.25))
    assert [k.name for k in knobs] == ["rate", "mode"]
    rate = knobs[0]
    assert (rate.type, rate.value, rate.default, rate.low, rate.high, rate.log) == (
        "float", 0.25, 0.5, 0.0, 1.0, True
    )  # fmt: skip
    assert rate.doc == "how fast, a long sentence that wraps."
    assert [k.name for k in describe_knobs(Panel(), live_only=False)] == ["rate", "mode", "fixed"]
    assert attribute_docs(Panel)["fixed"] == "set once."


def test_check_value_converts_and_rejects() -> None:
    rate, mode = describe_knobs(Panel())
    assert check_value(rate, 1) == 1.0 and isinstance(check_value(rate, 1), float)
    assert check_value(mode, "b") == "b"
    with pytest.raises(ValueError, match="one of"):
        check_value(mode, "c")
    with pytest.raises(ValueError, match="outside its range"):
        check_value(rate, 1.5)
    with pytest.raises(ValueError, match="finite"):
        check_value(rate, float("nan"))
    with pytest.raises(ValueError, match="takes a float"):
        check_value(rate, "fast")
    count = Knob("n", "train", "int", 1, 1, 0, None, False, None, "")
    assert check_value(count, 4.0) == 4
    with pytest.raises(ValueError, match="takes an int"):
        check_value(count, 2.5)


def test_check_fields_validates_construction() -> None:
    with pytest.raises(ValueError, match=r"rate=2\.0"):
        check_fields(Panel(rate=2.0))
