"""Model endpoints' limits and refusals (the README's "Models").

- An answer that is not exactly one complete JSON value is `bad-json` (located, quoted), one
  stopped at `max_tokens` is `cut-off`: never "the first object inside".
- `timeout`, `max_tokens` and `retries`: flag over variable over the recipe's `llm:`; a bad
  value is exit 2 naming where it came from; `max_tokens` goes with every request; a timeout
  on loopback is not retried and says how to wait longer.
- Any refusal whose body names `response_format` downgrades the structured-output mode at
  once; a server's error body is shown on one clean line.
- The preflight is `GET /models` only (`--preflight chat` adds the one-token probe); a key
  refused at the first real call stops the run, journaled, and `planloom resume` goes on.

Unit checks on `extract_json` and the real `LLMClient`; the rest through the real `planloom`
console script, talking over 127.0.0.1 to a `FakeOpenAIServer` in this process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from _procs import env, planloom
from pydantic import SecretStr

from engine.errors import ConfigurationError
from engine.llm import Budget, LLMClient, LLMConfig, LLMError, NoJSON, extract_json
from engine.llm.config import resolve_llm_config
from engine.model import LLMSettings
from engine.testing import ChatReply, ChatRequest, FakeOpenAIServer, Fault, ScriptedModel, ToolCall

USER = [{"role": "user", "content": "hello"}]
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}  # what every call asks

TRUNCATED = '{"steps": [{"name": "f", "tool": "delete"}, {"x": '

# What llama-cpp-python 0.3 answers to `response_format: {"type": "json_schema"}`: a 500 whose
# message is a pydantic validation error, over several lines.
LLAMA_CPP_REFUSAL = {
    "error": {
        "message": "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n"
        "  Input should be 'text' or 'json_object' [type=literal_error, "
        "input_value='json_schema', input_type=str]\n"
        "    For further information visit https://errors.pydantic.dev/2.11/v/literal_error",
        "type": "internal_server_error",
        "param": None,
        "code": None,
    }
}

TRACEBACK_BODY = (
    b"Traceback (most recent call last):\n"
    b'  File "/srv/app.py", line 12, in handle\n'
    b"    generate(request)\n"
    b'  File "/srv/model.py", line 40, in generate\n'
    b"    raise RuntimeError(msg)\n"
    b"RuntimeError: \x1b[31mthe model ran out of memory\x1b[0m\r\n"
)


class Sleeps:
    """The client's retry sleep: records each delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def client_call(server: FakeOpenAIServer, body: Any, **config: Any) -> Any:
    """Run `body(client)` with a real client on `server` (retries never wait)."""

    async def scenario() -> Any:
        settings = {"model": "m", "base_url": server.base_url, "api_key": SecretStr("k")}
        client = LLMClient(LLMConfig(**{**settings, **config}), budget=Budget(), sleep=Sleeps())
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(scenario())


def result_of(done: Any) -> dict[str, Any]:
    assert "Traceback" not in done.stderr, done.stderr
    value = json.loads(done.stdout)
    assert isinstance(value, dict)
    return value


# -- honest JSON answers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where", "quoted"),
    [
        (TRUNCATED, "line 1, column 50", '{"x":'),
        ('{"a": 1} {"b": 2}', "line 1, column 10", '{"b": 2}'),
        ('{"a": 1}\n\n{"b": 2}', "line 3, column 1", '{"b": 2}'),
        ('Sure! Here is the plan:\n{"a": 1}', "line 1, column 1", "Sure! Here is the plan:"),
        ('The plan: ```json\n{"a": 1}\n```', "line 1, column 1", "The plan:"),
        ('```json\n{"a": 1}\n```\nAnything else?', "line 1, column 1", "```json"),
        ('```json\n{"a": [1,\n  2,\n```', "line 3, column 5", "2,"),
    ],
    ids=["truncated", "two-values", "two-lines", "prose-before", "prose-fence", "prose-after",
         "truncated-fenced"],
)  # fmt: skip
def test_what_is_not_one_json_value_is_bad_json_located_and_quoted(
    text: str, where: str, quoted: str
) -> None:
    with pytest.raises(NoJSON) as caught:
        extract_json(text)
    error = caught.value
    assert error.rule == "bad-json"
    assert where in error.message
    shown = error.message.split(where, 1)[1]
    assert quoted in shown
    assert "\n" not in error.message
    assert len(shown) <= 60 + 12, shown  # the quote: one line, about 60 characters


def test_the_inner_object_of_a_truncated_plan_is_not_taken() -> None:
    with pytest.raises(NoJSON, match="stops before its JSON value ends"):
        extract_json(TRUNCATED)


def test_a_long_line_is_quoted_short() -> None:
    text = '{"a": 1}' + " and then " + "x" * 500
    with pytest.raises(NoJSON) as caught:
        extract_json(text)
    assert "line 1, column 10" in caught.value.message
    assert len(caught.value.message) < 200


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('  {"a": 1}\n', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ("\n```\n[1, 2]\n```\n", [1, 2]),
        ("```JSON\n42\n```", 42),
    ],
)
def test_one_value_in_at_most_one_fence_is_taken(text: str, value: Any) -> None:
    assert extract_json(text) == value


def test_too_deep_keeps_its_rule() -> None:
    with pytest.raises(NoJSON) as caught:
        extract_json("[" * 150 + "]" * 150)
    assert caught.value.rule == "too-deep"


EXTRACT_RECIPE = """\
version: 1
name: extract
llm: {model: scripted}
capabilities:
  llm: {}
steps:
  - id: pick
    tool: llm.extract
    params:
      prompt: Give me a number
      schema: {type: object, properties: {n: {type: integer}}, required: [n]}
"""


@pytest.mark.slow
def test_an_llm_extract_step_with_two_json_values_fails_as_bad_json(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(EXTRACT_RECIPE, encoding="utf-8")
    with FakeOpenAIServer(lambda r: '{"n": 1} {"n": 2}') as server:
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, "--json", cwd=tmp_path
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    step = result_of(done)["steps"]["pick"]
    assert step["status"] == "failed"
    assert "not one complete JSON value" in step["error"]
    assert "line 1, column 10" in step["error"]


CAPABILITIES = "capabilities:\n  fs: {root: work, read: true}\n"
READ_PLAN = {
    "goal": "Read a.txt",
    "steps": [{"id": "read_a", "tool": "fs.read", "params": {"path": "a.txt"}}],
}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.txt").write_text("apples", encoding="utf-8")
    (tmp_path / "caps.yaml").write_text(CAPABILITIES, encoding="utf-8")
    return tmp_path


def repair_problems(request: ChatRequest) -> list[str]:
    """The problems of a repair request, a line each (`- WHERE: MESSAGE (RULE); HINT`)."""
    text = request.last_user_text()
    lines = [line[2:] for line in text.splitlines() if line.startswith("- ")]
    assert lines, text
    return lines


def plan_read(
    server: FakeOpenAIServer, workspace: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """`planloom plan "Read a.txt" --json` against `server`."""
    return planloom(
        "plan", "Read a.txt", "--capabilities", "caps.yaml", "--model", "m",
        "--base-url", server.base_url, "--json", *extra, cwd=workspace,
    )  # fmt: skip


@pytest.mark.slow
def test_a_truncated_plan_goes_to_repair_as_bad_json(workspace: Path) -> None:
    model = ScriptedModel.sequence(TRUNCATED, READ_PLAN)
    with FakeOpenAIServer(model) as server:
        done = plan_read(server, workspace, "--llm-max-tokens", "321")
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert result_of(done)["steps"]["read_a"]["status"] == "succeeded"
    assert len(requests) == 2
    (problem,) = repair_problems(requests[1])
    assert "(bad-json)" in problem
    assert "line 1, column 50" in problem
    # the planner's first answer and its repair both carry the bound
    assert [r.model_extra["max_tokens"] for r in requests if r.model_extra] == [321, 321]


# -- cut-off answers --------------------------------------------------------------------------


def test_an_answer_cut_at_max_tokens_is_cut_off() -> None:
    cut = ChatReply('{"n": 12', finish_reason="length")
    with (
        FakeOpenAIServer(ScriptedModel.sequence(cut)) as server,
        pytest.raises(NoJSON) as caught,
    ):
        client_call(server, lambda c: c.chat_json(USER, SCHEMA), max_tokens=40)
    assert caught.value.rule == "cut-off"
    assert "cut off at max_tokens 40" in caught.value.message
    assert server.requests[0].model_extra == {"max_tokens": 40, **STREAMED}


def test_the_finish_reason_is_kept() -> None:
    with FakeOpenAIServer(lambda r: ChatReply("a", finish_reason="length")) as server:
        result = client_call(server, lambda c: c.chat(USER))
    assert result.finish_reason == "length"


@pytest.mark.slow
def test_an_llm_extract_step_cut_off_says_so(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(EXTRACT_RECIPE, encoding="utf-8")
    cut = ChatReply('{"n": 1', finish_reason="length")
    with FakeOpenAIServer(lambda r: cut) as server:
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, "--json",
            "--llm-max-tokens", "7", cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "cut off at max_tokens 7" in result_of(done)["steps"]["pick"]["error"]


# -- limits: timeout, max_tokens, retries -----------------------------------------------------

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
@pytest.mark.parametrize("how", ["flag", "variable"])
def test_a_timeout_on_loopback_fails_in_bounded_time_naming_it(tmp_path: Path, how: str) -> None:
    (tmp_path / "job.yaml").write_text(COMPLETE_RECIPE, encoding="utf-8")
    flags = ["--llm-timeout", "1"] if how == "flag" else []
    environ = env() if how == "flag" else env(PLANLOOM_LLM_TIMEOUT="1")
    with FakeOpenAIServer(lambda r: "late") as server:
        server.inject(Fault.delay(3))
        started = time.monotonic()
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, "--json", *flags,
            cwd=tmp_path, environ=environ,
        )  # fmt: skip
        took = time.monotonic() - started
        sent = len(server.requests)
    assert done.returncode == 1, done.stderr
    step = result_of(done)["steps"]["ask"]
    assert "did not answer within 1 s" in step["error"]
    assert "--llm-timeout" in step["error"]
    assert "not retried" in step["error"]
    assert sent == 1  # a local server goes on generating: asking again only queues
    assert step["duration"] < 2.5, step["duration"]  # 1 s, not the 3 s answer, no backoff
    assert took < 20


def test_the_timeout_settings_resolve_flag_over_variable_over_recipe() -> None:
    recipe = LLMSettings(timeout=7, max_tokens=70, retries=1)
    local = "http://127.0.0.1:9/v1"
    resolved = resolve_llm_config(recipe, model="m", base_url=local, environ={})
    assert (resolved.timeout, resolved.max_tokens, resolved.retries) == (7, 70, 1)
    assert resolved.retry_timeouts  # retries set by the person: timeouts too
    environ = {"PLANLOOM_LLM_TIMEOUT": "8", "PLANLOOM_LLM_MAX_TOKENS": "80"}
    resolved = resolve_llm_config(recipe, model="m", base_url=local, environ=environ)
    assert (resolved.timeout, resolved.max_tokens) == (8, 80)
    resolved = resolve_llm_config(
        recipe, model="m", base_url=local, timeout=9, max_tokens=90, environ=environ
    )
    assert (resolved.timeout, resolved.max_tokens) == (9, 90)
    default = resolve_llm_config(None, model="m", base_url=local, environ={})
    assert (default.timeout, default.max_tokens, default.retries) == (600, 2048, 3)
    assert not default.retry_timeouts
    remote = resolve_llm_config(
        None, model="m", base_url="https://api.example/v1", environ={"OPENAI_API_KEY": "k"}
    )
    assert (remote.timeout, remote.retry_timeouts) == (30, True)


@pytest.mark.parametrize(
    ("args", "environ", "named"),
    [
        (["--llm-timeout", "0"], {}, "--llm-timeout '0'"),
        (["--llm-timeout", "soon"], {}, "--llm-timeout 'soon'"),
        (["--llm-max-tokens", "-5"], {}, "--llm-max-tokens '-5'"),
        ([], {"PLANLOOM_LLM_TIMEOUT": "-1"}, "PLANLOOM_LLM_TIMEOUT='-1'"),
        ([], {"PLANLOOM_LLM_MAX_TOKENS": "lots"}, "PLANLOOM_LLM_MAX_TOKENS='lots'"),
        ([], {"PLANLOOM_LLM_RETRIES": "-2"}, "PLANLOOM_LLM_RETRIES='-2'"),
    ],
)
def test_a_bad_limit_is_exit_2_naming_the_flag_or_variable(
    tmp_path: Path, args: list[str], environ: dict[str, str], named: str
) -> None:
    (tmp_path / "job.yaml").write_text(COMPLETE_RECIPE, encoding="utf-8")
    with FakeOpenAIServer(lambda r: "never") as server:
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, *args, cwd=tmp_path,
            environ=env(**environ),
        )  # fmt: skip
        assert server.requests == []
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert named in done.stderr
    assert not (tmp_path / ".planloom").exists()  # nothing begun


@pytest.mark.parametrize(
    ("block", "said"),
    [
        ("{model: scripted, timeout: 0}", "timeout"),
        ("{model: scripted, max_tokens: many}", "max_tokens"),
        ("{model: scripted, retries: -1}", "retries"),
        ("{model: scripted, max_tokenz: 5}", "max_tokenz"),
    ],
)
def test_a_bad_llm_block_is_a_located_error(tmp_path: Path, block: str, said: str) -> None:
    text = COMPLETE_RECIPE.replace("llm: {model: scripted}", f"llm: {block}")
    (tmp_path / "job.yaml").write_text(text, encoding="utf-8")
    done = planloom("validate", "job.yaml", cwd=tmp_path)
    assert done.returncode == 2, done.stderr + done.stdout
    output = done.stdout + done.stderr
    assert "job.yaml:3:" in output, output
    assert said in output


AGENT_RECIPE = """\
version: 1
name: bounded
llm: {model: scripted}
capabilities:
  fs: {root: work, read: true}
  llm: {}
steps:
  - id: think
    agent: {goal: "Read a.txt", tools: [fs.read], max_iterations: 3}
  - id: ask
    tool: llm.complete
    params: {prompt: hello}
    depends_on: [think]
  - id: pick
    tool: llm.extract
    params:
      prompt: Give me a number
      schema: {type: object, properties: {n: {type: integer}}, required: [n]}
    depends_on: [ask]
"""


def agent_then_llm(request: ChatRequest) -> ChatReply | str | dict[str, Any]:
    if request.tool_names() and not request.tool_results():
        return ChatReply(tool_calls=[ToolCall("fs__read", {"path": "a.txt"})])
    if request.tool_names():
        return "a.txt holds apples"
    if request.response_format is not None:
        return {"n": 3}
    return "hello"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["variable", "default"])
def test_max_tokens_goes_with_every_request(workspace: Path, how: str) -> None:
    (workspace / "job.yaml").write_text(AGENT_RECIPE, encoding="utf-8")
    environ = env(PLANLOOM_LLM_MAX_TOKENS="77") if how == "variable" else env()
    with FakeOpenAIServer(agent_then_llm) as server:
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, "--json", cwd=workspace,
            environ=environ,
        )  # fmt: skip
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert len(requests) == 4  # the agent twice, llm.complete, llm.extract
    expected = 77 if how == "variable" else 2048
    assert [(r.model_extra or {}).get("max_tokens") for r in requests] == [expected] * 4


# -- refusals ---------------------------------------------------------------------------------


def test_a_500_naming_response_format_downgrades_at_once() -> None:
    with FakeOpenAIServer(lambda r: {"n": 5}) as server:
        server.inject(Fault.status(500, LLAMA_CPP_REFUSAL))
        sleeps = Sleeps()

        async def ask(client: LLMClient) -> Any:
            client.sleep = sleeps
            return await client.chat_json(USER, SCHEMA), client.json_mode

        value, mode = client_call(server, ask)
    assert value == {"n": 5}
    assert mode == "json_object_schema"  # llama-cpp-python's own form, which it enforces
    formats = [(r.response_format or {}).get("type") for r in server.requests]
    assert formats == ["json_schema", "json_object"]  # one refused request, no retries
    assert sleeps.delays == []


@pytest.mark.slow
def test_a_refusal_through_an_llm_extract_step_costs_one_request(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(EXTRACT_RECIPE, encoding="utf-8")
    with FakeOpenAIServer(lambda r: {"n": 5}) as server:
        server.inject(Fault.status(500, LLAMA_CPP_REFUSAL))
        started = time.monotonic()
        done = planloom("run", "job.yaml", "--base-url", server.base_url, "--json", cwd=tmp_path)
        took = time.monotonic() - started
        formats = [(r.response_format or {}).get("type") for r in server.requests]
    assert done.returncode == 0, done.stderr
    assert result_of(done)["steps"]["pick"]["output"] == {"data": {"n": 5}}
    assert formats == ["json_schema", "json_object"]
    assert took < 7  # the four attempts of a "transient" 500 took 1 + 2 + 4 s


def test_a_refusal_body_is_shown_on_one_line() -> None:
    with FakeOpenAIServer(lambda r: "never") as server:
        server.inject(Fault.status(422, LLAMA_CPP_REFUSAL))
        with pytest.raises(LLMError) as caught:
            client_call(server, lambda c: c.chat(USER))
    message = caught.value.message
    assert "\n" not in message
    assert "response_format.type Input should be 'text' or 'json_object'" in message


@pytest.mark.slow
def test_a_traceback_in_an_error_body_is_shown_as_its_last_line(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(COMPLETE_RECIPE, encoding="utf-8")
    with FakeOpenAIServer(lambda r: "never") as server:
        server.inject(Fault.status(500, TRACEBACK_BODY))
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, "--json", cwd=tmp_path,
            environ=env(PLANLOOM_LLM_RETRIES="0"),
        )  # fmt: skip
        sent = len(server.requests)
    assert done.returncode == 1, done.stderr
    assert sent == 1  # PLANLOOM_LLM_RETRIES=0
    error = result_of(done)["steps"]["ask"]["error"]
    # on one line, its escapes made visible as everywhere else (engine.sanitize)
    assert error.endswith(
        "answered 500: RuntimeError: ⟨ESC⟩[31mthe model ran out of memory⟨ESC⟩[0m"
    ), error
    for shown in (error, done.stderr):
        assert "Traceback" not in shown
        assert "File " not in shown
        assert "\x1b" not in shown


# -- the preflight, and a key refused at the first call ---------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("preflight", [None, "chat"])
def test_the_preflight_sends_no_chat_request_unless_asked(
    tmp_path: Path, preflight: str | None
) -> None:
    (tmp_path / "job.yaml").write_text(COMPLETE_RECIPE, encoding="utf-8")
    flags = ["--preflight", preflight] if preflight else []
    with FakeOpenAIServer(ScriptedModel.sequence("the only answer")) as server:
        done = planloom(
            "run", "job.yaml", "--base-url", server.base_url, "--json", *flags, cwd=tmp_path
        )  # fmt: skip
        probes, lists = len(server.probes), server.model_lists
    assert done.returncode == 0, done.stderr
    assert result_of(done)["steps"]["ask"]["output"] == {"text": "the only answer"}
    assert lists == 1
    assert probes == (1 if preflight == "chat" else 0)


REFUSED_RECIPE = """\
version: 1
name: refused
llm: {model: scripted}
capabilities:
  fs: {root: work, read: true, write: true}
steps:
  - id: save
    tool: fs.write
    params: {path: written.txt, content: before the model}
  - id: think
    agent: {goal: "Read written.txt", tools: [fs.read], max_iterations: 2}
    depends_on: [save]
    retry: {attempts: 3, initial: 0}
    fallback: {agent: {goal: "Say hello", tools: [fs.read], max_iterations: 1}}
"""


@pytest.mark.slow
def test_a_key_refused_at_the_first_call_stops_the_run_and_resume_goes_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "job.yaml").write_text(REFUSED_RECIPE, encoding="utf-8")
    with FakeOpenAIServer(lambda r: "never", chat_status=401) as server:
        base_url = server.base_url
        done = planloom(
            "run", "job.yaml", "--base-url", base_url, "--yes", "--json", cwd=tmp_path,
            environ=env(OPENAI_API_KEY="sk-refused-key-0123456789"),
        )  # fmt: skip
        sent = len(server.requests)
    assert done.returncode == 1, done.stderr
    result = result_of(done)
    assert result["steps"]["save"]["status"] == "succeeded"
    think = result["steps"]["think"]
    assert think["status"] == "failed"
    assert f"{base_url}/chat/completions refused the API key (401)" in think["error"]
    assert "OPENAI_API_KEY" in think["error"]
    assert "sk-refused-key" not in done.stderr + done.stdout
    assert sent == 1  # its retries and its fallback did not ask again
    assert f"planloom resume {result['run_id']}" in done.stderr

    with FakeOpenAIServer(lambda r: "written.txt says: before the model") as fixed:
        resumed = planloom(
            "resume", result["run_id"], "--base-url", fixed.base_url, "--yes", "--json",
            cwd=tmp_path, environ=env(OPENAI_API_KEY="sk-right"),
        )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    again = result_of(resumed)
    assert again["status"] == "succeeded"
    assert again["steps"]["think"]["status"] == "succeeded"


def test_the_refusal_message_is_the_preflights(tmp_path: Path) -> None:
    with FakeOpenAIServer(lambda r: "never", api_key="right") as server:
        with pytest.raises(ConfigurationError) as at_preflight:
            client_call(server, lambda c: c.preflight(), api_key=SecretStr("wrong"))
        with pytest.raises(ConfigurationError) as at_call:
            client_call(server, lambda c: c.chat(USER), api_key=SecretStr("wrong"))
    first = str(at_preflight.value).split(" refused the API key ", 1)[1]
    second = str(at_call.value).split(" refused the API key ", 1)[1]
    assert first == second + "; nothing was run"


@pytest.mark.slow
def test_a_recorded_refusal_replays_offline_as_it_went_live(workspace: Path) -> None:
    """A cassette of a planning whose first request was refused for its `response_format`
    (as every recording against llama-cpp-python is): the replay steps down the same way,
    with the server gone, and two replays print the same bytes."""
    with FakeOpenAIServer(ScriptedModel.sequence(READ_PLAN)) as server:
        server.inject(Fault.status(500, LLAMA_CPP_REFUSAL))
        live = planloom(
            "plan", "Read a.txt", "--capabilities", "caps.yaml", "--model", "m",
            "--base-url", server.base_url, "--yes", "--json", "--record", "c.yaml",
            cwd=workspace,
        )  # fmt: skip
    assert live.returncode == 0, live.stderr
    assert result_of(live)["steps"]["read_a"]["status"] == "succeeded"
    replays = [planloom("replay", "c.yaml", "--json", cwd=workspace) for _ in range(2)]
    for replay in replays:
        assert replay.returncode == 0, replay.stderr
        assert "Traceback" not in replay.stderr
    assert replays[0].stdout == replays[1].stdout
    assert result_of(replays[0])["steps"]["read_a"]["output"]["content"] == "apples"


@pytest.mark.slow
def test_a_plan_cut_at_max_tokens_goes_to_repair_as_cut_off(workspace: Path) -> None:
    cut = ChatReply('{"steps": [{"id": "read_a", "tool": "fs.read", "par', finish_reason="length")
    with FakeOpenAIServer(ScriptedModel.sequence(cut, READ_PLAN)) as server:
        done = plan_read(server, workspace, "--llm-max-tokens", "40")
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert result_of(done)["steps"]["read_a"]["status"] == "succeeded"
    (problem,) = repair_problems(requests[1])
    assert "(cut-off)" in problem
    assert "the answer was cut off at max_tokens 40" in problem
