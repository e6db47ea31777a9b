"""Virtual time for a run: an event loop whose clock jumps ahead when it would wait.

As trio's `MockClock` with `autojump_threshold`: when every task is waiting and none will
be woken by I/O within the threshold (real seconds), the clock jumps to the next timer
instead of sleeping until it. A step's 30 s timeout, a retry's backoff or `Wait(5)` pass
at once, in order, and durations come out exact.

It never jumps while work handed to a thread (`asyncio.to_thread`, `run_in_executor`, which
the sandbox uses for synchronous tools) is running. A process or a socket is not such work:
a run that waits on either (a shell tool, a model server) needs a threshold longer than
the longest real wait, or the real clock.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, TypeVar, TypeVarTuple, Unpack

__all__ = ["FakeClock"]

T = TypeVar("T")
Args = TypeVarTuple("Args")


class FakeClock:
    """A clock that starts at `start` and moves only when a run it drives would wait.

    Args:
        start: the clock's first reading, in seconds.
        autojump_threshold: real seconds the loop must be idle before the clock jumps.

    Example:
        ```python
        clock = FakeClock()
        result = run_recipe_text(RECIPE, registry, clock=clock)  # a Wait(60) step
        assert clock.time() >= 60                                # ...in no real time
        ```
    """

    def __init__(self, start: float = 0.0, *, autojump_threshold: float = 0.0) -> None:
        if autojump_threshold < 0:
            raise ValueError(f"autojump_threshold must be 0 or more, not {autojump_threshold}")
        self._now = float(start)
        self.autojump_threshold = autojump_threshold
        self.jumps: list[float] = []  # how far each jump moved the clock, in order

    def time(self) -> float:
        """The clock's reading, in seconds."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by hand (timers now due run at the loop's next turn)."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        self._now += seconds

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Run `main` to its end on a new event loop keeping this clock's time."""
        with asyncio.Runner(loop_factory=lambda: _AutojumpLoop(self)) as runner:
            return runner.run(main)

    def _jump(self, seconds: float) -> None:
        self._now += seconds
        self.jumps.append(seconds)


class _JumpingSelector(selectors.BaseSelector):
    """The loop's selector; a wait with nothing to wake it becomes a jump of the clock."""

    def __init__(self, real: selectors.BaseSelector, loop: _AutojumpLoop) -> None:
        self._real = real
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        clock = self._loop.clock
        if timeout is None or timeout <= 0 or self._loop.threads:
            return self._real.select(timeout)
        events = self._real.select(min(clock.autojump_threshold, timeout))
        if not events:
            clock._jump(timeout)
        return events

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.get_key(fileobj)

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


class _AutojumpLoop(asyncio.SelectorEventLoop):
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.threads = 0  # calls handed to a thread and not yet ended
        super().__init__(_JumpingSelector(selectors.DefaultSelector(), self))

    def time(self) -> float:
        return self.clock._now

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[Unpack[Args]], T], *args: *Args
    ) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self.threads += 1
        future.add_done_callback(self._thread_ended)
        return future

    def _thread_ended(self, _: asyncio.Future[Any]) -> None:
        self.threads -= 1
