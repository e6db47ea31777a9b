"""The stdio transport for MCP servers: the server runs confined, as a `shell.run` child.

`ConfinedStdio` is an MCP `Transport`: `mcp.Client(ConfinedStdio(launch))` speaks to the
server over its stdin and stdout (newline-delimited JSON-RPC), as the SDK's own
`stdio_client` does, but the server is started by `confine/_launcher.py`, like `shell.run`
programs: its own user, PID, mount and network namespaces (no network unless the launch
allows it), a pids cgroup, `no_new_privs`, rlimits and Landlock (writes only beneath its
folder and its private TMPDIR; protected entries there mounted read-only). The launcher
dies with the engine (`PR_SET_PDEATHSIG`), and with it the server's PID namespace.

Its stderr is kept (the last 64 KB), never shown; `failure()` quotes its end. When the
launcher reports that the server could not start, or the server ends, the read stream
closes at once, so a pending request fails instead of waiting for its timeout. Stopping
closes stdin, waits briefly, then kills the launcher's process group: the PID namespace's
init goes with it, and the kernel kills every process left in the namespace (`setsid`
ones included). Protected entries the server created beneath its folder are removed then,
and leaving fails with `CapabilityDenied` (rule `mcp.protected`), as a `shell.run` call does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from capabilities.confine.launch import flatten, readable_paths
from capabilities.confine.scratch import Scratch
from capabilities.mcp._stdio_process import (
    StdioLaunch,
    kill_group,
    read_status,
    signal_name,
    spawn,
    stop,
    watched_call,
    watched_folder,
)
from capabilities.mcp._unreadable import unreadable_folder

__all__ = ["MAX_LINE", "ConfinedStdio", "StdioLaunch"]

MAX_LINE = 16 * 1024 * 1024  # bytes in one message line; a longer one ends the connection
_STDERR_KEPT = 64 * 1024  # bytes of the server's stderr kept (the last ones)
_TAIL_LINES = 20  # stderr lines quoted by `failure()`
_TAIL_BYTES = 4096  # at most this much of them
_WRITER_FLUSH_TIMEOUT = 0.5  # seconds for accepted messages to reach stdin at shutdown
_SETTLE = 1.0  # seconds, once one pipe ends, for the others and the launcher's report


class ConfinedStdio:
    """Transport: `async with ConfinedStdio(launch) as (read_stream, write_stream): ...`.

    Entering starts the server (it does not wait for the MCP handshake); leaving stops it
    and everything it started. Both must happen in the same task.

    Attributes:
        pid: the launcher's pid once started (it leads the server's process group).
        layers: the confinement report (`{layer: "active ..." | "unavailable: ..."}`),
            once the launcher has set the layers up.
    """

    def __init__(self, launch: StdioLaunch) -> None:
        self._launch = launch
        self.pid: int | None = None
        self.layers: dict[str, str] = {}
        self._messages: list[dict[str, Any]] = []
        self._stderr = bytearray()
        self._over_memory = False  # the kernel killed it for its memory cgroup's limit
        self._ended: str | None = None  # why this side ended the connection
        self._stopping = False
        self._stack: contextlib.AsyncExitStack | None = None

    def watched_call(self, who: str) -> contextlib.AbstractAsyncContextManager[None]:
        """A call of the server's tool, watched for protected entries it creates."""
        return watched_call(self._launch, who)

    async def __aenter__(self) -> TransportStreams:
        """Start the server confined; its (read, write) message streams.

        Raises:
            ConfigurationError: the launcher could not be started, or `cwd` is too large
                or too deep to be checked for protected entries.
        """
        if self._stack is not None:
            raise RuntimeError("ConfinedStdio is already entered; it cannot be re-entered")
        stack = contextlib.AsyncExitStack()
        streams = await stack.enter_async_context(self._connect())
        self._stack = stack
        return streams

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop the server and its whole process tree; remove its TMPDIR and cgroup.

        Raises:
            CapabilityDenied: rule `mcp.protected`: protected entries beneath `cwd` (a new
                `.env`, a new `sub/.git`) appeared while the server ran; they have been
                removed (not raised when the block is being cancelled).
        """
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, traceback)

    def failure(self) -> str | None:
        """Why the server is gone, in words, with the end of its stderr; None while it runs.

        The words follow the server's name: "exited with code 3; last lines of its stderr:
        ...", "cannot execute /srv/notes: No such file or directory; ...".
        """
        why = self._why()
        if why is None:
            return None
        return f"{why}; last lines of its stderr:\n{self.stderr_tail()}"

    def has_stderr(self) -> bool:
        """Whether the server has written anything but blanks on its stderr."""
        return bool(self._stderr.strip())

    def stderr_tail(self) -> str:
        """The last lines of the server's stderr so far (bounded), or a note of none."""
        tail = self._stderr.decode("utf-8", errors="replace").rstrip("\n").splitlines()
        text = "\n".join(tail[-_TAIL_LINES:])
        if len(text.encode()) > _TAIL_BYTES:
            text = text.encode()[-_TAIL_BYTES:].decode("utf-8", errors="ignore")
        return text if text.strip() else "(no stderr output)"

    def unreadable(self) -> str | None:
        """The folder of the server's own files it could not read (its stderr names a
        file here that lies outside the folders it may read), if it says so."""
        readable = [*readable_paths(list(self._launch.reads)), self._launch.cwd]
        text = self._stderr.decode("utf-8", errors="replace")
        return unreadable_folder(text, readable)

    def _why(self) -> str | None:
        for message in self._messages:
            if "setup_error" in message:
                return f"its sandbox could not be set up: {message['setup_error']}"
            if "exec_error" in message:
                return f"cannot execute {self._launch.argv[0]}: {message['exec_error']}"
        if self._over_memory:
            limit = int(self._launch.rlimits["as"]) >> 20
            return f"was killed: it went over max_memory ({limit} MiB)"
        for message in self._messages:
            if "exit" in message:
                return f"exited with code {message['exit']}"
            if "signal" in message:
                return f"was killed by signal {signal_name(int(message['signal']))}"
        if self._ended is not None:
            return self._ended
        if self._stopping:
            return "was stopped when its connection closed"
        return None

    def _end(self, why: str) -> None:
        """End the connection from this side: note why, and kill the server's tree."""
        if self._ended is None:
            self._ended = why
        if self.pid is not None:
            kill_group(self.pid)

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[TransportStreams]:
        async with watched_folder(self._launch) as protected:
            with Scratch(self._launch.max_processes, self._launch.rlimits["as"]) as scratch:
                process, status_fd = await spawn(self._launch, scratch, protected)
                self.pid = process.pid
                try:
                    async with self._bridge(process, status_fd, scratch) as streams:
                        yield streams
                finally:
                    os.close(status_fd)

    @contextlib.asynccontextmanager
    async def _bridge(
        self, process: Process, status_fd: int, scratch: Scratch
    ) -> AsyncIterator[TransportStreams]:
        """The server's pipes bridged to message streams, as the SDK's `stdio_client` does.

        No awaits between the spawn and the task group (a cancellation there would leave
        the server running); the shutdown is shielded and every wait in it bounded.
        """
        stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
        assert stdin is not None  # each was opened as a pipe
        assert stdout is not None
        assert stderr is not None
        read_sink, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_source = anyio.create_memory_object_stream[SessionMessage](0)
        writer_done = anyio.Event()
        delivered = anyio.Event()  # stdout is read and the read stream closed
        launcher_gone = anyio.Event()  # the status pipe ended: the launcher has exited
        stderr_done = anyio.Event()
        reader_scope = anyio.CancelScope()

        async def stdout_reader() -> None:
            try:
                async with read_sink:
                    with reader_scope:
                        if await self._deliver(stdout, read_sink):
                            await self._settle(launcher_gone, stderr_done)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
                pass  # the pipe was closed under the read by the shutdown
            finally:
                delivered.set()
                await _drain(stdout)

        async def stdin_writer() -> None:
            try:
                async with write_source:
                    async for message in write_source:
                        line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await stdin.send((line + "\n").encode())
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                # The server stopped reading: if it died, the reader ends the connection
                # with its report; if it lives on deaf, it is no use.
                with anyio.move_on_after(_SETTLE):
                    await delivered.wait()
                if not delivered.is_set():
                    self._end("stopped reading its standard input, so it was stopped")
                await read_sink.aclose()
            finally:
                writer_done.set()

        async def stderr_reader() -> None:
            try:
                async for chunk in stderr:
                    self._stderr += chunk
                    del self._stderr[:-_STDERR_KEPT]
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass
            finally:
                stderr_done.set()

        async def launcher_watch() -> None:
            try:
                await read_status(status_fd, lambda got: self._received(got, scratch))
            finally:
                launcher_gone.set()
            # The server is gone: end what is left of its tree (without a PID namespace,
            # descendants may hold stdout open), then the connection.
            self._over_memory = self._over_memory or scratch.went_over_memory()
            kill_group(process.pid)
            await scratch.empty_cgroup()
            with anyio.move_on_after(_SETTLE):
                await delivered.wait()
            reader_scope.cancel()

        async def shutdown() -> None:
            self._stopping = True
            read_stream.close()  # unblocks the reader into its drain
            write_stream.close()
            with anyio.move_on_after(_WRITER_FLUSH_TIMEOUT):
                await writer_done.wait()
            await stop(process, scratch)
            for stream in (read_stream, write_stream, read_sink, write_source):
                await stream.aclose()
            await anyio.lowlevel.checkpoint()  # lets the unblocked tasks end

        async with anyio.create_task_group() as group:
            for task in (stdout_reader, stdin_writer, stderr_reader, launcher_watch):
                group.start_soon(task)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    await shutdown()
                group.cancel_scope.cancel()

    async def _deliver(
        self, stdout: ByteReceiveStream, sink: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> bool:
        """Pass each line to `sink`; whether stdout ended (not the session, not a line cap).

        One chunk at a time: nothing more is read while a delivery waits.
        """
        pending = bytearray()
        async for chunk in stdout:
            *ends, rest = chunk.split(b"\n")
            for end in ends:
                pending += end
                line = bytes(pending)
                pending.clear()
                if len(line) > MAX_LINE:
                    return self._too_long()
                if not line.strip():
                    continue
                parsed = _parse_line(line)
                if _nested_too_deep(parsed):  # unreadable, and so unanswered: say why, not time out
                    return self._too_deep()
                try:
                    await sink.send(parsed)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return False  # the session is gone
            pending += rest
            if len(pending) > MAX_LINE:
                return self._too_long()
        return True

    def _received(self, messages: list[dict[str, Any]], scratch: Scratch) -> None:
        self._messages = messages
        if any("signal" in message for message in messages):
            self._over_memory = scratch.went_over_memory()
        self.layers = flatten(messages, scratch.cgroup_state, scratch.memory_state)

    def _too_long(self) -> bool:
        self._end(
            f"sent a message line longer than {MAX_LINE // (1024 * 1024)} MiB, "
            "so its connection was closed and it was stopped"
        )
        return False

    def _too_deep(self) -> bool:
        self._end(
            "sent a message nested too deep to read (JSON is read to about 200 levels), so "
            "its connection was closed and it was stopped"
        )
        return False

    async def _settle(self, launcher_gone: anyio.Event, stderr_done: anyio.Event) -> None:
        """After stdout ended: wait briefly for the launcher's report and the last stderr,
        so that `failure()` is complete when the session sees the connection end."""
        with anyio.move_on_after(_SETTLE):
            await launcher_gone.wait()
            await stderr_done.wait()
        if not launcher_gone.is_set():
            self._end("closed its standard output, so it was stopped")


def _parse_line(line: bytes) -> SessionMessage | Exception:
    """One stdout line as a message, or the parse error as a value for the session."""
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        return exc
    return SessionMessage(message)


def _nested_too_deep(parsed: SessionMessage | Exception) -> bool:
    """Whether a line could not be read because its JSON nests past the parser's limit."""
    if not isinstance(parsed, ValidationError):
        return False
    return any(
        error["type"] == "json_invalid" and "recursion limit" in error["msg"]
        for error in parsed.errors()
    )


async def _drain(stdout: ByteReceiveStream) -> None:
    """Read and drop the rest of stdout, so a server writing cannot block on a full pipe
    while its stdin is flushed; shielded, it ends when the pipe ends or is closed."""
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(
            anyio.EndOfStream,
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
            OSError,
        ):
            while True:
                await stdout.receive()
