"""The fake endpoint's HTTP side: one handler per connection, speaking the OpenAI chat
completions wire format (streamed or not) and playing the faults queued."""

from __future__ import annotations

import http.server
import json
import select
import socket
import sys
import time
import traceback
from typing import Any, cast

from pydantic import ValidationError

from engine.testing._fakellm_http import TrackingHTTPServer
from engine.testing._fakellm_model import (
    ChatRequest,
)
from engine.testing._fakellm_state import FakeEndpoint
from engine.testing._fakellm_wire import (
    CREATED,
    TRUNCATED,
    Fault,
    error_body,
    probe_body,
    stream_chunks,
)

_IDLE_TIMEOUT = 60.0  # an idle keep-alive connection is dropped after this long


def _pauses(fault: Fault, number: int) -> bool:
    """Whether a streaming `fault` waits before chunk `number` (counted from 0)."""
    if fault.kind == "stall":
        return number == fault.after_chunks
    return fault.kind == "slow" and number > 0


class HTTPServer(TrackingHTTPServer):
    """Serves one fake endpoint, keeping bugs in the fake where tests look."""

    fake: FakeEndpoint

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, Exception) and not isinstance(exc, OSError):
            # a bug in the fake itself: keep it where tests look, not on stderr
            with self.fake.lock:
                self.fake.errors.append(exc)
        # an OSError is a client that went away mid-reply: expected (timeouts, faults)


class Handler(http.server.BaseHTTPRequestHandler):
    # Headers and body go out in two writes: without this, delayed ACKs add ~40 ms a call.
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server_version = "planloom-fake-openai/1"
    sys_version = ""
    timeout = _IDLE_TIMEOUT  # bounds reads on an idle keep-alive connection

    @property
    def fake(self) -> FakeEndpoint:
        return cast(HTTPServer, self.server).fake

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
        with self.fake.lock:
            self.fake.model_lists += 1
        if not self.fake.authorized(headers):
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
        with fake.lock:
            if probe:
                fake.probes.append(request)
            else:
                fake.requests.append(request)
                fake.headers.append(headers)
        if not fake.authorized(headers):
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
        fault = fake.next_fault()
        if fault is not None and fault.kind == "cut" and not stream:
            fault = Fault.truncated()
        if fault is not None and fault.kind not in ("delay", "stall", "cut", "slow"):
            self._play(fault)
            return
        if fault is not None and (fault.kind == "delay" or not stream):
            fake.wait(fault.seconds)
            fault = None
        fake.wait(fake.latency)
        if fake.closing.is_set():  # the server is closing under this request: drop it
            self.close_connection = True
            return
        try:
            response = fake.complete(request)
        except Exception as exc:
            with fake.lock:
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
                with self.fake.lock:
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
            if fake.closing.is_set():
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
            fake.closing.wait(min(left, 0.05))  # bytes from the client: keep waiting
        return True

    def _disconnected(self) -> None:
        self.close_connection = True
        with self.fake.lock:
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
