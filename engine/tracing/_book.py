"""What the span builders share: the spans open, by what they stand for, and how text is
made fit for a span (redacted, bounded, encodable)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from engine.events import Event

FAILED_STEP = frozenset({"failed", "denied", "cancelled"})
FAILED_RUN = frozenset({"failed", "cancelled"})
TEXT_LIMIT = 4096  # an error quoted in a span: enough to read, bounded
PROVIDER = "openai"
"""`gen_ai.provider.name`: models are called through OpenAI's client and API, whichever
server answers (the conventions ask for the client's best knowledge; `server.address`
and `gen_ai.response.model` tell the rest)."""
KIND = "openinference.span.kind"
"""What OpenInference readers (Arize Phoenix) class a span by: CHAIN, AGENT, TOOL, LLM."""

Attributes = dict[str, str | bool | int | float]
Owner = tuple[str, int | None, int]
"""An attempt: its step, its `for_each` item (None for a whole step: an item's attempts are
numbered within the item) and its number."""


class SpanBook:
    """The open spans of a trace, and the helpers that put text and attributes in them."""

    def __init__(
        self,
        tracer: Tracer,
        *,
        server: tuple[str, int] | None = None,
        redact: Callable[[str], str] | None = None,
        capture_content: bool = False,
    ) -> None:
        self.tracer = tracer
        self.server = server
        self.capture_content = capture_content
        self._default_redact: Callable[[str], str] = redact or str
        self._redact = self._default_redact
        # What redacts JSON data (messages, arguments, results): the bus's redactor, which
        # also blanks values under credential-named keys; else each text redacted.
        self._redact_data: Callable[[Any], Any] = self._redact_texts
        self._session: Span | None = None
        self._planning: Span | None = None
        self._run: Span | None = None
        self._steps: dict[str, Span] = {}
        self._attempts: dict[Owner, Span] = {}
        # Tool calls in flight, by their number in the run, and by the attempt making them.
        self._tools: dict[int, tuple[Span, Owner | None]] = {}

    def _parent_of(self, owner: Owner | None) -> Span | None:
        """The innermost open span of an attempt: the attempt, else its step, else the run;
        without an attempt (the planner's model calls), the planning, the run or the
        session."""
        if owner is None:
            return self._planning or self._run or self._session
        return self._attempts.get(owner) or self._steps.get(owner[0]) or self._run

    def _tool_of(self, owner: Owner | None) -> Span | None:
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
            abandon(span, end)
        self._tools.clear()
        self._attempts.clear()
        self._steps.clear()
        self._planning = self._run = self._session = None

    def _clean(self, text: str) -> str:
        """`text` redacted, and encodable as UTF-8."""
        return self._utf8(self._redact(text))

    @staticmethod
    def _utf8(text: str) -> str:
        """`text` encodable as UTF-8 (a lone surrogate from a server's message would make
        the whole batch of spans unsendable)."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "replace").decode("utf-8")
        return text

    def _redact_texts(self, value: Any) -> Any:
        """JSON data with each text (keys too) redacted, for spans made without a bus."""
        if isinstance(value, str):
            return self._redact(value)
        if isinstance(value, dict):
            return {self._redact_texts(k): self._redact_texts(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._redact_texts(item) for item in value]
        return value

    def _start(
        self,
        name: str,
        parent: Span | None,
        at: int,
        attributes: Attributes,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        role: str = "CHAIN",
    ) -> Span:
        """A span named `name` (redacted) under `parent`, of `kind`, classed as `role` for
        OpenInference readers."""
        return self.tracer.start_span(
            self._name(name),
            context=self._context(parent),
            kind=kind,
            start_time=at,
            attributes={**attributes, KIND: role},
        )

    def _name(self, name: str) -> str:
        return self._clean(name)

    def _text(self, value: Any) -> str | None:
        if value is None:
            return None
        text = self._clean(str(value))
        return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…"

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
        span.set_attribute("error.type", outcome)
        span.set_status(Status(StatusCode.ERROR, message))
        span.add_event(
            "exception",
            {"exception.type": outcome, "exception.message": message},
            timestamp=ns(at),
        )

    @staticmethod
    def _context(parent: Span | None) -> Any:
        return trace.set_span_in_context(parent) if parent is not None else None


def ns(seconds: float) -> int:
    return int(seconds * 1e9)


def owner_of(event: Event) -> Owner:
    """The attempt an event belongs to."""
    item = event.data.get("item")
    return event.step_id or "", item if isinstance(item, int) else None, event.attempt or 0


def end_root(span: Span, what: str, status: str, end: int) -> None:
    """End a run's or a session's span with how it ended: OK when it succeeded, ERROR when
    it failed or was cancelled (a rejected plan is neither)."""
    span.set_attribute("planloom.run.status", status)
    if status in FAILED_RUN:
        span.set_status(Status(StatusCode.ERROR, f"the {what} {status}"))
    elif status == "succeeded":
        span.set_status(Status(StatusCode.OK))
    span.end(end_time=end)


def abandon(span: Span, end: int) -> None:
    """End a span whose end was never reported (its task was cancelled)."""
    span.set_status(Status(StatusCode.ERROR, "cancelled"))
    span.set_attribute("planloom.outcome", "cancelled")
    span.end(end_time=end)
