"""Coroutines started at once, in their starter's turn, and made tasks only if they wait.

Most steps of a large plan never wait for anything: an in-process function, a call a
recording serves. Run as a task each, such a step costs a task, two turns of the event
loop and a queue hop, a seventh of what the engine spends on it. `start` runs a coroutine
at once instead (as Python 3.12's eager tasks do), in a context of its own; if it ends
without waiting, its value is there at once and no task was made. If it waits, `start`
hands back the rest of it, to be run as a task in that same context: the task goes on
from where the coroutine stopped, as if it had been a task from the start.

Until it is a task, the coroutine runs inside its starter's task: `asyncio.current_task()`
is the starter's there. Code that needs the task it runs in to be its own (an
`asyncio.timeout`, a `TaskGroup`, an action that may be interrupted) first awaits
`as_task()`, which is free in a task and, in a coroutine started at once, makes it one.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from contextvars import Context, ContextVar
from typing import Any, TypeVar

__all__ = ["Waiting", "as_task", "start"]

T = TypeVar("T")

# The task a coroutine was started in, until it is a task of its own. (A task it makes
# meanwhile inherits the variable, and is told apart by being another task.)
_STARTED_IN: ContextVar[asyncio.Task[Any] | None] = ContextVar("planloom_started_in", default=None)
_TO_A_TASK = object()  # what `as_task` gives the starter: "make me a task now"


@types.coroutine
def as_task() -> Generator[Any, None, None]:
    """Make sure the running coroutine runs in a task of its own (see the module)."""
    starter = _STARTED_IN.get()
    if starter is not None and starter is asyncio.current_task():
        yield _TO_A_TASK


class Waiting:
    """A coroutine `start` began that waits for something: `rest()` finishes it, in a task
    made with `context=context`."""

    __slots__ = ("_coro", "_waits_for", "context")

    def __init__(self, coro: Coroutine[Any, Any, Any], waits_for: Any, context: Context) -> None:
        self._coro = coro
        self._waits_for = waits_for
        self.context = context

    @types.coroutine
    def rest(self) -> Generator[Any, Any, Any]:
        """The coroutine from where it stopped: what it waits for is passed up to the
        task, and what the task sends or throws back is passed down to it."""
        _STARTED_IN.set(None)
        coro, waits_for = self._coro, self._waits_for
        try:
            if waits_for is _TO_A_TASK:  # it is in a task now: it goes on at once
                waits_for = coro.send(None)
            while True:
                try:
                    sent = yield waits_for
                except GeneratorExit:
                    coro.close()
                    raise
                except BaseException as exc:  # (a cancellation too: the coroutine's to handle)
                    waits_for = coro.throw(exc)
                else:
                    waits_for = coro.send(sent)
        except StopIteration as ended:
            return ended.value


def start(coro: Coroutine[Any, Any, T], context: Context) -> tuple[T, None] | tuple[None, Waiting]:
    """Run `coro` in `context` until it ends or waits: `(value, None)` if it ended,
    `(None, waiting)` if it waits (run `waiting.rest()` as a task in `waiting.context`).
    Called from a task (the one `coro` runs in until it is a task of its own).

    Raises:
        Whatever `coro` raised before it waited.
    """
    context.run(_STARTED_IN.set, asyncio.current_task())  # (for as_task, in this context)
    try:
        waits_for = context.run(coro.send, None)
    except StopIteration as ended:
        return ended.value, None
    return None, Waiting(coro, waits_for, context)
