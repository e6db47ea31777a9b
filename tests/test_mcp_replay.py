"""Recording and replaying MCP calls, end to end: a run recorded against the live notes
server (and a scripted model behind `FakeOpenAIServer`) replays with the server's script
deleted and no model up.

Shown here (the README's "MCP servers", "Record and replay"): `planloom replay`
and `planloom run --replay` reproduce the recorded statuses, outputs and usage, start no
server and make no side effect; a changed side-effect call is not served from the cassette.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from _procs import TIMEOUT, start
from mcp_servers.project import Project, make_project, no_traceback

from engine.recording.cassette import Cassette
from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ScriptedModel, ToolCall

RECIPE = """
version: 1
name: notes-replay
llm: {model: scripted}
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        tools: [search, add_note]
steps:
  - id: find
    tool: mcp.notes.search
    params: {query: release}
  - id: save
    tool: mcp.notes.add_note
    params: {text: "${{ steps.find.output.structured.hits | length }} release notes"}
  - id: scribe
    agent: {goal: "How many notes mention lunch?", tools: [mcp.notes.search], max_iterations: 3}
outputs:
  hits: ${{ steps.find.output.structured.hits }}
  saved: ${{ steps.save.output.structured.result }}
  answer: ${{ steps.scribe.output }}
"""


def lunch(request: ChatRequest) -> ChatReply | str:
    """Searches for lunch, then says whether the search found the lunch note."""
    results = request.tool_results()
    if not results:
        return ChatReply(tool_calls=[ToolCall("mcp__notes__search", {"query": "lunch"}, id="c1")])
    return "one lunch note" if "lunch at noon" in results[-1][1] else "no lunch note"


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """What a replay reproduces: all but the step durations (a cassette holds no times)."""
    steps = {
        step_id: {k: v for k, v in step.items() if k != "duration"}
        for step_id, step in result["steps"].items()
    }
    return {"steps": steps, **{k: result[k] for k in ("status", "outputs", "usage")}}


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, dict[str, Any]]:
    """The recipe recorded to c.yaml once, then the server's folder deleted."""
    project = make_project(tmp_path_factory.mktemp("recording"))
    project.write(RECIPE)
    with FakeOpenAIServer(ScriptedModel(lunch)) as server:
        proc, result = project.run_json(
            "r.yaml", "--base-url", server.base_url, "--record", "c.yaml", "--yes"
        )
    assert proc.returncode == 0, proc.stderr
    assert result["status"] == "succeeded"
    assert result["outputs"]["saved"] == "noted: 2 release notes"
    assert result["outputs"]["hits"] == ["release on friday", "release notes drafted"]
    assert result["outputs"]["answer"] == "one lunch note"
    assert project.notes().endswith("2 release notes\n")
    shutil.rmtree(project.root / "servers")
    return project, result


@pytest.fixture
def recorded(
    recording: tuple[Project, dict[str, Any]], tmp_path: Path
) -> tuple[Project, dict[str, Any]]:
    """A copy of the recorded folder (elsewhere: a cassette does not depend on its path)."""
    original, result = recording
    root = Path(shutil.copytree(original.root, tmp_path / "copy"))
    return Project(root, original.marker), result


def watched(project: Project, *args: str) -> tuple[subprocess.CompletedProcess[str], set[int]]:
    """Run `planloom ARGS` while watching /proc for the project's servers; those seen."""
    seen: set[int] = set()
    with start(*args, cwd=project.root) as process:
        deadline = time.monotonic() + TIMEOUT
        while process.poll() is None:
            seen.update(project.servers_alive())
            assert time.monotonic() < deadline, "planloom did not finish"
            time.sleep(0.01)
        stdout, stderr = process.communicate()
    proc = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    no_traceback(proc)
    return proc, seen


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [["replay", "c.yaml", "--json"], ["run", "r.yaml", "--replay", "c.yaml", "--json"]],
    ids=["replay", "run-replay"],
)
def test_a_replay_reproduces_the_run_without_starting_the_server(
    recorded: tuple[Project, dict[str, Any]], command: list[str]
) -> None:
    project, original = recorded
    notes = project.notes()

    proc, servers = watched(project, *command)

    assert servers == set(), "a replay started the MCP server"
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert comparable(result) == comparable(original)
    assert result["replay"]["mismatches"] == []
    assert result["replay"]["unused"] == []
    assert project.notes() == notes, "a replay made a side effect"


@pytest.mark.slow
def test_a_changed_side_effect_call_is_not_served_from_the_cassette(
    recorded: tuple[Project, dict[str, Any]],
) -> None:
    project, _ = recorded
    notes = project.notes()
    recipe = project.root / "r.yaml"
    recipe.write_text(
        recipe.read_text(encoding="utf-8").replace("release notes", "notes about releases"),
        encoding="utf-8",
    )

    proc, servers = watched(project, "run", "r.yaml", "--replay", "c.yaml", "--json")

    assert servers == set()
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["steps"]["find"]["status"] == "succeeded"
    assert result["steps"]["save"]["status"] == "failed"
    assert "save" in proc.stderr
    assert project.notes() == notes


SIDE_EFFECT = """
version: 1
name: notes-forged
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        tools: [search, add_note]
steps:
  - id: save
    tool: mcp.notes.add_note
    params: {text: recorded once}
"""


@pytest.mark.slow
def test_a_listing_forged_to_call_a_tool_read_only_cannot_run_it_live(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    project.write(SIDE_EFFECT)
    proc, _ = project.run_json("r.yaml", "--record", "c.yaml", "--yes")
    assert proc.returncode == 0, proc.stderr
    before = project.notes()
    cassette = Cassette.load(project.root / "c.yaml")
    (listing,) = cassette.listings
    for tool in listing.listing["servers"]["notes"]["tools"]:
        tool["read_only"] = True  # the hand edit: every tool "read-only"
    cassette.save(project.root / "c.yaml")

    # --live-tools runs read-only tools live: the servers are asked, not the cassette
    proc = project.planloom("replay", "c.yaml", "--live-tools", "--json")

    assert project.notes() == before, "a forged listing let a side effect run live, ungated"
    result = json.loads(proc.stdout)
    assert result["steps"]["save"]["status"] == "succeeded"  # served from the recording
    assert [a["by"] for a in result["approvals"]] == ["recorded"]
