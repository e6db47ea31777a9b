"""A JSON answer from a model: the structured-output modes tried in order as an endpoint
refuses them, and the one JSON value the answer must be."""

from __future__ import annotations

from typing import Any, Protocol

from engine.llm._types import JSON_MODES, ChatResult, JsonMode, LLMError, NoJSON
from engine.llm._wire import extract_json, refuses_json_mode
from engine.llm.config import LLMConfig
from engine.model_schema import strict_schema, without_added_nulls


class Chat(Protocol):
    """What asking for JSON needs of a client (`engine.llm.LLMClient` has it)."""

    config: LLMConfig
    json_mode: JsonMode

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> ChatResult: ...


async def chat_json(
    client: Chat, messages: list[dict[str, Any]], schema: dict[str, Any], *, name: str
) -> Any:
    """`LLMClient.chat_json` (see there)."""
    strict = strict_schema(schema)
    while True:
        mode = client.json_mode
        formats: dict[str, dict[str, Any]] = {
            "json_schema": {"type": "json_schema", "json_schema": named(name, schema, strict)},
            "json_object_schema": {"type": "json_object", "schema": schema},
            "json_object": {"type": "json_object"},
        }
        response_format = formats.get(mode)
        try:
            result = await client.chat(messages, response_format=response_format)
        except LLMError as exc:
            if mode != "none" and refuses_json_mode(exc):
                if client.config.structured_output is not None:  # fixed: said, not changed
                    raise LLMError(
                        f"{exc.message} (structured_output {mode} is set: unset it, or "
                        "set another mode the endpoint takes)",
                        status=exc.status,
                    ) from exc
                client.json_mode = JSON_MODES[JSON_MODES.index(mode) + 1]
                continue
            raise
        if result.finish_reason == "length":
            raise NoJSON(
                f"the answer was cut off at max_tokens {client.config.max_tokens} "
                "(--llm-max-tokens, PLANLOOM_LLM_MAX_TOKENS or llm: max_tokens raises it)",
                rule="cut-off",
            )
        answer = extract_json(result.content or "")
        if mode == "json_schema" and strict is not None:
            return without_added_nulls(answer, schema)  # strict: optional were nullable
        return answer


def named(name: str, schema: dict[str, Any], strict: dict[str, Any] | None) -> dict[str, Any]:
    """`json_schema`'s value: strict (OpenAI's guarantee that the answer fits) when the
    schema can be said strictly (`strict`: `strict_schema(schema)`), its optional fields
    then nullable."""
    if strict is None:
        return {"name": name, "schema": schema}
    return {"name": name, "schema": strict, "strict": True}
