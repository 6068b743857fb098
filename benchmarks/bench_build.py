"""Build times: gsnb's cold and warm rasterizer build beside gsplat's first-call JIT build.

Each measurement runs in a fresh Python process (timed inside it, after ``import
torch``), so the numbers are what a new notebook kernel sees:

1. gsnb cold: ``gsnb.toolchain.build(jobs=16)`` into an empty cache (includes the smoke test);
   then a second ``build()`` in the same process. Reports each compile step's start and
   end from ninja's ``.ninja_log`` (are the units compiled in parallel? which is slowest?).
2. gsnb warm, new process: ``python -m gsnb.cli build`` as a whole fresh process
   (``warm_cli_process_s``, median of 3, and whether it imported torch); then ``build()``
   (cache hit; the smoke test passed in 1. and is
   not run again), the seconds of each phase and the processes it started; then
   ``build(verify=True)`` (cache hit + smoke test, the first CUDA work of the process)
   and ``load_cached()``.
3. gsplat cold (when ``import gsplat`` works): its first ``gsplat.rasterization`` call,
   which JIT-compiles its CUDA sources with ``MAX_JOBS=16`` into an empty
   ``TORCH_EXTENSIONS_DIR``, then a second call.

    python benchmarks/bench_build.py --out benchmarks/results

Writes ``bench_build.json`` (GPU name, versions, date, seconds) and the child logs to --out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
JOBS = 16


def child_gsnb_cold(cache: str) -> dict:
    import gsnb.toolchain
    from gsnb.toolchain.ninja_log import read_steps

    start = time.perf_counter()
    first = gsnb.toolchain.build(jobs=JOBS, cache_dir=cache, progress=False)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    second = gsnb.toolchain.build(jobs=JOBS, cache_dir=cache, progress=False)
    warm = time.perf_counter() - start
    return {
        "cold_s": cold,
        "cold_cached": first.cached,
        "cold_phases_s": first.timings,
        "archs": first.archs,
        "smoke": first.smoke.message if first.smoke else None,
        "nvcc_flags": first.manifest.get("flags", {}).get("nvcc"),
        "toolchain": first.manifest.get("toolchain"),
        "steps": [[s.target, s.start, s.end, s.seconds] for s in read_steps(first.folder)],
        "warm_same_process_s": warm,
        "warm_cached": second.cached,
    }


def warm_cli(cache: str, runs: int = 3) -> dict:
    """``python -m gsnb.cli build`` on the built cache, each run a fresh process: its wall time
    (median) and whether it imported torch (``-X importtime``)."""
    env = {**os.environ, "GSNB_CACHE_DIR": cache, "PYTHONPATH": str(HERE.parent)}
    command = [sys.executable, "-X", "importtime", "-m", "gsnb.cli", "build", "--no-progress"]
    seconds, outputs, codes, torch_imported = [], [], [], []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        seconds.append(time.perf_counter() - start)
        outputs.append(done.stdout.strip() or done.stderr.strip()[-2000:])
        codes.append(done.returncode)
        names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
        torch_imported.append("torch" in names)
    return {
        "warm_cli_process_s": sorted(seconds)[len(seconds) // 2],
        "warm_cli_process_runs_s": seconds,
        "warm_cli_exit_codes": codes,
        "warm_cli_imported_torch": torch_imported,
        "warm_cli_output": outputs[-1],
    }


def child_gsnb_warm(cache: str) -> dict:
    os.environ["GSNB_CACHE_DIR"] = cache
    cli = warm_cli(cache)  # first: this process has not loaded torch or CUDA yet
    start = time.perf_counter()
    import torch

    imported = time.perf_counter() - start
    start = time.perf_counter()
    torch.cuda.init()  # CUDA start-up is not part of the build
    cuda_init = time.perf_counter() - start
    start = time.perf_counter()
    import gsnb.toolchain

    imported_gsnb = time.perf_counter() - start
    started: list[str] = []
    sys.addaudithook(lambda e, a: e == "subprocess.Popen" and started.append(str(a[1][0])))
    start = time.perf_counter()
    result = gsnb.toolchain.build(cache_dir=cache, progress=False)
    warm = time.perf_counter() - start
    warm_started = list(started)
    start = time.perf_counter()
    verified = gsnb.toolchain.build(cache_dir=cache, progress=False, verify=True)
    warm_verify = time.perf_counter() - start
    from gsnb import kernels

    kernels.set_extension(None)
    start = time.perf_counter()
    module = gsnb.toolchain.load_cached()
    loaded = time.perf_counter() - start
    return {
        **cli,
        "import_torch_s": imported,
        "cuda_init_s": cuda_init,
        "import_gsnb_build_s": imported_gsnb,
        "warm_new_process_s": warm,
        "warm_phases_s": result.timings,
        "warm_processes_started": warm_started,
        "warm_cached": result.cached,
        "smoke": result.smoke.message if result.smoke else None,
        "smoke_from_record": bool(result.smoke and result.smoke.recorded is not None),
        "warm_verify_s": warm_verify,
        "warm_verify_phases_s": verified.timings,
        "verify_smoke": verified.smoke.message if verified.smoke else None,
        "load_cached_s": loaded,
        "load_cached_found": module is not None,
    }


def child_gsplat(ext_dir: str) -> dict:
    os.environ["TORCH_EXTENSIONS_DIR"] = ext_dir
    os.environ["MAX_JOBS"] = str(JOBS)
    import torch

    torch.cuda.init()
    import gsplat

    from gsnb.raster.smoke import tiny_scene

    scene = tiny_scene(torch.device("cuda"))

    def call() -> None:
        gsplat.rasterization(
            scene["means"], scene["quats"], scene["scales"], scene["opacities"], scene["colors"],
            scene["viewmats"], scene["Ks"], scene["width"], scene["height"], sh_degree=1,
        )  # fmt: skip
        torch.cuda.synchronize()

    start = time.perf_counter()
    call()
    cold = time.perf_counter() - start
    start = time.perf_counter()
    call()
    return {
        "gsplat": gsplat.__version__,
        "cold_s": cold,
        "second_call_s": time.perf_counter() - start,
    }


CHILDREN = {"gsnb-cold": child_gsnb_cold, "gsnb-warm": child_gsnb_warm, "gsplat": child_gsplat}


def run_child(kind: str, folder: str, out: Path) -> dict:
    """Run one measurement in a fresh process; its output goes to ``out/<kind>.log``."""
    print(f"[bench_build] {kind} ...", flush=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--folder", folder]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    (out / f"bench_build_{kind}.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    if done.returncode != 0:
        print(f"[bench_build] {kind} failed (exit {done.returncode}); see the log", flush=True)
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-5:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    print(f"[bench_build] {kind}: {result}", flush=True)
    return result


@contextlib.contextmanager
def _folder(keep: Path | None, prefix: str) -> Iterator[str]:
    """An empty folder: ``keep`` (created, must be empty, kept afterwards) or a temporary one."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix=prefix) as folder:
            yield folder
        return
    keep.mkdir(parents=True, exist_ok=True)
    if any(keep.iterdir()):
        raise SystemExit(f"{keep} is not empty: a cold build needs an empty folder")
    yield str(keep)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument(
        "--gsnb-cache", type=Path, help="build into this (empty) cache folder and keep it"
    )
    parser.add_argument(
        "--gsplat-ext-dir", type=Path, help="build gsplat into this (empty) folder and keep it"
    )
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args.folder)), flush=True)
        return 0

    from common import environment, write_json

    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"benchmark": "build", "jobs": JOBS, **environment()}
    with _folder(args.gsnb_cache, "gsnb-bench-cache-") as cache:
        results["gsnb_cold"] = run_child("gsnb-cold", cache, args.out)
        results["gsnb_warm"] = run_child("gsnb-warm", cache, args.out)
    try:
        import gsplat  # noqa: F401
    except ImportError as err:
        results["gsplat_cold"] = {"skipped": f"import gsplat failed: {err}"}
    else:
        with _folder(args.gsplat_ext_dir, "gsplat-bench-ext-") as ext_dir:
            results["gsplat_cold"] = run_child("gsplat", ext_dir, args.out)
    cold = results["gsnb_cold"].get("cold_s")
    gsplat_cold = results["gsplat_cold"].get("cold_s")
    if cold and gsplat_cold:
        results["cold_ratio_gsnb_over_gsplat"] = cold / gsplat_cold
    write_json(args.out / "bench_build.json", results)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
