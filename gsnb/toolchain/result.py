"""What a build returns (:class:`BuildResult`) or raises (:class:`BuildError`)."""

from __future__ import annotations

import html
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gsnb.toolchain.catalogue import Diagnosis
from gsnb.toolchain.smoke import SmokeResult

LOG_TAIL_LINES = 400


@dataclass
class BuildResult:
    """A loaded rasterizer module and how it was obtained.

    Attributes:
        module: the imported extension module (None from ``gsnb build``'s warm check,
            which finds a cached build without loading it).
        name: its module name (``gsnb_csrc_<12 hex>``).
        key: the full cache key (SHA-256 hex).
        archs: architectures it holds code for (``["9.0"]``).
        folder: its build folder in the cache.
        log: the compiler log (``folder / "build.log"``).
        cached: True when a complete cached build was reused.
        seconds: wall time of the whole call.
        smoke: the smoke test's result (None when not run).
        notes: things gsnb noticed and fixed by itself (stale lock, half-built cache, ...).
        timings: seconds per phase (``plan``, ``load``, ``discover``, ``compile``, ``smoke``).
        manifest: the build's manifest as read or written (flags, toolchain, smoke records).

    Example:
        >>> r = BuildResult(types.ModuleType("m"), "m", "ab" * 32, ["9.0"], Path("/c/m"),
        ...                 Path("/c/m/build.log"), True, 0.05)
        >>> r.summary()
        'gsnb rasterizer ready: m for sm_90, cache hit in 0.05 s (/c/m)'
    """

    module: types.ModuleType | None
    name: str
    key: str
    archs: list[str]
    folder: Path
    log: Path
    cached: bool
    seconds: float
    smoke: SmokeResult | None = None
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of_build(
        cls, build: Any, module: types.ModuleType | None, cached: bool, seconds: float, **more: Any
    ) -> BuildResult:
        """The result for ``build`` (a cache entry: ``name``, ``manifest``, ``archs``,
        ``folder``); ``more`` sets ``smoke``, ``notes`` or ``timings``."""
        return cls(
            module=module, name=build.name, key=str(build.manifest["key"]), archs=build.archs,
            folder=build.folder, log=build.folder / "build.log", cached=cached, seconds=seconds,
            manifest=dict(build.manifest), **more,
        )  # fmt: skip

    def summary(self) -> str:
        """One line: module, architectures, cache hit or build time, folder."""
        archs = ", ".join("sm_" + a.replace(".", "") for a in self.archs)
        how = "cache hit" if self.cached else "built"
        took = f"{how} in {self.seconds:.2f} s"
        return f"gsnb rasterizer ready: {self.name} for {archs}, {took} ({self.folder})"

    def lines(self) -> list[str]:
        """The summary, the smoke test and the notes."""
        out = [self.summary()]
        if self.smoke is not None:
            out.append(self.smoke.message)
        out += [f"note: {n}" for n in self.notes]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:
        printer.text(str(self))  # type: ignore[attr-defined]

    def _repr_html_(self) -> str:
        body = "<br>".join(html.escape(line) for line in self.lines())
        return f'<div style="border-left:4px solid #2e7d32;padding-left:8px">{body}</div>'


class BuildError(RuntimeError):
    """A build that could not finish, with its causes and fixes.

    Attributes:
        diagnoses: the recognised causes, most specific first (may be empty).
        log: the full compiler log, when compiling had started.
        headline: what failed, in a few words.

    Example:
        >>> from gsnb.toolchain.catalogue import diagnose
        >>> err = BuildError("build failed", [diagnose("ninja-missing")])
        >>> str(err).splitlines()[0]
        'build failed: the ninja build tool was not found'
    """

    def __init__(self, headline: str, diagnoses: list[Diagnosis], log: Path | None = None) -> None:
        self.headline = headline
        self.diagnoses = list(diagnoses)
        self.log = log
        super().__init__(self._message())

    def _message(self) -> str:
        if not self.diagnoses:
            lines = [self.headline]
        else:
            first = self.diagnoses[0]
            lines = [f"{self.headline}: {first.cause}", f"fix: {first.fix}"]
            lines += [f"also: {d}" for d in self.diagnoses[1:]]
        if self.log is not None:
            lines.append(f"full log: {self.log}")
        return "\n".join(lines)

    def log_text(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the compiler log ('' without one)."""
        if self.log is None:
            return ""
        try:
            with open(self.log, encoding="utf-8", errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return ""

    def _render_traceback_(self) -> list[str]:
        # IPython shows these lines instead of a traceback.
        return [
            f"BuildError: {line}" if i == 0 else line
            for i, line in enumerate(str(self).splitlines())
        ]

    def _repr_html_(self) -> str:
        parts = [f"<b>{html.escape(self.headline)}</b>"]
        for d in self.diagnoses:
            parts.append(f"{html.escape(d.cause)}.<br><b>Fix:</b> {html.escape(d.fix)}")
        log = self.log_text()
        if log:
            parts.append(
                f"<details><summary>compiler log ({html.escape(str(self.log))})</summary>"
                f'<pre style="max-height:30em;overflow:auto">{html.escape(log)}</pre></details>'
            )
        body = "<br>".join(parts)
        return f'<div style="border-left:4px solid #c62828;padding-left:8px">{body}</div>'
