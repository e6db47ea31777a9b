"""Events inside the process, and what reaches the sinks that write them out."""

from __future__ import annotations

from typing import Any

from engine.events import Event, EventBus


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
