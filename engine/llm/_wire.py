"""What an endpoint's answers and failures mean: which errors are transient, the backoff
between attempts, what a refusal names, one-line messages, and the one JSON value an answer
must be (`extract_json`)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tenacity import RetryCallState

from engine.errors import ConfigurationError
from engine.limits import TooDeep, loads_json
from engine.llm._text import bad_json, one_line, quoted_at, unfenced
from engine.llm._types import (
    CutShort,
    LLMError,
    NoJSON,
    NotACompletion,
    TimedOut,
)
from engine.llm.config import LLMConfig

if TYPE_CHECKING:
    import openai

BACKOFF = (1.0, 2.0, 4.0)
MAX_RETRY_AFTER = 60.0


@contextlib.contextmanager
def transport(request: Any) -> Iterator[None]:
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


def plain_body(body: bytes) -> Any:
    """A 200 to a streamed request that is a plain completion, taken as it is."""
    from openai.types.chat import ChatCompletion

    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        text = body[:2000].decode("utf-8", "replace")
        raise NotACompletion(f"not JSON: {one_line(text, 200)!r}")
    return ChatCompletion.construct(**data)


def refuses_streaming(error: LLMError) -> bool:
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


def refuses_json_mode(error: LLMError) -> bool:
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


def why_failed(exc: BaseException | None) -> str:
    """What a retried model call met, in a few words (no body: it may quote the prompt)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return "rate limited (429)" if exc.status_code == 429 else f"status {exc.status_code}"
    if is_timeout(exc):
        return "timed out"
    if isinstance(exc, openai.APIConnectionError):
        return "connection failed"
    return "a broken response"


def is_timeout(exc: BaseException | None) -> bool:
    """Whether a call's attempt timed out (a read, or the whole call)."""
    import openai

    return isinstance(exc, openai.APITimeoutError | TimedOut)


def transient(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, openai.APIStatusError):
        if _names_format(status_message(exc).lower()):
            return False  # the format refused: the same request fails again (chat_json)
        return exc.status_code == 429 or exc.status_code >= 500
    # A body that is not JSON (the client raises JSONDecodeError) is a broken response too,
    # as is a stream cut before its end.
    return isinstance(
        exc,
        openai.APITimeoutError
        | openai.APIConnectionError
        | ValueError
        | NotACompletion
        | CutShort
        | TimedOut,
    )


def backoff(state: RetryCallState) -> float:
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


def status_message(exc: openai.APIStatusError) -> str:
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


def timed_out(config: LLMConfig, attempts: int, *, streamed: bool) -> str:
    """Why a call timed out, and how to wait longer."""
    tries = f"{attempts} attempts" if attempts > 1 else "not retried"
    if attempts <= 1 and not config.retry_timeouts and not streamed:
        tries += ": a local server goes on generating the answer it was asked for"
    return (
        f"the model did not answer within {config.timeout:g} s ({tries}); raise the timeout "
        "with --llm-timeout SECONDS, PLANLOOM_LLM_TIMEOUT or llm: timeout"
    )


def key_refused(exc: openai.APIStatusError, endpoint: str, *, before: bool) -> ConfigurationError:
    """The configuration error for a 401/403: which endpoint, and what to fix (`before`:
    found before any step ran)."""
    # The server's message is left out: some echo part of the key they refused.
    return ConfigurationError(
        f"the model endpoint {endpoint} refused the API key ({exc.status_code}): check "
        "OPENAI_API_KEY, --base-url (or OPENAI_BASE_URL) and --model (or PLANLOOM_MODEL)"
        + ("; nothing was run" if before else "")
    )
