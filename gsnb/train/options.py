"""The options of a training run, declared once for ``gsnb train``, ``gsnb demo`` and ``%gs_train``.

:func:`add_config_options` puts one option on a parser for each field of
:class:`~gsnb.train.config.TrainConfig` (``sh_degree`` -> ``--sh-degree``) with the field's
type, choices (its knob metadata) and documentation (the class docstring);
:meth:`TrainConfig.from_args <gsnb.train.config.TrainConfig.from_args>` is its pair and builds
the config from what was parsed. An option left out parses to ``None``, so the config's default
applies and ``--resume`` can tell an option given from one left out; the help states the default.

Every field a run sets is an option, the live knobs (learning rates, loss weights,
regularisers, schedules) included, in all three entry points alike: a run started from the
shell has no panel, so its command line is the only place to set them, and the same option
means the same thing in a notebook, where the panel then moves the knob from the value given.
Two fields have no option of their own: ``data`` is the positional DATA argument and
``out_dir`` is ``--out``.

The options that are not TrainConfig fields but that two entry points share (``--out``,
``--resume``, ``--strategy``, ``--no-progress``) are declared here too; an option of one entry
point alone stays beside it.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_config_options(parser)
    >>> args = parser.parse_args(["--steps", "7000", "--sh-degree", "1", "--random-background"])
    >>> config = TrainConfig.from_args(args)
    >>> config.steps, config.sh_degree, config.random_background, config.seed
    (7000, 1, True, 0)
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gsnb.train.config import TrainConfig
from gsnb.train.knobs import attribute_docs, named_as_options
from gsnb.train.strategy import STRATEGIES, Strategy, make_strategy

NOT_OPTIONS = ("data", "out_dir")
"""TrainConfig fields without an option of their own: DATA is positional, ``out_dir`` is --out."""

CONFIG_OPTIONS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(TrainConfig) if f.name not in NOT_OPTIONS
)
"""The TrainConfig fields that are options, in field order."""

FIXED_TITLE = "settings of the run (fixed once it starts)"
LIVE_TITLE = "live settings (trainer.set() and the panel change them while it runs)"


def option_name(field: str) -> str:
    """The option of a TrainConfig field.

    Example:
        >>> option_name("sh_degree")
        '--sh-degree'
    """
    return "--" + field.replace("_", "-")


def option_as_given(field: str, value: object) -> str:
    """The option as a command line gives ``value``: ``--no-X`` for a false switch.

    Example:
        >>> option_as_given("opacity_reset", False), option_as_given("steps", 70)
        ('--no-opacity-reset', '--steps')
    """
    return "--no-" + option_name(field)[2:] if value is False else option_name(field)


def add_config_options(
    parser: argparse.ArgumentParser,
    defaults: Mapping[str, Any] | None = None,
    default_text: Mapping[str, str] | None = None,
) -> None:
    """Add an option for each TrainConfig field of :data:`CONFIG_OPTIONS` to ``parser``.

    Each option parses to ``None`` when left out; give the parsed namespace to
    :meth:`TrainConfig.from_args` with the same ``defaults``.

    Args:
        parser: the parser (or argument group holder) to add to.
        defaults: defaults of this entry point that replace the field's (``gsnb demo``
            trains SH degree 0); the help shows them.
        default_text: the help's wording of a default decided later (``"700 on CPU, 3000
            on GPU"``); :meth:`TrainConfig.from_args` then needs the value as an override.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_config_options(parser, defaults={"sh_degree": 0})
        >>> "(default: 0)" in parser.format_help()
        True
    """
    defaults = dict(defaults or {})
    default_text = dict(default_text or {})
    unknown = sorted((set(defaults) | set(default_text)) - set(CONFIG_OPTIONS))
    if unknown:
        raise ValueError(f"no options named {unknown}; the options are {list(CONFIG_OPTIONS)}")
    docs = attribute_docs(TrainConfig)
    hints = typing.get_type_hints(TrainConfig)
    fixed = parser.add_argument_group(FIXED_TITLE)
    live = parser.add_argument_group(LIVE_TITLE)
    for f in dataclasses.fields(TrainConfig):
        if f.name not in CONFIG_OPTIONS:
            continue
        meta = f.metadata
        group = live if meta.get("knob") and meta.get("live", True) else fixed
        if f.name in default_text:
            text = default_text[f.name]
        elif f.name in defaults:
            text = show_default(defaults[f.name])
        else:
            text = None
        help_text = option_help(docs.get(f.name, ""), f.default, text)
        kind = _value_type(hints[f.name])
        if f.name == "checkpoint_every":
            group.add_argument(
                option_name(f.name),
                action=_StepsOrMinutes,
                default=None,
                metavar="N|Nm",
                help=f"{help_text} Nm (e.g. 10m) sets checkpoint_minutes instead.",
            )
        elif kind is bool:
            group.add_argument(
                option_name(f.name),
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        else:
            group.add_argument(
                option_name(f.name),
                type=kind,
                choices=meta.get("choices"),
                default=None,
                metavar=None if meta.get("choices") else _metavar(kind),
                help=help_text,
            )


def config_argv(args: argparse.Namespace) -> list[str]:
    """The options of :func:`add_config_options` that ``args`` gives, as a command line.

    The inverse of parsing: a run started in another process (``%gs_train --nproc``)
    gets the same settings.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_config_options(parser)
        >>> argv = ["--steps", "70", "--no-random-background", "--checkpoint-every", "2m"]
        >>> config_argv(parser.parse_args(argv))[:3]
        ['--steps', '70', '--no-random-background']
        >>> vars(parser.parse_args(config_argv(parser.parse_args(argv)))) == vars(
        ...     parser.parse_args(argv))
        True
    """
    return _given_argv(args, CONFIG_OPTIONS)


def _given_argv(args: argparse.Namespace, names: Iterable[str]) -> list[str]:
    """The options ``names`` that ``args`` gives (not None), as a command line."""
    argv: list[str] = []
    for name in names:
        value = getattr(args, name, None)
        if isinstance(value, bool):
            argv.append(option_as_given(name, value))
        elif value is not None:
            argv += [option_name(name), str(value)]
    return argv


def show_default(value: Any) -> str:
    """A default as the help shows it: strings quoted, so ``'default'`` reads as a value.

    Example:
        >>> show_default("default"), show_default(0.2)
        ("'default'", '0.2')
    """
    return repr(value) if isinstance(value, str) else str(value)


def option_help(doc: str, default: Any, default_text: str | None = None) -> str:
    """Help of an option from its field's documentation.

    The documentation states the field's default in words (``(default 8, INRIA's
    convention)``); a default of the entry point (``default_text``) replaces that
    parenthesis, and a documentation without one gets ``(default: X)``.

    Example:
        >>> option_help("training steps (default 30000, INRIA). Live.", 30000)
        'training steps (default 30000, INRIA).'
        >>> option_help("training steps (default 30000, INRIA). Live.", 30000, "700")
        'training steps (default: 700).'
        >>> option_help("``'auto'`` or ``'cpu'``.", "auto")
        "'auto' or 'cpu' (default: 'auto')."
    """
    text = re.sub(r":\w+:`~?([^`]*)`", r"\1", doc).replace("``", "")
    text = re.sub(r"\s*\bLive\.$", "", text).strip()
    start = text.find("(default")
    if default_text is not None and start >= 0:
        text = (text[:start].rstrip() + text[_closing(text, start) + 1 :]).strip()
    if default_text is None and (start >= 0 or default is None):
        return text.replace("%", "%%")  # argparse %-formats help
    shown = default_text if default_text is not None else show_default(default)
    stop = "." if text.endswith(".") else ""
    return f"{text.removesuffix('.')} (default: {shown}){stop}".replace("%", "%%")


def stated_defaults() -> dict[str, str]:
    """The defaults TrainConfig's docstring states in words, ``{field: text}``.

    Example:
        >>> stated_defaults()["test_every"]
        '8'
    """
    found = {}
    for name, doc in attribute_docs(TrainConfig).items():
        match = re.search(r"\(default ([^,;:)]+)", doc)
        if match:
            found[name] = match.group(1).strip()
    return found


# ------------------------------------------------- shared non-config options
def add_strategy_option(
    parser: argparse.ArgumentParser, default: str = "default", note: str | None = None
) -> None:
    """``--strategy``: the densification strategy, a Trainer argument rather than a setting,
    and an option for each knob of the strategies (``note``: how this entry point sets them).

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_strategy_option(parser, default="mcmc")
        >>> parser.parse_args([]).strategy
        'mcmc'
    """
    parser.add_argument(
        "--strategy",
        choices=sorted(STRATEGIES),
        default=default,
        help="densification: 'default' (3DGS clone/split/prune, Kerbl et al. 2023) or 'mcmc' "
        f"(3DGS as MCMC, Kheradmand et al. 2024) (default: {show_default(default)})",
    )
    group = parser.add_argument_group(STRATEGY_TITLE, note)
    for name, owners in strategy_knobs().items():
        docs = {strategy: attribute_docs(STRATEGIES[strategy]) for strategy in owners}
        help_text = "; ".join(
            f"{strategy}: {option_help(docs[strategy].get(name, ''), f.default).rstrip('.')}"
            for strategy, f in owners.items()
        )
        field_type = _value_type(typing.get_type_hints(STRATEGIES[next(iter(owners))])[name])
        if field_type is bool:
            group.add_argument(
                option_name(name),
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        else:
            group.add_argument(
                option_name(name),
                type=field_type,
                default=None,
                metavar=_metavar(field_type),
                help=help_text,
            )


STRATEGY_TITLE = (
    "densification settings (live; each names the strategies it applies to, and a run "
    "of another strategy refuses it)"
)


def strategy_knobs() -> dict[str, dict[str, dataclasses.Field]]:
    """The strategies' knobs: ``{field: {strategy name: its dataclass field}}``, in order.

    Example:
        >>> knobs = strategy_knobs()
        >>> sorted(knobs["refine_every"]), list(knobs["noise_lr"])
        (['default', 'mcmc'], ['mcmc'])
    """
    found: dict[str, dict[str, dataclasses.Field]] = {}
    for strategy, cls in STRATEGIES.items():
        for f in dataclasses.fields(cls):
            if f.metadata.get("knob"):
                found.setdefault(f.name, {})[strategy] = f
    return found


def strategy_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The strategy knobs ``args`` gives (``--grow-grad2d 3e-4`` -> ``{"grow_grad2d": 3e-4}``).

    Raises ``ValueError`` for an option of another strategy than ``args.strategy``.

    Example:
        >>> strategy_settings(argparse.Namespace(strategy="default", grow_grad2d=3e-4))
        {'grow_grad2d': 0.0003}
        >>> strategy_settings(argparse.Namespace(strategy="default", noise_lr=10.0))
        Traceback (most recent call last):
        ...
        ValueError: --noise-lr applies to --strategy mcmc, not default
        >>> strategy_settings(argparse.Namespace(strategy="mcmc", opacity_reset=False))
        Traceback (most recent call last):
        ...
        ValueError: --no-opacity-reset applies to --strategy default, not mcmc
    """
    given: dict[str, Any] = {}
    for name, owners in strategy_knobs().items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if args.strategy not in owners:
            names = " or ".join(sorted(owners))
            given_as = option_as_given(name, value)
            raise ValueError(f"{given_as} applies to --strategy {names}, not {args.strategy}")
        given[name] = value
    return given


def strategy_from_args(args: argparse.Namespace, **defaults: Any) -> Strategy:
    """The strategy ``args`` names, with its knobs given there over ``defaults``.

    Example:
        >>> s = strategy_from_args(argparse.Namespace(strategy="mcmc", cap_max=5000))
        >>> type(s).__name__, s.cap_max
        ('MCMCStrategy', 5000)
    """
    with named_as_options():
        return make_strategy(args.strategy, **(defaults | strategy_settings(args)))


def strategy_argv(args: argparse.Namespace) -> list[str]:
    """``--strategy`` and the strategy knobs ``args`` gives, as a command line.

    Example:
        >>> strategy_argv(argparse.Namespace(strategy="default", opacity_reset=False))
        ['--strategy', 'default', '--no-opacity-reset']
    """
    return ["--strategy", args.strategy, *_given_argv(args, strategy_knobs())]


def add_out_option(
    parser: argparse.ArgumentParser,
    help: str,
    default: str | None = None,
    required: bool = False,
    deprecated: Sequence[str] = (),
) -> None:
    """``--out DIR``: the run's output folder; ``deprecated`` names still work and warn.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_out_option(parser, "checkpoints", deprecated=["--out-dir"])
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     parser.parse_args(["--out-dir", "runs/x"]).out
        'runs/x'
        >>> str(caught[0].message)
        '--out-dir is deprecated; use --out'
    """
    shown = f"{help} (default: {default})" if default is not None else help
    parser.add_argument("--out", metavar="DIR", default=default, required=required, help=shown)
    for name in deprecated:
        parser.add_argument(
            name, dest="out", metavar="DIR", action=_DeprecatedAlias, help=argparse.SUPPRESS
        )


def add_resume_option(parser: argparse.ArgumentParser) -> None:
    """``--resume CHECKPOINT|RUN_FOLDER`` to continue a saved run, and ``--overwrite``.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_resume_option(parser)
        >>> a = parser.parse_args(["--resume", "runs/fox"])
        >>> a.resume, a.overwrite
        ('runs/fox', False)
    """
    parser.add_argument(
        "--resume",
        metavar="CHECKPOINT",
        help="continue the run saved in CHECKPOINT, or in a run folder (its newest intact "
        "checkpoint), with its settings; of the settings, only --steps (to extend it), "
        "--device, the checkpoint options and --out apply (others given are ignored, with "
        "a warning naming them)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the results of another run in the output folder (without it, a "
        "folder holding another run is refused)",
    )


RESUME_OPTIONS = ("steps", "device", "checkpoint_every", "checkpoint_minutes", "keep_checkpoints")
"""The settings a resumed run takes from the command line; the rest come from its checkpoint."""


def ignored_on_resume(args: argparse.Namespace) -> list[str]:
    """The options given with ``--resume`` that the resumed run does not take.

    The strategy's knobs come from the checkpoint too.

    Example:
        >>> ignored_on_resume(argparse.Namespace(steps=9000, sh_degree=1, opacity_reset=False))
        ['--sh-degree', '--no-opacity-reset']
    """
    names = [n for n in CONFIG_OPTIONS if n not in RESUME_OPTIONS] + list(strategy_knobs())
    given = [(n, getattr(args, n, None)) for n in names]
    return [option_as_given(n, value) for n, value in given if value is not None]


def add_nproc_option(parser: argparse.ArgumentParser) -> None:
    """``--nproc N``: train with N data-parallel processes (one per GPU) on this machine.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_nproc_option(parser)
        >>> parser.parse_args(["--nproc", "2"]).nproc
        2
    """
    parser.add_argument(
        "--nproc",
        type=_positive_int,
        default=1,
        metavar="N",
        help="data-parallel processes on this machine, one per GPU (gloo on the CPU): each "
        "renders batch_size / N views of every step (default: 1). Started with "
        "torch.distributed's elastic launcher; the same command runs under torchrun",
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``: no progress bar.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_progress_option(parser)
        >>> parser.parse_args(["--no-progress"]).no_progress
        True
    """
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


class _StepsOrMinutes(argparse.Action):
    """``--checkpoint-every 500`` (steps) or ``--checkpoint-every 10m`` (minutes).

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_config_options(parser)
        >>> a = parser.parse_args(["--checkpoint-every", "2.5m"])
        >>> a.checkpoint_every, a.checkpoint_minutes
        (0, 2.5)
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        text = str(values).strip().lower()
        match = re.fullmatch(r"(\d+(?:\.\d*)?)\s*(m|min|minutes?)", text)
        if match:
            namespace.checkpoint_every = 0
            namespace.checkpoint_minutes = float(match.group(1))
        elif text.isdigit():
            namespace.checkpoint_every = int(text)
        else:
            parser.error(
                f"{option_string}: {values!r} is neither a step count (500) nor minutes (10m)"
            )


class _DeprecatedAlias(argparse.Action):
    """Stores its value under the new option's name and warns with the new name."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        # FutureWarning: shown to users by default, unlike DeprecationWarning
        warnings.warn(f"{option_string} is deprecated; use --out", FutureWarning, stacklevel=2)
        setattr(namespace, self.dest, values)


def _closing(text: str, start: int) -> int:
    """Index of the parenthesis that closes the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return len(text) - 1


def _value_type(hint: Any) -> type:
    """``int`` for ``int``, ``float`` for ``float | None``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return hint


def _metavar(kind: type) -> str:
    return {int: "N", float: "X", str: "TEXT"}[kind]
