"""The machine the build runs on: operating system, environment variables, fixed places.

Discovery reads the machine only through a :class:`Host`, so the same code can be
pointed at a simulated machine (another operating system, a fake toolkit tree in a
temporary folder) to test what it finds there.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gsnb.toolchain.probes import ProbeMemo


def _default_site_packages() -> tuple[Path, ...]:
    places = [sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")]
    places += [p for p in sys.path if p.endswith("site-packages")]
    seen: dict[str, None] = {}
    for place in places:
        if place:
            seen.setdefault(str(Path(place)), None)
    return tuple(Path(p) for p in seen)


@dataclass(frozen=True)
class Host:
    """What discovery may read: OS name, environment variables and fixed folders.

    Attributes:
        system: ``"Linux"``, ``"Windows"`` or ``"Darwin"`` (``platform.system()``).
        env: environment variables (a snapshot; discovery never changes them).
        usr_local: where Linux toolkits live (``/usr/local``).
        proc: the Linux ``/proc`` folder (driver version, WSL detection, memory).
        dev_shm: the shared-memory folder (``/dev/shm``).
        site_packages: folders searched for pip-installed CUDA wheels.
        scripts_dir: this Python's scripts folder, where ``pip install ninja`` puts
            ``ninja`` (not on ``PATH`` when a kernel runs a venv's Python directly).
        persistent_env: on Windows, the user and system variables stored in the
            registry (what a newly started shell would see); None elsewhere.
        probes: where :meth:`probe` remembers tools' answers (None: always run them).

    Example:
        >>> host = Host.current()
        >>> host.system in ("Linux", "Windows", "Darwin")
        True
    """

    system: str
    env: Mapping[str, str]
    usr_local: Path = Path("/usr/local")
    proc: Path = Path("/proc")
    dev_shm: Path = Path("/dev/shm")
    site_packages: tuple[Path, ...] = field(default_factory=_default_site_packages)
    scripts_dir: Path | None = field(default_factory=lambda: Path(sysconfig.get_path("scripts")))
    persistent_env: Mapping[str, str] | None = None
    probes: ProbeMemo | None = field(default=None, compare=False, repr=False)

    @classmethod
    def current(cls) -> Host:
        """The machine this process runs on."""
        system = platform.system()
        stored = _registry_environment() if system == "Windows" else None
        return cls(system=system, env=dict(os.environ), persistent_env=stored)

    @property
    def windows(self) -> bool:
        """True on Windows (native, not WSL)."""
        return self.system == "Windows"

    def wsl(self) -> bool:
        """True inside WSL (``/proc/version`` names Microsoft)."""
        text = self.read_text(self.proc / "version", 4096) or ""
        return self.system == "Linux" and "microsoft" in text.lower()

    def program_files(self) -> list[Path]:
        """``%ProgramFiles%`` (and ``%ProgramW6432%``) on Windows."""
        names = ("ProgramFiles", "ProgramW6432", "ProgramFiles(x86)")
        return list(dict.fromkeys(Path(self.env[n]) for n in names if self.env.get(n)))

    def shm_size(self) -> int | None:
        """Total bytes of the shared-memory folder (``/dev/shm``), or None without one."""
        if self.windows or not self.dev_shm.is_dir():
            return None
        try:
            return shutil.disk_usage(self.dev_shm).total
        except OSError:
            return None

    def exe(self, name: str) -> str:
        """``name`` with ``.exe`` on Windows."""
        return f"{name}.exe" if self.windows and not name.endswith(".exe") else name

    def path_dirs(self) -> list[Path]:
        """The folders of ``PATH`` in order."""
        separator = ";" if self.windows else os.pathsep
        return [Path(p) for p in self.env.get("PATH", "").split(separator) if p.strip()]

    def which(self, name: str) -> Path | None:
        """First executable ``name`` on this host's ``PATH`` (``name.exe`` on Windows)."""
        if os.sep in name or (self.windows and "\\" in name):
            return Path(name) if Path(name).is_file() else None
        for folder in self.path_dirs():
            candidate = folder / self.exe(name)
            if candidate.is_file() and (self.windows or os.access(candidate, os.X_OK)):
                return candidate
        return None

    def run(self, command: list[str], timeout: float = 20.0) -> tuple[int, str] | None:
        """Run ``command`` with this host's environment; ``(exit code, stdout+stderr)``.

        None when it cannot start or does not finish within ``timeout`` seconds.
        """
        try:
            done = subprocess.run(
                command,
                env=dict(self.env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.returncode, done.stdout.decode(errors="replace")

    def probe(self, command: list[str]) -> tuple[int, str] | None:
        """:meth:`run` for a tool asked about itself (``[tool, "--version"]``).

        With :attr:`probes` set, the answer is reused while the tool's file is unchanged.
        """
        if self.probes is None:
            return self.run(command)
        return self.probes.answer(command, self.run)

    def read_text(self, path: Path, limit: int = 65536) -> str | None:
        """At most ``limit`` characters of a text file, or None when unreadable."""
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read(limit)
        except OSError:
            return None

    def cpu_count(self) -> int:
        """CPUs this process may use."""
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            return max(1, os.cpu_count() or 1)

    def memory_available(self) -> int | None:
        """Bytes of memory available now (``MemAvailable``), or None where unknown."""
        text = self.read_text(self.proc / "meminfo", 8192) or ""
        for line in text.splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
        return None

    def disk_free(self, path: Path) -> int | None:
        """Free bytes on the disk that holds ``path`` (or its nearest existing parent)."""
        for place in (path, *path.parents):
            if place.exists():
                try:
                    return shutil.disk_usage(place).free
                except OSError:
                    return None
        return None


def _registry_environment() -> dict[str, str] | None:
    """User and system environment variables as stored in the Windows registry."""
    try:
        import winreg
    except ImportError:
        return None
    places = [
        (
            winreg.HKEY_LOCAL_MACHINE,
            r"SYSTEM\CurrentControlSet\Control\Session Manager\Environment",
        ),
        (winreg.HKEY_CURRENT_USER, "Environment"),
    ]
    found: dict[str, str] = {}
    for root, key in places:
        try:
            with winreg.OpenKey(root, key) as handle:
                index = 0
                while True:
                    try:
                        name, value, _ = winreg.EnumValue(handle, index)
                    except OSError:
                        break
                    found[name.upper()] = str(value)
                    index += 1
        except OSError:
            continue
    return found
