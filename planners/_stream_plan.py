"""The steps of a plan answer as its text streams: each step object handed on as soon as
its closing brace has arrived.

An answer is one JSON value, whitespace and at most one Markdown code fence around it, as
the whole answer is read (`engine.llm.extract_json`): an object whose `"steps"` array
holds the steps, or a bare array of them. The text is parsed as it comes by ijson (yajl's
push parser, a well-kept incremental JSON library); the value of each item of the steps
array is built as json.loads builds it (the last of duplicate keys wins) and handed on
once complete. Text that cannot be such an answer (prose before it, broken JSON,
nesting deeper than the whole answer may) stops the stream's steps there, and says why
(`broken`); the whole answer is still read, repaired and validated as always.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import ijson
from ijson.utils import sendable_list

from engine.limits import MAX_DEPTH

__all__ = ["StepStream"]

_FENCE_OPENERS = ("```json", "```JSON", "```")


def _ended() -> Generator[None, bytes, None]:
    while True:
        yield


_ENDED = _ended()  # the parser once the value has ended (or broke): takes nothing more


class StepStream:
    """Complete step objects of one answer, as its pieces arrive (`feed`)."""

    def __init__(self) -> None:
        self.begin()

    def begin(self) -> None:
        """Start over: a new answer (or the same one asked again)."""
        self.broken: str | None = None
        self._head = ""  # the text before the JSON value starts, while it is not known
        self._found: list[Any] = sendable_list()
        self._parser: Generator[None, bytes, None] | None = None
        self._fenced = False

    def feed(self, text: str) -> list[Any]:
        """The steps completed by `text`, the next piece of the answer, in order."""
        if self.broken is not None or not text or self._parser is _ENDED:
            return []
        if self._parser is None:
            text = self._start(text)
            if self._parser is None:
                return []
        try:
            self._parser.send(text.encode("utf-8"))
        except Exception as exc:  # ijson's errors are several types
            said = str(exc).splitlines()[0][:200]
            if not (self._fenced and "trailing garbage" in said):  # (the closing fence)
                self.broken = f"not a plan's JSON from here: {said}"
            self._parser = _ENDED
        steps = list(self._found)
        del self._found[:]
        for step in steps:
            if _depth(step) > MAX_DEPTH:
                self.broken = f"a step nests deeper than {MAX_DEPTH} levels"
                return steps[: steps.index(step)]
        return steps

    def _start(self, text: str) -> str:
        """Wait for the value's first character, past whitespace and a fence's opening
        line; then the parser for an object's steps or an array's items. Returns the text
        from the value on ("" until it starts)."""
        head = (self._head + text).lstrip()
        for opener in _FENCE_OPENERS:
            if head.startswith(opener):
                if "\n" not in head:
                    self._head = head
                    return ""
                head = head[head.index("\n") + 1 :].lstrip()
                self._fenced = True
                break
        else:
            if head and any(opener.startswith(head) for opener in _FENCE_OPENERS):
                self._head = head  # maybe a fence's first backticks
                return ""
        if not head:
            self._head = ""
            return ""
        if head[0] not in "{[":
            self.broken = "the answer does not start with a JSON object or array"
            return ""
        prefix = "steps.item" if head[0] == "{" else "item"
        self._parser = ijson.items_coro(self._found, prefix, use_float=True)
        self._head = ""
        return head


def _depth(value: Any) -> int:
    """How deep `value` nests (a scalar: 0), without recursion."""
    deepest = 0
    todo = [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in children)
    return deepest
