"""Photos or a video in, a posed COLMAP dataset out: ``DIR/images/`` and ``DIR/sparse/0``.

Stages: images (photos copied upright, or a video's sharpest frames), SIFT
features, matching, incremental mapping, undistortion to PINHOLE. Their work
lives in ``DIR/work/`` (``database.db``, the distorted models, the images,
COLMAP's own log ``colmap.log``), and
``DIR/work/stages.json`` records each finished stage with a key of everything
it depends on: a re-run reuses every stage whose key is unchanged and redoes
the rest. The dataset itself appears at the very end, ``sparse/0`` by one
rename after ``images/``, then ``process.json``: an interrupted run leaves no
model that ``gsnb train`` could take for a finished one.

Matching: a video's frames are matched in sequence (each with the next
``overlap`` frames and, quadratically spaced, some further ones); photo sets
of up to ``exhaustive_limit`` images (300) pair every image with every other;
larger sets are matched in name order like a sequence, since phones and
cameras number photos in the order they were taken, and that needs no
vocabulary tree (a download) nor GPS (spatial matching).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from gsnb.data.sfm.errors import ProcessError, require_pycolmap
from gsnb.data.sfm.frames import PreparedImages, copy_photos, extract_frames, is_video
from gsnb.data.sfm.logs import log_to
from gsnb.data.sfm.summary import SUMMARY_NAME, ProcessSummary
from gsnb.utils.atomic import atomic_write

STAGES = ("images", "features", "matching", "mapping", "undistortion")
MIN_REGISTERED = 3
SEED = 0  # RANSAC and the mapper draw from a seeded generator: a re-run gives the same model
StageProgress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass(frozen=True)
class ProcessOptions:
    """Settings of ``gsnb process``.

    - ``fps`` / ``frames``: a video's frames are kept at this rate, or about this
      many over the whole video (default: 2 a second).
    - ``max_image_size``: longer side of the images in pixels (larger ones are
      downscaled when copied); None keeps their size.
    - ``matcher``: "auto" (sequential for video, exhaustive for up to
      ``exhaustive_limit`` photos, sequential beyond), "exhaustive" or "sequential".
    - ``overlap``: how many following images sequential matching pairs with each.
    - ``camera_model``: COLMAP's model of the lens, refined by bundle adjustment.
    - ``threads``: threads of feature extraction, matching and mapping (0: every core);
      with 1 a run gives the same model bit for bit (threads finish in varying order).

    Example:
        >>> ProcessOptions(frames=120).matcher
        'auto'
    """

    fps: float | None = None
    frames: int | None = None
    max_image_size: int | None = None
    matcher: str = "auto"
    exhaustive_limit: int = 300
    overlap: int = 10
    camera_model: str = "SIMPLE_RADIAL"
    threads: int = 0

    def __post_init__(self) -> None:
        if self.fps is not None and self.fps <= 0:
            raise ProcessError(f"--fps must be positive, got {self.fps}")
        if self.frames is not None and self.frames < MIN_REGISTERED:
            raise ProcessError(f"--frames must be at least {MIN_REGISTERED}, got {self.frames}")
        if self.max_image_size is not None and self.max_image_size < 64:
            raise ProcessError(f"--max-image-size must be at least 64, got {self.max_image_size}")
        if self.threads < 0:
            raise ProcessError(f"--threads must be 0 (every core) or more, got {self.threads}")
        if self.matcher not in ("auto", "exhaustive", "sequential"):
            raise ProcessError(f"matcher must be auto, exhaustive or sequential: {self.matcher}")


def process(
    source: str | Path,
    out: str | Path,
    options: ProcessOptions | None = None,
    progress: StageProgress | None = None,
) -> ProcessSummary:
    """Pose the photos (a folder) or video frames of ``source`` into a dataset at ``out``.

    ``progress(stage, done, total)`` is called as each stage advances. Returns
    the summary also written to ``out/process.json``; raises ``ProcessError``
    with the cause and what to do.

    Example:
        >>> summary = process("my_photos", "my_scene")  # doctest: +SKIP
        >>> summary.registered, summary.points  # doctest: +SKIP
        (42, 18311)
    """
    pycolmap = require_pycolmap()
    return _process(pycolmap, source, out, options or ProcessOptions(), progress)


def _process(
    pycolmap: Any,
    source: str | Path,
    out: str | Path,
    options: ProcessOptions,
    progress: StageProgress | None,
) -> ProcessSummary:
    source, out = Path(source).expanduser().resolve(), Path(out).expanduser()
    if not source.exists():
        raise ProcessError(f"{source} does not exist; give a folder of photos or a video file")
    video = is_video(source)
    if not video and not source.is_dir():
        raise ProcessError(f"{source} is neither a folder of photos nor a video file")
    check_target(out, source)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    with log_to(work / "colmap.log"):  # COLMAP's own log: the terminal gets the summary
        return _run_stages(pycolmap, source, out, work, video, options, progress)


def _run_stages(
    pycolmap: Any,
    source: Path,
    out: Path,
    work: Path,
    video: bool,
    options: ProcessOptions,
    progress: StageProgress | None,
) -> ProcessSummary:
    # Until this run publishes its own, no model may look finished: one from an
    # earlier run may no longer match the input or the options.
    (out / SUMMARY_NAME).unlink(missing_ok=True)
    shutil.rmtree(out / "sparse", ignore_errors=True)
    record = StageRecord(work / "stages.json", str(source))
    report = progress or (lambda stage, done, total: None)
    seconds: dict[str, float] = {}
    reused: list[str] = []

    # 1. images
    key = _key(_listing(source), options.fps, options.frames, options.max_image_size)
    prepared = record.reuse("images", key)
    start = time.perf_counter()
    if prepared is None:
        report("images", 0, 1)
        shutil.rmtree(work / "images", ignore_errors=True)
        tick = lambda done, total: report("images", done, total)  # noqa: E731
        if video:
            got = extract_frames(
                source,
                work / "images",
                fps=options.fps,
                frames=options.frames,
                max_size=options.max_image_size,
                progress=tick,
            )
        else:
            got = copy_photos(source, work / "images", options.max_image_size, tick)
        prepared = record.finish("images", key, asdict(got))
    else:
        reused.append("images")
    images = PreparedImages(**prepared)
    seconds["images"] = time.perf_counter() - start
    if len(images.names) < MIN_REGISTERED:
        bad = f"; unreadable: {', '.join(images.skipped)}" if images.skipped else ""
        raise ProcessError(
            f"{source} gives {len(images.names)} usable image(s){bad}; structure from motion "
            f"needs at least {MIN_REGISTERED} overlapping views"
        )

    # 2. features
    sizes = {_size(work / "images" / n) for n in images.names}
    database = work / "database.db"
    key = _key(key, options.camera_model, pycolmap.__version__)
    start = time.perf_counter()
    if record.reuse("features", key) is None:
        report("features", 0, 1)
        database.unlink(missing_ok=True)
        reader = pycolmap.ImageReaderOptions()
        reader.camera_model = options.camera_model
        mode = pycolmap.CameraMode.SINGLE if len(sizes) == 1 else pycolmap.CameraMode.AUTO
        extraction = pycolmap.FeatureExtractionOptions()
        extraction.num_threads = options.threads or -1
        pycolmap.extract_features(
            database,
            work / "images",
            image_names=images.names,
            camera_mode=mode,
            reader_options=reader,
            extraction_options=extraction,
        )
        record.finish("features", key, {})
        report("features", 1, 1)
    else:
        reused.append("features")
    seconds["features"] = time.perf_counter() - start

    # 3. matching
    matcher = options.matcher
    if matcher == "auto":
        exhaustive = not video and len(images.names) <= options.exhaustive_limit
        matcher = "exhaustive" if exhaustive else "sequential"
    key = _key(key, matcher, options.overlap)
    start = time.perf_counter()
    if record.reuse("matching", key) is None:
        report("matching", 0, 1)
        db = pycolmap.Database.open(database)
        db.clear_matches()
        db.clear_two_view_geometries()
        db.close()
        verification = pycolmap.TwoViewGeometryOptions()
        verification.ransac.random_seed = SEED
        matching = pycolmap.FeatureMatchingOptions()
        matching.num_threads = options.threads or -1
        if matcher == "exhaustive":
            pycolmap.match_exhaustive(
                database, matching_options=matching, verification_options=verification
            )
        else:
            pairing = pycolmap.SequentialPairingOptions()
            pairing.overlap = options.overlap
            pairing.quadratic_overlap = True
            pycolmap.match_sequential(
                database,
                matching_options=matching,
                pairing_options=pairing,
                verification_options=verification,
            )
        record.finish("matching", key, {})
        report("matching", 1, 1)
    else:
        reused.append("matching")
    seconds["matching"] = time.perf_counter() - start

    # 4. mapping
    start = time.perf_counter()
    mapped = record.reuse("mapping", key)
    if mapped is None:
        mapped = _map(pycolmap, database, work, len(images.names), report, options.threads)
        record.finish("mapping", key, mapped)
    else:
        reused.append("mapping")
    seconds["mapping"] = time.perf_counter() - start
    pieces = mapped["pieces"]
    if not pieces:
        raise ProcessError(
            f"no two images of {source} could be posed together: too few shared features. "
            "Take photos with more overlap (each part of the scene in 3+ photos, 60-80% "
            "overlap between neighbours) of a textured, static scene"
        )
    if pieces[0] < MIN_REGISTERED:
        raise ProcessError(
            f"only {pieces[0]} of {len(images.names)} images registered (need "
            f"{MIN_REGISTERED}); take more photos with more overlap"
        )
    warnings = []
    if len(pieces) > 1:
        warnings.append(
            f"the images form {len(pieces)} separate models holding "
            f"{', '.join(map(str, pieces))} images; kept the largest ({pieces[0]}); "
            "bridge the gaps with more photos between the parts to join them"
        )

    # 5. undistortion, then the dataset appears
    start = time.perf_counter()
    report("undistortion", 0, 1)
    model = pycolmap.Reconstruction(work / "distorted" / mapped["model"])
    staging = work / "undistorted"
    shutil.rmtree(staging, ignore_errors=True)
    pycolmap.undistort_images(staging, work / "distorted" / mapped["model"], work / "images")
    _publish(staging, out)
    report("undistortion", 1, 1)
    seconds["undistortion"] = time.perf_counter() - start

    registered = {model.image(i).name for i in model.reg_image_ids()}
    undistorted = pycolmap.Reconstruction(out / "sparse" / "0")
    camera = next(iter(undistorted.cameras.values()))
    summary = ProcessSummary(
        input=str(source),
        kind="video" if video else "photos",
        images_in=len(images.names),
        registered=len(registered),
        points=model.num_points3D(),
        mean_reprojection_error=float(model.compute_mean_reprojection_error()),
        matcher=matcher,
        camera_model=options.camera_model,
        image_size=(int(camera.width), int(camera.height)),
        unregistered=[n for n in images.names if n not in registered],
        skipped=images.skipped,
        pieces=pieces,
        seconds={k: round(v, 3) for k, v in seconds.items()},
        reused=reused,
        warnings=warnings,
        versions={"pycolmap": pycolmap.__version__},
    )
    summary.write(out)
    return summary


def check_target(out: Path, source: Path) -> None:
    """Refuse an ``out`` that holds a dataset not made by ``gsnb process`` from ``source``.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> (folder / "transforms.json").write_text("{}")
        2
        >>> check_target(folder, Path("photos"))
        Traceback (most recent call last):
        ...
        gsnb.data.sfm.errors.ProcessError: ... already holds a dataset ...
    """
    resolved = out.resolve()
    if resolved == source or source in resolved.parents:
        raise ProcessError(f"--out {out} is inside the input {source}; write the dataset elsewhere")
    if not out.exists():
        return
    if not out.is_dir():
        raise ProcessError(f"--out {out} is a file; give a folder")
    made_from = None
    summary = ProcessSummary.read(out)
    stages = out / "work" / "stages.json"
    if summary is not None:
        made_from = summary.input
    elif stages.is_file():
        made_from = json.loads(stages.read_text()).get("input")
    if made_from is not None and made_from != str(source):
        raise ProcessError(
            f"{out} already holds a dataset processed from {made_from}, not {source}; "
            "choose another --out folder or delete that one"
        )
    dataset_files = ("images", "sparse", "transforms.json", "cameras.bin", "cameras.txt")
    if made_from is None and any((out / name).exists() for name in dataset_files):
        raise ProcessError(
            f"{out} already holds a dataset that gsnb process did not make; choose another "
            "--out folder (or empty that one)"
        )


class StageRecord:
    """``work/stages.json``: the finished stages, each with its key and what it produced."""

    def __init__(self, path: Path, source: str) -> None:
        self.path, self.source = path, source
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        self.stages: dict[str, Any] = data.get("stages", {}) if isinstance(data, dict) else {}
        self.valid = True  # a redone stage invalidates every later one

    def reuse(self, stage: str, key: str) -> dict[str, Any] | None:
        """What ``stage`` produced when it finished with this ``key``, else None."""
        entry = self.stages.get(stage)
        if self.valid and entry is not None and entry.get("key") == key:
            return entry["result"]
        self.valid = False
        # This stage and the later ones are redone: forget them before their files change,
        # so that an interrupted redo is never mistaken for finished work.
        stale = STAGES[STAGES.index(stage) :]
        if any(name in self.stages for name in stale):
            self.stages = {k: v for k, v in self.stages.items() if k not in stale}
            self._write()
        return None

    def finish(self, stage: str, key: str, result: dict[str, Any]) -> dict[str, Any]:
        """Record ``stage`` as finished; drops the later stages; returns ``result``."""
        later = STAGES[STAGES.index(stage) + 1 :]
        self.stages = {k: v for k, v in self.stages.items() if k not in later}
        self.stages[stage] = {"key": key, "result": result}
        self._write()
        return result

    def _write(self) -> None:
        with atomic_write(self.path, "w") as handle:
            json.dump({"input": self.source, "stages": self.stages}, handle, indent=1)


def _map(
    pycolmap: Any,
    database: Path,
    work: Path,
    num_images: int,
    report: StageProgress,
    threads: int = 0,
) -> dict[str, Any]:
    """Incremental mapping into ``work/distorted``, the largest model refined by ``refine``;
    the models' sizes, largest first."""
    staging, final = work / "distorted.tmp", work / "distorted"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    options = pycolmap.IncrementalPipelineOptions()
    options.random_seed = SEED
    options.num_threads = threads or -1
    options.min_model_size = 2  # smaller models are reported, then refused, not hidden
    registered = [0]

    def next_image() -> None:
        registered[0] += 1
        report("mapping", min(registered[0], num_images), num_images)

    report("mapping", 0, num_images)
    models = pycolmap.incremental_mapping(
        database, work / "images", staging, options=options, next_image_callback=next_image
    )
    order = sorted(models, key=lambda i: -models[i].num_reg_images())
    if order:
        largest = models[order[0]]
        refine(pycolmap, largest)
        largest.write(staging / str(order[0]))
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    report("mapping", num_images, num_images)
    return {
        "model": str(order[0]) if order else "",
        "pieces": [int(models[i].num_reg_images()) for i in order],
    }


def refine(pycolmap: Any, model: Any) -> None:
    """A last global bundle adjustment of ``model`` (in place) with a robust (Cauchy) loss.

    The mapper's adjustments weigh every observation alike up to its 4 px outlier
    filter; observations that fit no single 3D point (features on the outline of an
    object, which move along it from view to view) then pull every pose a little. A
    Cauchy loss of 0.5 px lets them count less: on the synthetic scene's video the
    camera centres' largest error fell from 0.86 % to 0.52 % of the scene's extent.
    """
    options = pycolmap.BundleAdjustmentOptions()
    options.print_summary = False
    options.ceres.loss_function_type = pycolmap.LossFunctionType.CAUCHY
    options.ceres.loss_function_scale = 0.5
    pycolmap.bundle_adjustment(model, options)


def _publish(staging: Path, out: Path) -> None:
    """Move the undistorted ``images`` and ``sparse`` into ``out``, ``sparse/0`` by one rename."""
    (out / SUMMARY_NAME).unlink(missing_ok=True)
    trash = out / "work" / "trash"
    shutil.rmtree(trash, ignore_errors=True)
    trash.mkdir()
    for name in ("sparse", "images"):
        if (out / name).exists():
            (out / name).rename(trash / name)
    (staging / "images").rename(out / "images")
    (out / "sparse").mkdir()
    (staging / "sparse").rename(out / "sparse" / "0")
    shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)


def _size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:  # reads the header only
        return image.size


def _listing(source: Path) -> list[tuple[str, int, int]]:
    """Name, size and mtime of the input files: a changed input redoes every stage."""
    files = [source] if source.is_file() else sorted(p for p in source.iterdir() if p.is_file())
    return [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files]


def _key(*parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, default=str).encode()).hexdigest()[:16]
