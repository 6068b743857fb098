"""The doctor's table: what was found, with a verdict per line (text, HTML or JSON)."""

from __future__ import annotations

import html
from dataclasses import dataclass

from gsnb.toolchain.environment import Environment
from gsnb.toolchain.rules import Check

_MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "info": "info"}
_COLOUR = {"ok": "#2e7d32", "warn": "#ef6c00", "fail": "#c62828", "info": "#546e7a"}


def verdict(checks: list[Check]) -> str:
    """One line: ready, or how many problems stop the build.

    Example:
        >>> verdict([Check("ninja", "1.11", "ok")])
        'ready to build'
    """
    failures = [c for c in checks if c.status == "fail"]
    if not failures:
        warnings = sum(c.status == "warn" for c in checks)
        return "ready to build" + (
            f" ({warnings} warning{'s' * (warnings != 1)})" if warnings else ""
        )
    names = ", ".join(c.name for c in failures)
    return f"cannot build: {len(failures)} problem{'s' * (len(failures) != 1)} ({names})"


CPU_ONLY = (
    "no GPU here: gsnb works on the CPU with its PyTorch reference renderer (rendering, "
    "training, export and the notebooks, only slower); the CUDA rasterizer needs an NVIDIA "
    "GPU (or --arch to compile one without it)"
)

# ``gsnb doctor``'s exit codes, for scripts.
EXIT_READY, EXIT_PROBLEM, EXIT_USAGE, EXIT_CPU_ONLY = 0, 1, 2, 3


def text_table(checks: list[Check], summary: str | None = None) -> str:
    """A plain-text table, a cause-and-fix line under each warning or failure.

    The last line is ``summary`` when given, else the build verdict.

    Example:
        >>> print(text_table([Check("ninja", "1.11.1 (/usr/bin/ninja)", "ok")]))
        ok    ninja  1.11.1 (/usr/bin/ninja)
        ready to build
    """
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for c in checks:
        note = f"  ({c.note})" if c.note else ""
        lines.append(f"{_MARK[c.status]:<5} {c.name:<{width}}  {c.value}{note}")
        if c.diagnosis is not None and c.status in ("warn", "fail"):
            lines.append(f"{'':<5} {'':<{width}}  -> {c.diagnosis}")
    lines.append(summary or verdict(checks))
    return "\n".join(lines)


def html_table(checks: list[Check], summary: str | None = None) -> str:
    """An HTML table for notebooks, the cause and fix in each problem's row."""
    rows = []
    for c in checks:
        detail = html.escape(c.note)
        if c.diagnosis is not None and c.status in ("warn", "fail"):
            cause, fix = html.escape(c.diagnosis.cause), html.escape(c.diagnosis.fix)
            detail += f"<br>{cause}.<br><b>Fix:</b> {fix}"
        rows.append(
            f'<tr><td style="color:{_COLOUR[c.status]};font-weight:bold">{_MARK[c.status]}</td>'
            f"<td>{html.escape(c.name)}</td><td><code>{html.escape(c.value)}</code></td>"
            f'<td style="text-align:left">{detail}</td></tr>'
        )
    head = "<tr><th></th><th>item</th><th>found</th><th>verdict</th></tr>"
    last = html.escape(summary or verdict(checks))
    return f"<table>{head}{''.join(rows)}</table><p><b>{last}</b></p>"


@dataclass
class DoctorReport:
    """The doctor's findings; shows as HTML in notebooks and as text elsewhere.

    Example:
        >>> from gsnb.toolchain.environment import discover
        >>> report = DoctorReport(discover(arch="9.0"))
        >>> "CUDA toolkit" in str(report)
        True
    """

    environment: Environment

    @property
    def checks(self) -> list[Check]:
        """The table's lines."""
        return self.environment.checks()

    @property
    def ready(self) -> bool:
        """True when nothing stops a build."""
        return not self.environment.failures()

    @property
    def summary(self) -> str:
        """The last line: ready to build, the problems, or what works without a GPU."""
        return CPU_ONLY if self.environment.cpu_only else verdict(self.checks)

    @property
    def exit_code(self) -> int:
        """0 ready to build, 1 a problem stops the build, 3 no GPU (gsnb runs on the CPU)."""
        if self.ready:
            return EXIT_READY
        return EXIT_CPU_ONLY if self.environment.cpu_only else EXIT_PROBLEM

    def __str__(self) -> str:
        return text_table(self.checks, self.summary)

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:
        printer.text(str(self))  # type: ignore[attr-defined]

    def _repr_html_(self) -> str:
        return html_table(self.checks, self.summary)
