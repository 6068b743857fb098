"""The ``gsnb`` command line: ``gsnb doctor | build | fetch | process | train | demo | export |
video``.

Each command lives in the module of the feature it drives; a module is
imported only when its command runs, so ``gsnb --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from types import FrameType
from typing import NoReturn

# command -> (module, function prefix, one-line help). The module defines
# ``<prefix>_arguments(parser)`` and ``<prefix>(args) -> int``.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "doctor": ("gsnb.toolchain.commands", "doctor", "check GPU, CUDA toolkit and compilers"),
    "build": ("gsnb.toolchain.commands", "build", "build the CUDA rasterizer for this GPU"),
    "fetch": ("gsnb.data.commands", "fetch", "download a sample capture (checked), or copy yours"),
    "process": ("gsnb.data.sfm.commands", "process", "pose your photos or video (pycolmap)"),
    "export": ("gsnb.export.commands", "export", "write a checkpoint as a 3DGS PLY file"),
    "video": ("gsnb.export.commands", "video", "render a camera path to an H.264 MP4 video"),
    "train": ("gsnb.train.commands", "train", "train Gaussians on a dataset of posed photos"),
    "demo": ("gsnb.train.commands", "demo", "train on a synthetic scene: no download, PLY + video"),
}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and where to look, not the whole usage
    (``gsnb train``'s runs to dozens of lines)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; only the ``chosen`` command's module is imported."""
    parser = _Parser(prog="gsnb", description="3D Gaussian Splatting from a Jupyter notebook.")
    parser.add_argument("--version", action="store_true", help="print gsnb's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, prefix, text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=text, description=text)
        if name == chosen:
            getattr(importlib.import_module(module), f"{prefix}_arguments")(command_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gsnb``; returns the process exit code."""
    started = time.perf_counter()  # the commands' timelines start here (gsnb.train.timeline)
    args_in = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in args_in if not a.startswith("-")), None)
    parser = build_parser(chosen if chosen in COMMANDS else None)
    args = parser.parse_args(args_in)
    if args.version:
        from gsnb._version import __version__

        print(f"gsnb {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    if getattr(args, "viewer", False) and args.command == "train":
        from gsnb.viewer.runs import serve_run  # the viewer layer sits above training's

        args.serve_viewer = serve_run
    module, prefix, _ = COMMANDS[args.command]
    args.started = started
    python_format, warnings.formatwarning = warnings.formatwarning, _one_line_warning
    # SIGTERM (kill, docker stop, a scheduler's preemption) as Ctrl-C: a training run stops
    # at the next step boundary and writes its checkpoint
    main_thread = threading.current_thread() is threading.main_thread()  # signals: its only
    terminate = signal.signal(signal.SIGTERM, _terminate_as_interrupt) if main_thread else None
    try:
        return int(getattr(importlib.import_module(module), prefix)(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = python_format
        if terminate is not None:  # None also for a handler not set from Python: left
            signal.signal(signal.SIGTERM, terminate)


def _terminate_as_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM's handler: say so, and deliver SIGINT, which the training loop handles."""
    print("gsnb: terminated (SIGTERM): stopping as for Ctrl-C", file=sys.stderr, flush=True)
    signal.raise_signal(signal.SIGINT)


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    line: str | None = None,
) -> str:
    """gsnb's own warnings on the command line as ``warning: ...``, without the source line
    Python shows for them; other packages' warnings as Python shows them."""
    if category is UserWarning and f"{os.sep}gsnb{os.sep}" in filename:
        return f"warning: {message}\n"
    return _python_format(message, category, filename, lineno, line)


_python_format = warnings.formatwarning

if __name__ == "__main__":
    sys.exit(main())
