"""Keeping Python's cyclic garbage collector off the hot paths.

Loading and validating a plan build large trees of objects and free almost nothing; the
collector would rescan the growing tree again and again (over half the load time of a
10,000-step recipe). Reference counting still frees acyclic garbage while it is paused.

While a run lasts, what existed before it (imported modules, the plan, compiled templates)
is frozen out of the collector, which then scans only what the run creates. `gc.freeze()`
is process-wide: `heap_frozen` is the one place that freezes and unfreezes, so an inner
freeze (a run inside the CLI) cannot undo an outer one.

A process that ends with the block (the `planloom` command) leaves the heap frozen: the
interpreter's collections at exit then skip every module, class and model it imported
(unfrozen, they cost `planloom validate` 70 to 90 ms, a fifth of its time).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused", "freeze_survivors", "heap_frozen"]

_frozen_depth = 0


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block (nesting-safe; restores the prior state).

    Inside a `heap_frozen` block, what the block made and kept is frozen at its end
    rather than scanned by the next collection: a plan loaded, validated and compiled
    lives until the frozen block ends anyway (one scan of a 100,000-step plan is about
    half a second).
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _frozen_depth > 0:
            gc.freeze()
        if collecting:
            gc.enable()


@contextmanager
def heap_frozen(*, until_exit: bool = False) -> Iterator[None]:
    """Freeze every object that exists now out of the cyclic collector for the block.

    Nested blocks freeze again (what was created since is frozen too); only the outermost
    one unfreezes, at its end, so nothing is kept alive past it.

    Args:
        until_exit: the process ends when this block does. The outermost block then leaves
            what it froze frozen, so the interpreter's collections at exit do not rescan
            it; what was created since (and not frozen by a nested block) is still
            collected, and its finalizers run, as usual. Only for a process's last block:
            cyclic garbage among frozen objects is never freed.
    """
    global _frozen_depth
    gc.freeze()
    _frozen_depth += 1
    try:
        yield
    finally:
        _frozen_depth -= 1
        if _frozen_depth == 0 and not until_exit:
            gc.unfreeze()


def freeze_survivors() -> None:
    """Inside a `heap_frozen` block: collect the young generations, then freeze what is
    left, so the collector's full passes never rescan it.

    A long run keeps a result per step; unfrozen, each full collection rescans all of them
    (a fifth of the run's time at 100,000 steps). Cyclic garbage among young objects is
    freed first; what is frozen is freed by reference counting as usual, or with the
    rest when the outermost block ends. Outside such a block it does nothing.
    """
    if _frozen_depth > 0:
        gc.collect(1)
        gc.freeze()
