"""``%gs_build`` and ``%gs_doctor``: build the CUDA rasterizer from a notebook, or say why not.

They take the options of ``gsnb build`` and ``gsnb doctor`` (``%gs_build?`` shows them).
"""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Callable
from typing import Any, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from gsnb.toolchain.commands import add_build_arguments, doctor_arguments


class _MagicParser(argparse.ArgumentParser):
    """argparse that reports a bad option as an IPython ``UsageError`` instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog}?)")


def magic_parser(
    prog: str, description: str, add: Callable[[argparse.ArgumentParser], None]
) -> argparse.ArgumentParser:
    """An argument parser named ``prog`` with the options ``add`` puts on it.

    Example:
        >>> p = magic_parser("%gs_doctor", "Check the build toolchain.", doctor_arguments)
        >>> p.parse_args(["--json"]).json
        True
    """
    parser = _MagicParser(prog=prog, description=description, add_help=False)
    add(parser)
    return parser


BUILD_PARSER = magic_parser(
    "%gs_build",
    "Build the CUDA rasterizer for the GPU of this kernel (a cache hit when nothing "
    "changed), load it and smoke-test it on the GPU (once per GPU, driver and torch; "
    "--verify runs it again). On failure, one message names the cause and the fix, with "
    "the compiler log one click away.",
    add_build_arguments,
)
DOCTOR_PARSER = magic_parser(
    "%gs_doctor",
    "Show the GPU, driver, torch, CUDA toolkit, compilers, ninja and build cache found, "
    "with a verdict per line.",
    doctor_arguments,
)


def _parse(parser: argparse.ArgumentParser, line: str) -> argparse.Namespace:
    try:
        return parser.parse_args(shlex.split(line))
    except ValueError as err:  # unbalanced quotes
        raise UsageError(f"{parser.prog}: {err}") from None


def _in_notebook(shell: Any) -> bool:
    return type(shell).__name__ == "ZMQInteractiveShell"


@magics_class
class BuildMagics(Magics):
    """``%gs_build`` and ``%gs_doctor``, registered by ``%load_ext gsnb``.

    Example (in a notebook)::

        %load_ext gsnb
        %gs_doctor
        %gs_build
        %gs_build --arch 8.0,9.0 --jobs 8 --verbose
        %gs_build --verify
    """

    @line_magic
    def gs_build(self, line: str) -> Any:
        """Build (or reuse) the CUDA rasterizer for this kernel's GPU."""
        from gsnb.toolchain import BuildError
        from gsnb.toolchain.commands import build_from_args

        args = _parse(BUILD_PARSER, line)
        try:
            return build_from_args(args)
        except BuildError as err:
            if _in_notebook(self.shell):
                from IPython.display import HTML, display

                display(HTML(err._repr_html_()))
            raise
        except ValueError as err:
            raise UsageError(f"%gs_build: {err}") from None

    @line_magic
    def gs_doctor(self, line: str) -> Any:
        """Show what the build would use, with a verdict per line."""
        from gsnb.toolchain.environment import discover
        from gsnb.toolchain.report import DoctorReport

        args = _parse(DOCTOR_PARSER, line)
        try:
            report = DoctorReport(discover(args.arch, cache_dir=args.cache_dir))
        except ValueError as err:
            raise UsageError(f"%gs_doctor: {err}") from None
        if args.json:
            print(json.dumps(report.environment.to_json(), indent=2))
            return None
        return report


BuildMagics.gs_build.__doc__ = f"{BuildMagics.gs_build.__doc__}\n\n{BUILD_PARSER.format_help()}"
BuildMagics.gs_doctor.__doc__ = f"{BuildMagics.gs_doctor.__doc__}\n\n{DOCTOR_PARSER.format_help()}"
