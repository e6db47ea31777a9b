"""A session's event loop under Ctrl-C: the first press cancels the run's running steps
(its `finally` steps still run), the second stops everything."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from engine._support.threads import DaemonThreadPool
from engine.executor import Executor
from engine.results import RunResult

__all__ = ["run_async", "with_signals"]

_T = TypeVar("_T")


def run_async(main: Coroutine[Any, Any, _T]) -> _T:
    """`asyncio.run(main)`, on worker threads that cannot hold up the exit: a step cancelled
    by Ctrl-C or its timeout may leave a thread running (a slow user function), and the
    default executor would be waited for without bound (see `engine._support.threads`)."""
    with _default_interrupts(), asyncio.Runner() as runner:
        runner.get_loop().set_default_executor(DaemonThreadPool())
        return runner.run(main)


@contextlib.contextmanager
def _default_interrupts() -> Iterator[None]:
    """Ctrl-C as Python's default while the session runs, whatever handler the caller had:
    the runner then turns the first press into a cancel of the session (which ends the
    run and stores how it ended) and the second into `KeyboardInterrupt`."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread receives signals
        return
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


async def with_signals(
    executor: Executor, say: Callable[[str], None], running: asyncio.Task[RunResult] | None
) -> RunResult:
    """Run (or wait for the run `running` already, a streamed plan's); the first Ctrl-C
    (or SIGTERM) cancels running steps (`finally` steps still run), the second cancels
    everything."""
    loop = asyncio.get_running_loop()
    presses = 0
    current = asyncio.current_task()
    assert current is not None
    task: asyncio.Task[Any] = current

    def interrupt() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            say("\ninterrupted: cancelling running steps (again to force)")
            executor.cancel()
        else:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt)
    try:
        return await (running if running is not None else executor.run())
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
