"""The steps of a plan answer as its text streams: each step handed on as soon as its
closing brace has arrived (`planloom plan --stream`).

An answer is one JSON value: an object whose top-level `"steps"` array holds the steps, or
a bare array of them, maybe after prose or a Markdown fence's opening line (skipped up to
the first `{` or `[`). What follows the value (a closing fence) is not read. The text is
parsed as it comes by ijson (yajl's push parser, a well-kept incremental JSON library,
in C). Its bare events (`basic_parse_coro`) are made into steps here, as `json.loads`
builds them (the last of duplicate keys wins, in the first one's place), rather than by
its `items_coro`: that one matches a dotted prefix (`steps.item` is also the value of a
key named "steps.item", or of "item" in a "steps" object), and its prefixes take memory
that grows with the square of the nesting (10,000 levels: 250 MB).

A step handed on is what the whole answer's `json.loads` (`engine.llm.extract_json`)
gives for it, or the stream stops before it. yajl and `json.loads` read some texts
differently; the text is mended, or the stream stopped, before the parser sees them:

- a raw control character inside a string (a newline: grammars compiled from a schema
  let a model write one, and `extract_json` reads it as itself) is refused by yajl: it is
  sent as its `\\u00XX` escape, which yajl reads as that character;
- an unpaired UTF-16 surrogate escape (`"\\ud83d x"`) becomes `?` in yajl and stays a
  lone surrogate in `json.loads`: the stream stops there;
- yajl takes `\\f` and `\\v` between tokens, `json.loads` does not: the stream stops;
- numbers come as yajl's text of them (`use_float=False`: an `int`, or an exact
  `Decimal` made a float here), since with `use_float=True` yajl refuses integers beyond
  64 bits and floats beyond 1e308, which `json.loads` reads (as an int; as inf);
- a `"steps"` that is not an array stops the stream, and so does a second top-level
  `"steps"` key: `json.loads` keeps the last, and the first one's steps were handed on
  already (a stream cannot know what comes later).

Two more cases hand on steps of an answer the whole answer's reader refuses: prose around
the JSON, and broken text after some steps. Either way the planner then repairs the
answer, and the session compares what it started early with the plan finally approved
(`planners/_streamed.py`).

Nesting deeper than `MAX_NESTING` stops the stream at that bracket, before the parser sees
it. Text that cannot be such an answer (a parse error) stops it too. `feed` never
raises; why the stream stopped is in `broken`.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import ijson

__all__ = ["MAX_NESTING", "StepStream"]

MAX_NESTING = 64
"""Nested arrays/objects a streamed answer may open (the answer's own object is one, its
steps array two). A plan needs a handful; the bound stops a runaway answer before the
parser builds it (the whole answer is bounded apart, by `engine.limits.MAX_DEPTH`)."""

_VALUE_START = re.compile(r"[\[{]")
# What the scan stops at, outside strings: a string's start, a bracket, a control
# character JSON does not take as whitespace (yajl does, for \f and \v), a lone surrogate.
_OUTSIDE = re.compile('["\\[\\]{}\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]')
# Inside strings: the end, an escape, a raw control character, a lone surrogate.
_INSIDE = re.compile('["\\\\\x00-\x1f\ud800-\udfff]')
_HEX4 = re.compile("[0-9a-fA-F]{4}")
# The escape that may follow a high surrogate's, as much of it as has arrived.
_LOW_PREFIX = re.compile(r"\\(?:u(?:[dD](?:[c-fC-F](?:[0-9a-fA-F]{1,2})?)?)?)?")


_END = "the value ended"  # `_Scan.take`'s word for the text that closed the value


class _NotAPlan(Exception):
    """The answer's structure is not a plan's: its steps stop here (`StepStream.broken`)."""


class StepStream:
    """Complete steps of one answer, as its pieces arrive (`feed`).

    Attributes:
        broken: why the stream stopped handing on steps (the text is not a plan's JSON
            from some point on), or None.
    """

    def __init__(self) -> None:
        self.begin()

    def begin(self) -> None:
        """Start over: a new answer (or the same one asked again)."""
        self.broken: str | None = None
        self._started = False  # the value's first bracket has arrived
        self._ended = False  # the value has ended: what follows is not read
        self._scan = _Scan()
        self._steps = _Steps()
        self._parser = ijson.basic_parse_coro(self._steps, use_float=False)

    def feed(self, text: str) -> list[Any]:
        """The steps completed by `text`, the next piece of the answer, in order."""
        if self.broken is not None or self._ended or not text:
            return []
        if not self._started:
            start = _VALUE_START.search(text)
            if start is None:
                return []  # prose, a fence's opening line, whitespace
            text = text[start.start() :]
            self._started = True
        mended, stop = self._scan.take(text)
        try:
            if mended:
                self._parser.send(mended.encode("utf-8"))
        except _NotAPlan as exc:
            self.broken = str(exc)
        except Exception as exc:  # ijson's errors are several types (and a SystemError)
            said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            self.broken = f"not a plan's JSON from here: {type(exc).__name__}: {said}"
        else:
            if stop == _END:
                self._ended = True
            elif stop is not None:
                self.broken = stop
        return self._steps.take()


class _Scan:
    """The answer's text on its way to the parser: strings and nesting followed across
    pieces, raw control characters in strings escaped, and where the text must stop."""

    def __init__(self) -> None:
        self.in_string = False
        self.depth = 0
        self.held = ""  # an escape cut by the piece's end, sent with the next piece

    def take(self, text: str) -> tuple[str, str | None]:
        """The text to parse from `text` (with what was held), and None, `_END` (the
        value ended with this text) or why the stream stops after it."""
        text, self.held = self.held + text, ""
        out: list[str] = []
        copied = at = 0  # text[:copied] is in `out`; the scan is at `at`
        while True:
            pattern = _INSIDE if self.in_string else _OUTSIDE
            found = pattern.search(text, at)
            if found is None:
                out.append(text[copied:])
                return "".join(out), None
            at = found.start()
            char = text[at]
            if char == '"':
                self.in_string = not self.in_string
                at += 1
            elif self.in_string and char == "\\":
                size = _escape(text, at)
                if size == 0:  # cut by the piece's end: inside a string, so no step ends
                    self.held = text[at:]
                    out.append(text[copied:at])
                    return "".join(out), None
                if size < 0:
                    out.append(text[copied:at])
                    return "".join(out), "a lone UTF-16 surrogate escape: yajl reads it as '?'"
                at += size
            elif self.in_string and char < " ":
                out.append(text[copied:at])
                out.append(f"\\u{ord(char):04x}")  # extract_json reads it raw, as itself
                at = copied = at + 1
            elif char in "{[":
                self.depth += 1
                if self.depth > MAX_NESTING:
                    out.append(text[copied:at])
                    return "".join(out), f"the answer nests deeper than {MAX_NESTING} levels"
                at += 1
            elif char in "}]":
                self.depth -= 1
                at += 1
                if self.depth <= 0:
                    out.append(text[copied:at])
                    return "".join(out), _END
            else:  # a lone surrogate, or a control character that is not JSON whitespace
                out.append(text[copied:at])
                return "".join(out), f"not a plan's JSON from here: {char!r}"


def _escape(text: str, at: int) -> int:
    """The length of the escape at `text[at]` (a backslash in a string): 0 when the text
    ends before it is known, -1 for an unpaired surrogate. An escape yajl refuses is
    passed on whole, for it to refuse."""
    if at + 1 >= len(text):
        return 0
    if text[at + 1] != "u":
        return 2
    digits = text[at + 2 : at + 6]
    if len(digits) < 4:
        return 0 if _HEX4.match(digits.ljust(4, "0")) else 2
    if not _HEX4.match(digits):
        return 2
    code = int(digits, 16)
    if 0xDC00 <= code <= 0xDFFF:
        return -1
    if code < 0xD800 or code > 0xDBFF:
        return 6
    low = text[at + 6 : at + 12]
    if not low:
        return 0
    matched = _LOW_PREFIX.match(low)
    if matched is None or matched.end() < len(low):
        return -1  # what follows is not a low surrogate's escape
    return 12 if len(low) == 6 else 0


class _Steps:
    """ijson's events of the answer's value (`basic_parse_coro` sends them here) made into
    its steps: the items of the top-level `"steps"` array, or of a bare array."""

    def __init__(self) -> None:
        self.found: list[Any] = []
        self._level = 0  # containers open around the next event, the step being built aside
        self._items = False  # at the level of the steps array's items
        self._steps_next = False  # the last event was the top-level "steps" key
        self._had_steps = False
        self._open: list[Any] = []  # the step being built: its open containers
        self._keys: list[Any] = []  # the key of each open object's next value

    def take(self) -> list[Any]:
        """The steps completed since the last `take`."""
        steps = list(self.found)
        del self.found[:]
        return steps

    def send(self, event: tuple[str, Any]) -> None:
        kind, value = event
        if self._open or (self._items and kind != "end_array"):
            self._build(kind, value)
        elif self._items:  # the steps array ends
            self._items = False
            self._level -= 1
        elif self._steps_next:
            self._steps_next = False
            if kind != "start_array":
                raise _NotAPlan('the answer\'s "steps" is not an array')
            self._items = True
            self._level += 1
        elif self._level == 0:  # the answer's value starts: an object, or a bare array
            self._items = kind == "start_array"
            self._level = 1
        elif self._level == 1 and kind == "map_key" and value == "steps":
            if self._had_steps:
                raise _NotAPlan('the answer has a second "steps" key (json.loads keeps the last)')
            self._had_steps = self._steps_next = True
        elif kind in ("start_map", "start_array"):  # another member of the answer: skipped
            self._level += 1
        elif kind in ("end_map", "end_array"):
            self._level -= 1

    def _build(self, kind: str, value: Any) -> None:
        """One event of a step: its value built as json.loads builds it."""
        if kind == "map_key":
            self._keys[-1] = value
            return
        if kind in ("end_map", "end_array"):
            done = self._open.pop()
            self._keys.pop()
            if not self._open:
                self.found.append(done)
            return
        item: Any
        if kind == "start_map":
            item = {}
        elif kind == "start_array":
            item = []
        elif isinstance(value, Decimal):  # a number with a fraction or an exponent
            item = float(value)  # exact text, rounded once: as json.loads's float(text)
        else:
            item = value
        if self._open:
            parent = self._open[-1]
            if isinstance(parent, dict):
                parent[self._keys[-1]] = item  # a duplicate key: the last wins, in place
            else:
                parent.append(item)
        if kind in ("start_map", "start_array"):
            self._open.append(item)
            self._keys.append(None)
        elif not self._open:
            self.found.append(item)  # a step that is not an object (the plan refuses it)
