"""Per-step compile times from ninja's ``.ninja_log``."""

from __future__ import annotations

from gsnb.toolchain.ninja_log import LOG_NAME, Step, read_steps, step_seconds


def test_steps_of_a_parallel_build_with_a_rebuilt_target(tmp_path):
    (tmp_path / LOG_NAME).write_text(
        "# ninja log v5\n"
        "0\t118121\t1795979560668147753\tbinning.cuda.o\t3d9d97be\n"
        "8\t55000\t1795979616068151047\text.o\tb478df23\n"
        "not a step\n"
        "x\ty\tz\tbroken.o\t0\n"
        "13\t140000\t1795979692556155593\trasterize.cuda.o\t13c7553f\n"
        "# ninja log v7\n"
        "20\t150500\t1795979832148163891\trasterize.cuda.o\t13c7553f\n"
        "150500\t152416\t1795979834204164013\tgsnb_csrc_x.so\td8757432\n"
    )
    steps = read_steps(tmp_path)
    assert [s.target for s in steps] == [
        "binning.cuda.o",
        "ext.o",
        "rasterize.cuda.o",
        "gsnb_csrc_x.so",
    ]
    assert steps[2] == Step("rasterize.cuda.o", 0.02, 150.5)  # the later line wins
    assert list(step_seconds(tmp_path).items()) == [
        ("rasterize.cuda.o", 150.48),
        ("binning.cuda.o", 118.121),
        ("ext.o", 54.992),
        ("gsnb_csrc_x.so", 1.916),
    ]


def test_no_log_no_steps(tmp_path):
    assert read_steps(tmp_path) == [] and step_seconds(tmp_path / "missing") == {}
