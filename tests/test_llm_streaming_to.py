"""`engine.llm.streaming_to`: whoever asks reads a model's answer as it streams, through the
real `openai` client over HTTP to `FakeOpenAIServer` — pieces that join to the answer, a
new `begin()` for each attempt (a stream cut short and retried), nothing for an endpoint
that does not stream or answers a streamed request with plain JSON, nothing for an answer a
recording serves, nothing outside the block or in other tasks, no tool-call deltas, and a
reader that fails never fails the call: it is logged once and not fed again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import SecretStr
from structlog.testing import capture_logs

from engine.llm import Budget, LLMClient, LLMConfig, streaming_to
from engine.recording import OfflineModel, Tape
from engine.testing import ChatReply, FakeOpenAIServer, Fault, ScriptedModel, ToolCall

T = TypeVar("T")
USER = [{"role": "user", "content": "hello"}]
LONG = "The stock file is read, the orders are reserved, the report is written. " * 3


class Reader:
    """A content sink keeping what it was told."""

    def __init__(self) -> None:
        self.begins = 0
        self.pieces: list[str] = []

    def begin(self) -> None:
        self.begins += 1
        self.pieces = []

    def feed(self, text: str) -> None:
        self.pieces.append(text)


async def _no_wait(seconds: float) -> None:
    return None


def _chat_read_by(server: FakeOpenAIServer, reader: Reader) -> Any:
    """One chat call on `server` inside `streaming_to(reader)`."""

    async def body(client: LLMClient) -> Any:
        with streaming_to(reader):
            return await client.chat(USER)

    return _with_client(server, body)


def _with_client(server: FakeOpenAIServer, body: Callable[[LLMClient], Awaitable[T]]) -> T:
    async def scenario() -> T:
        config = LLMConfig(model="m", base_url=server.base_url, api_key=SecretStr("k"))
        client = LLMClient(config, budget=Budget(), sleep=_no_wait)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(scenario())


def test_the_pieces_join_to_the_answer_and_come_before_it_is_whole() -> None:
    seen_before_end: list[int] = []

    class Watching(Reader):
        def feed(self, text: str) -> None:
            super().feed(text)
            seen_before_end.append(len(self.pieces))

    watching = Watching()

    with FakeOpenAIServer(ScriptedModel.sequence(ChatReply(LONG))) as server:
        result = _chat_read_by(server, watching)
    assert result.content == LONG
    assert "".join(watching.pieces) == LONG
    assert watching.begins == 1
    assert len(watching.pieces) > 5  # in pieces, as they came
    assert seen_before_end == list(range(1, len(watching.pieces) + 1))


def test_a_stream_cut_short_and_retried_begins_again() -> None:
    reader = Reader()

    with FakeOpenAIServer(ScriptedModel.sequence(ChatReply(LONG), ChatReply(LONG))) as server:
        server.inject(Fault.cut(after_chunks=4))
        result = _chat_read_by(server, reader)
    assert result.content == LONG
    assert reader.begins == 2
    assert "".join(reader.pieces) == LONG  # what came after the last begin


def test_an_endpoint_that_does_not_stream_tells_the_reader_nothing() -> None:
    reader = Reader()

    with FakeOpenAIServer(
        ScriptedModel.sequence(ChatReply(LONG)), supports_streaming=False
    ) as server:
        result = _chat_read_by(server, reader)
    assert result.content == LONG
    assert (reader.begins, reader.pieces) == (0, [])


def test_calls_outside_the_block_or_in_another_task_are_not_read() -> None:
    reader = Reader()

    async def body(client: LLMClient) -> Any:
        other = asyncio.create_task(client.chat(USER))  # started before the block
        with streaming_to(reader):
            await asyncio.sleep(0)
            mine = await client.chat(USER)
        await other
        outside = await client.chat(USER)
        return mine, outside

    replies = [ChatReply(f"answer {n} " * 8) for n in range(3)]
    with FakeOpenAIServer(ScriptedModel.sequence(*replies)) as server:
        mine, _ = _with_client(server, body)
    assert reader.begins == 1
    assert "".join(reader.pieces) == mine.content


def test_a_reader_that_fails_does_not_fail_the_call() -> None:
    class Broken(Reader):
        def feed(self, text: str) -> None:
            super().feed(text)
            raise RuntimeError("a bug in the reader")

    broken = Broken()

    with FakeOpenAIServer(ScriptedModel.sequence(ChatReply(LONG))) as server:
        result = _chat_read_by(server, broken)
    assert result.content == LONG
    assert len(broken.pieces) == 1  # not fed again after it failed


def test_tool_calls_are_not_content_and_are_not_fed() -> None:
    reader = Reader()
    reply = ChatReply(
        "Reading the file first.",
        tool_calls=[ToolCall("fs.read", {"path": 'notes {"a": [1]}.md', "max_bytes": 100})],
    )

    async def body(client: LLMClient) -> Any:
        with streaming_to(reader):
            return await client.chat(USER)

    with FakeOpenAIServer(ScriptedModel.sequence(reply)) as server:
        result = _with_client(server, body)
    assert "".join(reader.pieces) == result.content == "Reading the file first."
    assert "max_bytes" in result.tool_calls[0].arguments  # the call came, and was not fed
    assert reader.begins == 1


def test_a_plain_answer_to_a_streamed_request_tells_the_reader_nothing() -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": LONG}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 20, "total_tokens": 23},
    }
    reader = Reader()

    async def body(client: LLMClient) -> Any:
        with streaming_to(reader):
            return await client.chat(USER)

    with FakeOpenAIServer(ScriptedModel.sequence(ChatReply("unused"))) as server:
        server.inject(Fault.malformed(json.dumps(completion)))  # a 200 of JSON, not events
        result = _with_client(server, body)
    assert result.content == LONG
    assert (reader.begins, reader.pieces) == (0, [])


def test_an_answer_served_by_a_recording_tells_the_reader_nothing(tmp_path: Path) -> None:
    cassette = tmp_path / "answers.yaml"
    config = LLMConfig(model="m", api_key=SecretStr("k"))
    recorded, served = Reader(), Reader()

    async def record(server: FakeOpenAIServer) -> str | None:
        tape = Tape(cassette, "all")
        live = config.model_copy(update={"base_url": server.base_url})
        client = LLMClient(live, budget=Budget(), sleep=_no_wait, answers=tape.answers)
        try:
            with streaming_to(recorded):
                result = await client.chat(USER)
        finally:
            await client.aclose()
        tape.save(plan=None, goal=None, base=None, model="m", inputs={})
        return result.content

    async def replay() -> str | None:
        tape = Tape(cassette, "none")
        client = LLMClient(config, budget=Budget(), answers=tape.answers, client=OfflineModel())
        with streaming_to(served):
            return (await client.chat(USER)).content

    with FakeOpenAIServer(ScriptedModel.sequence(ChatReply(LONG))) as server:
        assert asyncio.run(record(server)) == LONG
    assert "".join(recorded.pieces) == LONG  # recording, the call was live: it streamed
    assert asyncio.run(replay()) == LONG
    assert (served.begins, served.pieces) == (0, [])


def test_a_failing_reader_is_logged_once_per_call_and_begin_failing_too() -> None:
    class Broken(Reader):
        def feed(self, text: str) -> None:
            super().feed(text)
            raise RuntimeError("a bug in the reader")

    class NoBegin(Reader):
        def begin(self) -> None:
            super().begin()
            raise ValueError("cannot begin")

    broken, no_begin = Broken(), NoBegin()

    async def body(client: LLMClient) -> Any:
        with streaming_to(broken):
            first = await client.chat(USER)
        with streaming_to(no_begin):
            second = await client.chat(USER)
        return first, second

    with (
        capture_logs() as logs,
        FakeOpenAIServer(ScriptedModel.sequence(ChatReply(LONG), ChatReply(LONG))) as server,
    ):
        first, second = _with_client(server, body)
    assert first.content == second.content == LONG
    assert len(broken.pieces) == 1
    assert (no_begin.begins, no_begin.pieces) == (1, [])
    failures = [entry for entry in logs if entry["event"] == "content_sink.failed"]
    assert [entry["error"] for entry in failures] == [
        "RuntimeError('a bug in the reader')",
        "ValueError('cannot begin')",
    ]
