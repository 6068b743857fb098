"""``%gs_export``: write a PLY file and/or render a video from a notebook cell."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from IPython.core.magic import Magics, line_magic, magics_class


def export_parser() -> argparse.ArgumentParser:
    """The argument parser of ``%gs_export`` (the options of ``gsnb export`` and ``gsnb video``).

    Example:
        >>> args = export_parser().parse_args(["model", "--video", "v.mp4", "--show"])
        >>> args.scene, args.video, args.show
        ('model', 'v.mp4', True)
    """
    from gsnb.export.commands import add_video_options

    parser = argparse.ArgumentParser(
        prog="%gs_export",
        description="Write a 3DGS PLY file and/or render a camera path to an MP4. SCENE is a "
        "Trainer variable of the notebook (its model as its exports hold it: 3D filter and "
        "mean exposure baked in), a GaussianModel variable, a gsnb checkpoint or a PLY file; "
        "--data may also name a loaded dataset variable.",
        exit_on_error=False,
    )
    parser.add_argument("scene", help="Trainer or GaussianModel variable, checkpoint or PLY file")
    parser.add_argument("--ply", help="write the Gaussians to this PLY file")
    parser.add_argument("--video", help="render a video to this .mp4 file")
    parser.add_argument("--show", action="store_true", help="show the video in the notebook")
    add_video_options(parser)
    return parser


@magics_class
class ExportMagics(Magics):
    """``%gs_export``, registered by ``%load_ext gsnb``.

    Example (in a notebook)::

        %load_ext gsnb
        %gs_export trainer --ply scene.ply   # a training run, as its exports hold it
        %gs_export model --video orbit.mp4 --render-size 960x540 --size 1920x1080 --show
    """

    @line_magic
    def gs_export(self, line: str) -> Any:
        """Write a PLY file and/or an MP4 video; ``%gs_export --help`` lists the options.

        Returns an ``IPython.display.Video`` when ``--show`` is given, so the
        video plays in the cell's output.
        """
        import torch

        from gsnb.export.commands import VideoOptions, load_scene, make_video
        from gsnb.export.ply import write_ply
        from gsnb.model import GaussianModel
        from gsnb.train import Trainer
        from gsnb.train.exported import exported_model

        parser = export_parser()
        try:
            args = parser.parse_args(shlex.split(line))
        except SystemExit:  # --help printed its text
            return None
        except argparse.ArgumentError as err:
            raise ValueError(f"%gs_export: {err}; see %gs_export --help") from None
        if not (args.ply or args.video):
            raise ValueError("%gs_export: nothing to do; give --ply OUT.ply and/or --video OUT.mp4")
        namespace = self.shell.user_ns if self.shell is not None else {}
        scene = namespace.get(args.scene)
        if isinstance(scene, Trainer):
            with torch.no_grad():
                model = exported_model(scene)
        elif isinstance(scene, GaussianModel):
            model = scene
        else:
            model = load_scene(args.scene, args.device)
        if args.ply:
            write_ply(args.ply, model.splats)
            print(f"wrote {args.ply}: {model.num_gaussians} Gaussians, SH degree {model.sh_degree}")
        if not args.video:
            return None
        data = namespace.get(args.data) if args.data else None
        options = VideoOptions.from_args(args)
        out = make_video(model, args.video, options, data=data if hasattr(data, "views") else None)
        print(f"wrote {out}")
        if args.show:
            from IPython.display import Video

            return Video(str(out), embed=True, html_attributes="controls loop")
        return None


ExportMagics.gs_export.__doc__ = (
    f"{ExportMagics.gs_export.__doc__}\n{export_parser().format_help()}"
)
