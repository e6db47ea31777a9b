"""The confined stdio transport: a real SDK server, run by the launcher, over its pipes.

The server (`data/mcp_stdio/server.py`) runs under the venv's python (its link, so that it
finds the venv's packages) with the same layers as a `shell.run` child: these tests show
it can talk, cannot write outside its folder or reach the network, leaves no process
behind, and that its end, however it comes, fails calls at once with a clear reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from _procs import gone, marker_seconds, pids_with
from mcp import Client, MCPError

from capabilities import shell
from capabilities.confine.scratch import pids_cgroup_base
from capabilities.mcp._stdio import MAX_LINE, ConfinedStdio, StdioLaunch
from engine.errors import CapabilityDenied, ConfigurationError

SERVER_DIR = Path(__file__).parent / "data" / "mcp_stdio"
SERVER = SERVER_DIR / "server.py"
PYTHON = sys.executable  # the venv's link, not its target: the venv's packages come with it
_LAYERS = shell.confinement_report()
FAST = 5.0  # seconds: "at once", with room for a loaded machine


def _need(layer: str) -> None:
    state = _LAYERS.get(layer, "unavailable: not reported")
    if not state.startswith("active"):
        pytest.skip(f"the {layer} layer is unavailable here: {state}")


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique argument for the server (and its `sleep`); whatever carries it is killed."""
    value = marker_seconds(600)
    yield value
    for pid in pids_with(value, whole_argument=True):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def recipe_dir(tmp_path: Path) -> Path:
    """A recipe's folder (the server's cwd), inside a parent folder of its own."""
    folder = tmp_path / "recipes" / "demo"
    folder.mkdir(parents=True)
    return Path(os.path.realpath(folder))


def _launch(
    cwd: Path,
    marker: str,
    *,
    argv: list[str] | None = None,
    network: bool = False,
    protected: list[str] | None = None,
) -> StdioLaunch:
    return StdioLaunch(
        server="probe",
        argv=argv if argv is not None else [PYTHON, str(SERVER), marker],
        cwd=str(cwd),
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8"},
        network=network,
        reads=(sys.prefix, os.path.realpath(sys.base_prefix), str(SERVER_DIR)),
        rlimits={"as": 2 * 1024**3, "fsize": 1024**3, "nproc": 256, "core": 0},
        max_processes=64,
        protected=protected if protected is not None else [],
    )


_T = TypeVar("_T")


def _run(scenario: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    return asyncio.run(scenario())


def _connection_closed(caught: pytest.ExceptionInfo[BaseException]) -> bool:
    """Whether the failure is the SDK's "Connection closed" (alone or in a task group's)."""
    if isinstance(caught.value, MCPError):
        return "Connection closed" in str(caught.value)
    return caught.group_contains(MCPError, match="Connection closed", depth=None)


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def test_round_trip_and_layers(recipe_dir: Path, marker: str) -> None:
    transport = ConfinedStdio(_launch(recipe_dir, marker))

    async def scenario() -> tuple[list[str], str]:
        async with Client(transport) as client:
            tools = await client.list_tools()
            result = await client.call_tool("echo", {"text": "hello"})
            assert not result.is_error
            assert transport.failure() is None
            return [tool.name for tool in tools.tools], _text(result)

    names, echoed = _run(scenario)
    assert {"echo", "write", "connect", "crash", "spawn_child"} <= set(names)
    assert echoed == "hello"
    assert transport.pid is not None
    layers = transport.layers
    for layer in ("landlock", "user_namespace", "pid_namespace", "network_namespace"):
        assert layer in layers, layers
        # Whatever the machine offers `shell.run`, the server gets too.
        assert layers[layer].startswith("active") == _LAYERS[layer].startswith("active")


def test_writes_only_beneath_its_folder(recipe_dir: Path, tmp_path: Path, marker: str) -> None:
    _need("landlock")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = [elsewhere / "escaped.txt", recipe_dir.parent / "escaped.txt"]
    inside = recipe_dir / "notes" / "kept.txt"
    inside.parent.mkdir()

    async def scenario() -> list[Any]:
        async with Client(ConfinedStdio(_launch(recipe_dir, marker))) as client:
            return [
                await client.call_tool("write", {"path": str(path), "text": "x"})
                for path in [inside, *outside]
            ]

    kept, *refused = _run(scenario)
    assert not kept.is_error
    assert inside.read_text() == "x"
    for path, result in zip(outside, refused, strict=True):
        assert result.is_error, _text(result)
        assert "Permission denied" in _text(result)
        assert not path.exists()


def test_protected_entries_stay_read_only_and_new_ones_are_removed(
    recipe_dir: Path, marker: str
) -> None:
    _need("mount_namespace")
    _need("protected_paths")
    config = recipe_dir / ".git" / "config"
    config.parent.mkdir()
    config.write_text("[core]\n")
    created = recipe_dir / ".env"
    results: list[Any] = []

    async def scenario() -> None:
        async with Client(ConfinedStdio(_launch(recipe_dir, marker))) as client:
            for path in (config, created):
                results.append(await client.call_tool("write", {"path": str(path), "text": "x"}))

    with pytest.raises(CapabilityDenied) as denied:
        _run(scenario)
    hook, new = results
    assert hook.is_error
    assert "Read-only file system" in _text(hook)
    assert config.read_text() == "[core]\n"
    assert not new.is_error  # the folder is writable, so it could be made...
    assert not created.exists()  # ...and is removed once the server has stopped
    assert denied.value.rule == "mcp.protected"
    assert "created '.env' (removed)" in str(denied.value)


def test_protected_entries_the_launch_opens_are_kept(recipe_dir: Path, marker: str) -> None:
    created = recipe_dir / ".env"

    async def scenario() -> Any:
        launch = _launch(recipe_dir, marker, protected=[".env"])
        async with Client(ConfinedStdio(launch)) as client:
            return await client.call_tool("write", {"path": str(created), "text": "A=1"})

    assert not _run(scenario).is_error
    assert created.read_text() == "A=1"


@pytest.mark.slow
@pytest.mark.parametrize("network", [False, True])
def test_network_only_when_allowed(recipe_dir: Path, marker: str, network: bool) -> None:
    if not network:
        _need("network_namespace")
        _need("landlock")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]

        async def scenario() -> Any:
            launch = _launch(recipe_dir, marker, network=network)
            async with Client(ConfinedStdio(launch)) as client:
                return await client.call_tool("connect", {"port": port})

        result = _run(scenario)
        listener.settimeout(0.2)
        if network:
            assert not result.is_error, _text(result)
            assert _text(result) == "connected"
            listener.accept()[0].close()
        else:
            assert result.is_error
            assert "cannot connect" in _text(result)
            with pytest.raises(TimeoutError):
                listener.accept()


@pytest.mark.slow
def test_nothing_outlives_the_connection(recipe_dir: Path, marker: str) -> None:
    transport = ConfinedStdio(_launch(recipe_dir, marker))

    async def scenario() -> str:
        async with Client(transport) as client:
            result = await client.call_tool("spawn_child", {})
            assert not result.is_error, _text(result)
            # The server and its `setsid` grandchild both carry the marker.
            assert len(pids_with(marker, whole_argument=True)) == 2
            scratch = await client.call_tool("scratch", {})
            assert not scratch.is_error, _text(scratch)  # it wrote a file there
            return _text(scratch)

    tmpdir = _run(scenario)
    assert pids_with(marker, whole_argument=True) == []
    assert transport.pid is not None
    assert not Path(f"/proc/{transport.pid}").exists()  # the launcher is reaped too
    assert transport.failure() is not None
    assert not Path(tmpdir).exists()
    assert _our_cgroups() == []


def _our_cgroups(pid: int | None = None) -> list[str]:
    """The pids cgroups of the engine `pid` (this process by default) that still exist."""
    base, _ = pids_cgroup_base()
    if base is None:
        return []
    return [str(path) for path in Path(base).glob(f"planloom-{pid or os.getpid()}-*")]


@pytest.mark.slow
def test_a_killed_engine_takes_the_server_down(recipe_dir: Path, marker: str) -> None:
    """`kill -9` of the process holding the connection: the parent-death chain ends all."""
    holder = subprocess.Popen(
        [PYTHON, str(SERVER_DIR / "hold.py"), str(recipe_dir), marker],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert holder.stdout is not None
        ready = select.select([holder.stdout], [], [], 30)[0]
        assert ready, "the holder did not start its server"
        assert holder.stdout.readline().strip() == "ready"
        # The server and its grandchild (the holder carries the marker too).
        assert len(set(pids_with(marker, whole_argument=True)) - {holder.pid}) == 2
        holder.kill()
        holder.wait(timeout=10)
        assert gone(lambda: pids_with(marker, whole_argument=True), within=FAST)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)
        if holder.stdout is not None:
            holder.stdout.close()
        # What the killed holder left: the next engine's start would sweep it.
        for folder in Path(tempfile.gettempdir()).glob(f"planloom-shell-{holder.pid}-*"):
            shutil.rmtree(folder, ignore_errors=True)
        for cgroup in _our_cgroups(holder.pid):
            with contextlib.suppress(OSError):
                os.rmdir(cgroup)


@pytest.mark.slow
def test_cancelled_mid_call_leaves_nothing(recipe_dir: Path, marker: str) -> None:
    async def hang() -> None:
        async with asyncio.timeout(1.5):
            async with Client(ConfinedStdio(_launch(recipe_dir, marker))) as client:
                await client.call_tool("spawn_child", {})
                await client.call_tool("pause", {"seconds": 600})

    async def scenario() -> float:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await hang()
        return time.monotonic() - started

    assert _run(scenario) < 1.5 + FAST
    assert pids_with(marker, whole_argument=True) == []


@pytest.mark.slow
def test_crash_mid_call_fails_at_once(recipe_dir: Path, marker: str) -> None:
    transport = ConfinedStdio(_launch(recipe_dir, marker))

    async def scenario() -> float:
        async with Client(transport) as client:
            started = time.monotonic()
            with pytest.raises(MCPError, match="Connection closed"):
                await client.call_tool("crash", {})
            return time.monotonic() - started

    assert _run(scenario) < FAST
    failure = transport.failure() or ""
    assert failure.startswith("exited with code 3; last lines of its stderr:\n")
    assert failure.endswith("probe: crashing on purpose")


def test_a_line_past_the_cap_ends_the_connection(recipe_dir: Path, marker: str) -> None:
    transport = ConfinedStdio(_launch(recipe_dir, marker))

    async def scenario() -> None:
        async with Client(transport) as client:
            with pytest.raises(MCPError, match="Connection closed"):
                await client.call_tool("flood", {"size": MAX_LINE + 1024**2})
            assert gone(lambda: pids_with(marker, whole_argument=True), within=FAST)

    _run(scenario)
    assert (transport.failure() or "").startswith("sent a message line longer than 16 MiB")


@pytest.mark.parametrize("kind", ["missing", "not executable"])
def test_a_program_that_cannot_run_fails_fast(recipe_dir: Path, marker: str, kind: str) -> None:
    program = recipe_dir / "server"
    if kind == "not executable":
        program.write_text("#!/bin/sh\n")
        program.chmod(0o644)
    transport = ConfinedStdio(_launch(recipe_dir, marker, argv=[str(program)]))

    async def scenario() -> tuple[float, pytest.ExceptionInfo[BaseException]]:
        started = time.monotonic()
        with pytest.raises((MCPError, BaseExceptionGroup)) as caught:
            async with Client(transport):
                pass
        return time.monotonic() - started, caught

    elapsed, caught = _run(scenario)
    assert elapsed < FAST
    assert _connection_closed(caught)
    failure = transport.failure() or ""
    why = "No such file or directory" if kind == "missing" else "Permission denied"
    assert failure.startswith(f"cannot execute {program}: {why}; last lines of its stderr:")


def test_a_server_that_dies_at_start_shows_its_stderr(recipe_dir: Path, marker: str) -> None:
    script = recipe_dir / "broken.py"
    script.write_text("def broken(:\n    pass\n")
    transport = ConfinedStdio(_launch(recipe_dir, marker, argv=[PYTHON, str(script)]))

    async def scenario() -> pytest.ExceptionInfo[BaseException]:
        with pytest.raises((MCPError, BaseExceptionGroup)) as caught:
            async with Client(transport):
                pass
        return caught

    assert _connection_closed(_run(scenario))
    failure = transport.failure() or ""
    assert failure.startswith("exited with code 1;")
    assert "SyntaxError" in failure
    assert "broken.py" in failure


def test_a_launcher_that_cannot_start_is_a_configuration_error(tmp_path: Path, marker: str) -> None:
    transport = ConfinedStdio(_launch(tmp_path / "gone", marker))

    async def scenario() -> None:
        async with transport:
            pass

    with pytest.raises(ConfigurationError, match=r"MCP server 'probe': cannot start"):
        _run(scenario)
    assert transport.pid is None
