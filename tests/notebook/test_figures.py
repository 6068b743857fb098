"""Tests for gsnb/notebook/figures.py: decimation and the FigureWidget's traces."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from gsnb.notebook.figures import DecimatedSeries, TrainingCurves
from gsnb.train import EvalResult, StepMetrics


@pytest.mark.parametrize("n", [1, 10, 999, 1000, 1001, 30_000])
def test_decimated_series_bounds_points_and_keeps_the_ends(n):
    series = DecimatedSeries(max_points=1000)
    series.extend((i, float(i)) for i in range(n))
    x, y = (a.tolist() for a in series.view())
    assert len(x) <= 1001 and x[0] == 0 and x[-1] == n - 1 and x == y
    assert x == sorted(set(x))
    if n <= 1000:
        assert len(x) == n
    else:
        gaps = {b - a for a, b in itertools.pairwise(x[:-1])}
        assert gaps == {math.ceil(n / 1000)}


def test_non_finite_values_become_gaps():
    series = DecimatedSeries()
    series.extend([(1, 0.5), (2, float("nan")), (3, float("inf")), (4, 0.25)])
    x, y = series.view()
    assert x.tolist() == [1, 2, 3, 4] and y[[0, 3]].tolist() == [0.5, 0.25]
    assert np.isnan(y[1:3]).all()
    with pytest.raises(ValueError, match="max_points"):
        DecimatedSeries(1)


def test_curves_redraw_only_what_changed():
    curves = TrainingCurves(max_points=50)
    assert curves.redraw() is False
    steps = [
        StepMetrics(step=i, loss=1.0 / i, psnr=10.0 + i, num_gaussians=100 + i)
        for i in range(1, 201)
    ]
    curves.add(steps)
    assert curves.redraw() is True
    loss, train, test, count = curves.widget.data
    assert len(loss.x) <= 51 and loss.x[-1] == 200 and loss.y[-1] == pytest.approx(1 / 200)
    assert train.y[-1] == 210.0 and count.y[-1] == 300.0
    assert test.x is None or len(test.x) == 0
    assert curves.redraw() is False
    curves.add(evals=[EvalResult(100, 21.5, 0.9), EvalResult(200, 23.0, 0.9)])
    curves.redraw()
    assert list(curves.widget.data[2].x) == [100, 200] and list(curves.widget.data[2].y) == [
        21.5,
        23.0,
    ]
    assert [t.name for t in curves.widget.data] == ["loss", "train PSNR", "test PSNR", "Gaussians"]
