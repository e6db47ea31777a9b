"""`bench.burn` and `bench.noop` for `bench/dask.py` (`--plugin dask_bench_plugin`):
imported by planloom and by the Dask workers alike."""

from __future__ import annotations

import os
import time
from typing import Any


def register(registry: Any) -> None:
    @registry.function("bench.burn", side_effects=False)
    def burn(seconds: float) -> dict[str, Any]:
        """Pure-Python CPU work for `seconds` of this thread's CPU time (it holds the GIL)."""
        end = time.thread_time() + seconds
        spins = 0
        while time.thread_time() < end:
            spins += sum(i * i for i in range(200))
        return {"pid": os.getpid(), "spins": spins > 0}

    @registry.function("bench.noop", side_effects=False, blocking=False)
    def noop(value: int) -> int:
        """Nothing: the cost of a call is all dispatch."""
        return value


def bare_noop(value: int) -> int:
    """A Dask task that does nothing: the floor of dispatch, without planloom."""
    return value
