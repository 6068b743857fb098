"""CPU settings for the PyTorch reference renderer, made before torch loads OpenMP.

Idle OpenMP threads spin by default (``OMP_WAIT_POLICY=ACTIVE`` in effect), and on a
machine with few cores they starve the thread doing the work: on one busy 2-core machine
``gsnb demo`` took 11 minutes without ``OMP_WAIT_POLICY=PASSIVE`` and 25-37 s with it.
OpenMP reads the variable once, when torch is imported, so :func:`prefer_passive_wait`
must run before that: importing this module calls it, and ``import gsnb`` imports this
module before anything that loads torch.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "OMP_WAIT_POLICY"

_set_by_gsnb = False


def prefer_passive_wait() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless it is set or torch is already imported.

    Returns True when gsnb set it now.

    Example:
        >>> prefer_passive_wait() in (True, False)
        True
    """
    global _set_by_gsnb
    if VARIABLE in os.environ or "torch" in sys.modules:
        return False
    os.environ[VARIABLE] = "PASSIVE"
    _set_by_gsnb = True
    return True


def wait_policy_note() -> str:
    """What is in effect, in words, with what to do when it is not ``PASSIVE``.

    Example:
        >>> "OMP_WAIT_POLICY" in wait_policy_note()
        True
    """
    value = os.environ.get(VARIABLE)
    if value is not None and value.upper() == "PASSIVE":
        return f"{VARIABLE}=PASSIVE" + (", set by gsnb" if _set_by_gsnb else "")
    now = f"{VARIABLE}={value}" if value is not None else f"{VARIABLE} unset"
    return (
        f"{now}: idle threads spin and can slow training several times on a busy machine; "
        f"export {VARIABLE}=PASSIVE before Python starts, or import gsnb before torch"
    )


prefer_passive_wait()
