"""Architecture parsing and the flag set."""

from __future__ import annotations

import pytest

from gsnb.toolchain.flags import Arch, BuildFlags, cxx_standard, parse_arch_list


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9.0", Arch(9, 0)),
        ("sm_120", Arch(12, 0)),
        ("compute_86", Arch(8, 6)),
        ("90", Arch(9, 0)),
        ("8.9+PTX", Arch(8, 9, True)),
        ("8.9+ptx", Arch(8, 9, True)),
    ],
)
def test_arch_parse(text, expected):
    assert Arch.parse(text) == expected


@pytest.mark.parametrize("text", ["nine", "9.0.1", "sm_", "9.x"])
def test_arch_parse_rejects_nonsense_with_the_expected_form(text):
    with pytest.raises(ValueError, match=r"like 9\.0"):
        Arch.parse(text)


def test_arch_list_sorted_distinct_and_ptx_kept():
    assert [str(a) for a in parse_arch_list("9.0, 8.0;9.0+PTX 8.0")] == ["8.0", "9.0+PTX"]
    with pytest.raises(ValueError, match="empty"):
        parse_arch_list(" , ")


def test_flags_hold_the_fixed_set_and_gencode():
    flags = BuildFlags.for_archs([Arch(8, 0), Arch(9, 0, True)], msvc=False, std="c++17")
    for flag in ("-O3", "--use_fast_math", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo"):
        assert flag in flags.nvcc
    assert flags.nvcc[-3:] == (
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    )
    assert flags.host == ("-O3", "-std=c++17")
    assert BuildFlags.for_archs([Arch(9, 0)], msvc=True, std="c++20").host == ("/O2", "/std:c++20")


def test_cxx_standard_follows_the_torch_headers(tmp_path):
    (tmp_path / "ATen").mkdir()
    header = tmp_path / "ATen" / "ATen.h"
    header.write_text("#pragma once\n#include <c10/core/Allocator.h>\n")
    assert cxx_standard(tmp_path) == "c++17"
    new = tmp_path / "new"
    (new / "ATen").mkdir(parents=True)
    (new / "ATen" / "ATen.h").write_text(
        "#if !defined(_MSC_VER) && __cplusplus < 202002L\n#error C++20\n#endif\n"
    )
    assert cxx_standard(new) == "c++20"
    assert cxx_standard(tmp_path / "missing") == "c++17"
