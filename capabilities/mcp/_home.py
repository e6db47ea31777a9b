"""Where MCP sessions live: one event loop of the family's own, and the servers a listing
keeps for the run that follows.

A session (the SDK's streams, a stdio server's pipes) belongs to the event loop that opened
it, and validation and the run each have a loop of their own: validation lists a server's
tools on a loop that ends with it (`engine.discovery.run_blocking`), the run calls them on
another. So every session lives on this module's loop, in a daemon thread ("planloom-mcp"),
and callers await it from theirs (`on_home`); a session can then outlive the loop that
asked for it.

While `holding()` is open (the `planloom` command holds it through
`Registry.keep_discovered`), a server whose tools were listed is not stopped but parked,
and the run's `Servers` takes it over: one start serves validation and the run. What no run
took is stopped when the hold closes (and at the process's exit, should a hold be left
open). Outside a hold (the Python API, tests) a listing stops its server, as it always did.

Servers are started from this loop's thread: a stdio server's launcher dies with the
thread that started it (`PR_SET_PDEATHSIG`), and this one lives as long as the process.

Only the standard library is imported here: the family's hold is entered by every command,
and the SDK (half a second to import) only when a server is asked.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, Protocol, TypeVar

__all__ = ["Parkable", "holding", "keeping", "on_home", "park", "unpark"]

T = TypeVar("T")

_RELEASE_TIMEOUT = 15.0  # seconds to stop the parked servers (each stops within 10)


class Parkable(Protocol):
    """A session that can be parked: it is stopped if no run takes it."""

    async def stop(self) -> None: ...


class _Home:
    """The loop, its thread, and the parked sessions (touched only on the loop)."""

    def __init__(self) -> None:
        # asyncio is imported where it is used: `planloom validate` imports this module
        # without running it, and asyncio (with ssl, which loads OpenSSL) is much of its start-up.
        import asyncio

        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.parked: dict[Any, Parkable] = {}
        thread = threading.Thread(target=self.loop.run_forever, name="planloom-mcp", daemon=True)
        thread.start()

    def release(self) -> None:
        """Stop the parked sessions, waiting a bounded time (from outside the loop)."""
        import asyncio

        if os.getpid() != self.pid:
            return  # a forked child: the parent's servers are the parent's
        future = asyncio.run_coroutine_threadsafe(self._stop_parked(), self.loop)
        with contextlib.suppress(TimeoutError):  # concurrent.futures' (one since 3.11)
            future.result(_RELEASE_TIMEOUT)

    async def _stop_parked(self) -> None:
        import asyncio

        parked, self.parked = list(self.parked.values()), {}
        await asyncio.gather(*(session.stop() for session in parked))


_lock = threading.Lock()
_home: _Home | None = None
_holds = 0


def _current() -> _Home:
    global _home
    with _lock:
        if _home is None or _home.pid != os.getpid():
            if _home is None:
                atexit.register(_at_exit)
            _home = _Home()
        return _home


def _at_exit() -> None:
    if _home is not None:
        _home.release()


async def on_home(coro: Coroutine[Any, Any, T], *, detached: bool = False) -> T:
    """Await `coro` run on the sessions' loop.

    Cancelling the caller cancels it, unless `detached`: then the caller stops waiting and
    `coro` runs to its end (the stop of a run's servers, which a second Ctrl-C must not
    leave half done).
    """
    import asyncio

    future = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, _current().loop))
    if detached:
        return await asyncio.shield(future)
    return await future


def keeping() -> bool:
    """Whether a listing's server is to be parked for the run (a hold is open)."""
    return _holds > 0


def park(key: Any, session: Parkable) -> Parkable | None:
    """Keep `session` for a run to take (on the sessions' loop); the one it replaces."""
    home = _current()
    replaced = home.parked.pop(key, None)
    home.parked[key] = session
    return replaced


def unpark(key: Any) -> Parkable | None:
    """Take the session parked under `key`, if any (on the sessions' loop)."""
    return _current().parked.pop(key, None)


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """Park listed servers for the run while open; stop those no run took when the last
    hold closes."""
    global _holds
    with _lock:
        _holds += 1
    try:
        yield
    finally:
        with _lock:
            _holds -= 1
            home = _home if _holds == 0 else None
        if home is not None:
            home.release()
