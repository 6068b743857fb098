"""benchmarks/quality_sweep.py runs recipes side by side on the CPU and summarises them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gsnb.data.synthetic import make_synthetic_scene

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import quality_sweep  # noqa: E402


def sweep(tmp_path: Path, recipes: dict, *options: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Two runs of each of ``recipes`` (3 steps, a tiny synthetic scene, the CPU) with
    ``options``; the finished process and the sweep's JSON."""
    scene = make_synthetic_scene(tmp_path / "scene", num_views=4, size=16, num_points=100)
    path = tmp_path / "recipes.json"
    path.write_text(json.dumps(recipes))
    env = os.environ | {"GSNB_RUN_DEVICE": "cpu", "GSNB_RUN_BACKEND": "reference"}
    argv = [str(scene), "--recipes", str(path), "--runs", "2", "--steps", "3",
            "--downscale", "1", "--out", str(tmp_path / "out"), *options]  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "quality_sweep.py"), *argv],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done, json.loads((tmp_path / "out" / "quality_sweep.json").read_text())


def test_two_recipes_two_runs_each_are_summarised_against_the_baseline(tmp_path: Path) -> None:
    turned = {"config": {"init_rotation": "random"}, "dataset": {"normalize_world": True}}
    done, result = sweep(tmp_path, {"plain": {}, "turned": turned}, "--parallel", "2")
    assert sorted((r["name"], r["seed"]) for r in result["runs"]) == [
        ("plain", 0), ("plain", 1), ("turned", 0), ("turned", 1)
    ]  # fmt: skip
    assert all("error" not in r and 0 < r["psnr"] < 100 for r in result["runs"])
    assert {r["name"]: r["normalize_world"] for r in result["runs"]} == {
        "plain": False, "turned": True
    }  # fmt: skip
    summary = result["summary"]
    assert result["baseline"] == "plain" and summary["plain"]["runs"] == 2
    turned = summary["turned"]
    assert turned["vs_baseline"]["difference"] == pytest.approx(
        turned["mean"] - summary["plain"]["mean"], abs=2e-3
    )
    assert set(turned["views"]) == set(result["runs"][0]["views"])  # per test view
    assert set(turned["views_dc"]) == set(turned["views"])  # ... and at SH degree 0 alone
    assert set(result["view_spread"]) == set(turned["views"])
    assert (tmp_path / "out" / "logs" / "turned_1.log").read_text()
    assert "against plain" in done.stdout


def test_a_traced_recipe_is_summarised_step_by_step(tmp_path: Path) -> None:
    done, result = sweep(tmp_path, {"traced": {"config": {"eval_every": 1}}})
    trace = result["summary"]["traced"]["trace"]  # JSON keys: the steps as text
    assert list(trace) == ["1", "2", "3"]
    for step, entry in trace.items():
        values = [psnr for r in result["runs"] for s, psnr, _ in r["trace"] if s == int(step)]
        assert entry["runs"] == 2 and entry["psnr"] == pytest.approx(sum(values) / 2, abs=2e-3)
    # the last evaluation is of the model each run ends with
    assert trace["3"]["psnr"] == pytest.approx(result["summary"]["traced"]["mean"], abs=2e-3)
    assert "traced                       trace: step 1 " in done.stdout


def test_a_failed_run_is_recorded_with_its_error(tmp_path: Path) -> None:
    args = quality_sweep.argparse.Namespace(steps=3, data=tmp_path / "missing", downscale=1)
    cmd = quality_sweep.command("plain", {}, 0, args)
    row = quality_sweep.one_run(cmd, tmp_path / "log.txt")
    assert row["returncode"] != 0 and row["error"]


def test_recipes_are_checked() -> None:
    # a recipe measured against 3DGS's schedule keeps it under its own change
    assert quality_sweep.load_recipes("noreset")["noreset"]["strategy_kwargs"] == {
        "opacity_reset": False, "grow_grad2d": 2e-4, "refine_stop_iter": 15_000
    }  # fmt: skip
    assert quality_sweep.load_recipes("3dgs")["3dgs"]["config"] == {"lr_means_decay_steps": 0}
    assert quality_sweep.load_recipes("mcmc")["mcmc"] == {
        "strategy": "mcmc", "config": {"lr_means_decay_steps": 0}
    }  # fmt: skip
    with pytest.raises(ValueError, match="unknown recipes"):
        quality_sweep.load_recipes("default,nonsense")
    assert (
        quality_sweep.load_recipes("normalize_world")["normalize_world"]
        == {"dataset": {"normalize_world": True}} | quality_sweep.THREE_DGS
    )


def test_every_named_recipe_builds_its_config_and_strategy() -> None:
    import quality_run

    from gsnb.train.config import TrainConfig

    for name, recipe in quality_sweep.RECIPES.items():
        config = TrainConfig(**recipe.get("config", {}))
        strategy = quality_run.STRATEGIES[recipe.get("strategy", "default")](
            **recipe.get("strategy_kwargs", {})
        )
        for key, value in recipe.get("config", {}).items():
            assert getattr(config, key) == value, name
        for key, value in recipe.get("strategy_kwargs", {}).items():
            assert getattr(strategy, key) == value, name
        assert set(recipe.get("dataset", {})) <= quality_run.DATASET_OPTIONS, name


def test_a_run_past_its_timeout_is_a_failed_run(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "print('started', flush=True); import time; time.sleep(30)"]
    row = quality_sweep.one_run(cmd, tmp_path / "log.txt", timeout=5.0)  # time to start
    assert row == {"error": "ran past 5.0 s", "returncode": None}
    assert "started" in (tmp_path / "log.txt").read_text()


def test_an_anchor_run_is_read_from_the_json_line_its_wrapper_prints(tmp_path: Path) -> None:
    line = json.dumps(
        {"anchor": "gsplat-1.5.3 examples/simple_trainer.py default", "psnr": 32.27,
         "ssim": 0.904, "num_gaussians": 219413, "train_s": 79.1}
    )  # fmt: skip
    cmd = [sys.executable, "-c", f"print('[setup] built'); print({line!r})"]
    row = quality_sweep.one_run(cmd, tmp_path / "log.txt")
    assert row == {
        "psnr": 32.27, "ssim": 0.904, "n": 219413, "wall_s": 79.1,
        "anchor": "gsplat-1.5.3 examples/simple_trainer.py default",
    }  # fmt: skip
    failed = quality_sweep.one_run([sys.executable, "-c", "print('{}')"], tmp_path / "log.txt")
    assert "error" in failed  # no result line: a failed run, not a row of Nones
    args = quality_sweep.argparse.Namespace(steps=30000, data=Path("fox"), downscale=2)
    assert quality_sweep.anchor_command(Path("run.sh"), 3, args) == [
        "bash", "run.sh", "fox", "2", "30000", "sweep3"
    ]  # fmt: skip


def test_an_anchor_run_in_a_sweep_reports_each_test_views_psnr(tmp_path: Path) -> None:
    # A stand-in for run.sh with simple_trainer's outputs: a [photo | render] PNG per test
    # view (render = photo + 8/255 everywhere: 30.069 dB), and its JSON line
    fake = tmp_path / "run.sh"
    fake.write_text(
        "set -e\n"
        "R=$GS_ANCHOR_WORK/results/$4/renders; mkdir -p $R; touch $GS_ANCHOR_WORK/setup.json\n"
        f'{sys.executable} -c "import numpy as np; from PIL import Image; '
        "p = np.zeros((8, 16, 3), np.uint8); p[:, 8:] = 8; "
        "Image.fromarray(p).save('$R/val_step$(( $3 - 1 ))_0000.png')\"\n"
        'echo \'{"anchor": "gsplat", "psnr": 30.2, "ssim": 0.9, "num_gaussians": 9}\'\n'
    )  # its own float PSNR reads above the 8-bit PNG's, as truncation makes it
    _, result = sweep(
        tmp_path, {"default": {}}, "--anchor", str(fake), "--anchor-work", str(tmp_path / "w")
    )
    names = quality_sweep.held_out_names(tmp_path / "scene")
    assert len(names) == 1  # the synthetic scene of 4 views holds out its first
    anchor = [r for r in result["runs"] if r["name"] == "anchor"]
    assert len(anchor) == 2 and all(r["views_png"] == {names[0]: 30.069} for r in anchor)
    # each view corrected by the one mean square that brings their mean to the run's figure
    assert all(r["views"] == {names[0]: 30.2} for r in anchor)
    offset = 10 ** (-3.0069) - 10 ** (-3.02)
    assert all(r["png_mse_offset"] == pytest.approx(offset, rel=1e-3) for r in anchor)
    assert result["summary"]["anchor"]["views"] == {names[0]: 30.2}
    # a count of renders other than the test views' names nothing
    assert (
        quality_sweep.anchor_views(tmp_path / "w" / "results" / "sweep0" / "renders", 3, []) == {}
    )


def test_runs_are_spread_over_the_named_gpus(tmp_path: Path) -> None:
    fake = tmp_path / "run.sh"  # an anchor that says which GPUs it was given
    fake.write_text(
        "mkdir -p $GS_ANCHOR_WORK; touch $GS_ANCHOR_WORK/setup.json; sleep 1\n"
        "echo gpus=$CUDA_VISIBLE_DEVICES\n"
        'echo \'{"anchor": "gsplat", "psnr": 30.2, "ssim": 0.9, "num_gaussians": 9}\'\n'
    )
    options = ["--anchor", str(fake), "--anchor-work", str(tmp_path / "w")]
    _, result = sweep(tmp_path, {"default": {}}, *options, "--gpus", "0,1", "--parallel", "4")
    assert result["gpus"] == ["0", "1"]
    runs = result["runs"]
    assert len(runs) == 4 and {r["gpu"] for r in runs} == {"0", "1"}
    for row in runs:
        if row["name"] == "anchor":
            log = tmp_path / "out" / "logs" / f"anchor_{row['seed']}.log"
            assert f"gpus={row['gpu']}\n" in log.read_text()
    assert quality_sweep.least_loaded(["0", "1"], ["1"]) == "0"
    assert quality_sweep.least_loaded([], ["0"]) is None
    assert quality_sweep.gpu_list(" 3, 5 ") == ["3", "5"]


def test_all_gpus_are_those_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert quality_sweep.gpu_list("all") == ["4", "6"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ValueError, match="no GPU is visible"):
        quality_sweep.gpu_list("all")


def test_a_missing_anchor_script_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "quality_sweep.py"), str(tmp_path), "--anchor",
         str(tmp_path / "nope.sh"), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "no such file (the anchor's run.sh)" in done.stderr


def test_screening_keeps_the_best_recipes_and_the_baseline() -> None:
    rows = [
        {"name": "base", "psnr": 30.0}, {"name": "a", "psnr": 31.0},
        {"name": "a", "psnr": 32.0}, {"name": "b", "psnr": 31.0},
        {"name": "c", "error": "failed"}, {"name": "anchor", "psnr": 29.0},
    ]  # fmt: skip
    names = ["base", "a", "b", "c", "anchor"]
    kept, dropped = quality_sweep.screen(rows, names, keep=1, always={"base", "anchor"})
    assert kept == ["base", "a", "anchor"] and dropped == {"b": 31.0, "c": None}
    kept, dropped = quality_sweep.screen(rows, names, keep=2, always={"base", "anchor"})
    assert kept == ["base", "a", "b", "anchor"] and dropped == {"c": None}
    assert quality_sweep.screen(rows, names, keep=0, always={"base"})[0] == ["base"]
    nan = [*rows, {"name": "d", "psnr": float("nan")}]  # no finite mean: dropped first
    kept, dropped = quality_sweep.screen(nan, [*names, "d"], keep=2, always={"base", "anchor"})
    assert kept == ["base", "a", "b", "anchor"] and dropped == {"c": None, "d": None}


def test_a_screened_sweep_runs_only_the_kept_recipes_past_the_screen(tmp_path: Path) -> None:
    lower = {f"sh{d}": {"config": {"sh_degree": d}} for d in (0, 1)}
    _, result = sweep(
        tmp_path, {"plain": {}} | lower, "--screen", "1", "--keep", "1", "--parallel", "3"
    )
    screening = result["screening"]
    assert screening["after_runs"] == 1 and len(screening["kept"]) == 2
    assert "plain" in screening["kept"] and len(screening["dropped"]) == 1
    (dropped,) = screening["dropped"]
    (kept,) = set(screening["kept"]) - {"plain"}
    first = {r["name"]: r["psnr"] for r in result["runs"] if r["seed"] == 0}
    assert first[kept] >= first[dropped]
    assert sorted((r["name"], r["seed"]) for r in result["runs"]) == sorted(
        [("plain", 0), ("sh0", 0), ("sh1", 0), ("plain", 1), (kept, 1)]
    )
    assert result["summary"][dropped]["runs"] == 1
    after = result["summary_after_screen"]  # the kept recipes over their later runs only
    assert set(after) == {"plain", kept} and after["plain"]["runs"] == after[kept]["runs"] == 1


def test_views_that_read_far_apart_from_run_to_run_are_set_apart() -> None:
    # the fox's pattern: seven views within a few tenths of a dB from run to run, two that
    # swing by several dB and decide the plain means
    def row(name: str, near: float, far: float) -> dict:
        views = {f"n{i}": near + 0.1 * (i % 2) for i in range(7)} | {"f0": far, "f1": far + 1}
        return {"name": name, "psnr": sum(views.values()) / 9, "n": 1, "views": views}

    runs = [row("base", 33.0, 22.0), row("base", 33.1, 28.0), row("base", 33.05, 27.0)]
    runs += [row("new", 33.3, 23.0), row("new", 33.35, 22.5), row("new", 33.4, 24.0)]
    spread = quality_sweep.view_spread(runs)
    assert spread["n0"] < 0.1 and spread["f0"] > 1.5
    steady = quality_sweep.steady_views(spread, 1.0)
    assert steady == [f"n{i}" for i in range(7)]
    summary = quality_sweep.summarize(runs, ["base", "new"], "base", steady)
    assert summary["new"]["vs_baseline"]["difference"] < 0  # the far views' lottery
    part = summary["new"]["steady"]
    assert part["runs"] == 3 and part["views"] == steady
    assert part["vs_baseline"]["difference"] == pytest.approx(0.3, abs=1e-3)
    assert part["vs_baseline"]["se"] < 0.1
    assert quality_sweep.steady_views({"a": 0.1, "b": 0.2}, 1.0) == []  # nothing to set apart
    assert "steady" not in quality_sweep.summarize(runs, ["base", "new"], "base")["new"]
    runs.append(row("new", 33.3, 23.0))
    runs[-1]["views"]["n3"] = float("nan")  # a failed view leaves that run out, not the sweep
    assert (
        quality_sweep.summarize(runs, ["base", "new"], "base", steady)["new"]["steady"]["runs"] == 3
    )


def test_named_steady_views_replace_the_spread_rule(tmp_path: Path) -> None:
    assert quality_sweep.named_views("b, a", ["a", "b", "c"]) == ["b", "a"]
    with pytest.raises(ValueError, match=r"\['x'\] not among the capture's test views"):
        quality_sweep.named_views("a,x", ["a", "b"])
    with pytest.raises(ValueError, match="names no views"):
        quality_sweep.named_views(" , ", ["a"])
    done, result = sweep(
        tmp_path, {"plain": {}, "sh0": {"config": {"sh_degree": 0}}},
        "--parallel", "2", "--steady-views", "images/r_000.png",
    )  # fmt: skip
    assert result["steady_views"] == ["images/r_000.png"]
    part = result["summary"]["sh0"]["steady"]
    assert part["views"] == ["images/r_000.png"] and part["runs"] == 2
    means = [r["views"]["images/r_000.png"] for r in result["runs"] if r["name"] == "sh0"]
    assert part["mean"] == pytest.approx(sum(means) / 2, abs=1e-3)
    assert "1 steady views" in done.stdout and "read far apart" not in done.stdout


def test_a_steady_view_that_is_not_a_test_view_is_refused(tmp_path: Path) -> None:
    scene = make_synthetic_scene(tmp_path / "scene", num_views=4, size=16, num_points=100)
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "quality_sweep.py"), str(scene), "--steady-views",
         "r_009.png", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "not among the capture's test views" in done.stderr
    assert not (tmp_path / "out").exists()
