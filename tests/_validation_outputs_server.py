"""An MCP server for tests/test_validation_outputs.py: one tool with an `outputSchema`.

Run as `python _validation_outputs_server.py [MARKER...]` over stdio; the arguments are
ignored (tests pass a unique marker, to find the process in /proc).

Tools:
- `count(text)`, read-only: `{"lines": int, "words": int}`; its `outputSchema` forbids other
  properties (the result model forbids extra keys);
- `echo(text)`, read-only: `{"text": ...}` and whatever else, so its `outputSchema` says
  nothing of other properties.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict

READ_ONLY = ToolAnnotations(read_only_hint=True)


class Count(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lines: int
    words: int


class Echo(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str


def count(text: str) -> Count:
    """Lines and words of `text`."""
    return Count(lines=len(text.splitlines()), words=len(text.split()))


def echo(text: str) -> Echo:
    """`text` back, with its length as an extra property."""
    extra: dict[str, Any] = {"length": len(text)}
    return Echo(text=text, **extra)


def main() -> None:
    server = MCPServer("counter", log_level="WARNING")
    server.add_tool(count, annotations=READ_ONLY)
    server.add_tool(echo, annotations=READ_ONLY)
    server.run()


if __name__ == "__main__":
    main()
