"""Remember what build tools say about themselves, keyed by the tool file's identity.

``nvcc --version`` or ``gcc --version`` prints the same text for as long as the
executable file is the same file. :class:`ProbeMemo` stores each answer beside the
build cache (``.gsnb-probes.json``) with the executable's resolved path, size,
modification and change times and inode; a later process reuses the answer only
while all of those still match, so an upgraded, replaced or relinked tool is run
again. Only native executables are remembered: a shell script or a compiler
launcher (``ccache``) may print something else tomorrow with no change to its file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gsnb.utils.atomic import atomic_write

PROBES_FILE = ".gsnb-probes.json"
FILE_LIMIT = 1 << 20
OUTPUT_LIMIT = 1 << 16
MAX_ENTRIES = 64
FORMAT = 1
LAUNCHERS = frozenset({"ccache", "sccache", "distcc", "icecc", "buildcache"})
_NATIVE_MAGIC = (b"\x7fELF", b"MZ", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")

Answer = tuple[int, str]
Runner = Callable[[list[str]], "Answer | None"]


def file_identity(executable: str | os.PathLike[str]) -> list[Any] | None:
    """``[resolved path, size, mtime_ns, ctime_ns, inode]`` of a native executable, else None.

    None for scripts, compiler launchers and files that cannot be read: their
    answers are never remembered.

    Example:
        >>> import sys
        >>> file_identity(sys.executable)[0] == os.path.realpath(sys.executable)
        True
        >>> file_identity(__file__) is None  # a text file
        True
    """
    try:
        real = os.path.realpath(executable)
        with open(real, "rb") as handle:
            magic = handle.read(4)
            stat = os.fstat(handle.fileno())
    except OSError:
        return None
    name = Path(real).stem.lower()
    if not magic.startswith(_NATIVE_MAGIC) or name in LAUNCHERS:
        return None
    return [real, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


_NAMED_PATH = re.compile(r"(?<![\w$./-])/[\w.+@%:/-]+")
SCRIPT_LIMIT = 1 << 16
MAX_NAMED = 16


def script_identity(executable: str | os.PathLike[str]) -> list[Any] | None:
    r"""The identity of a ``#!`` wrapper script: its file's and those of the existing files its
    text names by absolute path (``exec /usr/local/cuda-13.0/bin/nvcc "$@"``); None for
    anything else.

    Example:
        >>> import tempfile, pathlib, sys
        >>> script = pathlib.Path(tempfile.mkdtemp()) / "nvcc"
        >>> _ = script.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        >>> named = [part[0] for part in script_identity(script)[1]]
        >>> named[-1] == os.path.realpath(sys.executable)
        True
    """
    try:
        real = os.path.realpath(executable)
        with open(real, "rb") as handle:
            text = handle.read(SCRIPT_LIMIT)
            stat = os.fstat(handle.fileno())
    except OSError:
        return None
    if not text.startswith(b"#!"):
        return None
    named = []
    for path in list(dict.fromkeys(_NAMED_PATH.findall(text.decode(errors="replace"))))[:MAX_NAMED]:
        try:
            found = os.stat(path)
        except OSError:
            continue
        if not os.path.isdir(path):
            named.append(
                [
                    os.path.realpath(path),
                    found.st_size,
                    found.st_mtime_ns,
                    found.st_ctime_ns,
                    found.st_ino,
                ]
            )
    return [[real, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino], named]


class ProbeMemo:
    """Answers of tool probes (``[tool, "--version"]``), reused while the tool's file is unchanged.

    Args:
        path: the JSON file (None: remember for this process only).
        refresh: run every probe again and store the new answers (used when a
            build is about to start, so that it sees the tools as they are now).
        trust_scripts: answer for a wrapper script from its last run while the script
            and every file it names by absolute path are unchanged (the warm check of
            ``gsnb build``, which starts no process; a build always runs scripts again).

    Example:
        >>> import sys, tempfile, pathlib
        >>> memo = ProbeMemo(pathlib.Path(tempfile.mkdtemp()) / PROBES_FILE)
        >>> calls = []
        >>> run = lambda cmd: calls.append(cmd) or (0, "3.x")
        >>> ask = [sys.executable, "--version"]
        >>> memo.answer(ask, run), memo.answer(ask, run)
        ((0, '3.x'), (0, '3.x'))
        >>> len(calls), memo.save()
        (1, True)
        >>> ProbeMemo(memo.path).answer(ask, run), len(calls)
        ((0, '3.x'), 1)
    """

    def __init__(
        self, path: Path | None, *, refresh: bool = False, trust_scripts: bool = False
    ) -> None:
        self.path = path
        self.refresh = refresh
        self.trust_scripts = trust_scripts
        self.entries: dict[str, dict[str, Any]] = {} if path is None else _read(path)
        self.changed = False

    def answer(self, command: list[str], run: Runner) -> Answer | None:
        """What ``command`` prints: remembered when its executable is unchanged, else ``run`` it."""
        identity = file_identity(command[0]) if command else None
        key = json.dumps(command)
        entry = self.entries.get(key)
        if identity is None:
            script = script_identity(command[0]) if command else None
            trusted = self.trust_scripts and script is not None and entry is not None
            if trusted and entry.get("script") and entry.get("file") == script:
                return int(entry["code"]), str(entry["output"])
            answer = run(command)
            if script is not None and answer is not None:
                self._remember(key, {"file": script, "script": True}, answer)
            return answer
        if not self.refresh and entry is not None and entry.get("file") == identity:
            return int(entry["code"]), str(entry["output"])
        answer = run(command)
        if answer is None:  # could not start or timed out: nothing to remember
            self.entries.pop(key, None)
            return None
        self._remember(key, {"file": identity}, answer)
        return answer

    def _remember(self, key: str, identity: dict[str, Any], answer: Answer) -> None:
        entry = {**identity, "code": answer[0], "output": answer[1][:OUTPUT_LIMIT]}
        if self.entries.get(key) == entry:
            return
        self.entries.pop(key, None)
        self.entries[key] = entry
        while len(self.entries) > MAX_ENTRIES:
            self.entries.pop(next(iter(self.entries)))
        self.changed = True

    def save(self) -> bool:
        """Write new answers atomically; False when there is nothing new or it cannot be written."""
        if self.path is None or not self.changed:
            return False
        try:
            with atomic_write(self.path, "w") as handle:
                json.dump({"format": FORMAT, "entries": self.entries}, handle)
        except OSError:  # a read-only cache only costs the probes next time
            return False
        self.changed = False
        return True


def _read(path: Path) -> dict[str, dict[str, Any]]:
    """The stored entries, or none when the file is absent, oversized or malformed."""
    try:
        if path.stat().st_size > FILE_LIMIT:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {
        key: entry
        for key, entry in entries.items()
        if isinstance(entry, dict)
        and isinstance(entry.get("file"), list)
        and isinstance(entry.get("code"), int)
        and isinstance(entry.get("output"), str)
    }
