"""The tutorial notebooks run top to bottom with small settings, and are stored without outputs.

Each notebook runs through ``notebooks/run_full.py``'s :func:`run_notebook` (papermill, a
fresh kernel of this interpreter, driven from a child process) with the small parameters
below injected after its cell tagged ``parameters``: the same notebooks, unedited, as a GPU
machine runs with their full settings. Each test then checks the files the notebook wrote.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import nbformat
import pytest
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
FOX = ROOT / ".." / "shared" / "data" / "fox"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def _load_runner() -> Any:
    spec = importlib.util.spec_from_file_location("run_full", NOTEBOOK_DIR / "run_full.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_full = _load_runner()

# Small settings: a few seconds of work per notebook on 2 CPU cores.
SMALL: dict[str, dict[str, Any]] = {
    "01_setup_and_build": {"compile_without_gpu": False},
    "02_render_gaussians": {
        "num_gaussians": 1500,
        "width": 96,
        "height": 72,
        "num_views": 3,
        "timing_counts": [300, 1000],
        "fit_steps": 8,
    },
    "03_train_a_scene": {
        "data": "",  # fetched, from the copy beside the checkout (GSNB_FETCH_FROM)
        "downscale": 32,
        "steps": 6,
        "max_init_points": 300,
        "sh_degree": 1,
        "eval_every": 3,
        "open_viewer": True,
    },
    "04_export": {
        "scene_size": 32,
        "scene_views": 6,
        "scene_points": 300,
        "train_steps": 10,
        "video_size": "64x48",
        "render_size": "32x24",
        "frames": 6,
    },
    "05_your_own_capture": {
        "demo_size": 256,
        "video_frames": 24,
        "steps": 6,
        "downscale": 2,
        "export_frames": 4,
        "video_size": "64x48",
        "render_size": "32x24",
    },
    "06_quality_options": {
        "data": "",  # fetched, from the copy beside the checkout (GSNB_FETCH_FROM)
        "downscale": 32,
        "steps": 12,
        "refine_start": 6,
        "refine_every": 4,
        "max_init_points": 300,
        "sh_degree": 0,
        "known_views": 12,
        "known_size": 16,
        "known_steps": 120,
    },
}


# The child that runs one notebook: papermill's kernel client lives in its own process, so
# a crash of that client (a signal, not a notebook error) fails one test, not the session.
CHILD = """
import importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("run_full", sys.argv[1])
run_full = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_full)
run_full.run_notebook(sys.argv[2], Path(sys.argv[3]), json.loads(sys.argv[4]), progress=False)
"""


def run_isolated(name: str, out_dir: Path, parameters: dict[str, Any]) -> Path:
    """:func:`run_full.run_notebook` in a child interpreter; returns the executed notebook.

    A notebook error fails with the child's last output. A child killed by a signal (the
    Jupyter client crashing, not the notebook) is run once more before failing.
    """
    argv = [sys.executable, "-c", CHILD, str(NOTEBOOK_DIR / "run_full.py"), name]
    argv += [str(out_dir.resolve()), json.dumps(parameters)]
    for attempt in (1, 2):
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        if done.returncode >= 0 or attempt == 2:
            break
        print(f"{name}: the notebook runner died of signal {-done.returncode}; once more")
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"{name} failed (exit {done.returncode}):\n{tail}"
    return out_dir / f"{name}.ipynb"


def execute(name: str, tmp_path: Path, **extra: Any) -> tuple[Path, nbformat.NotebookNode]:
    """Run notebook ``name`` with its small settings; its files go to ``tmp_path / "files"``."""
    files = tmp_path / "files"
    parameters = SMALL[name] | {"out_dir": str(files)} | extra
    notebook = nbformat.read(run_isolated(name, tmp_path, parameters), as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.execution_count is not None, f"a cell of {name} did not run"
            assert not [o for o in cell.outputs if o.output_type == "error"]
    return files, notebook


def test_a_failing_run_names_the_notebook_and_the_cause(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"(?s)07_missing failed \(exit 1\).*no tutorial"):
        run_isolated("07_missing", tmp_path, {})


def text_of(notebook: nbformat.NotebookNode) -> str:
    """Every printed line and plain-text result of the executed notebook."""
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts.append(output.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


# ---------------------------------------------------------------- stored form
@pytest.mark.parametrize("name", run_full.NOTEBOOKS)
def test_stored_without_outputs(name: str) -> None:
    notebook = nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code
    for cell in code:
        assert cell.outputs == [], f"{name} is stored with outputs: run nbstripout on it"
        assert cell.execution_count is None, f"{name} is stored with execution counts"
    for cell in notebook.cells:
        assert set(cell.metadata) <= {"tags"}, f"{name}: cell metadata {dict(cell.metadata)}"
    assert "widgets" not in notebook.metadata and "papermill" not in notebook.metadata


@pytest.mark.parametrize("name", run_full.NOTEBOOKS)
def test_small_settings_are_parameters(name: str) -> None:
    """Every small setting names a variable of the notebook's one ``parameters`` cell."""
    import papermill

    notebook = nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{name} needs exactly one cell tagged 'parameters'"
    declared = set(papermill.inspect_notebook(str(NOTEBOOK_DIR / f"{name}.ipynb")))
    assert "out_dir" in declared
    assert set(SMALL[name]) <= declared, set(SMALL[name]) - declared


def test_every_notebook_is_run() -> None:
    stored = sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb"))
    assert stored == sorted(run_full.NOTEBOOKS) == sorted(SMALL)


def test_full_parameters_chain_the_checkpoint(tmp_path: Path) -> None:
    assert "checkpoint" not in run_full.full_parameters("04_export", tmp_path, FOX)
    (tmp_path / "03_train_a_scene").mkdir()
    (tmp_path / "03_train_a_scene" / "checkpoint.pt").write_bytes(b"")
    chained = run_full.full_parameters("04_export", tmp_path, FOX)
    assert chained["checkpoint"] == str(tmp_path / "03_train_a_scene" / "checkpoint.pt")
    assert chained["data"] == str(FOX)
    assert run_full.full_parameters("03_train_a_scene", tmp_path, FOX)["data"] == str(FOX)
    assert run_full.full_parameters("06_quality_options", tmp_path, FOX)["data"] == str(FOX)


# ---------------------------------------------------------------- execution
def test_01_setup_and_build(tmp_path: Path) -> None:
    files, notebook = execute("01_setup_and_build", tmp_path)
    doctor = json.loads((files / "doctor.json").read_text())
    assert doctor["torch"]["version"] == torch.__version__
    assert {c["name"] for c in doctor["checks"]} >= {"torch", "GPU", "CUDA toolkit", "ninja"}
    text = text_of(notebook)
    assert "CUDA toolkit" in text  # the doctor's table
    assert "cannot compile for sm_35" in text  # the failure demo
    assert "known failures" in text
    if not torch.cuda.is_available():
        assert "nothing is compiled" in text
        assert "with the reference backend" in text


def test_02_render_gaussians(tmp_path: Path) -> None:
    files, notebook = execute("02_render_gaussians", tmp_path)
    small = SMALL["02_render_gaussians"]
    with Image.open(files / "views.png") as views:
        assert views.size == (small["num_views"] * small["width"], small["height"])
    for name in ("alpha.png", "sh_degrees.png", "fit.png", "depth.html", "timing.html"):
        assert (files / name).stat().st_size > 0, name
    assert "red peaks in column 105" in text_of(notebook)


@pytest.mark.skipif(not FOX.is_dir(), reason=f"the fox dataset is not at {FOX}")
def test_03_train_a_scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gsnb.model import GaussianModel

    # The notebook fetches the fox; here from the copy beside the checkout (no network).
    monkeypatch.setenv("GSNB_FETCH_FROM", str(FOX.resolve()))
    monkeypatch.setenv("GSNB_DATA_DIR", str(tmp_path / "data"))
    files, notebook = execute("03_train_a_scene", tmp_path)
    summary = json.loads((files / "summary.json").read_text())
    assert Path(summary["data"]).resolve() == (tmp_path / "data" / "fox").resolve()
    assert (tmp_path / "data" / "fox" / "transforms.json").is_file()
    assert summary["steps"] == SMALL["03_train_a_scene"]["steps"]
    model = GaussianModel.load(files / "checkpoint.pt")
    assert model.num_gaussians == summary["num_gaussians"] > 0
    assert (files / "test_view.png").is_file()
    assert summary["test_psnr"] > 0
    assert "mode splats" in text_of(notebook)  # the viewer showed the splats, then stopped


def test_04_export_trains_the_demo_scene(tmp_path: Path) -> None:
    from gsnb.export.ply import read_ply

    files, _ = execute("04_export", tmp_path)
    splats = read_ply(files / "scene.ply")
    assert splats["means"].shape[0] > 0
    small = SMALL["04_export"]
    reader = imageio.get_reader(files / "orbit.mp4")
    try:
        assert reader.count_frames() == small["frames"]
        assert reader.get_data(0).shape == (48, 64, 3)
    finally:
        reader.close()
    assert (files / "frame.jpg").is_file() and (files / "upscale_comparison.png").is_file()


@pytest.mark.skipif(not FOX.is_dir(), reason=f"the fox dataset is not at {FOX}")
def test_04_export_of_a_checkpoint_along_the_training_cameras(tmp_path: Path) -> None:
    from gsnb.data import load_dataset
    from gsnb.export.ply import read_ply
    from gsnb.model import GaussianModel

    dataset = load_dataset(FOX, downscale=32)
    model = GaussianModel.from_points(dataset.points[:500], dataset.points_rgb[:500], sh_degree=1)
    model.save(tmp_path / "model.pt")
    extra = {"checkpoint": str(tmp_path / "model.pt"), "data": str(FOX.resolve()), "path": "train"}
    files, _ = execute("04_export", tmp_path, **extra)
    assert read_ply(files / "scene.ply")["means"].shape[0] == 500
    reader = imageio.get_reader(files / "train.mp4")
    try:
        assert reader.count_frames() == SMALL["04_export"]["frames"]
    finally:
        reader.close()


def test_readme_links_resolve() -> None:
    """The README's pictures, notebooks and result files exist (relative links only)."""
    import re

    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)\)", readme) + re.findall(r'src="([^"]+)"', readme)
    local = [t for t in targets if "://" not in t]
    assert any(t.endswith(".ipynb") for t in local) and any(t.startswith("docs/") for t in local)
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_docs_links_resolve() -> None:
    """Each page under docs/ links only to files that exist (relative to the page)."""
    import re

    pages = sorted((ROOT / "docs").glob("*.md"))
    assert pages
    missing = []
    for page in pages:
        text = page.read_text()
        targets = re.findall(r"\]\(([^)#\s]+)\)", text) + re.findall(r'src="([^"]+)"', text)
        local = [t for t in targets if "://" not in t]
        missing += [f"{page.name}: {t}" for t in local if not (page.parent / t).exists()]
    assert not missing, f"docs link to missing files: {missing}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_run_full_needs_a_gpu_or_allow_cpu(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert run_full.main(["--out", str(tmp_path / "runs")]) == 1
    assert "--allow-cpu" in capsys.readouterr().out
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("gpu", [False, True])
def test_04_trains_the_demo_scene_on_the_demo_budget(gpu: bool) -> None:
    """Notebook 04's own scene settings are ``gsnb demo``'s, on a CPU and on a GPU."""
    from gsnb.train.commands import demo_settings

    notebook = nbformat.read(NOTEBOOK_DIR / "04_export.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    values: dict[str, Any] = {}
    exec(cell.source.replace("torch.cuda.is_available()", repr(gpu)), {"torch": torch}, values)
    demo = demo_settings(torch.device("cuda" if gpu else "cpu"))
    mine = {
        "size": values["scene_size"],
        "views": values["scene_views"],
        "points": values["scene_points"],
        "steps": values["train_steps"],
        "cap": values["gaussian_cap"],
    }
    assert mine == {k: demo[k] for k in mine}


def test_05_your_own_capture(tmp_path: Path) -> None:
    pytest.importorskip("pycolmap")
    from gsnb.data import load_dataset
    from gsnb.export.ply import read_ply

    files, notebook = execute("05_your_own_capture", tmp_path)
    photos = json.loads((files / "photos_scene" / "process.json").read_text())
    video = json.loads((files / "video_scene" / "process.json").read_text())
    assert photos["registered"] == photos["images_in"] == 24
    assert video["kind"] == "video" and video["registered"] >= 20
    kept = sorted(p.name for p in (files / "video_scene" / "images").iterdir())
    assert all(int(name[6:11]) % 2 == 0 for name in kept)  # the sharp frame of each pair
    assert len(load_dataset(files / "photos_scene").views) == 24
    assert read_ply(files / "scene.ply")["means"].shape[0] > 0
    reader = imageio.get_reader(files / "orbit.mp4")
    try:
        assert reader.count_frames() == 4
    finally:
        reader.close()
    assert "reused: ['images', 'features', 'matching', 'mapping']" in text_of(notebook)


def test_06_quality_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra: dict[str, Any] = {}
    if FOX.is_dir():
        # The notebook fetches the fox; here from the copy beside the checkout (no network).
        monkeypatch.setenv("GSNB_FETCH_FROM", str(FOX.resolve()))
        monkeypatch.setenv("GSNB_DATA_DIR", str(tmp_path / "data"))
    else:
        extra = {"data": "synthetic"}
    files, notebook = execute("06_quality_options", tmp_path, **extra)
    results = json.loads((files / "results.json").read_text())
    # Anti-aliasing: both runs measured at the three sizes, against the photo at each.
    aa = results["antialias"]["psnr"]
    assert set(aa) == {"classic", "antialiased + 3D filter"}
    for values in aa.values():
        assert set(values) == {"1/2", "1x", "2x"} and all(5 < v < 80 for v in values.values())
    with Image.open(files / "antialias_grid.png") as grid:
        assert grid.width > 0 and grid.height > 0
    # Exposure: the learned transforms undo the known gains, and the fit beats the baseline.
    off, on = results["exposure_off"], results["exposure_on"]
    assert on["train_psnr"] > off["train_psnr"] + 5.0, (off, on)
    assert (off["protocol"], on["protocol"]) == ("full images", "right halves")
    learned = results["exposure_learned"]
    assert learned["gain_error"] < 0.6 * learned["gain_error_untouched"], learned
    assert sum(learned["colour_error"]) < 0.3 * sum(learned["colour_error_untouched"]), learned
    # Pose refinement: the perturbed cameras move back towards their true poses.
    pose = results["pose"]
    moved = [pose["views"].index(name) for name in pose["moved"]]
    before = [pose["reprojection_before_px"][i] for i in moved]
    after = [pose["reprojection_after_px"][i] for i in moved]
    assert sum(after) < 0.5 * sum(before), (before, after)
    rotation_before = sum(pose["rotation_before_deg"][i] for i in moved)
    assert sum(pose["rotation_after_deg"][i] for i in moved) < rotation_before
    assert pose["moved_rotation_deg"]["after"] < pose["moved_rotation_deg"]["before"]
    assert results["pose_on"]["train_psnr"] > results["pose_off"]["train_psnr"] + 1.0
    assert "mean colour error" in text_of(notebook)
