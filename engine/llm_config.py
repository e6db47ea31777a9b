"""What a run's model calls are configured by and counted against: `LLMConfig` (flags, then
environment, then the recipe's `llm:` block) and the run's `Budget`."""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import BaseModel, SecretStr

from engine.errors import BudgetExceeded, ConfigurationError
from engine.model import LLMSettings

__all__ = ["DEFAULT_TIMEOUT", "Budget", "LLMConfig", "resolve_llm_config"]

DEFAULT_TIMEOUT = 30.0


class LLMConfig(BaseModel):
    """Where and how to call the model."""

    model: str
    base_url: str | None = None
    api_key: SecretStr | None = None
    temperature: float | None = None
    timeout: float = DEFAULT_TIMEOUT


def resolve_llm_config(
    recipe: LLMSettings | None,
    *,
    model: str | None = None,
    base_url: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> LLMConfig:
    """The effective configuration: CLI flags, then environment, then recipe.

    Raises:
        ConfigurationError: no model is named, or no API key for a remote endpoint.
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
    if not key and not _is_loopback(url):
        where = url or "the OpenAI API"
        raise ConfigurationError(
            f"no API key for {where}: set OPENAI_API_KEY (a base URL on loopback, such as a "
            "local Ollama or vLLM, needs none)"
        )
    return LLMConfig(
        model=chosen_model,
        base_url=url,
        api_key=SecretStr(key) if key else None,
        temperature=recipe.temperature if recipe else None,
    )


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
    deadline: float | None = None  # time.monotonic() value
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
        if self.deadline is not None and time.monotonic() >= self.deadline:
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
