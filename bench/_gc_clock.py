"""Time spent in Python's cyclic garbage collector, for the benches (it imports nothing of
planloom, so the LangGraph side of bench/peer.py can use it too)."""

from __future__ import annotations

import gc
import time
from typing import Any


class GcClock:
    """Seconds the cyclic garbage collector ran, through `gc.callbacks`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)
