"""The OpenAI chat completions wire format the fake speaks: bodies, errors and faults.

Everything is deterministic (ids are counters, `created` is fixed), so the same requests get
byte-identical responses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from engine.testing._fakellm_model import ChatReply, ChatRequest, ToolCall

__all__ = [
    "CREATED",
    "TRUNCATED",
    "Fault",
    "FaultKind",
    "completion_body",
    "error_body",
    "probe_body",
    "stream_chunks",
    "tool_call_body",
]

CREATED = 1_700_000_000
"""The fixed `created` timestamp of every response (no clock, so replays are identical)."""


FaultKind = Literal[
    "status", "delay", "malformed", "truncated", "disconnect", "stall", "cut", "slow"
]


@dataclass(frozen=True)
class Fault:
    """A failure the server plays instead of (or, for `delay`, before) a normal reply.

    Build one with `Fault.status`, `Fault.delay`, `Fault.malformed`, `Fault.truncated`,
    `Fault.disconnect`, or for a streamed reply `Fault.stall`, `Fault.cut` or `Fault.slow`,
    and queue it with `FakeOpenAIServer.inject`.
    """

    kind: FaultKind
    code: int = 200
    body: dict[str, Any] | str | bytes | None = None
    retry_after: float | str | None = None
    seconds: float = 0.0
    content_type: str = "application/json"
    after_chunks: int = 0
    close: bool = True

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

    @classmethod
    def stall(cls, after_chunks: int, seconds: float) -> Fault:
        """Stream `after_chunks` chunks of the reply, wait `seconds`, then stream the rest.

        The wait ends early when the client disconnects (counted in `disconnects`) or the
        server closes. A request that does not stream waits `seconds`, then is answered.
        """
        return cls("stall", after_chunks=after_chunks, seconds=seconds)

    @classmethod
    def cut(cls, after_chunks: int, *, close: bool = True) -> Fault:
        """Stream `after_chunks` chunks of the reply, then stop: no finish chunk, no usage,
        no `data: [DONE]`.

        `close` (the default) drops the connection mid-body, as a server that died;
        `close=False` ends the HTTP body properly there, as a proxy that gave up. A request
        that does not stream gets a `truncated` body instead.
        """
        return cls("cut", after_chunks=after_chunks, close=close)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """Stream the reply a chunk every `seconds` (no single read waits long, the whole
        answer does). The waits end early as `stall`'s do. A request that does not stream
        waits `seconds`, then is answered."""
        return cls("slow", seconds=seconds)


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
        "model": reply.model or request.model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


_PIECE = 16
"""Characters of content or arguments a streamed chunk carries at most (a few tokens)."""


def _pieces(text: str) -> list[str]:
    """`text` in consecutive pieces of `_PIECE` characters (one, empty, for "")."""
    return [text[i : i + _PIECE] for i in range(0, len(text), _PIECE)] or [""]


def stream_chunks(body: dict[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """The completion `body` as the chunks a streamed reply sends (before `data: [DONE]`),
    in OpenAI's format: the role, the content in pieces of a few tokens, each tool call's
    id and name then its arguments in pieces (by `index`), the finish chunk, and with
    `include_usage` (`stream_options: {include_usage: true}`) a last chunk of no choices
    and the usage.
    Joined back, they give exactly `body`'s message, finish reason and usage."""
    [choice] = body["choices"]
    message = choice["message"]
    usage = body["usage"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        frame: dict[str, Any] = {
            "id": body["id"],
            "object": "chat.completion.chunk",
            "created": body["created"],
            "model": body["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if include_usage:
            frame["usage"] = None
        return frame

    content = message.get("content")
    first: dict[str, Any] = {"role": "assistant"}
    chunks = []
    if content is None:
        chunks.append(chunk(first))
    else:
        pieces = _pieces(content)
        chunks.append(chunk({**first, "content": pieces[0]}))
        chunks.extend(chunk({"content": piece}) for piece in pieces[1:])
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        named = {"name": function["name"], "arguments": ""}
        head = {"index": index, "id": call["id"], "type": "function", "function": named}
        chunks.append(chunk({"tool_calls": [head]}))
        chunks.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(function["arguments"])
            if piece
        )
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**chunk({}), "choices": [], "usage": usage})
    return chunks
