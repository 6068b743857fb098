"""Posed photos in: COLMAP models and transforms.json datasets, and a ray-traced demo scene.

Example:
    >>> import tempfile
    >>> from gsnb.data import load_dataset, make_synthetic_scene
    >>> ds = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=4, size=16))
    >>> len(ds.train), tuple(ds.train[0].load_image().shape)
    (3, (16, 16, 3))
"""

from __future__ import annotations

from gsnb.data.dataset import SceneDataset, View, load_dataset
from gsnb.data.synthetic import make_synthetic_scene

__all__ = ["SceneDataset", "View", "load_dataset", "make_synthetic_scene"]
