"""A scripted model: the request it reads, the reply it gives, and the function playing it.

`ScriptedModel` wraps a plain Python function from the request to the reply (as pydantic-ai's
`FunctionModel` does). Token usage is estimated from the request's size, so the same
requests get the same replies.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["ChatReply", "ChatRequest", "ModelFunction", "ScriptedModel", "ToolCall"]


class ChatRequest(BaseModel):
    """The body of a `POST /v1/chat/completions` request (unknown fields are kept)."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    temperature: float | None = None
    parallel_tool_calls: bool | None = None

    def last_user_text(self) -> str:
        """The text of the last `user` message ("" when there is none)."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return _text_of(message.get("content"))
        return ""

    def tool_names(self) -> list[str]:
        """The names of the function tools offered, in order."""
        return [
            str(tool["function"]["name"])
            for tool in self.tools or []
            if isinstance(tool.get("function"), dict) and "name" in tool["function"]
        ]

    def tool_results(self) -> list[tuple[str, str]]:
        """The `role: tool` messages as `(tool_call_id, content)`, in order."""
        return [
            (str(message.get("tool_call_id", "")), _text_of(message.get("content")))
            for message in self.messages
            if message.get("role") == "tool"
        ]

    def wants_json_schema(self) -> dict[str, Any] | None:
        """The JSON Schema asked for by `response_format={"type": "json_schema", ...}`.

        Returns `response_format.json_schema.schema` (`{}` if absent), or None when the
        request does not ask for structured output with a schema.
        """
        fmt = self.response_format
        if not fmt or fmt.get("type") != "json_schema":
            return None
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return dict(schema) if isinstance(schema, dict) else {}


def _text_of(content: Any) -> str:
    """Message content as text: a string, or the `text` parts of a content-part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


@dataclass(frozen=True)
class ToolCall:
    """One tool call in a reply; `arguments` is a dict (sent as JSON) or a raw string.

    A raw string is sent as is, so a test can send arguments that are not valid JSON.
    `id` defaults to `call_<n>`, numbered by the server.
    """

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class ChatReply:
    """What the model answers. Token counts and `finish_reason` are derived when None.

    `finish_reason` defaults to "tool_calls" when there are tool calls, else "stop".
    `model` is the model the answer names (endpoints often name a dated version of the one
    asked for); the one asked for when None.
    """

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    model: str | None = None


ModelFunction = Callable[[ChatRequest], ChatReply | str | dict[str, Any]]
"""A model: from the request to a `ChatReply`, a `str` (the content) or a `dict` (sent as
JSON content, handy for structured output)."""


def _as_reply(value: object) -> ChatReply:
    if isinstance(value, ChatReply):
        return value
    if isinstance(value, str):
        return ChatReply(content=value)
    if isinstance(value, dict):
        return ChatReply(content=json.dumps(value))
    raise TypeError(
        f"a model function must return ChatReply, str or dict, not {type(value).__name__}"
    )


class ScriptedModel:
    """A model played by a Python function; records every request it answers in `calls`."""

    def __init__(self, fn: ModelFunction) -> None:
        self.fn = fn
        self.calls: list[ChatRequest] = []
        self._lock = threading.Lock()

    @classmethod
    def sequence(cls, *replies: ChatReply | str | dict[str, Any]) -> ScriptedModel:
        """A model that plays `replies` in order, one per request.

        One request more than there are replies fails with `AssertionError("the script ran
        out after N calls")`, which the server returns as an HTTP 500 with that message.
        """
        script = list(replies)
        lock = threading.Lock()
        played = 0

        def play(request: ChatRequest) -> ChatReply | str | dict[str, Any]:
            nonlocal played
            with lock:
                number = played
                played += 1
            if number >= len(script):
                raise AssertionError(
                    f"the script ran out after {len(script)} calls "
                    f"(request {number + 1} has no scripted reply)"
                )
            return script[number]

        return cls(play)

    def reply(self, request: ChatRequest) -> ChatReply:
        """Record `request`, ask the function, and fill in usage and `finish_reason`."""
        with self._lock:
            self.calls.append(request)
        reply = _as_reply(self.fn(request))
        prompt = reply.prompt_tokens
        if prompt is None:
            prompt = _estimate_tokens(
                json.dumps(request.messages + (request.tools or []), sort_keys=True)
            )
        completion = reply.completion_tokens
        if completion is None:
            text = (reply.content or "") + "".join(
                call.name + call.arguments_json() for call in reply.tool_calls
            )
            completion = _estimate_tokens(text)
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        return ChatReply(
            content=reply.content,
            tool_calls=list(reply.tool_calls),
            prompt_tokens=prompt,
            completion_tokens=completion,
            finish_reason=finish,
            model=reply.model,
        )


def _estimate_tokens(text: str) -> int:
    """About four characters a token, as OpenAI's rule of thumb; deterministic."""
    return math.ceil(len(text) / 4)
