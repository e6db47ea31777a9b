"""What a Dask worker runs for planloom: one admitted call, made with the worker's own
registry (`engine.backend.run_remote`), watched so that cancelling its Dask future cancels
it (and kills its confined children), and made at most once if it has side effects.

Imported on the workers (by the reference to `make_call` in each task): keep it light.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from engine.backend import Outcome, RemoteCall, run_remote
from engine.capability import Registry
from engine.errors import CapabilityDenied, ConfigurationError, OutcomeUnknown

__all__ = ["make_call", "started_marker"]

_WATCH_EVERY = 0.1  # seconds between two looks at whether the task was cancelled
_registries: dict[tuple[str, ...], Registry] = {}
_lock = threading.Lock()


def started_marker(key: str) -> str:
    """The name of the Dask `Event` a worker sets when it starts a call made only once."""
    return f"{key}-started"


def make_call(call: RemoteCall, plugins: Sequence[str]) -> Outcome:
    """Make `call` on this worker (a Dask task's function)."""
    try:
        registry = _registry(tuple(plugins))
    except ConfigurationError as exc:
        return Outcome.failed(
            CapabilityDenied(
                f"the worker cannot build planloom's registry: {exc}", rule="worker-registry"
            )
        )
    if call.once and _made_before(call.key):
        return Outcome.failed(
            OutcomeUnknown(
                f"{call.action}: the worker making this call was lost while it ran, so it "
                "may or may not have happened; it is not made again (it has side effects)"
            )
        )
    return _watched(call, registry)


def _registry(plugins: tuple[str, ...]) -> Registry:
    with _lock:
        registry = _registries.get(plugins)
        if registry is None:
            from engine.app.registry import build_registry

            registry = _registries[plugins] = build_registry(plugins)
        return registry


def _made_before(key: str) -> bool:
    """Whether an earlier run of this task started the call (its worker then died and
    Dask gave the task to this one); marks it started otherwise."""
    from distributed import Event

    marker = Event(started_marker(key))
    if marker.is_set():
        return True
    marker.set()
    return False


def _watched(call: RemoteCall, registry: Registry) -> Outcome:
    """Run the call on an event loop of this thread; a watcher thread cancels it when the
    task's future is cancelled (the run was interrupted or timed out)."""
    from distributed import get_worker

    worker = get_worker()
    key = worker.get_current_task()
    loop = asyncio.new_event_loop()
    task = loop.create_task(run_remote(call, registry))
    done = threading.Event()

    def watch() -> None:
        while not done.wait(_WATCH_EVERY):
            state = worker.state.tasks.get(key)
            if state is None or state.state == "cancelled":
                loop.call_soon_threadsafe(task.cancel)
                return

    watcher = threading.Thread(target=watch, name=f"planloom-watch-{key}", daemon=True)
    watcher.start()
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        return Outcome(error="StepFailed", message=f"{call.action}: cancelled")
    finally:
        done.set()
        loop.close()
