"""Spans of the calls an attempt makes: tools, models, gates and questions.

Tool calls are `execute_tool {action}` spans (INTERNAL), model calls `chat {model}` spans
(CLIENT), with the GenAI conventions' attributes; what was said (messages, arguments,
results) only when the trace captures content (`engine.tracing._content`).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import Span, SpanKind

from engine.events import Event
from engine.tracing._book import PROVIDER, Attributes, SpanBook, ns, owner_of
from engine.tracing._content import input_messages, output_messages, tool_value


class CallSpans(SpanBook):
    """Tool calls, model calls, gate decisions and answers, as spans and span events."""

    # -- tool calls ----------------------------------------------------------------------

    def _tool_attributes(self, event: Event, action: str) -> Attributes:
        data, owner = event.data, owner_of(event)
        return self._attributes(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": action,
                "gen_ai.tool.type": "function",  # run by planloom, where the agent runs
                "gen_ai.tool.call.id": data.get("tool_call_id"),
                "planloom.step.id": owner[0],
                "planloom.item": owner[1],
                "planloom.attempt": owner[2],
                "planloom.tool.rule": data.get("rule"),
            }
        )

    def _said(self, span: Span, key: str, event: Event, part: str) -> None:
        """Put what the event's `content` holds under `part` in `key`, if content is
        captured (redacted, bounded, JSON)."""
        content = event.data.get("content")
        if self.capture_content and isinstance(content, dict) and part in content:
            span.set_attribute(key, self._utf8(tool_value(content[part], self._redact_data)))

    def _tool_called(self, event: Event) -> None:
        data = event.data
        number = data.get("call")
        if not isinstance(number, int):
            return
        action = str(data.get("action"))
        missing = data.get("missing_confinement")
        attributes = self._tool_attributes(event, action)
        attributes.update(
            self._attributes(
                {
                    "planloom.tool.call": number,
                    "planloom.tool.side_effects": data.get("side_effects"),
                    "planloom.tool.missing_confinement": (
                        ", ".join(sorted(missing)) if isinstance(missing, dict) else None
                    ),
                }
            )
        )
        owner = owner_of(event)
        span = self._start(
            f"execute_tool {action}", self._parent_of(owner), ns(event.ts), attributes, role="TOOL"
        )
        self._said(span, "gen_ai.tool.call.arguments", event, "arguments")
        self._tools[number] = (span, owner)

    def _tool_finished(self, event: Event) -> None:
        data = event.data
        number = data.get("call")
        held = self._tools.pop(number, None) if isinstance(number, int) else None
        end = ns(event.ts)
        if held is not None:
            span = held[0]
        else:  # refused before it was counted: a span of no length, saying why
            action = str(data.get("action"))
            attributes = self._tool_attributes(event, action)
            parent = self._parent_of(owner_of(event))
            span = self._start(f"execute_tool {action}", parent, end, attributes, role="TOOL")
        outcome = str(data.get("outcome"))
        span.set_attributes(
            self._attributes(
                {"planloom.tool.decision": data.get("decision"), "planloom.outcome": outcome}
            )
        )
        if outcome != "ok":
            self._failed(span, outcome, data.get("error"), event.ts)
        else:
            self._said(span, "gen_ai.tool.call.result", event, "result")
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
                "gen_ai.provider.name": PROVIDER,
                "gen_ai.request.model": model,
                "gen_ai.request.max_tokens": data.get("max_tokens"),
                "gen_ai.request.temperature": data.get("temperature"),
                "gen_ai.output.type": data.get("output_type"),
                "gen_ai.response.model": data.get("response_model"),
                "gen_ai.response.id": data.get("response_id"),
                "gen_ai.usage.input_tokens": data.get("prompt_tokens"),
                "gen_ai.usage.output_tokens": data.get("completion_tokens"),
                "planloom.llm.tool_calls": data.get("tool_calls"),
            }
        )
        if self.server is not None:
            attributes["server.address"], attributes["server.port"] = self.server
        owner = owner_of(event) if event.step_id is not None else None
        parent = self._tool_of(owner) or self._parent_of(owner)
        name = f"chat {model}" if model else "chat"
        span = self._start(name, parent, start, attributes, kind=SpanKind.CLIENT, role="LLM")
        finish = data.get("finish_reason")
        if isinstance(finish, str):
            span.set_attribute("gen_ai.response.finish_reasons", (self._clean(finish),))
        if self.capture_content:
            self._messages(span, data.get("content"), finish)
        outcome = data.get("outcome")
        if outcome is not None:
            self._failed(span, str(outcome), data.get("error"), event.ts)
        span.end(end_time=end)

    def _messages(self, span: Span, content: Any, finish: Any) -> None:
        """The messages sent, and the answer, as the conventions record them."""
        if not isinstance(content, dict):
            return
        redact = self._redact_data
        system, history, omitted = input_messages(content.get("messages"), redact)
        if system is not None:
            span.set_attribute("gen_ai.system_instructions", self._utf8(system))
        if history is not None:
            span.set_attribute("gen_ai.input.messages", self._utf8(history))
        if omitted:
            span.set_attribute("planloom.llm.input_messages_omitted", omitted)
        reason = finish if isinstance(finish, str) else None
        answer = output_messages(content.get("reply"), reason, redact)
        if answer is not None:
            span.set_attribute("gen_ai.output.messages", self._utf8(answer))

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
