"""Ctrl-C at a terminal while an MCP server works: while it lists its tools (validation) or
during a slow call, once or twice in quick succession, planloom exits 130 at once, prints
no traceback, leaves no server running, and the run (if one began) is not left `running`
in the store.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path

import pexpect
import pytest
from _procs import PLANLOOM, env, gone, pids_with, planloom, until

SERVER = Path(__file__).parent / "mcp_servers" / "counting_server.py"

RECIPE = """\
version: 1
name: nap
capabilities:
  mcp:
    servers:
      counting:
        command: [python3, servers/counting_server.py, MARKER]
        cwd: .
        tools: [nap]
steps:
  - id: rest
    tool: mcp.counting.nap
    params: {seconds: 60}
    timeout: 120
"""

TRIES = 10


def _project(tmp_path: Path) -> str:
    marker = f"mcp-int-{uuid.uuid4().hex}"
    (tmp_path / "servers").mkdir()
    shutil.copy(SERVER, tmp_path / "servers" / SERVER.name)
    (tmp_path / "r.yaml").write_text(RECIPE.replace("MARKER", marker))
    return marker


def _lines(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _spawn(folder: Path) -> pexpect.spawn:
    return pexpect.spawn(
        PLANLOOM,
        ["run", "r.yaml"],
        cwd=str(folder),
        env=env(TERM="xterm", NO_COLOR="1"),
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 200),
    )


def _stopped(child: pexpect.spawn, presses: int, gap: float) -> tuple[float, str]:
    """Press Ctrl-C `presses` times, `gap` seconds apart; how long planloom took to exit
    after the first press, and what it printed."""
    pressed = time.monotonic()
    for press in range(presses):
        if press:
            time.sleep(gap)
        child.sendintr()
    child.expect(pexpect.EOF, timeout=30)
    took = time.monotonic() - pressed
    child.close()
    return took, child.before


def _statuses(folder: Path) -> list[str]:
    listed = planloom("runs", "--json", cwd=folder)
    assert listed.returncode == 0, listed.stderr
    return [run["status"] for run in json.loads(listed.stdout)]


@pytest.mark.slow
def test_two_ctrl_c_during_a_slow_call_exit_130_at_once_ten_times(tmp_path: Path) -> None:
    marker = _project(tmp_path)
    for attempt in range(TRIES):
        child = _spawn(tmp_path)
        try:
            naps = tmp_path / "naps.log"
            until(lambda n=attempt, log=naps: _lines(log) > n, 30, "the call to be in flight")
            took, printed = _stopped(child, presses=2, gap=0.1)
        finally:
            if child.isalive():
                child.close(force=True)
        assert child.exitstatus == 130, (attempt, printed)
        assert took < 2.0, (attempt, took, printed)
        assert "Traceback" not in printed, (attempt, printed)
        assert "exception was never retrieved" not in printed, (attempt, printed)
        assert gone(lambda: pids_with(marker), within=5), (attempt, "a server outlived planloom")
    # stopped at once (the second press lands while the first one's cancel is under way):
    # never left `running`, and not a run that ended `cancelled` in peace
    assert _statuses(tmp_path) == ["interrupted"] * TRIES


@pytest.mark.slow
@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_while_a_server_lists_its_tools_exits_130_without_a_traceback(
    tmp_path: Path, presses: int
) -> None:
    marker = _project(tmp_path)
    child = _spawn(tmp_path)
    try:
        # The server writes starts.log as it starts, before it speaks MCP: validation is
        # waiting for its tool list.
        until(lambda: _lines(tmp_path / "starts.log") == 1, 30, "the server to start")
        took, printed = _stopped(child, presses=presses, gap=0.0)
    finally:
        if child.isalive():
            child.close(force=True)
    assert child.exitstatus == 130, printed
    assert "planloom: interrupted" in printed
    assert "Traceback" not in printed, printed
    assert took < 2.0, (took, printed)
    assert gone(lambda: pids_with(marker), within=5), "the server outlived planloom"
    assert _statuses(tmp_path) == []  # no run began
