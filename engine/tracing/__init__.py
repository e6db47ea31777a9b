"""OpenTelemetry spans of a run, made from its events.

`RunSpans` is an event subscriber: given an OpenTelemetry `Tracer`, it turns a run's events
into a span tree

    session                             (a goal session: planned by a model)
    ├── plan                            (then `replan`, after a failed run)
    │   └── chat {model}
    └── run {plan}                      (without a goal, the root)
        └── step {id}
            └── attempt {n}             (an agent's: `invoke_agent`)
                ├── execute_tool {action}
                │   └── chat {model}    (a model call made by a tool, as `llm.complete`)
                └── chat {model}        (an agent's turns)

with the OpenTelemetry GenAI semantic conventions: model calls are CLIENT spans with
`gen_ai.operation.name: chat`, `gen_ai.provider.name`, the request's and the response's
model, the response's id and finish reasons and the tokens used; tool calls are
`execute_tool` spans with `gen_ai.tool.name` and, for a call an agent's model asked for,
`gen_ai.tool.call.id`; an agent's attempt (an agent step's, or a fallback's agent) is an
`invoke_agent` operation naming the agent by its step (`gen_ai.agent.name`; the span keeps
its name, `attempt {n}`, beside its step's other attempts). Every other span is INTERNAL,
and each also says its OpenInference kind (`openinference.span.kind`: CHAIN, AGENT, TOOL,
LLM) for readers that class spans by it.
A run or session that succeeded ends OK; failures set ERROR with the error, an
`exception` event and `error.type`; retries, rate-limit waits and gate decisions are span
events.

Spans are made from events rather than around the code that runs them, so a run that is
not traced pays nothing: no subscriber, no span. Spans leave the process, so every text
put in one is redacted with the run's secrets (`follow` subscribes it so). What was said
(messages, tool arguments and results) is put in spans only when content is captured
(`capture_content`, which asks the bus for it: `EventBus.content`), redacted before it is
bounded (`engine.tracing._content`); otherwise nothing of it reaches a span.

Only the OpenTelemetry API is used here; which SDK, processor and exporter receive the
spans is the caller's choice (`engine.app.telemetry` for the `planloom` command).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from opentelemetry.trace import Status, StatusCode, Tracer

from engine.events import Event, EventBus
from engine.tracing._book import FAILED_STEP, PROVIDER, abandon, end_root, ns, owner_of
from engine.tracing._calls import CallSpans

__all__ = ["RunSpans", "follow", "server_of"]


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


class RunSpans(CallSpans):
    """Builds the spans of a run, or of a goal session and its runs, from their events
    (see the module's docstring). One instance per trace.

    Args:
        tracer: where spans are made.
        server: the model endpoint's host and port, for model calls' `server.*` attributes.
        redact: applied to every text put in a span (names, attributes, statuses): the
            run's secrets redacted. `follow` passes the event bus's.
        capture_content: put what was said in spans (`gen_ai.input.messages`,
            `gen_ai.output.messages`, `gen_ai.system_instructions`,
            `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`), redacted and bounded.
    """

    def __init__(
        self,
        tracer: Tracer,
        *,
        server: tuple[str, int] | None = None,
        redact: Callable[[str], str] | None = None,
        capture_content: bool = False,
    ) -> None:
        super().__init__(tracer, server=server, redact=redact, capture_content=capture_content)
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
            self._redact_data = bus.redact or self._redact_texts
            try:
                self(event)
            finally:
                self._redact = self._default_redact
                self._redact_data = self._redact_texts

        if self.capture_content:
            bus.content = True  # the run's events carry what was said, for us
        bus.subscribe(deliver)

    # -- a goal session: planning, replanning, its runs ----------------------------------

    def _session_started(self, event: Event) -> None:
        goal = self._text(event.data.get("goal"))
        attributes = self._attributes({"planloom.run.id": event.run_id, "planloom.goal": goal})
        self._session = self._start("session", None, ns(event.ts), attributes)

    def _session_finished(self, event: Event) -> None:
        end = ns(event.ts)
        if self._planning is not None:
            abandon(self._planning, end)
            self._planning = None
        if self._session is not None:
            end_root(self._session, "session", str(event.data.get("status")), end)
            self._session = None

    def _plan_started(self, event: Event) -> None:
        replan = bool(event.data.get("replan"))
        self._planning = self._start(
            "replan" if replan else "plan",
            self._session,
            ns(event.ts),
            {"planloom.plan.replan": replan},
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
        span.end(end_time=ns(event.ts))

    # -- run and steps -------------------------------------------------------------------

    def _run_started(self, event: Event) -> None:
        plan = str(event.data.get("plan") or "plan")
        # A goal session's run is its child; any other run is a child of the caller's
        # span, if it was started inside one.
        self._run = self._start(
            f"run {plan}",
            self._session,
            ns(event.ts),
            self._attributes({"planloom.run.id": event.run_id, "planloom.plan.name": plan}),
        )

    def _run_finished(self, event: Event) -> None:
        end = ns(event.ts)
        for span, _ in self._tools.values():
            abandon(span, end)
        for span in self._attempts.values():
            abandon(span, end)
        for span in self._steps.values():
            abandon(span, end)
        self._tools.clear()
        self._attempts.clear()
        self._steps.clear()
        if self._run is not None:
            end_root(self._run, "run", str(event.data.get("status")), end)
            self._run = None

    def _step_started(self, event: Event) -> None:
        step_id = event.step_id or ""
        self._steps[step_id] = self._start(
            f"step {step_id}", self._run, ns(event.ts), {"planloom.step.id": self._clean(step_id)}
        )

    def _step_finished(self, event: Event) -> None:
        step_id = event.step_id or ""
        end = ns(event.ts)
        # What the step left open (cancelled, or ended by a crash) ends with it.
        for number, (tool, owner) in list(self._tools.items()):
            if owner is not None and owner[0] == step_id:
                abandon(tool, end)
                del self._tools[number]
        for key in [key for key in self._attempts if key[0] == step_id]:
            abandon(self._attempts.pop(key), end)
        span = self._steps.pop(step_id, None)
        if span is None:  # ended without starting: skipped because a dependency failed
            span = self._start(
                f"step {step_id}", self._run, end, {"planloom.step.id": self._clean(step_id)}
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
        if status in FAILED_STEP:
            span.set_status(Status(StatusCode.ERROR, self._text(error or status)))
        elif error:
            span.set_attribute("planloom.step.error", self._text(error))
        span.end(end_time=end)

    # -- attempts ------------------------------------------------------------------------

    def _attempt_started(self, event: Event) -> None:
        owner = owner_of(event)
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
        role = "CHAIN"
        if data.get("agent"):  # an agent in this process, named by its step
            attributes["gen_ai.operation.name"] = "invoke_agent"
            attributes["gen_ai.provider.name"] = PROVIDER
            attributes["gen_ai.agent.name"] = self._clean(step_id)
            role = "AGENT"
        parent = self._steps.get(step_id) or self._run
        span = self._start(f"attempt {number}", parent, ns(event.ts), attributes, role=role)
        self._attempts[owner] = span

    def _attempt_finished(self, event: Event) -> None:
        span = self._attempts.pop(owner_of(event), None)
        if span is None:
            return
        outcome = str(event.data.get("outcome"))
        span.set_attribute("planloom.outcome", outcome)
        if outcome != "ok":
            self._failed(span, outcome, event.data.get("error"), event.ts)
        span.end(end_time=ns(event.ts))

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
                timestamp=ns(event.ts),
            )


def follow(
    bus: EventBus,
    tracer: Tracer,
    *,
    server: tuple[str, int] | None = None,
    capture_content: bool = False,
) -> RunSpans:
    """Make the spans of the run publishing on `bus`, with what it redacts redacted.

    It subscribes as an ordinary subscriber, not a sink, and redacts only what it puts in
    spans (a few short texts per event, memoized by `Secrets.redact`) rather than having
    each event's data redacted whole, as a sink's is. `capture_content`: spans hold what
    was said too (see `RunSpans`).
    """
    spans = RunSpans(tracer, server=server, capture_content=capture_content)
    spans.follow(bus)
    return spans
