"""One client layer over `openai.AsyncOpenAI` for any OpenAI-compatible endpoint.

Configuration comes from the CLI, then the environment (`PLANLOOM_MODEL`, `OPENAI_BASE_URL`,
`OPENAI_API_KEY`), then the recipe's `llm:` block (see `engine.llm_config`). Calls retry
429, 5xx, timeouts and connection errors with 1 s, 2 s, 4 s backoff (a `Retry-After` header
wins); 400 is not retried; 401/403 and a missing key are `ConfigurationError`s, found by
`preflight()` (which lists the models and sends a one-token chat request) before any step
runs. Every call, answered or failed, counts against the run's budget; answered ones record
tokens and latency. openai's exceptions are translated here, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from engine._limits import TooDeep, decode_json, loads_json
from engine._secrets import Secrets
from engine.errors import ConfigurationError, PlanloomError, StepError, StepFailed, StepTimeout
from engine.llm_config import Budget, LLMConfig, resolve_llm_config

if TYPE_CHECKING:
    import openai

__all__ = [
    "Budget",
    "ChatResult",
    "LLMClient",
    "LLMConfig",
    "LLMError",
    "ModelCallCancelled",
    "NoJSON",
    "ToolCallRequest",
    "extract_json",
    "resolve_llm_config",
]

BACKOFF = (1.0, 2.0, 4.0)
MAX_RETRY_AFTER = 60.0

Sleep = Callable[[float], Awaitable[None]]


class LLMError(StepFailed):
    """A model call failed for good (after retries), or its answer was unusable.

    `status` is the HTTP status the endpoint answered with, when it answered one.
    """

    def __init__(self, message: str, *, status: int | None = None, **where: Any) -> None:
        super().__init__(message, **where)
        self.status = status


class ModelCallCancelled(StepFailed):
    """A model call cut off before it answered: it was made, and counts."""


class NoJSON(LLMError):
    """The model answered, but its answer holds no usable JSON value.

    Attributes:
        rule: `not-json`, or `too-deep` when the JSON nests deeper than `MAX_DEPTH`.
    """

    rule = "not-json"

    def __init__(self, message: str, *, rule: str = "not-json") -> None:
        super().__init__(message)
        self.rule = rule


class _NotACompletion(Exception):
    """The endpoint answered 200 with something that is not a chat completion."""


class ToolCallRequest(BaseModel):
    """A tool call the model asked for; `arguments` is its raw JSON text."""

    id: str
    name: str
    arguments: str


class ChatResult(BaseModel):
    """One model answer."""

    content: str | None = None
    tool_calls: list[ToolCallRequest] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: float = 0.0


JsonMode = Literal["json_schema", "json_object", "text"]


class Answers(Protocol):
    """Where a model's answers come from: the live endpoint (`LiveAnswers`), or a cassette
    that records them or serves them (`engine.recording.Tape`)."""

    async def chat(
        self,
        request: dict[str, Any],
        live: Callable[[dict[str, Any]], Awaitable[ChatResult]],
        served: Callable[[ChatResult], None],
    ) -> ChatResult:
        """The answer to `request`; `live(request)` asks the endpoint. An answer given
        without asking it is passed to `served`, to be counted as the live call was."""
        ...


class LiveAnswers:
    """Every answer comes from the endpoint."""

    async def chat(
        self,
        request: dict[str, Any],
        live: Callable[[dict[str, Any]], Awaitable[ChatResult]],
        served: Callable[[ChatResult], None],
    ) -> ChatResult:
        return await live(request)


@dataclass
class LLMClient:
    """Chat calls for one run, with retries, budget and usage accounting."""

    config: LLMConfig
    budget: Budget = field(default_factory=Budget)
    sleep: Sleep = asyncio.sleep
    client: Any = None
    json_mode: JsonMode = "json_schema"  # downgraded when the endpoint refuses it
    on_call: Callable[[ChatResult], None] | None = None  # per-call usage, e.g. as events
    answers: Answers = field(default_factory=lambda: LiveAnswers())  # or a cassette
    secrets: Secrets = field(default_factory=Secrets)  # redacted from all the model is sent
    # Live calls at once (a run's `limits.per_family: {llm: N}`); answers from a cassette
    # or a journal wait for nothing.
    limit: asyncio.Semaphore | None = None
    # Each wait before a retry (a 429's Retry-After, the backoff): its seconds and why.
    on_wait: Callable[[float, str], None] | None = None
    # A call that failed for good (retries spent, key refused): the error and its seconds.
    on_fail: Callable[[PlanloomError, float], None] | None = None

    def __post_init__(self) -> None:
        if self.client is None:
            import openai  # here, not at the top: a command that calls no model skips 0.4 s

            key = self.config.api_key.get_secret_value() if self.config.api_key else "none"
            self.client = openai.AsyncOpenAI(
                api_key=key,
                base_url=self.config.base_url,
                timeout=self.config.timeout,
                max_retries=0,  # retries are ours, with our backoff and budget
            )

    async def aclose(self) -> None:
        await self.client.close()

    async def preflight(self) -> None:
        """Fail before any step runs if the endpoint refuses the key or cannot be reached.

        Two requests: `GET /models` (is anything there?), then a one-token chat completion
        (`max_tokens=1`), because some endpoints answer `/models` to anyone and refuse the
        key only on the chat endpoint the run uses. The probe is a check, not part of the
        run: it is not counted in the budget or in `usage`, and never recorded in a
        cassette. Only 401/403 (and no connection at all) fail: any other answer to the
        probe (a 400 for `max_tokens` on models that want `max_completion_tokens`, a 429,
        a 5xx, a slow answer) is left for the run's own calls, which retry and report it.

        Raises:
            ConfigurationError: 401/403, or the endpoint cannot be reached at all.
        """
        import openai

        where = self.config.base_url or "https://api.openai.com/v1"
        try:
            await self.client.models.list()
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise _refused(exc, f"{where}/models") from exc
        except openai.APIConnectionError as exc:
            raise ConfigurationError(
                f"cannot reach the model endpoint {where}: {type(exc).__name__}; check "
                "--base-url (or OPENAI_BASE_URL) and that the server is running"
            ) from exc
        except openai.APIStatusError:
            pass  # no /models on this server (some compatible servers): the probe checks
        try:
            await self.client.chat.completions.create(
                model=self.config.model,
                messages=[{"role": "user", "content": "Reply with one word: ok"}],
                max_tokens=1,
            )
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise _refused(exc, f"{where}/chat/completions") from exc
        except (openai.APIError, ValueError):
            pass  # not a key problem: the run's own calls retry it and report it

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> ChatResult:
        """One chat completion, retried on transient failures.

        Raises:
            BudgetExceeded: the run's model budget is spent.
            ConfigurationError: the endpoint refused the key (401/403).
            LLMError: a non-retryable error, or retries exhausted.
            StepTimeout: the last attempt timed out.
        """
        self.budget.check()
        # Tool output, tool descriptions and errors may quote a secret (a token a server
        # echoes back): the model never sees one. The environment is read again each time,
        # for variables grants declared secret since the client was made.
        self.secrets.add_environ()
        messages = self.secrets.redact_value(messages)
        kwargs: dict[str, Any] = {"model": self.config.model, "messages": messages}
        if tools:
            kwargs["tools"] = self.secrets.redact_value(tools)
        if response_format is not None:
            kwargs["response_format"] = response_format
        if self.config.temperature is not None:
            kwargs["temperature"] = self.config.temperature
        started = time.monotonic()
        sent = False  # whether the call went out (and so counts, even if cut off)

        async def call(request: dict[str, Any]) -> ChatResult:
            nonlocal sent
            if self.limit is None:
                sent = True
                return await self._live(request)
            async with self.limit:
                sent = True
                return await self._live(request)

        try:
            result = await self.answers.chat(kwargs, call, self._count)
        except (StepError, ConfigurationError) as exc:  # a call made that failed
            if self.on_fail is not None:
                self.on_fail(exc, time.monotonic() - started)
            raise
        except asyncio.CancelledError:  # cut off (a timeout, Ctrl-C): made all the same
            if sent and self.on_fail is not None:
                cut = ModelCallCancelled("the model call was cut off (a timeout, or Ctrl-C)")
                self.on_fail(cut, time.monotonic() - started)
            raise
        if self.on_call is not None:
            self.on_call(result)
        return result

    def _waiting(self, state: RetryCallState) -> None:
        if self.on_wait is not None:
            failed = state.outcome.exception() if state.outcome is not None else None
            seconds = state.next_action.sleep if state.next_action is not None else 0.0
            self.on_wait(seconds, _why(failed))

    async def _live(self, kwargs: dict[str, Any]) -> ChatResult:
        import openai

        retrying = AsyncRetrying(
            stop=stop_after_attempt(len(BACKOFF) + 1),
            wait=_backoff,
            retry=retry_if_exception(_transient),
            sleep=self.sleep,
            before_sleep=self._waiting,
            reraise=True,
        )
        started = time.monotonic()
        self.budget.calls += 1  # counted when sent: a call that fails is still a call made
        try:
            async for attempt in retrying:
                with attempt:
                    response = await self.client.chat.completions.create(**kwargs)
                    if isinstance(response, str | bytes):  # an HTML page from a proxy...
                        raise _NotACompletion(f"not JSON: {str(response)[:200]!r}")
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise ConfigurationError(
                f"the model endpoint refused the API key ({exc.status_code})"
            ) from exc
        except openai.APITimeoutError as exc:
            raise StepTimeout(
                f"the model did not answer within {self.config.timeout:g} s "
                f"({len(BACKOFF) + 1} attempts)"
            ) from exc
        except openai.APIStatusError as exc:
            raise LLMError(
                f"the model endpoint answered {exc.status_code}: {_message(exc)}",
                status=exc.status_code,
            ) from exc
        except openai.APIError as exc:
            raise LLMError(f"model call failed: {type(exc).__name__}: {exc}") from exc
        except (ValueError, _NotACompletion) as exc:  # JSONDecodeError from the client
            raise LLMError(f"the model endpoint sent a malformed response: {exc}") from exc
        return self._account(response, time.monotonic() - started)

    def _count(self, result: ChatResult) -> None:
        """Count a replayed answer (or recorded failure) as its live call was counted."""
        self.budget.calls += 1
        self.budget.prompt_tokens += result.prompt_tokens
        self.budget.completion_tokens += result.completion_tokens

    def _account(self, response: Any, latency: float) -> ChatResult:
        self.budget.latency += latency
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        self.budget.prompt_tokens += prompt
        self.budget.completion_tokens += completion
        try:
            message = response.choices[0].message
        except (AttributeError, IndexError, TypeError) as exc:
            raise LLMError(
                f"the model endpoint sent something that is not a chat completion: "
                f"{str(response)[:200]!r}"
            ) from exc
        try:
            calls = [
                ToolCallRequest(
                    id=call.id or f"call_{index}",
                    name=call.function.name,
                    arguments=call.function.arguments or "{}",
                )
                for index, call in enumerate(message.tool_calls or [])
            ]
            return ChatResult(
                content=message.content,
                tool_calls=calls,
                prompt_tokens=prompt,
                completion_tokens=completion,
                latency=latency,
            )
        except (ValidationError, AttributeError, TypeError) as exc:
            raise LLMError(f"the model's reply is malformed: {str(exc)[:300]}") from exc

    async def chat_json(
        self, messages: list[dict[str, Any]], schema: dict[str, Any], *, name: str = "answer"
    ) -> Any:
        """A JSON answer: structured output where the endpoint supports it, else JSON mode,
        else tolerant extraction from text.

        Raises:
            LLMError: the answer holds no JSON.
        """
        while True:
            if self.json_mode == "json_schema":
                response_format: dict[str, Any] | None = {
                    "type": "json_schema",
                    "json_schema": {"name": name, "schema": schema},
                }
            elif self.json_mode == "json_object":
                response_format = {"type": "json_object"}
            else:
                response_format = None
            try:
                result = await self.chat(messages, response_format=response_format)
            except LLMError as exc:
                if self.json_mode != "text" and _refuses_json_mode(exc):
                    self.json_mode = "json_object" if self.json_mode == "json_schema" else "text"
                    continue
                raise
            return extract_json(result.content or "")


def _refuses_json_mode(error: LLMError) -> bool:
    """Whether the endpoint refused the call's `response_format`: a 400 or 422 that speaks
    of JSON, or any 4xx that names `response_format`. The status is the error's, or (an
    error a cassette or a journal served) the one its message quotes."""
    status = error.status
    if status is None:
        quoted = _ANSWERED.search(error.message)
        status = int(quoted.group(1)) if quoted else None
    if status is None or not 400 <= status < 500:
        return False
    text = error.message.lower()
    return "response_format" in text or (status in (400, 422) and "json" in text)


_ANSWERED = re.compile(r"the model endpoint answered (\d{3}):")


def extract_json(text: str) -> Any:
    """The first JSON value in `text`: all of it, a fenced block, or the first {...}/[...].

    Raises:
        NoJSON: no JSON value could be found, or it nests deeper than `MAX_DEPTH` (its
            `rule` is then `too-deep`: a value nested in it is not the answer either).
    """
    candidates = [text.strip()]
    candidates += re.findall(r"```(?:json)?\s*(.*?)```", text, re.S)
    try:
        for candidate in candidates:
            with contextlib.suppress(json.JSONDecodeError):
                return loads_json(candidate)
        for index, char in enumerate(text):
            if char in "{[":
                with contextlib.suppress(json.JSONDecodeError):
                    return decode_json(text, index)[0]
    except TooDeep as exc:
        raise NoJSON(f"the model's answer is unusable: {exc.message}", rule=exc.rule) from None
    raise NoJSON(f"the model's answer holds no JSON: {text[:200]!r}")


def _why(exc: BaseException | None) -> str:
    """What a retried model call met, in a few words (no body: it may quote the prompt)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return "rate limited (429)" if exc.status_code == 429 else f"status {exc.status_code}"
    if isinstance(exc, openai.APITimeoutError):
        return "timed out"
    if isinstance(exc, openai.APIConnectionError):
        return "connection failed"
    return "a broken response"


def _transient(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    # A body that is not JSON (the client raises JSONDecodeError) is a broken response too.
    return isinstance(
        exc, openai.APITimeoutError | openai.APIConnectionError | ValueError | _NotACompletion
    )


def _backoff(state: RetryCallState) -> float:
    """1 s, 2 s, 4 s; a Retry-After header (seconds) wins, capped at a minute."""
    import openai

    delay = BACKOFF[min(state.attempt_number, len(BACKOFF)) - 1]
    outcome = state.outcome
    exc = outcome.exception() if outcome is not None else None
    if isinstance(exc, openai.APIStatusError):
        header = exc.response.headers.get("retry-after")
        with contextlib.suppress(ValueError):  # an HTTP date: keep our own backoff
            delay = min(float(header), MAX_RETRY_AFTER) if header is not None else delay
    return delay


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:500]
    return str(exc)[:500]


def _refused(exc: openai.APIStatusError, endpoint: str) -> ConfigurationError:
    """The configuration error for a 401/403: which endpoint, and what to fix."""
    # The server's message is left out: some echo part of the key they refused.
    return ConfigurationError(
        f"the model endpoint {endpoint} refused the API key ({exc.status_code}): check "
        "OPENAI_API_KEY, --base-url (or OPENAI_BASE_URL) and --model (or PLANLOOM_MODEL); "
        "nothing was run"
    )
