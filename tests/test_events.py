"""Events inside the process, and what reaches the sinks that write them out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from capabilities import default_registry
from engine.approval import ApproveAll
from engine.events import Event, EventBus
from engine.results import RunResult
from engine.testing import (
    ChatReply,
    ChatRequest,
    Fail,
    Fault,
    ScriptedTools,
    ToolCall,
    run_recipe_text,
)


def test_sinks_see_each_event_redacted_once_and_other_subscribers_see_it_as_made() -> None:
    redacted: list[Any] = []

    def redact(data: Any) -> Any:
        redacted.append(data)
        return {k: "[REDACTED]" if k == "error" else v for k, v in data.items()}

    bus = EventBus("r", redact=redact)
    raw: list[Event] = []
    first: list[Event] = []
    second: list[Event] = []
    bus.subscribe(raw.append)
    bus.subscribe(first.append, sink=True)
    bus.subscribe(second.append, sink=True)
    bus.emit("attempt.finished", "s", 1, outcome="StepFailed", error="token sk-123")
    assert [e.data for e in raw] == [{"outcome": "StepFailed", "error": "token sk-123"}]
    assert [e.data for e in first] == [{"outcome": "StepFailed", "error": "[REDACTED]"}]
    assert first == second
    assert len(redacted) == 1  # once per event, however many sinks
    assert (first[0].kind, first[0].step_id, first[0].attempt) == ("attempt.finished", "s", 1)
    assert first[0].ts == raw[0].ts


def test_without_a_sink_nothing_is_redacted() -> None:
    calls: list[Any] = []
    bus = EventBus("r", redact=calls.append)
    seen: list[Event] = []
    bus.subscribe(seen.append)
    for _ in range(3):
        bus.emit("step.started", "s")
    assert len(seen) == 3
    assert calls == []


def test_a_failing_sink_is_dropped_and_the_others_go_on() -> None:
    def broken(event: Event) -> None:
        raise RuntimeError("view crashed")

    bus = EventBus("r", redact=dict)
    kept: list[Event] = []
    bus.subscribe(broken, sink=True)
    bus.subscribe(kept.append, sink=True)
    bus.emit("step.started", "a")
    bus.emit("step.started", "b")
    assert [e.step_id for e in kept] == ["a", "b"]
    assert bus.sinks == (kept.append,)


# -- events of a run: which step and attempt they belong to, and the waits ---------------


def _run(
    text: str, base_dir: Path, model: Any = None, faults: tuple[Fault, ...] = ()
) -> tuple[RunResult, list[Event], list[float]]:
    """Run a recipe with a scripted model behind a fake endpoint; the events and the
    model client's sleeps (recorded, not slept)."""
    registry = default_registry()
    tools = ScriptedTools(registry)
    tools.script("flaky", Fail("down"), Fail("down"), "up")
    events: list[Event] = []
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    bus = EventBus("r")
    bus.subscribe(events.append)
    result = run_recipe_text(
        text,
        registry,
        base_dir=base_dir,
        approver=ApproveAll(),
        model=model or (lambda request: "done"),
        faults=faults,
        events=bus,
        model_sleep=sleep,
    )
    return result, events, slept


def _recipe(*steps: dict[str, Any]) -> str:
    return json.dumps(
        {"version": 1, "name": "ev", "capabilities": {"test": {}, "llm": {}}, "steps": list(steps)}
    )


def test_the_model_calls_of_an_agent_step_name_that_step_and_its_attempt(tmp_path: Path) -> None:
    def model(request: ChatRequest) -> ChatReply | str:
        if any(m.get("role") == "tool" for m in request.messages):
            return "done"
        return ChatReply(tool_calls=[ToolCall("test__run", {"key": "a", "value": 1})])

    text = _recipe(
        {"id": "plain", "tool": "test.run", "params": {"key": "p", "value": 0}},
        {"id": "think", "agent": {"goal": "look it up", "tools": ["test.run"]}},
    )
    result, events, _ = _run(text, tmp_path, model)
    assert result.status == "succeeded"
    calls = [e for e in events if e.kind == "llm.called"]
    assert len(calls) == 2
    assert {(e.run_id, e.step_id, e.attempt) for e in calls} == {("r", "think", 1)}
    assert all(e.data["model"] == "m" and e.data["prompt_tokens"] > 0 for e in calls)
    tool = [e for e in events if e.kind == "tool.called" and e.step_id == "think"]
    assert [(e.attempt, e.data["action"]) for e in tool] == [(1, "test.run")]


def test_a_rate_limited_model_call_waits_as_retry_after_says_and_says_so(tmp_path: Path) -> None:
    text = _recipe({"id": "think", "agent": {"goal": "answer", "tools": []}})
    result, events, slept = _run(text, tmp_path, faults=(Fault.status(429, retry_after=2),))
    assert result.status == "succeeded"
    assert slept == [2.0]
    [wait] = [e for e in events if e.kind == "llm.waiting"]
    assert (wait.step_id, wait.attempt) == ("think", 1)
    # (`item` names a `for_each` item, whose attempts are numbered within it: none here)
    assert wait.data == {"item": None, "wait": 2.0, "reason": "rate limited (429)"}


def test_each_retry_of_a_step_is_an_event_with_its_wait(tmp_path: Path) -> None:
    text = _recipe(
        {
            "id": "flaky",
            "tool": "test.run",
            "params": {"key": "flaky"},
            "retry": {"attempts": 3, "backoff": "fixed", "initial": 0.5},
        }
    )
    result, events, _ = _run(text, tmp_path)
    assert result.steps["flaky"].status == "succeeded"
    assert result.steps["flaky"].attempts == 3
    retries = [e for e in events if e.kind == "attempt.retrying"]
    assert [(e.step_id, e.attempt, e.data["wait"]) for e in retries] == [
        ("flaky", 1, 0.5),
        ("flaky", 2, 0.5),
    ]
    assert all("down" in e.data["error"] for e in retries)
