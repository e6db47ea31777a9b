"""Agent steps offered MCP tools, end to end: the real `planloom` command in a subprocess, the
notes server started by planloom, and a scripted model behind `FakeOpenAIServer` on
127.0.0.1 in this test process.

Shown here (the README's "MCP servers"): the model sees a step's MCP tools as
`mcp__<server>__<tool>` functions with the tool's input schema; its calls, two in one turn
included, reach the server; a tool the grant withholds or the step does not offer is refused
without running (the notes file is the evidence) and the model is told; a side effect goes
through the gate like any other.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp_servers.project import SEED, Project, make_project, one_json

from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ScriptedModel, ToolCall

AGENT = """
version: 1
name: notes-agent
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        tools: [search, add_note, delete_all]
steps:
  - id: scribe
    agent:
      goal: Find the release notes and add a reminder
      tools: [mcp.notes.search, mcp.notes.add_note]
outputs:
  answer: ${{ steps.scribe.output }}
"""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    project = make_project(tmp_path)
    project.write(AGENT)
    return project


def run_agent(
    project: Project, model: ScriptedModel, *flags: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], list[ChatRequest]]:
    """Run the agent recipe against `model`: the process, its result and the model's requests."""
    with FakeOpenAIServer(model) as server:
        proc, result = project.run_json(
            "r.yaml", "--base-url", server.base_url, "--model", "m", *flags
        )
        requests = list(server.requests)
        assert server.errors == []  # the script never ran out or raised
    return proc, result, requests


def observations(request: ChatRequest) -> dict[str, str]:
    """The tool results a request carries, by tool call id."""
    return dict(request.tool_results())


def offered(request: ChatRequest, name: str) -> dict[str, Any]:
    """The function spec of tool `name` as offered to the model."""
    [tool] = [t for t in request.tools or [] if t["function"]["name"] == name]
    function: dict[str, Any] = tool["function"]
    return function


@pytest.mark.slow
def test_the_model_calls_mcp_tools_two_in_one_turn(project: Project) -> None:
    model = ScriptedModel.sequence(
        ChatReply(
            tool_calls=[
                ToolCall("mcp__notes__search", {"query": "release"}, id="c1"),
                ToolCall("mcp__notes__add_note", {"text": "remind the team"}, id="c2"),
            ]
        ),
        "Found two release notes and added a reminder.",
    )

    proc, result, requests = run_agent(project, model, "--yes")

    assert proc.returncode == 0, proc.stderr
    assert len(requests) == 2
    assert requests[0].tool_names() == ["mcp__notes__search", "mcp__notes__add_note"]
    search = offered(requests[0], "mcp__notes__search")
    assert search["parameters"]["properties"].keys() == {"query", "limit"}
    assert search["parameters"]["required"] == ["query"]
    assert offered(requests[0], "mcp__notes__add_note")["parameters"]["required"] == ["text"]
    seen = observations(requests[1])
    assert seen.keys() == {"c1", "c2"}
    assert "release on friday" in seen["c1"]
    assert "release notes drafted" in seen["c1"]
    assert "lunch at noon" not in seen["c1"]
    assert "noted: remind the team" in seen["c2"]
    assert project.notes() == SEED + "remind the team\n"

    step = result["steps"]["scribe"]
    assert step["status"] == "succeeded"
    assert result["outputs"] == {"answer": "Found two release notes and added a reminder."}
    assert sorted((e["tool"], e["status"]) for e in step["transcript"]) == [
        ("mcp.notes.add_note", "ok"),
        ("mcp.notes.search", "ok"),
    ]
    assert result["usage"]["tool_calls"] == 2
    assert result["usage"]["llm_calls"] == 2


@pytest.mark.slow
def test_tools_the_grant_withholds_or_the_step_does_not_offer_are_refused(
    project: Project,
) -> None:
    model = ScriptedModel.sequence(
        ChatReply(
            tool_calls=[
                ToolCall("mcp__notes__search", {"query": "lunch"}, id="c1"),
                # granted, but not among the step's tools
                ToolCall("mcp__notes__delete_all", {}, id="c2"),
                # the server has it; the grant's globs leave it out
                ToolCall("mcp__notes__write_outside", {"path": "pwned.txt"}, id="c3"),
            ]
        ),
        "I could only search.",
    )

    proc, result, requests = run_agent(project, model, "--yes")

    assert proc.returncode == 0, proc.stderr
    assert "mcp__notes__delete_all" not in requests[0].tool_names()
    assert "mcp__notes__write_outside" not in requests[0].tool_names()
    # neither ran: the notes are all there, and no file was written
    assert project.notes() == SEED
    assert not (project.root / "pwned.txt").exists()
    seen = observations(requests[1])
    assert "lunch at noon" in seen["c1"]
    for call_id in ("c2", "c3"):
        assert seen[call_id].startswith("error") or "no tool" in seen[call_id], seen[call_id]
        assert "deleted" not in seen[call_id]
        assert "wrote" not in seen[call_id]
    statuses = {e["tool"]: e["status"] for e in result["steps"]["scribe"]["transcript"]}
    assert statuses.pop("mcp.notes.search") == "ok"
    assert len(statuses) == 2
    assert "ok" not in statuses.values(), statuses
    assert result["usage"]["tool_calls"] == 1


@pytest.mark.slow
def test_an_agents_side_effect_is_gated_without_approval(project: Project) -> None:
    model = ScriptedModel.sequence(
        ChatReply(tool_calls=[ToolCall("mcp__notes__add_note", {"text": "sneaky"}, id="c1")]),
        "The note was not added.",
    )

    _, result, requests = run_agent(project, model)

    assert project.notes() == SEED
    observation = observations(requests[1])["c1"]
    assert observation.startswith("error")
    assert "denied" in observation
    [entry] = result["steps"]["scribe"]["transcript"]
    assert (entry["tool"], entry["status"]) == ("mcp.notes.add_note", "error")
    assert "denied" in entry["detail"]


CAPABILITIES = """
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        tools: [search, add_note]
"""


@pytest.mark.slow
def test_a_goal_is_planned_with_the_servers_tools_and_a_read_only_plan_runs_unreviewed(
    project: Project,
) -> None:
    project.write(CAPABILITIES, name="caps.yaml")
    plan = {
        "goal": "find the release notes",
        "steps": [{"id": "find", "tool": "mcp.notes.search", "params": {"query": "release"}}],
    }
    model = ScriptedModel.sequence(json.dumps(plan))

    with FakeOpenAIServer(model) as server:
        proc = project.planloom(
            "plan",
            "find the release notes",
            "--capabilities",
            "caps.yaml",
            "--json",
            "--base-url",
            server.base_url,
            "--model",
            "m",
        )
        requests = list(server.requests)

    assert proc.returncode == 0, proc.stderr
    system = requests[0].messages[0]["content"]
    assert "mcp.notes.search" in system
    assert "mcp.notes.add_note" in system
    assert "delete_all" not in system  # withheld by the grant: never offered to the planner
    result = one_json(proc.stdout)
    assert result["steps"]["find"]["status"] == "succeeded"
    assert "release on friday" in json.dumps(result["steps"]["find"]["output"])
    assert "plan" not in {a["step_id"] for a in result["approvals"]}  # read-only: no review
