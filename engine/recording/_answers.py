"""A cassette's model answers: what an `LLMClient` asks goes through here (its `Answers`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from engine._support.scope import PLANNER, current_scope, step_of
from engine.errors import BudgetExceeded, ReplayMismatch, StepError
from engine.llm import ChatResult
from engine.recording._mismatch import llm_miss
from engine.recording.cassette import (
    LLMExchange,
    RecordedError,
    RecordedReply,
    canonical_request,
    rebuild_error,
    record_error,
)
from engine.recording.cassette import digest as hash_of

if TYPE_CHECKING:
    from engine.recording._reel import Reel

__all__ = ["TapeAnswers"]


class TapeAnswers:
    """The model's answers: recorded ones served, live ones recorded (see `Reel`)."""

    def __init__(self, tape: Reel) -> None:
        self.tape = tape
        self._llm = {(e.step, e.key, e.ordinal): e for e in tape.recorded.llm}

    async def chat(
        self,
        request: dict[str, Any],
        live: Callable[[dict[str, Any]], Awaitable[ChatResult]],
        served: Callable[[ChatResult], None],
    ) -> ChatResult:
        """The answer to a model request: the recording, or a live call that is recorded.

        `served` is told about a replayed answer (to count it as the live call was).
        """
        scope = current_scope() or PLANNER
        canonical = self.tape.redact(canonical_request(request))
        key = hash_of(canonical)
        ordinal = self.tape.next_ordinal("llm", scope, key)
        if self.tape.replaying:
            entry = self.tape.take(self._llm, (scope, key, ordinal))
            if entry is not None:
                if entry.error is not None or entry.response is None:
                    served(ChatResult())  # the live call failed, and was counted all the same
                    raise rebuild_error(
                        entry.error or RecordedError(type="LLMError", message="no answer"),
                        step_of(scope),
                    )
                result = ChatResult(**entry.response.model_dump())
                served(result)
                return result
            if not self.tape.recording:
                raise self.tape.fail(
                    llm_miss(
                        self.tape.recorded,
                        self.tape.path,
                        self.tape.used,
                        scope,
                        canonical,
                        key,
                        ordinal,
                    ),
                    step_of(scope),
                )
        try:
            result = await live(request)
        except StepError as exc:
            if isinstance(exc, ReplayMismatch | BudgetExceeded):
                raise
            self.tape.cassette.llm.append(
                LLMExchange(
                    step=scope,
                    key=key,
                    ordinal=ordinal,
                    request=canonical,
                    error=record_error(exc, self.tape.secrets.redact),
                )
            )
            raise
        reply = RecordedReply.model_validate(
            self.tape.redact(
                {
                    "content": result.content,
                    "tool_calls": [call.model_dump() for call in result.tool_calls],
                    "prompt_tokens": result.prompt_tokens,
                    "completion_tokens": result.completion_tokens,
                    "finish_reason": result.finish_reason,
                }
            )
        )
        self.tape.cassette.llm.append(
            LLMExchange(step=scope, key=key, ordinal=ordinal, request=canonical, response=reply)
        )
        return result
