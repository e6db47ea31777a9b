"""Structured events for every transition of a run, and where they go.

The executor publishes `Event`s to an `EventBus`; subscribers (the structlog logger, the
live progress view, tests) each see every event in order. With no subscriber an event
costs one attribute check.

`Event` is a slots dataclass rather than a pydantic model: a run builds about six per step,
so it sits on the hot path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

__all__ = ["Event", "EventBus", "EventKind", "structlog_subscriber"]

EventKind = Literal[
    "run.started",
    "run.finished",
    "step.started",
    "step.finished",
    "attempt.started",
    "attempt.finished",
    "tool.called",
    "tool.finished",
    "gate.decided",
    "human.answered",
    "llm.called",
]


@dataclass(slots=True)
class Event:
    """One transition. `data` holds kind-specific fields (status, error, params hash...)."""

    kind: EventKind
    run_id: str
    step_id: str | None = None
    attempt: int | None = None
    ts: float = field(default_factory=time.time)
    data: dict[str, Any] = field(default_factory=dict)


Subscriber = Callable[[Event], None]


class EventBus:
    """Fan-out of events to subscribers; a failing subscriber never breaks the run."""

    def __init__(self, run_id: str, redact: Callable[[Any], Any] | None = None) -> None:
        self.run_id = run_id
        self.subscribers: tuple[Subscriber, ...] = ()
        # Applied once to each event's data, so every subscriber (logs, audit, the live
        # view, cassettes) sees it redacted.
        self.redact = redact

    def subscribe(self, subscriber: Subscriber) -> None:
        self.subscribers = (*self.subscribers, subscriber)

    def emit(
        self,
        kind: EventKind,
        step_id: str | None = None,
        attempt: int | None = None,
        **data: Any,
    ) -> None:
        if not self.subscribers:
            return
        if self.redact is not None:
            data = self.redact(data)
        event = Event(kind, self.run_id, step_id, attempt, time.time(), data)
        for subscriber in self.subscribers:
            try:
                subscriber(event)
            except Exception:  # a broken view must not break the run
                self.subscribers = tuple(s for s in self.subscribers if s is not subscriber)
                structlog.get_logger("planloom").warning(
                    "subscriber.removed", subscriber=repr(subscriber)
                )


def structlog_subscriber(logger: Any) -> Subscriber:
    """A subscriber logging each event through a structlog logger, bound to run/step."""

    def log(event: Event) -> None:
        fields = {k: v for k, v in event.data.items() if v is not None}
        logger.info(
            event.kind,
            run_id=event.run_id,
            step_id=event.step_id,
            attempt=event.attempt,
            **fields,
        )

    return log
