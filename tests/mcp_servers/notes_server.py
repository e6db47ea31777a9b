"""A small MCP server for the MCP tests: notes kept in `notes.txt` in its working folder.

Run as `python notes_server.py [--http PORT] [MARKER...]`: over stdio by default, else as
streamable HTTP on 127.0.0.1:PORT at `/mcp`. Extra arguments are ignored; tests pass a unique
marker so they can find the process in /proc.

Tools:
- `search(query, limit=5)`, read-only, structured output `{"query", "hits": [...]}`; its
  input schema forbids unknown keys;
- `add_note(text)`, side effects (no annotations): appends a line to notes.txt;
- `delete_all()`, destructive: removes notes.txt;
- `fail(message)`: an `isError` result carrying `message`;
- `crash()`: the process exits mid-call; `hang()`: never returns;
- `write_outside(path)`, `connect(port)`: try to leave the sandbox (a file, a TCP connection);
- `whoami()`: the SHA-256 of the Authorization header the call came with (HTTP).
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations

NOTES = Path("notes.txt")
READ_ONLY = ToolAnnotations(read_only_hint=True)


def _notes() -> list[str]:
    return NOTES.read_text(encoding="utf-8").splitlines() if NOTES.exists() else []


def search(query: str, limit: int = 5) -> dict[str, Any]:
    """Notes that contain `query` (case-insensitive), at most `limit` of them."""
    hits = [line for line in _notes() if query.lower() in line.lower()]
    return {"query": query, "hits": hits[:limit]}


def add_note(text: str) -> str:
    """Append a note to notes.txt."""
    with NOTES.open("a", encoding="utf-8") as notes:
        notes.write(text + "\n")
    return f"noted: {text}"


def delete_all() -> str:
    """Remove every note."""
    NOTES.unlink(missing_ok=True)
    return "all notes deleted"


def fail(message: str) -> str:
    """Fail with `message`."""
    raise ToolError(message)


def crash() -> str:
    """Exit the server process in the middle of the call."""
    sys.stdout.flush()
    os._exit(1)


async def hang() -> str:
    """Never return."""
    await anyio.sleep_forever()
    return "unreachable"


def write_outside(path: str) -> str:
    """Write a file at `path`, wherever that is."""
    try:
        Path(path).write_text("escaped\n", encoding="utf-8")
    except OSError as exc:
        raise ToolError(f"cannot write {path}: {exc}") from exc
    return f"wrote {path}"


def connect(port: int) -> str:
    """Open a TCP connection to 127.0.0.1:`port` and send a line."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as conn:
            conn.sendall(b"hello from the notes server\n")
    except OSError as exc:
        raise ToolError(f"cannot connect to 127.0.0.1:{port}: {exc}") from exc
    return f"connected to 127.0.0.1:{port}"


def whoami(ctx: Context) -> dict[str, Any]:
    """The SHA-256 (hex) of the Authorization header this call came with, or null."""
    headers = ctx.headers or {}
    value = headers.get("authorization")
    digest = hashlib.sha256(value.encode()).hexdigest() if value is not None else None
    return {"header_sha256": digest}


def build() -> MCPServer:
    strict_search = Tool.from_function(search, annotations=READ_ONLY)
    strict_search.parameters["additionalProperties"] = False
    server = MCPServer("notes", tools=[strict_search], log_level="WARNING")
    server.add_tool(add_note)
    server.add_tool(delete_all, annotations=ToolAnnotations(destructive_hint=True))
    server.add_tool(fail)
    server.add_tool(crash)
    server.add_tool(hang)
    server.add_tool(write_outside)
    server.add_tool(connect)
    server.add_tool(whoami, annotations=READ_ONLY)
    return server


def main(argv: list[str]) -> None:
    server = build()
    if "--http" in argv:
        port = int(argv[argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
