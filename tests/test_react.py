"""The ReAct sub-loop (`planners.react.ReactAgent`) and its context trimming.

Every test drives the real `openai` client over HTTP to `FakeOpenAIServer` on 127.0.0.1,
with a scripted model; the task's `call_tool` is a small fake (`FakeTools`) that records
each call with its start and end times, so concurrency and gating are asserted, not
assumed. Tool names reach the model as `fs__read` (`engine.agent.tool_name_for`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from engine.agent import AgentTask, ToolSpec, TranscriptEntry, tool_name_for
from engine.errors import ApprovalDenied, BudgetExceeded, StepError, StepFailed
from engine.llm import Budget, LLMClient, LLMConfig
from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, ScriptedModel, ToolCall
from planners.react import OBSERVATION_CHARS, ReactAgent, trim

# -- helpers -----------------------------------------------------------------------------

PATH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}


def spec(action: str) -> ToolSpec:
    return ToolSpec(action, f"the {action} tool", PATH_SCHEMA)


Behaviour = Callable[[dict[str, Any]], Any]


@dataclass
class Record:
    name: str
    arguments: dict[str, Any]
    started: float
    ended: float = 0.0


@dataclass
class FakeTools:
    """A `call_tool` whose behaviour per tool is a function of the arguments.

    A behaviour may raise (a `StepError` is a refused or failed call); a `delay` per tool
    makes the call sleep first. Without a behaviour, a call returns `{"ok": name}`.
    """

    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    delays: dict[str, float] = field(default_factory=dict)
    calls: list[Record] = field(default_factory=list)

    async def __call__(self, name: str, arguments: dict[str, Any]) -> Any:
        record = Record(name, arguments, time.monotonic())
        self.calls.append(record)
        try:
            delay = self.delays.get(name, 0.0)
            if isinstance(arguments.get("delay"), int | float):
                delay = float(arguments["delay"])
            if delay:
                await asyncio.sleep(delay)
            behaviour = self.behaviours.get(name)
            return behaviour(arguments) if behaviour else {"ok": name}
        finally:
            record.ended = time.monotonic()


def task(
    tools: FakeTools, actions: tuple[str, ...] = ("fs.read",), goal: str = "do it", **kw: Any
) -> AgentTask:
    return AgentTask(goal=goal, tools=[spec(a) for a in actions], call_tool=tools, **kw)


def call(name: str, arguments: dict[str, Any] | str | None = None, id: str | None = None) -> Any:
    """A tool call in a reply; `name` is the action (`fs.read`), sent as the model sees it."""
    return ToolCall(tool_name_for(name), {} if arguments is None else arguments, id=id)


def calls(*items: Any) -> ChatReply:
    return ChatReply(tool_calls=list(items))


def run_agent(
    server: FakeOpenAIServer,
    agent_task: AgentTask,
    *,
    budget: Budget | None = None,
    context_chars: int | None = None,
) -> Any:
    """Run the loop with a real `LLMClient` pointed at `server`; returns the final answer."""

    async def go() -> Any:
        client = LLMClient(
            LLMConfig(model="m", base_url=server.base_url, api_key=SecretStr("k"), timeout=5),
            budget=budget or Budget(),
        )
        try:
            agent = (
                ReactAgent(client)
                if context_chars is None
                else ReactAgent(client, context_chars=context_chars)
            )
            return await agent.run(agent_task)
        finally:
            await client.aclose()

    return asyncio.run(go())


def serve(*replies: ChatReply | str | dict[str, Any]) -> FakeOpenAIServer:
    return FakeOpenAIServer(ScriptedModel.sequence(*replies))


def tool_messages(request: ChatRequest) -> list[dict[str, Any]]:
    return [m for m in request.messages if m["role"] == "tool"]


def user_texts(request: ChatRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m["role"] == "user"]


def statuses(agent_task: AgentTask) -> list[tuple[str, str]]:
    return [(e.tool, e.status) for e in agent_task.transcript]


# -- answers and observations ------------------------------------------------------------


def test_final_answer_without_tools() -> None:
    tools = FakeTools()
    job = task(tools, ("fs.read", "fs.write"), goal="say hello")
    with serve("hello there") as server:
        answer = run_agent(server, job)
    assert answer == "hello there"
    assert tools.calls == []
    assert job.transcript == []
    (request,) = server.requests
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert request.messages[1]["content"] == "say hello"
    # native tool calling with the names the model can use, and their schemas
    assert request.tool_names() == ["fs__read", "fs__write"]
    assert request.tools is not None
    assert request.tools[0]["function"]["parameters"] == PATH_SCHEMA
    assert request.tools[0]["function"]["description"] == "the fs.read tool"


def test_no_tools_offered_sends_no_tools_field() -> None:
    with serve("plain") as server:
        assert run_agent(server, task(FakeTools(), ())) == "plain"
    assert server.requests[0].tools is None


def test_context_follows_the_goal_in_the_task_message() -> None:
    job = task(FakeTools(), goal="recover", context="step 'x' failed: boom")
    with serve("ok") as server:
        run_agent(server, job)
    assert server.requests[0].messages[1]["content"] == "recover\n\nContext:\nstep 'x' failed: boom"


def test_one_tool_call_then_answer_sends_the_observation_back() -> None:
    tools = FakeTools({"fs.read": lambda args: {"content": f"text of {args['path']}"}})
    job = task(tools)
    with serve(calls(call("fs.read", {"path": "a.txt"}, id="c1")), "the file says hi") as server:
        answer = run_agent(server, job)
    assert answer == "the file says hi"
    assert [(c.name, c.arguments) for c in tools.calls] == [("fs.read", {"path": "a.txt"})]
    second = server.requests[1].messages
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assistant = second[2]
    assert assistant["tool_calls"][0]["id"] == "c1"
    assert assistant["tool_calls"][0]["function"]["name"] == "fs__read"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"path": "a.txt"}
    assert second[3]["tool_call_id"] == "c1"
    assert json.loads(second[3]["content"]) == {"content": "text of a.txt"}
    assert job.transcript == [TranscriptEntry("fs.read", {"path": "a.txt"}, "ok")]


def test_string_output_goes_back_as_is_and_long_output_is_cut() -> None:
    tools = FakeTools(
        {"fs.read": lambda args: "short" if args["path"] == "s" else "x" * (OBSERVATION_CHARS + 50)}
    )
    with serve(
        calls(call("fs.read", {"path": "s"}), call("fs.read", {"path": "l"})), "ok"
    ) as server:
        run_agent(server, task(tools))
    short, long = (m["content"] for m in tool_messages(server.requests[1]))
    assert short == "short"
    assert long.startswith("x" * OBSERVATION_CHARS)
    assert long.endswith("…[truncated 50 chars]")


def test_parallel_tool_calls_in_one_turn_run_concurrently() -> None:
    tools = FakeTools(delays={"fs.read": 0.3})
    job = task(tools)
    turn = calls(*(call("fs.read", {"path": f"f{i}"}, id=f"c{i}") for i in range(3)))
    with serve(turn, "done") as server:
        assert run_agent(server, job) == "done"
    assert len(tools.calls) == 3
    window = max(c.ended for c in tools.calls) - min(c.started for c in tools.calls)
    assert window < 0.6, f"3 calls of 0.3 s took {window:.2f} s: they ran one after another"
    # every call had started before any finished
    assert max(c.started for c in tools.calls) < min(c.ended for c in tools.calls)


def test_parallel_observations_come_back_in_call_order() -> None:
    # the first call finishes last: observations still follow the calls' order
    tools = FakeTools({"fs.read": lambda args: f"content of {args['path']}"})
    turn = calls(
        call("fs.read", {"path": "a", "delay": 0.2}, id="ca"),
        call("fs.read", {"path": "b", "delay": 0.1}, id="cb"),
        call("fs.read", {"path": "c", "delay": 0.0}, id="cc"),
    )
    job = task(tools)
    with serve(turn, "done") as server:
        run_agent(server, job)
    assert [c.arguments["path"] for c in sorted(tools.calls, key=lambda c: c.ended)] == [
        "c",
        "b",
        "a",
    ]
    results = tool_messages(server.requests[1])
    assert [(m["tool_call_id"], m["content"]) for m in results] == [
        ("ca", "content of a"),
        ("cb", "content of b"),
        ("cc", "content of c"),
    ]
    ids = [c["id"] for c in server.requests[1].messages[2]["tool_calls"]]
    assert ids == ["ca", "cb", "cc"]


# -- tool errors and the failing-tool breaker --------------------------------------------


def raising(exc: StepError) -> Behaviour:
    def behaviour(args: dict[str, Any]) -> Any:
        raise exc

    return behaviour


def fail(message: str) -> Behaviour:
    return raising(StepFailed(message))


def test_tool_error_becomes_an_observation_and_the_loop_goes_on() -> None:
    tools = FakeTools({"fs.read": fail("no such file: a.txt")})
    job = task(tools)
    with serve(calls(call("fs.read", {"path": "a.txt"}, id="c1")), "it is missing") as server:
        assert run_agent(server, job) == "it is missing"
    (result,) = tool_messages(server.requests[1])
    assert result == {"role": "tool", "tool_call_id": "c1", "content": "error: no such file: a.txt"}
    assert job.transcript == [
        TranscriptEntry("fs.read", {"path": "a.txt"}, "error", "no such file: a.txt")
    ]


def test_a_denied_call_is_an_error_in_the_transcript_whatever_the_answer_claims() -> None:
    tools = FakeTools({"fs.write": raising(ApprovalDenied("nope"))})
    job = task(tools, ("fs.write",))
    with serve(calls(call("fs.write", {"path": "out.txt"})), "I wrote the file") as server:
        answer = run_agent(server, job)
    assert answer == "I wrote the file"  # the model's claim is passed on as its answer...
    assert statuses(job) == [("fs.write", "error")]  # ...and the transcript holds the truth
    assert job.transcript[0].detail == "denied by approver: nope"
    assert tool_messages(server.requests[1])[0]["content"] == "error: denied by approver: nope"
    system = server.requests[0].messages[0]["content"]
    assert "never claim an action that" in system
    assert "did not succeed" in system


def test_a_tool_failing_three_times_is_withdrawn_and_the_model_told() -> None:
    tools = FakeTools({"fs.read": fail("disk on fire")})
    job = task(tools, ("fs.read", "fs.list"))
    with serve(
        calls(call("fs.read", {"path": "a"})),
        calls(call("fs.read", {"path": "b"})),
        calls(call("fs.read", {"path": "c"})),
        "gave up reading",
    ) as server:
        assert run_agent(server, job) == "gave up reading"
    assert len(tools.calls) == 3
    # still offered after 2 failures
    assert server.requests[2].tool_names() == ["fs__read", "fs__list"]
    assert not any("no longer available" in t for t in user_texts(server.requests[2]))
    # withdrawn after the 3rd, and the model told why
    last = server.requests[3]
    assert last.tool_names() == ["fs__list"]
    assert last.messages[-1]["role"] == "user"
    assert "fs__read failed 3 times and is no longer available" in last.messages[-1]["content"]
    # the notice comes after the tool results: call/result pairs stay adjacent
    assert last.messages[-2]["role"] == "tool"


def test_three_failures_in_one_parallel_turn_also_withdraw_the_tool() -> None:
    tools = FakeTools({"fs.read": fail("boom")})
    job = task(tools, ("fs.read", "fs.list"))
    turn = calls(*(call("fs.read", {"path": p}) for p in "abc"))
    with serve(turn, "done") as server:
        run_agent(server, job)
    assert server.requests[1].tool_names() == ["fs__list"]


def test_a_withdrawn_tool_called_again_is_an_unknown_tool() -> None:
    tools = FakeTools({"fs.read": fail("boom")})
    job = task(tools, ("fs.read", "fs.list"))
    turn = calls(*(call("fs.read", {"path": p}) for p in "abc"))
    with serve(turn, calls(call("fs.read", {"path": "d"})), "done") as server:
        run_agent(server, job)
    assert len(tools.calls) == 3  # the 4th call never reached the tool
    assert tool_messages(server.requests[2])[-1]["content"].startswith(
        "error: there is no tool 'fs__read'"
    )


def test_the_last_tool_withdrawn_leaves_no_tools_offered() -> None:
    tools = FakeTools({"fs.read": fail("boom")})
    turn = calls(*(call("fs.read", {"path": p}) for p in "abc"))
    with serve(turn, "done") as server:
        run_agent(server, task(tools))
    assert server.requests[1].tools is None


def test_when_every_tool_has_failed_the_model_is_told_to_answer_saying_so() -> None:
    tools = FakeTools({"fs.read": fail("boom"), "fs.list": fail("gone")})
    job = task(tools, ("fs.read", "fs.list"))
    reads = calls(*(call("fs.read", {"path": p}) for p in "abc"))
    lists = calls(*(call("fs.list", {"path": p}) for p in "abc"))
    with serve(reads, lists, "from what I have; the tools failed") as server:
        assert run_agent(server, job) == "from what I have; the tools failed"
    after_reads = user_texts(server.requests[1])[-1]
    assert "Continue without it" in after_reads
    assert "Every tool you had has now failed" not in after_reads
    last = server.requests[2]
    assert last.tools is None
    assert "Every tool you had has now failed" in last.messages[-1]["content"]
    assert "say in your answer that the tools failed" in last.messages[-1]["content"]


# -- the invalid-response breaker --------------------------------------------------------


def test_unknown_tool_twice_gets_feedback_and_a_third_fails_the_step() -> None:
    tools = FakeTools()
    job = task(tools)
    bad = calls(ToolCall("shell__run", {"argv": ["rm"]}))
    with serve(bad, bad, bad, "never reached") as server, pytest.raises(StepFailed) as caught:
        run_agent(server, job)
    assert len(server.requests) == 3
    for request in server.requests[1:]:
        feedback = tool_messages(request)[-1]["content"]
        assert feedback.startswith("error: there is no tool 'shell__run'")
        assert "fs.read" in feedback or "fs__read" in feedback
    assert tools.calls == []
    assert "3 invalid responses in a row" in caught.value.message
    assert statuses(job) == [("shell__run", "invalid")] * 3


def test_unknown_tool_feedback_names_the_tools_as_the_model_must_call_them() -> None:
    # The model is offered `fs__read`; feedback that lists `fs.read` sends it to call a name
    # that is unknown again.
    bad = calls(ToolCall("fs.read", {"path": "a"}))
    with serve(bad, "ok") as server:
        run_agent(server, task(FakeTools()))
    feedback = tool_messages(server.requests[1])[-1]["content"]
    assert "fs__read" in feedback, feedback


@pytest.mark.parametrize(
    ("raw", "why"),
    [("{not json", "Expecting property name"), ("[1, 2]", "must be a JSON object")],
)
def test_bad_json_arguments_twice_get_feedback_and_a_third_fails(raw: str, why: str) -> None:
    tools = FakeTools()
    job = task(tools)
    bad = calls(call("fs.read", raw))
    with serve(bad, bad, bad) as server, pytest.raises(StepFailed) as caught:
        run_agent(server, job)
    assert len(server.requests) == 3
    for request in server.requests[1:]:
        feedback = tool_messages(request)[-1]["content"]
        assert feedback.startswith("error: the arguments are not a JSON object")
        assert why in feedback
    assert tools.calls == []  # nothing malformed reached a tool
    assert "3 invalid responses in a row" in caught.value.message
    assert statuses(job) == [("fs.read", "invalid")] * 3


def test_a_valid_turn_in_between_resets_the_invalid_count() -> None:
    tools = FakeTools()
    job = task(tools)
    unknown = calls(ToolCall("nope", {}))
    bad_json = calls(call("fs.read", "{"))
    good = calls(call("fs.read", {"path": "a"}))
    with serve(unknown, bad_json, good, unknown, bad_json, "finally") as server:
        assert run_agent(server, job) == "finally"
    assert len(server.requests) == 6
    assert len(tools.calls) == 1


def test_a_failing_tool_is_not_an_invalid_response() -> None:
    # tool errors are observations, not invalid responses: 3 in a row do not fail the step
    tools = FakeTools({"fs.read": fail("boom"), "fs.list": fail("boom")})
    job = task(tools, ("fs.read", "fs.list"))
    read, listing = calls(call("fs.read", {"path": "a"})), calls(call("fs.list", {"path": "."}))
    with serve(read, listing, read, "done") as server:
        assert run_agent(server, job) == "done"


def test_a_turn_with_one_good_call_among_bad_ones_is_not_invalid() -> None:
    tools = FakeTools()
    mixed = calls(ToolCall("nope", {}), call("fs.read", {"path": "a"}))
    unknown = calls(ToolCall("nope", {}))
    with serve(unknown, unknown, mixed, unknown, unknown, "ok") as server:
        assert run_agent(server, task(tools)) == "ok"
    assert len(tools.calls) == 1


def test_empty_answers_get_feedback_and_a_third_fails() -> None:
    with serve("", "  ", "hello") as server:
        assert run_agent(server, task(FakeTools())) == "hello"
    assert "Invalid answer: the answer is empty" in user_texts(server.requests[1])[-1]
    with serve("", "", "") as server, pytest.raises(StepFailed, match="3 invalid answers"):
        run_agent(server, task(FakeTools()))
    assert len(server.requests) == 3


# -- max_iterations ----------------------------------------------------------------------


def test_max_iterations_reached_fails_with_the_transcript() -> None:
    tools = FakeTools({"fs.list": fail("permission denied")})
    job = task(tools, ("fs.read", "fs.list"), max_iterations=3)
    forever = ScriptedModel(
        lambda request: calls(
            call("fs.read", {"path": f"p{len(request.messages)}"}), call("fs.list", {"path": "."})
        )
    )
    with FakeOpenAIServer(forever) as server, pytest.raises(StepFailed) as caught:
        run_agent(server, job)
    assert len(server.requests) == 3
    lines = caught.value.message.splitlines()
    assert lines[0] == "agent: max_iterations (3) reached without an answer"
    assert lines[1:] == ["  fs.read: ok", "  fs.list: error (permission denied)"] * 3


def test_max_iterations_defaults_to_ten() -> None:
    job = task(FakeTools())
    assert job.max_iterations == 10
    forever = ScriptedModel(lambda request: calls(call("fs.read", {"path": "a"})))
    with FakeOpenAIServer(forever) as server, pytest.raises(StepFailed, match=r"\(10\)"):
        run_agent(server, job)
    assert len(server.requests) == 10


# -- output_schema -----------------------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["title", "count"],
}


def test_output_schema_mismatch_gets_feedback_then_the_object_is_returned() -> None:
    job = task(FakeTools(), output_schema=SCHEMA)
    with serve('{"title": "x"}', '```json\n{"title": "x", "count": 2}\n```') as server:
        answer = run_agent(server, job)
    assert answer == {"title": "x", "count": 2}
    system = server.requests[0].messages[0]["content"]
    assert json.dumps(SCHEMA) in system
    feedback = user_texts(server.requests[1])[-1]
    assert feedback.startswith("Invalid answer: the answer does not match the output schema")
    assert "'count' is a required property" in feedback
    # the bad answer stays in the conversation, before the feedback
    assert server.requests[1].messages[-2] == {"role": "assistant", "content": '{"title": "x"}'}


def test_output_schema_three_bad_answers_fail_the_step() -> None:
    job = task(FakeTools(), output_schema=SCHEMA)
    replies = ("not json at all", {"title": 1, "count": 2}, {"count": 3})
    with serve(*replies) as server, pytest.raises(StepFailed) as caught:
        run_agent(server, job)
    assert len(server.requests) == 3
    assert "3 invalid answers in a row" in caught.value.message
    assert "holds no JSON" in user_texts(server.requests[1])[-1]


# -- budget ------------------------------------------------------------------------------


def test_the_system_prompt_holds_the_turns_left_and_the_runs_limits() -> None:
    with serve("ok") as server:
        run_agent(server, task(FakeTools()), budget=Budget(max_calls=7, max_tokens=1000))
    system = server.requests[0].messages[0]["content"]
    assert "turns left for this task" in system
    assert "the run allows 7 model calls, 1000 tokens in all (shared by every step)" in system
    with serve("ok") as server:
        run_agent(server, task(FakeTools()))
    assert "the run allows unlimited calls" in server.requests[0].messages[0]["content"]


def test_the_budget_line_does_not_depend_on_what_other_steps_spent() -> None:
    """Parallel steps spend the shared budget in an order that depends on timing; the
    prompt must not, or a recorded run could not be replayed."""
    spent = Budget(max_calls=50)
    spent.calls = 17
    with serve("ok") as first, serve("ok") as second:
        run_agent(first, task(FakeTools()), budget=Budget(max_calls=50))
        run_agent(second, task(FakeTools()), budget=spent)
    assert first.requests[0].messages[0] == second.requests[0].messages[0]


def test_budget_exhaustion_mid_loop_raises_budget_exceeded() -> None:
    tools = FakeTools()
    budget = Budget(max_calls=2)
    forever = ScriptedModel(lambda request: calls(call("fs.read", {"path": "a"})))
    with FakeOpenAIServer(forever) as server, pytest.raises(BudgetExceeded) as caught:
        run_agent(server, task(tools), budget=budget)
    assert caught.value.limit == "max_llm_calls"
    assert len(server.requests) == 2
    assert budget.calls == 2
    assert len(tools.calls) == 2


# -- trimming ----------------------------------------------------------------------------


def size(messages: list[dict[str, Any]]) -> int:
    return sum(len(json.dumps(m)) for m in messages)


def exchange(call_ids: list[str], payload: str = "x" * 100) -> list[dict[str, Any]]:
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "fs__read", "arguments": "{}"}}
            for i in call_ids
        ],
    }
    return [assistant] + [
        {"role": "tool", "tool_call_id": i, "content": f"{i}:{payload}"} for i in call_ids
    ]


HEAD = [{"role": "system", "content": "sys"}, {"role": "user", "content": "the goal"}]


def check_pairs(messages: list[dict[str, Any]]) -> None:
    """Every tool result follows its own assistant turn, and every call has its result."""
    pending: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in pending, f"orphan tool result {message}"
            pending.discard(message["tool_call_id"])
        else:
            assert not pending, f"calls without results: {pending}"
            pending = {c["id"] for c in message.get("tool_calls") or []}
    assert not pending, f"calls without results: {pending}"


def test_trim_leaves_a_conversation_that_fits() -> None:
    messages = HEAD + exchange(["a"]) + exchange(["b", "c"])
    assert trim(messages, size(messages)) == messages


def test_trim_drops_the_oldest_exchanges_whole_and_keeps_system_and_goal() -> None:
    first, second, third = exchange(["a", "b"]), exchange(["c"]), exchange(["d", "e"])
    messages = HEAD + first + second + third
    budget = size(HEAD + second + third) + 5  # room for two exchanges, not three
    trimmed = trim(messages, budget)
    assert trimmed == HEAD + second + third
    assert size(trimmed) <= budget
    check_pairs(trimmed)
    assert trim(messages, size(HEAD + third)) == HEAD + third


def test_trim_keeps_the_latest_exchange_even_over_budget() -> None:
    messages = HEAD + exchange(["a"]) + exchange(["b", "c"], payload="y" * 5000)
    assert trim(messages, 100) == HEAD + exchange(["b", "c"], payload="y" * 5000)


def test_trim_never_splits_a_parallel_turn() -> None:
    turn = exchange(["a", "b", "c"])
    messages = HEAD + turn + exchange(["d"])
    # a budget that would fit all but the first result of the parallel turn
    budget = size(messages) - len(json.dumps(turn[1]))
    trimmed = trim(messages, budget)
    assert trimmed == HEAD + exchange(["d"])


# a conversation is the head, then turns: a tool exchange (1-3 parallel calls), an invalid
# answer with its feedback, or a notice (withdrawn tool)
TURN = st.one_of(
    st.tuples(st.just("tools"), st.integers(1, 3), st.integers(0, 300)),
    st.tuples(st.just("answer"), st.just(1), st.integers(0, 300)),
    st.tuples(st.just("notice"), st.just(1), st.integers(0, 300)),
)


def build(turns: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    messages = list(HEAD)
    for number, (kind, width, length) in enumerate(turns):
        if kind == "tools":
            messages += exchange([f"t{number}_{k}" for k in range(width)], "z" * length)
        elif kind == "answer":
            messages.append({"role": "assistant", "content": "a" * length})
            messages.append({"role": "user", "content": "Invalid answer: empty. Try again."})
        else:
            messages.append({"role": "user", "content": "n" * length})
    return messages


@given(st.lists(TURN, max_size=12), st.integers(0, 6000))
def test_trim_properties(turns: list[tuple[str, int, int]], budget: int) -> None:
    messages = build(turns)
    trimmed = trim(messages, budget)
    assert trimmed[:2] == HEAD  # the system prompt and the goal stay
    rest = trimmed[2:]
    assert rest == messages[len(messages) - len(rest) :]  # only the oldest were dropped
    check_pairs(trimmed)
    if size(messages) <= budget:
        assert trimmed == messages
    dropped = messages[2 : len(messages) - len(rest)]
    if dropped:
        # it dropped because it had to, and no more than it had to: putting back the most
        # recently dropped group would not fit
        starts = [i for i, m in enumerate(dropped) if m["role"] != "tool"]
        assert size(dropped[starts[-1] :] + trimmed) > budget
    # over budget only when nothing but the latest group is left
    if size(trimmed) > budget and rest:
        assert all(m["role"] == "tool" for m in rest[1:])


def test_the_loop_trims_its_context_before_each_request() -> None:
    tools = FakeTools({"fs.read": lambda args: "r" * 400})
    job = task(tools)
    script = [calls(call("fs.read", {"path": str(i)}, id=f"c{i}")) for i in range(5)]
    with serve(*script, "done") as server:
        assert run_agent(server, job, context_chars=2500) == "done"
    for request in server.requests:
        assert request.messages[0]["role"] == "system"
        assert request.messages[1] == {"role": "user", "content": "do it"}
        check_pairs(request.messages)
        assert size(request.messages) <= 2500 + 100  # the wire format adds a little
    last = server.requests[-1]
    ids = [m["tool_call_id"] for m in tool_messages(last)]
    assert ids[-1:] == ["c4"]
    assert "c0" not in ids  # the oldest exchange was dropped
    assert len(job.transcript) == 5  # the transcript keeps everything


def test_step_error_subclasses_are_observations() -> None:
    class Odd(StepError):
        pass

    tools = FakeTools({"fs.read": raising(Odd("odd failure"))})
    with serve(calls(call("fs.read", {"path": "a"})), "ok") as server:
        run_agent(server, task(tools))
    assert tool_messages(server.requests[1])[0]["content"] == "error: odd failure"
