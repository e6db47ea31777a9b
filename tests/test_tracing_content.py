"""What was said in a run's traces: model messages and tool arguments and results, as the
OpenTelemetry GenAI conventions record them, only when a user opts in with
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, always redacted and bounded.

The `planloom` command runs in a subprocess and exports over OTLP/HTTP to a collector
stand-in on 127.0.0.1 that decodes each request with `opentelemetry-proto`; the raw request
bodies are searched too. The finer points (formats, bounds, what sinks see) are read from
runs made in this process into the SDK's in-memory exporter.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _tracing_attacks import Collector, attributes, collector, forms, one_json, planloom
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from capabilities import default_registry
from engine.approval import ApproveAll
from engine.events import Event, EventBus
from engine.redaction import Secrets
from engine.results import RunResult
from engine.testing import (
    ChatReply,
    ChatRequest,
    FakeOpenAIServer,
    ScriptedTools,
    ToolCall,
    run_recipe_text,
)
from engine.tracing import follow

ROOT = Path(__file__).resolve().parent.parent
SECRET = "tok7e6d5c4b3a291807"
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SAID = (
    "gen_ai.system_instructions",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)

GOAL = "Summarise the launch notes"  # words only the messages hold
NOTES = "Launch moves to Thursday; the deploy key is " + SECRET
ANSWER = "Launch is on Thursday, key " + SECRET  # the model repeats what it read

RECIPE = """\
version: 1
name: notes-agent
inputs:
  who: {type: string}
capabilities:
  fs: {root: ., read: true}
steps:
  - id: summary
    agent:
      goal: "GOAL for ${{ inputs.who }}"
      tools: [fs.read]
""".replace("GOAL", GOAL)


def _model(request: ChatRequest) -> ChatReply | str:
    """First turn: read the notes, and a file named after the secret (it is missing);
    then answer, quoting the notes."""
    if not request.tool_results():
        return ChatReply(
            tool_calls=[
                ToolCall("fs__read", {"path": "notes.txt"}),
                ToolCall("fs__read", {"path": f"gone-{SECRET}.txt"}),
            ],
            model="m-2025-01-01",
        )
    return ChatReply(content=ANSWER, model="m-2025-01-01")


@dataclass
class Traced:
    """A run of the agent recipe through the command, and what the collector received."""

    run: Any
    received: Collector


def _traced(folder: Path, capture: str | None) -> Traced:
    (folder / "notes.yaml").write_text(RECIPE, encoding="utf-8")
    (folder / "notes.txt").write_text(NOTES, encoding="utf-8")
    settings = {} if capture is None else {CAPTURE: capture}
    with collector() as received, FakeOpenAIServer(_model) as model:
        run = planloom(
            "run", "notes.yaml", "--yes", "--json", "--otel", "-i", f"who={SECRET}",
            "--base-url", model.base_url, "--model", "m",
            cwd=folder, OTEL_EXPORTER_OTLP_ENDPOINT=received.url, DEPLOY_TOKEN=SECRET,
            **settings,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert one_json(run.stdout)["status"] == "succeeded"
    assert "could not be exported" not in run.stderr
    return Traced(run, received)


@pytest.fixture(scope="module")
def off(tmp_path_factory: pytest.TempPathFactory) -> Traced:
    return _traced(tmp_path_factory.mktemp("off"), None)


@pytest.fixture(scope="module")
def on(tmp_path_factory: pytest.TempPathFactory) -> Traced:
    return _traced(tmp_path_factory.mktemp("on"), "true")


def _named(spans: list[Span], name: str) -> list[Span]:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_time_unix_nano)


def test_with_capture_off_nothing_said_leaves_the_run(off: Traced) -> None:
    spans = off.received.spans
    raw = off.received.raw()
    # No message text, no tool argument or result, not even in the bytes sent.
    for said in (GOAL, "notes.txt", "Launch", "Thursday", "You carry out one task"):
        assert said.encode() not in raw, said
    for span in spans:
        assert set(SAID).isdisjoint(attributes(span.attributes)), span.name
    assert not [form for form in forms(SECRET) if form in raw]
    # What is not content is there: the model calls, with the conventions' attributes.
    chats = _named(spans, "chat m")
    assert len(chats) == 2
    first = attributes(chats[0].attributes)
    assert first["gen_ai.provider.name"] == "openai"
    assert first["gen_ai.request.model"] == "m"
    assert first["gen_ai.response.model"] == "m-2025-01-01"
    assert first["gen_ai.response.id"].startswith("chatcmpl-")
    assert first["gen_ai.usage.input_tokens"] > 0
    assert first["gen_ai.usage.output_tokens"] > 0
    [reasons] = [a.value for a in chats[0].attributes if a.key == "gen_ai.response.finish_reasons"]
    assert [v.string_value for v in reasons.array_value.values] == ["tool_calls"]
    assert chats[0].kind == Span.SPAN_KIND_CLIENT
    # A run that succeeded is OK at its root.
    [root] = [s for s in spans if not s.parent_span_id]
    assert root.name == "run notes-agent"
    assert root.status.code == Status.STATUS_CODE_OK


def test_with_capture_on_messages_and_tool_calls_are_in_the_spans_redacted(on: Traced) -> None:
    spans = on.received.spans
    first, second = (attributes(s.attributes) for s in _named(spans, "chat m"))
    # The agent's instructions, the task, the answer: the conventions' JSON.
    [instructions] = json.loads(first["gen_ai.system_instructions"])
    assert instructions["type"] == "text"
    assert instructions["content"].startswith("You carry out one task")
    [task] = json.loads(first["gen_ai.input.messages"])
    assert task["role"] == "user"
    assert task["parts"][0]["content"].startswith(f"{GOAL} for [REDACTED]")
    [asked] = json.loads(first["gen_ai.output.messages"])
    assert asked["finish_reason"] == "tool_call"
    calls = asked["parts"]
    assert [(c["type"], c["name"]) for c in calls] == [("tool_call", "fs__read")] * 2
    assert calls[0]["arguments"] == {"path": "notes.txt"}  # an object, as it parsed
    assert calls[1]["arguments"] == {"path": "gone-[REDACTED].txt"}
    # The second turn was sent the whole conversation: the calls and their results.
    history = json.loads(second["gen_ai.input.messages"])
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool"]
    responses = [m["parts"][0] for m in history if m["role"] == "tool"]
    assert [r["id"] for r in responses] == [c["id"] for c in calls]
    assert "Launch moves to Thursday; the deploy key is [REDACTED]" in responses[0]["response"]
    [answer] = json.loads(second["gen_ai.output.messages"])
    assert answer == {
        "role": "assistant",
        "parts": [{"type": "text", "content": "Launch is on Thursday, key [REDACTED]"}],
        "finish_reason": "stop",
    }
    # Each tool call: its arguments, its result when it had one, the model's id for it.
    reads = [attributes(s.attributes) for s in _named(spans, "execute_tool fs.read")]
    assert [r["gen_ai.tool.call.id"] for r in reads] == [c["id"] for c in calls]
    assert json.loads(reads[0]["gen_ai.tool.call.arguments"]) == {"path": "notes.txt"}
    result = json.loads(reads[0]["gen_ai.tool.call.result"])
    assert result["content"] == "Launch moves to Thursday; the deploy key is [REDACTED]"
    assert json.loads(reads[1]["gen_ai.tool.call.arguments"]) == {"path": "gone-[REDACTED].txt"}
    assert "gen_ai.tool.call.result" not in reads[1]  # it failed: no result
    # The secret, given to the run as a secret-looking variable, left in no form.
    raw = on.received.raw()
    assert b"Thursday" in raw
    assert not [form for form in forms(SECRET) if form in raw]
    [root] = [s for s in spans if not s.parent_span_id]
    assert root.status.code == Status.STATUS_CODE_OK


@pytest.mark.slow
def test_a_capture_setting_that_is_neither_on_nor_off_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.yaml").write_text(RECIPE, encoding="utf-8")
    proc = planloom(
        "run", "notes.yaml", "--otel", "-i", "who=x", cwd=tmp_path,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", **{CAPTURE: "yes please"},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"{CAPTURE}='yes please': set it to true" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_the_readme_example_puts_the_main_jobs_conversation_in_its_trace() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(rf"^\s*{CAPTURE}=true (planloom replay \S+ --otel)$", readme, re.M)
    assert found, "the README's content-capture example is missing"
    command = found[1].split()
    with collector() as received:
        proc = planloom(
            *command[1:], cwd=ROOT, OTEL_EXPORTER_OTLP_ENDPOINT=received.url, **{CAPTURE: "true"}
        )
    assert proc.returncode == 0, proc.stderr
    chats = [attributes(s.attributes) for s in received.spans if s.name.startswith("chat ")]
    assert len(chats) == 3  # the planner's, and the agent's two turns
    assert all("gen_ai.input.messages" in chat for chat in chats)
    [read] = [s for s in received.spans if s.name == "execute_tool fs.read"]
    assert json.loads(attributes(read.attributes)["gen_ai.tool.call.arguments"]) == {
        "path": "app.py"
    }


# -- in this process: formats, bounds, sinks ----------------------------------------------


def _run_here(
    model: Any, scripts: dict[str, tuple[Any, ...]], folder: Path
) -> tuple[RunResult, list[ReadableSpan], list[Event]]:
    """An agent step with scripted tools, traced with content captured; and what a sink
    on the same bus saw."""
    registry = default_registry()
    tools = ScriptedTools(registry)
    for key, behaviours in scripts.items():
        tools.script(key, *behaviours)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    bus = EventBus("r")
    follow(bus, provider.get_tracer("test"), capture_content=True)
    sunk: list[Event] = []
    bus.subscribe(sunk.append, sink=True)
    recipe = {
        "version": 1,
        "name": "bounded",
        "capabilities": {"test": {}},
        "steps": [{"id": "look", "agent": {"goal": "look at it all", "tools": ["test.run"]}}],
    }
    result = run_recipe_text(
        json.dumps(recipe),
        registry,
        base_dir=folder,
        approver=ApproveAll(),
        model=model,
        events=bus,
        secrets=Secrets([SECRET]),
    )
    provider.shutdown()
    return result, list(memory.get_finished_spans()), sunk


def test_what_was_said_is_bounded_and_stays_json(tmp_path: Path) -> None:
    huge = "x" * 200_000
    wide = {f"k{i}": i for i in range(5_000)}

    def model(request: ChatRequest) -> ChatReply | str:
        if not request.tool_results():
            return ChatReply(
                tool_calls=[
                    ToolCall("test__run", {"key": "huge", "value": huge}),
                    ToolCall("test__run", {"key": "wide"}),
                ]
            )
        return "seen"

    result, spans, _ = _run_here(model, {"huge": (huge + SECRET,), "wide": (wide,)}, tmp_path)
    assert result.status == "succeeded", result.steps
    for span in spans:
        for key in SAID:
            value = (span.attributes or {}).get(key)
            if value is None:
                continue
            assert isinstance(value, str)
            assert len(value) <= 33_000, (span.name, key, len(value))
            json.loads(value)  # still JSON
            assert SECRET not in value
    big, many = (s.attributes or {} for s in spans if s.name == "execute_tool test.run")
    arguments = json.loads(str(big["gen_ai.tool.call.arguments"]))
    assert arguments["key"] == "huge"
    assert arguments["value"].startswith("xxx")
    assert arguments["value"].endswith("…")  # a text cut, saying so
    assert len(arguments["value"]) == 4096
    kept = json.loads(str(many["gen_ai.tool.call.result"]))
    assert len(kept) == 101  # a hundred entries, and one saying what was left out
    assert kept["…"] == "4900 more entries"


def test_sinks_never_see_what_was_said(tmp_path: Path) -> None:
    """Logs (`-v`, `--log-file`) keep their shape when traces capture content."""

    def model(request: ChatRequest) -> ChatReply | str:
        if not request.tool_results():
            return ChatReply(tool_calls=[ToolCall("test__run", {"key": "k", "value": GOAL})])
        return ANSWER

    result, spans, sunk = _run_here(model, {}, tmp_path)
    assert result.status == "succeeded", result.steps
    assert any("gen_ai.tool.call.arguments" in (s.attributes or {}) for s in spans)
    kinds = {event.kind for event in sunk}
    assert {"llm.called", "tool.called", "tool.finished"} <= kinds
    for event in sunk:
        assert "content" not in event.data, event.kind
        assert GOAL not in json.dumps(event.data, default=repr), event.kind
