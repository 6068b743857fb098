"""The backward compositing's layouts side by side, on bench_raster's scenes.

For each scene of ``benchmarks/bench_raster.py`` (and ``fox_trained_half`` seen from one
camera, a training step's image), the default ``gsnb.render`` call's forward+backward ms
(medians of CUDA-event timings, colour only) with the backward kernel forced to one pixel a
thread over whole tiles (``one``), one pixel a thread over segments of the tiles' splat
lists (``one_segments``, gsnb's segment length), two pixels a thread over whole tiles
(``two``), and left to choose by the grid's size (``auto``, what users get), in turns so
that a slow spell of the GPU falls on all of them; with segments, the forward either walks
each tile in one block and records the segments' states (``one_segments``) or walks the
segments at once (``one_segments_two_pass``). And the forward alone at one pixel a thread:
without segments, recording them, and walking them at once. With ``--lengths``, also one
pixel a thread over segments of each of those lengths (``one_segments_<length>``, the forward
by the grid's size). Writes ``OUT/rows_h200.json``.

    python benchmarks/bench_rows.py --out OUT --fox .device/fox
    python benchmarks/bench_rows.py --out OUT --scenes fox_trained_half --lengths 512,1024,2048
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_raster import calls, gsnb_render, scene_by_name
from common import FOX, cuda_time_ms, environment, write_json

from gsnb import kernels

# (rows, segments, forward) for kernels.set_rasterize_rows / set_rasterize_segments /
# set_rasterize_forward_segments.
SETTINGS = {
    "one": (1, -1, 0),
    "one_segments": (1, 0, -1),
    "one_segments_two_pass": (1, 0, 1),
    "two": (2, -1, 0),
    "auto": (0, 0, 0),
}
# The forward alone at one pixel a thread: (segments, forward).
FORWARDS = {"no_segments": (-1, 0), "segments_recorded": (0, -1), "segments_two_pass": (0, 1)}


def one_camera(s: dict) -> dict:
    """The scene seen from its first camera only."""
    return s | {"viewmats": s["viewmats"][:1], "Ks": s["Ks"][:1]}


def scene_options(parser: argparse.ArgumentParser, rounds: int, scenes: str) -> None:
    """The options a side-by-side of the compositing's layouts shares: --out, --fox,
    --rounds (turns of every setting), --repeat (timed calls a turn) and --scenes."""
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--fox", type=Path, default=FOX)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--scenes", default=scenes)


def time_scenes(names: str, fox: Path, time_scene_fn: Callable[[dict], dict]) -> dict:
    """``time_scene_fn``'s row for each scene of the comma-separated ``names`` (and
    ``fox_trained_half`` also seen from one camera, ``fox_trained_half_1cam``), after the
    scene's cameras and image size; each row is printed as it comes."""
    rows: dict = {}
    for name in names.split(","):
        s = scene_by_name(name, fox)
        variants = {name: s}
        if name == "fox_trained_half":
            variants[f"{name}_1cam"] = one_camera(s)
        for key, scene in variants.items():
            row = {
                "cameras": int(scene["viewmats"].shape[0]),
                "width": scene["width"],
                "height": scene["height"],
                **time_scene_fn(scene),
            }
            rows[key] = row
            print(key, row, flush=True)
    return rows


def use(rows: int, segments: int, forward: int) -> None:
    kernels.set_rasterize_rows(rows=rows)
    kernels.set_rasterize_segments(length=segments)
    kernels.set_rasterize_forward_segments(mode=forward)


def time_scene(s: dict, rounds: int, repeat: int, lengths: tuple[int, ...] = ()) -> dict:
    forward, forward_backward = calls(s, lambda s_, p: gsnb_render(s_, p, False, None), False)
    settings = SETTINGS | {f"one_segments_{n}": (1, n, 0) for n in lengths}
    times: dict = {name: [] for name in settings}
    forward_times: dict = {name: [] for name in FORWARDS}
    for _ in range(rounds):
        for name, setting in settings.items():
            use(*setting)
            times[name].append(cuda_time_ms(forward_backward, repeat=repeat))
        for name, (segments, mode) in FORWARDS.items():
            use(1, segments, mode)
            forward_times[name].append(cuda_time_ms(forward, repeat=repeat))
    use(0, 0, 0)
    row = {f"{name}_fwd_bwd_ms": round(statistics.median(t), 4) for name, t in times.items()}
    row |= {f"one_{k}_fwd_ms": round(statistics.median(t), 4) for k, t in forward_times.items()}
    one, two = row["one_fwd_bwd_ms"], row["two_fwd_bwd_ms"]
    row["two_over_one"] = round(two / one, 4)
    row["one_segments_over_one"] = round(row["one_segments_fwd_bwd_ms"] / one, 4)
    row["two_pass_over_recorded_fwd"] = round(
        row["one_segments_two_pass_fwd_ms"] / row["one_segments_recorded_fwd_ms"], 4
    )
    best = min(v for k, v in row.items() if k.endswith("_fwd_bwd_ms") and k != "auto_fwd_bwd_ms")
    row["auto_over_best"] = round(row["auto_fwd_bwd_ms"] / best, 4)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    scene_options(
        parser, 3, "random_1M,fox_4cams,fox_trained_full,fox_trained_half,fox_trained_small"
    )
    parser.add_argument(
        "--lengths", default="", help="segment lengths to time too (multiples of 256): 512,2048"
    )
    args = parser.parse_args()
    lengths = tuple(int(n) for n in args.lengths.split(",") if n)
    scenes = time_scenes(
        args.scenes, args.fox, lambda s: time_scene(s, args.rounds, args.repeat, lengths)
    )
    results = {"environment": environment(), "scenes": scenes}
    write_json(args.out / "rows_h200.json", results)
    print(f"wrote {args.out / 'rows_h200.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
