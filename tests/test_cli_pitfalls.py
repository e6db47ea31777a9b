"""What a new user trips on, each through the real `planloom` command: a goal planned with
no tools, a replay's messages and its determinism, saving a plan over a file, plugins
named as files or after the command, `record.py` run with the wrong Python, partial
`for_each` outputs, and agent steps in a dry run."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pexpect
import pytest
from _procs import env, planloom

from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ScriptedModel, ToolCall

ROOT = Path(__file__).resolve().parent.parent
MAIN_JOB = ROOT / "recipes" / "main-job"
PLANLOOM = str(Path(sys.executable).parent / "planloom")
TIMEOUT = 60

# A plan that uses fs.read: invalid where nothing is granted.
READ_PLAN: dict[str, Any] = {
    "goal": "Summarise notes.txt",
    "steps": [{"id": "read", "tool": "fs.read", "params": {"path": "notes.txt"}}],
}


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    value: dict[str, Any] = json.loads(proc.stdout)
    return value


# -- 1. a goal planned with no tools granted -----------------------------------------------


@pytest.mark.slow
def test_a_plan_that_stays_invalid_with_no_tools_granted_fails_and_says_why(
    tmp_path: Path,
) -> None:
    model = ScriptedModel.sequence(READ_PLAN, READ_PLAN, READ_PLAN, READ_PLAN)
    with FakeOpenAIServer(model) as server:
        proc = planloom(
            "plan", "Summarise notes.txt", "--base-url", server.base_url, "--model", "m",
            "--json", "-v", cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = _json(proc)
    assert result["status"] == "failed"
    assert result["steps"] == {}  # no tool-less agent "succeeded" in its place
    [error] = result["errors"]
    assert "still invalid after 2 repairs" in error  # planners.llm.MAX_REPAIRS
    assert "plan.yaml:6:9: error[not-granted]: 'fs.read' needs the 'fs' capab" in error
    assert "no capabilities are granted" in error
    assert "--capabilities FILE" in error
    # Each rejected plan's problems are on stderr, and the -v log has the planning.
    assert "planning failed:" in proc.stderr
    assert "plan.finished" in proc.stderr


@pytest.mark.slow
def test_a_repaired_plan_shows_what_was_wrong_with_the_first(tmp_path: Path) -> None:
    (tmp_path / "caps.yaml").write_text(
        "capabilities: {fs: {root: ., read: true}}\n", encoding="utf-8"
    )
    (tmp_path / "notes.txt").write_text("n", encoding="utf-8")
    bad = {"goal": "g", "steps": [{"id": "read", "tool": "fs.reed", "params": {"path": "x"}}]}
    with FakeOpenAIServer(ScriptedModel.sequence(bad, READ_PLAN)) as server:
        proc = planloom(
            "plan", "g", "--capabilities", "caps.yaml", "--base-url", server.base_url,
            "--model", "m", "--json", cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "the model's plan #1 was invalid:" in proc.stderr
    assert "fs.reed" in proc.stderr
    assert "did you mean" in proc.stderr.lower() or "fs.read" in proc.stderr


@pytest.mark.slow
def test_a_plan_given_again_for_its_repair_at_temperature_0_is_said_and_not_asked_again(
    tmp_path: Path,
) -> None:
    """`llm: {temperature: 0}` and the model answers its repair with the same plan: the
    planner falls back after that one repair and says why (the plan, rejected, is not run)."""
    (tmp_path / "caps.yaml").write_text(
        "capabilities: {fs: {root: ., read: true}}\nllm: {temperature: 0}\n", encoding="utf-8"
    )
    bad = {"goal": "g", "steps": [{"id": "read", "tool": "fs.reed", "params": {"path": "x"}}]}
    with FakeOpenAIServer(ScriptedModel.sequence(bad, bad, bad)) as server:
        proc = planloom(
            "plan", "g", "--capabilities", "caps.yaml", "--base-url", server.base_url,
            "--model", "m", "--no", cwd=tmp_path,
        )  # fmt: skip
        asked = len(server.requests)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert asked == 2, proc.stderr
    assert "the model's plan #2 was invalid:" in proc.stderr
    assert "the model's plan #3" not in proc.stderr
    assert (
        "the model answered repair 1 with the plan it was asked to repair (temperature 0: "
        "asking again would get it again): falling back to one agent step"
    ) in proc.stderr


@pytest.mark.slow
def test_a_valid_plan_without_any_tools_says_none_are_granted(tmp_path: Path) -> None:
    talk = {"goal": "g", "steps": [{"id": "answer", "agent": {"goal": "say hi"}}]}
    with FakeOpenAIServer(ScriptedModel.sequence(talk, "hi")) as server:
        proc = planloom(
            "plan", "g", "--base-url", server.base_url, "--model", "m", "--json",
            cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "note: no capabilities are granted" in proc.stderr


# -- 5. replays: their messages, and the same JSON twice ----------------------------------


@pytest.mark.slow
def test_a_replay_says_recorded_decisions_and_gives_the_same_json_twice(tmp_path: Path) -> None:
    cassette = shutil.copy(MAIN_JOB / "cassette.yaml", tmp_path / "cassette.yaml")
    first = planloom("replay", cassette, "--json", cwd=tmp_path)
    second = planloom("replay", cassette, "--json", cwd=tmp_path)
    assert first.returncode == second.returncode == 0, first.stderr
    assert first.stdout == second.stdout  # byte for byte: no fresh run id, no clock
    result = _json(first)
    assert result["run_id"].startswith("replay-")
    assert [a["at"] for a in result["approvals"]] == [None, None]
    assert "gate: save fs.write approved (recorded)" in first.stderr
    assert "approved by" not in first.stderr


# -- 6. saving a plan over an existing file ------------------------------------------------


@pytest.mark.slow
def test_plan_o_refuses_to_replace_a_file_without_force(tmp_path: Path) -> None:
    (tmp_path / "caps.yaml").write_text(
        "capabilities: {fs: {root: ., read: true}}\n", encoding="utf-8"
    )
    (tmp_path / "notes.txt").write_text("n", encoding="utf-8")
    (tmp_path / "mine.yaml").write_text("my own recipe\n", encoding="utf-8")
    with FakeOpenAIServer(ScriptedModel.sequence(READ_PLAN, READ_PLAN)) as server:
        args = ("plan", "g", "--capabilities", "caps.yaml", "--base-url", server.base_url,
                "--model", "m", "-o", "mine.yaml")  # fmt: skip
        refused = planloom(*args, cwd=tmp_path)
        assert refused.returncode == 2, refused.stderr
        assert "-o mine.yaml: the file exists; pass --force to replace it" in refused.stderr
        assert server.requests == []  # said before the model was asked
        assert (tmp_path / "mine.yaml").read_text() == "my own recipe\n"
        forced = planloom(*args, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "fs.read" in (tmp_path / "mine.yaml").read_text()
    assert not list(tmp_path.glob(".mine.yaml.*"))  # no draft left behind


@pytest.mark.slow
def test_the_plan_menu_asks_before_replacing_a_file(tmp_path: Path) -> None:
    (tmp_path / "caps.yaml").write_text(
        "capabilities: {fs: {root: ., read: true}}\n", encoding="utf-8"
    )
    (tmp_path / "notes.txt").write_text("n", encoding="utf-8")
    (tmp_path / "mine.yaml").write_text("my own recipe\n", encoding="utf-8")
    write = {
        "goal": "g",
        "steps": [{"id": "w", "tool": "fs.write", "params": {"path": "o.txt", "content": "x"}}],
    }
    (tmp_path / "caps.yaml").write_text(
        "capabilities: {fs: {root: ., read: true, write: ['*.txt']}}\n", encoding="utf-8"
    )
    log = io.StringIO()
    with FakeOpenAIServer(ScriptedModel.sequence(write)) as server:
        child = pexpect.spawn(
            PLANLOOM,
            ["plan", "g", "--capabilities", "caps.yaml", "--base-url", server.base_url,
             "--model", "m"],
            cwd=str(tmp_path), env={**env(), "TERM": "xterm"}, timeout=TIMEOUT,
            encoding="utf-8", dimensions=(40, 200),
        )  # fmt: skip
        child.logfile_read = log
        try:
            child.expect(r"\[s\]ave as recipe > ")
            child.sendline("s")
            child.expect(r"save as \[plan.yaml\] > ")
            child.sendline("mine.yaml")
            child.expect(r"mine.yaml exists: replace it\? \[y/N\] > ")
            child.sendline("")  # no
            child.expect(r"not saved: mine.yaml is left as it was")
            assert (tmp_path / "mine.yaml").read_text() == "my own recipe\n"
            child.expect(r"\[s\]ave as recipe > ")
            child.sendline("s")
            child.expect(r"save as \[plan.yaml\] > ")
            child.sendline("mine.yaml")
            child.expect(r"replace it\? \[y/N\] > ")
            child.sendline("y")
            child.expect(r"saved to mine.yaml")
            child.expect(r"\[s\]ave as recipe > ")
            child.sendline("r")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
    assert "fs.write" in (tmp_path / "mine.yaml").read_text(), log.getvalue()


# -- 7. plugins as the README names them; record.py with the wrong Python -----------------

PLUGIN = """\
def register(registry):
    @registry.function("team.hello", side_effects=False)
    def hello(name: str) -> str:
        return f"hello {name}"
"""

HELLO = """\
version: 1
name: hello
capabilities: {team: {}}
steps:
  - {id: hi, tool: team.hello, params: {name: ada}}
"""


@pytest.mark.slow
def test_a_plugin_can_be_a_file_path_or_a_module_here_before_or_after_the_command(
    tmp_path: Path,
) -> None:
    (tmp_path / "myplugin.py").write_text(PLUGIN, encoding="utf-8")
    (tmp_path / "hello.yaml").write_text(HELLO, encoding="utf-8")
    for args in (
        ("--plugin", "myplugin", "run", "hello.yaml"),  # as the README writes it
        ("--plugin", "./myplugin.py", "run", "hello.yaml"),
        ("run", "hello.yaml", "--plugin", "myplugin"),
        ("run", "hello.yaml", "--plugin", str(tmp_path / "myplugin.py")),
    ):
        proc = planloom(*args, "--json", cwd=tmp_path)
        assert proc.returncode == 0, (args, proc.stderr)
        assert _json(proc)["steps"]["hi"]["output"] == "hello ada"
    missing = planloom("--plugin", "./nothere.py", "run", "hello.yaml", cwd=tmp_path)
    assert missing.returncode == 2
    assert "--plugin ./nothere.py: no such file:" in missing.stderr


def test_record_py_with_a_python_lacking_planloom_says_which_python_to_use() -> None:
    done = subprocess.run(
        [sys.executable, "-S", str(MAIN_JOB / "record.py"), "/dev/null"],
        capture_output=True, text=True, timeout=TIMEOUT, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 1
    assert "cannot import planloom" in done.stderr
    assert ".venv/bin/python recipes/main-job/record.py" in done.stderr
    assert "Traceback" not in done.stderr


# -- 9. partial for_each outputs; agent steps in a dry run ---------------------------------


def test_a_can_fail_fan_out_keeps_the_outputs_of_the_items_that_succeeded(
    tmp_path: Path,
) -> None:
    for name in ("a.txt", "c.txt"):
        (tmp_path / name).write_text(name, encoding="utf-8")
    (tmp_path / "r.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            name: partial
            capabilities: {fs: {root: ., read: true}}
            steps:
              - id: read
                for_each: [a.txt, b.txt, c.txt]
                tool: fs.read
                params: {path: "${{ item }}"}
                can_fail: true
              - id: count
                tool: fs.list
                params: {path: .}
                when: ${{ steps.read.output | select | list | length == 2 }}
            """
        ),
        encoding="utf-8",
    )
    result = _json(planloom("run", "r.yaml", "--json", cwd=tmp_path))
    read = result["steps"]["read"]
    assert read["status"] == "failed_acceptable"
    assert [o and o["content"] for o in read["output"]] == ["a.txt", None, "c.txt"]
    assert "item 1:" in read["error"]
    assert result["steps"]["count"]["status"] == "succeeded"  # it read the partial output


@pytest.mark.slow
def test_a_dry_run_runs_agent_steps_whose_tools_are_read_only(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("remember the milk", encoding="utf-8")
    (tmp_path / "r.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            name: agents
            capabilities: {fs: {root: ., read: true, write: ["out/**"]}}
            steps:
              - id: reader
                agent: {goal: "read notes.txt", tools: [fs.read]}
              - id: writer
                agent: {goal: "write a file", tools: [fs.read, fs.write]}
            """
        ),
        encoding="utf-8",
    )

    def model(request: ChatRequest) -> ChatReply | str:
        if any(m.get("role") == "tool" for m in request.messages):
            return "it says: remember the milk"
        return ChatReply(tool_calls=[ToolCall("fs__read", {"path": "notes.txt"})])

    with FakeOpenAIServer(ScriptedModel(model)) as server:
        proc = planloom(
            "run", "r.yaml", "--dry-run", "--json", "--base-url", server.base_url,
            "--model", "m", cwd=tmp_path,
        )  # fmt: skip
    result = _json(proc)
    assert result["steps"]["reader"]["status"] == "succeeded", result["steps"]["reader"]
    assert result["steps"]["reader"]["output"] == "it says: remember the milk"
    writer = result["steps"]["writer"]
    assert writer["status"] == "skipped"
    assert "may call fs.write, which has side effects" in writer["error"]
    assert not (tmp_path / "out").exists()
