"""Worker threads that never hold up the end of a run.

`asyncio.to_thread` runs blocking work (file access, user functions) on the event loop's
default executor. When a step is cancelled (Ctrl-C, its timeout), the thread cannot be
stopped and runs on; `asyncio.run` then waits for it on the way out, and so does the
interpreter, which joins every `ThreadPoolExecutor` thread at exit. A user function that
takes 20 s, or never returns, kept an interrupted run alive that long.

`DaemonThreadPool` is a default executor whose threads are daemon threads and whose
`shutdown` waits only a short grace period: what a cancelled step left running is
abandoned when the process exits, as its step already was.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["DaemonThreadPool"]

T = TypeVar("T")

_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreadPool(ThreadPoolExecutor):
    """A thread pool of daemon threads; `shutdown` waits at most `grace` seconds.

    A `ThreadPoolExecutor` only because asyncio's `set_default_executor` insists; none of
    its machinery is used (its threads are the ones the interpreter joins at exit).

    Args:
        max_workers: the most threads it starts; jobs beyond wait in a queue.
        grace: how long `shutdown(wait=True)` waits for running jobs before leaving them.
    """

    def __init__(self, max_workers: int = 32, grace: float = 1.0) -> None:
        super().__init__(max_workers=1)  # sets attributes only: threads start on submit
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._workers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._limit = max_workers
        self._grace = grace
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run `fn(*args, **kwargs)` on a worker thread."""
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new work after shutdown")
            future: Future[T] = Future()
            self._jobs.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._workers) < self._limit:
                thread = threading.Thread(
                    target=self._work, name=f"planloom-worker-{len(self._workers)}", daemon=True
                )
                thread.start()
                self._workers.append(thread)
            return future

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args, kwargs = job
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # the caller gets it through the future
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del job, future, fn, args, kwargs  # drop references while idle
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; with `wait`, give running jobs up to the grace period."""
        with self._lock:
            self._closed = True
            threads = list(self._workers)
        if cancel_futures:
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[0].cancel()
        for _ in threads:
            self._jobs.put(None)
        if wait:
            end = time.monotonic() + self._grace
            for thread in threads:
                thread.join(max(0.0, end - time.monotonic()))
