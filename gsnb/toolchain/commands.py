"""``gsnb doctor`` and ``gsnb build``: the command-line face of :mod:`gsnb.toolchain`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by doctor and build: ``--arch``, ``--cache-dir``."""
    parser.add_argument(
        "--arch",
        default=None,
        help="compute capabilities to build for, e.g. 9.0 or 8.0,9.0 or 8.6+PTX "
        "(default: those of the visible GPUs)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="build cache folder (default: $GSNB_CACHE_DIR or ~/.cache/gsnb/extensions)",
    )


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """The build options: ``--force --clean --verify --verbose --jobs N --no-progress``."""
    add_target_arguments(parser)
    parser.add_argument(
        "--force", action="store_true", help="rebuild even when a cached build matches"
    )
    parser.add_argument(
        "--clean", action="store_true", help="remove all cached builds first, then build"
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="run the GPU smoke test even when this build passed it before on this GPU",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show the compiler's output as it runs"
    )
    parser.add_argument(
        "--jobs", type=_positive, default=None, help="parallel compile jobs (default: CPUs)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--jobs wants a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--jobs must be 1 or more, got {value}")
    return value


def doctor_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gsnb doctor``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "exit codes: 0 ready to build; 1 a problem stops the build (each FAIL line names its "
        "fix);\n2 bad arguments; 3 no GPU on this machine: nothing to build, gsnb runs on the CPU"
    )
    add_target_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")


def doctor(args: argparse.Namespace) -> int:
    """Print what was found with a verdict per line; the exit code says what follows.

    0: ready to build; 1: a problem stops the build; 2: bad arguments; 3: no GPU here,
    nothing to build (gsnb runs on the CPU with its reference renderer).

    Example:
        >>> import argparse
        >>> args = argparse.Namespace(arch="9.0", cache_dir=None, json=False)
        >>> doctor(args) in (0, 1, 3)  # doctest: +ELLIPSIS
        info  platform ...
        True
    """
    from gsnb.toolchain.environment import discover
    from gsnb.toolchain.report import DoctorReport

    try:
        report = DoctorReport(discover(args.arch, cache_dir=args.cache_dir))
    except ValueError as err:
        print(f"gsnb doctor: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**report.environment.to_json(), "summary": report.summary}, indent=2))
    else:
        print(report)
    return report.exit_code


def build_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gsnb build``."""
    add_build_arguments(parser)


def build_from_args(args: argparse.Namespace) -> Any:
    """:func:`gsnb.toolchain.build` with the options :func:`add_build_arguments` parsed.

    Used by ``gsnb build`` and ``%gs_build``; raises what ``build`` raises.
    """
    from gsnb.toolchain import build as run_build

    return run_build(
        args.arch,
        force=args.force,
        clean=args.clean,
        verify=args.verify,
        verbose=args.verbose,
        jobs=args.jobs,
        progress=not args.no_progress,
        cache_dir=args.cache_dir,
    )


def build(args: argparse.Namespace) -> int:
    """Build (or reuse) the rasterizer; on failure print the cause and the fix, exit 1.

    A cached build already smoke-tested on this GPU is found without loading torch
    (:mod:`gsnb.toolchain.warm`); anything else goes through :func:`gsnb.toolchain.build`.
    """
    if not (args.force or args.clean or args.verify):
        from gsnb.toolchain.warm import warm_hit

        hit = warm_hit(args.arch, args.cache_dir)
        if hit is not None:
            print(hit)
            return 0
    from gsnb.toolchain import BuildError

    try:
        result = build_from_args(args)
    except BuildError as err:
        print(f"gsnb build: {err}", file=sys.stderr)
        return 1
    except ValueError as err:
        print(f"gsnb build: {err}", file=sys.stderr)
        return 2
    print(result)
    return 0
