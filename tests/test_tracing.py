"""OpenTelemetry spans of a run (`engine.tracing.RunSpans`), read from the SDK's in-memory
exporter: the tree, its parents and attributes, errors, and no secret anywhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from capabilities import default_registry
from engine.approval import ApproveAll
from engine.events import EventBus
from engine.redaction import Secrets
from engine.results import RunResult
from engine.testing import (
    ChatReply,
    ChatRequest,
    Fail,
    Fault,
    ScriptedTools,
    ToolCall,
    Wait,
    run_recipe_text,
)
from engine.tracing import follow, server_of

SECRET = "sk-planted-0123456789abcdef"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    yield memory
    memory.clear()


def _recipe(*steps: dict[str, Any], **extra: Any) -> str:
    return json.dumps(
        {
            "version": 1,
            "name": "traced",
            "capabilities": {"test": {}, "llm": {}},
            "steps": list(steps),
            **extra,
        }
    )


def _run(
    text: str,
    base_dir: Path,
    exporter: InMemorySpanExporter,
    *,
    model: Any = None,
    faults: tuple[Fault, ...] = (),
    scripts: dict[str, tuple[Any, ...]] | None = None,
    capture_content: bool = False,
) -> tuple[RunResult, list[ReadableSpan]]:
    """Run a recipe with scripted tools and a scripted model behind a fake endpoint, its
    spans going to `exporter`, made as the `planloom` command makes them (`follow`)."""
    registry = default_registry()
    tools = ScriptedTools(registry)
    for key, behaviours in (scripts or {}).items():
        tools.script(key, *behaviours)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bus = EventBus("r")
    follow(bus, provider.get_tracer("test"), capture_content=capture_content)
    result = run_recipe_text(
        text,
        registry,
        base_dir=base_dir,
        approver=ApproveAll(),
        model=model or (lambda request: "done"),
        faults=faults,
        events=bus,
        secrets=Secrets([SECRET]),
    )
    provider.shutdown()
    return result, list(exporter.get_finished_spans())


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, f"{len(found)} spans named {name!r}: {[s.name for s in spans]}"
    return found[0]


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id),
        key=lambda s: (s.start_time or 0, s.name),
    )


def _everything_in(span: ReadableSpan) -> str:
    """Every text of a span: name, attributes, status, events and their attributes."""
    parts: list[Any] = [span.name, dict(span.attributes or {}), span.status.description]
    for event in span.events:
        parts += [event.name, dict(event.attributes or {})]
    parts.append(dict(span.resource.attributes))
    return json.dumps(parts, default=str)


def _agent_model(request: ChatRequest) -> ChatReply | str:
    """First turn: two tool calls at once; second turn (with their results): done. The
    endpoint answers as a dated version of the model asked for, as OpenAI's does."""
    if any(m.get("role") == "tool" for m in request.messages):
        return ChatReply(content="ranked", model="m-2024-08-06")
    return ChatReply(
        tool_calls=[
            ToolCall("test__run", {"key": "x", "value": 1}),
            ToolCall("test__run", {"key": "y", "value": 2}),
        ],
        model="m-2024-08-06",
    )


def test_a_run_is_a_tree_of_run_step_attempt_and_tool_and_model_calls(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    text = _recipe(
        {"id": "a", "tool": "test.run", "params": {"key": "a", "value": 1}},
        {"id": "b", "tool": "test.run", "params": {"key": "b", "value": 2}},
        {
            "id": "flaky",
            "tool": "test.run",
            "params": {"key": "flaky"},
            "retry": {"attempts": 3, "backoff": "fixed", "initial": 0.5},
        },
        {
            "id": "think",
            "agent": {"goal": "rank a and b", "tools": ["test.run"]},
            "depends_on": ["a", "b"],
        },
    )
    result, spans = _run(
        text,
        tmp_path,
        exporter,
        model=_agent_model,
        scripts={
            "a": (Wait(0.3, 1),),
            "b": (Wait(0.3, 2),),
            "flaky": (Fail(f"token {SECRET} refused"), Fail("down"), "up"),
        },
    )
    assert result.status == "succeeded", result.steps

    # One trace; the run is its root, with a span per step under it.
    assert len({s.context.trace_id for s in spans if s.context}) == 1
    run = _one(spans, "run traced")
    assert run.parent is None
    assert run.attributes is not None
    assert run.attributes["planloom.run.id"] == "r"
    assert run.attributes["planloom.run.status"] == "succeeded"
    assert run.status.status_code is StatusCode.OK  # a trace UI shows the run succeeded
    # Every span has a deliberate kind: model calls are CLIENT, the rest INTERNAL, and
    # each is classed for OpenInference readers (Phoenix).
    for span in spans:
        assert span.kind is (SpanKind.CLIENT if span.name == "chat m" else SpanKind.INTERNAL)
        assert span.attributes is not None
        assert span.attributes["openinference.span.kind"] == (
            "LLM" if span.name.startswith("chat ")
            else "TOOL" if span.name.startswith("execute_tool ")
            else "AGENT" if span.attributes.get("gen_ai.operation.name") == "invoke_agent"
            else "CHAIN"
        )  # fmt: skip
    steps = {s.name: s for s in _children(spans, run)}
    assert set(steps) == {"step a", "step b", "step flaky", "step think"}
    for name, step in steps.items():
        assert step.attributes is not None
        assert step.attributes["planloom.step.id"] == name.removeprefix("step ")
        assert step.attributes["planloom.step.status"] == "succeeded"

    # Parallel steps: `a` and `b` ran at the same time.
    a, b = steps["step a"], steps["step b"]
    assert a.start_time is not None
    assert a.end_time is not None
    assert b.start_time is not None
    assert b.end_time is not None
    assert a.start_time < b.end_time
    assert b.start_time < a.end_time
    [attempt_a] = _children(spans, a)
    assert attempt_a.name == "attempt 1"
    [tool_a] = _children(spans, attempt_a)
    assert tool_a.name == "execute_tool test.run"
    assert tool_a.attributes is not None
    assert tool_a.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool_a.attributes["gen_ai.tool.name"] == "test.run"
    assert tool_a.attributes["planloom.outcome"] == "ok"
    assert tool_a.end_time is not None
    assert tool_a.start_time is not None
    assert tool_a.end_time - tool_a.start_time >= 0.25e9  # it covers the call

    # The retried step: three attempts, the first two failed (ERROR, with the exception
    # event), and each wait before a retry is an event of the step.
    flaky = steps["step flaky"]
    assert flaky.attributes is not None
    assert flaky.attributes["planloom.step.attempts"] == 3
    attempts = _children(spans, flaky)
    assert [s.name for s in attempts] == ["attempt 1", "attempt 2", "attempt 3"]
    assert [s.status.status_code for s in attempts] == [
        StatusCode.ERROR,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    assert attempts[1].status.description is not None
    assert "down" in attempts[1].status.description
    [exception] = [e for e in attempts[1].events if e.name == "exception"]
    assert exception.attributes is not None
    assert exception.attributes["exception.type"] == "StepFailed"
    retries = [e for e in flaky.events if e.name == "planloom.retry"]
    assert [(e.attributes or {}).get("planloom.wait_seconds") for e in retries] == [0.5, 0.5]
    for attempt in attempts:
        [tool] = _children(spans, attempt)
        assert tool.name == "execute_tool test.run"

    # The agent step: one attempt (invoke_agent, the agent named by its step) holding its
    # two model calls and the two tool calls the first model call asked for, in order.
    [agent] = _children(spans, steps["step think"])
    assert agent.name == "attempt 1"
    assert agent.attributes is not None
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.agent.name"] == "think"
    assert agent.attributes["gen_ai.provider.name"] == "openai"
    assert agent.attributes["planloom.attempt"] == 1
    inside = _children(spans, agent)
    assert [s.name for s in inside] == [
        "chat m",
        "execute_tool test.run",
        "execute_tool test.run",
        "chat m",
    ]
    chats = [s for s in inside if s.name == "chat m"]
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT
        attributes = chat.attributes
        assert attributes is not None
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.request.model"] == "m"
        assert attributes["gen_ai.response.model"] == "m-2024-08-06"  # as the endpoint said
        assert str(attributes["gen_ai.response.id"]).startswith("chatcmpl-")
        assert isinstance(attributes["gen_ai.request.max_tokens"], int)
        assert isinstance(attributes["gen_ai.usage.input_tokens"], int)
        assert attributes["gen_ai.usage.input_tokens"] > 0
        assert isinstance(attributes["gen_ai.usage.output_tokens"], int)
        assert attributes["gen_ai.usage.output_tokens"] > 0
    assert chats[0].attributes is not None
    assert chats[0].attributes["planloom.llm.tool_calls"] == 2
    assert chats[0].attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert chats[1].attributes is not None
    assert chats[1].attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert chats[0].attributes["gen_ai.response.id"] != chats[1].attributes["gen_ai.response.id"]
    # Each tool call names the call the model asked for; the step's own calls name none.
    tools = [s for s in inside if s.name == "execute_tool test.run"]
    ids = {(s.attributes or {}).get("gen_ai.tool.call.id") for s in tools}
    assert len(ids) == 2
    assert None not in ids
    assert "gen_ai.tool.call.id" not in (tool_a.attributes or {})
    # Content capture is off: nothing that was said is in any span.
    for span in spans:
        said = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}  # fmt: skip
        assert said.isdisjoint(span.attributes or {}), span.name
        assert "rank a and b" not in _everything_in(span)
        assert "ranked" not in _everything_in(span)
    usage = result.steps["think"].usage
    assert (usage.llm_calls, usage.tool_calls) == (2, 2)
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats if c.attributes) == (
        usage.prompt_tokens
    )

    # The planted secret reached an error, which spans quote: redacted, in every span.
    assert attempts[0].status.description is not None
    assert "[REDACTED]" in attempts[0].status.description
    for span in spans:
        assert SECRET not in _everything_in(span), span.name


def test_a_failed_step_and_a_failed_model_call_are_errors_on_their_spans(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    text = _recipe(
        {"id": "broken", "tool": "test.run", "params": {"key": "broken"}},
        {"id": "after", "tool": "test.run", "params": {"key": "a"}, "depends_on": ["broken"]},
        {"id": "think", "agent": {"goal": "answer", "tools": []}},
        on_failure="continue",
    )
    result, spans = _run(
        text,
        tmp_path,
        exporter,
        scripts={"broken": (Fail(f"bad key {SECRET}"),)},
        faults=(Fault.status(400),),
    )
    assert result.steps["broken"].status == "failed"
    assert result.steps["after"].status == "skipped"
    assert result.steps["think"].status == "failed"
    run = _one(spans, "run traced")
    assert run.status.status_code is StatusCode.ERROR
    broken = _one(spans, "step broken")
    assert broken.status.status_code is StatusCode.ERROR
    assert broken.status.description is not None
    assert "[REDACTED]" in broken.status.description
    # A step skipped because its dependency failed is a span of no length, saying so.
    after = _one(spans, "step after")
    assert after.attributes is not None
    assert after.attributes["planloom.step.status"] == "skipped"
    assert after.start_time == after.end_time
    assert after.status.status_code is StatusCode.UNSET
    # The model answered 400: the chat span is an error, typed.
    [chat] = [s for s in spans if s.name == "chat m"]
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.attributes is not None
    assert chat.attributes["error.type"] == "LLMError"
    assert chat.parent is not None
    think = _one(spans, "step think")
    [attempt] = _children(spans, think)
    assert chat.parent.span_id == attempt.context.span_id
    assert result.steps["think"].usage.llm_calls == 1
    for span in spans:
        assert SECRET not in _everything_in(span), span.name


def test_a_rate_limit_wait_is_an_event_of_the_attempt(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    text = _recipe({"id": "think", "agent": {"goal": "answer", "tools": []}})
    result, spans = _run(text, tmp_path, exporter, faults=(Fault.status(429, retry_after=2),))
    assert result.status == "succeeded"
    [attempt] = [s for s in spans if s.name == "attempt 1"]
    [wait] = [e for e in attempt.events if e.name == "planloom.llm.wait"]
    assert wait.attributes == {
        "planloom.wait_seconds": 2.0,
        "planloom.reason": "rate limited (429)",
    }


def test_for_each_items_are_attempts_of_their_step_naming_the_item(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    text = _recipe(
        {
            "id": "each",
            "for_each": [1, 2, 3],
            "tool": "test.run",
            "params": {"key": "k", "value": "${{ item }}"},
        }
    )
    result, spans = _run(text, tmp_path, exporter)
    assert result.steps["each"].output == [1, 2, 3]
    step = _one(spans, "step each")
    attempts = _children(spans, step)
    assert len(attempts) == 3
    items = sorted((s.attributes or {}).get("planloom.item") for s in attempts)
    assert items == [0, 1, 2]
    assert result.steps["each"].usage.tool_calls == 3


def test_a_step_cut_off_by_the_run_s_deadline_ends_its_open_spans_as_cancelled(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    text = _recipe(
        {"id": "slow", "tool": "test.run", "params": {"key": "slow"}},
        limits={"max_duration": 0.5},
    )
    result, spans = _run(text, tmp_path, exporter, scripts={"slow": (Wait(30, 1),)})
    assert result.steps["slow"].status == "cancelled"
    names = {s.name: s for s in spans}
    assert set(names) == {"run traced", "step slow", "attempt 1", "execute_tool test.run"}
    for name in ("attempt 1", "execute_tool test.run"):
        span = names[name]
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes is not None
        assert span.attributes["planloom.outcome"] == "cancelled"
    assert names["step slow"].status.status_code is StatusCode.ERROR


def test_server_of_keeps_only_the_host_and_port() -> None:
    assert server_of("https://user:pw@api.example.com/v1?key=abc") == ("api.example.com", 443)
    assert server_of("http://127.0.0.1:8080/v1") == ("127.0.0.1", 8080)
    assert server_of("http://[::1]:99999/") is None  # a port out of range
    assert server_of(None) is None
    assert server_of("not a url") is None
