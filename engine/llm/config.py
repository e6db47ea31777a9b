"""What a run's model calls are configured by and counted against: `LLMConfig` (flags, then
environment, then the recipe's `llm:` block) and the run's `Budget`.

The limits of one call: `timeout` (`--llm-timeout`, `PLANLOOM_LLM_TIMEOUT`, `llm: timeout`;
30 s, or 600 s for a base URL on loopback, where a small machine may take minutes to
answer), `max_tokens` (`--llm-max-tokens`, `PLANLOOM_LLM_MAX_TOKENS`, `llm: max_tokens`;
sent with every request, so no answer runs on without bound) and `retries`
(`PLANLOOM_LLM_RETRIES`, `llm: retries`). `context_window` (`--llm-context`,
`PLANLOOM_LLM_CONTEXT`, `llm: context_window`): a request estimated not to fit with its
`max_tokens` is not sent. `structured_output` (`PLANLOOM_LLM_STRUCTURED_OUTPUT`,
`llm: structured_output`) fixes how JSON is asked for. `timeout` bounds a whole call,
however slowly its answer streams in. A timed-out call to a loopback endpoint is not retried unless
`retries` is set: a small machine that took that long would take as long again (and a
server that does not stream is still generating the answer it abandoned).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import get_args
from urllib.parse import urlsplit

from pydantic import BaseModel, SecretStr

from engine._support.clock import now
from engine.errors import BudgetExceeded, ConfigurationError
from engine.model import (
    MAX_LLM_RETRIES,
    MAX_LLM_TIMEOUT,
    MAX_LLM_TOKENS,
    MIN_LLM_CONTEXT,
    LLMSettings,
    StructuredOutput,
)
from engine.sanitize import neutralize

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT",
    "LOOPBACK_TIMEOUT",
    "Budget",
    "LLMConfig",
    "read_limit",
    "resolve_llm_config",
]

DEFAULT_TIMEOUT = 30.0
LOOPBACK_TIMEOUT = 600.0
DEFAULT_MAX_TOKENS = 2048
DEFAULT_RETRIES = 3


class LLMConfig(BaseModel):
    """Where and how to call the model."""

    model: str
    base_url: str | None = None
    api_key: SecretStr | None = None
    temperature: float | None = None
    timeout: float = DEFAULT_TIMEOUT
    max_tokens: int = DEFAULT_MAX_TOKENS
    retries: int = DEFAULT_RETRIES
    # Whether a timed-out call is retried: not, by default, on loopback (see above).
    retry_timeouts: bool = True
    # The one structured-output mode to use; None: each in turn as the endpoint refuses it.
    structured_output: StructuredOutput | None = None
    # The model's context in tokens: a request that would not fit is not sent.
    context_window: int | None = None


def resolve_llm_config(
    recipe: LLMSettings | None,
    *,
    model: str | None = None,
    base_url: str | None = None,
    timeout: float | None = None,
    max_tokens: int | None = None,
    context_window: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> LLMConfig:
    """The effective configuration: CLI flags, then environment, then recipe.

    `timeout`, `max_tokens` and `context_window` are the flags' values (`--llm-timeout`,
    `--llm-max-tokens`, `--llm-context`, read with `read_limit`).

    Raises:
        ConfigurationError: no model is named, no API key for a remote endpoint, or a
            variable (`PLANLOOM_LLM_TIMEOUT`, ...) holds a bad value.
    """
    env = os.environ if environ is None else environ
    chosen_model = model or env.get("PLANLOOM_MODEL") or (recipe.model if recipe else None)
    if not chosen_model:
        raise ConfigurationError(
            "no model configured: pass --model, set PLANLOOM_MODEL, or add "
            "llm: {model: ...} to the recipe"
        )
    url = base_url or env.get("OPENAI_BASE_URL") or (recipe.base_url if recipe else None)
    key = env.get("OPENAI_API_KEY")
    loopback = _is_loopback(url)
    if not key and not loopback:
        where = url or "the OpenAI API"
        raise ConfigurationError(
            f"no API key for {where}: set OPENAI_API_KEY (a base URL on loopback, such as a "
            "local Ollama or vLLM, needs none)"
        )

    def setting(flag: float | None, name: str, field: str) -> float | None:
        if flag is not None:
            return flag
        text = env.get(name, "").strip()
        if text:
            return read_limit(text, field, name)
        value: float | None = getattr(recipe, field) if recipe is not None else None
        return value

    chosen_timeout = setting(timeout, "PLANLOOM_LLM_TIMEOUT", "timeout")
    chosen_tokens = setting(max_tokens, "PLANLOOM_LLM_MAX_TOKENS", "max_tokens")
    retries = setting(None, "PLANLOOM_LLM_RETRIES", "retries")
    window = setting(context_window, "PLANLOOM_LLM_CONTEXT", "context_window")
    if chosen_timeout is None:
        chosen_timeout = LOOPBACK_TIMEOUT if loopback else DEFAULT_TIMEOUT
    return LLMConfig(
        model=chosen_model,
        base_url=url,
        api_key=SecretStr(key) if key else None,
        temperature=recipe.temperature if recipe else None,
        timeout=chosen_timeout,
        max_tokens=int(chosen_tokens) if chosen_tokens is not None else DEFAULT_MAX_TOKENS,
        retries=int(retries) if retries is not None else DEFAULT_RETRIES,
        retry_timeouts=retries is not None or not loopback,
        structured_output=_structured_output(env, recipe),
        context_window=int(window) if window is not None else None,
    )


def _structured_output(
    env: Mapping[str, str], recipe: LLMSettings | None
) -> StructuredOutput | None:
    """`PLANLOOM_LLM_STRUCTURED_OUTPUT`, else the recipe's `llm: structured_output`.

    Raises:
        ConfigurationError: the variable names no mode.
    """
    text = env.get("PLANLOOM_LLM_STRUCTURED_OUTPUT", "").strip()
    if not text:
        return recipe.structured_output if recipe is not None else None
    modes: tuple[StructuredOutput, ...] = get_args(StructuredOutput)
    for mode in modes:
        if text == mode:
            return mode
    raise ConfigurationError(
        f"PLANLOOM_LLM_STRUCTURED_OUTPUT: {neutralize(text)[:40]!r} is not a structured-output "
        f"mode: use one of {', '.join(modes)}"
    )


# The bounds of each limit (lowest, highest, whether the lowest itself is allowed), as the
# recipe's `llm:` block has them (engine.model.LLMSettings).
_BOUNDS: dict[str, tuple[str, float, float, bool]] = {
    "timeout": ("a number of seconds", 0, MAX_LLM_TIMEOUT, False),
    "max_tokens": ("a whole number of tokens", 1, MAX_LLM_TOKENS, True),
    "retries": ("a whole number", 0, MAX_LLM_RETRIES, True),
    "context_window": ("a whole number of tokens", MIN_LLM_CONTEXT, MAX_LLM_TOKENS, True),
}


def read_limit(text: str, field: str, where: str) -> float:
    """The value of limit `field` (`timeout`, `max_tokens`, `retries`, `context_window`) as `text`
    in `where` (a flag or a variable's name), checked against its bounds.

    Raises:
        ConfigurationError: `text` is not such a number; the message names `where`.
    """
    what, low, high, closed = _BOUNDS[field]
    whole = field != "timeout"
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = None
    if value is None or not (value >= low if closed else value > low) or not value <= high:
        above = f"at least {low:g}" if closed else f"above {low:g}"
        gap = " " if where.startswith("-") else "="
        raise ConfigurationError(
            f"{where}{gap}{neutralize(text)[:40]!r}: expected {what}, {above} and at most "
            f"{high:.0f} (e.g. {where}{gap}{_EXAMPLE[field]})"
        )
    return value


_EXAMPLE = {"timeout": "120", "max_tokens": "2048", "retries": "3", "context_window": "8192"}


def _is_loopback(url: str | None) -> bool:
    if not url:
        return False
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Budget:
    """What a run may still spend on models, and what it has spent.

    `calls` counts logical model calls: every chat request the run sent, answered or
    failed (a 400, a 401, a 5xx after its retries, a timeout, a malformed answer), once
    each however many times it was retried, and every answer or failure a replay served
    in their place; `limits.max_llm_calls` and `usage.llm_calls` are this number. The
    preflight probe is not counted. Tokens are those the endpoint reported for answered
    calls.
    """

    max_calls: int | None = None
    max_tokens: int | None = None
    deadline: float | None = None  # on the run's clock (engine._support.clock.now)
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: float = 0.0

    def check(self) -> None:
        if self.max_calls is not None and self.calls >= self.max_calls:
            raise BudgetExceeded(
                f"the run used all {self.max_calls} model calls (limits.max_llm_calls)",
                limit="max_llm_calls",
            )
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            raise BudgetExceeded(
                f"the run used all {self.max_tokens} tokens (limits.max_llm_tokens)",
                limit="max_llm_tokens",
            )
        if self.deadline is not None and now() >= self.deadline:
            raise BudgetExceeded("the run reached limits.max_duration", limit="max_duration")

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def limits(self) -> str:
        """A line for the model: the run's fixed limits (shared by all its steps)."""
        parts = []
        if self.max_calls is not None:
            parts.append(f"{self.max_calls} model calls")
        if self.max_tokens is not None:
            parts.append(f"{self.max_tokens} tokens")
        return "the run allows " + (
            f"{', '.join(parts)} in all (shared by every step)" if parts else "unlimited calls"
        )

    def remaining(self) -> str:
        """A line for the model: what is left of the budget."""
        parts = []
        if self.max_calls is not None:
            parts.append(f"{self.max_calls - self.calls} model calls")
        if self.max_tokens is not None:
            parts.append(f"{self.max_tokens - self.tokens} tokens")
        return "budget left: " + (", ".join(parts) if parts else "unlimited")
