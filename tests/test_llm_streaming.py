"""Model calls stream (the README's "Models").

- Calls ask `stream: true` with usage included, and the chunks add up to the very answer a
  plain completion gives: same `ChatResult`, same cassette.
- An endpoint that refuses streaming costs one request more, once a run, with no backoff;
  a 200 that is a plain completion is taken as it is.
- `timeout` bounds the whole call, not each read; a timed-out or cancelled call (Ctrl-C)
  closes its stream, so the server sees the client go (what stops llama.cpp generating).
- A stream cut before its end is a broken answer, retried.
- While an answer streams, its tokens so far are `llm.streaming` events (throttled), which
  the live view shows beside the step.

The real `LLMClient` (the real `openai` client) and the real `planloom` console script, over
127.0.0.1 to a `FakeOpenAIServer` in this process.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from _procs import PLANLOOM, env, planloom, until
from pydantic import SecretStr
from rich.console import Console

from engine.app.console import LiveProgress
from engine.errors import StepTimeout
from engine.events import Event
from engine.llm import PROGRESS_EVERY, Budget, ChatResult, LLMClient, LLMConfig, LLMError
from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, Fault, ScriptedModel, ToolCall

T = TypeVar("T")

USER = [{"role": "user", "content": "hello"}]
LONG = "The stock file is read, the orders are reserved, the report is written. " * 3


class Sleeps:
    """The client's retry sleep: records each delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def with_client(
    server: FakeOpenAIServer,
    body: Callable[[LLMClient], Awaitable[T]],
    *,
    sleep: Sleeps | None = None,
    **config: Any,
) -> T:
    """Run `body(client)` with a real client on `server` (retries never wait)."""

    async def scenario() -> T:
        settings = {"model": "m", "base_url": server.base_url, "api_key": SecretStr("k")}
        client = LLMClient(
            LLMConfig(**{**settings, **config}), budget=Budget(), sleep=sleep or Sleeps()
        )
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(scenario())


def answer(result: ChatResult) -> dict[str, Any]:
    """All of a result but its latency."""
    return result.model_dump(exclude={"latency"})


# -- the same answer, streamed or not --------------------------------------------------------

REPLIES = {
    "content": ChatReply(LONG, prompt_tokens=12, completion_tokens=40),
    "tool calls": ChatReply(
        tool_calls=[
            ToolCall("fs__read", {"path": "data/notes.txt", "limit": 4000}, id="c1"),
            ToolCall("fs__list", {"path": "."}),
        ]
    ),
    "content and a tool call": ChatReply("Reading it.", tool_calls=[ToolCall("fs__read", "{}")]),
    "empty content": ChatReply(""),
    "cut at the length limit": ChatReply('{"n": 1', finish_reason="length"),
    "not JSON arguments": ChatReply(tool_calls=[ToolCall("f", '{"path": "a', id="x")]),
}


@pytest.mark.parametrize("reply", REPLIES.values(), ids=REPLIES.keys())
def test_a_streamed_answer_is_the_answer_a_plain_completion_gives(reply: ChatReply) -> None:
    results = []
    for streams in (True, False):
        with FakeOpenAIServer(lambda r: reply, supports_streaming=streams) as server:
            results.append(with_client(server, lambda c: c.chat(USER)))
            asked = [r.model_extra or {} for r in server.requests]
        if streams:
            assert [a.get("stream") for a in asked] == [True]
            assert asked[0]["stream_options"] == {"include_usage": True}
        else:  # refused once, then asked plainly
            assert [a.get("stream") for a in asked] == [True, None]
    streamed, plain = results
    assert answer(streamed) == answer(plain)
    assert streamed.prompt_tokens > 0  # the usage chunk was read


def test_the_answer_is_joined_from_many_chunks_by_index() -> None:
    with FakeOpenAIServer(lambda r: REPLIES["tool calls"]) as server:
        result = with_client(server, lambda c: c.chat(USER))
        sent = server.chunks_sent
    assert sent > 6  # the arguments came in pieces, each call's by its index
    assert [(c.id, c.name) for c in result.tool_calls] == [
        ("c1", "fs__read"),
        ("call_2", "fs__list"),
    ]
    assert json.loads(result.tool_calls[0].arguments) == {"path": "data/notes.txt", "limit": 4000}
    assert result.finish_reason == "tool_calls"
    assert result.content is None


def test_an_endpoint_that_streams_no_usage_counts_its_chunks_as_completion_tokens() -> None:
    """As llama-cpp-python streams: a token a chunk, no usage chunk. The run's token budget
    still counts what was generated; the prompt's size is not known."""
    answer = "a fine answer, long enough for several chunks of the stream"
    with FakeOpenAIServer(lambda r: answer, stream_usage=False) as server:

        async def once(client: LLMClient) -> tuple[ChatResult, Budget]:
            return await client.chat(USER), client.budget

        result, budget = with_client(server, once)
        sent = server.chunks_sent
    assert (result.content, result.finish_reason) == (answer, "stop")
    assert result.prompt_tokens == 0
    assert 1 < result.completion_tokens <= sent
    assert (budget.calls, budget.tokens) == (1, result.completion_tokens)


RECIPE = """\
version: 1
name: brief
llm: {model: scripted}
capabilities:
  fs: {root: data, read: true}
  llm: {}
steps:
  - id: summary
    tool: llm.complete
    params: {prompt: "Summarise the notes"}
  - id: research
    agent: {goal: "Find the risks in notes.txt", tools: [fs.read], max_iterations: 4}
    depends_on: [summary]
  - id: again
    tool: llm.complete
    params: {prompt: "Say it again"}
    depends_on: [research]
outputs:
  summary: ${{ steps.summary.output.text }}
  risks: ${{ steps.research.output }}
"""


def scripted(request: ChatRequest) -> ChatReply | str:
    if request.tools:
        results = request.tool_results()
        if not results:
            return ChatReply(tool_calls=[ToolCall("fs__read", {"path": "notes.txt"}, id="c1")])
        return f"risk: {results[-1][1].count('late')} late deliveries"
    return LONG


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("Supplier is late again.\n", encoding="utf-8")
    (tmp_path / "brief.yaml").write_text(RECIPE, encoding="utf-8")
    return tmp_path


@pytest.mark.slow
def test_streamed_or_not_a_run_records_the_same_cassette(project: Path) -> None:
    counts = []
    for streams, cassette in ((True, "streamed.yaml"), (False, "plain.yaml")):
        with FakeOpenAIServer(scripted, supports_streaming=streams) as server:
            done = planloom(
                "run", "brief.yaml", "--base-url", server.base_url, "--record", cassette,
                "--json", cwd=project,
            )  # fmt: skip
            counts.append(len(server.requests))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["usage"]["llm_calls"] == 4
    streamed = (project / "streamed.yaml").read_text(encoding="utf-8")
    assert streamed == (project / "plain.yaml").read_text(encoding="utf-8")
    assert "stream" not in streamed  # the assembled answers, not how they came
    # A server that does not stream: one refused request in the whole run, then none.
    assert counts == [4, 5]

    replayed = planloom("run", "brief.yaml", "--replay", "streamed.yaml", "--json", cwd=project)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["outputs"]["summary"] == LONG


# -- an endpoint that does not stream ----------------------------------------------------------


def test_a_refusal_to_stream_costs_one_request_once_and_no_wait() -> None:
    sleep = Sleeps()
    with FakeOpenAIServer(lambda r: "plain", supports_streaming=False) as server:

        async def three(client: LLMClient) -> tuple[list[ChatResult], Budget, bool]:
            results = [await client.chat(USER) for _ in range(3)]
            return results, client.budget, client.streams

        results, budget, streams = with_client(server, three, sleep=sleep)
        asked = [(r.model_extra or {}).get("stream") for r in server.requests]
    assert [r.content for r in results] == ["plain"] * 3
    assert asked == [True, None, None, None]
    assert budget.calls == 3  # the refused request is part of the first call
    assert sleep.delays == []
    assert streams is False


def test_calls_in_flight_when_streaming_is_refused_each_fall_back() -> None:
    with FakeOpenAIServer(lambda r: "plain", supports_streaming=False, latency=0.2) as server:

        async def together(client: LLMClient) -> list[str | None]:
            first = await asyncio.gather(*(client.chat(USER) for _ in range(3)))
            later = await client.chat(USER)
            return [r.content for r in [*first, later]]

        contents = with_client(server, together)
        asked = [(r.model_extra or {}).get("stream") for r in server.requests]
    assert contents == ["plain"] * 4
    assert asked.count(None) == 4  # each call answered once, plainly
    assert 1 <= asked.count(True) <= 3  # a refusal at most for each call already sent
    assert asked[-1] is None


@pytest.mark.parametrize(
    "message",
    ["Invalid parameter: 'stream' is not supported", "stream_options: extra fields not permitted"],
)
def test_any_4xx_naming_stream_falls_back(message: str) -> None:
    with FakeOpenAIServer(lambda r: "plain") as server:
        server.inject(Fault.status(422, message))
        result = with_client(server, lambda c: c.chat(USER))
        asked = [(r.model_extra or {}).get("stream") for r in server.requests]
    assert result.content == "plain"
    assert asked == [True, None]


def test_a_4xx_that_does_not_name_stream_is_not_a_fallback() -> None:
    with FakeOpenAIServer(lambda r: "plain") as server:
        server.inject(Fault.status(400, "the upstream model is unknown"))
        with pytest.raises(LLMError, match="answered 400: the upstream model is unknown"):
            with_client(server, lambda c: c.chat(USER))
        asked = [(r.model_extra or {}).get("stream") for r in server.requests]
    assert asked == [True]


def test_a_plain_completion_to_a_streamed_request_is_taken_as_it_is() -> None:
    body = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "as it is"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    with FakeOpenAIServer(lambda r: "unused") as server:
        server.inject(Fault.malformed(json.dumps(body)))
        result = with_client(server, lambda c: c.chat(USER))
        asked = [(r.model_extra or {}).get("stream") for r in server.requests]
    assert (result.content, result.finish_reason) == ("as it is", "stop")
    assert (result.prompt_tokens, result.completion_tokens) == (3, 2)
    assert asked == [True]


# -- timeouts and cancellation close the stream ------------------------------------------------


@pytest.mark.slow
def test_the_timeout_bounds_the_whole_call_not_each_read() -> None:
    # Each chunk comes within 0.3 s, so no read waits 1 s; the whole answer would take ~3 s.
    with FakeOpenAIServer(lambda r: LONG) as server:
        server.inject(Fault.slow(0.3))
        started = time.monotonic()
        with pytest.raises(StepTimeout) as caught:
            with_client(server, lambda c: c.chat(USER), timeout=1.0, retry_timeouts=False)
        took = time.monotonic() - started
        until(lambda: server.disconnects == 1, 3, "the fake to see the client go")
        assert len(server.requests) == 1
    assert took < 2.0, took
    assert "did not answer within 1 s" in caught.value.message
    assert "--llm-timeout" in caught.value.message


def test_a_timed_out_stream_is_retried_where_timeouts_are() -> None:
    sleep = Sleeps()
    with FakeOpenAIServer(lambda r: "second time") as server:
        server.inject(Fault.stall(2, 30))
        result = with_client(server, lambda c: c.chat(USER), sleep=sleep, timeout=0.5)
        assert server.disconnects == 1
    assert result.content == "second time"
    assert sleep.delays == [1.0]


COMPLETE_RECIPE = """\
version: 1
name: slow
llm: {model: scripted}
capabilities:
  llm: {}
steps:
  - id: ask
    tool: llm.complete
    params: {prompt: hello}
"""


@pytest.mark.slow
def test_llm_timeout_ends_a_stalled_stream_and_closes_its_connection(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(COMPLETE_RECIPE, encoding="utf-8")
    with FakeOpenAIServer(lambda r: LONG) as server:
        server.inject(Fault.stall(2, 60))
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, "--json", "--llm-timeout", "1",
            cwd=tmp_path,
        )  # fmt: skip
        until(lambda: server.disconnects == 1, 3, "the fake to see the client go")
        sent = len(server.requests)
    assert done.returncode == 1, done.stderr
    step = json.loads(done.stdout)["steps"]["ask"]
    assert "did not answer within 1 s" in step["error"]
    assert "--llm-timeout" in step["error"]
    assert step["duration"] < 2.0, step["duration"]
    assert sent == 1  # loopback: a timeout is not retried
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_ctrl_c_during_a_streamed_answer_closes_the_stream(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(COMPLETE_RECIPE, encoding="utf-8")
    with FakeOpenAIServer(lambda r: LONG) as server:
        server.inject(Fault.stall(2, 120))
        proc = subprocess.Popen(
            [PLANLOOM, "run", "job.yaml", "--base-url", server.base_url, "--json"],
            cwd=tmp_path,
            env=env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            until(lambda: server.chunks_sent >= 2 or proc.poll() is not None, 30, "2 chunks")
            assert proc.poll() is None, proc.communicate()
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=30)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        until(lambda: server.disconnects == 1, 3, "the fake to see the client go")
    assert proc.returncode == 130, stderr
    assert took < 5, f"took {took:.1f} s to stop after SIGINT"
    assert "Traceback" not in stderr
    result = json.loads(stdout)
    assert result["status"] == "cancelled"
    assert result["steps"]["ask"]["status"] == "cancelled"


# -- a stream cut before its end ---------------------------------------------------------------


@pytest.mark.parametrize("close", [True, False], ids=["connection dropped", "body ended"])
def test_a_cut_stream_is_retried_then_succeeds(close: bool) -> None:
    sleep = Sleeps()
    with FakeOpenAIServer(ScriptedModel.sequence(LONG, "whole")) as server:
        server.inject(Fault.cut(2, close=close))

        async def once(client: LLMClient) -> tuple[ChatResult, Budget]:
            return await client.chat(USER), client.budget

        result, budget = with_client(server, once, sleep=sleep)
        sent = len(server.requests)
    assert result.content == "whole"
    assert sent == 2
    assert sleep.delays == [1.0]
    assert budget.calls == 1


def test_a_stream_cut_on_every_attempt_is_a_broken_answer() -> None:
    with FakeOpenAIServer(lambda r: LONG) as server:
        server.inject(*[Fault.cut(3, close=False)] * 4)
        with pytest.raises(LLMError, match="malformed response: the answer stream stopped"):
            with_client(server, lambda c: c.chat(USER))
        assert len(server.requests) == 4


# -- progress ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_progress_is_reported_while_streaming_at_most_twice_a_second() -> None:
    reports: list[tuple[float, int]] = []
    with FakeOpenAIServer(lambda r: LONG) as server:
        server.inject(Fault.slow(0.1))

        async def watched(client: LLMClient) -> ChatResult:
            client.on_progress = lambda n: reports.append((time.monotonic(), n))
            return await client.chat(USER)

        result = with_client(server, watched)
    assert result.content == LONG
    assert len(reports) >= 2, reports
    counts = [n for _, n in reports]
    assert counts == sorted(counts)
    assert counts[0] > 0
    assert counts[-1] < server.chunks_sent
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(reports)]
    assert min(gaps) >= PROGRESS_EVERY - 0.01, gaps


@pytest.mark.slow
def test_a_run_publishes_the_streaming_tokens_of_its_step(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(COMPLETE_RECIPE, encoding="utf-8")
    with FakeOpenAIServer(lambda r: LONG) as server:
        server.inject(Fault.slow(0.1))
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, "--json", "--log-file", "run.log",
            cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in (tmp_path / "run.log").read_text().splitlines()]
    streaming = [e for e in events if e.get("event") == "llm.streaming"]
    assert streaming, [e.get("event") for e in events]
    assert {e["step_id"] for e in streaming} == {"ask"}
    assert all(e["tokens"] > 0 for e in streaming)


def test_the_live_view_shows_a_streaming_steps_tokens() -> None:
    stream = io.StringIO()
    live = LiveProgress(Console(file=stream, width=80), ["ask", "other"])

    def seen(kind: Any, step_id: str, **data: Any) -> str:
        live(Event(kind, "r1", step_id, 1, data=data))
        console = Console(file=io.StringIO(), width=80)
        with console.capture() as captured:
            console.print(live._table())
        return captured.get()

    seen("step.started", "ask")
    assert "120 tokens" in seen("llm.streaming", "ask", tokens=120)
    assert "tokens" not in seen("llm.called", "ask", prompt_tokens=1, completion_tokens=130)
