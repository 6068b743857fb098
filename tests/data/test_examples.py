"""The docstring examples of gsnb.data run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "__init__",
    "camera",
    "colmap",
    "commands",
    "dataset",
    "download",
    "images",
    "points",
    "samples",
    "synthetic",
    "transforms",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module("gsnb.data" if name == "__init__" else f"gsnb.data.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"gsnb.data.{name} has no examples"
    assert result.failed == 0
