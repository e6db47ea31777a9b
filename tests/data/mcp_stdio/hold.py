"""Holds a confined MCP server open until killed, standing in for an engine killed with -9.

Arguments: the server's folder and a marker. Prints "ready" once the server has started
its detached grandchild, then sleeps.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp import Client

from capabilities.mcp._stdio import ConfinedStdio, StdioLaunch

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.realpath(sys.base_prefix)


async def main(cwd: str, marker: str) -> None:
    launch = StdioLaunch(
        server="probe",
        argv=[sys.executable, os.path.join(HERE, "server.py"), marker],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": cwd, "LANG": "C.UTF-8"},
        network=False,
        reads=(sys.prefix, BASE, HERE),
        rlimits={"as": 2 * 1024**3, "fsize": 1024**3, "nproc": 256, "core": 0},
        max_processes=64,
        protected=[],
    )
    async with Client(ConfinedStdio(launch)) as client:
        await client.call_tool("spawn_child", {})
        print("ready", flush=True)
        await asyncio.sleep(600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
