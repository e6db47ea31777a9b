"""Text from a model endpoint, made fit to judge and to show: an answer's one JSON value (its
Markdown fence taken off, a problem located by line and column), a server's error body
cut to one line, neutralized, and a completion's named fields (`said`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from engine.sanitize import cap, neutralize

__all__ = ["QUOTE", "bad_json", "one_line", "quoted_at", "said", "unfenced"]

QUOTE = 60
"""Characters of an answer quoted where its JSON goes wrong."""

# At most one fence around the whole answer: ```json ... ``` or ``` ... ```.
_FENCE = re.compile(r"\A```[ \t]*(?:json)?[ \t]*\n?(.*?)\n?[ \t]*```\Z", re.S | re.I)
_TRACEBACK = "Traceback (most recent call last):"

# json's own words for a problem, said for a model's answer.
_WHY = {
    "Extra data": "more text after the JSON value",
    "Expecting value": "no JSON value here",
}


def unfenced(text: str) -> tuple[str, int]:
    """`text` without surrounding whitespace and one enclosing Markdown code fence, and
    where in `text` what is left starts."""
    stripped = text.strip()
    start = len(text) - len(text.lstrip())
    fenced = _FENCE.match(stripped)
    if fenced is None:
        return stripped, start
    return fenced.group(1), start + fenced.start(1)


def bad_json(text: str, start: int, error: json.JSONDecodeError) -> str:
    """What is wrong with the JSON that starts at `start` in `text`, and where in `text`:
    the problem, its line and column, and a short quote of the text there (one line, at
    most `QUOTE` characters)."""
    at = start + error.pos
    if not error.doc[error.pos :].strip():  # nothing after the problem: cut short
        before = one_line(error.doc[max(0, error.pos - 4 * QUOTE) : error.pos])
        quote = ("…" if len(before) > QUOTE else "") + before[-QUOTE:]
        line, column = _line_column(text, at)
        return (
            f"it stops before its JSON value ends, at line {line}, column {column}, after {quote!r}"
        )
    message = error.msg.removesuffix(" at")  # "Invalid control character at"
    why = _WHY.get(message, message[:1].lower() + message[1:])
    if error.pos == 0 and message == "Expecting value":
        why = "it starts with text, not JSON,"
    return f"{why} {quoted_at(text, at)}"


def quoted_at(text: str, at: int) -> str:
    """`at line L, column C: '...'`: where offset `at` of `text` is, and the text there."""
    line, column = _line_column(text, at)
    line_start = at - column + 1
    line_end = text.find("\n", at)
    whole = text[line_start : len(text) if line_end < 0 else line_end]
    begin = max(0, column - 1 - QUOTE // 3)
    shown = one_line(whole[begin : begin + QUOTE])
    quote = ("…" if begin else "") + shown + ("…" if begin + QUOTE < len(whole) else "")
    return f"at line {line}, column {column}: {quote!r}"


def _line_column(text: str, at: int) -> tuple[int, int]:
    return text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1


def one_line(text: str, limit: int | None = None) -> str:
    """`text` on one line: control characters made visible (`neutralize`: an ANSI escape's
    ESC shows as `⟨ESC⟩`), whitespace runs made one space, a Python traceback reduced to its
    last line (the exception), and cut to `limit` characters (with `…`) when one is given."""
    if _TRACEBACK in text:
        lines = [line for line in text.split(_TRACEBACK, 1)[1].splitlines() if line.strip()]
        if lines:
            head = text.split(_TRACEBACK, 1)[0]
            text = f"{head} {lines[-1]}" if head.strip() else lines[-1]
    text = " ".join(neutralize(text).split())  # what could act on a terminal, made visible
    return text if limit is None else cap(text, limit, marker="…")[0]


def said(value: Any) -> str | None:
    """A completion's (or a chunk's) field, as its id or model, when it is a string that
    says something: servers send "" or nothing as well."""
    return value if isinstance(value, str) and value else None
