"""`engine.llm`: the real `LLMClient` (the real `openai` client) over HTTP to the local fake.

Retries never really wait: the client gets an injected sleep that records the delays it was
asked for, so the backoff schedule (1 s, 2 s, 4 s, Retry-After wins) is asserted exactly.
the README's "Models": 429/5xx/timeouts retry with backoff; 401/403 and missing keys are
configuration errors; no key is needed for a base URL on loopback.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import SecretStr

from engine.errors import BudgetExceeded, ConfigurationError, StepTimeout
from engine.llm import (
    Budget,
    ChatResult,
    LLMClient,
    LLMConfig,
    LLMError,
    NoJSON,
    extract_json,
    resolve_llm_config,
)
from engine.model import LLMSettings
from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, Fault, ScriptedModel, ToolCall

T = TypeVar("T")

USER = [{"role": "user", "content": "hello"}]
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
# As `json_schema` asks for it: strict (every object closed, every property required).
STRICT = {**SCHEMA, "additionalProperties": False}


class RecordingSleep:
    """The client's retry sleep: records each delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


def call_with(
    server: FakeOpenAIServer,
    body: Callable[[LLMClient], Awaitable[T]],
    *,
    sleep: RecordingSleep | None = None,
    budget: Budget | None = None,
    timeout: float = 5.0,
    api_key: str = "k",
    base_url: str | None = None,
) -> T:
    """Run `body` with a real client pointed at `server`, closing it in the same loop."""

    async def scenario() -> T:
        config = LLMConfig(
            model="m",
            base_url=base_url or server.base_url,
            api_key=SecretStr(api_key),
            timeout=timeout,
        )
        client = LLMClient(config, budget=budget or Budget(), sleep=sleep or RecordingSleep())
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(scenario())


async def say_hello(client: LLMClient) -> ChatResult:
    return await client.chat(USER)


# -- answers ---------------------------------------------------------------------------------


def test_content_and_usage_are_parsed_and_accounted() -> None:
    model = ScriptedModel.sequence(
        ChatReply("first", prompt_tokens=11, completion_tokens=7),
        ChatReply("second", prompt_tokens=5, completion_tokens=3),
    )
    with FakeOpenAIServer(model) as server:

        async def two(client: LLMClient) -> tuple[ChatResult, ChatResult, Budget]:
            return await client.chat(USER), await client.chat(USER), client.budget

        first, second, budget = call_with(server, two)
    assert (first.content, first.tool_calls) == ("first", [])
    assert (first.prompt_tokens, first.completion_tokens) == (11, 7)
    assert second.content == "second"
    assert first.latency > 0
    assert (budget.calls, budget.prompt_tokens, budget.completion_tokens) == (2, 16, 10)
    assert budget.tokens == 26
    assert budget.latency >= first.latency + second.latency - 1e-9 > 0
    assert [r.model for r in server.requests] == ["m", "m"]
    assert server.requests[0].messages == USER
    assert server.headers[0]["authorization"] == "Bearer k"


def test_tool_calls_are_parsed() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "fs__read",
                "description": "read",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ]
    reply = ChatReply(
        tool_calls=[
            ToolCall("fs__read", {"path": "a.txt"}),
            ToolCall("fs__read", '{"path": "b', id="custom-id"),
        ]
    )
    with FakeOpenAIServer(ScriptedModel.sequence(reply)) as server:
        result = call_with(server, lambda c: c.chat(USER, tools=tools))
    assert result.content is None
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("fs__read", '{"path": "a.txt"}'),
        ("fs__read", '{"path": "b'),  # raw text: the agent loop judges it
    ]
    assert result.tool_calls[0].id == "call_1"
    assert result.tool_calls[1].id == "custom-id"
    assert server.requests[0].tool_names() == ["fs__read"]


# -- retries -----------------------------------------------------------------------------------


def test_429_retry_after_is_honoured_then_success() -> None:
    with FakeOpenAIServer(lambda r: "ok") as server:
        server.inject(Fault.status(429, retry_after=3))
        sleep = RecordingSleep()
        result = call_with(server, say_hello, sleep=sleep)
    assert result.content == "ok"
    assert sleep.delays == [3.0]
    assert len(server.requests) == 2


def test_429_without_retry_after_then_500_use_the_backoff_schedule() -> None:
    with FakeOpenAIServer(lambda r: "ok") as server:
        server.inject(Fault.status(429), Fault.status(500))
        sleep = RecordingSleep()
        result = call_with(server, say_hello, sleep=sleep)
    assert result.content == "ok"
    assert sleep.delays == [1.0, 2.0]
    assert len(server.requests) == 3


def test_retry_after_is_capped_at_a_minute() -> None:
    with FakeOpenAIServer(lambda r: "ok") as server:
        server.inject(Fault.status(503, retry_after=3600))
        sleep = RecordingSleep()
        assert call_with(server, say_hello, sleep=sleep).content == "ok"
    assert sleep.delays == [60.0]


def test_retry_after_as_an_http_date_keeps_our_backoff() -> None:
    with FakeOpenAIServer(lambda r: "ok") as server:
        server.inject(Fault.status(429, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"))
        sleep = RecordingSleep()
        assert call_with(server, say_hello, sleep=sleep).content == "ok"
    assert sleep.delays == [1.0]


def test_four_500s_give_an_llm_error_after_four_attempts() -> None:
    with FakeOpenAIServer(lambda r: "never") as server:
        server.inject(*[Fault.status(500, "backend on fire")] * 4)
        sleep = RecordingSleep()
        with pytest.raises(LLMError) as caught:
            call_with(server, say_hello, sleep=sleep)
    assert sleep.delays == [1.0, 2.0, 4.0]
    assert len(server.requests) == 4
    assert "500" in caught.value.message
    assert "backend on fire" in caught.value.message


def test_a_failed_call_spends_no_tokens() -> None:
    with FakeOpenAIServer(lambda r: "never") as server:
        server.inject(*[Fault.status(502)] * 4)
        budget = Budget()
        with pytest.raises(LLMError):
            call_with(server, say_hello, budget=budget)
    assert (budget.prompt_tokens, budget.completion_tokens) == (0, 0)


def test_400_is_not_retried() -> None:
    with FakeOpenAIServer(lambda r: "never") as server:
        server.inject(Fault.status(400, "messages: too long"))
        sleep = RecordingSleep()
        with pytest.raises(LLMError, match=r"400.*too long"):
            call_with(server, say_hello, sleep=sleep)
    assert len(server.requests) == 1
    assert sleep.delays == []


def test_401_is_a_configuration_error_without_retry() -> None:
    with FakeOpenAIServer(lambda r: "never", api_key="right") as server:
        sleep = RecordingSleep()
        with pytest.raises(ConfigurationError, match="401"):
            call_with(server, say_hello, sleep=sleep, api_key="wrong")
    assert len(server.requests) == 1
    assert sleep.delays == []
    assert server.model.calls == []


def test_403_is_a_configuration_error_without_retry() -> None:
    with FakeOpenAIServer(lambda r: "never") as server:
        server.inject(Fault.status(403))
        sleep = RecordingSleep()
        with pytest.raises(ConfigurationError, match="403"):
            call_with(server, say_hello, sleep=sleep)
    assert len(server.requests) == 1
    assert sleep.delays == []


def test_a_timeout_is_retried_then_succeeds() -> None:
    with FakeOpenAIServer(lambda r: "late but fine") as server:
        server.inject(Fault.delay(10))
        sleep = RecordingSleep()
        result = call_with(server, say_hello, sleep=sleep, timeout=0.3)
    assert result.content == "late but fine"
    assert sleep.delays == [1.0]
    assert len(server.requests) == 2


@pytest.mark.slow
def test_timeouts_on_every_attempt_give_step_timeout() -> None:
    with FakeOpenAIServer(lambda r: "never") as server:
        server.inject(*[Fault.delay(10)] * 4)
        sleep = RecordingSleep()
        with pytest.raises(StepTimeout) as caught:
            call_with(server, say_hello, sleep=sleep, timeout=0.3)
    assert sleep.delays == [1.0, 2.0, 4.0]
    assert len(server.requests) == 4
    assert "0.3" in caught.value.message


BROKEN = {
    "malformed json": Fault.malformed,
    "truncated body": Fault.truncated,
    "dropped connection": Fault.disconnect,
}


@pytest.mark.parametrize("fault", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_response_is_retried_then_succeeds(fault: Callable[[], Fault]) -> None:
    with FakeOpenAIServer(lambda r: "fine") as server:
        server.inject(fault(), fault())
        sleep = RecordingSleep()
        result = call_with(server, say_hello, sleep=sleep)
    assert result.content == "fine"
    assert sleep.delays == [1.0, 2.0]
    assert len(server.requests) == 3


@pytest.mark.parametrize("fault", BROKEN.values(), ids=BROKEN.keys())
def test_broken_responses_on_every_attempt_give_llm_error(fault: Callable[[], Fault]) -> None:
    with FakeOpenAIServer(lambda r: "never") as server:
        server.inject(*[fault() for _ in range(4)])
        sleep = RecordingSleep()
        with pytest.raises(LLMError):
            call_with(server, say_hello, sleep=sleep)
    assert sleep.delays == [1.0, 2.0, 4.0]
    assert len(server.requests) == 4


def test_a_non_json_page_is_an_llm_error_not_a_crash() -> None:
    # A proxy's HTML error page with status 200: the openai client returns it as a str.
    page = Fault.malformed("<html>502 Bad Gateway</html>", content_type="text/html")
    with FakeOpenAIServer(lambda r: "never") as server:
        server.inject(*[page] * 4)
        with pytest.raises(LLMError, match="not JSON"):
            call_with(server, say_hello)


def test_a_non_json_page_is_retried_like_malformed_json() -> None:
    # The docstring of engine.llm: "A body that is not JSON ... is a broken response too";
    # a good reply after one HTML page should win, as it does after a truncated JSON body.
    page = Fault.malformed("<html>502 Bad Gateway</html>", content_type="text/html")
    with FakeOpenAIServer(lambda r: "fine") as server:
        server.inject(page)
        sleep = RecordingSleep()
        result = call_with(server, say_hello, sleep=sleep)
    assert result.content == "fine"
    assert sleep.delays == [1.0]


def test_a_reply_without_choices_is_an_llm_error() -> None:
    body = json.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": "m"})
    with FakeOpenAIServer(lambda r: "never") as server:
        server.inject(Fault.malformed(body))
        with pytest.raises(LLMError):
            call_with(server, say_hello)


# -- budget ----------------------------------------------------------------------------------


def test_max_calls_budget_stops_the_third_call_before_it_is_sent() -> None:
    with FakeOpenAIServer(lambda r: "ok") as server:
        budget = Budget(max_calls=2)

        async def three(client: LLMClient) -> None:
            await client.chat(USER)
            await client.chat(USER)
            await client.chat(USER)

        with pytest.raises(BudgetExceeded) as caught:
            call_with(server, three, budget=budget)
    assert caught.value.limit == "max_llm_calls"
    assert len(server.requests) == 2
    assert budget.calls == 2
    assert budget.remaining() == "budget left: 0 model calls"


def test_max_tokens_budget() -> None:
    model = ScriptedModel.sequence(ChatReply("a", prompt_tokens=6, completion_tokens=5))
    with FakeOpenAIServer(model) as server:
        budget = Budget(max_tokens=10)

        async def two(client: LLMClient) -> None:
            await client.chat(USER)
            await client.chat(USER)

        with pytest.raises(BudgetExceeded) as caught:
            call_with(server, two, budget=budget)
    assert caught.value.limit == "max_llm_tokens"
    assert len(server.requests) == 1
    assert budget.tokens == 11


def test_an_expired_deadline_stops_calls() -> None:
    with FakeOpenAIServer(lambda r: "ok") as server:
        budget = Budget(deadline=0.0)
        with pytest.raises(BudgetExceeded) as caught:
            call_with(server, say_hello, budget=budget)
    assert caught.value.limit == "max_duration"
    assert server.requests == []


# -- JSON answers ------------------------------------------------------------------------------


def test_chat_json_uses_structured_output_when_supported() -> None:
    with FakeOpenAIServer(lambda r: {"n": 3}) as server:
        value = call_with(server, lambda c: c.chat_json(USER, SCHEMA, name="count"))
    assert value == {"n": 3}
    assert len(server.requests) == 1
    assert server.requests[0].response_format == {
        "type": "json_schema",
        "json_schema": {"name": "count", "schema": STRICT, "strict": True},
    }


def test_chat_json_falls_back_to_json_object_mode() -> None:
    with FakeOpenAIServer(lambda r: {"n": 4}, supports_json_schema=False) as server:

        async def twice(client: LLMClient) -> tuple[Any, Any, str]:
            return (
                await client.chat_json(USER, SCHEMA),
                await client.chat_json(USER, SCHEMA),
                client.json_mode,
            )

        first, second, mode = call_with(server, twice)
    assert first == second == {"n": 4}
    assert mode == "json_object_schema"
    formats = [request.response_format for request in server.requests]
    assert formats[0] is not None
    assert formats[0]["type"] == "json_schema"
    # then JSON mode with the schema (llama-cpp-python's form); the downgrade sticks: the
    # second answer costs one request, not two
    assert formats[1:] == [{"type": "json_object", "schema": SCHEMA}] * 2
    assert len(server.model.calls) == 2


def test_chat_json_steps_down_to_plain_json_mode_when_the_schema_is_refused_too() -> None:
    """OpenAI refuses a `schema` beside `json_object` (a 400 naming it): JSON mode alone."""
    refused = "Unknown parameter: 'response_format.schema'."
    with FakeOpenAIServer(lambda r: {"n": 4}, supports_json_schema=False) as server:
        server.inject(Fault.status(400, refused))

        async def once(client: LLMClient) -> tuple[Any, str]:
            return await client.chat_json(USER, SCHEMA), client.json_mode

        value, mode = call_with(server, once)
    assert (value, mode) == ({"n": 4}, "json_object")
    formats = [request.response_format for request in server.requests]
    assert formats == [
        {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": STRICT, "strict": True},
        },
        {"type": "json_object", "schema": SCHEMA},
        {"type": "json_object"},
    ]


def test_chat_json_takes_a_fenced_text_answer() -> None:
    answer = '```json\n{"n": 5}\n```\n'
    with FakeOpenAIServer(lambda r: answer, supports_json_schema=False) as server:
        value = call_with(server, lambda c: c.chat_json(USER, SCHEMA))
    assert value == {"n": 5}


def test_chat_json_refuses_prose_around_a_fenced_answer() -> None:
    answer = 'Sure! Here is the plan:\n```json\n{"n": 5}\n```\nAnything else?'
    with (
        FakeOpenAIServer(lambda r: answer, supports_json_schema=False) as server,
        pytest.raises(NoJSON, match="line 1, column 1") as caught,
    ):
        call_with(server, lambda c: c.chat_json(USER, SCHEMA))
    assert caught.value.rule == "bad-json"


def test_chat_json_without_json_is_an_llm_error() -> None:
    with (
        FakeOpenAIServer(lambda r: "I cannot do that.") as server,
        pytest.raises(LLMError, match="not JSON"),
    ):
        call_with(server, lambda c: c.chat_json(USER, SCHEMA))
    assert len(server.requests) == 1


EXTRACT = [
    ('{"a": 1}', {"a": 1}),
    ("  [1, 2]\n", [1, 2]),
    ("42", 42),
    ('```json\n{"a": {"b": [1]}}\n```', {"a": {"b": [1]}}),
    ('```\n{"a": 2}\n```', {"a": 2}),
    ('\n  ```JSON\n{"a": 3}\n```  \n', {"a": 3}),
    ('{"text": "a } inside a string"}', {"text": "a } inside a string"}),
    ('{"a": "ünïcode"}', {"a": "ünïcode"}),
    # a raw newline or tab in a string (llama.cpp's grammars admit them) is that character
    ('{"id": "a\nb", "c": "d\te"}', {"id": "a\nb", "c": "d\te"}),
]


@pytest.mark.parametrize(("text", "value"), EXTRACT)
def test_extract_json(text: str, value: Any) -> None:
    assert extract_json(text) == value


# Answers that are not exactly one JSON value: each is refused, none read "leniently" (the
# first object inside, a fenced block among prose), as the README's "Models" says.
NOT_ONE_VALUE = [
    "",
    "   ",
    "no json here",
    "{not: json}",
    "[unclosed",
    "```json\n```",
    'Here you go:\n```json\n{"a": 3}\n```\nDone.',
    'The plan is {"steps": []} as asked.',
    'Use {braces} freely; answer: {"a": 4}',
    '[see notes] then {"a": 5}',
    '```json\n{broken}\n```\nfixed: {"a": 6}',
    '{"a": 1} and {"b": 2}',
    'prefix {"a": "ünïcode"} suffix',
    '```json\n{"a": 1}\n```\n```json\n{"b": 2}\n```',
]


@pytest.mark.parametrize("text", NOT_ONE_VALUE)
def test_extract_json_refuses_what_is_not_one_json_value(text: str) -> None:
    with pytest.raises(NoJSON, match=r"not (one complete JSON value|JSON)") as caught:
        extract_json(text)
    assert caught.value.rule == "bad-json"


# -- configuration ------------------------------------------------------------------------------

RECIPE_LLM = LLMSettings(
    model="recipe-model", base_url="https://recipe.example/v1", temperature=0.5
)
ENV = {
    "PLANLOOM_MODEL": "env-model",
    "OPENAI_BASE_URL": "https://env.example/v1",
    "OPENAI_API_KEY": "sk-env",
}


def test_cli_flags_win_over_env_and_recipe() -> None:
    config = resolve_llm_config(
        RECIPE_LLM, model="cli-model", base_url="https://cli.example/v1", environ=ENV
    )
    assert (config.model, config.base_url) == ("cli-model", "https://cli.example/v1")
    assert config.api_key is not None
    assert config.api_key.get_secret_value() == "sk-env"
    assert config.temperature == 0.5


def test_env_wins_over_recipe() -> None:
    config = resolve_llm_config(RECIPE_LLM, environ=ENV)
    assert (config.model, config.base_url) == ("env-model", "https://env.example/v1")


def test_recipe_is_the_last_resort() -> None:
    config = resolve_llm_config(RECIPE_LLM, environ={"OPENAI_API_KEY": "sk"})
    assert (config.model, config.base_url) == ("recipe-model", "https://recipe.example/v1")


def test_each_setting_is_resolved_on_its_own() -> None:
    config = resolve_llm_config(
        RECIPE_LLM,
        model="cli-model",
        environ={"OPENAI_BASE_URL": "https://e/v1", "OPENAI_API_KEY": "k"},
    )
    assert (config.model, config.base_url) == ("cli-model", "https://e/v1")


def test_api_key_is_secret() -> None:
    config = resolve_llm_config(None, model="m", environ={"OPENAI_API_KEY": "sk-very-secret"})
    assert "sk-very-secret" not in repr(config)
    assert "sk-very-secret" not in str(config.model_dump())


@pytest.mark.parametrize(
    "environ", [{}, {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1/v1"}]
)
def test_missing_model_is_a_configuration_error(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="model"):
        resolve_llm_config(None, environ=environ)
    with pytest.raises(ConfigurationError, match="PLANLOOM_MODEL"):
        resolve_llm_config(LLMSettings(base_url="http://127.0.0.1/v1"), environ=environ)


@pytest.mark.parametrize(
    "base_url",
    [
        None,  # the OpenAI API
        "https://api.example.com/v1",
        "http://10.0.0.5:8000/v1",
        "http://127.0.0.1.example.com/v1",
        "http://localhost.example.com/v1",
        "http://example.com/127.0.0.1/v1",
    ],
)
def test_missing_key_for_a_remote_endpoint_is_a_configuration_error(base_url: str | None) -> None:
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        resolve_llm_config(None, model="m", base_url=base_url, environ={})
    with pytest.raises(ConfigurationError):
        resolve_llm_config(None, model="m", base_url=base_url, environ={"OPENAI_API_KEY": ""})


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1:11434/v1",
        "http://127.0.0.2:8000/v1",
        "http://localhost:8000/v1",
        "http://LOCALHOST/v1",
        "http://[::1]:8000/v1",
    ],
)
def test_no_key_needed_on_loopback(base_url: str) -> None:
    config = resolve_llm_config(None, model="m", base_url=base_url, environ={})
    assert config.api_key is None
    assert config.base_url == base_url


def test_loopback_from_the_environment_needs_no_key() -> None:
    config = resolve_llm_config(
        None, environ={"PLANLOOM_MODEL": "m", "OPENAI_BASE_URL": "http://localhost:1/v1"}
    )
    assert (config.model, config.api_key) == ("m", None)


def test_keyless_client_talks_to_a_loopback_server() -> None:
    with FakeOpenAIServer(lambda r: "no key needed") as server:
        config = resolve_llm_config(None, model="m", base_url=server.base_url, environ={})

        async def scenario() -> ChatResult:
            client = LLMClient(config)
            try:
                await client.preflight()
                return await client.chat(USER)
            finally:
                await client.aclose()

        assert asyncio.run(scenario()).content == "no key needed"


# -- preflight ---------------------------------------------------------------------------------


def test_preflight_with_a_refused_key_is_a_configuration_error() -> None:
    with (
        FakeOpenAIServer(lambda r: "never", api_key="right") as server,
        pytest.raises(ConfigurationError, match="401"),
    ):
        call_with(server, lambda c: c.preflight(), api_key="wrong")
    assert server.requests == []  # preflight lists models: no chat request was spent


def test_preflight_passes_with_the_right_key() -> None:
    with FakeOpenAIServer(lambda r: "never", api_key="right") as server:
        call_with(server, lambda c: c.preflight(), api_key="right")
    assert server.requests == []


def test_preflight_passes_when_the_server_has_no_models_endpoint() -> None:
    with FakeOpenAIServer(lambda r: "never") as server:
        # /v2/models is a 404 on the fake: some compatible servers have no /models at all
        call_with(server, lambda c: c.preflight(), base_url=f"http://127.0.0.1:{server.port}/v2")


def test_preflight_against_nothing_listening_is_a_configuration_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with (
        FakeOpenAIServer(lambda r: "never") as server,
        pytest.raises(ConfigurationError, match="cannot reach"),
    ):
        call_with(server, lambda c: c.preflight(), base_url=f"http://127.0.0.1:{port}/v1")


def test_requests_carry_temperature_when_configured() -> None:
    with FakeOpenAIServer(lambda r: "ok") as server:

        async def scenario() -> None:
            config = LLMConfig(model="m", base_url=server.base_url, temperature=0.25)
            client = LLMClient(config)
            try:
                await client.chat(USER)
            finally:
                await client.aclose()

        asyncio.run(scenario())
    assert server.requests[0].temperature == 0.25
    assert isinstance(server.requests[0], ChatRequest)


RECIPES = Path(__file__).resolve().parent.parent / "recipes"


@pytest.mark.slow
def test_commands_that_call_no_model_do_not_load_the_openai_client() -> None:
    """Importing `openai` costs about 0.4 s: `--help` and `validate` of a recipe without
    models never pay it; the client loads it when a run makes one."""
    code = (
        "import sys\n"
        "from engine.app.main import main\n"
        f"assert main(['validate', {str(RECIPES / 'word-count.yaml')!r}]) == 0\n"
        "print('openai' in sys.modules)\n"
        "from engine.llm import LLMClient, LLMConfig\n"
        "LLMClient(LLMConfig(model='m'))\n"
        "print('openai' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split()[-2:] == ["False", "True"], done.stdout


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (422, "Unprocessable: json_schema output is not supported by this model"),
        (404, "Unknown parameter: 'response_format'"),
    ],
)
def test_chat_json_downgrades_on_any_4xx_that_refuses_the_response_format(
    code: int, message: str
) -> None:
    with FakeOpenAIServer(lambda r: {"n": 6}) as server:
        server.inject(Fault.status(code, message))
        value = call_with(server, lambda c: c.chat_json(USER, SCHEMA))
    assert value == {"n": 6}
    formats = [request.response_format for request in server.requests]
    assert [f["type"] if f else None for f in formats] == ["json_schema", "json_object"]


def test_a_4xx_that_does_not_name_the_format_is_not_a_downgrade() -> None:
    with FakeOpenAIServer(lambda r: {"n": 7}) as server:
        server.inject(Fault.status(422, "the messages are too long"))
        with pytest.raises(LLMError, match="answered 422"):
            call_with(server, lambda c: c.chat_json(USER, SCHEMA))
    assert len(server.requests) == 1
