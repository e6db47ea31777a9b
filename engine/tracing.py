"""OpenTelemetry spans of a run, made from its events.

`RunSpans` is an event subscriber: given an OpenTelemetry `Tracer`, it turns a run's events
into a span tree

    session                             (a goal session: planned by a model)
    ├── plan                            (then `replan`, after a failed run)
    │   └── chat {model}
    └── run {plan}                      (without a goal, the root)
        └── step {id}
            └── attempt {n}
                ├── execute_tool {action}
                │   └── chat {model}    (a model call made by a tool, as `llm.complete`)
                └── chat {model}        (an agent's turns)

with the GenAI semantic conventions on model calls (`gen_ai.operation.name`,
`gen_ai.request.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`) and on
tool calls (`execute_tool`, `gen_ai.tool.name`). Failures set the span's status to ERROR
with an `exception` event; retries, rate-limit waits and gate decisions are span events.

Spans are made from events rather than around the code that runs them, so a run that is
not traced pays nothing: no subscriber, no span. Spans leave the process, so every text
put in one is redacted with the run's secrets (`follow` subscribes it so), and nothing
else of the run (no params, no outputs, no prompts) is put in an attribute.

Only the OpenTelemetry API is used here; which SDK, processor and exporter receive the
spans is the caller's choice (`engine.app.telemetry` for the `planloom` command).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from engine.events import Event, EventBus

__all__ = ["RunSpans", "follow", "server_of"]

_FAILED_STEP = frozenset({"failed", "denied", "cancelled"})
_FAILED_RUN = frozenset({"failed", "cancelled"})
_TEXT_LIMIT = 4096  # an error quoted in a span: enough to read, bounded

Attributes = dict[str, str | bool | int | float]
_Owner = tuple[str, int | None, int]
"""An attempt: its step, its `for_each` item (None for a whole step: an item's attempts are
numbered within the item) and its number."""


def server_of(base_url: str | None) -> tuple[str, int] | None:
    """`server.address` and `server.port` of a model endpoint: its host and port only (a
    URL may carry a user and password, or a key in its query)."""
    if not base_url:
        return None
    try:
        parts = urlsplit(base_url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    return host, port or (443 if parts.scheme == "https" else 80)


class RunSpans:
    """Builds the spans of a run, or of a goal session and its runs, from their events
    (see the module's docstring). One instance per trace.

    Args:
        tracer: where spans are made.
        server: the model endpoint's host and port, for model calls' `server.*` attributes.
        redact: applied to every text put in a span (names, attributes, statuses): the
            run's secrets redacted. `follow` passes the event bus's.
    """

    def __init__(
        self,
        tracer: Tracer,
        *,
        server: tuple[str, int] | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.tracer = tracer
        self.server = server
        self._default_redact: Callable[[str], str] = redact or str
        self._redact = self._default_redact
        self._session: Span | None = None
        self._planning: Span | None = None
        self._run: Span | None = None
        self._steps: dict[str, Span] = {}
        self._attempts: dict[_Owner, Span] = {}
        # Tool calls in flight, by their number in the run, and by the attempt making them.
        self._tools: dict[int, tuple[Span, _Owner | None]] = {}
        self._handlers: Mapping[str, Callable[[Event], None]] = {
            "session.started": self._session_started,
            "session.finished": self._session_finished,
            "plan.started": self._plan_started,
            "plan.finished": self._plan_finished,
            "run.started": self._run_started,
            "run.finished": self._run_finished,
            "step.started": self._step_started,
            "step.finished": self._step_finished,
            "attempt.started": self._attempt_started,
            "attempt.finished": self._attempt_finished,
            "attempt.retrying": self._retrying,
            "tool.called": self._tool_called,
            "tool.finished": self._tool_finished,
            "llm.called": self._llm_called,
            "llm.waiting": self._llm_waiting,
            "gate.decided": self._gate_decided,
            "human.answered": self._human_answered,
        }

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(event.kind)
        if handler is not None:
            handler(event)

    def follow(self, bus: EventBus) -> None:
        """Make spans of `bus`'s events too, redacted with `bus.redact` (the run's
        secrets: an executor sets it when it is made). A goal session's bus and each of
        its runs' buses are followed by one `RunSpans`, making one trace."""

        def redact(text: str) -> str:
            redactor = bus.redact
            return text if redactor is None else str(redactor(text))

        def deliver(event: Event) -> None:
            self._redact = redact
            try:
                self(event)
            finally:
                self._redact = self._default_redact

        bus.subscribe(deliver)

    # -- a goal session: planning, replanning, its runs ----------------------------------

    def _session_started(self, event: Event) -> None:
        self._session = self.tracer.start_span(
            "session",
            start_time=_ns(event.ts),
            attributes=self._attributes(
                {
                    "planloom.run.id": event.run_id,
                    "planloom.goal": self._text(event.data.get("goal")),
                }
            ),
        )

    def _session_finished(self, event: Event) -> None:
        end = _ns(event.ts)
        if self._planning is not None:
            _abandon(self._planning, end)
            self._planning = None
        if self._session is not None:
            _end_root(self._session, "session", str(event.data.get("status")), end)
            self._session = None

    def _plan_started(self, event: Event) -> None:
        replan = bool(event.data.get("replan"))
        self._planning = self.tracer.start_span(
            "replan" if replan else "plan",
            context=self._context(self._session),
            start_time=_ns(event.ts),
            attributes={"planloom.plan.replan": replan},
        )

    def _plan_finished(self, event: Event) -> None:
        span = self._planning
        if span is None:
            return
        self._planning = None
        data = event.data
        outcome = str(data.get("outcome"))
        span.set_attributes(
            self._attributes(
                {"planloom.plan.outcome": outcome, "planloom.plan.steps": data.get("steps")}
            )
        )
        if outcome == "failed":
            self._failed(span, "PlanningFailed", data.get("error"), event.ts)
        span.end(end_time=_ns(event.ts))

    # -- run and steps -------------------------------------------------------------------

    def _run_started(self, event: Event) -> None:
        plan = str(event.data.get("plan") or "plan")
        # A goal session's run is its child; any other run is a child of the caller's
        # span, if it was started inside one.
        self._run = self.tracer.start_span(
            self._name(f"run {plan}"),
            context=self._context(self._session),
            start_time=_ns(event.ts),
            attributes=self._attributes(
                {"planloom.run.id": event.run_id, "planloom.plan.name": plan}
            ),
        )

    def _run_finished(self, event: Event) -> None:
        end = _ns(event.ts)
        for span, _ in self._tools.values():
            _abandon(span, end)
        for span in self._attempts.values():
            _abandon(span, end)
        for span in self._steps.values():
            _abandon(span, end)
        self._tools.clear()
        self._attempts.clear()
        self._steps.clear()
        if self._run is not None:
            _end_root(self._run, "run", str(event.data.get("status")), end)
            self._run = None

    def _step_started(self, event: Event) -> None:
        step_id = event.step_id or ""
        self._steps[step_id] = self.tracer.start_span(
            self._name(f"step {step_id}"),
            context=self._context(self._run),
            start_time=_ns(event.ts),
            attributes={"planloom.step.id": step_id},
        )

    def _step_finished(self, event: Event) -> None:
        step_id = event.step_id or ""
        end = _ns(event.ts)
        # What the step left open (cancelled, or ended by a crash) ends with it.
        for number, (tool, owner) in list(self._tools.items()):
            if owner is not None and owner[0] == step_id:
                _abandon(tool, end)
                del self._tools[number]
        for key in [key for key in self._attempts if key[0] == step_id]:
            _abandon(self._attempts.pop(key), end)
        span = self._steps.pop(step_id, None)
        if span is None:  # ended without starting: skipped because a dependency failed
            span = self.tracer.start_span(
                self._name(f"step {step_id}"),
                context=self._context(self._run),
                start_time=end,
                attributes={"planloom.step.id": step_id},
            )
        data = event.data
        status = str(data.get("status"))
        span.set_attributes(
            self._attributes(
                {
                    "planloom.step.status": status,
                    "planloom.step.attempts": data.get("attempts"),
                }
            )
        )
        error = data.get("error")
        if status in _FAILED_STEP:
            span.set_status(Status(StatusCode.ERROR, self._text(error or status)))
        elif error:
            span.set_attribute("planloom.step.error", self._text(error))
        span.end(end_time=end)

    # -- attempts ------------------------------------------------------------------------

    def _attempt_started(self, event: Event) -> None:
        owner = _owner(event)
        step_id, item, number = owner
        data = event.data
        attributes = self._attributes(
            {
                "planloom.step.id": step_id,
                "planloom.attempt": number,
                "planloom.action": data.get("action"),
                "planloom.item": item,
            }
        )
        if data.get("agent"):
            attributes["gen_ai.operation.name"] = "invoke_agent"
        self._attempts[owner] = self.tracer.start_span(
            f"attempt {number}",
            context=self._context(self._steps.get(step_id) or self._run),
            start_time=_ns(event.ts),
            attributes=attributes,
        )

    def _attempt_finished(self, event: Event) -> None:
        span = self._attempts.pop(_owner(event), None)
        if span is None:
            return
        outcome = str(event.data.get("outcome"))
        span.set_attribute("planloom.outcome", outcome)
        if outcome != "ok":
            self._failed(span, outcome, event.data.get("error"), event.ts)
        span.end(end_time=_ns(event.ts))

    def _retrying(self, event: Event) -> None:
        span = self._steps.get(event.step_id or "")
        if span is not None:
            span.add_event(
                "planloom.retry",
                self._attributes(
                    {
                        "planloom.attempt": event.attempt,
                        "planloom.wait_seconds": event.data.get("wait"),
                        "planloom.error": self._text(event.data.get("error")),
                    }
                ),
                timestamp=_ns(event.ts),
            )

    # -- tool calls ----------------------------------------------------------------------

    def _tool_called(self, event: Event) -> None:
        data = event.data
        number = data.get("call")
        if not isinstance(number, int):
            return
        owner = _owner(event)
        action = str(data.get("action"))
        missing = data.get("missing_confinement")
        self._tools[number] = (
            self.tracer.start_span(
                self._name(f"execute_tool {action}"),
                context=self._context(self._parent_of(owner)),
                start_time=_ns(event.ts),
                attributes=self._attributes(
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": action,
                        "planloom.step.id": owner[0],
                        "planloom.item": owner[1],
                        "planloom.attempt": owner[2],
                        "planloom.tool.call": number,
                        "planloom.tool.rule": data.get("rule"),
                        "planloom.tool.side_effects": data.get("side_effects"),
                        "planloom.tool.missing_confinement": (
                            ", ".join(sorted(missing)) if isinstance(missing, dict) else None
                        ),
                    }
                ),
            ),
            owner,
        )

    def _tool_finished(self, event: Event) -> None:
        data = event.data
        number = data.get("call")
        held = self._tools.pop(number, None) if isinstance(number, int) else None
        end = _ns(event.ts)
        if held is not None:
            span = held[0]
        else:  # refused before it was counted: a span of no length, saying why
            action = str(data.get("action"))
            owner = _owner(event)
            span = self.tracer.start_span(
                self._name(f"execute_tool {action}"),
                context=self._context(self._parent_of(owner)),
                start_time=end,
                attributes=self._attributes(
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": action,
                        "planloom.step.id": owner[0],
                        "planloom.item": owner[1],
                        "planloom.attempt": owner[2],
                        "planloom.tool.rule": data.get("rule"),
                    }
                ),
            )
        outcome = str(data.get("outcome"))
        span.set_attributes(
            self._attributes(
                {"planloom.tool.decision": data.get("decision"), "planloom.outcome": outcome}
            )
        )
        if outcome != "ok":
            self._failed(span, outcome, data.get("error"), event.ts)
        span.end(end_time=end)

    # -- model calls ---------------------------------------------------------------------

    def _llm_called(self, event: Event) -> None:
        data = event.data
        model = data.get("model")
        end = _ns(event.ts)
        latency = data.get("latency")
        start = end - int(float(latency) * 1e9) if isinstance(latency, int | float) else end
        attributes = self._attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": model,
                "gen_ai.usage.input_tokens": data.get("prompt_tokens"),
                "gen_ai.usage.output_tokens": data.get("completion_tokens"),
                "planloom.llm.tool_calls": data.get("tool_calls"),
            }
        )
        if self.server is not None:
            attributes["server.address"], attributes["server.port"] = self.server
        owner = _owner(event) if event.step_id is not None else None
        parent = self._tool_of(owner) or self._parent_of(owner)
        span = self.tracer.start_span(
            self._name(f"chat {model}" if model else "chat"),
            context=self._context(parent),
            kind=SpanKind.CLIENT,
            start_time=start,
            attributes=attributes,
        )
        outcome = data.get("outcome")
        if outcome is not None:
            span.set_attribute("error.type", str(outcome))
            self._failed(span, str(outcome), data.get("error"), event.ts)
        span.end(end_time=end)

    def _llm_waiting(self, event: Event) -> None:
        owner = _owner(event) if event.step_id is not None else None
        span = self._parent_of(owner)
        if span is not None:
            span.add_event(
                "planloom.llm.wait",
                self._attributes(
                    {
                        "planloom.wait_seconds": event.data.get("wait"),
                        "planloom.reason": event.data.get("reason"),
                    }
                ),
                timestamp=_ns(event.ts),
            )

    # -- people --------------------------------------------------------------------------

    def _gate_decided(self, event: Event) -> None:
        span = self._steps.get(event.step_id or "")
        if span is not None:
            data = event.data
            span.add_event(
                "planloom.gate",
                self._attributes(
                    {
                        "planloom.action": data.get("action"),
                        "planloom.gate.approved": data.get("approved"),
                        "planloom.gate.by": data.get("by"),
                        "planloom.gate.reason": self._text(data.get("reason")),
                        "planloom.gate.in_doubt": data.get("in_doubt"),
                    }
                ),
                timestamp=_ns(event.ts),
            )

    def _human_answered(self, event: Event) -> None:
        span = self._steps.get(event.step_id or "")
        if span is not None:
            span.add_event("planloom.human.answered", timestamp=_ns(event.ts))

    # -- helpers -------------------------------------------------------------------------

    def _parent_of(self, owner: _Owner | None) -> Span | None:
        """The innermost open span of an attempt: the attempt, else its step, else the run;
        without an attempt (the planner's model calls), the planning, the run or the
        session."""
        if owner is None:
            return self._planning or self._run or self._session
        return self._attempts.get(owner) or self._steps.get(owner[0]) or self._run

    def _tool_of(self, owner: _Owner | None) -> Span | None:
        """The one tool call the attempt has in flight, if exactly one (a model call made
        while it runs is that tool's: `llm.complete`, `llm.extract`)."""
        if owner is None:
            return None
        held = [span for span, by in self._tools.values() if by == owner]
        return held[0] if len(held) == 1 else None

    def end_all(self) -> None:
        """End every span still open, as cancelled: a run stopped at once (a second
        Ctrl-C) never publishes its last events."""
        end = time.time_ns()
        open_spans = [tool for tool, _ in self._tools.values()]
        open_spans += [*self._attempts.values(), *self._steps.values()]
        open_spans += [s for s in (self._planning, self._run, self._session) if s is not None]
        for span in open_spans:  # innermost first: a parent ends after its children
            _abandon(span, end)
        self._tools.clear()
        self._attempts.clear()
        self._steps.clear()
        self._planning = self._run = self._session = None

    def _clean(self, text: str) -> str:
        """`text` redacted, and encodable as UTF-8 (a lone surrogate from a server's
        message would make the whole batch of spans unsendable)."""
        text = self._redact(text)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "replace").decode("utf-8")
        return text

    def _name(self, name: str) -> str:
        return self._clean(name)

    def _text(self, value: Any) -> str | None:
        if value is None:
            return None
        text = self._clean(str(value))
        return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 1] + "…"

    def _attributes(self, values: Mapping[str, Any]) -> Attributes:
        """The values OpenTelemetry takes (it refuses None, and nested values); text
        redacted."""
        return {
            key: self._clean(value) if isinstance(value, str) else value
            for key, value in values.items()
            if isinstance(value, str | bool | int | float)
        }

    def _failed(self, span: Span, outcome: str, error: Any, at: float) -> None:
        message = self._text(error) or outcome
        span.set_status(Status(StatusCode.ERROR, message))
        span.add_event(
            "exception",
            {"exception.type": outcome, "exception.message": message},
            timestamp=_ns(at),
        )

    @staticmethod
    def _context(parent: Span | None) -> Any:
        return trace.set_span_in_context(parent) if parent is not None else None


def follow(bus: EventBus, tracer: Tracer, *, server: tuple[str, int] | None = None) -> RunSpans:
    """Make the spans of the run publishing on `bus`, with what it redacts redacted.

    It subscribes as an ordinary subscriber, not a sink, and redacts only what it puts in
    spans (a few short texts per event, memoized by `Secrets.redact`) rather than having
    each event's data redacted whole, as a sink's is.
    """
    spans = RunSpans(tracer, server=server)
    spans.follow(bus)
    return spans


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _owner(event: Event) -> _Owner:
    """The attempt an event belongs to."""
    item = event.data.get("item")
    return event.step_id or "", item if isinstance(item, int) else None, event.attempt or 0


def _end_root(span: Span, what: str, status: str, end: int) -> None:
    """End a run's or a session's span with how it ended."""
    span.set_attribute("planloom.run.status", status)
    if status in _FAILED_RUN:
        span.set_status(Status(StatusCode.ERROR, f"the {what} {status}"))
    span.end(end_time=end)


def _abandon(span: Span, end: int) -> None:
    """End a span whose end was never reported (its task was cancelled)."""
    span.set_status(Status(StatusCode.ERROR, "cancelled"))
    span.set_attribute("planloom.outcome", "cancelled")
    span.end(end_time=end)
