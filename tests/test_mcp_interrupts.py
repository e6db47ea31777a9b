"""Ctrl-C at a terminal while an MCP server works: while it lists its tools (validation) or
during a slow call, once or twice in quick succession, planloom exits 130 at once, prints
no traceback, leaves no server running, and the run (if one began) is not left `running`
in the store.

The pseudo-terminal the tests press Ctrl-C in keeps what planloom wrote (`NOFLSH`): by
default a terminal throws away, at each Ctrl-C, the output it has not yet passed on to its
reader, so a second press that the terminal takes in just after planloom wrote its message
would take the message with it, and a test could not tell what planloom printed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import termios
import time
import uuid
from pathlib import Path

import pexpect
import pytest
from _procs import PLANLOOM, env, gone, pids_with, planloom, until

ROOT = Path(__file__).resolve().parent.parent
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
    return _terminal(PLANLOOM, ["run", "r.yaml"], folder)


def _terminal(program: str, args: list[str], folder: Path) -> pexpect.spawn:
    """`program ARGS` in a pseudo-terminal that keeps all it wrote, Ctrl-C or not."""
    return pexpect.spawn(
        program,
        args,
        cwd=str(folder),
        env=env(TERM="xterm", NO_COLOR="1"),
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 200),
        preexec_fn=_keep_output_on_interrupt,
    )


def _keep_output_on_interrupt() -> None:
    """In the child, on its terminal: Ctrl-C no longer discards the output the terminal
    holds (`NOFLSH`). Without it, a press the terminal handles after planloom wrote
    "planloom: interrupted" and before the terminal passed it on throws the message away
    (about one run in fifty on a machine loaded well past its cores): the test saw `^C^C`
    only, and would not see a traceback either."""
    attributes = termios.tcgetattr(0)
    attributes[3] |= termios.NOFLSH
    termios.tcsetattr(0, termios.TCSANOW, attributes)


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


# A program that writes more than the terminal passes on while nobody reads (its 4 KB line
# buffer), so what it writes next waits in the terminal; on Ctrl-C it says so, and a second
# press ends it.
_WRITER = """\
import pathlib, signal, sys, time

def second(signum, frame):
    sys.exit(130)

def first(signum, frame):
    signal.signal(signal.SIGINT, second)
    sys.stderr.write("\\nwriter: interrupted\\n")
    sys.stderr.flush()
    pathlib.Path("said").touch()

signal.signal(signal.SIGINT, first)
sys.stdout.write("x" * 5000 + "\\n")
sys.stdout.flush()
pathlib.Path("filled").touch()
while True:
    time.sleep(1)
"""


def test_the_terminal_keeps_what_was_written_before_a_second_ctrl_c(tmp_path: Path) -> None:
    """What the tests above read is all planloom wrote: a second press does not discard
    the message a program wrote after the first (the terminal has not passed it on yet:
    here because nobody reads; in the flaky run, because the press came within moments)."""
    (tmp_path / "writer.py").write_text(_WRITER)
    child = _terminal(sys.executable, ["writer.py"], tmp_path)
    try:
        until(lambda: (tmp_path / "filled").exists(), 30, "the writer to fill the terminal")
        child.sendintr()
        until(lambda: (tmp_path / "said").exists(), 30, "the writer's message")
        child.sendintr()
        child.expect(pexpect.EOF, timeout=30)
        child.close()
    finally:
        if child.isalive():
            child.close(force=True)
    assert child.exitstatus == 130, child.before[-200:]
    assert "writer: interrupted" in child.before, child.before[-200:]


# `planloom validate` as the console script runs it, its command pressed Ctrl-C in.
_PRESSED = """\
import os, signal, sys, time
import engine.app.main

def command(args, registry):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)
    return 0

main = sys.modules["engine.app.main"]
main.command_main = lambda name: command
sys.argv = ["planloom", "validate", "r.yaml"]
sys.exit(main.main())
"""


def _sigint(pid: int) -> str | None:
    """What process `pid` does on SIGINT: "caught", "ignored" or "default"; None once it
    has ended."""
    try:
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
    except OSError:
        return None
    if status["State"].split()[0] in ("Z", "X"):
        return None
    bit = 1 << (signal.SIGINT - 1)
    if int(status["SigCgt"], 16) & bit:
        return "caught"
    return "ignored" if int(status["SigIgn"], 16) & bit else "default"


@pytest.mark.slow
def test_a_second_ctrl_c_while_the_interpreter_ends_is_ignored_too() -> None:
    """After the first press, presses are ignored until the process has ended: also once
    the interpreter's finalization has taken back the handlers written in Python (a press
    then ended planloom by SIGINT instead of with 130). The second press comes the moment
    SIGINT is no longer caught."""
    pressed = None
    for _ in range(3):  # a loaded machine may miss the last moments: try again
        child = subprocess.Popen(
            [sys.executable, "-c", _PRESSED],
            cwd=ROOT,
            env=env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        caught = False
        while (now := _sigint(child.pid)) is not None:
            caught = caught or now == "caught"
            if caught and now != "caught":
                os.kill(child.pid, signal.SIGINT)
                pressed = now
                break
        _, stderr = child.communicate(timeout=60)
        if pressed is not None:
            break
    assert pressed is not None, "planloom ended before a second press could reach it"
    assert child.returncode == 130, (child.returncode, pressed, stderr)
    assert stderr.endswith("\nplanloom: interrupted\n"), stderr
