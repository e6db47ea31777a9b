"""Agent steps, natural-language fallbacks and the `llm.*` capabilities, through the executor.

Recipes are parsed and validated as a user's would be; the executor runs them with the real
sandbox (fs jailed in `tmp_path`), the real gates, `ReactAgent` and an `LLMClient` talking
HTTP to `FakeOpenAIServer`. The step's transcript, the files on disk and the requests the
model received are the evidence.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from capabilities import Registry, default_registry
from engine.approval import ApproveAll, Approver, DenyAll, GateRequest
from engine.errors import PlanValidationError
from engine.executor import Executor
from engine.llm import Budget, LLMClient, LLMConfig
from engine.results import TERMINAL, Decision, RunResult
from engine.testing import (
    ChatReply,
    ChatRequest,
    FakeClock,
    FakeOpenAIServer,
    Fault,
    ModelFunction,
    ScriptedModel,
    ScriptedTools,
    ToolCall,
    Wait,
)
from engine.validation import validate_plan
from planners.react import ReactAgent
from planners.recipe import parse_recipe_text

# -- helpers -----------------------------------------------------------------------------


def recipe(steps: list[dict[str, Any]], capabilities: dict[str, Any] | None = None) -> str:
    """Recipe text (JSON is YAML); by default fs is granted, jailed in `jail/`."""
    grants = capabilities or {"fs": {"root": "jail", "read": True, "write": True}}
    return json.dumps({"version": 1, "name": "t", "capabilities": grants, "steps": steps})


@pytest.fixture
def jail(tmp_path: Path) -> Path:
    folder = tmp_path / "jail"
    folder.mkdir()
    return folder


def run(
    text: str,
    base_dir: Path,
    model: ModelFunction | ScriptedModel,
    *,
    approver: Approver | None = None,
    agent: bool = True,
    supports_json_schema: bool = True,
    registry: Registry | None = None,
    budget: Budget | None = None,
    release: threading.Event | None = None,
    clock: FakeClock | None = None,
) -> tuple[RunResult, FakeOpenAIServer]:
    """Validate and run `text` with a model served over HTTP; every step must end terminal.

    `release` is set once the run is over (a model function may block on it); the run keeps
    `clock`'s time if given.
    """
    registry = registry or default_registry()
    data, source = parse_recipe_text(text, "<test>")
    plan = validate_plan(data, source, registry, base_dir=base_dir)
    with FakeOpenAIServer(model, supports_json_schema=supports_json_schema) as server:

        async def go() -> RunResult:
            client = LLMClient(
                LLMConfig(model="m", base_url=server.base_url, api_key=SecretStr("k"), timeout=5),
                budget=budget or Budget(),
            )
            try:
                executor = Executor(
                    plan,
                    registry=registry,
                    base_dir=base_dir,
                    approver=approver or ApproveAll(),
                    agent_runner=ReactAgent(client) if agent else None,
                    llm=client,
                )
                return await executor.run()
            finally:
                await client.aclose()

        try:
            result = (clock.run if clock is not None else asyncio.run)(go())
        finally:
            if release is not None:
                release.set()
    assert server.errors == []  # the script never ran out or raised
    assert all(r.status in TERMINAL for r in result.steps.values())
    return result, server


def agent_step(goal: str, tools: list[str], sid: str = "work", **more: Any) -> dict[str, Any]:
    return {"id": sid, "agent": {"goal": goal, "tools": tools, **more}}


def tool_results(request: ChatRequest) -> list[str]:
    return [content for _, content in request.tool_results()]


# -- agent steps -------------------------------------------------------------------------


def read_then_write(request: ChatRequest) -> ChatReply | str:
    """Reads in.txt, writes its content upper-cased to out.txt, then answers."""
    results = request.tool_results()
    if not results:
        return ChatReply(tool_calls=[ToolCall("fs__read", {"path": "in.txt"})])
    if len(results) == 1:
        content = json.loads(results[0][1])["content"]
        return ChatReply(
            tool_calls=[ToolCall("fs__write", {"path": "out.txt", "content": content.upper()})]
        )
    return "I wrote the file out.txt"


def test_agent_step_reads_and_writes_through_the_sandbox(tmp_path: Path, jail: Path) -> None:
    (jail / "in.txt").write_text("hello agent")
    text = recipe([agent_step("Copy in.txt to out.txt, shouting", ["fs.read", "fs.write"])])
    result, server = run(text, tmp_path, read_then_write)
    step = result.steps["work"]
    assert step.status == "succeeded", step.error
    assert step.output == "I wrote the file out.txt"
    assert (jail / "out.txt").read_text() == "HELLO AGENT"
    assert step.transcript == [
        {"tool": "fs.read", "arguments": {"path": "in.txt"}, "status": "ok", "detail": None},
        {
            "tool": "fs.write",
            "arguments": {"path": "out.txt", "content": "HELLO AGENT"},
            "status": "ok",
            "detail": None,
        },
    ]
    assert server.requests[0].tool_names() == ["fs__read", "fs__write"]
    assert server.requests[0].messages[1]["content"] == "Copy in.txt to out.txt, shouting"
    # the write is a side effect: it went through the gate
    assert [(d.action, d.approved) for d in result.approvals] == [("fs.write", True)]
    assert result.usage.llm_calls == 3
    assert result.usage.tool_calls == 2


def test_the_goal_is_rendered_from_upstream_outputs(tmp_path: Path, jail: Path) -> None:
    (jail / "topic.txt").write_text("owls")
    steps = [
        {"id": "topic", "tool": "fs.read", "params": {"path": "topic.txt"}},
        agent_step("Write about ${{ steps.topic.output.content }}", []),
    ]
    result, server = run(recipe(steps), tmp_path, ScriptedModel.sequence("Owls hoot."))
    assert result.steps["work"].output == "Owls hoot."
    assert server.requests[0].messages[1]["content"] == "Write about owls"


def test_a_denied_write_is_an_error_in_the_transcript_whatever_the_answer_claims(
    tmp_path: Path, jail: Path
) -> None:
    (jail / "in.txt").write_text("hello agent")
    text = recipe([agent_step("Copy in.txt to out.txt", ["fs.read", "fs.write"])])
    result, server = run(text, tmp_path, read_then_write, approver=DenyAll())
    step = result.steps["work"]
    # the model claims the write; the transcript and the disk say otherwise
    assert step.output == "I wrote the file out.txt"
    assert not (jail / "out.txt").exists()
    assert step.transcript is not None
    assert [(e["tool"], e["status"]) for e in step.transcript] == [
        ("fs.read", "ok"),
        ("fs.write", "error"),
    ]
    assert "denied by approver" in step.transcript[1]["detail"]
    # the denial went back to the model as an observation
    observation = tool_results(server.requests[2])[-1]
    assert observation.startswith("error: denied by approver")
    assert [(d.action, d.approved) for d in result.approvals] == [("fs.write", False)]


def test_a_tool_not_in_the_steps_tools_is_refused(tmp_path: Path, jail: Path) -> None:
    model = ScriptedModel.sequence(
        ChatReply(tool_calls=[ToolCall("fs__write", {"path": "x.txt", "content": "pwn"})]),
        "could not write",
    )
    text = recipe([agent_step("Summarise", ["fs.read"])])
    result, server = run(text, tmp_path, model)
    assert server.requests[0].tool_names() == ["fs__read"]
    observation = tool_results(server.requests[1])[0]
    assert "there is no tool 'fs__write'" in observation
    assert not (jail / "x.txt").exists()
    assert result.approvals == []  # it never got as far as the gate
    assert result.usage.tool_calls == 0
    assert result.steps["work"].transcript == [
        {
            "tool": "fs__write",
            "arguments": json.dumps({"path": "x.txt", "content": "pwn"}),
            "status": "invalid",
            "detail": "unknown tool",
        }
    ]


@pytest.mark.parametrize(
    ("path", "rule"), [("../secret.txt", "fs.outside-root"), ("/etc/passwd", "fs.absolute-path")]
)
def test_a_path_outside_the_jail_is_denied_by_the_sandbox(
    tmp_path: Path, jail: Path, path: str, rule: str
) -> None:
    (tmp_path / "secret.txt").write_text("top secret")
    model = ScriptedModel.sequence(
        ChatReply(tool_calls=[ToolCall("fs__read", {"path": path})]), "I could not read it"
    )
    result, server = run(recipe([agent_step("Read it", ["fs.read"])]), tmp_path, model)
    observation = tool_results(server.requests[1])[0]
    assert observation.startswith(f"error: denied by rule {rule}")
    assert "top secret" not in json.dumps([r.messages for r in server.requests])
    step = result.steps["work"]
    assert step.status == "succeeded"
    assert step.transcript is not None
    assert step.transcript[0]["status"] == "error"
    assert rule in step.transcript[0]["detail"]


def test_an_agent_step_with_output_schema_returns_the_object(tmp_path: Path, jail: Path) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    model = ScriptedModel.sequence({"n": "three"}, {"n": 3})
    steps = [
        agent_step("Count", [], output_schema=schema),
        {
            "id": "save",
            "tool": "fs.write",
            "params": {"path": "n.txt", "content": "n=${{ steps.work.output.n }}"},
        },
    ]
    result, server = run(recipe(steps), tmp_path, model)
    assert result.steps["work"].output == {"n": 3}
    assert (jail / "n.txt").read_text() == "n=3"
    assert len(server.requests) == 2


def test_an_agent_step_reaching_max_iterations_fails_with_its_transcript(
    tmp_path: Path, jail: Path
) -> None:
    (jail / "a.txt").write_text("a")
    forever = ScriptedModel(
        lambda request: ChatReply(tool_calls=[ToolCall("fs__read", {"path": "a.txt"})])
    )
    text = recipe([agent_step("Loop", ["fs.read"], max_iterations=2)])
    result, server = run(text, tmp_path, forever)
    step = result.steps["work"]
    assert step.status == "failed"
    assert step.error is not None
    assert "max_iterations (2) reached" in step.error
    assert step.error.count("fs.read: ok") == 2
    assert len(server.requests) == 2
    assert result.status == "failed"


def test_three_invalid_responses_fail_the_agent_step(tmp_path: Path, jail: Path) -> None:
    bad = ChatReply(tool_calls=[ToolCall("shell__run", {"argv": ["id"]})])
    text = recipe(
        [
            agent_step("Try", ["fs.read"]),
            {"id": "after", "tool": "fs.list", "params": {"path": "."}, "depends_on": ["work"]},
        ]
    )
    result, _ = run(text, tmp_path, ScriptedModel.sequence(bad, bad, bad))
    assert result.steps["work"].status == "failed"
    assert "3 invalid responses in a row" in (result.steps["work"].error or "")
    assert result.steps["after"].status in ("pending", "skipped", "cancelled")


def test_an_agent_step_without_a_runner_says_a_model_is_needed(tmp_path: Path, jail: Path) -> None:
    text = recipe([agent_step("Do something", ["fs.read"])])
    result, server = run(text, tmp_path, ScriptedModel.sequence(), agent=False)
    step = result.steps["work"]
    assert step.status == "failed"
    assert "needs a model" in (step.error or "")
    assert "--model" in (step.error or "")
    assert server.requests == []


def test_parallel_agent_calls_run_concurrently_through_the_sandbox(
    tmp_path: Path, jail: Path
) -> None:
    registry = default_registry()
    tools = ScriptedTools(registry)
    for key in "abc":
        tools.script(key, Wait(0.3, f"result {key}"))
    model = ScriptedModel.sequence(
        ChatReply(tool_calls=[ToolCall("test__run", {"key": k}, id=f"c{k}") for k in "abc"]),
        "all three done",
    )
    text = recipe([agent_step("Run a, b and c", ["test.run"])], {"test": {}})
    result, server = run(text, tmp_path, model, registry=registry)
    assert result.steps["work"].output == "all three done"
    started = [c.started for c in tools.calls]
    ended = [c.ended or 0.0 for c in tools.calls]
    assert len(started) == 3
    assert max(ended) - min(started) < 0.6, "the calls ran one after another"
    assert server.requests[1].tool_results() == [
        ("ca", "result a"),
        ("cb", "result b"),
        ("cc", "result c"),
    ]


def test_agent_side_effect_calls_are_gated_one_by_one(tmp_path: Path, jail: Path) -> None:
    registry = default_registry()
    tools = ScriptedTools(registry)
    model = ScriptedModel.sequence(
        ChatReply(
            tool_calls=[
                ToolCall("test__write", {"key": "yes", "value": 1}),
                ToolCall("test__write", {"key": "no", "value": 2}),
                ToolCall("test__run", {"key": "read", "value": 3}),
            ]
        ),
        "done",
    )

    class Picky:
        async def decide(self, request: GateRequest) -> Decision:
            approved = request.params["key"] == "yes"
            return Decision(
                step_id=request.step_id,
                action=request.action,
                params_hash=request.params_hash,
                approved=approved,
                by="test",
                reason=None if approved else "not that one",
            )

        async def answer(self, step_id: str, question: Any) -> Any:
            raise AssertionError("no questions here")

    text = recipe([agent_step("Write", ["test.write", "test.run"])], {"test": {}})
    result, server = run(text, tmp_path, model, registry=registry, approver=Picky())
    assert [c.key for c in tools.calls] == ["yes", "read"]
    assert [(d.action, d.approved) for d in result.approvals] == [
        ("test.write", True),
        ("test.write", False),
    ]  # the read-only call is not gated
    observations = [content for _, content in server.requests[1].tool_results()]
    assert observations == ["1", "error: denied by approver: not that one", "3"]
    transcript = result.steps["work"].transcript or []
    assert [e["status"] for e in transcript] == ["ok", "error", "ok"]


def test_agent_tool_calls_count_against_max_tool_calls(tmp_path: Path, jail: Path) -> None:
    model = ScriptedModel.sequence(
        ChatReply(tool_calls=[ToolCall("fs__list", {"path": "."})]),
        ChatReply(tool_calls=[ToolCall("fs__list", {"path": "."})]),
        "stopped",
    )
    data = json.loads(recipe([agent_step("List twice", ["fs.list"])]))
    data["limits"] = {"max_tool_calls": 1}
    result, server = run(json.dumps(data), tmp_path, model)
    assert result.usage.tool_calls == 1
    step = result.steps["work"]
    assert step.status == "failed"  # a spent run budget ends the step, not just the call
    assert "max_tool_calls" in (step.error or "")
    assert len(server.requests) == 2
    transcript = step.transcript or []
    assert [e["status"] for e in transcript] == ["ok", "error"]


def test_an_agent_step_fails_when_the_model_budget_is_spent(tmp_path: Path, jail: Path) -> None:
    forever = ScriptedModel(
        lambda request: ChatReply(tool_calls=[ToolCall("fs__list", {"path": "."})])
    )
    text = recipe([agent_step("List", ["fs.list"])])
    result, server = run(text, tmp_path, forever, budget=Budget(max_calls=2))
    step = result.steps["work"]
    assert step.status == "failed"
    assert "max_llm_calls" in (step.error or "")
    assert len(server.requests) == 2
    assert result.usage.llm_calls == 2
    assert len(step.transcript or []) == 2  # what happened before the budget ran out


def test_an_agent_step_times_out_and_keeps_its_transcript(tmp_path: Path, jail: Path) -> None:
    release = threading.Event()

    def slow_second(request: ChatRequest) -> ChatReply:
        if request.tool_results():
            release.wait(10)  # the fake serves in its own thread; the step gives up first
        return ChatReply(tool_calls=[ToolCall("fs__list", {"path": "."})])

    text = recipe([{**agent_step("List", ["fs.list"]), "timeout": 0.5}])
    started = time.monotonic()
    result, _ = run(text, tmp_path, slow_second, release=release)
    step = result.steps["work"]
    assert step.status == "failed"
    assert "agent timed out after 0.5 s" in (step.error or "")
    assert [e["status"] for e in step.transcript or []] == ["ok"]
    assert time.monotonic() - started < 3


@pytest.mark.parametrize(
    ("tools", "rule", "needle"),
    [(["shell.run"], "not-granted", "shell"), (["fs.raed"], "unknown-tool", "fs.read")],
)
def test_agent_tools_are_validated_before_anything_runs(
    tmp_path: Path, tools: list[str], rule: str, needle: str
) -> None:
    text = recipe([agent_step("x", tools)], {"fs": {"root": "jail", "read": True}})
    data, source = parse_recipe_text(text, "<test>")
    with pytest.raises(PlanValidationError) as caught:
        validate_plan(data, source, default_registry(), base_dir=tmp_path)
    (problem,) = caught.value.diagnostics
    assert problem.rule == rule
    assert needle in f"{problem.message} {problem.hint}"


# -- natural-language fallbacks ----------------------------------------------------------


def summarise_readme(request: ChatRequest) -> ChatReply | str:
    if not request.tool_results():
        return ChatReply(tool_calls=[ToolCall("fs__read", {"path": "README.md"})])
    content = json.loads(request.tool_results()[0][1])["content"]
    return f"Summary: {content.split('.')[0]}."


def test_a_string_fallback_runs_the_agent_with_the_failure_as_context(
    tmp_path: Path, jail: Path
) -> None:
    (jail / "README.md").write_text("Planloom runs plans. It has many features.")
    steps = [
        {
            "id": "readit",
            "tool": "fs.read",
            "params": {"path": "MISSING.md"},
            "fallback": "read README instead and summarise it",
        }
    ]
    grants = {"fs": {"root": "jail", "read": True, "write": ["notes/**"]}, "llm": {}}
    result, server = run(recipe(steps, grants), tmp_path, summarise_readme)
    step = result.steps["readit"]
    assert step.status == "fallback", step.error
    assert step.output == "Summary: Planloom runs plans."
    assert step.error is not None
    assert step.error.startswith("primary failed:")
    assert "MISSING.md" in step.error
    task_message = server.requests[0].messages[1]
    assert task_message["role"] == "user"
    text = task_message["content"]
    assert text.startswith("read README instead and summarise it")
    assert "step 'readit'" in text  # the failed step
    assert "fs.read" in text
    assert '{"path": "MISSING.md"}' in text  # its rendered params
    primary_error = step.error.removeprefix("primary failed: ")
    assert primary_error in text  # and its error
    # the fallback may use the granted tools, but not the llm or human families
    offered = server.requests[0].tool_names()
    assert "fs__read" in offered
    assert not any(name.startswith(("llm__", "human__")) for name in offered)
    assert step.transcript == [
        {"tool": "fs.read", "arguments": {"path": "README.md"}, "status": "ok", "detail": None}
    ]


def test_a_string_fallback_renders_the_params_it_reports(tmp_path: Path, jail: Path) -> None:
    (jail / "name.txt").write_text("ghost.md")
    steps = [
        {"id": "name", "tool": "fs.read", "params": {"path": "name.txt"}},
        {
            "id": "readit",
            "tool": "fs.read",
            "params": {"path": "${{ steps.name.output.content }}"},
            "fallback": "say what went wrong",
        },
    ]
    result, server = run(recipe(steps), tmp_path, ScriptedModel.sequence("it was missing"))
    assert result.steps["readit"].status == "fallback"
    assert '{"path": "ghost.md"}' in server.requests[0].messages[1]["content"]


def test_a_string_fallback_whose_agent_fails_fails_the_step(tmp_path: Path, jail: Path) -> None:
    steps = [
        {
            "id": "readit",
            "tool": "fs.read",
            "params": {"path": "MISSING.md"},
            "fallback": "try harder",
            "can_fail": True,
        }
    ]
    result, _ = run(recipe(steps), tmp_path, ScriptedModel.sequence("", "", ""))
    step = result.steps["readit"]
    assert step.status == "failed_acceptable"
    assert "fallback failed:" in (step.error or "")
    assert "3 invalid answers" in (step.error or "")


def test_a_string_fallback_without_a_runner_says_a_model_is_needed(
    tmp_path: Path, jail: Path
) -> None:
    steps = [
        {
            "id": "readit",
            "tool": "fs.read",
            "params": {"path": "MISSING.md"},
            "fallback": "read README instead",
        }
    ]
    result, _ = run(recipe(steps), tmp_path, ScriptedModel.sequence(), agent=False)
    step = result.steps["readit"]
    assert step.status == "failed"
    assert "fallback failed:" in (step.error or "")
    assert "--model" in (step.error or "")


# -- llm.complete and llm.extract --------------------------------------------------------

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def llm_steps() -> str:
    steps = [
        {
            "id": "ask",
            "tool": "llm.complete",
            "params": {"prompt": "Say hi", "system": "Be brief."},
        },
        {"id": "pull", "tool": "llm.extract", "params": {"prompt": "Ada is 36.", "schema": PERSON}},
    ]
    return recipe(steps, {"llm": {}})


def structured(request: ChatRequest) -> ChatReply:
    if request.response_format is None:
        return ChatReply(content="hi there", prompt_tokens=11, completion_tokens=2)
    return ChatReply(
        content=json.dumps({"name": "Ada", "age": 36}), prompt_tokens=20, completion_tokens=9
    )


def test_llm_complete_and_extract(tmp_path: Path) -> None:
    result, server = run(llm_steps(), tmp_path, structured)
    assert result.status == "succeeded"
    assert result.steps["ask"].output == {"text": "hi there"}
    assert result.steps["pull"].output == {"data": {"name": "Ada", "age": 36}}
    by_prompt = {r.last_user_text(): r for r in server.requests}
    ask = by_prompt["Say hi"]
    assert ask.messages[0] == {"role": "system", "content": "Be brief."}
    assert ask.response_format is None
    pull = by_prompt["Ada is 36."]
    assert pull.wants_json_schema() == {**PERSON, "additionalProperties": False}  # strict
    assert result.usage.llm_calls == 2
    assert result.usage.prompt_tokens == 31
    assert result.usage.completion_tokens == 11
    assert result.usage.tool_calls == 2


def test_llm_extract_without_structured_output_falls_back_to_json_mode(tmp_path: Path) -> None:
    def model(request: ChatRequest) -> str:
        return '```json\n{"name": "Ada", "age": 36}\n```'

    steps = [
        {"id": "pull", "tool": "llm.extract", "params": {"prompt": "Ada is 36.", "schema": PERSON}}
    ]
    result, server = run(recipe(steps, {"llm": {}}), tmp_path, model, supports_json_schema=False)
    assert result.steps["pull"].output == {"data": {"name": "Ada", "age": 36}}
    formats = [(r.response_format or {}).get("type") for r in server.requests]
    assert formats == ["json_schema", "json_object"]


def test_llm_extract_answer_not_fitting_the_schema_fails(tmp_path: Path) -> None:
    def model(request: ChatRequest) -> str | dict[str, Any]:
        # the two steps run at once: answer by what is asked, not by order
        return "hi" if request.response_format is None else {"name": "Ada", "age": "36"}

    result, _ = run(llm_steps(), tmp_path, model)
    step = result.steps["pull"]
    assert step.status == "failed"
    assert "does not fit the schema" in (step.error or "")
    assert "'36' is not of type 'integer'" in (step.error or "")
    assert result.steps["ask"].status == "succeeded"
    assert result.status == "failed"


def test_llm_extract_with_an_invalid_schema_fails_before_calling_the_model(
    tmp_path: Path,
) -> None:
    steps = [
        {
            "id": "pull",
            "tool": "llm.extract",
            "params": {"prompt": "x", "schema": {"type": "no-such-type"}},
        }
    ]
    result, server = run(recipe(steps, {"llm": {}}), tmp_path, ScriptedModel.sequence())
    assert result.steps["pull"].status == "failed"
    assert "not a JSON Schema" in (result.steps["pull"].error or "")
    assert server.requests == []


def test_llm_steps_need_a_model(tmp_path: Path) -> None:
    registry = default_registry()
    data, source = parse_recipe_text(llm_steps(), "<test>")
    plan = validate_plan(data, source, registry, base_dir=tmp_path)
    executor = Executor(plan, registry=registry, base_dir=tmp_path, approver=ApproveAll())
    result = asyncio.run(executor.run())
    assert result.steps["ask"].status == "failed"
    assert "--model" in (result.steps["ask"].error or "")
    assert result.usage.llm_calls == 0


def test_agent_and_llm_usage_add_up(tmp_path: Path, jail: Path) -> None:
    def model(request: ChatRequest) -> ChatReply:
        if request.tools is None:  # the llm.complete step
            return ChatReply(content="short", prompt_tokens=5, completion_tokens=1)
        if not request.tool_results():
            return ChatReply(
                tool_calls=[ToolCall("fs__list", {"path": "."})],
                prompt_tokens=100,
                completion_tokens=10,
            )
        return ChatReply(content="listed", prompt_tokens=200, completion_tokens=20)

    steps = [
        agent_step("List files", ["fs.list"]),
        {"id": "ask", "tool": "llm.complete", "params": {"prompt": "hi"}},
    ]
    grants = {"fs": {"root": "jail", "read": True}, "llm": {}}
    result, _ = run(recipe(steps, grants), tmp_path, model)
    assert result.status == "succeeded"
    assert result.usage.llm_calls == 3
    assert result.usage.prompt_tokens == 305
    assert result.usage.completion_tokens == 31
    assert result.usage.tool_calls == 2  # fs.list inside the agent, and llm.complete


# -- regressions from review ---------------------------------------------------------------


def test_confirm_never_does_not_waive_gates_for_tools_a_model_chooses(
    tmp_path: Path, jail: Path
) -> None:
    step = {
        "id": "look",
        "tool": "fs.read",
        "params": {"path": "missing.txt"},
        "confirm": "never",  # waives the gate of this read, nothing else
        "fallback": "Tell the user the file is missing.",
    }
    model = ScriptedModel.sequence(
        ChatReply(tool_calls=[ToolCall("fs__write", {"path": "pwned.txt", "content": "x"})]),
        "done",
    )
    result, _ = run(recipe([step]), tmp_path, model, approver=DenyAll())
    assert not (jail / "pwned.txt").exists()
    transcript = result.steps["look"].transcript or []
    assert [(e["tool"], e["status"]) for e in transcript] == [("fs.write", "error")]
    assert "denied by approver" in (transcript[0]["detail"] or "")


def test_a_spent_budget_cancels_the_other_calls_of_the_turn(tmp_path: Path, jail: Path) -> None:
    registry = default_registry()
    tools = ScriptedTools(registry)
    tools.script("slow", Wait(1.5, "late"))
    model = ScriptedModel.sequence(
        ChatReply(
            tool_calls=[
                ToolCall("test__run", {"key": "slow"}),
                ToolCall("test__run", {"key": "fast"}),
            ]
        ),
        "done",
    )
    data = json.loads(recipe([agent_step("both", ["test.run"])], {"test": {}}))
    data["limits"] = {"max_tool_calls": 1}
    clock = FakeClock(autojump_threshold=0.5)  # (the model answers over a socket)
    result, _ = run(json.dumps(data), tmp_path, model, registry=registry, clock=clock)
    assert result.steps["work"].status == "failed"
    assert clock.time() < 1.5, "the run waited for the call the spent budget cancels"
    assert all(call.outcome == "cancelled" for call in tools.calls_for("slow"))


def test_a_malformed_model_reply_lets_can_fail_apply(tmp_path: Path, jail: Path) -> None:
    body = json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": None, "arguments": "{}"},
                            }
                        ],
                    },
                }
            ],
        }
    )
    registry = default_registry()
    data = recipe([{**agent_step("go", ["fs.read"]), "can_fail": True}])

    def model(request: ChatRequest) -> str:
        return "unused"

    scripted = ScriptedModel(model)
    text = data

    async def scenario() -> RunResult:
        parsed, source = parse_recipe_text(text, "<test>")
        plan = validate_plan(parsed, source, registry, base_dir=tmp_path)
        with FakeOpenAIServer(scripted) as server:
            server.inject(Fault.malformed(body))
            client = LLMClient(
                LLMConfig(model="m", base_url=server.base_url, api_key=SecretStr("k")),
            )
            try:
                return await Executor(
                    plan,
                    registry=registry,
                    base_dir=tmp_path,
                    agent_runner=ReactAgent(client),
                    llm=client,
                ).run()
            finally:
                await client.aclose()

    result = asyncio.run(scenario())
    step = result.steps["work"]
    assert step.status == "failed_acceptable"
    assert "malformed" in (step.error or "")
    assert result.status == "succeeded"
