"""``gsnb train`` (photos -> trained scene) and ``gsnb demo`` (a synthetic scene, no download).

gsnb train DATA --out DIR [--resume CHECKPOINT] [--strategy default|mcmc] [--nproc N] ...
gsnb demo [--out DIR] [--size PX] [--views N] [--no-video] [--strategy ...] [--steps N] ...

Both take every setting of :class:`~gsnb.train.config.TrainConfig` as an option
(:mod:`gsnb.train.options`), as ``%gs_train`` does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gsnb.data.dataset import SceneDataset
from gsnb.train.config import TrainConfig
from gsnb.train.estimate import RunTimeEstimate, backend_text
from gsnb.train.exported import exported_model
from gsnb.train.knobs import named_as_options
from gsnb.train.options import (
    add_config_options,
    add_nproc_option,
    add_out_option,
    add_progress_option,
    add_resume_option,
    add_strategy_option,
    ignored_on_resume,
    strategy_from_args,
    strategy_settings,
)
from gsnb.train.rundir import RunFolder, checkpoint_bytes, ply_bytes
from gsnb.train.strategy import Strategy, make_strategy
from gsnb.train.timeline import Timeline, timeline_text
from gsnb.train.trainer import CHECKPOINT_NAME, DensifyError, Trainer
from gsnb.train.warm import warming
from gsnb.utils.atomic import atomic_write

PLY_NAME = "point_cloud.ply"
VIDEO_NAME = "orbit.mp4"


def train_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``gsnb train`` to ``parser``: DATA, --out and every run setting.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> train_arguments(p)
        >>> a = p.parse_args(["data/fox", "--out", "runs/fox", "--steps", "7000"])
        >>> c = train_config(a)
        >>> c.steps, c.downscale, c.sh_degree, a.strategy
        (7000, 1, 3, 'default')
    """
    parser.add_argument("data", help="dataset folder: a COLMAP model or a transforms.json")
    add_out_option(parser, "folder for the checkpoint, PLY and metrics", required=True)
    add_resume_option(parser)
    add_progress_option(parser)
    add_strategy_option(parser)
    add_nproc_option(parser)
    add_viewer_options(parser)
    add_config_options(parser)


def add_viewer_options(parser: argparse.ArgumentParser) -> None:
    """``--viewer`` and ``--viewer-port``: serve the 3D viewer around the run's trainer
    (process 0's with ``--nproc``); its URL is printed and written to ``OUT/viewer.json``.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> add_viewer_options(p)
        >>> a = p.parse_args(["--viewer"]); a.viewer, a.viewer_port, a.serve_viewer
        (True, 0, None)
    """
    parser.add_argument(
        "--viewer",
        action="store_true",
        help="serve the 3D viewer (viser) beside training, process 0's with --nproc; its URL "
        "is printed and written to OUT/viewer.json (readable by you only)",
    )
    parser.add_argument(
        "--viewer-port", type=int, default=0, help="viewer port (default 0: a free one)"
    )
    # gsnb.cli puts the viewer layer's gsnb.viewer.runs.serve_run here (it sits above training)
    parser.set_defaults(serve_viewer=None)


def _start_viewer(args: argparse.Namespace, trainer: Trainer, out: Path) -> Callable[[], None]:
    """The viewer ``--viewer`` asks for, started; the function that stops it."""
    if not getattr(args, "viewer", False):
        return lambda: None
    serve = getattr(args, "serve_viewer", None)
    if serve is None:
        raise RuntimeError("--viewer needs gsnb's command line: run `gsnb train ... --viewer`")
    return serve(trainer, out, args.viewer_port)


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The settings of the run ``gsnb train``'s options describe.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> train_arguments(p)
        >>> train_config(p.parse_args(["data/fox", "--out", "runs/fox"])).out_dir
        'runs/fox'
    """
    return TrainConfig.from_args(args, data=str(Path(args.data).resolve()), out_dir=args.out)


def train(args: argparse.Namespace) -> int:
    """``gsnb train``: train on a dataset and report test PSNR/SSIM and where files went.

    Returns the exit code: 0, 1 after an error (printed in one line), 130 when interrupted.
    With ``--nproc N`` it starts N data-parallel workers (see :mod:`gsnb.train.distributed`);
    started by ``torchrun`` (``RANK``/``WORLD_SIZE`` set), it is one of them.
    """
    from gsnb.train import process_group

    world = process_group.world_from_env()
    if world is not None and world.world_size > 1:
        return train_worker(args)
    if getattr(args, "nproc", 1) > 1:
        return _launch_workers(args)
    timeline = _command_timeline(args)
    out = Path(args.out)
    folder = RunFolder(out)
    try:
        # CUDA's start and the refine step's kernels load while the photos decode; joined
        # also after an error or Ctrl-C: no thread in CUDA while the process ends
        device = getattr(args, "device", None) or "auto"
        with warming(device, getattr(args, "strategy", None) or ""):
            if args.resume:
                claim_folder(folder, args, "gsnb train")
                trainer = resume_run(args, out)
            else:
                config = train_config(args)
                strategy = strategy_from_args(args)
                data = config_dataset(args.data, config)
                claim_folder(folder, args, "gsnb train")  # once the data loaded: no empty folders
                trainer = Trainer(data, config, strategy=strategy, progress=not args.no_progress)
        timeline.mark("data")  # the dataset read, its images decoded, the Gaussians made
        preflight(trainer, folder, progress=not args.no_progress)
        close_viewer = _start_viewer(args, trainer, out)
    except (OSError, ValueError, RuntimeError, ImportError) as err:
        folder.release(remove_if_new=True)
        print(f"gsnb train: error: {err}", file=sys.stderr)
        return 1

    def again(path: Path) -> list[str]:
        return ["gsnb", "train", str(args.data), "--out", str(out), "--resume", str(path)]

    try:
        return _train_and_report(
            trainer, out, "gsnb train", not args.no_progress, resume=again, timeline=timeline
        )
    finally:
        close_viewer()
        folder.release()


def _launch_workers(args: argparse.Namespace) -> int:
    """``gsnb train --nproc N``: hold the run folder, start the workers, report a dead one."""
    from gsnb.train import launcher

    out = Path(args.out)
    folder = RunFolder(out)
    try:
        batch = None if args.resume else (args.batch_size or 1)  # a resume: the checkpoint's
        if not args.resume:
            strategy_from_args(args)  # refuse a wrong strategy option before starting workers
        launcher.check_workers(args.nproc, args.device or "auto", batch)
        claim_folder(folder, args, "gsnb train")
    except (OSError, ValueError, RuntimeError) as err:
        print(f"gsnb train: error: {err}", file=sys.stderr)
        return 1
    code = 1
    try:
        code = launcher.launch(_worker_entry, (args,), args.nproc)
    except launcher.WorkerFailed as err:
        saved = launcher.last_checkpoint_text(out)
        if saved is None:
            tail = "; no checkpoint was written, so the run cannot be continued"
        else:
            again = [*_train_command(args, out), "--resume", str(out)]
            tail = f"; {saved}; continue with: {shlex.join(again)}"
        print(f"gsnb train: error: {err}{tail}", file=sys.stderr)
    finally:
        folder.release(remove_if_new=code != 0)
    return code


def _train_command(args: argparse.Namespace, out: Path) -> list[str]:
    command = ["gsnb", "train", str(args.data), "--out", str(out)]
    return command + (["--nproc", str(args.nproc)] if getattr(args, "nproc", 1) > 1 else [])


def _worker_entry(args: argparse.Namespace) -> int:
    """A worker started by :func:`_launch_workers`: its failure must be an exit code."""
    code = train_worker(args, folder_claimed=True)
    if code not in (0, 130):  # 130: stopped by Ctrl-C with the others, after a checkpoint
        sys.exit(code)  # the launcher then stops the other workers
    return code


def train_worker(args: argparse.Namespace, folder_claimed: bool = False) -> int:
    """One data-parallel worker of ``gsnb train``: join the others, train, and (process 0)
    write the results. Every worker loads the data and builds the same trainer; only
    process 0 prints, and holds the run folder unless the launcher does
    (``folder_claimed``). Returns the exit code.
    """
    from gsnb.train import process_group

    group = process_group.init_process_group(args.device or "auto")
    try:
        return _train_in_group(args, group, folder_claimed)
    except process_group.PeerLost as err:
        if not folder_claimed:  # under torchrun: say why; gsnb's launcher names the worker
            print(f"gsnb train: worker {group.rank}: error: {err}", file=sys.stderr)
            return 1
        from gsnb.train import launcher

        # gsnb's launcher names the first failure it finds at a look, in rank order: let it
        # find the worker that died first. Then leave without the process group's teardown,
        # which aborts (SIGABRT) on a lost peer.
        time.sleep(launcher.LINGER_SECONDS)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    finally:
        process_group.destroy_process_group()


def _train_in_group(args: argparse.Namespace, group: Any, folder_claimed: bool) -> int:
    import contextlib

    rank0 = group.rank == 0
    name = "gsnb train"
    errors = sys.stderr
    quiet = contextlib.ExitStack()
    if not rank0:  # the other workers stay silent but for their own errors
        sink = quiet.enter_context(open(os.devnull, "w"))  # noqa: SIM115
        quiet.enter_context(contextlib.redirect_stdout(sink))
        quiet.enter_context(contextlib.redirect_stderr(sink))
    timeline = _command_timeline(args)
    out = Path(args.out)
    folder = RunFolder(out)
    owns = rank0 and not folder_claimed
    close_viewer: Callable[[], None] = lambda: None  # noqa: E731
    try:
        with quiet:
            failed: BaseException | None = None
            trainer: Trainer | None = None
            try:
                if owns:
                    claim_folder(folder, args, name)
                trainer = _worker_trainer(args, out, progress=rank0 and not args.no_progress)
                timeline.mark("data")
                if rank0:
                    preflight(trainer, folder, progress=not args.no_progress)
                    close_viewer = _start_viewer(args, trainer, out)
            except (OSError, ValueError, RuntimeError, ImportError) as err:
                failed = err
            anyone, first = group.any(failed is not None, rank0 and failed is not None)
            if anyone or trainer is None:
                if failed is not None and (rank0 or not first):  # one process says it
                    who = "" if rank0 else f"worker {group.rank}: "
                    print(f"{name}: {who}error: {failed}", file=errors)
                if owns:
                    folder.release(remove_if_new=True)
                return 1
            if not rank0:
                return _follow(trainer, name, group.rank, errors)

            def again(path: Path) -> list[str]:
                return [*_train_command(args, out), "--resume", str(path)]

            return _train_and_report(
                trainer, out, name, not args.no_progress, resume=again,
                after_run=_leave, timeline=timeline,
            )  # fmt: skip
    finally:
        close_viewer()
        if owns:
            folder.release()


def config_dataset(path: str | os.PathLike[str], config: TrainConfig) -> SceneDataset:
    """The dataset at ``path`` loaded as ``config`` says (downscale, test split, cache)."""
    from gsnb.data.dataset import load_dataset

    return load_dataset(
        path, downscale=config.downscale, test_every=config.test_every, cache_dir=config.cache_dir
    )


def _worker_trainer(args: argparse.Namespace, out: Path, progress: bool) -> Trainer:
    from gsnb.train.distributed import DistributedTrainer

    if args.resume:
        return resume_run(args, out, trainer_class=DistributedTrainer)
    config = train_config(args)
    strategy = strategy_from_args(args)
    data = config_dataset(args.data, config)
    return DistributedTrainer(data, config, strategy=strategy, progress=progress)


def _leave(trainer: Any) -> None:
    """After the training loop: every process gathers (a finished run) or just leaves."""
    if trainer.status == "finished":
        trainer.leave_group()
    else:  # stopped together: the last checkpoint gathered the sums
        trainer.detach()


def _follow(trainer: Trainer, name: str, rank: int, errors: Any) -> int:
    """A worker other than process 0: train in step with the others, then leave."""
    try:
        trainer.run()
        _leave(trainer)
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError, RuntimeError) as err:
        print(f"{name}: worker {rank}: error: {err}", file=errors)
        return 1
    return 0 if trainer.status == "finished" else 130


def claim_folder(folder: RunFolder, args: argparse.Namespace, name: str) -> None:
    """Take ``folder`` for the run ``args`` describe (see :meth:`RunFolder.claim`) and say
    what was recovered from a killed run."""
    folder.claim(resume=args.resume, overwrite=getattr(args, "overwrite", False))
    # An owner record of this process comes from a run object it dropped, not a killed run.
    if folder.stale_pid == os.getpid():
        folder.stale_pid = None
    if folder.stale_pid is not None or folder.cleaned:
        killed = "" if folder.stale_pid in (None, -1) else f" (pid {folder.stale_pid})"
        print(
            f"{name}: {folder.path} was left by a run that was killed{killed}; removed "
            f"{len(folder.cleaned)} unfinished temporary files",
            file=sys.stderr,
        )


def preflight(trainer: Trainer, folder: RunFolder, progress: bool = False) -> None:
    """Checks before the first step: room for the checkpoints and the PLY, test images readable.

    Raises ``OSError`` (no space left) or ``ValueError`` (an unreadable test image, named).
    """
    from gsnb.data.checks import check_images_readable

    cfg, n, degree = trainer.config, trainer.num_gaussians, trainer.model.sh_degree
    needed = cfg.keep_checkpoints * checkpoint_bytes(n, degree) + ply_bytes(n, degree)
    folder.check_space(needed, f"{cfg.keep_checkpoints} checkpoints and the PLY of {n} Gaussians")
    check_images_readable(trainer.dataset.test, "test", progress=progress)


def resume_run(
    args: argparse.Namespace,
    out: Path | None,
    dataset: SceneDataset | None = None,
    trainer_class: type[Trainer] = Trainer,
) -> Trainer:
    """The run saved in ``args.resume`` (``gsnb train|demo --resume``, ``%gs_train --resume``).

    It trains on ``dataset``, else on the folder ``args.data`` names, else on the folder the
    checkpoint records, loaded as the checkpoint was; ``--steps`` extends it, ``--device``
    moves it, ``out`` (when given) is where it writes; other settings given are named in a
    warning and ignored.
    """
    from gsnb.data.dataset import load_dataset
    from gsnb.train.checkpoint import newest_checkpoint, read_checkpoint

    ignored = ignored_on_resume(args)
    if ignored:
        print(
            f"warning: {', '.join(ignored)} ignored: a resumed run keeps its checkpoint's "
            "settings (only --steps, --device, the checkpoint options and --out apply)",
            file=sys.stderr,
        )
    source = newest_checkpoint(args.resume)
    if dataset is None:
        saved = read_checkpoint(source)["config"]
        folder = getattr(args, "data", None) or saved.get("data")
        if folder is None:
            raise ValueError(f"checkpoint {args.resume} records no dataset folder; name it")
        dataset = load_dataset(
            folder,
            downscale=saved["downscale"],
            test_every=saved["test_every"],
            cache_dir=saved.get("cache_dir"),
        )
    device = None if args.device in (None, "auto") else args.device
    trainer = trainer_class.resume_from(source, dataset, device=device)
    if out is not None:
        trainer.config.out_dir = str(out)
    given = {
        name: getattr(args, name)
        for name in ("steps", "checkpoint_every", "checkpoint_minutes", "keep_checkpoints")
        if getattr(args, name, None) is not None
    }
    with named_as_options():
        checked = dataclasses.replace(trainer.config, **given)  # the knobs' ranges apply
    if checked.steps < trainer.step_count:
        raise ValueError(
            f"--steps {checked.steps} is below the step the checkpoint holds "
            f"({trainer.step_count}): a resumed run trains on to --steps; give more"
        )
    for name in given:
        setattr(trainer.config, name, getattr(checked, name))
    return trainer


def interrupted_text(
    name: str, trainer: Trainer, resume: Callable[[Path], list[str]], what: str = "interrupted"
) -> str:
    """What to say after Ctrl-C: the checkpoint this run wrote and the command that continues it.

    Only a checkpoint this trainer wrote is named, with the step it holds.

    Example:
        >>> import tempfile
        >>> again = lambda path: ["gsnb", "demo", "--resume", str(path)]
        >>> path = trainer.save_checkpoint(tempfile.mkdtemp() + "/checkpoint.pt")
        >>> print(interrupted_text("gsnb demo", trainer, again))  # doctest: +ELLIPSIS
        gsnb demo: interrupted after step 0; checkpoint .../checkpoint.pt holds step 0
          continue with: gsnb demo --resume .../checkpoint.pt
    """
    step = trainer.step_count
    head = f"{name}: {what} after step {step}"
    if trainer.last_checkpoint is None:
        return f"{head}; this run wrote no checkpoint, so it cannot be continued"
    path, saved = trainer.last_checkpoint
    note = "" if saved == step else f" (writing step {step} failed: see the warning above)"
    return f"{head}; checkpoint {path} holds step {saved}{note}\n  continue with: " + shlex.join(
        resume(path)
    )


def _train_and_report(
    trainer: Trainer,
    out: Path,
    name: str,
    progress: bool,
    resume: Callable[[Path], list[str]],
    extra: Callable[[Trainer], dict[str, str]] | None = None,
    after_run: Callable[[Trainer], None] | None = None,
    timeline: Timeline | None = None,
) -> int:
    """Run to the end, then evaluate, write the files (``extra`` adds more) and print a summary.

    ``resume(checkpoint)`` is the command line that continues this run; ``after_run``
    is called once the training loop has ended without an error. ``timeline``: the
    command's phases so far (default: one that starts now); the summary gets them all.
    """
    if timeline is None:
        timeline = Timeline()
    print(f"{name}: {trainer!r}")
    print(f"  data: {trainer.dataset!r}")
    print(f"  renderer: {backend_text(trainer.device, trainer.config.backend)}")
    estimate = RunTimeEstimate(trainer.config.steps, trainer.device, _say(name, progress))
    forget = trainer.on_step(estimate)
    timeline.mark("checks")  # the checks before the first step (space, test images), the viewer
    try:
        trainer.run(progress=progress)
        if after_run is not None:
            after_run(trainer)
    except KeyboardInterrupt:
        print(interrupted_text(name, trainer, resume), file=sys.stderr)
        return 130
    except DensifyError as err:  # a command cannot retry it later: say where to continue from
        print(f"{name}: error: {err.cause}", file=sys.stderr)
        print(interrupted_text(name, trainer, resume, "stopped"), file=sys.stderr)
        return 1
    except (OSError, ValueError, RuntimeError) as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return 1
    finally:
        forget()
    seconds = timeline.mark("training")  # the loop: steps, checkpoints, callbacks
    try:
        report = finish_run(trainer, out, seconds, timeline)
        if extra is not None:
            made = extra(trainer)
            report["files"] |= made
            timeline.mark(" and ".join(made) or "files")  # nothing made: part of the files'
            report["timings"] = timeline.seconds()
            write_summary(out, report)
    except (OSError, ValueError, RuntimeError) as err:
        print(f"{name}: error while writing results: {err}", file=sys.stderr)
        return 1
    print(summary_text(name, report))
    return 0


def _command_timeline(args: argparse.Namespace) -> Timeline:
    """The command's timeline, its first phase ``imports`` done: from gsnb's entry
    (``args.started``, set by :func:`gsnb.cli.main`) to now, the parser, torch and the
    command's modules."""
    timeline = Timeline(getattr(args, "started", None))
    timeline.mark("imports")
    return timeline


def _say(name: str, progress: bool) -> Callable[[str], None]:
    """Print a line under the progress bar (without breaking it) or plainly."""
    if progress:
        from tqdm.auto import tqdm

        return lambda line: tqdm.write(f"{name}: {line}")
    return lambda line: print(f"{name}: {line}", flush=True)


def finish_run(
    trainer: Trainer, out: Path, seconds: float, timeline: Timeline | None = None
) -> dict[str, Any]:
    """Evaluate, write checkpoint, PLY and metrics; the summary. With ``timeline``, the
    evaluation and the files are its phases ``evaluation`` and ``files``, and the summary's
    ``timings`` holds every phase's seconds.

    Example:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp())
        >>> report = finish_run(trainer, out, seconds=12.5)   # `trainer`: a Trainer
        >>> sorted(report["files"])
        ['checkpoint', 'metrics', 'ply', 'summary']
    """
    report: dict[str, Any] = {
        "steps": trainer.step_count,
        "seconds": round(trainer.train_seconds, 3),
        "leg": {  # this command's part of a resumed run: training time on the same clock
            "from_step": trainer.leg_start_step,
            "steps": trainer.step_count - trainer.leg_start_step,
            "seconds": round(trainer.train_seconds - trainer.leg_start_seconds, 3),
            "wall_seconds": round(seconds, 3),  # the loop, checkpoints and callbacks included
        },
        "num_gaussians": trainer.num_gaussians,
        "strategy": trainer.strategy.name,
        "device": str(trainer.device),
        "skipped_steps": trainer.skipped_steps,
        # Steps whose render had more intersections than the room made for them, run again.
        "rebinned_steps": trainer.rebinned_steps,
        "files": {},
    }
    if trainer.device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(trainer.device)
        report["peak_gpu_memory_gib"] = round(peak / 2**30, 3)
    peaks = getattr(trainer, "process_peaks", None)  # a data-parallel run: every process's
    if peaks is not None:
        report["processes"] = len(peaks)
        if all(p is not None for p in peaks):
            report["peak_gpu_memory_gib_per_process"] = [round(p / 2**30, 3) for p in peaks]
    if trainer.last_checkpoint is not None:
        # Inside the loop's wall time when the run wrote it as it stopped (timings.training).
        report["last_checkpoint_seconds"] = round(trainer.checkpoint_seconds, 3)
    if trainer.dataset.test_ids:
        result = trainer.evaluate()
        report["test"] = {
            "psnr": result.psnr,
            "ssim": result.ssim,
            "lpips": result.lpips,
            "views": result.num_views,
            "note": result.lpips_note,
            "protocol": result.protocol,  # whole images, or right halves (train_test_exp)
        }
        if timeline is not None:
            timeline.mark("evaluation")
    files = report["files"]
    files["checkpoint"] = str(final_checkpoint(trainer, out))
    from gsnb.export.ply import write_ply

    write_ply(out / PLY_NAME, exported_model(trainer).splats)
    files["ply"] = str(out / PLY_NAME)
    files["metrics"] = str(trainer.write_metrics(out))
    files["summary"] = str(out / "summary.json")
    if timeline is not None:
        timeline.mark("files")
        report["timings"] = timeline.seconds()
    write_summary(out, report)
    return report


def final_checkpoint(trainer: Trainer, out: Path) -> Path:
    """``out/checkpoint.pt`` holding the last step: the one the run wrote as it stopped, or a
    new one (the run's folder keeps its history; another folder gets a plain file)."""
    newest = out / CHECKPOINT_NAME
    saved = trainer.last_checkpoint
    if saved is not None and saved[1] == trainer.step_count and Path(saved[0]) == newest:
        return newest
    own = trainer.config.out_dir is not None and Path(trainer.config.out_dir) == out
    return trainer.save_checkpoint() if own else trainer.save_checkpoint(newest)


def write_summary(out: Path, report: dict[str, Any]) -> None:
    """Write ``report`` to ``out/summary.json`` atomically."""
    with atomic_write(out / "summary.json", "w") as handle:
        json.dump(report, handle, indent=1)


def summary_text(name: str, report: dict[str, Any]) -> str:
    """The closing lines of ``gsnb train`` and ``gsnb demo``.

    Example:
        >>> r = {"steps": 10, "seconds": 2.0, "num_gaussians": 99, "strategy": "default",
        ...      "device": "cpu", "skipped_steps": 0, "files": {"checkpoint": "out/c.pt"}}
        >>> print(summary_text("gsnb demo", r))
        gsnb demo: 10 steps in 2.0 s (5.0 steps/s) on cpu, strategy default
          Gaussians:  99
          checkpoint: out/c.pt
    """
    steps, seconds = report["steps"], report["seconds"]
    leg = report.get("leg") or {"from_step": 0}
    if leg["from_step"]:
        seconds, steps = leg["seconds"], leg["steps"]
    rate = steps / seconds if seconds > 0 else 0.0
    lines = [
        f"{name}: {steps} steps in {seconds:.1f} s ({rate:.1f} steps/s) on "
        f"{report['device']}, strategy {report['strategy']}"
    ]
    if leg["from_step"]:
        lines[0] += (
            f"; resumed at step {leg['from_step']}, the whole run: {report['steps']} steps "
            f"in {report['seconds']:.1f} s of training"
        )
    if report.get("timings"):
        lines.append(f"  time:       {timeline_text(report['timings'])}")
    if "test" in report:
        t = report["test"]
        text = f"  test:       PSNR {t['psnr']:.2f} dB, SSIM {t['ssim']:.4f} ({t['views']} views"
        text += ", right halves)" if t.get("protocol") == "right halves" else ")"
        text += f", LPIPS {t['lpips']:.4f}" if t["lpips"] is not None else f"; {t['note']}"
        lines.append(text)
    lines.append(f"  Gaussians:  {report['num_gaussians']}")
    if "peak_gpu_memory_gib" in report:
        lines.append(f"  GPU memory: {report['peak_gpu_memory_gib']:.2f} GiB at peak (allocated)")
    if report["skipped_steps"]:
        lines.append(f"  skipped:    {report['skipped_steps']} steps with NaN/Inf gradients")
    for label, path in report["files"].items():
        lines.append(f"  {label + ':':<11} {path}")
    return "\n".join(lines)


# ------------------------------------------------------------------ demo
def demo_settings(device: torch.device) -> dict[str, int]:
    """Demo defaults: small and quick with the CPU reference renderer, larger on a GPU.

    ``cap`` bounds the Gaussians of the MCMC strategy, so the run time is known.

    Example:
        >>> demo_settings(torch.device("cpu"))["size"]
        64
    """
    if device.type == "cuda":
        return {
            "size": 256,
            "views": 48,
            "steps": 3000,
            "points": 5000,
            "cap": 100_000,
            "frames": 120,
        }
    return {"size": 64, "views": 24, "steps": 700, "points": 1500, "cap": 3000, "frames": 48}


DEMO_DEFAULTS: dict[str, Any] = {"sh_degree": 0}
"""``gsnb demo``'s own defaults: the demo scene is diffuse (no view-dependent colour)."""
DEMO_STRATEGY = "mcmc"


def demo_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``gsnb demo`` to ``parser``: the scene's and every run setting.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> demo_arguments(p)
        >>> a = p.parse_args(["--steps", "100"])
        >>> a.steps, a.strategy, a.out
        (100, 'mcmc', 'gsnb-demo')
    """
    add_out_option(parser, "output folder", default="gsnb-demo")
    add_resume_option(parser)
    parser.add_argument("--size", type=int, help="image size in pixels (default 64 CPU, 256 GPU)")
    parser.add_argument("--views", type=int, help="number of cameras (default 24 CPU, 48 GPU)")
    parser.add_argument("--no-video", action="store_true", help="skip the orbit video")
    add_progress_option(parser)
    add_strategy_option(
        parser,
        default=DEMO_STRATEGY,
        note="gsnb demo scales refine_start_iter, refine_every and refine_stop_iter to --steps, "
        "caps MCMC at its preset count and sets the default strategy's reset_every to 10**9 "
        "(no opacity reset, even with --opacity-reset, and no prune of large Gaussians); an "
        "option given here replaces the demo's value",
    )
    add_config_options(parser, DEMO_DEFAULTS, default_text={"steps": "700 on CPU, 3000 on GPU"})


def demo_device(args: argparse.Namespace) -> torch.device:
    """The device ``--device`` names; ``auto`` (or none given) is CUDA when available.

    Example:
        >>> demo_device(argparse.Namespace(device="cpu"))
        device(type='cpu')
    """
    if args.device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(args.device)


def demo_config(
    args: argparse.Namespace, device: torch.device, out: Path
) -> tuple[TrainConfig, dict[str, int]]:
    """Settings for a short run: the 3DGS recipe with its schedule compressed to its steps.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> demo_arguments(p)
        >>> args = p.parse_args(["--steps", "600"])
        >>> cfg, schedule = demo_config(args, torch.device("cpu"), Path("out"))
        >>> cfg.sh_degree, schedule["refine_start_iter"], schedule["refine_stop_iter"]
        (0, 100, 450)
    """
    defaults = DEMO_DEFAULTS | {"steps": demo_settings(device)["steps"]}
    config = TrainConfig.from_args(args, defaults, device=device.type, out_dir=str(out))
    return config, demo_schedule(config.steps)


def demo_schedule(steps: int) -> dict[str, int]:
    """The 3DGS densification schedule compressed to a run of ``steps``.

    Example:
        >>> demo_schedule(700)
        {'refine_start_iter': 116, 'refine_every': 50, 'refine_stop_iter': 525}
    """
    return {
        "refine_start_iter": steps // 6,
        "refine_every": max(50, steps // 60),
        "refine_stop_iter": steps * 3 // 4,
    }


def demo_strategy(name: str, steps: int, cap: int, **given: Any) -> Strategy:
    """The demo's strategy for a run of ``steps``: MCMC capped at ``cap`` Gaussians, or the
    default strategy with ``reset_every`` 10**9, so that neither an opacity reset nor the prune
    of large Gaussians comes (too short a run to recover from one); knobs ``given`` on the
    command line replace these.

    Example:
        >>> demo_strategy("mcmc", 700, 3000).cap_max
        3000
        >>> demo_strategy("mcmc", 700, 3000, cap_max=500).cap_max
        500
    """
    settings = demo_schedule(steps)
    if name == "mcmc":
        settings |= {"cap_max": cap}
    else:
        settings |= {"reset_every": 10**9}
    return make_strategy(name, **(settings | given))


def demo(args: argparse.Namespace) -> int:
    """``gsnb demo``: make the synthetic scene, train on it, write checkpoint, PLY and video.

    With ``--resume CHECKPOINT`` it continues an interrupted demo on its scene.
    Returns the exit code (0, 1 after an error, 130 when interrupted).
    """
    timeline = _command_timeline(args)
    out = Path(args.out)
    device = demo_device(args)
    preset = demo_settings(device)
    folder = RunFolder(out)
    try:
        if not args.resume:
            strategy_settings(args)  # another strategy's option: refused before any work
        claim_folder(folder, args, "gsnb demo")
        trainer = resume_run(args, out) if args.resume else _new_demo(args, out, device, preset)
        timeline.mark("data")  # the synthetic scene ray traced and read
        preflight(trainer, folder)
    except (OSError, ValueError, RuntimeError) as err:
        folder.release(remove_if_new=True)
        print(f"gsnb demo: error: {err}", file=sys.stderr)
        return 1
    size = trainer.dataset.views[0].width

    def video(trainer: Trainer) -> dict[str, str]:
        if args.no_video:
            # A video of an earlier run would sit beside this run's results.
            (out / VIDEO_NAME).unlink(missing_ok=True)
            return {}
        return {"video": str(demo_video(trainer, out, size, preset["frames"]))}

    def again(path: Path) -> list[str]:
        return ["gsnb", "demo", "--out", str(out), "--resume", str(path)]

    try:
        return _train_and_report(
            trainer, out, "gsnb demo", not args.no_progress, resume=again, extra=video,
            timeline=timeline,
        )  # fmt: skip
    finally:
        folder.release()


def _new_demo(
    args: argparse.Namespace, out: Path, device: torch.device, preset: dict[str, int]
) -> Trainer:
    from gsnb.data.dataset import load_dataset
    from gsnb.data.synthetic import make_synthetic_scene

    size = args.size or preset["size"]
    views = args.views or preset["views"]
    config, _ = demo_config(args, device, out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"gsnb demo: ray tracing {views} views of {size}x{size} px into {out / 'scene'}")
    root = make_synthetic_scene(
        out / "scene", num_views=views, size=size, seed=config.seed, num_points=preset["points"]
    )
    config.data = str(Path(root).resolve())  # recorded in checkpoints: --resume finds it
    data = load_dataset(root, downscale=config.downscale, test_every=config.test_every)
    strategy = demo_strategy(args.strategy, config.steps, preset["cap"], **strategy_settings(args))
    return Trainer(data, config, strategy=strategy)


def demo_video(trainer: Trainer, out: Path, size: int, frames: int) -> Path:
    """An orbit around the training cameras, rendered at ``size`` and lanczos-upscaled 4x."""
    from gsnb.export.commands import VideoOptions, make_video

    big = 4 * size
    options = VideoOptions(size=(big, big), render_size=(size, size), frames=frames)
    with torch.no_grad():
        model = exported_model(trainer)
        return make_video(model, out / VIDEO_NAME, options, data=trainer.dataset)
