"""Checks a run makes on its data before the first step."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gsnb.data.dataset import View

SHOWN = 5
"""Unreadable images named in the message; the rest are counted."""


def check_images_readable(views: Sequence[View], split: str, progress: bool = False) -> None:
    """Decode every image of ``views`` (in threads) and raise ``ValueError`` naming those that
    cannot be read, so that a damaged image stops a run before its first step, not at its end.

    Example:
        >>> import tempfile
        >>> from gsnb.data.dataset import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> data = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=4, size=16))
        >>> check_images_readable(data.test, "test")
        >>> _ = data.test[0].image_path.write_bytes(b"not a png")
        >>> check_images_readable(data.test, "test")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: 1 of 1 test images cannot be read: ...
    """
    if not views:
        return

    def problem(view: View) -> str | None:
        try:
            view.load_image()
        except (OSError, ValueError, RuntimeError) as err:
            first = (str(err).splitlines() or [type(err).__name__])[0]
            return f"{view.image_path} ({first[:160]})"
        return None

    workers = max(1, min(8, os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        results = pool.map(problem, views)
        if progress:
            from tqdm.auto import tqdm

            results = tqdm(results, total=len(views), desc=f"checking {split} images", leave=False)
        bad = [p for p in results if p is not None]
    if bad:
        more = f"; and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
        raise ValueError(
            f"{len(bad)} of {len(views)} {split} images cannot be read: "
            + "; ".join(bad[:SHOWN])
            + more
            + ". Replace or delete them (and their entries), then start again"
        )
