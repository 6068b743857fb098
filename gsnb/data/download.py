"""Sample captures into the user's cache, checked file by file (``gsnb fetch NAME``).

Each file of a :class:`~gsnb.data.samples.Sample` is downloaded from its public
source into ``$GSNB_DATA_DIR/NAME`` (default ``~/.cache/gsnb/data/NAME``), written
as ``FILE.part`` and renamed only once its SHA-256 matches, so an interrupted
fetch resumes where it stopped (an HTTP range request) and a finished file is
never half-written. Without a network, a copy the user already has serves
instead: a folder or a ``.zip``/``.tar*`` archive holding the sample's files
(``source=``, ``gsnb fetch NAME --from PATH``, or ``$GSNB_FETCH_FROM``); its
files are checked the same way. A sample whose every file is in place and
checked returns at once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from gsnb.data.samples import SAMPLES, Sample

CHUNK = 1 << 20
DONE = ".complete"
"""Written last, after every file checked: the sample is whole."""


class FetchError(RuntimeError):
    """A sample could not be fetched; the message names the file, the cause and what to do."""


def data_dir(env: dict[str, str] | None = None) -> Path:
    """Where samples are kept: ``$GSNB_DATA_DIR`` or ``~/.cache/gsnb/data``.

    Example:
        >>> data_dir({"GSNB_DATA_DIR": "/data/gsnb"})
        PosixPath('/data/gsnb')
    """
    env = os.environ if env is None else env
    if env.get("GSNB_DATA_DIR"):
        return Path(env["GSNB_DATA_DIR"]).expanduser()
    return Path("~/.cache/gsnb/data").expanduser()


def fetch(
    name: str,
    *,
    folder: str | os.PathLike[str] | None = None,
    source: str | os.PathLike[str] | None = None,
    progress: bool = True,
    timeout: float = 60.0,
) -> Path:
    """The folder of sample ``name`` with every file in place and checked, fetching what is missing.

    Args:
        name: a sample of :data:`~gsnb.data.samples.SAMPLES` (``"fox"``).
        folder: where to keep it (default ``data_dir() / name``).
        source: a folder or archive that already holds the sample (no download);
            default ``$GSNB_FETCH_FROM`` (a folder holding ``name/``, or the sample's own
            folder), else the public source.
        progress: show a progress bar of the bytes fetched.
        timeout: seconds a stalled connection waits.

    Raises:
        FetchError: an unknown name, a file whose checksum differs, no network and no
            copy; the message says what to do.

    Example:
        >>> path = fetch("fox", source="../shared/data/fox")  # doctest: +SKIP
        >>> sorted(p.name for p in path.iterdir())  # doctest: +SKIP
        ['.complete', 'SOURCE.md', 'images', 'transforms.json']
    """
    sample = _sample(name)
    if source is not None:  # checked even when nothing is missing
        _existing(Path(source))
    target = Path(folder) if folder is not None else data_dir() / name
    if (target / DONE).is_file() and _sizes_match(sample, target):
        return target
    try:
        target.mkdir(parents=True, exist_ok=True)
        (target / DONE).unlink(missing_ok=True)
    except OSError as err:
        raise FetchError(f"cannot write into {target}: {err.strerror or err}") from err
    source = source if source is not None else _source_from_env(name)
    missing = [f for f in sample.files if not _checked(target / f[0], f[1], f[2])]
    if missing:
        with _progress(sum(f[1] for f in missing), progress, name) as advance:
            if source is not None:
                _copy_from(sample, Path(source), target, missing, advance)
            else:
                for path, size, digest in missing:
                    url = sample.url(path)
                    _download(url, target / path, size, digest, timeout, advance, name)
    try:
        _write_note(sample, target)
        (target / DONE).write_text("every file present and checked (SHA-256)\n")
    except OSError as err:
        raise FetchError(f"cannot write into {target}: {err.strerror or err}") from err
    return target


def _sample(name: str) -> Sample:
    if name not in SAMPLES:
        known = ", ".join(sorted(SAMPLES))
        raise FetchError(f"no sample called {name!r}; gsnb fetch knows: {known}")
    return SAMPLES[name]


def _source_from_env(name: str) -> Path | None:
    root = os.environ.get("GSNB_FETCH_FROM")
    if not root:
        return None
    path = Path(root).expanduser()
    return path / name if (path / name).exists() else path


def _sizes_match(sample: Sample, folder: Path) -> bool:
    """Every file there with its size (a cheap check of a sample marked whole)."""
    return all(_size(folder / path) == size for path, size, _ in sample.files)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _checked(path: Path, size: int, digest: str) -> bool:
    return _size(path) == size and sha256_of(path) == digest


def sha256_of(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file, read in chunks.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a"; _ = p.write_bytes(b"abc")
        >>> sha256_of(p)[:16]
        'ba7816bf8f01cfea'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(
    url: str,
    path: Path,
    size: int,
    digest: str,
    timeout: float,
    advance: Callable[[int], None],
    name: str,
) -> None:
    """``url`` into ``path``: appended to ``path.part`` (resumed), checked, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    have = _size(part) if _size(part) <= size else -1
    if have < 0:
        part.unlink(missing_ok=True)
        have = 0
    advance(have)
    if have < size:
        request = urllib.request.Request(url, headers={"User-Agent": "gsnb-fetch"})
        if have:
            request.add_header("Range", f"bytes={have}-")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                if have and answer.status != 206:  # the server sends the whole file again
                    advance(-have)
                    have = 0
                with open(part, "ab" if have else "wb") as handle:
                    for block in iter(lambda: answer.read(CHUNK), b""):
                        _write(handle, block, part)
                        advance(len(block))
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", None) or err
            raise FetchError(
                f"could not download {url}: {reason}. Run the same command again to resume "
                "(finished files are kept); without a network, give a copy of the sample: "
                f"gsnb fetch {name} --from FOLDER_OR_ARCHIVE"
            ) from err
    _accept(part, path, size, digest, url)


def _write(handle: BinaryIO, block: bytes, part: Path) -> None:
    """Append ``block``; a local failure (a full disk) is said as such, not as a network one."""
    try:
        handle.write(block)
    except OSError as err:
        raise FetchError(
            f"cannot write {part}: {err.strerror or err}; free space (or give --dir) and run "
            "the command again to resume"
        ) from err


def _accept(candidate: Path, path: Path, size: int, digest: str, origin: str) -> None:
    """Rename ``candidate`` to ``path`` if its size and SHA-256 are the expected ones."""
    got = _size(candidate)
    if got != size or sha256_of(candidate) != digest:
        candidate.unlink(missing_ok=True)
        what = f"{got} bytes, expected {size}" if got != size else "its SHA-256 differs"
        raise FetchError(
            f"{path.name} from {origin} is not the expected file ({what}); it was removed. "
            "Run the command again; if it repeats, the source changed or the copy is damaged"
        )
    os.replace(candidate, path)


def _copy_from(
    sample: Sample,
    source: Path,
    target: Path,
    files: list[tuple[str, int, str]],
    advance: Callable[[int], None],
) -> None:
    """The sample's ``files`` from a folder or archive the user has, each checked."""
    with _unpacked(source) as root:
        base = _sample_root(root, files[0][0])
        for path, size, digest in files:
            found = base / path
            if not found.is_file():
                raise FetchError(
                    f"{source} does not hold {path} of sample {sample.name!r}; give the "
                    "folder (or archive) that holds transforms.json and images/"
                )
            part = target / (path + ".part")
            try:
                part.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(found, part)
            except OSError as err:
                raise FetchError(f"cannot copy {found} to {part}: {err.strerror or err}") from err
            _accept(part, target / path, size, digest, str(found))
            advance(size)


def _sample_root(root: Path, first: str) -> Path:
    """The folder under ``root`` (an archive may add one level) that holds ``first``."""
    if (root / first).exists():
        return root
    inner = [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    for folder in inner:
        if (folder / first).exists():
            return folder
    return root


def _existing(source: Path) -> Path:
    """``source``, a copy of a sample the user gave, if it exists."""
    if not source.exists():
        raise FetchError(f"{source} does not exist; give a folder or a .zip/.tar archive")
    return source


class _unpacked:
    """A folder as it is, or an archive unpacked into a temporary folder (removed after)."""

    def __init__(self, source: Path) -> None:
        self.source = _existing(source)
        self.tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Path:
        if self.source.is_dir():
            return self.source
        self.tmp = tempfile.TemporaryDirectory(prefix="gsnb-fetch-")
        out = Path(self.tmp.name)
        try:
            if zipfile.is_zipfile(self.source):
                with zipfile.ZipFile(self.source) as archive:
                    _safe_members([m.filename for m in archive.infolist()], out)
                    archive.extractall(out)
            elif tarfile.is_tarfile(self.source):
                with tarfile.open(self.source) as archive:
                    _safe_members(archive.getnames(), out)
                    # The "data" filter (no links out, no devices) where Python has it.
                    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                    archive.extractall(out, **safe)
            else:
                raise FetchError(f"{self.source} is neither a folder nor a .zip or .tar archive")
        except (OSError, zipfile.BadZipFile, tarfile.TarError) as err:
            self.tmp.cleanup()
            raise FetchError(f"could not unpack {self.source}: {err}") from err
        except BaseException:  # a refused archive: the folder goes too
            self.tmp.cleanup()
            raise
        return out

    def __exit__(self, *exc: object) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()


def _safe_members(names: list[str], out: Path) -> None:
    """Refuse archive members that would land outside ``out`` (absolute or ``..`` paths)."""
    root = out.resolve()
    for name in names:
        if not (root / name).resolve().is_relative_to(root):
            raise FetchError(f"the archive holds {name!r}, a path outside its folder; refused")


def _write_note(sample: Sample, target: Path) -> None:
    text = (
        f"# {sample.name}\n\n{sample.description}.\n\n- Source: {sample.base_url}\n"
        f"- License: {sample.license}.\n- Fetched by `gsnb fetch {sample.name}`; every file "
        "was checked against its SHA-256.\n"
    )
    (target / "SOURCE.md").write_text(text)


class _progress:
    """A tqdm bar over bytes (or nothing); yields ``advance(n)``."""

    def __init__(self, total: int, show: bool, name: str) -> None:
        self.total, self.show, self.name = total, show, name
        self.bar = None

    def __enter__(self) -> Callable[[int], None]:
        if self.show:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=self.total, unit="B", unit_scale=True, unit_divisor=1024, desc=self.name
            )
            return self.bar.update
        return lambda n: None

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
