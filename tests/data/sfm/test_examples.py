"""The docstring examples of gsnb.data.sfm run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["__init__", "agreement", "commands", "errors", "frames", "logs", "pipeline", "summary"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(
        "gsnb.data.sfm" if name == "__init__" else f"gsnb.data.sfm.{name}"
    )
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"gsnb.data.sfm.{name} has no examples"
    assert result.failed == 0
