"""`engine.llm.streaming_to`: whoever asks reads a model's answer as it streams, through the
real `openai` client over HTTP to `FakeOpenAIServer` — pieces that join to the answer, a
new `begin()` for each attempt (a stream cut short and retried), nothing for an endpoint
that does not stream, nothing outside the block or in other tasks, and a reader that
fails never fails the call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import SecretStr

from engine.llm import Budget, LLMClient, LLMConfig, streaming_to
from engine.testing import ChatReply, FakeOpenAIServer, Fault, ScriptedModel

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
