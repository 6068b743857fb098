"""``%gs_train DATA [options]``: make a trainer, show its panel and train in the background."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from gsnb.notebook.build_magics import magic_parser
from gsnb.train.options import (
    add_config_options,
    add_nproc_option,
    add_out_option,
    add_resume_option,
    add_strategy_option,
    strategy_from_args,
)

if TYPE_CHECKING:
    from gsnb.train import TrainConfig, Trainer


def train_arguments(parser: argparse.ArgumentParser) -> None:
    """Put ``%gs_train``'s options on ``parser``: those of ``gsnb train`` and the notebook's own.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> train_arguments(p)
        >>> a = p.parse_args(["data/fox", "--steps", "500", "--out", "runs/fox"])
        >>> a.steps, a.out
        (500, 'runs/fox')
    """
    parser.add_argument(
        "data", help="dataset folder, or a notebook variable holding a SceneDataset"
    )
    add_out_option(
        parser, "write checkpoints here (when stopped or finished)", deprecated=["--out-dir"]
    )
    add_resume_option(parser)
    parser.add_argument(
        "--camera", default="0", help="training view shown live: index or file name (default 0)"
    )
    parser.add_argument(
        "--name", default="trainer", help="notebook variable for the trainer (default 'trainer')"
    )
    parser.add_argument("--no-start", action="store_true", help="show the panel, do not start")
    parser.add_argument("--viewer", action="store_true", help="also open the 3D viewer (viser)")
    parser.add_argument("--port", type=int, default=0, help="viewer port (default 0: a free one)")
    add_strategy_option(parser)
    add_nproc_option(parser)
    add_config_options(parser)


TRAIN_PARSER = magic_parser(
    "%gs_train",
    "Make a trainer for DATA, show its widgets panel (knobs, start/pause/stop, live curves "
    "and render) and train in the background; the notebook stays usable. The trainer is "
    "stored in the notebook variable --name, the panel in NAME_panel, the viewer in NAME_viewer.",
    train_arguments,
)


def train_config(args: argparse.Namespace, path: Path | None) -> TrainConfig:
    """The settings ``%gs_train``'s options describe (``path``: the dataset folder, if one).

    Example:
        >>> args = TRAIN_PARSER.parse_args(["data/fox", "--steps", "500", "--out", "runs/fox"])
        >>> c = train_config(args, None)
        >>> c.steps, c.out_dir, c.data
        (500, 'runs/fox', None)
    """
    from gsnb.train import TrainConfig

    data = None if path is None else str(path.resolve())
    return TrainConfig.from_args(args, data=data, out_dir=args.out)


def make_trainer(args: argparse.Namespace, namespace: dict[str, Any]) -> Trainer:
    """The trainer ``%gs_train`` options describe (``namespace``: the notebook's variables).

    Example:
        >>> # trainer = make_trainer(TRAIN_PARSER.parse_args(["data/fox", "--downscale", "4"]), {})
    """
    from gsnb.data.dataset import SceneDataset
    from gsnb.train import Trainer

    held = namespace.get(args.data)
    dataset = held if isinstance(held, SceneDataset) else None
    path = None
    if dataset is None:
        path = Path(args.data).expanduser()
        if not path.exists():
            raise UsageError(
                f"%gs_train: {args.data!r} is neither a dataset folder nor a notebook variable "
                "holding a SceneDataset"
            )
    from gsnb.train.commands import claim_folder, config_dataset, preflight, resume_run
    from gsnb.train.rundir import RunFolder
    from gsnb.train.warm import warming

    previous = namespace.get(args.name)
    if isinstance(previous, Trainer) and previous.run_folder is not None and not previous.running:
        previous.run_folder.release()  # the variable is about to hold the new run
    config = train_config(args, path)
    strategy = None if args.resume else strategy_from_args(args)  # refused before any loading
    # as gsnb train: the first refine step's kernels load while the photos decode
    with warming(config.device, args.strategy):
        if dataset is None and not args.resume:
            dataset = config_dataset(path, config)
    folder = RunFolder(args.out) if args.out else None
    try:
        if folder is not None:
            claim_folder(folder, args, "%gs_train")
        if args.resume:  # as gsnb train --resume: DATA (a variable or a folder), steps, device, out
            trainer = resume_run(args, Path(args.out) if args.out else None, dataset)
        else:
            trainer = Trainer(dataset, config, strategy=strategy)
        if folder is not None:
            preflight(trainer, folder)
    except BaseException:
        if folder is not None:
            folder.release(remove_if_new=True)
        raise
    trainer.run_folder = folder
    return trainer


@magics_class
class TrainMagics(Magics):
    """``%gs_train``, registered by ``%load_ext gsnb``.

    Example (in a notebook)::

        %load_ext gsnb
        %gs_train ../shared/data/fox --downscale 4 --steps 7000 --eval-every 1000
        trainer.set(lr_scales=2e-3)   # or turn the knob in the panel
    """

    @line_magic
    def gs_train(self, line: str) -> None:
        """Make a trainer, show its panel and start training in the background."""
        from IPython.display import display

        from gsnb.notebook.panel import TrainingPanel

        try:
            args = TRAIN_PARSER.parse_args(shlex.split(line))
        except ValueError as err:  # unbalanced quotes
            raise UsageError(f"%gs_train: {err}") from None
        namespace = self.shell.user_ns if self.shell is not None else {}
        previous = namespace.get(args.name)
        if getattr(previous, "running", False):
            raise UsageError(
                f"%gs_train: {args.name} is still training; call {args.name}.stop() first, "
                "or pass --name to keep both"
            )
        if args.nproc > 1:  # worker processes: the run lives outside this kernel
            _stop_viewer(namespace.pop(f"{args.name}_viewer", None))
            panel = start_workers(args, namespace)
            namespace[args.name] = panel.trainer
            namespace[f"{args.name}_panel"] = panel
            display(panel)
            if args.viewer:
                panel.show_viewer_when_ready()
            return
        trainer = None
        try:
            trainer = make_trainer(args, namespace)
            camera: int | str = int(args.camera) if args.camera.isdigit() else args.camera
            panel = TrainingPanel(trainer, camera=camera)
        except (ValueError, OSError, RuntimeError) as err:  # bad options, data or out folder
            if trainer is not None and trainer.run_folder is not None:
                trainer.run_folder.release()  # the run that was not shown holds no folder
            raise UsageError(f"%gs_train: {err}") from None
        namespace[args.name] = trainer
        namespace[f"{args.name}_panel"] = panel
        display(panel)
        # the previous run's viewer under this name would hold its server and port, unreachable
        _stop_viewer(namespace.pop(f"{args.name}_viewer", None))
        if args.viewer:
            from gsnb.viewer import Viewer

            viewer = Viewer(trainer, port=args.port)
            namespace[f"{args.name}_viewer"] = viewer
            viewer.show()
        if not args.no_start:
            panel.start_button.click()


def start_workers(args: argparse.Namespace, namespace: dict[str, Any]) -> Any:
    """``%gs_train --nproc N``: ``gsnb train`` with N workers in the background, steered from
    a panel.

    Returns a :class:`~gsnb.notebook.workers.WorkersPanel` of a
    :class:`~gsnb.notebook.workers.WorkerRun`. The data must be a folder (every worker
    loads it) and ``--out`` is required (the results land there).
    """
    from gsnb.data.dataset import SceneDataset
    from gsnb.notebook.workers import (
        BackgroundTraining,
        WorkerRun,
        WorkersPanel,
        forget_stale_viewer,
        train_command,
    )
    from gsnb.train.remote import CONTROL_ENV, RunControl, serve_store
    from gsnb.train.strategy import make_strategy

    if args.out is None:
        raise UsageError("%gs_train --nproc needs --out: the workers write their results there")
    if isinstance(namespace.get(args.data), SceneDataset) or not Path(args.data).exists():
        raise UsageError(
            f"%gs_train --nproc: {args.data!r} is not a dataset folder; the workers load the "
            "data themselves, so pass its folder rather than a notebook variable"
        )
    if args.no_start:
        raise UsageError("%gs_train --nproc: the workers start at once; leave out --no-start")
    try:
        config = train_config(args, Path(args.data))
        # a resume takes the checkpoint's strategy: its workers warn about options given
        strategy = make_strategy(args.strategy) if args.resume else strategy_from_args(args)
    except ValueError as err:
        raise UsageError(f"%gs_train: {err}") from None
    forget_stale_viewer(Path(args.out))
    control = RunControl(serve_store())
    command = train_command(args)
    background = BackgroundTraining(command, Path(args.out), env={CONTROL_ENV: control.address})
    return WorkersPanel(WorkerRun(background, control, config, strategy))


def _stop_viewer(viewer: object) -> None:
    """Stop ``viewer`` if it is a :class:`~gsnb.viewer.Viewer` (without importing viser)."""
    server = sys.modules.get("gsnb.viewer.server")
    if server is not None and isinstance(viewer, server.Viewer):
        viewer.stop()


TrainMagics.gs_train.__doc__ = f"{TrainMagics.gs_train.__doc__}\n\n{TRAIN_PARSER.format_help()}"
