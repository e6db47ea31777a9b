"""The OpenAI chat completions wire format the fake speaks: bodies, errors and faults.

Everything is deterministic (ids are counters, `created` is fixed), so the same requests get
byte-identical responses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from engine._fakellm_model import ChatReply, ChatRequest, ToolCall

__all__ = [
    "CREATED",
    "TRUNCATED",
    "Fault",
    "FaultKind",
    "completion_body",
    "error_body",
    "probe_body",
    "tool_call_body",
]

CREATED = 1_700_000_000
"""The fixed `created` timestamp of every response (no clock, so replays are identical)."""


FaultKind = Literal["status", "delay", "malformed", "truncated", "disconnect"]


@dataclass(frozen=True)
class Fault:
    """A failure the server plays instead of (or, for `delay`, before) a normal reply.

    Build one with `Fault.status`, `Fault.delay`, `Fault.malformed`, `Fault.truncated` or
    `Fault.disconnect`, and queue it with `FakeOpenAIServer.inject`.
    """

    kind: FaultKind
    code: int = 200
    body: dict[str, Any] | str | bytes | None = None
    retry_after: float | str | None = None
    seconds: float = 0.0
    content_type: str = "application/json"

    @classmethod
    def status(
        cls,
        code: int,
        body: dict[str, Any] | str | bytes | None = None,
        retry_after: float | str | None = None,
    ) -> Fault:
        """Answer with HTTP `code` (429, 500, 401, ...) and an OpenAI-style error body.

        Args:
            code: the HTTP status.
            body: None for a default error; a str for the error's message; a dict sent as
                JSON; bytes sent as they are.
            retry_after: the `Retry-After` header's value, if any (e.g. 2 → "2").
        """
        return cls("status", code=code, body=body, retry_after=retry_after)

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Wait `seconds` before answering normally (to trigger client timeouts).

        The wait ends early when the server closes, so a long delay does not slow a test.
        """
        return cls("delay", seconds=seconds)

    @classmethod
    def malformed(
        cls,
        body: str | bytes = b'{"id": "chatcmpl-0", "object": "chat.comp',
        content_type: str = "application/json",
    ) -> Fault:
        """Answer 200 with `body`, by default a JSON document cut short.

        With a `content_type` that is not JSON (e.g. "text/html", as a proxy's error page),
        the openai client does not raise: `create()` returns the body as a `str`.
        """
        return cls("malformed", body=body, content_type=content_type)

    @classmethod
    def truncated(cls) -> Fault:
        """Answer 200, announce the whole body's length, send half of it and close."""
        return cls("truncated")

    @classmethod
    def disconnect(cls) -> Fault:
        """Read the request, then close the connection without any response."""
        return cls("disconnect")


_ERROR_TYPES: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Bad request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("permission_denied", None, "You are not allowed to use this model."),
    404: ("invalid_request_error", "not_found", "Not found."),
    408: ("timeout", None, "Request timed out."),
    409: ("conflict", None, "Conflict."),
    422: ("invalid_request_error", None, "Unprocessable entity."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached; please try again later."),
    500: ("server_error", None, "The server had an error while processing your request."),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded."),
}


def error_body(
    code: int, message: str | None = None, *, param: str | None = None
) -> dict[str, Any]:
    """An OpenAI-style error body for HTTP `code` (`message` replaces the usual one)."""
    kind, error_code, default = _ERROR_TYPES.get(code, ("server_error", None, "Error."))
    return {
        "error": {
            "message": message or default,
            "type": kind,
            "param": param,
            "code": error_code,
        }
    }


TRUNCATED: dict[str, Any] = {
    "id": "chatcmpl-truncated",
    "object": "chat.completion",
    "created": CREATED,
    "model": "fake-model",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "this reply is cut off " * 8},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
"""The body a `truncated` fault announces in full and sends half of."""


def probe_body(request: ChatRequest) -> dict[str, Any]:
    """The answer to a one-token probe: "ok", one token each way."""
    return {
        "id": "chatcmpl-probe",
        "object": "chat.completion",
        "created": CREATED,
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def tool_call_body(call: ToolCall, call_id: str) -> dict[str, Any]:
    """One tool call of a reply, as the response lists it."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments_json()},
    }


def completion_body(
    request: ChatRequest, number: int, reply: ChatReply, calls: list[dict[str, Any]]
) -> dict[str, Any]:
    """The response to chat completion `number`: `reply`, with its tool `calls`."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if calls:
        message["tool_calls"] = calls
    prompt = reply.prompt_tokens or 0
    completion = reply.completion_tokens or 0
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": CREATED,
        "model": request.model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
