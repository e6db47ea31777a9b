"""A local OpenAI-compatible HTTP server playing a scripted LLM, for tests and benchmarks.

`FakeOpenAIServer` serves a `ScriptedModel` on 127.0.0.1 with the OpenAI chat
completions wire format, streamed (`stream: true`, server-sent events) or not, so tests
drive the real `openai` client over real HTTP, and can inject the failures real endpoints
have: 429 with `Retry-After`, 5xx, slow answers, bodies that are not JSON, truncated bodies,
dropped connections, and streams that stall or stop before their end.

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
import http.server
import json
import select
import socket
import sys
import threading
import time
import traceback
from collections import deque
from types import TracebackType
from typing import Any, cast

from pydantic import ValidationError

from engine.testing._fakellm_http import TrackingHTTPServer
from engine.testing._fakellm_model import (
    ChatReply,
    ChatRequest,
    ModelFunction,
    ScriptedModel,
    ToolCall,
)
from engine.testing._fakellm_wire import (
    CREATED,
    TRUNCATED,
    Fault,
    FaultKind,
    completion_body,
    error_body,
    probe_body,
    stream_chunks,
    tool_call_body,
)

__all__ = [
    "CREATED",
    "ChatReply",
    "ChatRequest",
    "FakeOpenAIServer",
    "Fault",
    "FaultKind",
    "ModelFunction",
    "ScriptedModel",
    "ToolCall",
]

_JOIN_TIMEOUT = 5.0
_IDLE_TIMEOUT = 60.0  # an idle keep-alive connection is dropped after this long


class FakeOpenAIServer:
    """An OpenAI-compatible chat completions endpoint on 127.0.0.1, run in its own thread.

    Serves `POST /v1/chat/completions` and `GET /v1/models` (listing the model names
    requested so far). Use it as a context manager, `with` or `async with` (it runs in
    threads, so it serves async clients too), and point a client at `base_url`.

    Each chat completion request is recorded, then checked in this order: the API key
    (401), `chat_status`, `json_schema` support (400), streaming support (400), the next
    injected fault, and finally the model. A request with `stream: true` is answered as
    server-sent events in OpenAI's chunk format (the content in pieces, tool calls
    by `index`, the finish chunk, the usage chunk when `stream_options.include_usage` asks
    for it, then `data: [DONE]`), in a chunked HTTP body.

    A one-token request (`max_tokens: 1`, the probe `planloom --preflight chat` sends
    before a run) is recorded in `probes` instead, checked for the key and `chat_status`
    only, and answered "ok" without the model or the fault queue, so probes do not shift
    scripted replies or consume injected faults.

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
        supports_streaming: False makes a request with `stream: true` a 400 naming
            `stream`, as a server that does not stream.
        stream_usage: False leaves the usage chunk out of streamed replies even when asked
            for, as servers that ignore `stream_options`.

    Attributes:
        model: the `ScriptedModel` answering requests.
        requests: every chat completion request received, faulted or not (probes aside).
        probes: every one-token probe request received.
        model_lists: how many `GET /models` requests were received (the default preflight).
        headers: the headers of each of those requests (lower-case names), same order.
        errors: exceptions the model function raised (each became an HTTP 500), and any
            bug in the fake itself.
        disconnects: how many streamed replies the client closed before their end (seen
            while a stream stalled, or as a write that failed).
        chunks_sent: how many chunks of streamed replies were sent (`[DONE]` aside), so a
            test can act once a stream has begun.
    """

    def __init__(
        self,
        model: ScriptedModel | ModelFunction,
        *,
        api_key: str | None = None,
        latency: float = 0.0,
        supports_json_schema: bool = True,
        chat_status: int | None = None,
        supports_streaming: bool = True,
        stream_usage: bool = True,
    ) -> None:
        self.model = model if isinstance(model, ScriptedModel) else ScriptedModel(model)
        self.api_key = api_key
        self.latency = latency
        self.supports_json_schema = supports_json_schema
        self.chat_status = chat_status
        self.supports_streaming = supports_streaming
        self.stream_usage = stream_usage
        self.disconnects = 0
        self.chunks_sent = 0
        self.requests: list[ChatRequest] = []
        self.probes: list[ChatRequest] = []
        self.model_lists = 0
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
                calls.append(tool_call_body(call, call.id or f"call_{self._tool_calls}"))
        return completion_body(request, number, reply, calls)


def _pauses(fault: Fault, number: int) -> bool:
    """Whether a streaming `fault` waits before chunk `number` (counted from 0)."""
    if fault.kind == "stall":
        return number == fault.after_chunks
    return fault.kind == "slow" and number > 0


class _HTTPServer(TrackingHTTPServer):
    """Serves one `FakeOpenAIServer`, keeping bugs in the fake where tests look."""

    fake: FakeOpenAIServer

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
            self._send(404, error_body(404, f"Unknown path {self.path}"))
            return
        with self.fake._lock:
            self.fake.model_lists += 1
        if not self.fake._authorized(headers):
            self._send(401, error_body(401))
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
            self._send(404, error_body(404, f"Unknown path {self.path}"))
            return
        try:
            request = ChatRequest.model_validate_json(raw)
        except ValidationError as exc:
            self._send(400, error_body(400, f"Invalid request body: {exc}"))
            return
        probe = (request.model_extra or {}).get("max_tokens") == 1
        with fake._lock:
            if probe:
                fake.probes.append(request)
            else:
                fake.requests.append(request)
                fake.headers.append(headers)
        if not fake._authorized(headers):
            self._send(401, error_body(401))
            return
        if fake.chat_status is not None:
            self._send(fake.chat_status, error_body(fake.chat_status))
            return
        if probe:
            self._send(200, probe_body(request))
            return
        if not fake.supports_json_schema and request.wants_json_schema() is not None:
            message = (
                "Invalid parameter: 'response_format' of type 'json_schema' is not supported "
                "with this model. Use {'type': 'json_object'} instead."
            )
            self._send(400, error_body(400, message, param="response_format"))
            return
        extra = request.model_extra or {}
        stream = extra.get("stream") is True
        if stream and not fake.supports_streaming:
            message = "Invalid parameter: 'stream' is not supported by this server."
            self._send(400, error_body(400, message, param="stream"))
            return
        fault = fake._next_fault()
        if fault is not None and fault.kind == "cut" and not stream:
            fault = Fault.truncated()
        if fault is not None and fault.kind not in ("delay", "stall", "cut", "slow"):
            self._play(fault)
            return
        if fault is not None and (fault.kind == "delay" or not stream):
            fake._wait(fault.seconds)
            fault = None
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
            self._send(500, error_body(500, f"the fake model raised {last}"))
            return
        request_id = {"x-request-id": f"req_{response['id'].split('-')[-1]}"}
        if not stream:
            self._send(200, response, request_id)
            return
        options = extra.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        usage = usage and fake.stream_usage
        self._stream(stream_chunks(response, include_usage=usage), request_id, fault)

    def _stream(
        self, chunks: list[dict[str, Any]], extra: dict[str, str], fault: Fault | None
    ) -> None:
        """Send `chunks` as server-sent events, playing a streaming `fault` on the way."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            for number, chunk in enumerate(chunks):
                if fault is not None and fault.kind == "cut" and number == fault.after_chunks:
                    if fault.close:
                        self.close_connection = True  # mid-body: the client sees it cut
                    else:
                        self.wfile.write(b"0\r\n\r\n")  # the body ends, the stream did not
                    return
                if fault is not None and _pauses(fault, number) and not self._pause(fault.seconds):
                    return
                self._event(json.dumps(chunk).encode())
                with self.fake._lock:
                    self.fake.chunks_sent += 1
            self._event(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self._disconnected()

    def _event(self, data: bytes) -> None:
        """One server-sent event, as one chunk of the HTTP body."""
        frame = b"data: " + data + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))

    def _pause(self, seconds: float) -> bool:
        """Wait `seconds` mid-stream; False (and the connection dropped) if the client
        disconnected meanwhile, or the server is closing."""
        fake = self.fake
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if fake._closing.is_set():
                self.close_connection = True
                return False
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
            if not readable:
                continue
            try:
                gone = not self.connection.recv(1, socket.MSG_PEEK)
            except OSError:
                gone = True
            if gone:
                self._disconnected()
                return False
            fake._closing.wait(min(left, 0.05))  # bytes from the client: keep waiting
        return True

    def _disconnected(self) -> None:
        self.close_connection = True
        with self.fake._lock:
            self.fake.disconnects += 1

    def _play(self, fault: Fault) -> None:
        if fault.kind == "status":
            body = fault.body
            payload = (
                error_body(fault.code, body) if body is None or isinstance(body, str) else body
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
            body = json.dumps(TRUNCATED).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
        else:  # disconnect: the request was read; close without a status line
            self.close_connection = True
