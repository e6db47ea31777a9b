"""A grant overrules what an MCP server says of its tools (`tool_rules`), towards more gates
only: the real `planloom` command, the notes server (its `search` marked `readOnlyHint`).

A server's `readOnlyHint` decides whether a call is gated, and a server can be wrong (one
that reaches the network calls its fetch read-only). `read_only: false` makes such a tool
gated under `confirm: auto`; `confirm: always` gates every call, a step's `confirm: never`
included; both hold for a model's calls in an agent step as for a step's own. A grant
cannot make a tool read-only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_servers.project import Project, make_project, one_json

from engine.testing import ChatReply, FakeOpenAIServer, ScriptedModel, ToolCall

pytestmark = pytest.mark.slow

STEPS = """
version: 1
name: notes-rules
on_failure: continue
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        tools: [search, whoami]
        tool_rules: {rules}
steps:
  - id: find
    tool: mcp.notes.search
    params: {query: release}
  - id: unasked
    tool: mcp.notes.search
    params: {query: lunch}
    confirm: never
  - id: listed
    tool: mcp.notes.whoami
    params: {}
"""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


def tool_rows(project: Project) -> dict[str, dict[str, object]]:
    """`planloom tools r.yaml --json`, by tool name."""
    listed = project.planloom("tools", "r.yaml", "--json")
    assert listed.returncode == 0, listed.stderr
    return {row["name"]: row for row in one_json(listed.stdout)}


def statuses(result: dict[str, object]) -> dict[str, str]:
    steps = result["steps"]
    assert isinstance(steps, dict)
    return {sid: step["status"] for sid, step in steps.items()}


def test_without_rules_the_servers_read_only_tools_run_ungated(project: Project) -> None:
    project.write(STEPS.replace("{rules}", "{}"))
    proc, result = project.run_json("r.yaml")  # no --yes, no terminal: every gate denies
    assert proc.returncode == 0, proc.stderr
    assert statuses(result) == {"find": "succeeded", "unasked": "succeeded", "listed": "succeeded"}


def test_read_only_false_gates_the_tool_under_confirm_auto(project: Project) -> None:
    project.write(STEPS.replace("{rules}", "{search: {read_only: false}}"))
    proc, result = project.run_json("r.yaml")
    assert proc.returncode == 1, proc.stderr
    assert statuses(result) == {"find": "denied", "unasked": "succeeded", "listed": "succeeded"}
    tools = tool_rows(project)
    assert tools["mcp.notes.search"]["side_effects"] is True  # as the grant says
    assert tools["mcp.notes.whoami"]["side_effects"] is False  # as the server says
    # confirm: never is the step's to waive for a call with side effects, as for any tool
    approved, result = project.run_json("r.yaml", "--yes")
    assert approved.returncode == 0, approved.stderr
    assert result["steps"]["find"]["output"]["structured"]["hits"]


def test_confirm_always_gates_every_call_even_a_steps_confirm_never(project: Project) -> None:
    project.write(STEPS.replace("{rules}", "{'sea*': {confirm: always}}"))
    proc, result = project.run_json("r.yaml")
    assert proc.returncode == 1, proc.stderr
    assert statuses(result) == {"find": "denied", "unasked": "denied", "listed": "succeeded"}
    tools = {
        row["name"]: row for row in one_json(project.planloom("tools", "r.yaml", "--json").stdout)
    }
    assert tools["mcp.notes.search"]["confirm_always"] is True
    assert tools["mcp.notes.search"]["side_effects"] is False  # read-only, and still gated


AGENT = """
version: 1
name: notes-agent-rules
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        tools: [search]
        tool_rules: {rules}
steps:
  - id: look
    agent:
      goal: Find the release notes
      tools: [mcp.notes.search]
"""


@pytest.mark.parametrize("rules", ["{search: {read_only: false}}", "{search: {confirm: always}}"])
def test_an_agents_call_of_an_overruled_tool_goes_to_the_gate(project: Project, rules: str) -> None:
    project.write(AGENT.replace("{rules}", rules))
    model = ScriptedModel.sequence(
        ChatReply(tool_calls=[ToolCall("mcp__notes__search", {"query": "release"}, id="c1")]),
        "no notes found",
    )
    with FakeOpenAIServer(model) as server:
        proc, result = project.run_json("r.yaml", "--base-url", server.base_url, "--model", "m")
        requests = list(server.requests)
    [entry] = result["steps"]["look"]["transcript"]
    assert (entry["tool"], entry["status"]) == ("mcp.notes.search", "error")
    assert "denied" in entry["detail"]
    told = dict(requests[1].tool_results())["c1"]
    assert "denied" in told  # the model is told the call was refused
    assert proc.returncode in (0, 1), proc.stderr


def test_a_grant_cannot_make_a_tool_read_only(project: Project) -> None:
    project.write(STEPS.replace("{rules}", "{whoami: {read_only: true}}"))
    proc = project.planloom("validate", "r.yaml")
    assert proc.returncode == 2, proc.stderr
    assert "tool_rules" in proc.stderr
    assert "only the server's own readOnlyHint makes a tool read-only" in proc.stderr


def test_a_rule_for_no_tool_is_located(project: Project) -> None:
    project.write(STEPS.replace("{rules}", "{fetch: {read_only: false}}"))
    proc = project.planloom("validate", "r.yaml")
    assert proc.returncode == 2, proc.stderr
    assert "'fetch' matches none of the tools of MCP server 'notes'" in proc.stderr
