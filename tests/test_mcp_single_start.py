"""A stdio MCP server is started once per `planloom run`: the server started to list its
tools at validation serves the run's calls too, instead of a second start (each start of a
Python MCP server costs about a second). The server (`tests/mcp_servers/counting_server.py`)
appends a line to `starts.log` each time it starts; no server outlives the command.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
from _procs import gone, pids_with, planloom

SERVER = Path(__file__).parent / "mcp_servers" / "counting_server.py"

RECIPE = """\
version: 1
name: count-starts
capabilities:
  mcp:
    servers:
      counting:
        command: [python3, servers/counting_server.py, MARKER]
        cwd: .
        tools: [echo]
steps:
  - id: say
    tool: mcp.counting.echo
    params: {text: hello}
  - id: again
    tool: mcp.counting.echo
    params: {text: "${{ steps.say.output.content[0].text }} again"}
  - id: never
    when: ${{ false }}
    tool: mcp.counting.echo
    params: {text: unused}
outputs:
  said: ${{ steps.again.output.content[0].text }}
"""


def project(tmp_path: Path) -> tuple[Path, str]:
    """A recipe folder with the counting server; the marker on the server's command line."""
    marker = f"mcp-count-{uuid.uuid4().hex}"
    (tmp_path / "servers").mkdir()
    shutil.copy(SERVER, tmp_path / "servers" / SERVER.name)
    (tmp_path / "r.yaml").write_text(RECIPE.replace("MARKER", marker))
    return tmp_path, marker


def starts(folder: Path) -> int:
    log = folder / "starts.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.slow
def test_a_run_starts_its_stdio_server_once(tmp_path: Path) -> None:
    folder, marker = project(tmp_path)

    proc = planloom("run", "r.yaml", "--json", cwd=folder)

    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    result = json.loads(proc.stdout)
    assert result["outputs"] == {"said": "hello again"}
    assert result["steps"]["never"]["status"] == "skipped"
    assert starts(folder) == 1, "the server was started again after its tools were listed"
    assert gone(lambda: pids_with(marker), within=5), "the server outlived the run"


@pytest.mark.slow
def test_validate_starts_the_server_once_and_leaves_none_running(tmp_path: Path) -> None:
    folder, marker = project(tmp_path)

    proc = planloom("validate", "r.yaml", cwd=folder)

    assert proc.returncode == 0, proc.stderr
    assert starts(folder) == 1
    assert gone(lambda: pids_with(marker), within=5), "a listed server outlived validate"


@pytest.mark.slow
def test_a_run_with_an_invalid_step_stops_the_listed_server(tmp_path: Path) -> None:
    folder, marker = project(tmp_path)
    text = (folder / "r.yaml").read_text().replace("{text: unused}", "{txt: unused}")
    (folder / "r.yaml").write_text(text)

    proc = planloom("run", "r.yaml", cwd=folder)

    assert proc.returncode == 2, proc.stderr
    assert "txt" in proc.stderr
    assert starts(folder) == 1
    assert gone(lambda: pids_with(marker), within=5), "a listed server outlived the command"


CRASH = """\
version: 1
name: crash-in-flight
on_failure: continue
capabilities:
  mcp:
    servers:
      counting:
        command: [python3, servers/counting_server.py, MARKER]
        cwd: .
        tools: [nap, crash]
steps:
  - id: rest
    tool: mcp.counting.nap
    params: {seconds: 2}
  - id: boom
    tool: mcp.counting.crash
    params: {after: 0.5}
"""


@pytest.mark.slow
def test_a_crash_fails_its_own_call_and_a_read_only_call_in_flight_is_made_again(
    tmp_path: Path,
) -> None:
    """`boom` takes the server down while `rest` waits on it: `rest`, read-only, is made
    again on the server started again; `boom`, with side effects, is not."""
    folder, marker = project(tmp_path)
    (folder / "r.yaml").write_text(CRASH.replace("MARKER", marker))

    proc = planloom("run", "r.yaml", "--yes", "--json", cwd=folder)

    assert "Traceback" not in proc.stderr
    result = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    rest, boom = result["steps"]["rest"], result["steps"]["boom"]
    assert rest["status"] == "succeeded", rest
    assert rest["output"]["content"][0]["text"] == "rested"
    assert boom["status"] == "failed", boom
    assert "the server broke off the call" in boom["error"]
    assert "made again" not in boom["error"]  # a side effect is not made twice
    assert starts(folder) == 2  # listed and called by one, the second for `rest` made again
    assert gone(lambda: pids_with(marker), within=5), "the server outlived the run"
