"""A COLMAP model seen from above as a plotly figure: sparse points and camera centres.

"Above" is the mean up direction of the cameras (people hold cameras upright),
the usual guess when a reconstruction's world axes are arbitrary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gsnb.data.colmap import read_colmap_model

MAX_POINTS = 20000  # points drawn; more only slow the browser down


def top_view_axes(viewmats: np.ndarray) -> np.ndarray:
    """``[3, 3]`` rows: two horizontal axes, then the up axis, of ``viewmats [N, 4, 4]``.

    Example:
        >>> level = np.tile(np.diag([1.0, -1.0, -1.0, 1.0]), (2, 1, 1))  # cameras looking down -z
        >>> top_view_axes(level)[2].round(6).tolist()  # their up (-y of the camera) is +y
        [0.0, 1.0, 0.0]
    """
    ups = -viewmats[:, 1, :3]  # camera -y (OpenCV) in world coordinates: row 1 of R
    up = ups.mean(axis=0)
    up = up / max(np.linalg.norm(up), 1e-12)
    seed = np.eye(3)[np.argmin(np.abs(up))]
    right = np.cross(up, seed)
    right /= np.linalg.norm(right)
    return np.stack([right, np.cross(up, right), up])


def top_view_figure(model_dir: str | Path, height: int = 420) -> Any:
    """A plotly ``Figure`` of the model in ``model_dir`` (``sparse/0``) seen from above.

    Example:
        >>> fig = top_view_figure("my_scene/sparse/0")  # doctest: +SKIP
        >>> [trace.name for trace in fig.data]  # doctest: +SKIP
        ['points', 'cameras']
    """
    import plotly.graph_objects as go

    model = read_colmap_model(Path(model_dir))
    ids = sorted(model.images, key=lambda i: model.images[i][0])
    viewmats = np.stack([model.viewmat(i) for i in ids])
    centres = -np.einsum("nji,nj->ni", viewmats[:, :3, :3], viewmats[:, :3, 3])
    axes = top_view_axes(viewmats)
    points, colours = model.points, model.points_rgb
    if len(points) > MAX_POINTS:
        keep = np.random.default_rng(0).choice(len(points), MAX_POINTS, replace=False)
        points, colours = points[keep], colours[keep]
    flat_points, flat_centres = points @ axes[:2].T, centres @ axes[:2].T
    fig = go.Figure()
    fig.add_trace(
        go.Scattergl(
            name="points",
            x=flat_points[:, 0],
            y=flat_points[:, 1],
            mode="markers",
            marker={"size": 2, "color": [f"rgb({r},{g},{b})" for r, g, b in colours]},
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            name="cameras",
            x=flat_centres[:, 0],
            y=flat_centres[:, 1],
            mode="markers+lines",
            marker={"size": 6, "color": "crimson"},
            line={"width": 1, "color": "rgba(220,20,60,0.3)"},
            text=[model.images[i][0] for i in ids],
            hoverinfo="text",
        )
    )
    fig.update_yaxes(scaleanchor="x", scaleratio=1)
    fig.update_layout(
        height=height,
        title=f"{len(ids)} cameras and {len(model.points)} points, seen from above",
        margin={"l": 40, "r": 10, "t": 40, "b": 40},
        legend={"orientation": "h", "y": -0.12},
    )
    return fig
