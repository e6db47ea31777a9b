"""What was said, as the GenAI conventions record it on spans: a model call's messages
(`gen_ai.system_instructions`, `gen_ai.input.messages`, `gen_ai.output.messages`) and a tool
call's arguments and result (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`).

Only for traces that capture message content (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_
CONTENT=true`). The messages are the OpenAI chat format a run sends and receives, turned
into the conventions' parts (`text`, `tool_call`, `tool_call_response`), then written as
JSON text (span attributes hold no nested values). Every value is redacted before it is
bounded, so a cut never leaves the start of a secret; bounds keep the JSON whole: each text
at most `PART_CHARS`, each list and object at most `ITEMS` entries, `DEPTH` levels, and a
whole attribute about `CONTENT_CHARS` (the oldest input messages are left out first, and
counted).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

__all__ = [
    "CONTENT_CHARS",
    "DEPTH",
    "ITEMS",
    "PART_CHARS",
    "as_json",
    "bounded",
    "input_messages",
    "output_messages",
    "tool_value",
]

PART_CHARS = 4096
"""Characters of one text (a message's content, a string in arguments or a result)."""
ITEMS = 100
"""Entries of one list or object kept; the rest are counted."""
DEPTH = 8
"""Levels of nesting kept; deeper values are cut."""
CONTENT_CHARS = 32_768
"""Characters of one attribute's JSON at most."""

# The conventions' finish reasons that OpenAI's chat API names otherwise.
_FINISH = {"tool_calls": "tool_call", "function_call": "tool_call"}

Redact = Callable[[Any], Any]


def bounded(value: Any, budget: int = CONTENT_CHARS) -> Any:
    """`value` (JSON data) within the bounds: each text cut at `PART_CHARS`, each list and
    object at `ITEMS` entries (a last entry says how many were left out), `DEPTH` levels,
    and about `budget` characters in all (texts past it are cut, entries past it left
    out)."""
    left = [budget]

    def walk(item: Any, depth: int) -> Any:
        if isinstance(item, str):
            room = max(min(PART_CHARS, left[0]), 0)
            cut = item if len(item) <= room else item[: max(room - 1, 0)] + "…"
            left[0] -= len(cut) + 2
            return cut
        if item is None or isinstance(item, bool | int | float):
            left[0] -= 8
            return item
        if depth >= DEPTH:
            left[0] -= 3
            return "…"
        if isinstance(item, dict):
            entries = list(item.items())
            kept: dict[str, Any] = {}
            for index, (key, inner) in enumerate(entries):
                if index >= ITEMS or left[0] <= 0:
                    kept["…"] = f"{len(entries) - index} more entries"
                    break
                name = str(key)[:PART_CHARS]
                left[0] -= len(name) + 3
                kept[name] = walk(inner, depth + 1)
            return kept
        if isinstance(item, list | tuple):
            items: list[Any] = []
            for index, inner in enumerate(item):
                if index >= ITEMS or left[0] <= 0:
                    items.append(f"… {len(item) - index} more items")
                    break
                items.append(walk(inner, depth + 1))
            return items
        return walk(repr(item), depth)

    return walk(value, 0)


def as_json(value: Any) -> str:
    """Bounded JSON data as one attribute's JSON text; past `CONTENT_CHARS`, the text cut
    and given as a JSON string (still JSON, no longer the object)."""
    text = _dumps(value)
    if len(text) <= CONTENT_CHARS:
        return text
    return _dumps(text[: CONTENT_CHARS - 64] + "…")


def input_messages(messages: Any, redact: Redact) -> tuple[str | None, str | None, int]:
    """The system instructions (the system messages the conversation starts with) and the
    other messages, as the conventions' JSON, and how many of the oldest messages were
    left out to keep within `CONTENT_CHARS`. None where there is nothing."""
    if not isinstance(messages, list):
        return None, None, 0
    messages = redact(messages)
    lead = 0
    while lead < len(messages) and _role(messages[lead]) == "system":
        lead += 1
    instructions = [part for m in messages[:lead] for part in _parts(m)]
    history = [{"role": _role(m), "parts": _parts(m)} for m in messages[lead:]]
    kept: list[str] = []
    left = CONTENT_CHARS
    for message in reversed(history):  # the latest messages first
        text = _dumps(bounded(message))
        if kept and len(text) + 1 > left:
            break
        kept.append(text)
        left -= len(text) + 1
    kept.reverse()
    shown = "[" + ",".join(kept) + "]" if kept else None
    system = as_json(bounded(instructions)) if instructions else None
    return system, shown, len(history) - len(kept)


def output_messages(reply: Any, finish: str | None, redact: Redact) -> str | None:
    """The answer as the conventions' output messages (one choice: one message)."""
    if not isinstance(reply, dict):
        return None
    parts = _parts({"role": "assistant", **redact(reply)})
    reason = _FINISH.get(finish or "", finish or "stop")
    return as_json(bounded([{"role": "assistant", "parts": parts, "finish_reason": reason}]))


def tool_value(value: Any, redact: Redact) -> str:
    """A tool call's arguments or result as JSON text, redacted and bounded."""
    return as_json(bounded(redact(value)))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)


def _role(message: Any) -> str:
    role = message.get("role") if isinstance(message, dict) else None
    return role if isinstance(role, str) else "user"


def _message(message: Any) -> dict[str, Any]:
    return {"role": _role(message), "parts": _parts(message)}


def _parts(message: Any) -> list[dict[str, Any]]:
    """A chat message's content as the conventions' parts: its text, the tool calls an
    assistant turn asks for, the tool result a `tool` message gives."""
    if not isinstance(message, dict):
        return [{"type": "text", "content": str(message)}]
    text = _text(message.get("content"))
    if _role(message) == "tool":
        return [
            {
                "type": "tool_call_response",
                "id": message.get("tool_call_id"),
                "response": text or "",
            }
        ]
    parts: list[dict[str, Any]] = []
    if text:
        parts.append({"type": "text", "content": text})
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            parts.append(_tool_call(call))
    return parts


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call part: its arguments as the object they are, when they parse (else what
    the model sent, as it sent it)."""
    inner = call.get("function")
    function: dict[str, Any] = inner if isinstance(inner, dict) else call
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    return {
        "type": "tool_call",
        "id": call.get("id"),
        "name": function.get("name"),
        "arguments": arguments,
    }


def _text(content: Any) -> str | None:
    """A message's text: a string, or the text parts of a list of parts, joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(t for t in texts if isinstance(t, str))
    return str(content)
