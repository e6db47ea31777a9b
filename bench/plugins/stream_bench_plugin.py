"""`bench.read` (read-only, half a second) and `bench.write` (a side effect) for
`bench/streaming_planner.py` (`--plugin .../stream_bench_plugin.py`)."""

from __future__ import annotations

import asyncio
from typing import Any

READ_SECONDS = 0.5


def register(registry: Any) -> None:
    @registry.function("bench.read", side_effects=False)
    async def read(key: str) -> str:
        """Look `key` up: half a second, and the next key."""
        await asyncio.sleep(READ_SECONDS)
        return f"{key}+"

    @registry.function("bench.write", side_effects=True)
    async def write(key: str, value: str) -> str:
        """Keep `value` under `key` (nowhere: the call is what is timed)."""
        return f"{key}={len(value)}"
