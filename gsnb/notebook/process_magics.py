"""``%gs_process INPUT --out DIR``: pose photos or a video in a cell (``gsnb process``), with a
progress widget, then the summary and the cameras and points seen from above."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from IPython.core.magic import Magics, line_magic, magics_class

from gsnb.data.sfm.commands import process_arguments, process_options


def process_parser() -> argparse.ArgumentParser:
    """The argument parser of ``%gs_process`` (the options of ``gsnb process``).

    Example:
        >>> args = process_parser().parse_args(["walk.mp4", "--out", "scene", "--fps", "3"])
        >>> args.input, str(args.out), args.fps
        ('walk.mp4', 'scene', 3.0)
    """
    parser = argparse.ArgumentParser(prog="%gs_process", exit_on_error=False)
    process_arguments(parser)
    return parser


class StageProgress:
    """An ipywidgets box: one line per stage with a bar; ``update`` is ``process``'s callback.

    Example:
        >>> box = StageProgress(["features", "mapping"])
        >>> box.update("mapping", 3, 4)
        >>> box.bars["mapping"].value, box.labels["features"].value
        (3, 'features: done')
    """

    def __init__(self, stages: list[str]) -> None:
        import ipywidgets as widgets

        self.stages = stages
        self.bars = {s: widgets.IntProgress(value=0, min=0, max=1) for s in stages}
        self.labels = {s: widgets.Label(f"{s}: waiting") for s in stages}
        rows = [widgets.HBox([self.labels[s], self.bars[s]]) for s in stages]
        self.widget = widgets.VBox(rows)

    def update(self, stage: str, done: int, total: int) -> None:
        """Show ``stage`` at ``done`` of ``total``; earlier stages read done."""
        for earlier in self.stages[: self.stages.index(stage)]:
            self.bars[earlier].value = self.bars[earlier].max
            self.labels[earlier].value = f"{earlier}: done"
        bar = self.bars[stage]
        bar.max = max(total, 1)
        bar.value = min(done, bar.max)
        self.labels[stage].value = f"{stage}: {done}/{total}"

    def finish(self) -> None:
        """Every stage done."""
        self.update(self.stages[-1], 1, 1)
        self.labels[self.stages[-1]].value = f"{self.stages[-1]}: done"


@magics_class
class ProcessMagics(Magics):
    """``%gs_process``, registered by ``%load_ext gsnb``.

    Example (in a notebook)::

        %load_ext gsnb
        summary = %gs_process my_photos --out my_scene --max-image-size 1600
        %gs_process walk.mp4 --out walk_scene --frames 150
    """

    @line_magic
    def gs_process(self, line: str) -> Any:
        """Pose a folder of photos or a video; ``%gs_process --help`` lists the options.

        Shows the stages' progress, then the summary and a top view of the
        model; returns the ``ProcessSummary``.
        """
        from IPython.display import display

        from gsnb.data.sfm import STAGES, ProcessError, process
        from gsnb.notebook.top_view import top_view_figure

        parser = process_parser()
        try:
            args = parser.parse_args(shlex.split(line))
        except SystemExit:  # --help printed its text
            return None
        except argparse.ArgumentError as err:
            raise ValueError(f"%gs_process: {err}; see %gs_process --help") from None
        progress = StageProgress(list(STAGES))
        display(progress.widget)
        try:
            summary = process(args.input, args.out, process_options(args), progress=progress.update)
        except ProcessError as err:
            raise ProcessError(f"%gs_process: {err}") from None
        except (OSError, ValueError, RuntimeError) as err:  # COLMAP's checks, a full disk
            first = (str(err).splitlines() or [type(err).__name__])[0][:300]
            log = Path(args.out) / "work" / "colmap.log"
            raise ProcessError(f"%gs_process: {first} (COLMAP's log: {log})") from None
        progress.finish()
        print("\n".join(summary.lines()))
        display(top_view_figure(Path(args.out) / "sparse" / "0"))
        return summary


ProcessMagics.gs_process.__doc__ = (
    f"{ProcessMagics.gs_process.__doc__}\n{process_parser().format_help()}"
)
