"""The `llm` family: model calls as deterministic recipe steps.

`llm.complete` returns text; `llm.extract` returns JSON that must satisfy a JSON Schema.
Both use the run's model client (its endpoint, retries and budget) and have no side
effects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from engine.capability import Action, CallContext, EmptyGrant, Family, Registry
from engine.errors import StepFailed

if TYPE_CHECKING:
    # Imported where used: the registry loads this family for every command (`validate`
    # too), which needs the models below, not the model client or jsonschema.
    from engine.llm import LLMClient

__all__ = ["CompleteParams", "CompleteResult", "ExtractParams", "ExtractResult", "register"]


_PARAM_DOCS = {
    "prompt": "What the model is asked.",
    "system": "A system message before the prompt.",
    "schema": "The JSON Schema the answer must fit (it is checked).",
}


class CompleteParams(BaseModel):
    """Params of `llm.complete`."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=200_000)
    system: str | None = Field(None, max_length=50_000)


class CompleteResult(BaseModel):
    """Result of `llm.complete`."""

    text: str


class ExtractParams(BaseModel):
    """Params of `llm.extract`: `schema` is the JSON Schema of the wanted value."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=200_000)
    json_schema: dict[str, Any] = Field(alias="schema")
    system: str | None = Field(None, max_length=50_000)


class ExtractResult(BaseModel):
    """Result of `llm.extract`."""

    data: Any


def _client(ctx: CallContext) -> LLMClient:
    from engine.llm import LLMClient  # not at the top: see there

    if not isinstance(ctx.llm, LLMClient):
        raise StepFailed("no model is configured for this run: pass --model / --base-url")
    return ctx.llm


def _messages(system: str | None, prompt: str) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": prompt}]


async def _complete(params: CompleteParams, ctx: CallContext) -> CompleteResult:
    result = await _client(ctx).chat(_messages(params.system, params.prompt))
    return CompleteResult(text=result.content or "")


async def _extract(params: ExtractParams, ctx: CallContext) -> ExtractResult:
    import jsonschema  # not at the top: see there

    try:
        jsonschema.Draft202012Validator.check_schema(params.json_schema)
    except jsonschema.SchemaError as exc:
        raise StepFailed(f"llm.extract: the schema is not a JSON Schema: {exc.message}") from exc
    system = (params.system or "") + "\nAnswer with a JSON value only."
    data = await _client(ctx).chat_json(
        _messages(system.strip(), params.prompt), params.json_schema
    )
    try:
        jsonschema.validate(data, params.json_schema)
    except jsonschema.ValidationError as exc:
        raise StepFailed(f"llm.extract: the answer does not fit the schema: {exc.message}") from exc
    return ExtractResult(data=data)


def register(registry: Registry) -> None:
    """Add the `llm` family and its actions."""
    registry.add_family(
        # portable=False: the run's model client (budget, recording) is this process's
        Family("llm", "calls to the run's model", EmptyGrant, for_agents=False, portable=False)
    )
    registry.add(
        Action(
            "llm.complete",
            "Ask the model; returns its text",
            CompleteParams,
            _complete,
            result_model=CompleteResult,
            side_effects=False,
            recorded=False,  # the model's answers / the person's are recorded instead
            param_docs=_PARAM_DOCS,
        )
    )
    registry.add(
        Action(
            "llm.extract",
            "Ask the model for JSON matching a JSON Schema",
            ExtractParams,
            _extract,
            result_model=ExtractResult,
            side_effects=False,
            recorded=False,  # the model's answers / the person's are recorded instead
            param_docs=_PARAM_DOCS,
        )
    )
