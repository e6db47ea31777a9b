"""The run's clock: the running event loop's.

Deadlines, durations, backoff and timeouts all read one clock, the event loop's
(`loop.time()`, which `asyncio.sleep`, `asyncio.timeout` and `call_at` use too). On the
default loop that is `time.monotonic()`; a test that runs the loop on
`engine.testing.FakeClock` gets virtual time, in which a 30 s timeout passes at once and
durations are exact.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["loop_clock", "now"]


def now() -> float:
    """Seconds on the running loop's clock; outside a loop, `time.monotonic()`."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


def loop_clock() -> Callable[[], float]:
    """The running loop's clock, as a function to call on a hot path: `time.monotonic`
    itself on a stock loop (whose `time()` is exactly that), else the loop's `time`."""
    loop = asyncio.get_running_loop()
    stock = type(loop).time is asyncio.BaseEventLoop.time
    return time.monotonic if stock else loop.time
