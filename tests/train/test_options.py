"""Tests for gsnb/train/options.py: one declaration of a run's options for every entry point."""

from __future__ import annotations

import argparse
import dataclasses
import warnings
from fractions import Fraction
from pathlib import Path

import pytest

from gsnb.cli import build_parser
from gsnb.notebook import train_magics
from gsnb.train import commands
from gsnb.train.config import TrainConfig
from gsnb.train.options import (
    CONFIG_OPTIONS,
    NOT_OPTIONS,
    add_config_options,
    option_name,
    stated_defaults,
    strategy_settings,
)

# A value unlike the default for options of every kind: int, float, choice, bool, optional float.
GIVEN = [
    "--steps", "123", "--sh-degree", "1", "--downscale", "2", "--test-every", "0",
    "--seed", "7", "--device", "cpu", "--backend", "reference", "--eval-every", "50",
    "--max-init-points", "99", "--init-scale", "0.5", "--init-rotation", "random",
    "--lr-shN", "1e-4",
    "--random-background", "--no-skip-nonfinite", "--checkpoint-every", "10",
    "--strategy", "mcmc", "--cap-max", "5000", "--refine-every", "50",
]  # fmt: skip


def _cli(command: str, argv: list[str]) -> argparse.Namespace:
    return build_parser(command).parse_args([command, *argv])


def _parser(add) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add(parser)
    return parser


def _action(parser: argparse.ArgumentParser, option: str) -> argparse.Action:
    return next(a for a in parser._actions if option in a.option_strings)


@pytest.mark.parametrize("given", [[], GIVEN], ids=["defaults", "given"])
def test_gsnb_train_and_gs_train_parse_the_same_config(tmp_path: Path, given: list[str]) -> None:
    argv = [str(tmp_path / "scene"), "--out", str(tmp_path / "run"), *given]
    cli_args = _cli("train", argv)
    magic_args = train_magics.TRAIN_PARSER.parse_args(argv)
    from_cli = commands.train_config(cli_args)
    from_magic = train_magics.train_config(magic_args, tmp_path / "scene")
    assert from_cli == from_magic
    assert cli_args.strategy == magic_args.strategy
    assert strategy_settings(cli_args) == strategy_settings(magic_args)
    assert strategy_settings(cli_args) == ({"cap_max": 5000, "refine_every": 50} if given else {})
    if given:
        assert (from_cli.steps, from_cli.lr_shN, from_cli.init_scale) == (123, 1e-4, 0.5)
        assert from_cli.init_rotation == "random"
        assert from_cli.random_background and not from_cli.skip_nonfinite
    else:
        expected = TrainConfig(data=from_cli.data, out_dir=str(tmp_path / "run"))
        assert from_cli == expected and cli_args.strategy == "default"


def test_gsnb_demo_takes_the_same_options_over_its_own_defaults() -> None:
    args = _cli("demo", GIVEN)
    config, _ = commands.demo_config(args, commands.demo_device(args), Path("out"))
    expected = commands.train_config(_cli("train", ["scene", "--out", "out", *GIVEN]))
    same = {f.name for f in dataclasses.fields(TrainConfig)} - {"data"}
    assert {n: getattr(config, n) for n in same} == {n: getattr(expected, n) for n in same}
    args = _cli("demo", ["--device", "cpu"])
    config, _ = commands.demo_config(args, commands.demo_device(args), Path("out"))
    assert (config.sh_degree, config.steps, args.strategy) == (0, 700, "mcmc")


def test_every_config_field_has_an_option_with_its_default() -> None:
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(CONFIG_OPTIONS) == names - set(NOT_OPTIONS)
    parsers = {
        "gsnb train": _parser(commands.train_arguments),
        "gsnb demo": _parser(commands.demo_arguments),
        "%gs_train": train_magics.TRAIN_PARSER,
    }
    stated = stated_defaults()
    for where, parser in parsers.items():
        for f in dataclasses.fields(TrainConfig):
            if f.name in NOT_OPTIONS:
                continue
            action = _action(parser, option_name(f.name))
            assert action.default is None, (where, f.name)  # left out: the config's default
            if where == "gsnb demo" and f.name in ("sh_degree", "steps"):
                continue  # the demo's own defaults, checked below
            if f.name in stated:
                assert f"(default {stated[f.name]}" in action.help, (where, f.name)
            else:
                assert f"(default: {f.default!r}" in action.help or f.default is None, f.name
    demo = parsers["gsnb demo"]
    assert "(default: 0)" in _action(demo, "--sh-degree").help
    assert "(default: 700 on CPU, 3000 on GPU)" in _action(demo, "--steps").help
    assert "30000" not in _action(demo, "--steps").help


def test_the_defaults_the_docstring_states_are_the_fields_defaults() -> None:
    stated = stated_defaults()
    assert len(stated) >= 25
    for f in dataclasses.fields(TrainConfig):
        if f.name not in stated:
            continue
        text = stated[f.name]
        if f.default is None or isinstance(f.default, bool):
            assert text == str(f.default), f.name
        else:  # "2.5e-3 / 20"
            parts = [Fraction(p.strip()) for p in text.split("/")]
            value = parts[0] / parts[1] if len(parts) == 2 else parts[0]
            assert float(value) == pytest.approx(f.default, rel=1e-12), f.name


def test_help_shows_real_defaults(capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser("train").parse_args(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default default)" not in text
    assert "(default: 'default')" in text and "(default: 'auto')" in text
    assert "--sh-degree N highest spherical-harmonics degree of the colours (default 3" in text
    assert "--lr-scales X Adam learning rate of the log-scales (default 5e-3" in text
    with pytest.raises(SystemExit):
        build_parser("demo").parse_args(["demo", "--help"])
    assert "(default: 'mcmc')" in capsys.readouterr().out


def test_out_dir_still_works_in_gs_train_and_warns(tmp_path: Path) -> None:
    argv = [str(tmp_path), "--out-dir", str(tmp_path / "run")]
    with pytest.warns(FutureWarning, match="--out-dir is deprecated; use --out"):
        args = train_magics.TRAIN_PARSER.parse_args(argv)
    assert train_magics.train_config(args, tmp_path).out_dir == str(tmp_path / "run")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train_magics.TRAIN_PARSER.parse_args([str(tmp_path), "--out", str(tmp_path / "run")])
    assert "--out-dir" not in train_magics.TRAIN_PARSER.format_help()


def test_bad_values_are_refused_by_the_parser_or_the_config() -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_config_options(parser)
    with pytest.raises(argparse.ArgumentError, match=r"invalid int value: '1\.5'"):
        parser.parse_args(["--sh-degree", "1.5"])
    with pytest.raises(argparse.ArgumentError, match="invalid choice: 'tpu'"):
        parser.parse_args(["--device", "tpu"])
    with pytest.raises(ValueError, match=r"^--sh-degree 4 is outside its range \[0, 3\]"):
        TrainConfig.from_args(parser.parse_args(["--sh-degree", "4"]))
    with pytest.raises(ValueError, match=r"no options named \['lr'\]"):
        add_config_options(argparse.ArgumentParser(), defaults={"lr": 1.0})


def test_from_args_takes_given_over_defaults_and_overrides_over_both() -> None:
    parser = argparse.ArgumentParser()
    add_config_options(parser, defaults={"sh_degree": 0, "seed": 5})
    args = parser.parse_args(["--seed", "2", "--steps", "9"])
    config = TrainConfig.from_args(args, {"sh_degree": 0, "seed": 5}, steps=11)
    assert (config.sh_degree, config.seed, config.steps) == (0, 2, 11)
