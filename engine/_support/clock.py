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

__all__ = ["now"]


def now() -> float:
    """Seconds on the running loop's clock; outside a loop, `time.monotonic()`."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()
