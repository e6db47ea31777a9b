"""JSON recipes (`.json`): the same schema as YAML ones, read by the standard library's C
parser, for plans a program or a planner writes.

A 10,000-step recipe parses in about 1 µs a step this way, against 20 or more for YAML.
Every guarantee of the YAML reader holds: a located error for text that is not JSON, a
recipe nesting deeper than `engine.limits.MAX_DEPTH` or holding more than
`engine.limits.MAX_NODES` values refused, a duplicate key reported (the first one kept,
as the YAML reader keeps it) with the rest of validation's problems. What JSON's syntax
admits but is no value refuses where it stands: `NaN` and `Infinity`, a number too large
for a float (`1e400`, which Python would read as infinity), an integer longer than Python
reads, and a lone surrogate escape (`"\\ud800"`, half of a UTF-16 pair: no character, and
no UTF-8 text can hold it). Positions are found only when a problem needs one, by a scan
of the text (`_Scanner`) that reads keys as JSON reads them.
"""

from __future__ import annotations

import bisect
import json
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from engine._support.gc import collector_paused
from engine.diagnostics import Diagnostic, NodePath, Positions, SourceMap
from engine.errors import RecipeSyntaxError
from engine.limits import MAX_DEPTH, MAX_NODES
from engine.yaml._nodes import duplicate_key

__all__ = [
    "UNREADABLE",
    "check_shape",
    "check_strings",
    "failed",
    "measure",
    "parse_json_text",
    "shape_problem",
]


def parse_json_text(text: str, file: str = "<recipe>") -> tuple[Any, SourceMap]:
    """Parse JSON text into plain data and a `SourceMap` (see the module's docstring).

    Raises:
        RecipeSyntaxError: the text is not JSON, is empty, or passes a cap of
            `engine.limits`.
    """
    source = _JsonSource(file=file, text=text, locator=_locate)
    if not text.strip():
        raise RecipeSyntaxError(
            [source.at((), "empty", "the recipe is empty", 'start with {"version": 1, ...}')]
        )
    try:
        with collector_paused():  # (it would rescan the growing tree: 2x the parse at 100k)
            data = json.loads(text, parse_constant=_refuse, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise failed(source, exc.lineno, exc.colno, "json-syntax", exc.msg, _hint(exc)) from None
    except RecursionError:  # (the C parser recurses: thousands of levels deep)
        line, column = _line_column(text, _past_the_cap(text))
        raise failed(source, line, column, "too-deep", _DEEP, _FLATTEN) from None
    except ValueError:  # NaN, Infinity, 1e400, an integer too long to read
        offset, message = _unreadable(text)
        line, column = _line_column(text, offset)
        raise failed(source, line, column, "json-value", message, UNREADABLE) from None
    if type(data) is dict or type(data) is list:  # (any other value: not a recipe)
        fits, keys = measure(data)
        if not fits:
            check_shape(data, source)
        if _maybe_repeated(text, keys):  # read again, keeping the first of repeated keys
            pairs = _Pairs()
            with collector_paused():
                data = json.loads(text, object_pairs_hook=pairs, parse_float=_finite)
            if pairs.repeated:  # where each repeat is: found by scanning the text
                source.problems.extend(_Scanner(text, file, frozenset()).duplicates())
    if "\\ud" in text or "\\uD" in text:  # a surrogate escape: is each one half of a pair?
        check_strings(data, source)
    return data, source


def measure(data: list[Any] | dict[str, Any]) -> tuple[bool, int]:
    """Whether `data` keeps within `MAX_DEPTH` and `MAX_NODES`, and how many keys its
    objects hold: one pass, level by level, keeping no paths (`shape_problem` finds where
    a document that does not fit passes a cap)."""
    nodes = keys = 0
    level: list[Any] = [data]
    depth = 1
    while level:
        below: list[Any] = []
        add = below.append
        for value in level:
            if type(value) is dict:
                keys += len(value)
                items: Any = value.values()
            else:
                items = value
            nodes += len(value)
            for item in items:
                if type(item) is dict or type(item) is list:
                    add(item)
        if nodes > MAX_NODES or (below and depth >= MAX_DEPTH):
            return False, keys
        level, depth = below, depth + 1
    return True, keys


# A key's closing quote and its colon; inside a string, also text that reads like one.
_KEY_END = re.compile(r'"\s*:')


def _maybe_repeated(text: str, keys: int) -> bool:
    """Whether the text may hold more keys than its objects do (which a repeated key
    makes so): each key has a colon of its own after it, so the text's colons, or else
    its quotes followed by a colon, are at least its keys; equal to the keys read, there
    is no repeat. (About 0.1 µs a step, where reading every object in Python to look for
    repeats cost 0.8.)"""
    return text.count(":") != keys and len(_KEY_END.findall(text)) != keys


_KEPT_FIRST = "remove one of them; planloom keeps the first, most JSON readers the last"
_DEEP = f"lists and objects nest more than {MAX_DEPTH} levels deep"
_FLATTEN = "flatten this value: recipes, policies and plans need only a few levels"
UNREADABLE = "write a number JSON can hold (no NaN or Infinity), or a very long one as a string"


class _Pairs:
    """`object_pairs_hook`: an object's members, the first of repeated keys kept (as the
    YAML reader keeps it); whether any key was repeated."""

    __slots__ = ("repeated",)

    def __init__(self) -> None:
        self.repeated = False

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        members = dict(pairs)
        if len(members) == len(pairs):
            return members
        self.repeated = True
        first: dict[str, Any] = {}
        for key, value in pairs:
            first.setdefault(key, value)
        return first


def _refuse(name: str) -> Any:
    raise ValueError(name)  # NaN, Infinity, -Infinity: located and said by `_unreadable`


def _finite(word: str) -> float:
    value = float(word)
    if math.isinf(value):
        raise ValueError(word)  # 1e400: located and said by `_unreadable`
    return value


def _hint(exc: json.JSONDecodeError) -> str:
    if "delimiter" in exc.msg or "Expecting value" in exc.msg:
        return "check for a missing or extra comma here or on the line before"
    if "property name" in exc.msg:
        return 'keys are written in double quotes: {"id": "read"}; no comma after the last'
    return "check the JSON here: quotes, commas and brackets"


def failed(
    source: SourceMap, line: int, column: int, rule: str, message: str, hint: str | None
) -> RecipeSyntaxError:
    """The error for a document that is not read: one located diagnostic, keeping its line
    (the renderer gets no `SourceMap` of a document that did not load)."""
    diagnostic = Diagnostic(
        file=source.file, line=line, column=column, rule=rule, message=message, hint=hint
    )
    lines = source.lines
    if 1 <= line <= len(lines):
        diagnostic = diagnostic.with_source_line(lines[line - 1].rstrip("\r"))
    return RecipeSyntaxError([diagnostic])


# A string, or a bare word (a number, true, false, null, NaN, Infinity).
_VALUE_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[-+0-9A-Za-z.]+', re.S)


def _unreadable(text: str) -> tuple[int, str]:
    """Where the first value `json.loads` refused stands, and what is wrong with it: NaN,
    Infinity, a number too large for a float, an integer longer than Python reads."""
    digits = sys.get_int_max_str_digits()
    for token in _VALUE_TOKEN.finditer(text):
        word = token.group()
        number = word.lstrip("-+")
        if number in ("NaN", "Infinity"):
            return token.start(), f"{word} is not a JSON number"
        if number[:1].isdigit() and any(mark in number for mark in ".eE"):
            if math.isinf(float(number)):
                return token.start(), f"{_short(word)} is too large a number (it reads as infinity)"
        elif digits and len(number) > digits and number.isdigit():
            return token.start(), f"an integer of {len(number):,} digits (at most {digits:,})"
    return 0, "a value JSON cannot hold"


def _short(word: str) -> str:
    return word if len(word) <= 40 else f"{word[:20]}…{word[-10:]}"


def _past_the_cap(text: str) -> int:
    """Where the nesting of `text` first passes `MAX_DEPTH` (0 if it does not)."""
    depth = 0
    for token in _TOKEN.finditer(text):
        word = token.group()
        if word in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                return token.start()
        elif word in ("]", "}"):
            depth -= 1
    return 0


def check_strings(data: Any, source: SourceMap) -> None:
    """Refuse a string or key holding a lone surrogate (from an escape such as "\\ud800"
    without its other half), located at its value or key."""
    todo: list[tuple[Any, NodePath]] = [(data, ())]
    while todo:
        value, path = todo.pop()
        items = value.items() if type(value) is dict else enumerate(value)
        for key, item in items:
            if type(key) is str and not _encodable(key):
                raise _surrogate(source, (*path, key), key, key=True)
            if type(item) is str:
                if not _encodable(item):
                    raise _surrogate(source, (*path, key), item, key=False)
            elif type(item) is dict or type(item) is list:
                todo.append((item, (*path, key)))


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _surrogate(source: SourceMap, path: NodePath, text: str, *, key: bool) -> RecipeSyntaxError:
    half = next(char for char in text if "\ud800" <= char <= "\udfff")
    what = "key" if key else "string"
    message = (
        f"this {what} holds \\u{ord(half):04x}, half of a UTF-16 surrogate pair without its "
        "other half: no character"
    )
    hint = "write the character itself, or both halves of its pair (\\ud83d\\ude00 for U+1F600)"
    line, column = source.locate(path, key=key)
    return failed(source, line, column, "json-value", message, hint)


def _line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def check_shape(data: Any, source: SourceMap) -> None:
    """Refuse nesting deeper than `MAX_DEPTH` and more than `MAX_NODES` values, at the
    first value past the cap."""
    problem = shape_problem(data)
    if problem is not None:
        path, rule, message, hint = problem
        line, column = source.locate(path)
        raise failed(source, line, column, rule, message, hint)


def shape_problem(data: Any) -> tuple[NodePath, str, str, str] | None:
    """Where `data` (a list or a dict) first nests deeper than `MAX_DEPTH` or passes
    `MAX_NODES` values, with the rule, message and hint that say so; None if it does not."""
    nodes = 0
    todo: list[tuple[Any, int, NodePath]] = [(data, 1, ())]
    while todo:
        value, depth, path = todo.pop()
        items = value.items() if type(value) is dict else enumerate(value)
        nodes += len(value)
        if nodes > MAX_NODES:
            too_many = f"the document holds more than {MAX_NODES:,} values"
            return path, "json-too-large", too_many, "split it into smaller files"
        for key, item in items:
            if type(item) is dict or type(item) is list:
                if depth >= MAX_DEPTH:
                    return (*path, key), "too-deep", _DEEP + " here", _FLATTEN
                todo.append((item, depth + 1, (*path, key)))
    return None


def _locate(source: SourceMap, wanted: frozenset[NodePath] | None) -> Positions | None:
    return _Scanner(source.text or "", source.file, wanted).positions()


# One token of JSON text: a string, a bracket or punctuation, or a bare word.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+', re.S)


@dataclass(slots=True)
class _Level:
    path: NodePath | None  # None: a repeated key's value, left out of the data
    mapping: bool
    index: int = 0
    key: str | None = None
    seen: dict[str, int] = field(default_factory=dict)  # key → the line it is first on


class _Scanner:
    """One walk of JSON text (already known to parse): the position of each value and
    key on a `wanted` path (every one when `wanted` is None), and repeated keys."""

    def __init__(self, text: str, file: str, wanted: frozenset[NodePath] | None) -> None:
        self.text, self.file, self.wanted = text, file, wanted
        self.breaks = [match.start() for match in re.finditer("\n", text)]
        self.values: dict[NodePath, tuple[int, int]] = {}
        self.keys: dict[NodePath, tuple[int, int]] = {}
        self.repeats: list[Diagnostic] = []

    def positions(self) -> Positions:
        self._walk()
        return self.values, self.keys

    def duplicates(self) -> list[Diagnostic]:
        self._walk()
        return self.repeats

    def _at(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_left(self.breaks, offset)
        start = self.breaks[line - 1] + 1 if line else 0
        return line + 1, offset - start + 1

    def _keep(self, path: NodePath) -> bool:
        return self.wanted is None or path in self.wanted

    def _walk(self) -> None:
        stack: list[_Level] = []
        expect_key = False
        for token in _TOKEN.finditer(self.text):
            word = token.group()
            if word in (",", ":"):
                if word == "," and stack and stack[-1].mapping:
                    expect_key = True
                continue
            if word in ("}", "]"):
                stack.pop()
                expect_key = False
                continue
            top = stack[-1] if stack else None
            if top is not None and top.mapping and expect_key:
                self._key(top, json.loads(word), token.start())
                expect_key = False
                continue
            path: NodePath | None = ()
            if top is not None:
                path = top.path
                step: str | int | None = top.key if top.mapping else top.index
                if not top.mapping:
                    top.index += 1
                path = None if path is None or step is None else (*path, step)
            if path is not None and self._keep(path):
                self.values[path] = self._at(token.start())
                if self.wanted and len(self.values) == len(self.wanted):
                    return  # every wanted path found: the rest of a large text is not read
            if word in ("{", "["):
                stack.append(_Level(path, word == "{"))
                expect_key = word == "{"

    def _key(self, level: _Level, key: str, offset: int) -> None:
        line, column = self._at(offset)
        first = level.seen.get(key)
        if first is not None:  # the first is kept: this one and its value are not data
            level.key = None
            self.repeats.append(duplicate_key(self.file, line, column, key, first, _KEPT_FIRST))
            return
        level.seen[key] = line
        level.key = key
        if level.path is not None and self._keep((*level.path, key)):
            self.keys[(*level.path, key)] = (line, column)


class _JsonSource(SourceMap):
    """A JSON text's map: its lines are split where JSON breaks them (at newlines only, as
    `json.JSONDecodeError` counts them), not at every break YAML knows."""

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = [line.removesuffix("\r") for line in (self.text or "").split("\n")]
        return self._lines
