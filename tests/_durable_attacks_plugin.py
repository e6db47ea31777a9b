"""A `--plugin` for the durable-run attack tests: a capability family whose discovery can be
held, to widen the window between a `planloom resume` reading a run's journal and claiming
the run (validating a recipe lists its families' tools: a real MCP server may take seconds).

The `hold` family has no actions. Granting it (`hold: {}`) makes validation ask for its
listing; when the environment variable `HOLD_FILE` names a file, the listing writes
`<file>.waiting` and then waits (at most `HOLD_SECONDS`) until the file is gone.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from pydantic import BaseModel

from engine.capability import EmptyGrant, Family, Registry
from engine.discovery import Bound, Discovery, Listing

HOLD_SECONDS = 60.0  # a test that forgets to release still ends


def _wait(held: str) -> None:
    hold = Path(held)
    Path(f"{held}.waiting").write_text(str(os.getpid()))
    end = time.monotonic() + HOLD_SECONDS
    while hold.exists() and time.monotonic() < end:
        time.sleep(0.02)


async def _listing(grant: BaseModel, base_dir: Path) -> Listing:
    held = os.environ.get("HOLD_FILE")
    if held:
        await asyncio.to_thread(_wait, held)
    return {}


def _bind(grant: BaseModel, base_dir: Path, listing: Listing) -> Bound:
    return Bound(actions=[])


def register(registry: Registry) -> None:
    """Add the `hold` family (no actions; a discovery that can be held)."""
    registry.add_family(
        Family(
            "hold",
            "nothing: a discovery a test can hold",
            EmptyGrant,
            discovery=Discovery(_listing, _bind),
        )
    )


__all__ = ["register"]
