"""An MCP stdio server for the confined stdio transport's tests.

Its one argument is a marker (a `sleep` duration) that tests look for in /proc; the
grandchild `spawn_child` starts sleeps that long.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("probe")
WIRE = os.dup(1)  # the SDK diverts fd 1 to stderr while it serves; this stays the wire


@server.tool()
def echo(text: str) -> str:
    """Return `text`."""
    return text


@server.tool()
def write(path: str, text: str) -> str:
    """Write `text` to the file `path`."""
    try:
        with open(path, "w") as file:
            file.write(text)
    except OSError as exc:
        raise ToolError(f"cannot write {path}: {exc.strerror}") from exc
    return "ok"


@server.tool()
def connect(port: int) -> str:
    """Open a TCP connection to 127.0.0.1:`port`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return "connected"
    except OSError as exc:
        raise ToolError(f"cannot connect: {exc}") from exc


@server.tool()
def scratch() -> str:
    """Write a file in the private TMPDIR; the folder's path."""
    folder = tempfile.gettempdir()
    with open(os.path.join(folder, "scratch.txt"), "w") as file:
        file.write("x")
    return folder


@server.tool()
def crash() -> str:
    """Write a last word to stderr and exit with code 3 at once."""
    print("probe: crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
def spawn_child() -> int:
    """Start a detached `sleep` (a session of its own, none of our pipes); its pid."""
    child = subprocess.Popen(
        ["sleep", sys.argv[1]],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return child.pid


@server.tool()
def pause(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "done"


@server.tool()
def flood(size: int) -> str:
    """Write `size` bytes without a newline to the wire, under the protocol's feet."""
    data = memoryview(b"x" * size)
    while data:
        data = data[os.write(WIRE, data) :]
    return "flooded"


if __name__ == "__main__":
    server.run("stdio")
