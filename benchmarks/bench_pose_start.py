"""Pose refinement on exact poses: what it costs held-out views, by the step it starts at.

On a capture whose poses are already right, every learned pose correction is error: the
held-out views keep their poses, and a scene fitted to corrected training cameras drifts
from them. The corrections learn most while the first fit is blurry. This trains the
synthetic scene (exact poses, every 8th view held out) without pose refinement and with it
from each step of ``--starts`` (``pose_refine_start``), and reports per run the test PSNR and
how far the corrections moved the training cameras (degrees and extents, as world motions:
their spread, and their mean, which moves the whole scene). Reference backend, CPU: about
2.5 minutes a run at the defaults.

    python benchmarks/bench_pose_start.py --out OUT --starts 0,100,200

Writes ``OUT/pose_start_cpu.json`` with the machine, versions, commit and command.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import environment, git_commit, write_json

from gsnb.data.dataset import load_dataset
from gsnb.data.synthetic import make_synthetic_scene
from gsnb.train import TrainConfig, Trainer
from gsnb.train.pose_refine import correction_matrices, pose_difference


def rotation_log(R: torch.Tensor) -> torch.Tensor:
    """Axis-angle vectors ``[..., 3]`` of rotation matrices ``R [..., 3, 3]`` (angles below pi).

    Example:
        >>> from gsnb.train.pose_refine import axis_angle_to_matrix
        >>> w = torch.tensor([0.1, -0.2, 0.05], dtype=torch.float64)
        >>> torch.allclose(rotation_log(axis_angle_to_matrix(w)), w)
        True
    """
    cos = ((R.diagonal(dim1=-2, dim2=-1).sum(-1) - 1) / 2).clamp(-1.0, 1.0)
    angle = torch.acos(cos)
    scale = torch.where(angle < 1e-7, torch.ones_like(angle), angle / torch.sin(angle))
    v = torch.stack(
        [R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]],
        dim=-1,
    )
    return 0.5 * scale[..., None] * v


def world_motions(trainer: Trainer) -> dict[str, float]:
    """How far the learned corrections moved the training cameras: the smallest and largest
    turn (degrees) and the largest move of a centre (extents) of one view
    (:func:`~gsnb.train.pose_refine.pose_difference`), and the mean of their world motions
    ``M = V^-1 D V``, the part every view shares (degrees, extents)."""
    poses = trainer.corrections.poses
    views = trainer.dataset.train
    with torch.no_grad():
        V = torch.stack([v.viewmat for v in views]).double()
        index = torch.tensor([poses.index_of(v.name) for v in views])
        params = poses.params.detach()[index].double().cpu()
        D = correction_matrices(params, poses.extent)
        _, centres = pose_difference(D @ V, V)
        M = torch.linalg.inv(V) @ D @ V
    degrees = torch.rad2deg(params[:, :3].norm(dim=-1))  # a view's turn: its axis-angle
    mean_rotation = rotation_log(M[:, :3, :3]).mean(0)
    return {
        "view_degrees_min": round(float(degrees.min()), 4),
        "view_degrees_max": round(float(degrees.max()), 4),
        "view_centre_extents_max": round(float(centres.max()) / poses.extent, 5),
        "mean_degrees": round(math.degrees(float(mean_rotation.norm())), 4),
        "mean_extents": round(float(M[:, :3, 3].mean(0).norm()) / poses.extent, 5),
    }


def run_one(data: Any, start: int | None, args: argparse.Namespace) -> dict[str, Any]:
    """Train from scratch; ``start`` None: without pose refinement."""
    config = TrainConfig(
        steps=args.steps, backend="reference", seed=0, pose_refine=start is not None,
        lr_pose=args.lr_pose, pose_refine_start=start or 0,
    )  # fmt: skip
    began = time.perf_counter()
    trainer = Trainer(data, config)
    trainer.run(progress=False)
    row: dict[str, Any] = {
        "pose_refine_start": start,
        "test_psnr": round(trainer.evaluate().psnr, 3),
        "seconds": round(time.perf_counter() - began, 1),
    }
    if start is not None:
        row |= world_motions(trainer)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--size", type=int, default=128, help="image side in pixels")
    parser.add_argument("--views", type=int, default=32)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--lr-pose", type=float, default=2e-3)
    parser.add_argument("--starts", default="0,200", help="pose_refine_start of each run")
    args = parser.parse_args()
    starts = [int(s) for s in args.starts.split(",") if s]
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = make_synthetic_scene(tmp, num_views=args.views, size=args.size, detail=0.5)
        data = load_dataset(root, test_every=8)
        results: dict[str, Any] = {
            "environment": environment(),
            "commit": git_commit(),
            "command": shlex.join(["python", *sys.argv]),
            "scene": {
                "views": args.views,
                "size": args.size,
                "train": len(data.train),
                "test": len(data.test),
                "extent": round(float(data.extent), 4),
            },
            "steps": args.steps,
            "lr_pose": args.lr_pose,
            "runs": [],
        }
        for start in [None, *starts]:
            row = run_one(data, start, args)
            results["runs"].append(row)
            print(row, flush=True)
            write_json(args.out / "pose_start_cpu.json", results)
    print(f"wrote {args.out / 'pose_start_cpu.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
