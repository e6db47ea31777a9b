"""The scripted model and the fake OpenAI server, driven by the real `openai` client over HTTP."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
)

from engine.testing._fakellm import (
    ChatReply,
    ChatRequest,
    FakeOpenAIServer,
    Fault,
    ScriptedModel,
    ToolCall,
)

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "fs.read",
            "description": "read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["title", "n"],
    "additionalProperties": False,
}


def client(server: FakeOpenAIServer, **options: Any) -> openai.AsyncOpenAI:
    settings: dict[str, Any] = {"api_key": "test", "max_retries": 0, "timeout": 2}
    settings.update(options)
    return openai.AsyncOpenAI(base_url=server.base_url, **settings)


def create(
    server: FakeOpenAIServer, client_options: dict[str, Any] | None = None, **kw: Any
) -> Any:
    """One chat completion through the async client; returns the parsed response."""

    async def call() -> Any:
        async with client(server, **(client_options or {})) as api:
            return await api.chat.completions.create(
                **{"model": "gpt-test", "messages": USER, **kw}
            )

    return asyncio.run(call())


def raw_create(server: FakeOpenAIServer, **kw: Any) -> bytes:
    """One chat completion; returns the response body's bytes."""

    async def call() -> bytes:
        async with client(server) as api:
            raw = await api.chat.completions.with_raw_response.create(
                **{"model": "gpt-test", "messages": USER, **kw}
            )
            body: bytes = raw.http_response.content
            return body

    return asyncio.run(call())


def function_calls(reply: ChatCompletion) -> list[ChatCompletionMessageFunctionToolCall]:
    calls = reply.choices[0].message.tool_calls or []
    assert all(isinstance(call, ChatCompletionMessageFunctionToolCall) for call in calls)
    return [call for call in calls if isinstance(call, ChatCompletionMessageFunctionToolCall)]


# -- replies -------------------------------------------------------------------------------------


def test_plain_content_in_the_exact_openai_shape() -> None:
    with FakeOpenAIServer(lambda request: f"echo: {request.last_user_text()}") as server:
        body = json.loads(raw_create(server, temperature=0.2))
        reply: ChatCompletion = create(server)
    assert reply.choices[0].message.content == "echo: hello"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.id == "chatcmpl-2"
    assert body == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "echo: hello"},
                "finish_reason": "stop",
            }
        ],
        "usage": body["usage"],
    }
    assert [request.temperature for request in server.requests] == [0.2, None]
    assert server.model.calls == server.requests


def test_tool_calls_round_trip() -> None:
    def model(request: ChatRequest) -> ChatReply | str:
        if not request.tool_results():
            return ChatReply(tool_calls=[ToolCall("fs.read", {"path": "README.md"})])
        ((call_id, content),) = request.tool_results()
        return f"{call_id} said {content}"

    with FakeOpenAIServer(model) as server:
        first: ChatCompletion = create(server, tools=TOOLS, tool_choice="auto")
        call = function_calls(first)[0]
        history = [
            *USER,
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "# readme"},
        ]
        second: ChatCompletion = create(server, tools=TOOLS, messages=history)
    assert first.choices[0].finish_reason == "tool_calls"
    assert first.choices[0].message.content is None
    assert call.id == "call_1"
    assert call.type == "function"
    assert call.function.name == "fs.read"
    assert json.loads(call.function.arguments) == {"path": "README.md"}
    assert second.choices[0].message.content == "call_1 said # readme"
    first_request, second_request = server.requests
    assert first_request.tool_names() == ["fs.read"]
    assert first_request.tool_choice == "auto"
    assert second_request.tool_results() == [("call_1", "# readme")]
    assert second_request.last_user_text() == "hello"


def test_tool_call_arguments_as_a_raw_string_are_sent_as_is() -> None:
    reply = ChatReply(tool_calls=[ToolCall("fs.read", '{"path": ', id="call_mine")])
    with FakeOpenAIServer(ScriptedModel.sequence(reply)) as server:
        result: ChatCompletion = create(server, tools=TOOLS)
    (call,) = function_calls(result)
    assert call.id == "call_mine"
    assert call.function.arguments == '{"path": '


def test_json_schema_with_a_dict_reply() -> None:
    def model(request: ChatRequest) -> dict[str, Any]:
        assert request.wants_json_schema() == SCHEMA
        return {"title": "notes", "n": 3}

    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "notes", "schema": SCHEMA, "strict": True},
    }
    with FakeOpenAIServer(model) as server:
        reply: ChatCompletion = create(server, response_format=response_format)
    assert json.loads(reply.choices[0].message.content or "") == {"title": "notes", "n": 3}
    assert server.errors == []


def test_chat_request_helpers() -> None:
    request = ChatRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": None, "tool_calls": []},
                {
                    "role": "tool",
                    "tool_call_id": "call_9",
                    "content": [{"type": "text", "text": "ok"}],
                },
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
            ],
            "response_format": {"type": "json_object"},
            "seed": 7,
        }
    )
    assert request.last_user_text() == "ab"
    assert request.tool_results() == [("call_9", "ok")]
    assert request.tool_names() == []
    assert request.wants_json_schema() is None
    assert request.model_extra == {"seed": 7}
    assert ChatRequest(model="m", messages=[]).last_user_text() == ""


# -- usage and determinism ---------------------------------------------------------------------


def test_usage_is_estimated_and_deterministic() -> None:
    with FakeOpenAIServer(lambda request: "x" * 10) as server:
        first: ChatCompletion = create(server, tools=TOOLS)
        second: ChatCompletion = create(server, tools=TOOLS)
    assert first.usage is not None
    assert second.usage is not None
    prompt = math.ceil(len(json.dumps(USER + TOOLS, sort_keys=True)) / 4)
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (prompt, 3)
    assert first.usage.total_tokens == prompt + 3
    assert first.usage == second.usage


def test_usage_given_by_the_model_wins() -> None:
    reply = ChatReply("hi", prompt_tokens=1000, completion_tokens=7, finish_reason="length")
    with FakeOpenAIServer(ScriptedModel.sequence(reply)) as server:
        result: ChatCompletion = create(server)
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (1000, 7)
    assert result.usage.total_tokens == 1007
    assert result.choices[0].finish_reason == "length"


def test_same_requests_get_byte_identical_responses() -> None:
    def script() -> ScriptedModel:
        return ScriptedModel.sequence(
            ChatReply(tool_calls=[ToolCall("fs.read", {"path": "a"}), ToolCall("fs.read", {})]),
            {"done": True},
        )

    bodies = []
    for _ in range(2):
        with FakeOpenAIServer(script()) as server:
            bodies.append((raw_create(server, tools=TOOLS), raw_create(server, tools=TOOLS)))
    assert bodies[0] == bodies[1]
    first = json.loads(bodies[0][0])
    assert [call["id"] for call in first["choices"][0]["message"]["tool_calls"]] == [
        "call_1",
        "call_2",
    ]
    assert json.loads(bodies[0][1])["id"] == "chatcmpl-2"


# -- faults --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault.status(500), openai.InternalServerError),
        (Fault.status(503, "overloaded"), openai.InternalServerError),
        (Fault.status(401), openai.AuthenticationError),
        (Fault.status(403), openai.PermissionDeniedError),
        (
            Fault.status(400, {"error": {"message": "bad", "type": "x", "code": None}}),
            openai.BadRequestError,
        ),
        (Fault.status(404), openai.NotFoundError),
        (Fault.truncated(), openai.APIConnectionError),
        (Fault.disconnect(), openai.APIConnectionError),
    ],
    ids=["500", "503", "401", "403", "400", "404", "truncated", "disconnect"],
)
def test_fault_raises_the_openai_exception(fault: Fault, error: type[Exception]) -> None:
    with FakeOpenAIServer(lambda request: "fine") as server:
        server.inject(fault)
        with pytest.raises(error) as caught:
            create(server)
        assert type(caught.value) is error  # exactly, not a subclass such as APITimeoutError
        assert create(server).choices[0].message.content == "fine"  # the next one is normal
    assert len(server.requests) == 2
    assert len(server.model.calls) == 1  # the faulted request never reached the model


def test_rate_limit_with_retry_after() -> None:
    with FakeOpenAIServer(lambda request: "fine") as server:
        server.inject(Fault.status(429, retry_after=2))
        with pytest.raises(openai.RateLimitError) as caught:
            create(server)
    assert caught.value.response.headers["retry-after"] == "2"
    assert caught.value.status_code == 429
    assert caught.value.code == "rate_limit_exceeded"


def test_faults_are_consumed_one_per_request_in_order() -> None:
    with FakeOpenAIServer(lambda request: "fine") as server:
        server.inject(Fault.status(429, retry_after=0.01), Fault.status(503, retry_after=0.01))
        # the client's own retries (which honour Retry-After) see both faults, then succeed
        reply: ChatCompletion = create(server, client_options={"max_retries": 2})
    assert reply.choices[0].message.content == "fine"
    assert len(server.requests) == 3


def test_delay_beyond_the_client_timeout() -> None:
    started = time.monotonic()
    with FakeOpenAIServer(lambda request: "late") as server:
        server.inject(Fault.delay(30))
        with pytest.raises(openai.APITimeoutError):
            create(server, client_options={"timeout": 0.2})
    # the delayed handler was woken by the exit, not left sleeping for 30 s
    assert time.monotonic() - started < 5
    assert server.model.calls == []


def test_delay_within_the_client_timeout_answers_normally() -> None:
    with FakeOpenAIServer(lambda request: "late") as server:
        server.inject(Fault.delay(0.1))
        started = time.monotonic()
        reply: ChatCompletion = create(server)
    assert time.monotonic() - started >= 0.1
    assert reply.choices[0].message.content == "late"


def test_malformed_json_body() -> None:
    # the client does not translate this one: json.JSONDecodeError escapes as is
    with FakeOpenAIServer(lambda request: "fine") as server:
        server.inject(Fault.malformed())
        with pytest.raises(json.JSONDecodeError):
            create(server)


def test_malformed_body_with_a_non_json_content_type_comes_back_as_text() -> None:
    with FakeOpenAIServer(lambda request: "fine") as server:
        server.inject(Fault.malformed("<html>502 Bad Gateway</html>", content_type="text/html"))
        reply = create(server)
    assert reply == "<html>502 Bad Gateway</html>"  # a str, not a ChatCompletion


# -- scripts and model errors ----------------------------------------------------------------


def test_sequence_plays_in_order_then_fails_loudly() -> None:
    model = ScriptedModel.sequence("one", ChatReply("two"))
    with FakeOpenAIServer(model) as server:
        replies = [create(server).choices[0].message.content for _ in range(2)]
        with pytest.raises(openai.InternalServerError, match="the script ran out after 2 calls"):
            create(server)
    assert replies == ["one", "two"]
    assert len(model.calls) == 3
    (error,) = server.errors
    assert isinstance(error, AssertionError)


def test_model_exception_is_a_500_naming_it() -> None:
    def model(request: ChatRequest) -> str:
        raise KeyError("no-such-key")

    with FakeOpenAIServer(model) as server, pytest.raises(openai.InternalServerError) as caught:
        create(server)
    assert "KeyError: 'no-such-key'" in caught.value.message
    assert [type(error) for error in server.errors] == [KeyError]


def test_model_returning_the_wrong_type_is_a_500() -> None:
    def model(request: ChatRequest) -> Any:
        return 42

    with (
        FakeOpenAIServer(model) as server,
        pytest.raises(openai.InternalServerError, match="must return ChatReply, str or dict"),
    ):
        create(server)


# -- server options --------------------------------------------------------------------------


def test_json_schema_unsupported_is_a_bad_request_but_json_mode_works() -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}
    with FakeOpenAIServer(lambda request: {"ok": True}, supports_json_schema=False) as server:
        with pytest.raises(openai.BadRequestError) as caught:
            create(server, response_format=response_format)
        reply: ChatCompletion = create(server, response_format={"type": "json_object"})
    assert "json_schema" in caught.value.message
    assert caught.value.param == "response_format"
    assert json.loads(reply.choices[0].message.content or "") == {"ok": True}
    assert len(server.model.calls) == 1


def test_api_key_is_enforced() -> None:
    with FakeOpenAIServer(lambda request: "in", api_key="sk-right") as server:
        with pytest.raises(openai.AuthenticationError) as caught:
            create(server, client_options={"api_key": "sk-wrong"})
        reply: ChatCompletion = create(server, client_options={"api_key": "sk-right"})
    body: Any = caught.value.body
    assert set(body) == {"message", "type", "param", "code"}
    assert body["code"] == "invalid_api_key"
    assert reply.choices[0].message.content == "in"
    assert [headers["authorization"] for headers in server.headers] == [
        "Bearer sk-wrong",
        "Bearer sk-right",
    ]
    assert len(server.model.calls) == 1


def test_sync_client_and_models_endpoint() -> None:
    with (
        FakeOpenAIServer(lambda request: "sync", api_key="k") as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=2) as api,
    ):
        reply = api.chat.completions.create(model="gpt-sync", messages=USER)
        models = [model.id for model in api.models.list()]
    assert reply.choices[0].message.content == "sync"
    assert models == ["gpt-sync"]


def test_latency_applies_to_every_reply_and_requests_run_concurrently() -> None:
    async def many(server: FakeOpenAIServer) -> list[str | None]:
        async with client(server) as api:
            replies = await asyncio.gather(
                *(api.chat.completions.create(model="m", messages=USER) for _ in range(5))
            )
        return [reply.choices[0].message.content for reply in replies]

    async def scenario() -> list[str | None]:
        async with FakeOpenAIServer(lambda request: "slow", latency=0.5) as server:
            return await many(server)

    started = time.monotonic()
    assert asyncio.run(scenario()) == ["slow"] * 5
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 2.0  # five replies of 0.5 s each: 2.5 s if served one by one


def test_bad_request_bodies_and_unknown_paths() -> None:
    with FakeOpenAIServer(lambda request: "x") as server:
        post = urllib.request.Request(
            f"{server.base_url}/chat/completions",
            data=b'{"messages": []}',
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as missing_model:
            urllib.request.urlopen(post, timeout=2)
        with pytest.raises(urllib.error.HTTPError) as unknown:
            urllib.request.urlopen(f"{server.base_url}/embeddings", timeout=2)
    with missing_model.value as response:
        assert response.code == 400
        assert "model" in json.load(response)["error"]["message"]
    with unknown.value as response:
        assert response.code == 404
    assert server.requests == []


def test_exit_leaves_no_threads_and_frees_the_port() -> None:
    async def scenario() -> tuple[set[threading.Thread], int]:
        before = set(threading.enumerate())
        server = FakeOpenAIServer(lambda request: "x").start()
        async with client(server) as api:
            await api.chat.completions.create(model="m", messages=USER)
            # the client still holds its pooled keep-alive connection: close must end it
            port = server.port
            await asyncio.to_thread(server.close)
            left = {thread for thread in set(threading.enumerate()) - before if thread.is_alive()}
        return {thread for thread in left if not thread.name.startswith("asyncio")}, port

    left, port = asyncio.run(scenario())
    assert left == set()
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))


def test_server_outside_with_has_no_base_url() -> None:
    server = FakeOpenAIServer(lambda request: "x")
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url
    with server, pytest.raises(RuntimeError, match="already running"):
        server.start()
