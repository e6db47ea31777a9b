"""A run reports `succeeded` only when its steps did what the plan says (the README's
"Models"): a plan or recipe with no steps is `error[empty-plan]`; an agent step with
`min_tool_calls` that answers before making them is told once, then fails
(`agent.no-tool-calls`); an endpoint that drops the tools it was sent is named; the agent a
goal falls back to must use a tool. Through the real `planloom` command, the model a
`FakeOpenAIServer` on 127.0.0.1 (answering as the real small models that showed this did:
an empty plan, prose instead of tool calls, a prompt counted without its tools).
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _procs import planloom

from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ScriptedModel, ToolCall

CAPS = "capabilities:\n  fs: {root: work, read: true, write: ['out/**']}\n"
PROSE = "I have written the file out/hello.txt with the text hello."


def _clean(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.txt").write_text("apples", encoding="utf-8")
    (tmp_path / "caps.yaml").write_text(CAPS, encoding="utf-8")
    return tmp_path


def _write(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(textwrap.dedent(text), encoding="utf-8")


# -- empty plans ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("steps", ["steps: []", "steps:"])
def test_a_recipe_with_no_steps_is_an_empty_plan_not_a_success(work: Path, steps: str) -> None:
    _write(work, "r.yaml", f"version: 1\nname: nothing\n{steps}\n")
    checked = planloom("validate", "r.yaml", "--json", cwd=work)
    _clean(checked)
    assert checked.returncode == 2
    [problem] = json.loads(checked.stdout)
    assert (problem["rule"], problem["line"]) == ("empty-plan", 3)
    ran = planloom("run", "r.yaml", cwd=work)
    _clean(ran)
    assert ran.returncode == 2
    assert "error[empty-plan]" in ran.stderr
    assert "succeeded" not in ran.stderr


def test_a_recipe_of_finally_steps_only_and_a_goal_to_plan_are_valid(work: Path) -> None:
    _write(
        work,
        "final.yaml",
        """\
        version: 1
        name: cleanup
        capabilities: {fs: {root: work}}
        steps: []
        finally:
          - {id: look, tool: fs.list, params: {path: .}}
        """,
    )
    _write(work, "goal.yaml", "version: 1\nname: g\ngoal: Read a.txt\nsteps: []\n")
    for name in ("final.yaml", "goal.yaml"):
        checked = planloom("validate", name, cwd=work)
        assert checked.returncode == 0, (name, checked.stderr)


HELLO = "Write the text hello to out/hello.txt"


def _planned(
    server: FakeOpenAIServer, work: Path, *extra: str, goal: str = HELLO
) -> subprocess.CompletedProcess[str]:
    proc = planloom(
        "plan", goal,
        "--base-url", server.base_url, "--model", "m",
        "--capabilities", "caps.yaml", "--yes", "--json", *extra, cwd=work,
    )  # fmt: skip
    _clean(proc)
    return proc


@pytest.mark.slow
def test_an_empty_plan_from_the_model_goes_to_repair(work: Path) -> None:
    good = {
        "steps": [
            {
                "id": "write",
                "tool": "fs.write",
                "params": {"path": "out/hello.txt", "content": "hello", "create_dirs": True},
            }
        ]
    }
    with FakeOpenAIServer(ScriptedModel.sequence({"steps": []}, good)) as server:
        proc = _planned(server, work)
        requests = [r for r in server.requests if r.tools is None and len(r.messages) > 1]
    assert proc.returncode == 0, proc.stderr
    assert (work / "work" / "out" / "hello.txt").read_text() == "hello"
    repair = requests[1].last_user_text()
    assert "empty-plan" in repair
    assert "the plan has no steps" in repair


def _prose_or_plan(request: ChatRequest) -> ChatReply:
    """A model that plans nothing and, as the agent it falls back to, only talks."""
    if request.tools is None:
        return ChatReply(content=json.dumps({"steps": []}))
    return ChatReply(content=PROSE)


@pytest.mark.slow
def test_a_goal_the_model_never_plans_is_not_reported_done(work: Path) -> None:
    """Repairs run out; the agent the goal falls back to answers prose twice: it must have
    used a tool, so the run fails, naming why, and nothing was written."""
    with FakeOpenAIServer(_prose_or_plan) as server:
        proc = _planned(server, work)
        agent_turns = [r for r in server.requests if r.tools]
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "failed"
    (step,) = result["steps"].values()
    assert step["status"] == "failed"
    assert "agent.no-tool-calls" in step["error"]
    assert "min_tool_calls" in step["error"]
    assert not (work / "work" / "out").exists()
    assert len(agent_turns) == 2  # told once that its answer does not count yet
    assert "does not count yet" in agent_turns[1].last_user_text()


@pytest.mark.slow
def test_planning_that_fails_says_so_without_a_resume_hint(tmp_path: Path) -> None:
    """No grants: the model's empty plans cannot fall back to an agent; nothing ran, so
    there is nothing to resume, and the summary says no steps ran."""
    with FakeOpenAIServer(ScriptedModel.sequence(*[{"steps": []}] * 3)) as server:
        proc = planloom(
            "plan", "Do something", "--base-url", server.base_url, "--model", "m",
            cwd=tmp_path,
        )  # fmt: skip
    _clean(proc)
    assert proc.returncode == 1, proc.stderr
    assert "planning failed" in proc.stderr
    assert "empty-plan" in proc.stderr
    assert "resume" not in proc.stderr
    assert "no steps ran" in proc.stderr
    assert "(0 steps, " in proc.stderr


# -- agents that must act ------------------------------------------------------------------


def _agent_recipe(work: Path, **agent: Any) -> None:
    spec = {"goal": "What does a.txt say?", "tools": ["fs.read", "fs.list"], **agent}
    _write(
        work,
        "r.yaml",
        f"""\
        version: 1
        name: ask
        capabilities: {{fs: {{root: work}}}}
        steps:
          - id: look
            agent: {json.dumps(spec)}
        """,
    )


def _run(server: FakeOpenAIServer, work: Path) -> tuple[int, dict[str, Any]]:
    proc = planloom(
        "run", "r.yaml", "--base-url", server.base_url, "--model", "m", "--json", cwd=work
    )
    _clean(proc)
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.slow
def test_an_agent_that_must_act_and_only_talks_fails_after_being_told_once(work: Path) -> None:
    _agent_recipe(work, min_tool_calls=1)
    with FakeOpenAIServer(ScriptedModel.sequence(PROSE, PROSE, PROSE)) as server:
        code, result = _run(server, work)
        turns = len(server.requests)
    assert code == 1
    step = result["steps"]["look"]
    assert step["status"] == "failed"
    assert "answered after 0 successful tool calls, and this task needs 1" in step["error"]
    assert "agent.no-tool-calls" in step["error"]
    assert "the model never asked for a tool: if the endpoint does not support" in step["error"]
    assert step["usage"]["tool_calls"] == 0
    assert turns == 2


@pytest.mark.slow
def test_an_agent_told_to_act_that_then_calls_a_tool_succeeds(work: Path) -> None:
    _agent_recipe(work, min_tool_calls=1)
    script = ScriptedModel.sequence(
        PROSE,
        ChatReply(tool_calls=[ToolCall("fs__read", {"path": "a.txt"})]),
        "It says apples.",
    )
    with FakeOpenAIServer(script) as server:
        code, result = _run(server, work)
    assert code == 0, result
    step = result["steps"]["look"]
    assert (step["status"], step["output"]) == ("succeeded", "It says apples.")
    assert step["usage"]["tool_calls"] == 1


@pytest.mark.slow
def test_a_failed_tool_call_does_not_count_towards_min_tool_calls(work: Path) -> None:
    _agent_recipe(work, min_tool_calls=1)
    script = ScriptedModel.sequence(
        ChatReply(tool_calls=[ToolCall("fs__read", {"path": "missing.txt"})]),
        "It says nothing.",
        "Still nothing.",
    )
    with FakeOpenAIServer(script) as server:
        code, result = _run(server, work)
    assert code == 1
    error = result["steps"]["look"]["error"]
    assert "answered after 0 successful tool calls" in error
    assert "never asked for a tool" not in error  # it asked: the endpoint takes tools


@pytest.mark.slow
def test_an_endpoint_that_drops_the_tools_is_named_not_trusted(work: Path) -> None:
    """As llama.cpp's default chat format does: the tools are not in the prompt (39 tokens
    counted), and the model answers prose. Even with no `min_tool_calls`, the step fails."""

    def drops_tools(request: ChatRequest) -> ChatReply:
        assert request.tools, "the agent sends its tools"
        return ChatReply(content="a.txt says apples.", prompt_tokens=39)

    _agent_recipe(work)
    with FakeOpenAIServer(drops_tools) as server:
        code, result = _run(server, work)
    assert code == 1
    error = result["steps"]["look"]["error"]
    assert "dropped the tools it was sent" in error
    assert "does not support tool calls (agent.no-tool-support)" in error


@pytest.mark.slow
def test_an_endpoint_that_counts_the_tools_and_a_model_that_answers_at_once_is_trusted(
    work: Path,
) -> None:
    """The control: the same prose answer with a prompt count that holds the tools."""
    _agent_recipe(work)
    with FakeOpenAIServer(ScriptedModel.sequence("a.txt says apples.")) as server:
        code, result = _run(server, work)
    assert code == 0, result
    assert result["steps"]["look"]["output"] == "a.txt says apples."


def test_min_tool_calls_is_checked_in_the_recipe(work: Path) -> None:
    _agent_recipe(work, min_tool_calls=-1)
    checked = planloom("validate", "r.yaml", "--json", cwd=work)
    _clean(checked)
    assert checked.returncode == 2
    [problem] = json.loads(checked.stdout)
    assert problem["rule"] == "bad-value"
    assert "min_tool_calls" in problem["message"]


@pytest.mark.slow
def test_a_valid_plan_that_ignores_the_goals_paths_goes_to_repair(work: Path) -> None:
    """A small model copies the prompt's example: a valid plan, sure to "succeed", that
    does something else. A path the goal names and no step uses is a problem to repair."""
    copied = {
        "steps": [
            {"id": "first", "tool": "fs.read", "params": {"path": "a.txt"}},
            {
                "id": "second",
                "tool": "fs.write",
                "params": {
                    "path": "out/summary.txt",
                    "content": "${{ steps.first.output.content }}",
                },
            },
        ]
    }
    right = {
        "steps": [
            {
                "id": "write",
                "tool": "fs.write",
                "params": {"path": "out/hello.txt", "content": "hello", "create_dirs": True},
            }
        ]
    }
    with FakeOpenAIServer(ScriptedModel.sequence(copied, right)) as server:
        proc = _planned(server, work)
        repair = server.requests[1].last_user_text()
    assert proc.returncode == 0, proc.stderr
    assert "the goal names 'out/hello.txt', but no step uses any of them" in repair
    assert "(goal-path-unused)" in repair
    assert (work / "work" / "out" / "hello.txt").read_text() == "hello"
    assert not (work / "work" / "out" / "summary.txt").exists()


@pytest.mark.slow
def test_a_plan_that_never_uses_the_goals_paths_is_not_run(work: Path) -> None:
    copied = {"steps": [{"id": "first", "tool": "fs.read", "params": {"path": "a.txt"}}]}
    with FakeOpenAIServer(lambda request: PROSE if request.tools else json.dumps(copied)) as server:
        proc = _planned(server, work)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    (step,) = result["steps"].values()  # the agent the goal fell back to, which only talked
    assert "agent.no-tool-calls" in step["error"]


def _step(step_id: str, tool: str, **params: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": tool, "params": params}


HELLO_PLAN = {"steps": [_step("write", "fs.write", path="out/hello.txt", content="hello")]}
UPPER = "Read a.txt and write its content upper-cased to out/upper.txt"
UPPER_PLAN = {
    "steps": [
        _step("read", "fs.read", path="a.txt"),
        _step(
            "save",
            "fs.write",
            path="out/upper.txt",
            content="${{ steps.read.output.content | upper }}",
        ),
    ]
}


def _copies_the_example(request: ChatRequest) -> dict[str, Any]:
    """The example plan the system prompt shows, as a small model answers it."""
    system = request.messages[0]["content"]
    answer: dict[str, Any] = json.loads(system.split("Its plan: ", 1)[1].split("\n", 1)[0])
    return answer


@pytest.mark.slow
@pytest.mark.parametrize(
    ("goal", "wrong", "right", "told"),
    [
        pytest.param(
            HELLO,
            lambda r: {"steps": [_step("write", "fs.write", path="out/hello.txt", content="...")]},
            HELLO_PLAN,
            """step "write": param content is a placeholder ('...'), not a value (placeholder)""",
            id="placeholder",
        ),
        pytest.param(
            HELLO,
            _copies_the_example,
            HELLO_PLAN,
            """step "first" is the prompt's example step, not a step for this goal""",
            id="example-copied",
        ),
        pytest.param(
            UPPER,
            lambda r: {"steps": [UPPER_PLAN["steps"][0]]},
            UPPER_PLAN,
            "the goal asks for 'out/upper.txt', which does not exist yet, and no step makes it",
            id="goal-file-not-made",
        ),
    ],
)
def test_a_valid_plan_that_is_not_for_its_goal_goes_to_repair(
    work: Path,
    goal: str,
    wrong: Callable[[ChatRequest], dict[str, Any]],
    right: dict[str, Any],
    told: str,
) -> None:
    """What validation cannot see without the goal: a placeholder for the text, the
    prompt's example copied, the file the goal asks for not made. Each is sent back."""
    answers = iter([wrong, lambda r: right])
    with FakeOpenAIServer(lambda request: json.dumps(next(answers)(request))) as server:
        proc = _planned(server, work, goal=goal)
        repair = server.requests[-1].last_user_text()
    assert proc.returncode == 0, proc.stderr
    assert len(server.requests) == 2
    assert told in repair
    path, content = {HELLO: ("out/hello.txt", "hello"), UPPER: ("out/upper.txt", "APPLES")}[goal]
    assert (work / "work" / path).read_text() == content


@pytest.mark.slow
def test_a_plan_that_makes_the_goals_file_and_reads_another_way_is_accepted(work: Path) -> None:
    """An existing path the goal names may be reached another way (a search, a listing):
    only a file still to be made must be named by a step."""
    plan = {
        "steps": [
            _step("find", "fs.search", pattern="apples", path="."),
            _step("save", "fs.write", path="out/upper.txt", content="APPLES"),
        ]
    }
    with FakeOpenAIServer(ScriptedModel.sequence(plan)) as server:
        proc = _planned(server, work, goal=UPPER)
    assert proc.returncode == 0, proc.stderr
    assert len(server.requests) == 1
