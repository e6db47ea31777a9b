"""Spans of the calls an attempt makes: tools, models, gates and questions."""

from __future__ import annotations

from opentelemetry.trace import SpanKind

from engine.events import Event
from engine.tracing._book import SpanBook, ns, owner_of


class CallSpans(SpanBook):
    """Tool calls, model calls, gate decisions and answers, as spans and span events."""

    # -- tool calls ----------------------------------------------------------------------

    def _tool_called(self, event: Event) -> None:
        data = event.data
        number = data.get("call")
        if not isinstance(number, int):
            return
        owner = owner_of(event)
        action = str(data.get("action"))
        missing = data.get("missing_confinement")
        self._tools[number] = (
            self.tracer.start_span(
                self._name(f"execute_tool {action}"),
                context=self._context(self._parent_of(owner)),
                start_time=ns(event.ts),
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
        end = ns(event.ts)
        if held is not None:
            span = held[0]
        else:  # refused before it was counted: a span of no length, saying why
            action = str(data.get("action"))
            owner = owner_of(event)
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
        end = ns(event.ts)
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
        owner = owner_of(event) if event.step_id is not None else None
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
        owner = owner_of(event) if event.step_id is not None else None
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
                timestamp=ns(event.ts),
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
                timestamp=ns(event.ts),
            )

    def _human_answered(self, event: Event) -> None:
        span = self._steps.get(event.step_id or "")
        if span is not None:
            span.add_event("planloom.human.answered", timestamp=ns(event.ts))
