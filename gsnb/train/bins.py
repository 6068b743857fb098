"""Room for each training view's splat-tile intersections, so that a step need not wait for
the GPU to count them.

Binning a render's splats into tiles needs buffers for their intersections, whose count
only the GPU knows: asking for it stops the host until the projection is done, and the GPU
then idles while the host launches the rest of the step. A step that is given room
(:func:`gsnb.train.fused_step.forward_backward`'s ``capacity``) launches everything at
once; should the render have more intersections than that, its loss is NaN and the step's
gate closes (nothing learns from it), and the trainer runs the step again with room for
all of them. :class:`IntersectionBudget` decides the room from what each view's last
render counted, grown with the number of Gaussians since.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

LIMIT = 2**31 - 1
"""The most intersections the kernels index."""


@dataclass
class IntersectionBudget:
    """Per training view, the intersections its last render counted and the room to make
    for the next one.

    Attributes:
        margin: the room over the last count, as a factor (growth between two renders of
            a view: the Gaussians move and grow in between).
        slack: intersections added on top, for views with few of them.
        keep: the share of a view's earlier count that its room keeps when a render counts
            fewer, per render (grown with the Gaussians since): counts fall for a while
            after an opacity reset, whose faint splats reach fewer tiles, and come back
            within a few renders of the view, faster than a margin over the low count.

    Example:
        >>> budget = IntersectionBudget()
        >>> budget.capacity(view=3, gaussians=1000)  # not seen yet: wait for the count
        0
        >>> budget.observe(view=3, count=50_000, gaussians=1000)
        >>> budget.capacity(view=3, gaussians=1000)
        66596
        >>> budget.capacity(view=3, gaussians=2000)  # twice the Gaussians since
        129096
    """

    margin: float = 1.25
    slack: int = 4096
    keep: float = 0.85
    _seen: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False)

    def capacity(self, view: int, gaussians: int) -> int:
        """The intersections to make room for in ``view``'s next render with ``gaussians``
        Gaussians; 0 where the view was not counted yet (the step waits for its count)."""
        seen = self._seen.get(view)
        if seen is None:
            return 0
        return min(math.ceil(_grown(seen, gaussians) * self.margin) + self.slack, LIMIT)

    def observe(self, view: int, count: int, gaussians: int) -> None:
        """Record that ``view``'s render with ``gaussians`` Gaussians had ``count``
        intersections; a count below ``keep`` times the last one (grown with the Gaussians
        since) records that instead.

        Example:
            >>> budget = IntersectionBudget(margin=1.0, slack=0)
            >>> budget.observe(view=0, count=1000, gaussians=10)
            >>> budget.observe(view=0, count=200, gaussians=10)  # an opacity reset's dip
            >>> budget.capacity(view=0, gaussians=10)
            850
        """
        seen = self._seen.get(view)
        if seen is not None:
            count = max(int(count), math.floor(self.keep * _grown(seen, gaussians)))
        self._seen[view] = (int(count), int(gaussians))

    def forget(self, view: int | None = None) -> None:
        """Forget ``view``'s count (every view's with None): its next step waits for it."""
        if view is None:
            self._seen.clear()
        else:
            self._seen.pop(view, None)


def _grown(seen: tuple[int, int], gaussians: int) -> float:
    """A view's last ``(count, Gaussians then)`` scaled to ``gaussians`` (never down)."""
    count, then = seen
    return count * max(1.0, gaussians / max(then, 1))
