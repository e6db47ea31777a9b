"""What a fake OpenAI endpoint holds and does for each request: the scripted model, the
faults queued, what it was asked, and the completions it makes."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from engine.testing._fakellm_model import (
    ChatRequest,
    ModelFunction,
    ScriptedModel,
)
from engine.testing._fakellm_wire import (
    Fault,
    completion_body,
    tool_call_body,
)


class FakeEndpoint:
    """The state of a `FakeOpenAIServer` that its request handlers share (see there)."""

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
        self.lock = threading.Lock()
        self._completions = 0
        self._tool_calls = 0
        self.closing = threading.Event()

    def inject(self, *faults: Fault) -> None:
        """Queue faults; each chat completion request consumes one before normal replies."""
        with self.lock:
            self._faults.extend(faults)

    # -- request handling (called from handler threads) --------------------------------------

    def next_fault(self) -> Fault | None:
        with self.lock:
            return self._faults.popleft() if self._faults else None

    def authorized(self, headers: dict[str, str]) -> bool:
        return self.api_key is None or headers.get("authorization") == f"Bearer {self.api_key}"

    def wait(self, seconds: float) -> None:
        if seconds > 0:
            self.closing.wait(seconds)

    def complete(self, request: ChatRequest) -> dict[str, Any]:
        reply = self.model.reply(request)
        with self.lock:
            self._completions += 1
            number = self._completions
            calls = []
            for call in reply.tool_calls:
                self._tool_calls += 1
                calls.append(tool_call_body(call, call.id or f"call_{self._tool_calls}"))
        return completion_body(request, number, reply, calls)
