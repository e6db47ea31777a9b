"""Actions a family finds at validation time from its grant (the tools of MCP servers).

Most families declare their actions once, at registration. A family with a `Discovery`
(the `mcp` family) learns them from what its grant names: it asks the servers for a
*listing* (plain JSON, so a cassette can hold it), then builds an `Action` for each tool the
grant allows. `Registry.bind(grants, base_dir)` does both for every granted family that
discovers, and returns a registry with those actions added; validation and the executor use
the bound registry. Listings are cached per grant, so a plan is discovered once per process.

Where a listing comes from is the registry's `Listings`: live (`LiveListings`, the family
asks its servers) or a cassette (`Tape.listings`), which serves recorded listings in a
replay, so a replay starts no server.

A live listing starts what it asks (a server), and the run that follows validation needs it
again. While `Registry.keep_discovered()` is open (the `planloom` command holds it for the
whole command), a family with a `hold` keeps what its listings started for that run to
take over, instead of stopping it and starting it again; what no run took is stopped when
it closes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel

from engine.errors import ConfigurationError

if TYPE_CHECKING:
    from engine.action import Action

__all__ = [
    "Bound",
    "Discovery",
    "DiscoveryFailed",
    "Listing",
    "Listings",
    "LiveListings",
    "grant_key",
    "run_blocking",
]

T = TypeVar("T")

Listing = dict[str, Any]
"""What a family found for one grant, as JSON (the `mcp` family: each server's tools)."""


class DiscoveryFailed(ConfigurationError):
    """A family could not list what its grant names (a server that cannot start or answer).

    `problems` are `(path, message, hint)`, the path inside the family's grant, e.g.
    `("servers", "notes")`; validation reports each at its place in the recipe, under the
    diagnostic code `code`. When only part of the grant failed, `partial` is the listing of
    the rest (bound as usual) and `unavailable` the action-name prefixes of the part that
    failed (`mcp.notes.`), whose tools nothing can be said of.
    """

    def __init__(
        self,
        family: str,
        problems: list[tuple[tuple[str | int, ...], str, str]],
        *,
        code: str = "discovery-failed",
        partial: Listing | None = None,
        unavailable: tuple[str, ...] = (),
    ) -> None:
        self.family = family
        self.problems = problems
        self.code = code
        self.partial = partial
        self.unavailable = unavailable
        super().__init__("; ".join(message for _, message, _ in problems))


@dataclass(frozen=True)
class Bound:
    """The actions a family offers for one grant, and the names it withholds.

    `withheld` maps an action name the grant does not allow (a tool the server has but the
    grant's `tools` globs leave out) to why, so a recipe or a model naming it is told that
    rather than "unknown tool".
    """

    actions: list[Action[Any]]
    withheld: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Discovery:
    """How a family finds its actions from its grant.

    Attributes:
        listing: asks the live world (starts the servers, lists their tools) and returns
            JSON; raises `DiscoveryFailed` naming each part of the grant that failed.
        bind: builds the actions from a listing (live or recorded); starts nothing.
        hold: optional; while the context it makes is open, what `listing` started is
            kept for the family's run scope to take over (one start of a server serves
            validation and the run); what no run took is stopped when it closes. Without
            it, or outside it, `listing` stops what it started.
    """

    listing: Callable[[BaseModel, Path], Awaitable[Listing]]
    bind: Callable[[BaseModel, Path, Listing], Bound]
    hold: Callable[[], AbstractContextManager[None]] | None = None


class Listings(Protocol):
    """Where listings come from: the family's live discovery, or a cassette."""

    async def listing(
        self, family: str, key: str, live: Callable[[], Awaitable[Listing]]
    ) -> Listing: ...


class LiveListings:
    """Listings from the live world: the family asks."""

    async def listing(
        self, family: str, key: str, live: Callable[[], Awaitable[Listing]]
    ) -> Listing:
        return await live()


def grant_key(grant: BaseModel) -> str:
    """A grant as canonical JSON: the key of its listing, in the cache and in a cassette."""
    return json.dumps(grant.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end from synchronous code, inside a running event loop or not.

    Validation is synchronous and may be called from async code (a planner validating the
    model's plan); discovery there runs on its own loop in a short-lived thread.
    """
    # asyncio is imported where it is used: `planloom validate` imports this module
    # without running it, and asyncio (with ssl, which loads OpenSSL) is much of its start-up.
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="planloom-discovery", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value
