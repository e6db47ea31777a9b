"""A streamed answer assembled into the completion a plain call gives, and handed, as it
comes, to whoever asked to read it (`streaming_to`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.llm._text import said
from engine.llm._types import (
    CutShort,
)


@dataclass
class Assembly:
    """A streamed answer as its chunks come: the content, each tool call joined by its
    `index`, the finish reason, the usage of the last chunk, and the chunks that carried
    content or a call."""

    content: list[str] | None = None
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: str | None = None
    usage: Any = None
    chunks: int = 0
    id: str | None = None
    model: str | None = None

    def add(self, chunk: Any) -> str | None:
        """Take in one chunk; returns the content it carried, if any."""
        added = None
        self.usage = getattr(chunk, "usage", None) or self.usage
        self.id = self.id or said(getattr(chunk, "id", None))
        self.model = self.model or said(getattr(chunk, "model", None))
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue
            text = getattr(choice.delta, "content", None)
            deltas = getattr(choice.delta, "tool_calls", None) or []
            if text is not None:
                self.content = [*(self.content or []), text]
                added = text
            for position, call in enumerate(deltas):
                _add_call(self.calls, call, position)
            self.chunks += 1 if text or deltas else 0
            self.finish = choice.finish_reason or self.finish
        return added

    def completion(self) -> Any:
        """The completion the chunks add up to.

        Raises:
            CutShort: no chunk gave the finish reason: the stream stopped before its end.
        """
        from openai.types.chat import ChatCompletion

        if self.finish is None:
            raise CutShort(f"the answer stream stopped before its end, after {self.chunks} chunks")
        message: dict[str, Any] = {"role": "assistant", "content": _joined(self.content)}
        if self.calls:
            message["tool_calls"] = [
                {"id": call["id"], "type": "function", "function": call["function"]}
                for _, call in sorted(self.calls.items())
            ]
        usage = self.usage
        if usage is None:
            # No usage chunk (llama-cpp-python sends none): what was generated is counted a
            # token a chunk, as such servers stream, so the run's token budget still holds;
            # the prompt's size is not known (0).
            usage = {
                "prompt_tokens": 0,
                "completion_tokens": self.chunks,
                "total_tokens": self.chunks,
            }
        return ChatCompletion.construct(
            id=self.id,
            model=self.model,
            choices=[{"index": 0, "message": message, "finish_reason": self.finish}],
            usage=usage.model_dump() if hasattr(usage, "model_dump") else usage,
        )


def _add_call(calls: dict[int, dict[str, Any]], delta: Any, position: int) -> None:
    """Add one tool call delta to the calls joined so far, by its `index` (its place in
    the delta when it has none): the first id, the name and the arguments joined."""
    index = getattr(delta, "index", None)
    call = calls.setdefault(
        index if isinstance(index, int) else position,
        {"id": "", "function": {"name": "", "arguments": ""}},
    )
    call["id"] = call["id"] or (getattr(delta, "id", None) or "")
    function = getattr(delta, "function", None)
    name = getattr(function, "name", None) or ""
    if name and name != call["function"]["name"]:  # some servers repeat the whole name
        call["function"]["name"] += name
    call["function"]["arguments"] += getattr(function, "arguments", None) or ""


def _joined(parts: list[str] | None) -> str | None:
    """The content a stream's pieces make: None when no chunk carried any (tool calls)."""
    return None if parts is None else "".join(parts)


class ContentSink(Protocol):
    """Reads a model's answer as it streams (see `streaming_to`)."""

    def begin(self) -> None:
        """An answer starts (again, after a stream cut short and retried): forget what
        came before."""
        ...

    def feed(self, text: str) -> None:
        """The next piece of the answer's content, in order."""
        ...


_sink: ContextVar[ContentSink | None] = ContextVar("planloom_content_sink", default=None)


@contextlib.contextmanager
def streaming_to(sink: ContentSink) -> Iterator[None]:
    """Within this block (this task, and tasks it starts), the content of each model answer
    that streams is handed to `sink` as it arrives: `begin()` as each attempt's stream
    starts, then `feed(piece)`. An answer that does not stream (the endpoint refused it)
    or is not asked for (served by a recording or a journal) is not handed over: the
    caller gets it whole, as always. Tool calls are not content."""
    token = _sink.set(sink)
    try:
        yield
    finally:
        _sink.reset(token)


def begin_feed() -> Callable[[str], None] | None:
    """For a stream that starts: the sink's `feed` (told `begin()` first), or None when
    nobody reads it. A sink that fails is logged and not fed again during this answer:
    it must not break the call."""
    sink = _sink.get()
    if sink is None or not _guarded(sink.begin):
        return None
    broken = False

    def feed(text: str) -> None:
        nonlocal broken
        if not broken:
            broken = not _guarded(sink.feed, text)

    return feed


def _guarded(method: Callable[..., None], *args: Any) -> bool:
    try:
        method(*args)
    except Exception as exc:  # a reader's bug must not fail the model call
        import structlog  # (~50 ms: only this rare path pays for it)

        structlog.get_logger("planloom").warning("content_sink.failed", error=repr(exc))
        return False
    return True
