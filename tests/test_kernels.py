"""gsnb.kernels: the module of this process, the guard, the C++ order of each op's arguments."""

from __future__ import annotations

import ast
import doctest
import inspect
import re
import textwrap
from pathlib import Path

import pytest
import torch

import gsnb.toolchain
from gsnb import kernels

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
CPP_NAMES = {"lam": "lambda"}  # a Python keyword in C++


def test_docstring_examples() -> None:
    result = doctest.testmod(kernels)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_without_a_build_the_ops_say_how_to_build_it() -> None:
    before = gsnb.toolchain.loaded_module()  # a test build of another module may be in use
    kernels.set_extension(None)
    try:
        assert kernels.extension() is None  # no GPU: no cached build is loaded
        with pytest.raises(RuntimeError, match="gs_build"):
            kernels.require()
        with pytest.raises(RuntimeError, match="gsnb build"):
            kernels.health_sums(
                scales=torch.zeros(1, 3), opacities=torch.zeros(1), params=[], grads=[]
            )
        assert not kernels.applies("health_sums", torch.zeros(3))
    finally:
        kernels.set_extension(before)


def cpp_parameters(header: str) -> dict[str, list[str]]:
    """Each op of ``csrc/ops.h`` -> its parameter names, in order."""
    ops = {}
    for name, params in re.findall(r"\b(\w+)\(([^()]*)\);", header):
        ops[name] = [p.split()[-1].lstrip("&*") for p in params.replace("\n", " ").split(",")]
    return ops


def test_each_wrapper_passes_the_cpp_parameters_in_their_order() -> None:
    cpp = cpp_parameters((PACKAGE_ROOT / "csrc" / "ops.h").read_text())
    wrapped = [n for n in kernels.__all__ if n in cpp]
    assert sorted(wrapped) == sorted(cpp), "one wrapper per op of csrc/ext.cpp"
    for name in wrapped:
        fn = getattr(kernels, name)
        params = list(inspect.signature(fn).parameters)
        assert [CPP_NAMES.get(p, p) for p in params] == cpp[name], name
        call = next(
            node
            for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(fn))))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == name
        )
        assert [a.id for a in call.args] == params, name


def test_every_call_of_a_wrapper_names_exactly_its_parameters() -> None:
    calls = 0
    for path in sorted((PACKAGE_ROOT / "gsnb").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = node.func if isinstance(node, ast.Call) else None
            if not (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "kernels"
                and func.attr in kernels.__all__
            ):
                continue
            params = inspect.signature(getattr(kernels, func.attr)).parameters
            if all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values()):
                calls += 1
                where = f"{path.name}:{node.lineno}"
                assert not node.args, where
                assert sorted(k.arg for k in node.keywords) == sorted(params), where
    assert calls >= 12  # every op is called somewhere
