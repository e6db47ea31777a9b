"""Keeping Python's cyclic garbage collector off the hot paths.

Loading and validating a plan build large trees of objects and free almost nothing; the
collector would rescan the growing tree again and again (over half the load time of a
10,000-step recipe). Reference counting still frees acyclic garbage while it is paused.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block (nesting-safe; restores the prior state)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
