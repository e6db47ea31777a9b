"""What a model call gives and how it fails: the answer (`ChatResult`), where answers come
from (`Answers`), the errors, and the estimate of a prompt's size in tokens."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, get_args

from pydantic import BaseModel

from engine.errors import ConfigurationError, StepFailed
from engine.model import StructuredOutput


class LLMError(StepFailed):
    """A model call failed for good (after retries), or its answer was unusable.

    `status` is the HTTP status the endpoint answered with, when it answered one.
    """

    status: int | None = None  # (also what an error rebuilt from a recording starts with)

    def __init__(self, message: str, *, status: int | None = None, **where: Any) -> None:
        super().__init__(message, **where)
        self.status = status


class ModelCallCancelled(StepFailed):
    """A model call cut off before it answered: it was made, and counts."""


CHARS_PER_TOKEN = 3.0
"""What `estimate_tokens` takes a token to be: fewer characters than English prose's four,
as JSON, code and paths are; an estimate that errs towards not fitting."""


def estimate_tokens(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> int:
    """About how many tokens `messages` and `tools` take in a prompt (no tokenizer: the
    endpoint's is unknown): their JSON's characters over CHARS_PER_TOKEN, and a few a
    message for its role and separators."""
    text = json.dumps([messages, tools or []], ensure_ascii=False, default=str)
    return int(len(text) / CHARS_PER_TOKEN) + 4 * len(messages)


class PromptTooLong(ConfigurationError):
    """A request estimated not to fit the model's context window with its `max_tokens`."""

    def __init__(self, tokens: int, max_tokens: int, window: int) -> None:
        super().__init__(
            f"the request takes about {tokens} tokens, and with max_tokens {max_tokens} it "
            f"does not fit the model's context window of {window} (llm: context_window, "
            "--llm-context or PLANLOOM_LLM_CONTEXT): grant fewer tools, lower max_tokens, "
            "or use a model with a larger context"
        )
        self.tokens = tokens
        self.window = window


class NoJSON(LLMError):
    """The model answered, but its answer is not one usable JSON value.

    Attributes:
        rule: `bad-json` (not exactly one complete JSON value), `cut-off` (the answer
            stopped at `max_tokens`), or `too-deep` (the JSON nests deeper than `MAX_DEPTH`).
    """

    rule = "bad-json"

    def __init__(self, message: str, *, rule: str = "bad-json") -> None:
        super().__init__(message)
        self.rule = rule


class NotACompletion(Exception):
    """The endpoint answered 200 with something that is not a chat completion."""


class CutShort(Exception):
    """A streamed answer ended before its finish chunk (the connection or body ended)."""


class TimedOut(Exception):
    """A call ran past the configured `timeout`, counted over the whole call."""


class ToolCallRequest(BaseModel):
    """A tool call the model asked for; `arguments` is its raw JSON text."""

    id: str
    name: str
    arguments: str


class ChatResult(BaseModel):
    """One model answer."""

    content: str | None = None
    tool_calls: list[ToolCallRequest] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: float = 0.0
    # Why the answer ended ("stop", "length", "tool_calls"...); None when not said (and in
    # cassettes and journals written before it was kept).
    finish_reason: str | None = None
    # The model the endpoint says answered (often a dated version of the one asked for) and
    # the completion's id: for traces; None when not said, and for answers served from a
    # cassette or a journal, which do not keep them.
    model: str | None = None
    response_id: str | None = None


JsonMode = StructuredOutput


JSON_MODES: tuple[JsonMode, ...] = get_args(StructuredOutput)
"""Structured output, tried in this order as endpoints refuse it: OpenAI's `json_schema`;
llama-cpp-python's own `{"type": "json_object", "schema": ...}` (it refuses the first with a
500, and enforces this one by a grammar); plain JSON mode; none (the prompt alone)."""


class Answers(Protocol):
    """Where a model's answers come from: the live endpoint (`LiveAnswers`), or a cassette
    that records them or serves them (`engine.recording.Tape`)."""

    async def chat(
        self,
        request: dict[str, Any],
        live: Callable[[dict[str, Any]], Awaitable[ChatResult]],
        served: Callable[[ChatResult], None],
    ) -> ChatResult:
        """The answer to `request`; `live(request)` asks the endpoint. An answer given
        without asking it is passed to `served`, to be counted as the live call was."""
        ...


class LiveAnswers:
    """Every answer comes from the endpoint."""

    async def chat(
        self,
        request: dict[str, Any],
        live: Callable[[dict[str, Any]], Awaitable[ChatResult]],
        served: Callable[[ChatResult], None],
    ) -> ChatResult:
        return await live(request)
