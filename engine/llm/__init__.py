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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from engine._support.clock import now
from engine.errors import ConfigurationError, PlanloomError, StepError, StepTimeout
from engine.llm._json import chat_json
from engine.llm._stream import Assembly, ContentSink, begin_feed, streaming_to
from engine.llm._text import one_line, said
from engine.llm._types import (
    Answers,
    ChatResult,
    CutShort,
    JsonMode,
    LiveAnswers,
    LLMError,
    ModelCallCancelled,
    NoJSON,
    NotACompletion,
    PromptTooLong,
    TimedOut,
    ToolCallRequest,
    estimate_tokens,
)
from engine.llm._wire import (
    backoff,
    extract_json,
    is_timeout,
    key_refused,
    plain_body,
    refuses_streaming,
    status_message,
    timed_out,
    transient,
    transport,
    why_failed,
)
from engine.llm.config import Budget, LLMConfig, resolve_llm_config
from engine.redaction import Secrets

__all__ = [
    "Answers",
    "Budget",
    "ChatResult",
    "ContentSink",
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
    "streaming_to",
]

PROGRESS_EVERY = 0.5
"""Seconds at least between two reports of a streaming answer's progress (`on_progress`)."""

Sleep = Callable[[float], Awaitable[None]]


@dataclass
class LLMClient:
    """Chat calls for one run, with retries, budget and usage accounting."""

    config: LLMConfig
    budget: Budget = field(default_factory=Budget)
    sleep: Sleep = asyncio.sleep
    client: Any = None
    json_mode: JsonMode = "json_schema"  # downgraded when the endpoint refuses it
    # Each answered call: the answer and the request as sent (secrets redacted), e.g. as
    # events with their usage.
    on_call: Callable[[ChatResult, dict[str, Any]], None] | None = None
    answers: Answers = field(default_factory=lambda: LiveAnswers())  # or a cassette
    secrets: Secrets = field(default_factory=Secrets)  # redacted from all the model is sent
    # Live calls at once (a run's `limits.per_family: {llm: N}`); answers from a cassette
    # or a journal wait for nothing.
    limit: asyncio.Semaphore | None = None
    # Each wait before a retry (a 429's Retry-After, the backoff): its seconds and why.
    on_wait: Callable[[float, str], None] | None = None
    # A call that failed for good (retries spent, key refused): the error, its seconds and
    # the request.
    on_fail: Callable[[PlanloomError, float, dict[str, Any]], None] | None = None
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
            raise key_refused(exc, f"{where}/models", before=True) from exc
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
            raise key_refused(exc, f"{where}/chat/completions", before=True) from exc
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
        started = now()
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
                self.on_fail(exc, now() - started, kwargs)
            raise
        except asyncio.CancelledError:  # cut off (a timeout, Ctrl-C): made all the same
            if sent and self.on_fail is not None:
                cut = ModelCallCancelled("the model call was cut off (a timeout, or Ctrl-C)")
                self.on_fail(cut, now() - started, kwargs)
            raise
        if self.on_call is not None:
            self.on_call(result, kwargs)
        return result

    def _waiting(self, state: RetryCallState) -> None:
        if self.on_wait is not None:
            failed = state.outcome.exception() if state.outcome is not None else None
            seconds = state.next_action.sleep if state.next_action is not None else 0.0
            self.on_wait(seconds, why_failed(failed))

    async def _live(self, kwargs: dict[str, Any]) -> ChatResult:
        started = now()
        self.budget.calls += 1  # counted when sent: a call that fails is still a call made
        while True:  # at most three requests: each refusal below is met once a run
            streams = self.streams  # this request's: calls run at once, and learn together
            try:
                response = await self._create(kwargs, streams=streams)
                break
            except LLMError as exc:
                if streams and refuses_streaming(exc):
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
        return self._account(response, now() - started)

    async def _create(self, kwargs: dict[str, Any], *, streams: bool) -> Any:
        """One chat completion request, with its retries; openai's errors translated."""
        import openai

        config = self.config
        retrying = AsyncRetrying(
            stop=stop_after_attempt(config.retries + 1),
            wait=backoff,
            retry=retry_if_exception(
                lambda exc: transient(exc) and (config.retry_timeouts or not is_timeout(exc))
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
            raise key_refused(exc, f"{where}/chat/completions", before=False) from exc
        except (openai.APITimeoutError, TimedOut) as exc:
            raise StepTimeout(timed_out(config, attempts, streamed=streams)) from exc
        except openai.APIStatusError as exc:
            raise LLMError(
                f"the model endpoint answered {exc.status_code}: {status_message(exc)}",
                status=exc.status_code,
            ) from exc
        except openai.APIError as exc:
            raise LLMError(f"model call failed: {type(exc).__name__}: {exc}") from exc
        except (ValueError, NotACompletion, CutShort) as exc:  # JSONDecodeError...
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
            raise TimedOut() from exc
        if isinstance(response, str | bytes):  # an HTML page from a proxy...
            raise NotACompletion(f"not JSON: {one_line(str(response), 200)!r}")
        return response

    async def _assembled(self, stream: Any) -> Any:
        """The completion a streamed answer adds up to: the content, each tool call joined
        by its `index` from its id, name and arguments deltas, the finish reason, and the
        usage of the last chunk (when the endpoint sends none, the chunks are counted as the
        completion's tokens and the prompt's are not known: 0). The stream is closed
        however this ends (cancelled, timed out, broken), so the connection is too.

        Raises:
            CutShort: the stream ended before a chunk gave the finish reason.
            NotACompletion: a 200 that is neither an event stream nor JSON.
        """
        try:
            kind = str(stream.response.headers.get("content-type", ""))
            if "event-stream" not in kind:  # a server that answers as if not asked to stream
                return plain_body(await _body(stream.response))
            answer = Assembly()
            reported = now()
            feed = begin_feed()  # whoever reads the answer as it comes (`streaming_to`)
            with transport(stream.response.request):  # (a body cut short, a reset)
                async for chunk in stream:
                    if (text := answer.add(chunk)) and feed is not None:
                        feed(text)
                    moment = now()
                    if (
                        self.on_progress is not None
                        and answer.chunks
                        and (moment - reported >= PROGRESS_EVERY)
                    ):
                        reported = moment
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
                model=said(getattr(response, "model", None)),
                response_id=said(getattr(response, "id", None)),
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
        return await chat_json(self, messages, schema, name=name)


async def _body(response: Any) -> bytes:
    """A response's whole body; transport errors become openai's, as for any call."""
    with transport(response.request):
        return bytes(await response.aread())
