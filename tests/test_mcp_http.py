"""MCP servers over streamable HTTP, end to end: the notes server started by the test on a
free port of 127.0.0.1, and the real `planloom` command in a subprocess granted its URL.

Shown here (the README's "MCP servers"): listing, calls, structured output,
`isError`, gates and validation work as over stdio; `headers_from_env` sends the header
(the server reports a digest of what it received) and its value never reaches the `--json`
output, stderr or `--log-file`; plain http to anything but loopback, and a server that is
not listening, are configuration errors (exit 2).
"""

from __future__ import annotations

import hashlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _procs import env, gone, pids_with
from mcp_servers.project import (
    HTTPServer,
    Project,
    free_port,
    http_server,
    locate,
    make_project,
    one_json,
)

TOKEN_VARIABLE = "NOTES_TOKEN"


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HTTPServer]:
    """One notes server over HTTP for this module's tests."""
    with http_server(tmp_path_factory.mktemp("remote")) as server:
        yield server
    assert gone(lambda: pids_with(server.marker), within=10)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


@pytest.fixture
def token() -> str:
    return f"Bearer tok-{uuid.uuid4().hex}"


def grant(url: str, tools: str = '["*"]') -> str:
    return f"""
version: 1
name: notes-http
on_failure: continue
capabilities:
  mcp:
    servers:
      remote:
        url: {url}
        headers_from_env: {{Authorization: {TOKEN_VARIABLE}}}
        tools: {tools}
"""


def secret_free(token: str, *texts: str) -> None:
    secret = token.split()[-1]
    for text in texts:
        assert secret not in text


CALLS = """
steps:
  - id: find
    tool: mcp.remote.search
    params: {query: release}
  - id: who
    tool: mcp.remote.whoami
  - id: oops
    tool: mcp.remote.fail
    params: {message: the remote notes are locked}
    can_fail: true
  - id: save
    tool: mcp.remote.add_note
    params: {text: "{note}"}
outputs:
  hits: ${{ steps.find.output.structured.hits }}
"""


@pytest.mark.slow
def test_calls_over_http_with_the_header_from_the_environment(
    project: Project, remote: HTTPServer, token: str
) -> None:
    note = f"sent over http {uuid.uuid4().hex[:8]}"
    project.write(grant(remote.url) + CALLS.replace("{note}", note))
    log = project.root / "events.jsonl"
    environ = env(**{TOKEN_VARIABLE: token})

    proc, result = project.run_json("r.yaml", "--yes", "--log-file", log, environ=environ)
    tools = project.planloom("tools", "r.yaml", "--json", environ=environ)

    assert proc.returncode == 0, proc.stderr
    assert result["status"] == "succeeded"
    steps = result["steps"]
    assert steps["find"]["output"]["structured"] == {
        "query": "release",
        "hits": ["release on friday", "release notes drafted"],
    }
    assert steps["find"]["output"]["is_error"] is False
    assert result["outputs"]["hits"] == ["release on friday", "release notes drafted"]
    # the server saw the header planloom read from the environment
    assert steps["who"]["output"]["structured"] == {
        "header_sha256": hashlib.sha256(token.encode()).hexdigest()
    }
    assert steps["oops"]["status"] == "failed_acceptable"
    assert "the remote notes are locked" in steps["oops"]["error"]
    assert steps["save"]["status"] == "succeeded"
    assert steps["save"]["output"]["structured"] == {"result": f"noted: {note}"}
    assert remote.notes().endswith(f"{note}\n")

    assert tools.returncode == 0, tools.stderr
    rows = {row["name"]: row for row in one_json(tools.stdout)}
    search = rows["mcp.remote.search"]
    assert (search["family"], search["server"], search["tool"]) == ("mcp", "remote", "search")
    assert search["side_effects"] is False
    assert search["params"]["required"] == ["query"]
    assert rows["mcp.remote.add_note"]["side_effects"] is True

    secret_free(token, proc.stdout, proc.stderr, log.read_text(), tools.stdout, tools.stderr)


GATED = """
steps:
  - id: find
    tool: mcp.remote.search
    params: {query: lunch}
  - id: save
    tool: mcp.remote.add_note
    params: {text: never sent over http}
"""


@pytest.mark.slow
def test_an_http_tool_with_side_effects_is_gated(
    project: Project, remote: HTTPServer, token: str
) -> None:
    project.write(grant(remote.url) + GATED)
    before = remote.notes()

    proc, result = project.run_json("r.yaml", environ=env(**{TOKEN_VARIABLE: token}))

    assert proc.returncode == 1, proc.stderr
    assert result["steps"]["find"]["status"] == "succeeded"
    assert result["steps"]["find"]["output"]["structured"]["hits"] == ["lunch at noon"]
    assert result["steps"]["save"]["status"] == "denied"
    assert remote.notes() == before
    assert "never sent over http" not in remote.notes()


CHECKS = """
steps:
  - id: typo
    tool: mcp.remote.serch
    params: {query: x}
  - id: withheld
    tool: mcp.remote.whoami
  - id: wrong_type
    tool: mcp.remote.search
    params: {query: x, limit: many}
"""


def test_validation_checks_http_tools_against_the_servers_listing(
    project: Project, remote: HTTPServer, token: str
) -> None:
    text = project.write(grant(remote.url, "[search, add_note]") + CHECKS)

    proc = project.planloom("validate", "r.yaml", "--json", environ=env(**{TOKEN_VARIABLE: token}))

    assert proc.returncode == 2, proc.stderr
    diagnostics: list[dict[str, Any]] = one_json(proc.stdout)
    assert sorted((d["rule"], d["line"], d["column"]) for d in diagnostics) == sorted(
        [
            ("unknown-tool", *locate(text, "mcp.remote.serch")),
            ("not-granted", *locate(text, "mcp.remote.whoami")),
            ("bad-params", *locate(text, "many")),
        ]
    ), diagnostics
    secret_free(token, proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    "url", ["http://example.com/mcp", "http://10.0.0.1/mcp"], ids=["name", "private-address"]
)
def test_plain_http_to_anything_but_loopback_is_refused(project: Project, url: str) -> None:
    text = project.write(grant(url) + CHECKS)

    proc = project.planloom("validate", "r.yaml", "--json", environ=env(**{TOKEN_VARIABLE: "x"}))

    assert proc.returncode == 2, proc.stderr
    diagnostics = one_json(proc.stdout)
    problems = [d for d in diagnostics if d["rule"] in ("bad-grant", "mcp-server")]
    assert problems, diagnostics
    said = " ".join(f"{d['message']} {d['hint'] or ''}" for d in problems).lower()
    assert "https" in said or "loopback" in said, said
    assert {d["line"] for d in problems} <= {
        locate(text, "remote:")[0],
        locate(text, "url:")[0],
    }


@pytest.mark.slow
def test_a_server_that_is_not_listening_is_a_configuration_error(project: Project) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    text = project.write(grant(url) + CHECKS)

    proc: subprocess.CompletedProcess[str] = project.planloom(
        "run", "r.yaml", "--yes", "--json", environ=env(**{TOKEN_VARIABLE: "x"})
    )

    assert proc.returncode == 2, proc.stderr
    result = one_json(proc.stdout)
    assert result["status"] == "invalid"
    problems = [e for e in result["errors"] if e["rule"] == "mcp-server"]
    assert len(problems) == 1, result["errors"]
    # at the server's entry: its key, or the first line of its mapping
    assert problems[0]["line"] in {locate(text, "remote:")[0], locate(text, "url:")[0]}
    assert "remote" in problems[0]["message"]


def test_a_header_variable_that_is_not_set_is_located_at_headers_from_env(
    project: Project,
) -> None:
    text = project.write(grant(f"http://127.0.0.1:{free_port()}/mcp") + CHECKS)

    proc = project.planloom("validate", "r.yaml", "--json", environ=env())

    assert proc.returncode == 2, proc.stderr
    (problem,) = one_json(proc.stdout)
    assert problem["rule"] == "mcp-server"
    assert problem["line"] == locate(text, "headers_from_env:")[0]
    assert f"export {TOKEN_VARIABLE}=" in problem["message"]
    assert "running" not in (problem["hint"] or "")
