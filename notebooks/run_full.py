"""Run the six tutorial notebooks top to bottom with their full settings (for a GPU machine).

    python notebooks/run_full.py --out runs/notebooks

Each notebook runs with papermill in a fresh kernel of this Python interpreter, from the
``notebooks/`` folder; its executed copy (outputs included) is written to ``OUT/<name>.ipynb``
and the files it makes (pictures, checkpoint, PLY, video) to ``OUT/<name>/``. Notebooks 03
and 06 train the fox given by ``--fox``; 04 exports 03's trained fox when that ran.
``timings.json`` records each notebook's wall time. Without a GPU it stops, unless
``--allow-cpu`` runs the notebooks' CPU settings.

Besides gsnb and its dependencies (``pip install -e ".[viewer]"``) it needs papermill and
ipykernel (both in the ``dev`` extra). The tests (``tests/notebooks``) run the same function,
:func:`run_notebook`, with small settings.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gsnb.utils.atomic import atomic_write

NOTEBOOK_DIR = Path(__file__).resolve().parent
NOTEBOOKS = (
    "01_setup_and_build",
    "02_render_gaussians",
    "03_train_a_scene",
    "04_export",
    "05_your_own_capture",
    "06_quality_options",
)
FOX = NOTEBOOK_DIR.parent.parent / "shared" / "data" / "fox"
KERNEL_NAME = "gsnb-tutorial-python"


@contextlib.contextmanager
def this_python_kernel(folder: Path) -> Iterator[str]:
    """A Jupyter kernel spec that runs this interpreter, visible while the block runs.

    The spec is written under ``folder`` and put first on ``JUPYTER_PATH``, so the
    notebooks run in this environment whatever other ``python3`` kernels are installed.

    Example:
        >>> import tempfile
        >>> with this_python_kernel(Path(tempfile.mkdtemp())) as name:
        ...     name
        'gsnb-tutorial-python'
    """
    spec_dir = folder / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python {sys.version_info.major}.{sys.version_info.minor} (gsnb)",
        "language": "python",
    }
    with atomic_write(spec_dir / "kernel.json", "w") as handle:
        json.dump(spec, handle, indent=1)
    before = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(folder), before]))
    try:
        yield KERNEL_NAME
    finally:
        if before is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = before


def run_notebook(
    name: str, out_dir: Path, parameters: dict[str, Any], progress: bool = True
) -> Path:
    """Execute notebook ``name`` with ``parameters`` (papermill) into ``out_dir/<name>.ipynb``.

    ``out_dir`` must be absolute or relative to the current folder; the notebook runs from
    ``notebooks/`` (its relative paths, such as the fox's, resolve from there). Raises
    ``papermill.PapermillExecutionError`` naming the cell when one fails.

    Example:
        >>> # run_notebook("02_render_gaussians", Path("out"), {"out_dir": "/abs/out/02"})
    """
    import papermill

    if name not in NOTEBOOKS:
        raise ValueError(f"no tutorial notebook {name!r}; they are {', '.join(NOTEBOOKS)}")
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    executed = out_dir / f"{name}.ipynb"
    with this_python_kernel(out_dir / ".jupyter") as kernel:
        papermill.execute_notebook(
            str(NOTEBOOK_DIR / f"{name}.ipynb"),
            str(executed),
            parameters=parameters,
            cwd=str(NOTEBOOK_DIR),
            kernel_name=kernel,
            progress_bar=progress,
            # a start under a loaded CI machine can exceed papermill's 60 s default
            start_timeout=180,
        )
    return executed


def full_parameters(name: str, out_dir: Path, fox: Path) -> dict[str, Any]:
    """The parameters ``run_full`` gives notebook ``name``: its output folder, the data and,
    for 04, notebook 03's checkpoint when there is one.

    Example:
        >>> full_parameters("02_render_gaussians", Path("/runs"), FOX)
        {'out_dir': '/runs/02_render_gaussians'}
    """
    parameters: dict[str, Any] = {"out_dir": str(out_dir / name)}
    if name in ("03_train_a_scene", "06_quality_options"):
        parameters["data"] = str(fox)
    checkpoint = out_dir / "03_train_a_scene" / "checkpoint.pt"
    if name == "04_export" and checkpoint.is_file():
        # the fox's photos are portrait: a portrait video along the training cameras
        parameters |= {"checkpoint": str(checkpoint), "data": str(fox), "path": "train"}
        parameters |= {"video_size": "1080x1920", "render_size": "540x960"}
    return parameters


def main(argv: list[str] | None = None) -> int:
    """``python notebooks/run_full.py --out DIR``; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the results")
    parser.add_argument(
        "--only", nargs="+", choices=NOTEBOOKS, help="run these notebooks only (in order)"
    )
    parser.add_argument("--fox", type=Path, default=FOX, help=f"the fox dataset (default {FOX})")
    parser.add_argument(
        "--allow-cpu", action="store_true", help="run without a GPU (the notebooks' CPU settings)"
    )
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print("run_full: torch sees no GPU; the full settings need one (--allow-cpu to go on)")
        return 1
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    for name in args.only or NOTEBOOKS:
        print(f"run_full: {name} ...", flush=True)
        start = time.perf_counter()
        try:
            run_notebook(name, out, full_parameters(name, out, args.fox.resolve()))
        finally:
            timings[name] = round(time.perf_counter() - start, 1)
            with atomic_write(out / "timings.json", "w") as handle:
                json.dump(timings, handle, indent=1)
        print(f"run_full: {name} done in {timings[name]:.0f} s -> {out / name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
