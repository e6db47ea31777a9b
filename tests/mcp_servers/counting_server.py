"""A tiny MCP server that counts its starts: each start appends a line to `starts.log` in
its working folder, before it speaks MCP on stdin/stdout.

Tools: `echo(text)`, read-only, answers `text`.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations


def echo(text: str) -> str:
    """Answer `text`."""
    return text


def main() -> None:
    with Path("starts.log").open("a", encoding="utf-8") as log:
        log.write(f"{os.getpid()}\n")
    server = MCPServer("counting", log_level="WARNING")
    server.add_tool(echo, annotations=ToolAnnotations(read_only_hint=True))
    server.run()


if __name__ == "__main__":
    main()
