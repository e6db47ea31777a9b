"""A stdio MCP server's process: started by the sandbox launcher, watched, and stopped.

`spawn` starts `confine/_launcher.py` with the server's argv, as `shell.run` does for its programs,
with the launcher's config and status pipe passed as file descriptors. `watched_folder`
guards the server's folder for protected entries (mounted read-only; those it creates are
removed when it stops). `read_status` reads the launcher's reports. `stop` ends the whole
process tree: killing the launcher's group kills the PID namespace's init, and the kernel
kills everything left in the namespace.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import AsyncResource, Process

from capabilities.confine.launch import STATUS_LIMIT, files_config, launcher_command, parse_status
from capabilities.confine.scratch import Scratch
from capabilities.protected import Scan, Watch
from engine.errors import CapabilityDenied, ConfigurationError

__all__ = [
    "StdioLaunch",
    "kill_group",
    "read_status",
    "signal_name",
    "spawn",
    "stop",
    "watched_call",
    "watched_folder",
]

_EXIT_TIMEOUT = 0.5  # seconds for the server to exit once its stdin is closed
_REAP_TIMEOUT = 2.0  # seconds for a SIGKILLed launcher to be reaped
_MAX_MESSAGES = 100  # the launcher sends three; more are dropped


@dataclass(frozen=True)
class StdioLaunch:
    """How to start one MCP server, already resolved and checked by its caller.

    Attributes:
        server: the server's name, for messages.
        argv: what to execute; `argv[0]` is an absolute path, not made real (a venv's
            python must stay the venv's link to find its site-packages).
        cwd: the real path of the server's folder: its working folder, and the only one it
            may write besides its TMPDIR.
        env: its whole environment, already scrubbed (`TMPDIR` is added).
        network: whether it may use the network (False: a network namespace of its own
            and no TCP under Landlock).
        reads: further folders it may read (a venv, its program's folder, ...).
        rlimits: `{"as": bytes, "fsize": bytes, "nproc": n, "core": 0}`; no CPU limit, as
            a server lives for the whole run. `as` (`max_memory`) limits its memory
            cgroup, and each process's address space only where there is none.
        max_processes: the limit of its pids cgroup.
        protected: globs of the protected entries beneath `cwd` it may write; the others
            are mounted read-only.
    """

    server: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    network: bool
    reads: tuple[str, ...]
    rlimits: dict[str, int]
    max_processes: int
    protected: list[str]


async def _started(launch: StdioLaunch) -> tuple[Watch, Scan]:
    """A watch over the server's folder, and its walk (the watch abandoned if it fails)."""
    watch = Watch(launch.cwd, launch.protected)
    try:
        return watch, await anyio.to_thread.run_sync(watch.start)
    except BaseException:
        watch.abandon()
        raise


@contextlib.asynccontextmanager
async def _finished(watch: Watch, who: str, server: str) -> AsyncIterator[None]:
    """Finish `watch` as the block ends: what appeared is removed and refused with
    `CapabilityDenied` (rule `mcp.protected`; over the block's own error), or only removed
    if the block is being cancelled."""
    grant = f"mcp: servers: {server}"
    try:
        yield
    except Exception:
        watch.finish(who=who, rule="mcp.protected", grant=grant)  # a refusal outranks it
        raise
    except BaseException:
        with contextlib.suppress(CapabilityDenied):
            watch.finish(who=who, rule="mcp.protected", grant=grant)
        raise
    await anyio.to_thread.run_sync(lambda: watch.finish(who=who, rule="mcp.protected", grant=grant))


@contextlib.asynccontextmanager
async def watched_folder(launch: StdioLaunch) -> AsyncIterator[Scan]:
    """Walk `cwd` for protected entries (mounted read-only); remove those that appear.

    As `shell.run` does: a folder too large to walk entirely is refused, and protected
    entries created while the server ran are removed when it has stopped, and refused with
    `CapabilityDenied` (rule `mcp.protected`) unless the block is being cancelled.

    Raises:
        ConfigurationError: the folder is too large or too deep to be walked.
    """
    watch, before = await _started(launch)
    if why := before.refusal():
        watch.abandon()
        raise ConfigurationError(f"MCP server {launch.server!r}: {why}")
    async with _finished(watch, f"MCP server {launch.server!r}", launch.server):
        yield before


@contextlib.asynccontextmanager
async def watched_call(launch: StdioLaunch, who: str) -> AsyncIterator[None]:
    """One call of the server's tool, watched as a `shell.run` call is: protected entries
    that appear beneath its folder while it runs are removed when it returns, and the call
    is refused (rule `mcp.protected`), so no later step sees them. The server's whole life
    is watched too (`watched_folder`): this says which call it was, when it happened.

    Raises:
        CapabilityDenied: a protected entry appeared during the call (over its own error).
    """
    watch, _ = await _started(launch)
    async with _finished(watch, who, launch.server):
        yield


async def spawn(launch: StdioLaunch, scratch: Scratch, protected: Scan) -> tuple[Process, int]:
    """Start the launcher (from the event loop's thread: its parent-death signal follows
    the thread that started it); the process and the read end of its status pipe.

    Raises:
        ConfigurationError: the launcher could not be started.
    """
    config = {
        "parent": os.getpid(),
        "network": launch.network,
        "rlimits": dict(launch.rlimits),
        **files_config(launch.cwd, scratch.tmpdir, list(launch.reads), protected),
        "cgroup": scratch.cgroup,
        "memory_cgroup": scratch.memory_cgroup,
    }
    status_r, status_w = os.pipe()
    config_fd = -1
    started = False
    try:
        command, config_fd = launcher_command(config, status_w, list(launch.argv))
        process = await anyio.open_process(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=launch.cwd,
            env={**launch.env, "TMPDIR": scratch.tmpdir},
            start_new_session=True,
            pass_fds=(status_w, config_fd),
        )
        started = True
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the environment
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigurationError(
            f"MCP server {launch.server!r}: cannot start its sandbox launcher in "
            f"{launch.cwd}: {why}"
        ) from exc
    finally:
        os.close(status_w)
        if config_fd >= 0:
            os.close(config_fd)
        if not started:
            os.close(status_r)
    return process, status_r


async def read_status(fd: int, received: Callable[[list[dict[str, Any]]], None]) -> None:
    """Read the launcher's messages until it has gone (the pipe's end); `received` gets
    all of them so far, each time more arrive."""
    os.set_blocking(fd, False)
    messages: list[dict[str, Any]] = []
    pending = bytearray()
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, STATUS_LIMIT)
        except BlockingIOError:
            continue
        if not chunk:
            return
        pending += chunk
        complete, newline, rest = pending.rpartition(b"\n")
        if newline:
            messages += parse_status(bytes(complete))
            del messages[_MAX_MESSAGES:]
            received(list(messages))
            pending = bytearray(rest)
        del pending[STATUS_LIMIT:]


async def stop(process: Process, scratch: Scratch) -> None:
    """Close stdin, give the server a moment to exit, then kill the launcher's group.

    Killing the group kills the PID namespace's init, and the kernel then kills everything
    in the namespace; without one, the pids cgroup is swept for descendants that left it.
    """
    await _close(process.stdin)
    with anyio.move_on_after(_EXIT_TIMEOUT):
        await process.wait()
    kill_group(process.pid)
    with anyio.move_on_after(_REAP_TIMEOUT):
        await process.wait()
    await scratch.empty_cgroup()
    # Wakes the pipe readers even if something unkillable still holds the pipes open.
    await _close(process.stdout)
    await _close(process.stderr)
    if process.returncode is not None:  # else its wait could not be bounded
        await process.aclose()  # closes the pipes' transports


async def _close(stream: AsyncResource | None) -> None:
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        if stream is not None:
            await stream.aclose()


def kill_group(pgid: int) -> None:
    """SIGKILL a process group; one already empty is fine."""
    # ESRCH is the only failure possible for our own child's group.
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
