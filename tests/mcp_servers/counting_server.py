"""A tiny MCP server that counts its starts: each start appends a line to `starts.log` in
its working folder, before it speaks MCP on stdin/stdout.

Tools: `echo(text)`, read-only, answers `text`; `nap(seconds)`, read-only, answers "rested"
after `seconds` (a line in `naps.log` says a nap began); `crash(after)`, with side effects,
exits the server `after` seconds into the call (a call of another tool may be in flight).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations


def echo(text: str) -> str:
    """Answer `text`."""
    return text


async def nap(seconds: float) -> str:
    """Answer "rested" after `seconds` (a line in `naps.log` says a nap began)."""
    async with await anyio.open_file("naps.log", "a", encoding="utf-8") as log:
        await log.write(f"{seconds}\n")
    await anyio.sleep(seconds)
    return "rested"


async def crash(after: float) -> str:
    """Exit the server `after` seconds into the call."""
    await anyio.sleep(after)
    sys.stdout.flush()
    os._exit(1)


def main() -> None:
    with Path("starts.log").open("a", encoding="utf-8") as log:
        log.write(f"{os.getpid()}\n")
    server = MCPServer("counting", log_level="WARNING")
    server.add_tool(echo, annotations=ToolAnnotations(read_only_hint=True))
    server.add_tool(nap, annotations=ToolAnnotations(read_only_hint=True))
    server.add_tool(crash)
    server.run()


if __name__ == "__main__":
    main()
