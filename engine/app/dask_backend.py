"""Tool calls on a Dask distributed cluster (`--executor dask://HOST:PORT | dask-local[:N]`).

Each admitted call of a portable family goes to the cluster as a task (its function is
`engine.app._dask_worker.make_call`, its data an `engine.backend.RemoteCall`); the worker
makes it through the same sandbox and confinement and sends back only the `Outcome`.
Everything else (scheduling, gates, events, recording, the run store) stays here.

A worker lost mid-call: Dask gives the task to another worker, which makes a read-only or
idempotent call again; a call with side effects finds the marker its first worker set and
ends `OutcomeUnknown` without running. Cancelling a call (Ctrl-C, a step's timeout, the
run's deadline) cancels its future; the worker's watcher cancels the call, which kills its
confined children.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.backend import Outcome, RemoteCall
from engine.capability import Family
from engine.errors import ConfigurationError, OutcomeUnknown, StepFailed, StepTimeout

__all__ = ["DaskBackend", "ExecutorSpec", "parse_executor", "worker_wait"]

_CONNECT_TIMEOUT = 10.0  # seconds to reach a scheduler before it counts as unreachable
WORKER_WAIT = 120.0  # seconds a scheduler may take to have a worker (PLANLOOM_DASK_WORKER_WAIT)
_GRACE = 5.0  # seconds past a call's timeout before the client gives up on its future
_SPEC = re.compile(r"^(?:local|dask-local(?::(\d+))?|dask(\+tls)?://([^/\s]+))$")
HINT = (
    "use local, dask-local, dask-local:N (N worker processes), dask://HOST:PORT or "
    "dask+tls://HOST:PORT"
)


@dataclass(frozen=True)
class ExecutorSpec:
    """An `--executor` value: local, a local cluster of `workers` processes, or the
    scheduler at `address`."""

    kind: str  # "local", "dask-local" or "dask"
    workers: int = 0
    address: str = ""


def parse_executor(text: str, where: str = "--executor") -> ExecutorSpec:
    """Read an `--executor` (or `PLANLOOM_EXECUTOR`) value.

    Raises:
        ConfigurationError: it is none of the forms, saying which are.
    """
    found = _SPEC.match(text.strip())
    if found is None:
        raise ConfigurationError(f"{where} {text!r}: {HINT}")
    workers, tls, address = found.groups()
    if text.strip() == "local":
        return ExecutorSpec("local")
    if address is None:
        count = int(workers) if workers else min(os.cpu_count() or 1, 4)
        if not 1 <= count <= 256:
            raise ConfigurationError(f"{where} {text!r}: N must be from 1 to 256")
        return ExecutorSpec("dask-local", workers=count)
    if ":" not in address:
        raise ConfigurationError(f"{where} {text!r}: give the scheduler's port (HOST:PORT)")
    return ExecutorSpec("dask", address=f"{'tls' if tls else 'tcp'}://{address}")


def worker_wait(environ: Mapping[str, str]) -> float:
    """Seconds to wait for a scheduler's first worker: `PLANLOOM_DASK_WORKER_WAIT`, else
    `WORKER_WAIT`.

    Raises:
        ConfigurationError: the variable is not a number of seconds above 0.
    """
    text = environ.get("PLANLOOM_DASK_WORKER_WAIT", "").strip()
    if not text:
        return WORKER_WAIT
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise ConfigurationError(
            f"PLANLOOM_DASK_WORKER_WAIT {text!r}: give the seconds to wait for a Dask worker, "
            "a number above 0"
        )
    return seconds


@dataclass
class DaskBackend:
    """Makes calls of portable families on a Dask cluster.

    Open it with `start` (which checks the scheduler answers, or starts a local cluster)
    and `close` it at the end; each run enters its `scope`, which holds the run's
    asynchronous client.

    Attributes:
        address: the scheduler's address (`tcp://HOST:PORT`).
        plugins: the `--plugin` modules the workers add to their registries.
        cluster: the local cluster this backend started, if it did.
    """

    address: str
    plugins: tuple[str, ...] = ()
    cluster: Any = None
    name: str = "dask"
    _client: Any = field(default=None, init=False, repr=False)

    @classmethod
    def start(
        cls,
        spec: ExecutorSpec,
        plugins: Sequence[str] = (),
        *,
        wait: float = WORKER_WAIT,
        say: Callable[[str], None] | None = None,
    ) -> DaskBackend:
        """Start a local cluster, or check that the scheduler at `spec.address` answers and
        has a worker, waiting up to `wait` seconds for one (saying so with `say`).

        Raises:
            ConfigurationError: distributed is not installed, the cluster cannot start, or
                the scheduler cannot be reached or has no worker (before any step runs).
        """
        try:
            import distributed
        except ImportError as exc:
            raise ConfigurationError(
                f"--executor {spec.kind}: Dask's distributed cannot be imported ({exc}): "
                "pip install 'planloom[dask]'"
            ) from None
        if spec.kind == "dask-local":
            try:
                cluster = distributed.LocalCluster(
                    n_workers=spec.workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=50,  # CRITICAL only: its logs are not the run's output
                )
            except Exception as exc:  # any reason the cluster cannot start
                raise ConfigurationError(
                    f"--executor dask-local:{spec.workers}: the local cluster did not start: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            return cls(cluster.scheduler_address, tuple(plugins), cluster)
        try:
            probe = distributed.Client(spec.address, timeout=_CONNECT_TIMEOUT, set_as_default=False)
        except Exception as exc:  # OSError, TimeoutError: nothing answers there
            raise ConfigurationError(
                f"--executor: the Dask scheduler at {spec.address} cannot be reached "
                f"({type(exc).__name__}: {exc}); start it (dask scheduler) or fix the address"
            ) from None
        try:
            _await_a_worker(probe, spec.address, wait, say)
        finally:
            probe.close()
        return cls(spec.address, tuple(plugins))

    def close(self) -> None:
        """Stop the local cluster, if this backend started one."""
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def takes(self, family: Family) -> bool:
        return family.portable

    @contextlib.asynccontextmanager
    async def scope(self) -> AsyncIterator[DaskBackend]:
        """The run's client, on the run's event loop."""
        from distributed import Client

        try:
            client = await Client(
                self.address,
                asynchronous=True,
                timeout=_CONNECT_TIMEOUT,
                set_as_default=False,
            )
        except Exception as exc:  # the scheduler went away since `start`
            raise ConfigurationError(
                f"--executor: the Dask scheduler at {self.address} cannot be reached "
                f"({type(exc).__name__}: {exc})"
            ) from None
        self._client = client
        try:
            yield self
        finally:
            self._client = None
            await client.close()

    async def run(self, call: RemoteCall) -> Any:
        from engine.app._dask_worker import make_call, started_marker

        client = self._client
        if client is None:
            raise StepFailed(f"{call.action}: the Dask backend is not open for this run")
        future = client.submit(make_call, call, self.plugins, key=call.key, pure=False)
        # The worker holds the call to its timeout; this bounds the wait for a worker too
        # (a scheduler whose workers all left would otherwise hold the step for ever).
        deadline = asyncio.timeout(call.timeout + _GRACE)
        try:
            async with deadline:
                outcome: Outcome = await future
        except TimeoutError:
            await asyncio.shield(client.cancel(future, force=True))
            if not deadline.expired():
                raise
            raise StepTimeout(
                f"{call.action} timed out after {call.timeout:g} s: no Dask worker ended it "
                f"(does the scheduler at {self.address} have workers?)"
            ) from None
        except asyncio.CancelledError:
            # Cancel it where it runs: the worker's watcher cancels the call.
            await asyncio.shield(client.cancel(future, force=True))
            raise
        except Exception as exc:  # the cluster lost the task (KilledWorker, lost comms)
            why = f"{type(exc).__name__}: {exc}"
            if call.once:
                raise OutcomeUnknown(
                    f"{call.action}: the Dask cluster lost the call ({why}); it may or may "
                    "not have happened, and is not made again (it has side effects)"
                ) from None
            raise StepFailed(f"{call.action}: the Dask cluster lost the call ({why})") from None
        finally:
            if call.once:  # the marker has done its work
                with contextlib.suppress(Exception):
                    from distributed import Event

                    await Event(started_marker(call.key), client=client).clear()
        return outcome.unwrap(call.step_id)


def _await_a_worker(
    probe: Any, address: str, wait: float, say: Callable[[str], None] | None
) -> None:
    """Return once the scheduler has a worker, waiting up to `wait` seconds.

    Raises:
        ConfigurationError: no worker joined in time.
    """
    if probe.scheduler_info().get("workers"):
        return
    if say is not None:
        say(f"waiting up to {wait:g} s for a worker to join the Dask scheduler at {address}")
    try:
        probe.wait_for_workers(1, timeout=wait)
    except (TimeoutError, OSError):
        raise ConfigurationError(
            f"--executor: the Dask scheduler at {address} has no workers (none joined within "
            f"{wait:g} s); start one (dask worker {address}) or point --executor at a cluster "
            "that has them"
        ) from None
