"""Keeping Python's cyclic garbage collector off the hot paths.

Loading and validating a plan build large trees of objects and free almost nothing; the
collector would rescan the growing tree again and again (over half the load time of a
10,000-step recipe). Reference counting still frees acyclic garbage while it is paused.

While a run lasts, what existed before it (imported modules, the plan, compiled templates)
is frozen out of the collector, which then scans only what the run creates. `gc.freeze()`
is process-wide: `heap_frozen` is the one place that freezes and unfreezes, so an inner
freeze (a run inside the CLI) cannot undo an outer one.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused", "heap_frozen"]

_frozen_depth = 0


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


@contextmanager
def heap_frozen() -> Iterator[None]:
    """Freeze every object that exists now out of the cyclic collector for the block.

    Nested blocks freeze again (what was created since is frozen too); only the outermost
    one unfreezes, at its end, so nothing is kept alive past it.
    """
    global _frozen_depth
    gc.freeze()
    _frozen_depth += 1
    try:
        yield
    finally:
        _frozen_depth -= 1
        if _frozen_depth == 0:
            gc.unfreeze()
