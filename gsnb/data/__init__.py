"""Posed photos in: COLMAP models and transforms.json datasets, a ray-traced demo scene,
sample captures fetched into the user's cache (:func:`fetch`), and a canonical world frame
(:func:`normalize_world`).

Example:
    >>> import tempfile
    >>> from gsnb.data import load_dataset, make_synthetic_scene
    >>> ds = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=4, size=16))
    >>> len(ds.train), tuple(ds.train[0].load_image().shape)
    (3, (16, 16, 3))
"""

from __future__ import annotations

from gsnb.data.dataset import SceneDataset, View, load_dataset
from gsnb.data.download import FetchError, fetch
from gsnb.data.normalize import normalize_world, transform_dataset
from gsnb.data.synthetic import make_synthetic_scene

__all__ = [
    "FetchError",
    "SceneDataset",
    "View",
    "fetch",
    "load_dataset",
    "make_synthetic_scene",
    "normalize_world",
    "transform_dataset",
]
