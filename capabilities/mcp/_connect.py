"""Starting or reaching one MCP server: its launch (checked), a connected client, and words
for how it failed.

A stdio server's program is resolved (planloom's own bin folder first, so `python3` is the
interpreter planloom runs on; then a fixed safe PATH; or a path relative to the recipe
folder) and started confined by `_stdio.ConfinedStdio`. An HTTP server is reached
through a client pinned to its checked address (`_http`). Both speak MCP through the
SDK's `mcp.Client`. A server whose stderr says it could not read its own files
(`_unreadable`) fails with the folder to add to its `read_paths`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from capabilities.confine.env import SAFE_PATH, is_refused_env
from capabilities.mcp._http import checked_client
from capabilities.mcp._models import Server, StdioServer
from capabilities.mcp._stdio import ConfinedStdio, StdioLaunch
from capabilities.mcp._unreadable import read_paths_advice
from engine.errors import ConfigurationError

__all__ = ["Connection", "ServerFailed", "describe", "session", "stdio_launch", "with_tail"]

_CLIENT = mcp_types.Implementation(name="planloom", version="0.1.0")
_FAILURE_POLLS, _FAILURE_POLL = 20, 0.025  # how long to wait for a dead server's exit report


def _bin_path() -> str:
    return f"{os.path.dirname(os.path.abspath(sys.executable))}:{SAFE_PATH}"


def _program(command: str, base_dir: Path, name: str) -> str:
    """The program's absolute path (not resolved through symlinks: a venv's python must
    stay the venv's, to find its packages).

    Raises:
        ConfigurationError: not found, or not an executable file.
    """
    if "/" in command:
        path = os.path.normpath(os.path.join(base_dir, command))
        candidates = [path]
    else:
        candidates = [os.path.join(folder, command) for folder in _bin_path().split(":")]
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    where = f"at {candidates[0]}" if "/" in command else f"in planloom's bin folder or {SAFE_PATH}"
    raise ConfigurationError(
        f"MCP server '{name}': program {command!r} is not an executable file {where}"
    )


def stdio_launch(name: str, spec: StdioServer, base_dir: Path) -> StdioLaunch:
    """How to start a stdio server, checked.

    Raises:
        ConfigurationError: a missing program or folder, or a refused variable.
    """
    cwd = os.path.realpath(os.path.join(base_dir, spec.cwd))
    if not os.path.isdir(cwd):
        raise ConfigurationError(f"MCP server '{name}': cwd {spec.cwd!r} is not a folder")
    refused = sorted(key for key in spec.env if is_refused_env(key))
    if refused:
        raise ConfigurationError(
            f"MCP server '{name}': env names variables that are never passed to programs "
            f"({', '.join(refused)}): loader, interpreter and shell hooks, search paths and "
            "secret-looking names; remove them"
        )
    program = _program(spec.command[0], base_dir, name)
    reads = {
        os.path.realpath(sys.prefix),
        os.path.realpath(sys.base_prefix),
        os.path.dirname(program),
        os.path.dirname(os.path.realpath(program)),
        *(os.path.realpath(os.path.join(base_dir, extra)) for extra in spec.read_paths),
    }
    env = {"PATH": _bin_path(), "HOME": cwd, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env.update(spec.env)
    return StdioLaunch(
        server=name,
        argv=[program, *spec.command[1:]],
        cwd=cwd,
        env=env,
        network=spec.network,
        reads=tuple(sorted(reads)),
        rlimits={
            "as": spec.max_memory,
            "fsize": spec.max_file_size,
            "nproc": spec.max_processes,
            "core": 0,
        },
        max_processes=spec.max_processes,
        protected=list(spec.protected),
    )


class ServerFailed(ConfigurationError):
    """A server could not start or be listed; `hint`, when known, says how to fix it
    (its program's files are not readable in its sandbox: which folder to add)."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def _advice(stdio: ConfinedStdio | None, base_dir: Path) -> str | None:
    """What to add to `read_paths`, if the server's stderr says it could not read its own
    files."""
    folder = stdio.unreadable() if stdio is not None else None
    return None if folder is None else read_paths_advice(folder, base_dir)


@dataclass(frozen=True)
class Connection:
    """A connected client, and (for a stdio server) its process's account of its end."""

    client: Client
    stdio: ConfinedStdio | None
    base_dir: Path

    def advice(self) -> str | None:
        """What to add to `read_paths`, if the server could not read its own files."""
        return _advice(self.stdio, self.base_dir)

    def stderr_tail(self) -> str | None:
        """The last lines of a stdio server's stderr, None if it wrote none (or is not one)."""
        if self.stdio is None or not self.stdio.has_stderr():
            return None
        return self.stdio.stderr_tail()

    async def failure(self) -> str | None:
        """Why the server is gone, once its launcher has said (waits a moment for it)."""
        if self.stdio is None:
            return None
        for _ in range(_FAILURE_POLLS):
            why = self.stdio.failure()
            if why is not None:
                return why
            await asyncio.sleep(_FAILURE_POLL)
        return None


@contextlib.asynccontextmanager
async def session(name: str, spec: Server, base_dir: Path) -> AsyncIterator[Connection]:
    """A connected, initialised client for one server; leaving it stops the server.

    Raises:
        ConfigurationError: the server cannot be started or reached, or answers wrongly;
            the message says which and, for a stdio server, shows its stderr.
    """
    stdio: ConfinedStdio | None = None
    async with contextlib.AsyncExitStack() as stack:
        try:
            if isinstance(spec, StdioServer):
                stdio = ConfinedStdio(stdio_launch(name, spec, base_dir))
                transport: Any = stdio
            else:
                http = await checked_client(spec, name, spec.startup_timeout)
                stack.push_async_callback(http.aclose)
                transport = streamable_http_client(spec.url, http_client=http)
            client = Client(transport, client_info=_CLIENT, cache=None)
            await stack.enter_async_context(client)
        except ConfigurationError:
            raise
        except Exception as exc:  # the SDK's and the transport's many ways to fail
            message = _cannot_start(name, spec, exc, stdio)
            raise ServerFailed(message, _advice(stdio, base_dir)) from None
        yield Connection(client, stdio, base_dir)


def _cannot_start(name: str, spec: Server, exc: BaseException, stdio: ConfinedStdio | None) -> str:
    what = "start" if isinstance(spec, StdioServer) else f"reach {spec.url}"
    detail = describe(exc)
    why = stdio.failure() if stdio is not None else None
    if why:
        return f"MCP server '{name}' did not start: {why}"
    return f"MCP server '{name}': could not {what}: {detail}"


def with_tail(why: str, connection: Connection) -> str:
    """`why`, with the end of the server's stderr when it wrote any."""
    tail = connection.stderr_tail()
    return why if tail is None else f"{why}; last lines of its stderr:\n{tail}"


def describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
