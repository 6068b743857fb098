"""Live training curves as a plotly ``FigureWidget``: loss, train and test PSNR, Gaussian count."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from gsnb.train import EvalResult, StepMetrics

# Points drawn per curve; longer runs are decimated (the latest point is always drawn).
MAX_POINTS = 1500


class DecimatedSeries:
    """An ``(x, y)`` series that keeps every point but draws at most ``max_points`` of them.

    Example:
        >>> s = DecimatedSeries(max_points=3)
        >>> s.extend([(i, i * i) for i in range(10)])
        >>> [a.tolist() for a in s.view()]
        [[0.0, 4.0, 8.0, 9.0], [0.0, 16.0, 64.0, 81.0]]
    """

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        if max_points < 2:
            raise ValueError(f"max_points must be >= 2, got {max_points}")
        self.max_points = max_points
        self.x: list[float] = []
        self.y: list[float] = []

    def extend(self, points: Iterable[tuple[float, float]]) -> None:
        """Append ``(x, y)`` pairs; non-finite ``y`` values are kept as gaps (NaN)."""
        for x, y in points:
            self.x.append(x)
            self.y.append(y if y is not None and math.isfinite(y) else math.nan)

    def __len__(self) -> int:
        return len(self.x)

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        """The points to draw (float arrays: plotly takes them without a per-point check):
        every ``ceil(n / max_points)``-th one, plus the last."""
        n = len(self.x)
        if n <= self.max_points:
            idx = range(n)
        else:
            stride = math.ceil(n / self.max_points)
            idx = list(range(0, n, stride))
            if idx[-1] != n - 1:
                idx.append(n - 1)
        x = np.fromiter((self.x[i] for i in idx), dtype=np.float64, count=len(idx))
        y = np.fromiter((self.y[i] for i in idx), dtype=np.float64, count=len(idx))
        return x, y


class TrainingCurves:
    """A plotly ``FigureWidget`` with three panes: loss, PSNR (train and test), Gaussians.

    :meth:`add` appends metrics (cheap; call it as often as you like) and
    :meth:`redraw` sends the decimated curves to the front end in one batch.

    Example:
        >>> from gsnb.train import StepMetrics
        >>> curves = TrainingCurves()
        >>> curves.add([StepMetrics(step=1, loss=0.5, psnr=20.0, num_gaussians=100)])
        >>> curves.redraw()
        True
        >>> curves.widget.data[0].y.tolist()
        [0.5]
    """

    def __init__(self, max_points: int = MAX_POINTS, height: int = 280) -> None:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        self.loss = DecimatedSeries(max_points)
        self.train_psnr = DecimatedSeries(max_points)
        self.test_psnr = DecimatedSeries(max_points)
        self.gaussians = DecimatedSeries(max_points)
        fig = make_subplots(
            rows=1,
            cols=3,
            subplot_titles=("loss", "PSNR (dB)", "Gaussians"),
            horizontal_spacing=0.08,
        )
        fig.add_trace(go.Scatter(name="loss", mode="lines"), row=1, col=1)
        fig.add_trace(go.Scatter(name="train PSNR", mode="lines"), row=1, col=2)
        fig.add_trace(go.Scatter(name="test PSNR", mode="lines+markers"), row=1, col=2)
        fig.add_trace(go.Scatter(name="Gaussians", mode="lines"), row=1, col=3)
        fig.update_yaxes(type="log", row=1, col=1)
        fig.update_xaxes(title_text="step")
        fig.update_layout(
            height=height,
            margin={"l": 40, "r": 10, "t": 30, "b": 40},
            legend={"orientation": "h", "y": -0.25},
            uirevision="gsnb",  # keep the user's zoom across updates
        )
        self.widget: Any = go.FigureWidget(fig)
        self._series = (self.loss, self.train_psnr, self.test_psnr, self.gaussians)
        self._drawn = [0, 0, 0, 0]

    def add(self, steps: Iterable[StepMetrics] = (), evals: Iterable[EvalResult] = ()) -> None:
        """Append step metrics and evaluation results (no drawing)."""
        steps = list(steps)
        self.loss.extend((m.step, m.loss) for m in steps)
        self.train_psnr.extend((m.step, m.psnr) for m in steps)
        self.gaussians.extend((m.step, float(m.num_gaussians)) for m in steps)
        self.test_psnr.extend((e.step, e.psnr) for e in evals)

    def redraw(self) -> bool:
        """Send the curves that changed since the last call; returns whether anything was sent."""
        changed = [i for i, s in enumerate(self._series) if len(s) != self._drawn[i]]
        if not changed:
            return False
        with self.widget.batch_update():
            for i in changed:
                x, y = self._series[i].view()
                self.widget.data[i].x = x
                self.widget.data[i].y = y
                self._drawn[i] = len(self._series[i])
        return True
