"""A model client's calls published as events: `llm.called` (answered or failed for good),
`llm.waiting` (a wait before a retry) and `llm.streaming` (the tokens of an answer streamed
so far, a few times a second at most), each naming the step and attempt that made it,
and the `for_each` item, whose attempts are numbered within it (none for the planner). The
executor and the session's planning both publish through it.

`llm.called` says what was asked (model, `max_tokens`, temperature, whether JSON was asked
for) and how it was answered (tokens, the model that answered, the completion's id, the
finish reason), never what was said. The messages sent and the answer are added, under
`content`, only when the bus asks for them (`EventBus.content`: traces that capture
message content); sinks never see them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine._support.scope import current_attempt, current_item, current_scope, step_of
from engine.errors import PlanloomError
from engine.events import EventBus
from engine.llm import ChatResult, LLMClient

__all__ = ["ModelCallEvents", "caller"]

Spend = Callable[[str, int, int], None]
"""Counts a step's model call: its id, prompt tokens, completion tokens."""


def caller() -> tuple[str | None, int | None]:
    """The step and attempt the running code belongs to (none for the planner)."""
    scope = current_scope()
    step_id = step_of(scope) if scope is not None else None
    return step_id, current_attempt() if step_id is not None else None


@dataclass(frozen=True, slots=True)
class ModelCallEvents:
    """Publishes `client`'s calls on `events` (and counts each step's with `spend`)."""

    client: LLMClient
    events: EventBus
    spend: Spend | None = None

    def install(self) -> None:
        """Make this the client's hooks (until something else installs its own)."""
        self.client.on_call = self.called
        self.client.on_fail = self.failed
        self.client.on_wait = self.waiting
        self.client.on_progress = self.streaming

    def called(self, result: ChatResult, request: dict[str, Any]) -> None:
        step_id, attempt = caller()
        if step_id is not None and self.spend is not None:
            self.spend(step_id, result.prompt_tokens, result.completion_tokens)
        asked = _asked(request)
        if self.events.content:
            calls = [call.model_dump() for call in result.tool_calls]
            reply = {"content": result.content, "tool_calls": calls}
            asked["content"] = {"messages": request.get("messages"), "reply": reply}
        self.events.emit(
            "llm.called",
            step_id,
            attempt,
            item=current_item(),
            model=self.client.config.model,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            latency=round(result.latency, 4),
            tool_calls=len(result.tool_calls),
            response_model=result.model,
            response_id=result.response_id,
            finish_reason=result.finish_reason,
            **asked,
        )

    def failed(self, error: PlanloomError, seconds: float, request: dict[str, Any]) -> None:
        step_id, attempt = caller()
        if step_id is not None and self.spend is not None:
            self.spend(step_id, 0, 0)
        asked = _asked(request)
        if self.events.content:
            asked["content"] = {"messages": request.get("messages")}
        self.events.emit(
            "llm.called",
            step_id,
            attempt,
            item=current_item(),
            model=self.client.config.model,
            latency=round(seconds, 4),
            outcome=type(error).__name__,
            error=str(getattr(error, "message", error)),
            **asked,
        )

    def waiting(self, seconds: float, why: str) -> None:
        step_id, attempt = caller()
        self.events.emit(
            "llm.waiting",
            step_id,
            attempt,
            item=current_item(),
            wait=round(seconds, 3),
            reason=why,
        )

    def streaming(self, tokens: int) -> None:
        step_id, attempt = caller()
        self.events.emit("llm.streaming", step_id, attempt, item=current_item(), tokens=tokens)


def _asked(request: dict[str, Any]) -> dict[str, Any]:
    """What a request asked for besides its messages: the bound on the answer's length (by
    either of its names), the temperature, and `json` when it asked for a JSON answer."""
    return {
        "max_tokens": request.get("max_tokens", request.get("max_completion_tokens")),
        "temperature": request.get("temperature"),
        "output_type": "json" if request.get("response_format") is not None else None,
    }
