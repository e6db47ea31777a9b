"""The model calls a step made, as the report shows them: for each call, the messages sent
(those sent in the step's call before are counted, not shown again: an agent's turns send
the whole conversation each time), the answer (its text and the tool calls it asked for),
the tokens and why the answer ended, or the error the call ended with.

Everything comes from the journal, where it is redacted; here it is escaped and cut like
every other journal value.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from engine._support.scope import item_of, step_of
from engine.app.report._html import escaped, html_table
from engine.app.report._read import ModelCallView, as_dict, as_int, as_list, as_str

__all__ = ["MAX_MODEL_CALLS", "model_calls_html", "step_model_calls"]

MAX_MODEL_CALLS = 50
"""Model calls of one step listed (an agent may make many)."""
MESSAGE_CHARS = 2000
"""Characters of one message shown before it is cut (a system prompt runs long)."""


def step_model_calls(calls: list[ModelCallView]) -> dict[str, list[ModelCallView]]:
    """The journal's model calls by the step that made them (the planner's under its own
    scope), in the order they were made."""
    found: dict[str, list[ModelCallView]] = {}
    for call in calls:
        found.setdefault(step_of(call.scope) or call.scope, []).append(call)
    return found


def model_calls_html(calls: list[ModelCallView]) -> str:
    """A table of `calls`, one row each: #, what was sent, the answer, tokens."""
    rows = []
    before: dict[str, tuple[int, set[str]]] = {}  # each scope's call before: number, messages
    for number, call in enumerate(calls[:MAX_MODEL_CALLS], start=1):
        earlier, seen = before.get(call.scope, (0, set()))
        said = [json.dumps(m, sort_keys=True, default=repr) for m in call.messages]
        before[call.scope] = (number, set(said))
        new = [m for m, text in zip(call.messages, said, strict=True) if text not in seen]
        sent = "".join(_message(m) for m in new)
        again = len(call.messages) - len(new)
        if again:
            what = "1 message" if again == 1 else f"{again} messages"
            sent = f'<p class="note">{what} as in call {earlier}, not shown again</p>' + sent
        if call.tools:
            sent += f'<p class="note">tools offered: {escaped(", ".join(call.tools))}</p>'
        # A `for_each` item's calls say which item made them.
        where = f"<br>{escaped(call.scope)}" if item_of(call.scope) is not None else ""
        rows.append([f"{number}{where}", sent, _answer(call), _tokens(call)])
    more = len(calls) - MAX_MODEL_CALLS
    table = html_table(["#", "sent", "answer", "tokens"], rows, "")
    more_note = f'<p class="note">… and {more:,} more model calls</p>' if more > 0 else ""
    return f'<div class="calls">{table}</div>{more_note}'


def _message(message: Any) -> str:
    """One message sent: its role, its text, the tool calls an assistant turn asked for,
    the call a tool result answers."""
    found = as_dict(message)
    role = as_str(found.get("role")) or "?"
    label = role
    if found.get("tool_call_id") is not None:
        label = f"{role} ({as_str(found.get('tool_call_id'))})"
    parts = [f'<div class="msg"><span class="role">{escaped(label)}</span>']
    text = _text(found.get("content"))
    if text:
        parts.append(f"<pre>{escaped(text, MESSAGE_CHARS)}</pre>")
    parts.extend(_tool_call(call) for call in as_list(found.get("tool_calls")))
    parts.append("</div>")
    return "".join(parts)


def _answer(call: ModelCallView) -> str:
    if call.error is not None:
        return f'<div class="msg error"><pre>{escaped(call.error, 600)}</pre></div>'
    answer = call.answer or {}
    parts = []
    text = _text(answer.get("content"))
    if text:
        parts.append(f'<div class="msg"><pre>{escaped(text, MESSAGE_CHARS)}</pre></div>')
    parts.extend(_tool_call(c) for c in as_list(answer.get("tool_calls")))
    return "".join(parts) or '<span class="none">(empty)</span>'


def _tool_call(call: Any) -> str:
    """A tool call asked for: its name, its id and its arguments (pretty JSON when they
    parse), as the journal keeps it (`{id, name, arguments}`) or as sent back to the
    model (`{id, function: {name, arguments}}`)."""
    found = as_dict(call)
    function = as_dict(found.get("function")) or found
    name = as_str(function.get("name")) or "?"
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # else shown as the model sent it
            arguments = json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    else:
        arguments = json.dumps(arguments, indent=2, ensure_ascii=False, default=repr)
    label = f"tool call {name}" + (f" ({as_str(found.get('id'))})" if found.get("id") else "")
    return (
        f'<div class="msg call"><span class="role">{escaped(label)}</span>'
        f"<pre>{escaped(arguments, MESSAGE_CHARS)}</pre></div>"
    )


def _tokens(call: ModelCallView) -> str:
    if call.answer is None:
        return '<span class="none">—</span>'
    answer = call.answer
    finish = as_str(answer.get("finish_reason"))
    shown = (
        f'<span class="nw">{as_int(answer.get("prompt_tokens")):,} in</span><br>'
        f'<span class="nw">{as_int(answer.get("completion_tokens")):,} out</span>'
    )
    return shown + (f'<br><span class="note">{escaped(finish)}</span>' if finish else "")


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts, joined."""
    if isinstance(content, str):
        return content
    texts = [as_dict(part).get("text") for part in as_list(content)]
    return "".join(t for t in texts if isinstance(t, str))
