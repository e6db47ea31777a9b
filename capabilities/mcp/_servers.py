"""The MCP servers of a run: list their tools, and keep one session per server per run.

Connecting to one server (its confined launch, the client, words for its failures) is
`_connect`'s.

`Servers` is the family's per-run state: the first call to a server connects to it, later
calls reuse that session, and the run's end stops every server with its process tree. A
session lives in a task of its own (the SDK's transports must be left by the task that
entered them), so calls from any step share it. A server that died is started again by the
next call to it.

Sessions live on the family's own event loop (`_home`), whatever loop asks: so the
session a listing opened can be parked, under a hold, and taken over by the run's
`Servers`, and a server listed at validation is not started a second time for the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from mcp import Client

from capabilities.mcp._connect import Connection, ServerFailed, describe, session, with_tail
from capabilities.mcp._home import keeping, on_home, park, unpark
from capabilities.mcp._models import FAMILY, MAX_NESTING, McpGrant, Server, nesting
from engine.errors import CapabilityDenied, ConfigurationError, StepFailed

__all__ = ["Servers", "list_tools"]

_MAX_TOOLS = 1000  # tools taken from one server
_MAX_PAGES = 100  # pages of tools/list
_MAX_NAME = 128  # characters of a tool's name kept (longer names are not usable)
_MAX_TEXT = 2000  # characters of a tool's title and description kept
_MAX_SCHEMA = 256 * 1024  # bytes of one inputSchema (as JSON)
_STOP_GRACE = 10.0  # seconds a session may take to wind down


async def list_tools(name: str, spec: Server, base_dir: Path) -> list[dict[str, Any]]:
    """The server's tools (`tools/list`, every page), as JSON: in full for those the
    grant's `tools` globs allow, by name alone for the others.

    Under a hold (`_home.holding`) the server is then parked for the run's `Servers` to
    take over (and a server parked already is listed again, not started again); else it
    is stopped.

    Raises:
        ConfigurationError: it could not be started, reached or listed within
            `startup_timeout`, or its listing is too large.
    """
    return await on_home(_list_tools(name, spec, base_dir))


async def _list_tools(name: str, spec: Server, base_dir: Path) -> list[dict[str, Any]]:
    key = _parking_key(name, spec, base_dir)
    current = unpark(key)
    if not isinstance(current, _Session) or current.task.done():
        current = _Session(name, spec, base_dir)
    tools: list[dict[str, Any]] = []
    problem: ConfigurationError | None = None
    try:
        with anyio.fail_after(spec.startup_timeout):
            connection = await asyncio.shield(current.ready)
            try:
                tools = await _all_tools(connection.client, name, spec.tools)
            except ConfigurationError as exc:
                problem = exc
            except Exception as exc:  # an error answer, a crash, a broken line...
                why = await connection.failure() or with_tail(describe(exc), connection)
                problem = ServerFailed(
                    f"MCP server '{name}' failed to list its tools: {why}", connection.advice()
                )
    except TimeoutError:
        problem = ConfigurationError(
            f"MCP server '{name}' did not answer within startup_timeout "
            f"({spec.startup_timeout:g} s); raise it in the server's grant if it starts slowly"
        )
    except ConfigurationError as exc:  # it could not be started or reached
        problem = exc
    except CapabilityDenied as exc:  # it wrote a protected entry as it failed to start
        problem = ConfigurationError(f"MCP server '{name}': {exc}")
    if problem is None and keeping():
        replaced = park(key, current)
        if replaced is not None and replaced is not current:  # listed twice at once
            await replaced.stop()
        return tools
    await current.stop()
    # A protected entry it wrote while it was listed is found when it stops.
    if problem is None and isinstance(current.ended, CapabilityDenied):
        problem = ConfigurationError(f"MCP server '{name}': {current.ended}")
    if problem is not None:
        raise problem
    return tools


def _parking_key(name: str, spec: Server, base_dir: Path) -> tuple[str, str, str]:
    """What a parked session is for: the server's name and grant, and the recipe folder."""
    return name, spec.model_dump_json(), str(base_dir)


async def _all_tools(client: Client, name: str, globs: list[str]) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += [_tool_json(tool, globs) for tool in page.tools]
        if len(tools) > _MAX_TOOLS:
            raise ConfigurationError(
                f"MCP server '{name}' lists more than {_MAX_TOOLS} tools; planloom takes at "
                f"most {_MAX_TOOLS} from one server"
            )
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise ConfigurationError(
        f"MCP server '{name}' sent more than {_MAX_PAGES} pages of tools without an end"
    )


def _tool_json(tool: mcp_types.Tool, globs: list[str]) -> dict[str, Any]:
    """One tool as the listing keeps it: what binding needs, bounded; the name alone for
    a tool the grant does not allow."""
    if not any(fnmatch.fnmatchcase(tool.name, pattern) for pattern in globs):
        return {"name": tool.name[:_MAX_NAME]}
    notes = tool.annotations
    schema: dict[str, Any] | None = tool.input_schema
    unusable = None
    if nesting(schema) > MAX_NESTING:
        schema, unusable = None, f"its inputSchema nests deeper than {MAX_NESTING} levels"
    elif len(json.dumps(schema)) > _MAX_SCHEMA:
        schema, unusable = None, f"its inputSchema is larger than {_MAX_SCHEMA:,} bytes"
    output: dict[str, Any] | None = tool.output_schema
    if output is not None and (
        nesting(output) > MAX_NESTING or len(json.dumps(output)) > _MAX_SCHEMA
    ):
        output = None  # too deep or too large to check references against: not checked
    return {
        "name": tool.name,
        "output_schema": output,
        "title": (tool.title or (notes.title if notes is not None else None) or "")[:_MAX_TEXT],
        "description": (tool.description or "")[:_MAX_TEXT],
        "input_schema": schema,
        "unusable": unusable,
        "read_only": bool(notes is not None and notes.read_only_hint is True),
        "destructive": bool(notes is not None and notes.destructive_hint is True),
        "idempotent": bool(notes is not None and notes.idempotent_hint is True),
    }


class _Session:
    """One server's session, kept by a task of its own until `stop`."""

    def __init__(self, name: str, spec: Server, base_dir: Path) -> None:
        self.name = name
        self.startup_timeout = spec.startup_timeout
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[Connection] = loop.create_future()
        # Whoever waits gets its exception; a start nobody waited for (stopped while
        # starting, or parked and never taken) is no error to log.
        self.ready.add_done_callback(lambda ready: ready.cancelled() or ready.exception())
        self._stop = asyncio.Event()
        self.ended: Exception | None = None  # how leaving the session failed, once started
        self.task = asyncio.create_task(self._keep(spec, base_dir), name=f"mcp-{name}")

    async def _keep(self, spec: Server, base_dir: Path) -> None:
        try:
            async with session(self.name, spec, base_dir) as connection:
                self.ready.set_result(connection)
                await self._stop.wait()
        except Exception as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            else:
                self.ended = exc
        except BaseException:
            if not self.ready.done():
                self.ready.set_exception(
                    StepFailed(f"{FAMILY}: the server '{self.name}' was stopped while starting")
                )
            raise

    async def stop(self) -> None:
        """End the session and its server, waiting a bounded time; a cancel of the caller
        still cancels it (only the session's own end is waited for, not raised)."""
        self._stop.set()
        if not self.ready.done():
            self.task.cancel()
        await asyncio.wait({self.task}, timeout=_STOP_GRACE)
        if not self.task.done():
            self.task.cancel()


class _BrokeOff(Exception):
    """The server died or broke off during a call: the call may be made again if it can be
    made twice."""


class Servers:
    """The `mcp` family's state for one run: a session per server, opened on first use,
    or taken over from its listing (parked, under a hold) when the run starts."""

    def __init__(self, grant: McpGrant, base_dir: Path) -> None:
        self.grant = grant
        self.base_dir = base_dir
        self._sessions: dict[str, _Session] = {}

    async def __aenter__(self) -> Servers:
        await on_home(self._take_parked())
        return self

    async def __aexit__(self, *_: object) -> None:
        await on_home(self._stop_all(), detached=True)

    async def _take_parked(self) -> None:
        for name, spec in self.grant.servers.items():
            parked = unpark(_parking_key(name, spec, self.base_dir))
            if isinstance(parked, _Session):
                self._sessions[name] = parked

    async def _stop_all(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.stop() for s in sessions))

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], *, again: bool = False
    ) -> mcp_types.CallToolResult:
        """Call `tool` on `server`, connecting first if need be. `again`: the call may be made
        twice (read-only or idempotent), so if the server dies or breaks off during it (a
        crash another call caused, say), it is made once more on the server started again.

        Raises:
            StepFailed: the server could not start, or died or broke off during the call
                (its next call starts it again).
        """
        try:
            return await on_home(self._call(server, tool, arguments))
        except _BrokeOff as first:
            if not again:
                raise StepFailed(str(first)) from None
        try:
            return await on_home(self._call(server, tool, arguments))
        except _BrokeOff as second:
            raise StepFailed(f"{second} (the second time: it was made again once)") from None

    async def _call(
        self, server: str, tool: str, arguments: dict[str, Any]
    ) -> mcp_types.CallToolResult:
        current = self._sessions.get(server)
        if current is None or current.task.done():
            current = _Session(server, self.grant.servers[server], self.base_dir)
            self._sessions[server] = current
        try:
            connection = await asyncio.wait_for(
                asyncio.shield(current.ready), current.startup_timeout
            )
        except TimeoutError:
            self._forget(server, current)
            await current.stop()
            raise StepFailed(
                f"{FAMILY}.{server}.{tool}: the server did not start within startup_timeout "
                f"({current.startup_timeout:g} s)"
            ) from None
        except ConfigurationError as exc:
            self._forget(server, current)
            hint = exc.hint if isinstance(exc, ServerFailed) and exc.hint else None
            raise StepFailed(
                f"{FAMILY}.{server}.{tool}: {exc}{f'; {hint}' if hint else ''}"
            ) from None
        who = f"{FAMILY}.{server}.{tool}"
        # (a server over HTTP: its files are not in this machine's folders)
        stdio = connection.stdio
        watched = stdio.watched_call(who) if stdio else contextlib.nullcontext()
        try:
            async with watched:
                return await connection.client.call_tool(tool, arguments)
        except CapabilityDenied:
            raise
        except Exception as exc:
            self._forget(server, current)
            why = await connection.failure() or with_tail(describe(exc), connection)
            advice = connection.advice()
            await current.stop()
            raise _BrokeOff(
                f"{FAMILY}.{server}.{tool}: the server broke off the call: {why}"
                + (f"; {advice}" if advice else "")
            ) from None

    def stderr_tail(self, server: str) -> str | None:
        """The last lines of `server`'s stderr, if it is a connected stdio server that
        wrote any: for a call that failed while the server lives on."""
        current = self._sessions.get(server)
        ready = None if current is None else current.ready
        if ready is None or not ready.done() or ready.cancelled() or ready.exception():
            return None
        return ready.result().stderr_tail()

    def _forget(self, server: str, which: _Session) -> None:
        if self._sessions.get(server) is which:
            del self._sessions[server]
