"""The examples in the renderer's docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib
import pydoc
import types

import pytest

import gsnb

from . import bruteforce, scenes

MODULES = [
    *(
        importlib.import_module(f"gsnb.raster.{name}")
        for name in ("api", "sh", "projection", "reference", "validate", "cuda", "smoke")
    ),
    bruteforce,
    scenes,
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples(module: types.ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


@pytest.mark.parametrize("name", ["gsnb.raster.api", "gsnb.raster.sh"])
def test_modules_with_public_examples_have_some(name: str) -> None:
    finder = doctest.DocTestFinder()
    examples = sum(len(t.examples) for t in finder.find(importlib.import_module(name)))
    assert examples > 0


def test_help_documents_shapes_conventions_and_an_example() -> None:
    text = pydoc.render_doc(gsnb.render, renderer=pydoc.plaintext)
    for words in ("[N, 3]", "[C, 4, 4]", "[C, H, W, 3]", "OpenCV", "i + 0.5", "Example", ">>>"):
        assert words in text
