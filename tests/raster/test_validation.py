"""Bad arguments to ``gsnb.render`` raise ``ValueError`` naming the argument and the expectation."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

import gsnb

N, C, W, H = 5, 2, 12, 10


def valid() -> dict[str, Any]:
    """Keyword arguments of a small valid render (float64, CPU)."""
    gen = torch.Generator().manual_seed(0)
    K = torch.tensor([[12.0, 0, 6], [0, 12, 5], [0, 0, 1]], dtype=torch.float64)
    viewmats = torch.eye(4, dtype=torch.float64).repeat(C, 1, 1)
    viewmats[:, 2, 3] = 3.0
    return {
        "means": torch.randn(N, 3, generator=gen, dtype=torch.float64),
        "quats": torch.randn(N, 4, generator=gen, dtype=torch.float64),
        "scales": torch.full((N, 3), 0.2, dtype=torch.float64),
        "opacities": torch.full((N,), 0.5, dtype=torch.float64),
        "colors": torch.rand(N, 3, generator=gen, dtype=torch.float64),
        "viewmats": viewmats,
        "Ks": K.repeat(C, 1, 1),
        "width": W,
        "height": H,
    }


def with_nan(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[-1] = float("nan")
    return t


def with_inf(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = float("inf")
    return t


def test_valid_arguments_render() -> None:
    out = gsnb.render(**valid())
    assert out.rgb.shape == (C, H, W, 3)


# (argument, bad value from the valid one, words the message must hold)
SHAPE_CASES = [
    ("means", lambda v: v[:, :2], ["means", "[5, 2]", "[N, 3]"]),
    ("means", lambda v: v[None], ["means", "[1, 5, 3]", "[N, 3]"]),
    ("quats", lambda v: v[:, :3], ["quats", "[5, 3]", "[N, 4]", "N = 5"]),
    ("quats", lambda v: v[:4], ["quats", "[4, 4]", "[N, 4]", "N = 5"]),
    ("scales", lambda v: v[:, :1], ["scales", "[5, 1]", "[N, 3]"]),
    ("opacities", lambda v: v[:, None], ["opacities", "[5, 1]", "[N]"]),
    ("opacities", lambda v: v[:3], ["opacities", "[3]", "N = 5"]),
    ("colors", lambda v: v[:, :2], ["colors", "[5, 2]", "[N, 3]", "[N, K, 3]"]),
    ("colors", lambda v: v[:4], ["colors", "[4, 3]", "N = 5"]),
    ("colors", lambda v: v[:, None, :, None], ["colors", "[5, 1, 3, 1]", "[N, K, 3]"]),
    ("colors", lambda v: v[:, None].expand(N, 5, 3), ["colors", "[5, 5, 3]", "K = 5", "1, 4, 9"]),
    ("colors", lambda v: v[:, None].expand(N, 25, 3), ["colors", "K = 25"]),
    ("viewmats", lambda v: v[0], ["viewmats", "[4, 4]", "[C, 4, 4]"]),
    ("viewmats", lambda v: v[:, :3], ["viewmats", "[2, 3, 4]", "[C, 4, 4]"]),
    ("viewmats", lambda v: v[:0], ["viewmats", "[0, 4, 4]", "at least one camera"]),
    ("Ks", lambda v: v[:1], ["Ks", "[1, 3, 3]", "[C, 3, 3]", "C = 2"]),
    ("Ks", lambda v: v[0], ["Ks", "[3, 3]", "[C, 3, 3]"]),
    ("means", lambda v: v.tolist(), ["means", "torch.Tensor", "list"]),
    ("colors", lambda v: v.numpy(), ["colors", "ndarray"]),
]


@pytest.mark.parametrize(("name", "mutate", "words"), SHAPE_CASES)
def test_wrong_shapes_name_the_argument_and_the_expected_shape(
    name: str, mutate: Any, words: list[str]
) -> None:
    args = valid()
    args[name] = mutate(args[name])
    with pytest.raises(ValueError) as info:
        gsnb.render(**args)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("bg", "words"),
    [
        (torch.zeros(4, dtype=torch.float64), ["backgrounds", "[4]", "[3] or [C, 3]", "C = 2"]),
        (torch.zeros(3, 3, dtype=torch.float64), ["backgrounds", "[3, 3]", "C = 2"]),
        ([0.0, 0.0, 0.0], ["backgrounds", "list"]),
    ],
)
def test_wrong_backgrounds(bg: Any, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        gsnb.render(**valid(), backgrounds=bg)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("name", "dtype", "words"),
    [
        ("means", torch.float16, ["means", "float16", "float32 or float64"]),
        ("quats", torch.int64, ["quats", "int64", "float32 or float64"]),
        ("opacities", torch.bool, ["opacities", "bool"]),
        ("colors", torch.float32, ["colors", "float32", "float64 like means"]),
        ("Ks", torch.float32, ["Ks", "float64 like means"]),
        ("viewmats", torch.complex128, ["viewmats", "complex128"]),
    ],
)
def test_wrong_dtypes(name: str, dtype: torch.dtype, words: list[str]) -> None:
    args = valid()
    args[name] = args[name].to(dtype)
    with pytest.raises(ValueError) as info:
        gsnb.render(**args)
    for word in [*words, str(list(args[name].shape))]:
        assert word in str(info.value)


@pytest.mark.parametrize("name", ["quats", "scales", "opacities", "colors", "viewmats", "Ks"])
def test_wrong_devices(name: str) -> None:
    args = valid()
    args[name] = args[name].to("meta")
    with pytest.raises(ValueError, match=rf"{name} .*device meta.*expected device cpu like means"):
        gsnb.render(**args)


def test_backgrounds_on_another_device() -> None:
    bg = torch.zeros(3, dtype=torch.float64, device="meta")
    with pytest.raises(ValueError, match=r"backgrounds .*device meta"):
        gsnb.render(**valid(), backgrounds=bg)


@pytest.mark.parametrize(
    ("name", "spoil"),
    [(n, with_nan) for n in ("means", "quats", "scales", "opacities", "colors", "viewmats", "Ks")]
    + [("means", with_inf), ("scales", with_inf), ("Ks", with_inf)],
)
def test_non_finite_values(name: str, spoil: Any) -> None:
    args = valid()
    args[name] = spoil(args[name])
    shape = re.escape(str(list(args[name].shape)))
    with pytest.raises(ValueError, match=rf"^{name} .*{shape}.*non-finite"):
        gsnb.render(**args)


def test_non_finite_backgrounds() -> None:
    with pytest.raises(ValueError, match=r"backgrounds .*non-finite"):
        gsnb.render(**valid(), backgrounds=with_nan(torch.zeros(3, dtype=torch.float64)))


def test_check_values_false_skips_the_value_checks() -> None:
    args = valid()
    args["opacities"] = args["opacities"] * 0 + 1.5
    with pytest.raises(ValueError, match="opacities"):
        gsnb.render(**args)
    gsnb.render(**args, check_values=False)


@pytest.mark.parametrize(
    ("name", "value", "pattern"),
    [
        ("opacities", lambda v: v - 0.6, r"opacities .*\[0, 1\].*sigmoid"),
        ("opacities", lambda v: v + 0.6, r"opacities .*max 1\.1"),
        ("scales", lambda v: -v, r"scales .*>= 0.*log-scales"),
        ("Ks", lambda v: v * torch.tensor([0.0, 1, 1]), r"Ks .*positive focal"),
    ],
)
def test_out_of_range_values(name: str, value: Any, pattern: str) -> None:
    args = valid()
    args[name] = value(args[name])
    with pytest.raises(ValueError, match=pattern):
        gsnb.render(**args)


@pytest.mark.parametrize(
    ("key", "value"),
    [("width", 0), ("height", -3), ("width", 12.0), ("height", True), ("width", "12")],
)
def test_bad_image_sizes(key: str, value: Any) -> None:
    args = {**valid(), key: value}
    with pytest.raises(
        ValueError, match=rf"{key} must be a positive int, got {re.escape(repr(value))}"
    ):
        gsnb.render(**args)


@pytest.mark.parametrize(("near", "far"), [(-0.1, 10.0), (5.0, 5.0), (5.0, 1.0)])
def test_bad_clipping_planes(near: float, far: float) -> None:
    with pytest.raises(ValueError, match="near_plane < far_plane"):
        gsnb.render(**valid(), near_plane=near, far_plane=far)


def test_sh_degree_too_high_for_the_coefficients() -> None:
    args = valid()
    args["colors"] = torch.zeros(N, 4, 3, dtype=torch.float64)
    gsnb.render(**args, sh_degree=1)
    gsnb.render(**args, sh_degree=0)
    with pytest.raises(ValueError, match=r"sh_degree=2 needs 9 coefficients, colors holds 4"):
        gsnb.render(**args, sh_degree=2)
    with pytest.raises(ValueError, match="sh_degree=-1"):
        gsnb.render(**args, sh_degree=-1)


def test_sh_degree_with_rgb_colours() -> None:
    with pytest.raises(ValueError, match=r"sh_degree=0 given but colors \[5, 3\] is RGB"):
        gsnb.render(**valid(), sh_degree=0)


@pytest.mark.parametrize("backend", ["torch", "CUDA", "", "gsplat"])
def test_unknown_backend(backend: str) -> None:
    with pytest.raises(ValueError, match=r"backend must be 'auto', 'cuda' or 'reference'"):
        gsnb.render(**valid(), backend=backend)


def test_cuda_backend_needs_cuda_tensors() -> None:
    with pytest.raises(ValueError, match=r"backend='cuda' needs tensors on a CUDA device"):
        gsnb.render(**valid(), backend="cuda")


def test_reference_backend_is_used_on_cpu() -> None:
    assert gsnb.render(**valid(), backend="auto").meta.backend == "reference"
    assert gsnb.render(**valid(), backend="reference").meta.backend == "reference"


def test_deferred_check_words_the_flag_when_the_inputs_are_gone() -> None:
    # The CUDA projection's flag outlives the inputs: the error still names the tensor.
    from gsnb.raster.validate import PROBLEM_BITS, DeferredCheck, value_tensors

    a = valid()
    sh0, shn = torch.zeros(N, 1, 3), torch.zeros(N, 3, 3)
    tensors = value_tensors(
        a["means"].float(), a["quats"].float(), a["scales"].float(), a["opacities"].float(),
        sh0, a["viewmats"].float(), a["Ks"].float(), None, shn, stored=True,
    )  # fmt: skip
    bits = PROBLEM_BITS["shN"] | PROBLEM_BITS["Ks"]
    check = DeferredCheck(tensors, stored=True, problems=torch.tensor([bits], dtype=torch.int32))
    del tensors, shn
    with pytest.raises(ValueError) as info:
        check.check()
    assert str(info.value) == (
        "shN (shape [5, 3, 3], dtype torch.float32, device cpu) has non-finite values (NaN or Inf)"
    )
    check.check()  # raised once


@pytest.mark.parametrize(
    ("bit", "words"),
    [
        ("colors", "colors (shape [5, 3]) has non-finite"),
        ("backgrounds", "backgrounds has non-finite"),
        ("opacity range", "opacities must lie in [0, 1]; apply a sigmoid"),
        ("negative scales", "scales must be >= 0 (linear scales; exponentiate"),
        ("focal lengths", "Ks must have positive focal lengths"),
    ],
)
def test_each_flag_bit_names_its_tensor(bit: str, words: str) -> None:
    from gsnb.raster.validate import PROBLEM_BITS, problems_message

    names = {"colors": "shape [5, 3]"}
    assert problems_message(PROBLEM_BITS[bit], names, stored=False).startswith(words)


def test_clean_inputs_with_a_flag_from_before_an_in_place_fix() -> None:
    # Inputs repaired in place after the render: the flag's own words are raised.
    from gsnb.raster.validate import PROBLEM_BITS, DeferredCheck, value_tensors

    a = valid()
    tensors = value_tensors(
        a["means"], a["quats"], a["scales"], a["opacities"], a["colors"], a["viewmats"],
        a["Ks"], None, None, stored=False,
    )  # fmt: skip
    flag = torch.tensor([PROBLEM_BITS["opacity range"]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^opacities \(shape \[5\].*must lie in \[0, 1\]"):
        DeferredCheck(tensors, stored=False, problems=flag).check()
    DeferredCheck(tensors, stored=False, problems=torch.zeros(1, dtype=torch.int32)).check()
