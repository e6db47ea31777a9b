"""Structured events for every transition of a run, and where they go.

The executor publishes `Event`s to an `EventBus`; subscribers (the structlog logger, the
live progress view, the run journal, tests) each see every event in order. With no
subscriber an event costs one attribute check.

Secrets are redacted where events leave the process, not in every event: sinks (the log
file, `-v` on the terminal) subscribe as such and see each event redacted once; the
journal redacts what it writes. A run of 100,000 steps makes 600,000 events, and
redacting each payload was half of the engine's per-step cost.

Events say what happened, not what was said: no params, outputs or prompts. A subscriber
that is to show those (traces capturing message content) sets `EventBus.content`; then a
model call's messages and answer and a tool call's arguments and result ride along under
the `content` key of `llm.called`, `tool.called` and `tool.finished`, for subscribers only:
sinks never see that key.

`Event` is a slots dataclass rather than a pydantic model: a run builds about six per step,
so it sits on the hot path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Event", "EventBus", "EventKind", "Subscriber", "structlog_subscriber"]

EventKind = Literal[
    "session.started",
    "session.finished",
    "plan.started",
    "plan.finished",
    "plan.step",
    "run.started",
    "run.finished",
    "run.settled",
    "step.started",
    "step.finished",
    "step.warning",
    "step.discarded",
    "attempt.started",
    "attempt.finished",
    "attempt.retrying",
    "tool.called",
    "tool.finished",
    "gate.decided",
    "human.answered",
    "llm.called",
    "llm.waiting",
    "llm.streaming",
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
        self.sinks: tuple[Subscriber, ...] = ()
        # What a sink's events go through: the run's secrets redacted (`Secrets.redact_value`).
        self.redact = redact
        # Whether events carry what was said (under `content`; see the module's docstring).
        self.content = False

    def subscribe(self, subscriber: Subscriber, *, sink: bool = False) -> None:
        """Have `subscriber` see every event from now on.

        A `sink` writes events out of the process (a log file, the terminal): it sees them
        with secrets redacted, done once per event for all sinks. Other subscribers see an
        event as the run made it, unredacted, and must not write it out as it is.
        """
        if sink:
            self.sinks = (*self.sinks, subscriber)
        else:
            self.subscribers = (*self.subscribers, subscriber)

    def emit(
        self,
        kind: EventKind,
        step_id: str | None = None,
        attempt: int | None = None,
        content: Any = None,
        **data: Any,
    ) -> None:
        """Publish one event. `content` is what was said (see the module's docstring): in
        the event's data for subscribers, never for sinks. (A parameter of its own, not
        merged in by the caller: `**{...}` at a call site on every tool call was a tenth
        of a call's cost.)"""
        subscribers = self.subscribers
        if not subscribers and not self.sinks:
            return
        said = data if content is None else {**data, "content": content}
        event = Event(kind, self.run_id, step_id, attempt, time.time(), said)
        for subscriber in subscribers:  # (delivered here: a call less on every event)
            try:
                subscriber(event)
            except Exception:  # a broken view must not break the run
                self._drop(subscriber)
        if self.sinks:
            if content is not None:  # for subscribers that asked for it: never written out
                event = Event(kind, self.run_id, step_id, attempt, event.ts, data)
            if self.redact is not None:
                event = Event(kind, self.run_id, step_id, attempt, event.ts, self.redact(data))
            self._deliver(event, self.sinks)

    def _deliver(self, event: Event, subscribers: tuple[Subscriber, ...]) -> None:
        for subscriber in subscribers:
            try:
                subscriber(event)
            except Exception:  # a broken view must not break the run
                self._drop(subscriber)

    def _drop(self, subscriber: Subscriber) -> None:
        """`subscriber` failed: it sees no more events, and the log says so."""
        # Imported here: structlog (with its dev renderer and rich) costs ~50 ms, which
        # `planloom validate` and `--help` must not pay for this rare path.
        import structlog

        self.subscribers = tuple(s for s in self.subscribers if s is not subscriber)
        self.sinks = tuple(s for s in self.sinks if s is not subscriber)
        structlog.get_logger("planloom").warning("subscriber.removed", subscriber=repr(subscriber))


def structlog_subscriber(logger: Any) -> Subscriber:
    """A subscriber logging each event through a structlog logger, bound to run/step."""

    def log(event: Event) -> None:
        fields = {k: v for k, v in event.data.items() if v is not None}
        say = logger.warning if event.kind == "step.warning" else logger.info
        say(
            event.kind,
            run_id=event.run_id,
            step_id=event.step_id,
            attempt=event.attempt,
            **fields,
        )

    return log
