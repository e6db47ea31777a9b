"""Text from a model endpoint, made fit to judge and to show: an answer's one JSON value (its
Markdown fence taken off, a problem located by line and column), and a server's error body
cut to one clean line.
"""

from __future__ import annotations

import json
import re

__all__ = ["QUOTE", "bad_json", "one_line", "quoted_at", "unfenced"]

QUOTE = 60
"""Characters of an answer quoted where its JSON goes wrong."""

# At most one fence around the whole answer: ```json ... ``` or ``` ... ```.
_FENCE = re.compile(r"\A```[ \t]*(?:json)?[ \t]*\n?(.*?)\n?[ \t]*```\Z", re.S | re.I)
# ANSI escape sequences (CSI, OSC, and the two-character ones), then other control characters.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
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
    """`text` on one line: ANSI escapes and control characters removed, whitespace runs made
    one space, a Python traceback reduced to its last line (the exception), and cut to
    `limit` characters (with `…`) when one is given."""
    if _TRACEBACK in text:
        lines = [line for line in text.split(_TRACEBACK, 1)[1].splitlines() if line.strip()]
        if lines:
            head = text.split(_TRACEBACK, 1)[0]
            text = f"{head} {lines[-1]}" if head.strip() else lines[-1]
    text = _CONTROL.sub(" ", _ANSI.sub("", text))
    text = " ".join(text.split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text
