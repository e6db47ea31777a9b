"""A cassette's tool listings: what discovering families found (`Registry.listings`).

Recording keeps each live listing (an MCP server's tools, with their schemas); a pure
replay serves it, so the recipe validates and its tools are known with no server started.
A listing the cassette lacks is a mismatch that says to record again.

A recorded listing decides what a tool may do unasked (a tool listed read-only runs
ungated), so it is served only where no tool runs live: under `new_episodes` or
`--live-tools` the servers are asked again, and a cassette edited by hand cannot mark a
live tool read-only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from engine.discovery import DiscoveryFailed, Listing
from engine.recording.cassette import ToolListing

if TYPE_CHECKING:
    from engine.recording._reel import Reel

__all__ = ["TapeListings"]


class TapeListings:
    """Listings: recorded ones served, live ones recorded (see `Reel`)."""

    def __init__(self, tape: Reel) -> None:
        self.tape = tape
        self._recorded = {(e.family, e.grant): e for e in tape.recorded.listings}

    async def listing(
        self, family: str, key: str, live: Callable[[], Awaitable[Listing]]
    ) -> Listing:
        tape = self.tape
        if tape.replaying and not tape.recording and not tape.live_tools:
            entry = tape.take(self._recorded, (family, key))
            if entry is not None:
                return entry.listing
            raise DiscoveryFailed(
                family,
                [
                    (
                        (),
                        f"the cassette {tape.path} has no tool listing for this "
                        f"'{family}' grant (it changed since the recording, or the "
                        "recording predates it)",
                        f"record again: planloom run RECIPE --record {tape.path}",
                    )
                ],
                code="replay-mismatch",
            )
        listing = await live()
        self.tape.secrets.add_environ()  # variables the grant declared secret as it validated
        self.tape.cassette.listings.append(
            ToolListing(family=family, grant=key, listing=self.tape.redact(listing))
        )
        return listing
