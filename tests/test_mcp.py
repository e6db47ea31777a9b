"""MCP servers as capabilities over stdio, end to end: the real `planloom` command in a
subprocess, the notes server (`tests/mcp_servers/notes_server.py`, written with the MCP SDK)
started by planloom from the recipe's folder.

Shown here (the README's "MCP servers"): a call's output and its structured
part in later steps; `isError` fails the step, so retry, fallback and `can_fail` apply;
read-only tools run ungated and the rest are gated (at a terminal, the gate says which
tools the server marks destructive); the located diagnostics of validation (unknown tool,
tool not granted, params against the input schema, a server that cannot start or answer, a
malformed grant); a server that crashes or hangs mid-call fails that call and the run goes
on; the server's confinement (writes under its `cwd` only, no network unless granted);
`planloom tools RECIPE`. After every `planloom` command no server process is left
(`Project.planloom`).
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from _procs import PLANLOOM, env, gone
from mcp_servers.project import Project, locate, make_project, one_json


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


def by_rule(diagnostics: list[dict[str, Any]], rule: str) -> list[dict[str, Any]]:
    return [d for d in diagnostics if d["rule"] == rule]


# -- outputs ------------------------------------------------------------------------------

READ_ONLY = """
version: 1
name: notes-read
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        cwd: .
        tools: ["sea*", add_note]
steps:
  - id: find
    tool: mcp.notes.search
    params: {query: release}
  - id: second
    tool: mcp.notes.search
    params: {query: "${{ steps.find.output.structured.hits[1] }}", limit: 1}
outputs:
  hits: ${{ steps.find.output.structured.hits }}
  second: ${{ steps.second.output.structured.hits }}
  failed: ${{ steps.find.output.is_error }}
"""


@pytest.mark.slow
def test_a_read_only_call_returns_content_and_structured_output_for_later_steps(
    project: Project,
) -> None:
    project.write(READ_ONLY)

    # No --yes and no terminal: read-only tools are never gated.
    proc, result = project.run_json("r.yaml")

    assert proc.returncode == 0, proc.stderr
    assert result["status"] == "succeeded"
    find = result["steps"]["find"]
    assert find["status"] == "succeeded"
    output = find["output"]
    assert set(output) == {"content", "structured", "is_error"}
    assert output["is_error"] is False
    assert output["structured"] == {
        "query": "release",
        "hits": ["release on friday", "release notes drafted"],
    }
    [block] = output["content"]
    assert block["type"] == "text"
    assert json.loads(block["text"]) == output["structured"]
    assert result["outputs"] == {
        "hits": ["release on friday", "release notes drafted"],
        "second": ["release notes drafted"],
        "failed": False,
    }
    assert result["usage"]["tool_calls"] == 2


TOOL_ERRORS = """
version: 1
name: notes-errors
on_failure: continue
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        tools: [search, add_note, fail]
steps:
  - id: oops
    tool: mcp.notes.fail
    params: {message: the notes are locked}
  - id: retried
    tool: mcp.notes.fail
    params: {message: still locked}
    retry: {attempts: 2, initial: 0}
    can_fail: true
  - id: rescued
    tool: mcp.notes.fail
    params: {message: locked again}
    fallback: {tool: mcp.notes.search, params: {query: lunch}}
  - id: save
    tool: mcp.notes.add_note
    params: {text: buy more coffee}
outputs:
  saved: ${{ steps.save.output.structured.result }}
"""


@pytest.mark.slow
def test_an_is_error_result_fails_the_step_and_retry_fallback_and_can_fail_apply(
    project: Project,
) -> None:
    project.write(TOOL_ERRORS)

    proc, result = project.run_json("r.yaml", "--yes")

    assert proc.returncode == 1, proc.stderr
    assert result["status"] == "failed"
    steps = result["steps"]
    assert steps["oops"]["status"] == "failed"
    assert "the notes are locked" in steps["oops"]["error"]
    assert steps["oops"]["output"] is None
    assert steps["retried"]["status"] == "failed_acceptable"
    assert steps["retried"]["attempts"] == 2
    assert "still locked" in steps["retried"]["error"]
    assert steps["rescued"]["status"] == "fallback"
    assert steps["rescued"]["output"]["structured"]["hits"] == ["lunch at noon"]
    # the side effect ran (--yes) and its result is the tool's
    assert steps["save"]["status"] == "succeeded"
    assert steps["save"]["output"]["structured"] == {"result": "noted: buy more coffee"}
    assert steps["save"]["output"]["is_error"] is False
    assert project.notes().endswith("release notes drafted\nbuy more coffee\n")


# -- gates ---------------------------------------------------------------------------------

GATED = """
version: 1
name: notes-gated
on_failure: continue
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        tools: ["*"]
steps:
  - id: find
    tool: mcp.notes.search
    params: {query: lunch}
  - id: save
    tool: mcp.notes.add_note
    params: {text: should never be written}
  - id: wipe
    tool: mcp.notes.delete_all
"""


@pytest.mark.slow
def test_tools_with_side_effects_are_denied_without_a_terminal_or_yes(project: Project) -> None:
    project.write(GATED)
    before = project.notes()

    proc, result = project.run_json("r.yaml")

    assert proc.returncode == 1, proc.stderr
    steps = result["steps"]
    assert steps["find"]["status"] == "succeeded"  # read-only: not gated
    for step_id in ("save", "wipe"):  # no annotations, and destructiveHint: gated
        assert steps[step_id]["status"] == "denied", (step_id, steps[step_id])
        assert "--yes" in steps[step_id]["error"]
        assert steps[step_id]["output"] is None
    assert project.notes() == before


TERMINAL_GATE = r"step '([^']+)' wants to run (\S+) \("
TERMINAL_MENU = r"\[A\]pprove all remaining  \[q\]uit > "


@pytest.mark.slow
def test_the_gate_at_a_terminal_says_which_tool_the_server_marks_destructive(
    project: Project,
) -> None:
    project.write(GATED)
    before = project.notes()
    log = io.StringIO()
    child = pexpect.spawn(
        PLANLOOM,
        ["run", "r.yaml"],
        cwd=str(project.root),
        env=env(TERM="xterm"),
        timeout=60,
        encoding="utf-8",
        dimensions=(40, 200),
    )
    child.logfile_read = log
    shown: dict[str, tuple[str, str]] = {}
    try:
        for _ in range(2):  # save and wipe, in whichever order they are asked
            child.expect(TERMINAL_GATE)
            step_id, action = child.match.group(1), child.match.group(2)
            child.expect(TERMINAL_MENU)
            shown[step_id] = (action, child.before)
            child.sendline("d")
            child.expect(r"reason \(optional\) > ")
            child.sendline("")
        child.expect(pexpect.EOF)
    except (pexpect.TIMEOUT, pexpect.EOF) as exc:
        raise AssertionError(f"{type(exc).__name__}; transcript:\n{log.getvalue()}") from None
    finally:
        child.close(force=True)
    assert gone(project.servers_alive, within=5)

    assert child.exitstatus == 1, log.getvalue()
    assert shown.keys() == {"save", "wipe"}
    assert shown["wipe"][0] == "mcp.notes.delete_all"
    assert "destructive" in shown["wipe"][1]
    assert shown["save"][0] == "mcp.notes.add_note"
    assert "destructive" not in shown["save"][1]
    assert "should never be written" in shown["save"][1]
    assert project.notes() == before


# -- validation ----------------------------------------------------------------------------

CHECKS = """
version: 1
name: notes-checks
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        tools: [search, "add_*"]
steps:
  - id: typo
    tool: mcp.notes.serch
    params: {query: x}
  - id: withheld
    tool: mcp.notes.delete_all
  - id: missing
    tool: mcp.notes.add_note
    params: {}
  - id: wrong_type
    tool: mcp.notes.search
    params: {query: x, limit: many}
  - id: extra
    tool: mcp.notes.search
    params: {query: x, colour: red}
  - id: templated
    tool: mcp.notes.search
    params: {query: "${{ steps.fine.output.structured.result }}"}
  - id: fine
    tool: mcp.notes.add_note
    params: {text: must not be written}
"""


@pytest.mark.slow
def test_validation_reports_tools_and_params_against_the_servers_listing(
    project: Project,
) -> None:
    text = project.write(CHECKS)
    before = project.notes()

    proc, diagnostics = project.validate_json()

    assert proc.returncode == 2, proc.stderr
    at = {
        "typo": locate(text, "mcp.notes.serch"),
        "withheld": locate(text, "mcp.notes.delete_all"),
        "missing": locate(text, "{}", after="id: missing"),
        "wrong_type": locate(text, "many"),
        "extra_key": locate(text, "colour"),
        "extra_value": locate(text, "red"),
    }
    found = sorted((d["rule"], d["line"]) for d in diagnostics)
    assert found == sorted(
        [
            ("unknown-tool", at["typo"][0]),
            ("not-granted", at["withheld"][0]),
            ("bad-params", at["missing"][0]),
            ("bad-params", at["wrong_type"][0]),
            ("bad-params", at["extra_key"][0]),
        ]
    ), diagnostics

    [unknown] = by_rule(diagnostics, "unknown-tool")
    assert (unknown["line"], unknown["column"]) == at["typo"]
    assert "mcp.notes.serch" in unknown["message"]
    assert "did you mean" in (unknown["hint"] or "")
    assert "search" in (unknown["hint"] or "")

    [withheld] = by_rule(diagnostics, "not-granted")
    assert (withheld["line"], withheld["column"]) == at["withheld"]
    assert "delete_all" in withheld["message"]

    params = {d["line"]: d for d in by_rule(diagnostics, "bad-params")}
    missing = params[at["missing"][0]]
    assert missing["column"] == at["missing"][1]
    assert "text" in missing["message"]
    wrong = params[at["wrong_type"][0]]
    assert wrong["column"] == at["wrong_type"][1]
    assert "limit" in wrong["message"]
    extra = params[at["extra_key"][0]]
    assert extra["column"] in (at["extra_key"][1], at["extra_value"][1])
    assert "colour" in extra["message"]
    for diagnostic in diagnostics:
        assert {"file", "line", "column", "rule", "message", "hint"} <= diagnostic.keys()

    # `run` validates first: nothing runs, not even the valid side effect
    run = project.planloom("run", "r.yaml", "--yes", "--json")
    assert run.returncode == 2, run.stderr
    invalid = one_json(run.stdout)
    assert invalid["status"] == "invalid"
    assert {e["rule"] for e in invalid["errors"]} == {"unknown-tool", "not-granted", "bad-params"}
    assert project.notes() == before


@pytest.mark.slow
def test_a_valid_recipe_validates_cleanly(project: Project) -> None:
    project.write(READ_ONLY)

    proc, diagnostics = project.validate_json()

    assert proc.returncode == 0, proc.stderr
    assert diagnostics == []


EXITS_AT_START = "import sys; sys.stderr.write('the notes database is gone {marker}'); sys.exit(3)"
HANGS_AT_START = "import time; time.sleep(600)  # {marker}"

BROKEN_SERVERS = """
version: 1
name: notes-broken
capabilities:
  mcp:
    servers:
      missing: {command: [{program}], tools: ["*"]}
      exits: {command: [python3, -c, "{exits}"], tools: ["*"]}
      hangs: {command: [python3, -c, "{hangs}"], tools: ["*"], startup_timeout: 2}
steps:
  - id: one
    tool: mcp.missing.search
    params: {query: x}
  - id: two
    tool: mcp.exits.search
    params: {query: x}
  - id: three
    tool: mcp.hangs.search
    params: {query: x}
"""


@pytest.mark.slow
def test_servers_that_cannot_start_or_answer_are_located_configuration_errors(
    project: Project,
) -> None:
    program = f"no-such-mcp-server-{uuid.uuid4().hex[:12]}"
    text = project.write(
        BROKEN_SERVERS.replace("{program}", program)
        .replace("{exits}", EXITS_AT_START)
        .replace("{hangs}", HANGS_AT_START)
        .replace("{marker}", project.marker)
    )

    started = time.monotonic()
    proc, diagnostics = project.validate_json()
    elapsed = time.monotonic() - started

    assert proc.returncode == 2, proc.stderr
    problems = by_rule(diagnostics, "mcp-server")
    said = {
        name: f"{d['message']} {d['hint'] or ''}"
        for name in ("missing", "exits", "hangs")
        for d in problems
        if d["line"] == locate(text, f"{name}:")[0]
    }
    assert said.keys() == {"missing", "exits", "hangs"}, problems
    assert len(problems) == 3, problems
    for name, words in said.items():
        assert f"'{name}'" in words or f" {name} " in words, words
    assert program in said["missing"]  # which program
    assert "the notes database is gone" in said["exits"]  # the tail of its stderr
    assert "time" in said["hangs"].lower() or "answer" in said["hangs"].lower()
    assert elapsed < 20, "startup_timeout: 2 was not enforced"
    # nothing else is reported about the steps of servers that could not be listed
    assert {d["rule"] for d in diagnostics} == {"mcp-server"}, diagnostics


BAD_GRANTS = """
version: 1
name: notes-bad-grant
capabilities:
  mcp:
    servers:
      both: {command: {command}, url: "http://127.0.0.1:9/mcp", tools: ["*"]}
      neither: {cwd: ., tools: ["*"]}
      Notes!: {command: {command}, tools: ["*"]}
      no_tools: {command: {command}}
steps:
  - id: find
    tool: mcp.notes.search
    params: {query: x}
"""


def test_malformed_grants_are_located_errors(project: Project) -> None:
    text = project.write(BAD_GRANTS)

    proc, diagnostics = project.validate_json()

    assert proc.returncode == 2, proc.stderr
    lines = {d["line"] for d in by_rule(diagnostics, "bad-grant")}
    assert lines == {
        locate(text, name)[0] for name in ("both:", "neither:", "Notes!:", "no_tools:")
    }, diagnostics


HALF_BROKEN = """
version: 1
name: notes-half-broken
capabilities:
  mcp:
    servers:
      gone: {command: [{program}], tools: ["*"]}
      notes: {command: {command}, tools: [search]}
steps:
  - id: lost
    tool: mcp.gone.anything
  - id: typo
    tool: mcp.notes.serch
    params: {query: x}
  - id: wrong
    tool: mcp.notes.search
    params: {query: 3}
"""


@pytest.mark.slow
def test_a_server_that_cannot_start_does_not_hide_the_problems_of_the_others(
    project: Project,
) -> None:
    program = f"no-such-mcp-server-{uuid.uuid4().hex[:12]}"
    text = project.write(HALF_BROKEN.replace("{program}", program))

    proc, diagnostics = project.validate_json()

    assert proc.returncode == 2, proc.stderr
    found = {(d["rule"], d["line"]) for d in diagnostics}
    assert found == {
        ("mcp-server", locate(text, "gone:")[0]),
        ("unknown-tool", locate(text, "mcp.notes.serch")[0]),
        ("bad-params", locate(text, "query: 3")[0]),
    }, diagnostics
    (typo,) = by_rule(diagnostics, "unknown-tool")
    assert typo["hint"] == "did you mean 'mcp.notes.search'?"


def test_a_malformed_server_grant_is_reported_once_not_as_ungranted_tools(
    project: Project,
) -> None:
    text = project.write(BAD_GRANTS)

    proc, diagnostics = project.validate_json()

    assert proc.returncode == 2, proc.stderr
    assert {d["rule"] for d in diagnostics} == {"bad-grant"}, diagnostics
    assert locate(text, "mcp.notes.search")[0] not in {d["line"] for d in diagnostics}


# -- crashes and hangs ----------------------------------------------------------------------

RESILIENCE = """
version: 1
name: notes-resilience
capabilities:
  mcp:
    servers:
      fragile: {command: {command}, tools: [crash]}
      slow: {command: {command}, tools: [hang]}
      notes: {command: {command}, tools: [search]}
steps:
  - id: boom
    tool: mcp.fragile.crash
    can_fail: true
  - id: stuck
    tool: mcp.slow.hang
    timeout: 2
    can_fail: true
  - id: lunch
    tool: mcp.notes.search
    params: {query: lunch}
  - id: after
    tool: mcp.notes.search
    params: {query: release}
    depends_on: [boom, stuck]
"""


@pytest.mark.slow
def test_a_server_that_crashes_or_hangs_fails_that_call_and_the_run_goes_on(
    project: Project,
) -> None:
    project.write(RESILIENCE)

    started = time.monotonic()
    proc, result = project.run_json("r.yaml", "--yes")
    elapsed = time.monotonic() - started

    assert proc.returncode == 0, proc.stderr
    assert result["status"] == "succeeded"
    steps = result["steps"]
    assert steps["boom"]["status"] == "failed_acceptable"
    assert "fragile" in steps["boom"]["error"]
    assert steps["stuck"]["status"] == "failed_acceptable"
    assert "timed out" in steps["stuck"]["error"]
    assert steps["lunch"]["status"] == "succeeded"
    assert steps["lunch"]["output"]["structured"]["hits"] == ["lunch at noon"]
    assert steps["after"]["status"] == "succeeded"
    assert len(steps["after"]["output"]["structured"]["hits"]) == 2
    assert elapsed < 30, "the hanging call was not ended by its 2 s timeout"


# -- confinement -------------------------------------------------------------------------

CONFINED = """
version: 1
name: notes-confined
on_failure: continue
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        tools: [add_note, write_outside, connect]
      online:
        command: {command}
        network: true
        tools: [connect]
steps:
  - id: inside
    tool: mcp.notes.add_note
    params: {text: written inside}
  - id: escape
    tool: mcp.notes.write_outside
    params: {path: "{outside}"}
  - id: climb
    tool: mcp.notes.write_outside
    params: {path: ../planted.py}
  - id: dial
    tool: mcp.notes.connect
    params: {port: {closed_port}}
  - id: dial_granted
    tool: mcp.online.connect
    params: {port: {open_port}}
"""


@pytest.fixture
def listeners() -> Iterator[tuple[socket.socket, socket.socket]]:
    """Two TCP listeners on 127.0.0.1: one no server may reach, one the granted one may."""
    closed = socket.create_server(("127.0.0.1", 0))
    opened = socket.create_server(("127.0.0.1", 0))
    for listener in (closed, opened):
        listener.setblocking(False)
    try:
        yield closed, opened
    finally:
        closed.close()
        opened.close()


def accepted(listener: socket.socket) -> int:
    """How many connections are waiting on `listener` (it never accepted any itself)."""
    count = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


@pytest.mark.slow
def test_a_server_writes_only_under_its_cwd_and_has_no_network_unless_granted(
    project: Project, listeners: tuple[socket.socket, socket.socket]
) -> None:
    closed, opened = listeners
    outside = project.root.parent / "outside.txt"
    project.write(
        CONFINED.replace("{outside}", str(outside))
        .replace("{closed_port}", str(closed.getsockname()[1]))
        .replace("{open_port}", str(opened.getsockname()[1]))
    )

    proc, result = project.run_json("r.yaml", "--yes")

    assert proc.returncode == 1, proc.stderr
    steps = result["steps"]
    assert steps["inside"]["status"] == "succeeded", steps["inside"]
    assert project.notes().endswith("written inside\n")
    assert steps["escape"]["status"] == "failed"
    assert str(outside) in steps["escape"]["error"]
    assert not outside.exists()
    assert steps["climb"]["status"] == "failed"
    assert not (project.root.parent / "planted.py").exists()
    assert steps["dial"]["status"] == "failed"
    assert "cannot connect" in steps["dial"]["error"]
    assert accepted(closed) == 0
    # the same tool on a server granted the network connects: the refusal above is the sandbox
    assert steps["dial_granted"]["status"] == "succeeded", steps["dial_granted"]
    assert accepted(opened) == 1


# -- planloom tools ----------------------------------------------------------------------

LISTED = """
version: 1
name: notes-tools
capabilities:
  mcp:
    servers:
      notes:
        command: {command}
        tools: [search, add_note, delete_all]
steps:
  - id: find
    tool: mcp.notes.search
    params: {query: x}
"""


@pytest.mark.slow
def test_tools_lists_the_recipes_mcp_tools_with_schemas_and_side_effects(
    project: Project,
) -> None:
    project.write(LISTED)

    as_json = project.planloom("tools", "r.yaml", "--json")
    as_text = project.planloom("tools", "r.yaml")

    assert as_json.returncode == 0, as_json.stderr
    rows = {row["name"]: row for row in one_json(as_json.stdout)}
    assert {"fs.read", "shell.run"} <= rows.keys()  # the built-ins are still there
    search = rows["mcp.notes.search"]
    assert search["family"] == "mcp"
    assert search["server"] == "notes"
    assert search["tool"] == "search"
    assert search["side_effects"] is False
    assert search["params"]["properties"].keys() == {"query", "limit"}
    assert search["params"]["required"] == ["query"]
    assert search["params"]["additionalProperties"] is False
    for name in ("mcp.notes.add_note", "mcp.notes.delete_all"):
        assert rows[name]["side_effects"] is True, name
        assert rows[name]["server"] == "notes"
    assert rows["mcp.notes.add_note"]["params"]["required"] == ["text"]

    assert as_text.returncode == 0, as_text.stderr
    lines = {line.split()[0]: line for line in as_text.stdout.splitlines() if line.split()}
    assert "read-only" in lines["mcp.notes.search"]
    assert "side effects" in lines["mcp.notes.add_note"]
    assert "side effects" in lines["mcp.notes.delete_all"]


# -- start-up ------------------------------------------------------------------------------


def test_commands_that_need_no_server_do_not_load_the_mcp_sdk() -> None:
    """Loading the SDK costs about half a second: only a recipe with MCP servers pays it."""
    code = (
        "import sys\n"
        "from engine.app.registry import build_registry\n"
        "registry = build_registry()\n"
        "assert 'mcp' in registry.families\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
