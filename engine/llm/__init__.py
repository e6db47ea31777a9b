"""One client layer over `openai.AsyncOpenAI` for any OpenAI-compatible endpoint.

Configuration comes from the CLI, then the environment (`PLANLOOM_MODEL`, `OPENAI_BASE_URL`,
`OPENAI_API_KEY`, `PLANLOOM_LLM_TIMEOUT`...), then the recipe's `llm:` block (see
`engine.llm.config`). Every request carries `max_tokens`. Calls stream (`stream: true`, usage
included) and are assembled into the answer a plain completion gives; an endpoint that
refuses streaming (a 4xx naming `stream`) is asked again at once without it, and from then on
for the run. `timeout` bounds a whole call: on expiry, or when the call is cancelled (a step
timeout, Ctrl-C), the stream is closed, and with it the connection, which is what stops a
local server generating. Calls retry 429, 5xx, timeouts, connection errors and broken answers
(a stream cut before its end) (`retries` times, 3 by default) with 1 s, 2 s, 4 s backoff (a
`Retry-After` header wins); 400 is not retried, nor a timeout on loopback unless `retries` is
set, nor an error whose body names `response_format`: `chat_json` then asks at once in a
simpler structured-output mode. 401/403 and a missing key are `ConfigurationError`s, found by
`preflight()` (`GET /models`) before any step runs, or by the first call. Every call,
answered or failed, counts against the run's budget; answered ones record tokens and
latency. openai's exceptions are translated here, once; a server's error body is shown on
one clean line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, get_args

from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from engine.errors import ConfigurationError, PlanloomError, StepError, StepFailed, StepTimeout
from engine.limits import TooDeep, loads_json
from engine.llm._text import bad_json, one_line, quoted_at, unfenced
from engine.llm.config import Budget, LLMConfig, resolve_llm_config
from engine.model import StructuredOutput
from engine.model_schema import strict_schema, without_added_nulls
from engine.redaction import Secrets

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
    "PromptTooLong",
    "ToolCallRequest",
    "estimate_tokens",
    "extract_json",
    "resolve_llm_config",
]

BACKOFF = (1.0, 2.0, 4.0)
MAX_RETRY_AFTER = 60.0
PROGRESS_EVERY = 0.5
"""Seconds at least between two reports of a streaming answer's progress (`on_progress`)."""

Sleep = Callable[[float], Awaitable[None]]


class LLMError(StepFailed):
    """A model call failed for good (after retries), or its answer was unusable.

    `status` is the HTTP status the endpoint answered with, when it answered one.
    """

    status: int | None = None  # (also what an error rebuilt from a recording starts with)

    def __init__(self, message: str, *, status: int | None = None, **where: Any) -> None:
        super().__init__(message, **where)
        self.status = status


class ModelCallCancelled(StepFailed):
    """A model call cut off before it answered: it was made, and counts."""


CHARS_PER_TOKEN = 3.0
"""What `estimate_tokens` takes a token to be: fewer characters than English prose's four,
as JSON, code and paths are; an estimate that errs towards not fitting."""


def estimate_tokens(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> int:
    """About how many tokens `messages` and `tools` take in a prompt (no tokenizer: the
    endpoint's is unknown): their JSON's characters over CHARS_PER_TOKEN, and a few a
    message for its role and separators."""
    text = json.dumps([messages, tools or []], ensure_ascii=False, default=str)
    return int(len(text) / CHARS_PER_TOKEN) + 4 * len(messages)


class PromptTooLong(ConfigurationError):
    """A request estimated not to fit the model's context window with its `max_tokens`."""

    def __init__(self, tokens: int, max_tokens: int, window: int) -> None:
        super().__init__(
            f"the request takes about {tokens} tokens, and with max_tokens {max_tokens} it "
            f"does not fit the model's context window of {window} (llm: context_window, "
            "--llm-context or PLANLOOM_LLM_CONTEXT): grant fewer tools, lower max_tokens, "
            "or use a model with a larger context"
        )
        self.tokens = tokens
        self.window = window


class NoJSON(LLMError):
    """The model answered, but its answer is not one usable JSON value.

    Attributes:
        rule: `bad-json` (not exactly one complete JSON value), `cut-off` (the answer
            stopped at `max_tokens`), or `too-deep` (the JSON nests deeper than `MAX_DEPTH`).
    """

    rule = "bad-json"

    def __init__(self, message: str, *, rule: str = "bad-json") -> None:
        super().__init__(message)
        self.rule = rule


class _NotACompletion(Exception):
    """The endpoint answered 200 with something that is not a chat completion."""


class _CutShort(Exception):
    """A streamed answer ended before its finish chunk (the connection or body ended)."""


class _TimedOut(Exception):
    """A call ran past the configured `timeout`, counted over the whole call."""


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
    # Why the answer ended ("stop", "length", "tool_calls"...); None when not said (and in
    # cassettes and journals written before it was kept).
    finish_reason: str | None = None


JsonMode = StructuredOutput
JSON_MODES: tuple[JsonMode, ...] = get_args(StructuredOutput)
"""Structured output, tried in this order as endpoints refuse it: OpenAI's `json_schema`;
llama-cpp-python's own `{"type": "json_object", "schema": ...}` (it refuses the first with a
500, and enforces this one by a grammar); plain JSON mode; none (the prompt alone)."""


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
    # The request field the answer's length is bounded by: `max_completion_tokens` for
    # endpoints that refuse `max_tokens` (OpenAI's reasoning models).
    tokens_field: str = "max_tokens"
    # The endpoint refused the key (401/403): every later call fails at once, unsent, with
    # the same message (a step's retries, its fallback, the other steps), so the run ends.
    refused: str | None = None
    # While an answer streams: its completion chunks so far (about a token each), at most
    # every PROGRESS_EVERY seconds.
    on_progress: Callable[[int], None] | None = None
    # Whether calls stream; False once the endpoint refused `stream`, for the rest of the run.
    streams: bool = True

    def __post_init__(self) -> None:
        if self.config.structured_output is not None:
            self.json_mode = self.config.structured_output
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

    async def preflight(self, *, chat: bool = False) -> None:
        """Fail before any step runs if the endpoint refuses the key or cannot be reached.

        `GET /models` (is anything there, and does it take the key?); with `chat`, then a
        one-token chat completion (`max_tokens=1`), for endpoints that answer `/models` to
        anyone and refuse the key only on the chat endpoint. The chat probe costs a
        generation, so it is asked for (`--preflight chat`), not made by default: a key
        refused at the first real call stops the run there, with the same message. The
        probe is a check, not part of the run: it is not counted in the budget or in
        `usage`, and never recorded in a cassette. Only 401/403 (and no connection at all)
        fail: any other answer (a 404 for a server with no `/models`, a 400 for
        `max_tokens` on models that want `max_completion_tokens`, a 429, a 5xx, a slow
        answer) is left for the run's own calls, which retry and report it.

        Raises:
            ConfigurationError: 401/403, or the endpoint cannot be reached at all.
        """
        import openai

        where = self.config.base_url or "https://api.openai.com/v1"
        try:
            await self.client.models.list()
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise _refused(exc, f"{where}/models", before=True) from exc
        except openai.APIConnectionError as exc:
            raise ConfigurationError(
                f"cannot reach the model endpoint {where}: {type(exc).__name__}; check "
                "--base-url (or OPENAI_BASE_URL) and that the server is running"
            ) from exc
        except openai.APIStatusError:
            pass  # no /models on this server (some compatible servers): the calls will say
        if not chat:
            return
        try:
            await self.client.chat.completions.create(
                model=self.config.model,
                messages=[{"role": "user", "content": "Reply with one word: ok"}],
                max_tokens=1,
            )
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise _refused(exc, f"{where}/chat/completions", before=True) from exc
        except (openai.APIError, ValueError):
            pass  # not a key problem: the run's own calls retry it and report it

    def check_fits(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> None:
        """Nothing when `messages` (and `tools`) fit the model's context window with room
        for `max_tokens`, or when no window is configured.

        Raises:
            PromptTooLong: they do not; nothing was sent.
        """
        window = self.config.context_window
        if window is None:
            return
        tokens = estimate_tokens(messages, tools)
        if tokens + self.config.max_tokens > window:
            raise PromptTooLong(tokens, self.config.max_tokens, window)

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
            ConfigurationError: the endpoint refused the key (401/403), now or before.
            PromptTooLong: the request would not fit the context window (`check_fits`).
            LLMError: a non-retryable error, or retries exhausted.
            StepTimeout: the last attempt timed out.
        """
        if self.refused is not None:
            raise ConfigurationError(self.refused)
        self.budget.check()
        # Tool output, tool descriptions and errors may quote a secret (a token a server
        # echoes back): the model never sees one. The environment is read again each time,
        # for variables grants declared secret since the client was made.
        self.secrets.add_environ()
        messages = self.secrets.redact_value(messages)
        kwargs: dict[str, Any] = {"model": self.config.model, "messages": messages}
        if tools:
            kwargs["tools"] = self.secrets.redact_value(tools)
        self.check_fits(messages, tools)
        if response_format is not None:
            kwargs["response_format"] = response_format
        if self.config.temperature is not None:
            kwargs["temperature"] = self.config.temperature
        # Always bounded: an answer that runs on would hold the step (and a local server).
        kwargs[self.tokens_field] = self.config.max_tokens
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
            if isinstance(exc, ConfigurationError):
                self.refused = str(exc)
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
        started = time.monotonic()
        self.budget.calls += 1  # counted when sent: a call that fails is still a call made
        while True:  # at most three requests: each refusal below is met once a run
            streams = self.streams  # this request's: calls run at once, and learn together
            try:
                response = await self._create(kwargs, streams=streams)
                break
            except LLMError as exc:
                if streams and _refuses_streaming(exc):
                    # A server that does not stream: asked again at once, and from now on,
                    # without `stream` (a cancelled call then leaves it generating).
                    self.streams = False
                    continue
                other = "max_completion_tokens"
                if exc.status != 400 or self.tokens_field == other or other not in exc.message:
                    raise
                # The endpoint wants the newer field (OpenAI's reasoning models): the same
                # bound, named as it asks, for this call and the next.
                self.tokens_field = other
                kwargs = {k: v for k, v in kwargs.items() if k != "max_tokens"}
                kwargs[other] = self.config.max_tokens
        return self._account(response, time.monotonic() - started)

    async def _create(self, kwargs: dict[str, Any], *, streams: bool) -> Any:
        """One chat completion request, with its retries; openai's errors translated."""
        import openai

        config = self.config
        retrying = AsyncRetrying(
            stop=stop_after_attempt(config.retries + 1),
            wait=_backoff,
            retry=retry_if_exception(
                lambda exc: _transient(exc) and (config.retry_timeouts or not _is_timeout(exc))
            ),
            sleep=self.sleep,
            before_sleep=self._waiting,
            reraise=True,
        )
        attempts = 0
        where = config.base_url or "https://api.openai.com/v1"
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    response = await self._attempt(kwargs, streams=streams)
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise _refused(exc, f"{where}/chat/completions", before=False) from exc
        except (openai.APITimeoutError, _TimedOut) as exc:
            raise StepTimeout(_timed_out(config, attempts, streamed=streams)) from exc
        except openai.APIStatusError as exc:
            raise LLMError(
                f"the model endpoint answered {exc.status_code}: {_message(exc)}",
                status=exc.status_code,
            ) from exc
        except openai.APIError as exc:
            raise LLMError(f"model call failed: {type(exc).__name__}: {exc}") from exc
        except (ValueError, _NotACompletion, _CutShort) as exc:  # JSONDecodeError...
            raise LLMError(f"the model endpoint sent a malformed response: {exc}") from exc
        return response

    async def _attempt(self, kwargs: dict[str, Any], *, streams: bool) -> Any:
        """One request, streamed unless the endpoint refused it, bounded by `timeout` as a
        whole (the client's own timeout bounds each read only, which a slow stream never
        trips). Returns a completion, assembled from the stream's chunks when streamed."""
        create = self.client.chat.completions.create
        try:
            async with asyncio.timeout(self.config.timeout):
                if streams:
                    stream = await create(
                        **kwargs, stream=True, stream_options={"include_usage": True}
                    )
                    response = await self._assembled(stream)
                else:
                    response = await create(**kwargs)
        except TimeoutError as exc:  # asyncio.timeout's own: the stream is closed already
            raise _TimedOut() from exc
        if isinstance(response, str | bytes):  # an HTML page from a proxy...
            raise _NotACompletion(f"not JSON: {one_line(str(response), 200)!r}")
        return response

    async def _assembled(self, stream: Any) -> Any:
        """The completion a streamed answer adds up to: the content, each tool call joined
        by its `index` from its id, name and arguments deltas, the finish reason, and the
        usage of the last chunk (when the endpoint sends none, the chunks are counted as the
        completion's tokens and the prompt's are not known: 0). The stream is closed
        however this ends (cancelled, timed out, broken), so the connection is too.

        Raises:
            _CutShort: the stream ended before a chunk gave the finish reason.
            _NotACompletion: a 200 that is neither an event stream nor JSON.
        """
        try:
            kind = str(stream.response.headers.get("content-type", ""))
            if "event-stream" not in kind:  # a server that answers as if not asked to stream
                return _plain(await _body(stream.response))
            answer = _Assembly()
            reported = time.monotonic()
            with _transport(stream.response.request):  # (a body cut short, a reset)
                async for chunk in stream:
                    answer.add(chunk)
                    now = time.monotonic()
                    if (
                        self.on_progress is not None
                        and answer.chunks
                        and (now - reported >= PROGRESS_EVERY)
                    ):
                        reported = now
                        self.on_progress(answer.chunks)
        finally:
            await stream.close()
        return answer.completion()

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
            choice = response.choices[0]
            message = choice.message
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
                finish_reason=getattr(choice, "finish_reason", None),
            )
        except (ValidationError, AttributeError, TypeError) as exc:
            raise LLMError(f"the model's reply is malformed: {str(exc)[:300]}") from exc

    async def chat_json(
        self, messages: list[dict[str, Any]], schema: dict[str, Any], *, name: str = "answer"
    ) -> Any:
        """A JSON answer: structured output where the endpoint supports it, else JSON mode,
        else the answer's text, which must be one JSON value (see `extract_json`).

        An endpoint that refuses the `response_format` (any 4xx or 5xx whose body names it)
        is asked again at once in the next mode (`JSON_MODES`), remembered for the run.

        Raises:
            NoJSON: the answer is not one complete JSON value (`bad-json`), stopped at
                `max_tokens` (`cut-off`), or nests too deep (`too-deep`).
            LLMError: the call failed.
        """
        strict = strict_schema(schema)
        while True:
            mode = self.json_mode
            formats: dict[str, dict[str, Any]] = {
                "json_schema": {"type": "json_schema", "json_schema": _named(name, schema, strict)},
                "json_object_schema": {"type": "json_object", "schema": schema},
                "json_object": {"type": "json_object"},
            }
            response_format = formats.get(mode)
            try:
                result = await self.chat(messages, response_format=response_format)
            except LLMError as exc:
                if mode != "none" and _refuses_json_mode(exc):
                    if self.config.structured_output is not None:  # fixed: said, not changed
                        raise LLMError(
                            f"{exc.message} (structured_output {mode} is set: unset it, or "
                            "set another mode the endpoint takes)",
                            status=exc.status,
                        ) from exc
                    self.json_mode = JSON_MODES[JSON_MODES.index(mode) + 1]
                    continue
                raise
            if result.finish_reason == "length":
                raise NoJSON(
                    f"the answer was cut off at max_tokens {self.config.max_tokens} "
                    "(--llm-max-tokens, PLANLOOM_LLM_MAX_TOKENS or llm: max_tokens raises it)",
                    rule="cut-off",
                )
            answer = extract_json(result.content or "")
            if mode == "json_schema" and strict is not None:
                return without_added_nulls(answer, schema)  # strict: optional were nullable
            return answer


def _named(name: str, schema: dict[str, Any], strict: dict[str, Any] | None) -> dict[str, Any]:
    """`json_schema`'s value: strict (OpenAI's guarantee that the answer fits) when the
    schema can be said strictly (`strict`: `strict_schema(schema)`), its optional fields
    then nullable."""
    if strict is None:
        return {"name": name, "schema": schema}
    return {"name": name, "schema": strict, "strict": True}


@dataclass
class _Assembly:
    """A streamed answer as its chunks come: the content, each tool call joined by its
    `index`, the finish reason, the usage of the last chunk, and the chunks that carried
    content or a call."""

    content: list[str] | None = None
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: str | None = None
    usage: Any = None
    chunks: int = 0

    def add(self, chunk: Any) -> None:
        self.usage = getattr(chunk, "usage", None) or self.usage
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue
            text = getattr(choice.delta, "content", None)
            deltas = getattr(choice.delta, "tool_calls", None) or []
            if text is not None:
                self.content = [*(self.content or []), text]
            for position, call in enumerate(deltas):
                _add_call(self.calls, call, position)
            self.chunks += 1 if text or deltas else 0
            self.finish = choice.finish_reason or self.finish

    def completion(self) -> Any:
        """The completion the chunks add up to.

        Raises:
            _CutShort: no chunk gave the finish reason: the stream stopped before its end.
        """
        from openai.types.chat import ChatCompletion

        if self.finish is None:
            raise _CutShort(f"the answer stream stopped before its end, after {self.chunks} chunks")
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


async def _body(response: Any) -> bytes:
    """A response's whole body; transport errors become openai's, as for any call."""
    with _transport(response.request):
        return bytes(await response.aread())


@contextlib.contextmanager
def _transport(request: Any) -> Iterator[None]:
    """The HTTP library's errors while a body is read (cut short, a connection reset, a
    read timeout) as openai's, which it raises for the same while it sends a request: the
    library is httpx2, or httpx under older openai clients, which do not translate errors
    met reading a stream."""
    import openai

    timeouts, failures = _transport_errors()
    try:
        yield
    except timeouts as exc:
        raise openai.APITimeoutError(request=request) from exc
    except failures as exc:
        raise openai.APIConnectionError(request=request) from exc


@functools.cache
def _transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(timeouts, other request errors) of the HTTP libraries installed."""
    timeouts: list[type[BaseException]] = []
    failures: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            library = importlib.import_module(name)
        except ImportError:
            continue
        timeouts.append(library.TimeoutException)
        failures.append(library.RequestError)
    return tuple(timeouts), tuple(failures)


def _plain(body: bytes) -> Any:
    """A 200 to a streamed request that is a plain completion, taken as it is."""
    from openai.types.chat import ChatCompletion

    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        text = body[:2000].decode("utf-8", "replace")
        raise _NotACompletion(f"not JSON: {one_line(text, 200)!r}")
    return ChatCompletion.construct(**data)


def _refuses_streaming(error: LLMError) -> bool:
    """Whether the endpoint refused to stream: a 4xx (not a 429) whose body names `stream`
    or `stream_options` (or speaks of streaming)."""
    status = error.status
    return (
        status is not None
        and 400 <= status < 500
        and status != 429
        and _STREAM.search(error.message.lower()) is not None
    )


_STREAM = re.compile(r"\bstream")


def _refuses_json_mode(error: LLMError) -> bool:
    """Whether the endpoint refused the call's `response_format`: any 4xx or 5xx whose
    body names `response_format` or `json_schema` (llama-cpp-python answers a 500 naming
    `response_format.type`), or a 400 or 422 that speaks of JSON. The status is the
    error's, or (an error a cassette or a journal served) the one its message quotes."""
    status = error.status
    if status is None:
        quoted = _ANSWERED.search(error.message)
        status = int(quoted.group(1)) if quoted else None
    if status is None or not 400 <= status < 600:
        return False
    text = error.message.lower()
    return _names_format(text) or (status in (400, 422) and "json" in text)


def _names_format(text: str) -> bool:
    return "response_format" in text or "json_schema" in text


_ANSWERED = re.compile(r"the model endpoint answered (\d{3}):")


def extract_json(text: str) -> Any:
    """The one JSON value `text` is: all of it but surrounding whitespace and at most one
    enclosing Markdown code fence (```json ... ``` or ``` ... ```). A raw newline or tab
    inside a string is read as itself: JSON says to escape it, but grammars that servers
    compile from a schema (llama.cpp's `char ::= [^"\\] | ...`) let a model write it raw,
    and what it means is not in doubt.

    Raises:
        NoJSON: `text` is not exactly one complete JSON value (rule `bad-json`: cut short,
            two values, prose around it, none at all; the message gives the line, column
            and text where it goes wrong), or it nests deeper than `MAX_DEPTH` (`too-deep`).
    """
    body, start = unfenced(text)
    if not body:
        raise NoJSON(
            "the model's answer is not JSON: it is empty"
            + (" (an empty code fence)" if text.strip() else "")
        )
    try:
        return loads_json(body, strict=False)
    except TooDeep as exc:
        raise NoJSON(f"the model's answer is unusable: {exc.message}", rule=exc.rule) from None
    except json.JSONDecodeError as exc:
        if exc.pos == 0 and not any(bracket in body for bracket in "{["):
            where = quoted_at(text, start)
            raise NoJSON(
                f"the model's answer is not JSON: it holds no JSON value, {where}"
            ) from None
        raise NoJSON(
            f"the model's answer is not one complete JSON value: {bad_json(text, start, exc)}"
        ) from None


def _why(exc: BaseException | None) -> str:
    """What a retried model call met, in a few words (no body: it may quote the prompt)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return "rate limited (429)" if exc.status_code == 429 else f"status {exc.status_code}"
    if _is_timeout(exc):
        return "timed out"
    if isinstance(exc, openai.APIConnectionError):
        return "connection failed"
    return "a broken response"


def _is_timeout(exc: BaseException | None) -> bool:
    """Whether a call's attempt timed out (a read, or the whole call)."""
    import openai

    return isinstance(exc, openai.APITimeoutError | _TimedOut)


def _transient(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, openai.APIStatusError):
        if _names_format(_message(exc).lower()):
            return False  # the format refused: the same request fails again (chat_json)
        return exc.status_code == 429 or exc.status_code >= 500
    # A body that is not JSON (the client raises JSONDecodeError) is a broken response too,
    # as is a stream cut before its end.
    return isinstance(
        exc,
        openai.APITimeoutError
        | openai.APIConnectionError
        | ValueError
        | _NotACompletion
        | _CutShort
        | _TimedOut,
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
    """The server's error message, on one clean line (a traceback down to its last line)."""
    body = exc.body
    text: str | None = None
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            text = str(error["message"])
        elif isinstance(error, str) and error:
            text = error
        elif isinstance(body.get("detail"), str | list):
            text = str(body["detail"])
    if text is None:
        text = exc.response.text if body is None or isinstance(body, str) else str(exc)
    return one_line(text[:20_000], _BODY) or f"(no message; HTTP {exc.status_code})"


_BODY = 300
"""Characters of a server's error message shown."""


def _timed_out(config: LLMConfig, attempts: int, *, streamed: bool) -> str:
    """Why a call timed out, and how to wait longer."""
    tries = f"{attempts} attempts" if attempts > 1 else "not retried"
    if attempts <= 1 and not config.retry_timeouts and not streamed:
        tries += ": a local server goes on generating the answer it was asked for"
    return (
        f"the model did not answer within {config.timeout:g} s ({tries}); raise the timeout "
        "with --llm-timeout SECONDS, PLANLOOM_LLM_TIMEOUT or llm: timeout"
    )


def _refused(exc: openai.APIStatusError, endpoint: str, *, before: bool) -> ConfigurationError:
    """The configuration error for a 401/403: which endpoint, and what to fix (`before`:
    found before any step ran)."""
    # The server's message is left out: some echo part of the key they refused.
    return ConfigurationError(
        f"the model endpoint {endpoint} refused the API key ({exc.status_code}): check "
        "OPENAI_API_KEY, --base-url (or OPENAI_BASE_URL) and --model (or PLANLOOM_MODEL)"
        + ("; nothing was run" if before else "")
    )
