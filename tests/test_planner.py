"""`planners.llm.LLMPlanner` with the real `LLMClient` over HTTP to the local fake model.

the README's "Models": planner output is a typed `Plan`, repaired from validation errors up to 2
times (the JSON error list goes back to the model), else the goal falls back to a ReAct
loop. The plans are then run by the real executor with `ScriptedTools`, which record when
each call started and ended, so parallelism is asserted from timestamps.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr

from capabilities import Action, CallContext, Family, Registry
from engine._graph import build_graph
from engine.approval import ApproveAll
from engine.errors import BudgetExceeded, ConfigurationError, StepTimeout
from engine.executor import Executor
from engine.llm import Budget, LLMClient, LLMConfig
from engine.model_schema import for_model
from engine.results import RunResult
from engine.testing import (
    ChatReply,
    ChatRequest,
    FakeOpenAIServer,
    Fault,
    ScriptedModel,
    ScriptedTools,
    ToolCall,
    Wait,
    instant_sleep,
)
from planners.llm import MAX_REPAIRS, LLMPlanner, PlanOutcome
from planners.react import ReactAgent
from planners.recipe import load_recipe

T = TypeVar("T")

GOAL = "Look up four facts and summarise them"
BASE: dict[str, Any] = {"version": 1, "name": "plan", "capabilities": {"test": {}}}
LOOKUPS = ["alpha", "beta", "gamma", "delta"]


@pytest.fixture
def tools(registry: Registry) -> ScriptedTools:
    return ScriptedTools(registry)


def lookup(step_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": "test.run", "params": {"key": step_id}, **extra}


def parallel_plan() -> dict[str, Any]:
    summary = {
        "id": "summary",
        "tool": "test.run",
        "params": {
            "key": "summary",
            "value": [f"${{{{ steps.{name}.output }}}}" for name in LOOKUPS],
        },
    }
    return {"goal": GOAL, "steps": [*(lookup(name) for name in LOOKUPS), summary]}


VALID = {"goal": GOAL, "steps": [lookup("only")]}
CYCLE = {
    "goal": GOAL,
    "steps": [lookup("first", depends_on=["second"]), lookup("second", depends_on=["first"])],
}
UNKNOWN_TOOL = {"goal": GOAL, "steps": [{"id": "only", "tool": "test.rnu", "params": {"key": "x"}}]}
BAD_PARAMS = {"goal": GOAL, "steps": [{"id": "only", "tool": "test.run", "params": {"kee": "x"}}]}
NOT_JSON = "Sure, I will look those up for you and write a summary."


def with_client(
    server: FakeOpenAIServer,
    body: Callable[[LLMClient], Awaitable[T]],
    *,
    budget: Budget | None = None,
    timeout: float = 5.0,
    temperature: float | None = None,
) -> T:
    """Run `body` with a real client pointed at `server` (retries do not really sleep)."""

    async def scenario() -> T:
        config = LLMConfig(
            model="m",
            base_url=server.base_url,
            api_key=SecretStr("k"),
            timeout=timeout,
            temperature=temperature,
        )
        client = LLMClient(config, budget=budget or Budget(), sleep=instant_sleep)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(scenario())


def planning(
    registry: Registry, base_dir: Path, base: dict[str, Any] | None = None
) -> Callable[[LLMClient], Awaitable[PlanOutcome]]:
    async def plan(client: LLMClient) -> PlanOutcome:
        return await LLMPlanner(client, registry).plan(GOAL, base=base or BASE, base_dir=base_dir)

    return plan


def plan_and_run(
    registry: Registry, base_dir: Path, *, agent: bool = False
) -> Callable[[LLMClient], Awaitable[tuple[PlanOutcome, RunResult]]]:
    async def both(client: LLMClient) -> tuple[PlanOutcome, RunResult]:
        outcome = await planning(registry, base_dir)(client)
        executor = Executor(
            outcome.plan,
            registry=registry,
            base_dir=base_dir,
            approver=ApproveAll(),
            sleep=instant_sleep,
            agent_runner=ReactAgent(client) if agent else None,
            llm=client,
        )
        return outcome, await executor.run()

    return both


def problems_sent(request: ChatRequest) -> list[str]:
    """The problems in the repair request (the last user message), a line each:
    `- step 1 (id "only"): MESSAGE (RULE); HINT`."""
    text = request.last_user_text()
    assert text.startswith("That plan cannot run."), text
    lines = [line[2:] for line in text.splitlines() if line.startswith("- ")]
    assert lines, text
    return lines


def rules_of(lines: list[str]) -> list[str]:
    """The rule of each problem line."""
    return [line.split(" (", 2)[-1].split(")", 1)[0] if ")" in line else "" for line in lines]


# -- a goal planned into a parallel DAG, then run ----------------------------------------------


def test_goal_is_planned_into_a_parallel_dag_and_run(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    for name in LOOKUPS:
        tools.script(name, Wait(0.3, name.upper()))
    with FakeOpenAIServer(ScriptedModel.sequence(parallel_plan())) as server:
        outcome, result = with_client(server, plan_and_run(registry, tmp_path))

    assert (outcome.repairs, outcome.fell_back, outcome.problems) == (0, False, [])
    plan = outcome.plan
    assert [step.id for step in plan.steps] == [*LOOKUPS, "summary"]
    assert all(step.tool == "test.run" for step in plan.steps)
    graph = build_graph(plan.steps)
    assert set(graph.edges) == {(name, "summary") for name in LOOKUPS}
    assert set(plan.capabilities) == {"test"}

    assert result.status == "succeeded", result
    assert {sid: step.status for sid, step in result.steps.items()} == dict.fromkeys(
        [*LOOKUPS, "summary"], "succeeded"
    )
    assert result.steps["summary"].output == ["ALPHA", "BETA", "GAMMA", "DELTA"]
    calls = [tools.calls_for(name)[0] for name in LOOKUPS]
    ends = [call.ended for call in calls]
    assert all(end is not None for end in ends)
    # every lookup started before any ended: they ran at once, not one after another
    assert max(call.started for call in calls) < min(e for e in ends if e is not None)
    (summary,) = tools.calls_for("summary")
    assert summary.started >= max(e for e in ends if e is not None)
    assert result.usage.llm_calls == 1


def test_the_planning_request_asks_for_structured_output(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(VALID)) as server:
        with_client(server, planning(registry, tmp_path))
    (request,) = server.requests
    schema = request.wants_json_schema()
    assert schema is not None
    assert "steps" in schema.get("properties", {})
    assert request.last_user_text() == GOAL
    assert request.messages[0]["role"] == "system"


def test_planning_works_without_structured_output_support(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    answer = "```json\n" + json.dumps(VALID) + "\n```"  # a fence around it, no more
    model = ScriptedModel(lambda request: answer)
    with FakeOpenAIServer(model, supports_json_schema=False) as server:
        outcome = with_client(server, planning(registry, tmp_path))
    assert [step.id for step in outcome.plan.steps] == ["only"]
    assert outcome.repairs == 0
    last = server.requests[-1].response_format or {}
    assert last["type"] == "json_object"
    assert last["schema"]["properties"]["steps"]  # the plan's schema, in JSON mode


# -- repair from the JSON error list -----------------------------------------------------------


def test_cycle_then_unknown_tool_then_valid_is_repaired_twice(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    model = ScriptedModel.sequence(CYCLE, UNKNOWN_TOOL, VALID)
    with FakeOpenAIServer(model) as server:
        outcome = with_client(server, planning(registry, tmp_path))

    assert outcome.repairs == 2
    assert not outcome.fell_back
    assert [step.id for step in outcome.plan.steps] == ["only"]
    assert len(server.requests) == 3
    assert "cycle" not in server.requests[0].last_user_text()

    second, third = server.requests[1], server.requests[2]
    cycle = problems_sent(second)
    assert any("dependency cycle: first → second → first (cycle)" in line for line in cycle)
    assert all(line.startswith(('step 1 (id "first")', 'step 2 (id "second")')) for line in cycle)
    # the model sees its own answer before the problems
    assert second.messages[-2]["role"] == "assistant"
    assert json.loads(second.messages[-2]["content"]) == CYCLE

    (unknown,) = problems_sent(third)
    assert unknown == (
        "step 1 (id \"only\"): unknown tool 'test.rnu' (unknown-tool); did you mean 'test.run'?"
    )
    # the conversation is the goal, the last answer and its problems: not every round
    assert [m["role"] for m in third.messages] == ["system", "user", "assistant", "user"]
    assert "cycle" not in json.dumps(third.messages)

    assert [[d.rule for d in ds] for ds in outcome.problems][1] == ["unknown-tool"]
    assert "cycle" in {d.rule for d in outcome.problems[0]}


def test_each_problem_names_the_step_it_is_in(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    two = {
        "steps": [
            {"id": "fine", "tool": "test.run", "params": {"key": "a"}},
            {"id": "typo", "tool": "test.run", "params": {"kee": "b"}},
        ],
        "outputs": {"x": "${{ steps.nowhere.output }}"},
    }
    model = ScriptedModel.sequence(two, VALID)
    with FakeOpenAIServer(model) as server:
        with_client(server, planning(registry, tmp_path))
    lines = problems_sent(server.requests[1])
    assert [line.split(":", 1)[0] for line in lines] == [
        'step 2 (id "typo")',
        'step 2 (id "typo")',
        "the plan",
    ]
    assert "nowhere" in lines[2]


def test_an_answer_that_is_not_json_is_repaired(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    model = ScriptedModel.sequence(NOT_JSON, VALID)
    with FakeOpenAIServer(model) as server:
        outcome = with_client(server, planning(registry, tmp_path))
    assert outcome.repairs == 1
    assert not outcome.fell_back
    (problem,) = problems_sent(server.requests[1])
    assert rules_of([problem]) == ["bad-json"]
    assert "not JSON" in problem


def test_bad_params_are_repaired(registry: Registry, tools: ScriptedTools, tmp_path: Path) -> None:
    model = ScriptedModel.sequence(BAD_PARAMS, VALID)
    with FakeOpenAIServer(model) as server:
        outcome = with_client(server, planning(registry, tmp_path))
    assert outcome.repairs == 1
    assert "bad-params" in rules_of(problems_sent(server.requests[1]))
    assert "kee" in server.requests[1].last_user_text()
    assert outcome.plan.steps[0].params == {"key": "only"}


def test_a_tool_that_is_not_granted_is_repaired(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    shell = {"steps": [{"id": "sneak", "tool": "shell.run", "params": {"argv": ["id"]}}]}
    model = ScriptedModel.sequence(shell, VALID)
    with FakeOpenAIServer(model) as server:
        outcome = with_client(server, planning(registry, tmp_path))
    assert outcome.repairs == 1
    (line,) = problems_sent(server.requests[1])
    assert "(not-granted); the granted tools are test.run, test.write" in line
    assert "add it under 'capabilities:'" not in line  # a model cannot grant itself one


def test_the_model_cannot_grant_itself_capabilities(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    greedy = {
        **VALID,
        "capabilities": {"shell": {"allow": ["sh"]}, "fs": {"root": "/", "write": True}},
        "limits": {"max_tool_calls": 1000000},
    }
    with FakeOpenAIServer(ScriptedModel.sequence(greedy)) as server:
        outcome = with_client(server, planning(registry, tmp_path))
    assert set(outcome.plan.capabilities) == {"test"}
    assert outcome.plan.limits.max_tool_calls != 1000000
    assert "shell" not in outcome.text


# -- fallback to ReAct ---------------------------------------------------------------------------


def test_still_invalid_after_two_repairs_falls_back_to_one_agent_step(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    tools.script("probe", "forty-two")
    model = ScriptedModel.sequence(
        CYCLE,
        NOT_JSON,
        BAD_PARAMS,
        # the ReAct loop of the fallback step: one tool call, then the final answer
        ChatReply(tool_calls=[ToolCall("test__run", {"key": "probe"})]),
        "The answer is forty-two.",
    )
    with FakeOpenAIServer(model) as server:
        outcome, result = with_client(server, plan_and_run(registry, tmp_path, agent=True))

    assert MAX_REPAIRS == 2
    assert outcome.fell_back
    assert outcome.repairs == 2
    assert [[d.rule for d in ds][:1] for ds in outcome.problems][1:] == [
        ["bad-json"],
        ["bad-params"],
    ]
    assert len(outcome.problems) == 3
    (step,) = outcome.plan.steps
    assert step.agent is not None
    assert step.tool is None
    assert step.agent.goal == GOAL
    assert sorted(step.agent.tools) == ["test.run", "test.write"]

    assert result.status == "succeeded", result
    assert result.steps[step.id].output == "The answer is forty-two."
    assert [call.key for call in tools.calls] == ["probe"]
    transcript = result.steps[step.id].transcript
    assert transcript is not None
    assert [(e["tool"], e["status"]) for e in transcript] == [("test.run", "ok")]

    assert len(server.requests) == 5
    react = server.requests[3]
    assert sorted(react.tool_names()) == ["test__run", "test__write"]
    assert react.response_format is None
    assert GOAL in react.last_user_text()
    ((_, observation),) = server.requests[4].tool_results()
    assert "forty-two" in observation
    assert result.usage.llm_calls == 5


@pytest.mark.parametrize(
    ("temperature", "requests"), [(0, 2), (None, 3), (0.7, 3)], ids=["greedy", "unset", "0.7"]
)
def test_a_plan_given_again_for_its_repair_at_temperature_0_falls_back_at_once(
    registry: Registry,
    tools: ScriptedTools,
    tmp_path: Path,
    temperature: float | None,
    requests: int,
) -> None:
    """The model answers its repair with the plan it was asked to repair: the next repair
    request would be the one just answered. At temperature 0 (greedy decoding: the same
    request, the same answer) the planner falls back then, after one repair; sampling may
    answer it otherwise, so then it asks again, up to MAX_REPAIRS."""
    model = ScriptedModel.sequence(CYCLE, CYCLE, CYCLE)
    with FakeOpenAIServer(model) as server:
        outcome = with_client(server, planning(registry, tmp_path), temperature=temperature)
        sent = list(server.requests)
    assert len(sent) == requests
    assert outcome.fell_back
    assert (outcome.repairs, outcome.repeated) == (requests - 1, temperature == 0)
    assert len(outcome.problems) == requests
    assert [r.temperature for r in sent] == [temperature] * requests
    # The repair showed the model its plan, and the model gave that plan again.
    assert json.loads(sent[1].messages[-2]["content"]) == CYCLE


def test_a_different_answer_to_a_repair_at_temperature_0_is_repaired_again(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    """Only the same plan again stops the repairs early: a new wrong plan is repaired, as
    at any temperature."""
    model = ScriptedModel.sequence(CYCLE, BAD_PARAMS, parallel_plan())
    with FakeOpenAIServer(model) as server:
        outcome = with_client(server, planning(registry, tmp_path), temperature=0)
    assert (outcome.repairs, outcome.fell_back, outcome.repeated) == (2, False, False)


def test_fallback_offers_only_granted_tools_without_human_and_llm(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    base = {
        "version": 1,
        "name": "plan",
        "capabilities": {"test": {}, "fs": {"root": "."}, "llm": {}, "human": {}},
    }
    model = ScriptedModel.sequence(CYCLE, CYCLE, CYCLE)
    with FakeOpenAIServer(model) as server:
        outcome = with_client(server, planning(registry, tmp_path, base))
    assert outcome.fell_back
    (step,) = outcome.plan.steps
    assert step.agent is not None
    names = set(step.agent.tools)
    assert names == {name for name in registry.actions if name.startswith(("fs.", "test."))}
    assert set(outcome.plan.capabilities) == {"test", "fs", "llm", "human"}


# -- the saved text ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answers", [[parallel_plan()], [CYCLE, CYCLE, CYCLE]], ids=["plan", "fallback"]
)
def test_outcome_text_round_trips_through_the_recipe_loader(
    registry: Registry, tools: ScriptedTools, tmp_path: Path, answers: list[Any]
) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(*answers)) as server:
        outcome = with_client(server, planning(registry, tmp_path))
    path = tmp_path / "plan.yaml"
    path.write_text(outcome.text, encoding="utf-8")
    loaded, _ = load_recipe(path, registry)
    assert loaded == outcome.plan
    assert loaded.to_data() == outcome.plan.to_data()
    assert "${{ steps." in outcome.text or outcome.fell_back


def test_outputs_from_the_model_are_kept(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    answer = {**VALID, "outputs": {"result": "${{ steps.only.output }}"}}
    with FakeOpenAIServer(ScriptedModel.sequence(answer)) as server:
        outcome = with_client(server, planning(registry, tmp_path))
    assert outcome.plan.outputs == {"result": "${{ steps.only.output }}"}


# -- the tool catalogue --------------------------------------------------------------------------


def test_catalogue_lists_only_granted_tools_with_params_schemas(
    registry: Registry, tools: ScriptedTools
) -> None:
    planner = LLMPlanner(client=None, registry=registry)  # type: ignore[arg-type]  # no calls
    catalogue = planner.catalogue({"fs": {"root": "."}, "test": {}})
    names = [entry["name"] for entry in catalogue]
    expected = sorted(n for n in registry.actions if n.startswith(("fs.", "test.")))
    assert names == expected
    for entry in catalogue:
        action = registry.actions[entry["name"]]
        raw = action.params_model.model_json_schema()
        assert entry["params"] == for_model(raw)  # what grammar compilers can take
        assert entry["params"]["properties"].keys() == raw["properties"].keys()
        assert entry["params"]["type"] == "object"
        assert entry["description"] == action.description
    by_name = {entry["name"]: entry for entry in catalogue}
    assert by_name["test.run"]["side_effects"] is False
    assert by_name["test.write"]["side_effects"] is True
    assert set(by_name["test.run"]["params"]["properties"]) == {"key", "value"}
    assert planner.catalogue({}) == []


class _TitledParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str
    body: str = ""


async def _publish(params: _TitledParams, ctx: CallContext) -> str:
    return params.title


def test_catalogue_keeps_a_param_named_title(registry: Registry) -> None:
    # A user capability whose params include `title`: the model must be told about it,
    # or every plan using the tool fails validation ("missing 'title'") and is repaired.
    registry.add_family(Family("blog", "a user capability"))
    registry.add(Action("blog.publish", "Publish a post", _TitledParams, _publish))
    planner = LLMPlanner(client=None, registry=registry)  # type: ignore[arg-type]  # no calls
    (entry,) = planner.catalogue({"blog": {}})
    assert entry["params"]["required"] == ["title"]
    assert set(entry["params"]["properties"]) == {"title", "body"}
    assert entry["params"]["properties"]["title"]["type"] == "string"


def test_the_model_is_shown_only_granted_tools(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(VALID)) as server:
        with_client(server, planning(registry, tmp_path))
    system = server.requests[0].messages[0]["content"]
    assert "test.run" in system
    assert "test.write" in system
    for hidden in ("shell.run", "fs.write", "http.request", "llm.complete", "human.ask"):
        assert hidden not in system
    assert '"key"' in system  # the params schema is in the prompt


# -- errors from the model client ----------------------------------------------------------------


def test_a_refused_key_while_planning_is_a_configuration_error(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    with FakeOpenAIServer(ScriptedModel.sequence(VALID)) as server:
        server.inject(Fault.status(401))
        with pytest.raises(ConfigurationError):
            with_client(server, planning(registry, tmp_path))
    assert len(server.requests) == 1


def test_an_exhausted_budget_while_planning_is_raised_not_repaired(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    # planners/llm.py documents "Raises: BudgetExceeded"; it must not turn into a repair
    # round and then a ReAct fallback that cannot call the model either.
    model = ScriptedModel.sequence(CYCLE, VALID)
    with FakeOpenAIServer(model) as server, pytest.raises(BudgetExceeded):
        with_client(server, planning(registry, tmp_path), budget=Budget(max_calls=1))
    assert len(server.requests) == 1


def test_a_model_timeout_while_planning_is_raised_not_repaired(
    registry: Registry, tools: ScriptedTools, tmp_path: Path
) -> None:
    model = ScriptedModel(lambda request: VALID)
    with FakeOpenAIServer(model) as server:
        server.inject(*[Fault.delay(10)] * 4)
        with pytest.raises(StepTimeout):
            with_client(server, planning(registry, tmp_path), timeout=0.2)
    assert len(server.requests) == 4


def test_a_planned_step_cannot_waive_its_gate() -> None:
    from planners.llm import _recipe

    answer = {
        "steps": [
            {
                "id": "w",
                "tool": "fs.write",
                "params": {"path": "x", "content": "y"},
                "confirm": "never",
            },
            {"id": "r", "tool": "fs.read", "params": {"path": "x"}, "confirm": "always"},
        ]
    }
    recipe = _recipe(answer, "goal", {"capabilities": {"fs": {}}})
    assert [s.get("confirm") for s in recipe["steps"]] == ["auto", "always"]
