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
import threading
from types import TracebackType

from engine.testing._fakellm_handler import Handler, HTTPServer
from engine.testing._fakellm_model import (
    ChatReply,
    ChatRequest,
    ModelFunction,
    ScriptedModel,
    ToolCall,
)
from engine.testing._fakellm_state import FakeEndpoint
from engine.testing._fakellm_wire import (
    CREATED,
    Fault,
    FaultKind,
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


class FakeOpenAIServer(FakeEndpoint):
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

    _httpd: HTTPServer | None = None
    _thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        """Bind a free port on 127.0.0.1 and serve in a background thread."""
        if self._httpd is not None:
            raise RuntimeError("the fake OpenAI server is already running")
        self.closing.clear()
        httpd = HTTPServer(("127.0.0.1", 0), Handler)
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
        self.closing.set()
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
