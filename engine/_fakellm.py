"""A scripted LLM and a local OpenAI-compatible HTTP server, for tests and benchmarks.

`ScriptedModel` wraps a plain Python function from the request to the reply (as pydantic-ai's
`FunctionModel` does). `FakeOpenAIServer` serves it on 127.0.0.1 with the OpenAI chat
completions wire format, so tests drive the real `openai` client over real HTTP, and can
inject the failures real endpoints have: 429 with `Retry-After`, 5xx, slow answers, bodies
that are not JSON, truncated bodies and dropped connections.

Everything is deterministic (ids are counters, `created` is fixed, token usage is estimated
from the request's size), so the same requests get byte-identical responses.

Example:
    ```python
    def model(request: ChatRequest) -> ChatReply | str:
        if "fs.read" in request.tool_names() and not request.tool_results():
            return ChatReply(tool_calls=[ToolCall("fs.read", {"path": "README.md"})])
        return "done"

    with FakeOpenAIServer(model) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        ...
    server.inject(Fault.status(429, retry_after=2))  # the next request is rate limited
    ```
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import math
import socket
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "ChatReply",
    "ChatRequest",
    "FakeOpenAIServer",
    "Fault",
    "ModelFunction",
    "ScriptedModel",
    "ToolCall",
]

CREATED = 1_700_000_000
"""The fixed `created` timestamp of every response (no clock, so replays are identical)."""

_JOIN_TIMEOUT = 5.0
_IDLE_TIMEOUT = 60.0  # an idle keep-alive connection is dropped after this long


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
    """

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


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
        )


def _estimate_tokens(text: str) -> int:
    """About four characters a token, as OpenAI's rule of thumb; deterministic."""
    return math.ceil(len(text) / 4)


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


def _error_body(
    code: int, message: str | None = None, *, param: str | None = None
) -> dict[str, Any]:
    kind, error_code, default = _ERROR_TYPES.get(code, ("server_error", None, "Error."))
    return {
        "error": {
            "message": message or default,
            "type": kind,
            "param": param,
            "code": error_code,
        }
    }


_TRUNCATED: dict[str, Any] = {
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


class FakeOpenAIServer:
    """An OpenAI-compatible chat completions endpoint on 127.0.0.1, run in its own thread.

    Serves `POST /v1/chat/completions` and `GET /v1/models` (listing the model names
    requested so far). Use it as a context manager, `with` or `async with` (it runs in
    threads, so it serves async clients too), and point a client at `base_url`.

    Each chat completion request is recorded, then checked in this order: the API key
    (401), `chat_status`, `json_schema` support (400), the next injected fault, and finally
    the model. A one-token request (`max_tokens: 1`, the probe `planloom` sends before a
    run) is recorded in `probes` instead, checked for the key and `chat_status` only, and
    answered "ok" without the model or the fault queue, so probes do not shift scripted
    replies or consume injected faults.

    Args:
        model: a `ScriptedModel`, or a function it wraps.
        api_key: when set, requests must carry `Authorization: Bearer <api_key>` (else 401).
        latency: seconds to wait before each chat completion reply (for benchmarks).
        supports_json_schema: False makes `response_format` type `json_schema` a 400, as
            older or non-OpenAI servers do (`json_object` is still accepted).
        chat_status: when set (e.g. 401), every chat completion, probes included, is
            answered with this HTTP status and an OpenAI-style error, while `GET /models`
            still answers 200: an endpoint that lists models to anyone and refuses the key
            only on the chat endpoint.

    Attributes:
        model: the `ScriptedModel` answering requests.
        requests: every chat completion request received, faulted or not (probes aside).
        probes: every one-token probe request received.
        headers: the headers of each of those requests (lower-case names), same order.
        errors: exceptions the model function raised (each became an HTTP 500), and any
            bug in the fake itself.
    """

    def __init__(
        self,
        model: ScriptedModel | ModelFunction,
        *,
        api_key: str | None = None,
        latency: float = 0.0,
        supports_json_schema: bool = True,
        chat_status: int | None = None,
    ) -> None:
        self.model = model if isinstance(model, ScriptedModel) else ScriptedModel(model)
        self.api_key = api_key
        self.latency = latency
        self.supports_json_schema = supports_json_schema
        self.chat_status = chat_status
        self.requests: list[ChatRequest] = []
        self.probes: list[ChatRequest] = []
        self.headers: list[dict[str, str]] = []
        self.errors: list[Exception] = []
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._completions = 0
        self._tool_calls = 0
        self._closing = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        """Bind a free port on 127.0.0.1 and serve in a background thread."""
        if self._httpd is not None:
            raise RuntimeError("the fake OpenAI server is already running")
        self._closing.clear()
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-openai:{httpd.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, end in-flight requests (delays end early), and free the port."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self._closing.set()
        httpd.shutdown()
        thread.join(_JOIN_TIMEOUT)
        httpd.end_connections(_JOIN_TIMEOUT)
        httpd.server_close()
        self._httpd = self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> FakeOpenAIServer:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # joining threads blocks; keep the event loop free meanwhile
        await asyncio.to_thread(self.close)

    # -- configuration -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the fake OpenAI server is not running; use it in a `with`")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`, the `base_url` to give the openai client."""
        return f"http://127.0.0.1:{self.port}/v1"

    def inject(self, *faults: Fault) -> None:
        """Queue faults; each chat completion request consumes one before normal replies."""
        with self._lock:
            self._faults.extend(faults)

    # -- request handling (called from handler threads) --------------------------------------

    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _authorized(self, headers: dict[str, str]) -> bool:
        return self.api_key is None or headers.get("authorization") == f"Bearer {self.api_key}"

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._closing.wait(seconds)

    def _complete(self, request: ChatRequest) -> dict[str, Any]:
        reply = self.model.reply(request)
        with self._lock:
            self._completions += 1
            number = self._completions
            calls = []
            for call in reply.tool_calls:
                self._tool_calls += 1
                calls.append(
                    {
                        "id": call.id or f"call_{self._tool_calls}",
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments_json()},
                    }
                )
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


def _probe_reply(request: ChatRequest) -> dict[str, Any]:
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


class _HTTPServer(http.server.ThreadingHTTPServer):
    """Tracks its connection threads so `close` can end and join them all."""

    daemon_threads = True
    fake: FakeOpenAIServer

    def __init__(self, address: tuple[str, int], handler: type[_Handler]) -> None:
        super().__init__(address, handler)
        self._live: dict[threading.Thread, socket.socket] = {}
        self._live_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        # registered here, in the serving thread, so after `shutdown()` every thread is known
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name=f"fake-openai-conn:{client_address[1]}",
            daemon=True,
        )
        with self._live_lock:
            self._live[thread] = request
        thread.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._live_lock:
                self._live.pop(threading.current_thread(), None)

    def end_connections(self, timeout: float) -> None:
        with self._live_lock:
            live = dict(self._live)
        for sock in live.values():
            # wakes a handler blocked reading an idle keep-alive connection
            with contextlib.suppress(OSError):  # already closed by its handler
                sock.shutdown(socket.SHUT_RDWR)
        for thread in live:
            thread.join(timeout)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, Exception) and not isinstance(exc, OSError):
            # a bug in the fake itself: keep it where tests look, not on stderr
            with self.fake._lock:
                self.fake.errors.append(exc)
        # an OSError is a client that went away mid-reply: expected (timeouts, faults)


class _Handler(http.server.BaseHTTPRequestHandler):
    # Headers and body go out in two writes: without this, delayed ACKs add ~40 ms a call.
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server_version = "planloom-fake-openai/1"
    sys_version = ""
    timeout = _IDLE_TIMEOUT  # bounds reads on an idle keep-alive connection

    @property
    def fake(self) -> FakeOpenAIServer:
        return cast(_HTTPServer, self.server).fake

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests assert on recorded requests, not on logs

    def _headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(
        self,
        status: int,
        payload: dict[str, Any] | bytes,
        extra: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        headers = self._headers()
        if self.path.rstrip("/") != "/v1/models":
            self._send(404, _error_body(404, f"Unknown path {self.path}"))
            return
        if not self.fake._authorized(headers):
            self._send(401, _error_body(401))
            return
        models = sorted({request.model for request in self.fake.requests} or {"fake-model"})
        data = [
            {"id": name, "object": "model", "created": CREATED, "owned_by": "planloom"}
            for name in models
        ]
        self._send(200, {"object": "list", "data": data})

    def do_POST(self) -> None:
        fake = self.fake
        headers = self._headers()
        raw = self._read_body()
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, _error_body(404, f"Unknown path {self.path}"))
            return
        try:
            request = ChatRequest.model_validate_json(raw)
        except ValidationError as exc:
            self._send(400, _error_body(400, f"Invalid request body: {exc}"))
            return
        probe = (request.model_extra or {}).get("max_tokens") == 1
        with fake._lock:
            if probe:
                fake.probes.append(request)
            else:
                fake.requests.append(request)
                fake.headers.append(headers)
        if not fake._authorized(headers):
            self._send(401, _error_body(401))
            return
        if fake.chat_status is not None:
            self._send(fake.chat_status, _error_body(fake.chat_status))
            return
        if probe:
            self._send(200, _probe_reply(request))
            return
        if not fake.supports_json_schema and request.wants_json_schema() is not None:
            message = (
                "Invalid parameter: 'response_format' of type 'json_schema' is not supported "
                "with this model. Use {'type': 'json_object'} instead."
            )
            self._send(400, _error_body(400, message, param="response_format"))
            return
        fault = fake._next_fault()
        if fault is not None and fault.kind != "delay":
            self._play(fault)
            return
        fake._wait(fault.seconds if fault is not None else 0.0)
        fake._wait(fake.latency)
        if fake._closing.is_set():  # the server is closing under this request: drop it
            self.close_connection = True
            return
        try:
            response = fake._complete(request)
        except Exception as exc:
            with fake._lock:
                fake.errors.append(exc)
            last = traceback.format_exception_only(exc)[-1].strip()
            self._send(500, _error_body(500, f"the fake model raised {last}"))
            return
        self._send(200, response, {"x-request-id": f"req_{response['id'].split('-')[-1]}"})

    def _play(self, fault: Fault) -> None:
        if fault.kind == "status":
            body = fault.body
            payload = (
                _error_body(fault.code, body) if body is None or isinstance(body, str) else body
            )
            extra = {}
            if fault.retry_after is not None:
                value = fault.retry_after
                integral = isinstance(value, int | float) and float(value).is_integer()
                extra["Retry-After"] = str(int(value)) if integral else str(value)
            self._send(fault.code, payload, extra)
        elif fault.kind == "malformed":
            raw = fault.body if isinstance(fault.body, bytes) else str(fault.body).encode()
            self._send(200, raw, content_type=fault.content_type)
        elif fault.kind == "truncated":
            body = json.dumps(_TRUNCATED).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
        else:  # disconnect: the request was read; close without a status line
            self.close_connection = True
