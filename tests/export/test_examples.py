"""The docstring examples of gsnb.export and %gs_export run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "gsnb.export.ply",
    "gsnb.export.paths",
    "gsnb.export.upscale",
    "gsnb.export.video",
    "gsnb.export.commands",
    "gsnb.notebook.export_magics",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
