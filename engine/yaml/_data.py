"""A recipe a program already holds as data (a planner's answer, a journaled or recorded
plan), read as a JSON recipe is read, and shown to people as YAML.

Writing such data out as YAML to parse it back would cost more than anything else in
planning a large plan (writing YAML takes ~300 µs a step, parsing it ~25). The data is
copied as JSON instead (`json.dumps` and `json.loads`, a few µs a step) under the JSON
reader's guarantees (`engine.yaml._json`), and the YAML a person sees is written only when
it is wanted: to show or save the plan, or to locate a problem in it. A valid plan nobody
looks at is never written as YAML at all.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from engine.diagnostics import NodePath, Positions, SourceMap
from engine.errors import RecipeSyntaxError
from engine.limits import MAX_DEPTH
from engine.yaml._json import UNREADABLE, check_strings, failed, measure, shape_problem

__all__ = ["read_recipe_data"]


def read_recipe_data(value: Any, file: str, show: Callable[[Any], str]) -> tuple[Any, SourceMap]:
    """`value` as JSON data, and a `SourceMap` of the YAML text `show` writes it as.

    The data is a copy, as `json.dumps(default=repr)` writes `value` (a tuple as a list, a
    value JSON has no word for as its repr). `show` is called at most once, with another
    such copy, when the map's text, a line or a position is first asked for; what it
    writes must load to the same data, so problems are located in what a person sees.

    Raises:
        RecipeSyntaxError: a value JSON cannot hold (NaN, an infinity, an integer longer
            than Python reads, a string with a lone surrogate), nesting deeper than
            `engine.limits.MAX_DEPTH`, more than `engine.limits.MAX_NODES` values;
            located in the YAML, which is the error's `source`.
    """
    try:
        text = json.dumps(value, default=repr, allow_nan=False, ensure_ascii=False)
        text.encode()  # (a lone surrogate is kept by dumps, refused here)
    except (ValueError, RecursionError):
        pass
    else:
        data = json.loads(text)
        if not (type(data) is dict or type(data) is list) or measure(data)[0]:
            return data, _Shown(file, lambda: show(json.loads(text)))
    # Shown with what no text can hold made writable, and what nests past the cap cut
    # short there, so that the YAML loads to be located in.
    source = _Shown(file, lambda: show(_copy(value, depth=0)))
    error = _refusal(value, source)
    error.source = source
    raise error


class _Shown(SourceMap):
    """A map whose text is written when it is first asked for."""

    def __init__(self, file: str, write: Callable[[], str]) -> None:
        super().__init__(file, locator=_locate)
        self._write: Callable[[], str] | None = write

    @property
    def text(self) -> str | None:
        write, self._write = self._write, None
        if write is not None:
            self._text = write()
        return self._text


def _locate(source: SourceMap, wanted: frozenset[NodePath] | None) -> Positions | None:
    from engine.yaml._tree import locate

    return locate(source, wanted)


def _refusal(value: Any, source: SourceMap) -> RecipeSyntaxError:
    """Why `value` is not JSON data a recipe may hold, located at the first value that
    makes it so."""
    problem = shape_problem(value) if type(value) is dict or type(value) is list else None
    if problem is not None:
        path, rule, said, hint = problem
        return failed(source, *source.locate(path), rule, said, hint)
    todo: list[tuple[Any, NodePath]] = [(value, ())]
    while todo:
        container, path = todo.pop()
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, item in items:
            where = (*path, key)
            message: str | None = None
            if isinstance(item, float) and not math.isfinite(item):
                word = "NaN" if math.isnan(item) else "Infinity" if item > 0 else "-Infinity"
                message = f"{word} is not a JSON number"
            elif isinstance(item, int) and not isinstance(item, bool) and not _readable(item):
                message = "an integer longer than Python reads"
            elif isinstance(item, dict | list | tuple):
                todo.append((item, where))
            if message is not None:
                return failed(source, *source.locate(where), "json-value", message, UNREADABLE)
    try:
        check_strings(_copy(value, depth=None), source)  # a lone surrogate
    except RecipeSyntaxError as exc:
        return exc
    return failed(source, 1, 1, "json-value", "the plan holds a value JSON cannot hold", None)


def _readable(number: int) -> bool:
    try:
        str(number)
    except ValueError:
        return False
    return True


def _copy(value: Any, *, depth: int | None) -> Any:
    """`value` as JSON has it (a tuple as a list, a key as a string, what JSON has no word
    for as its repr). With a `depth` (the value's own), made writable: a lone surrogate
    as "?", an integer too long as a string, a list or mapping past `MAX_DEPTH` as one."""
    writable = depth is not None
    below = None if depth is None else depth + 1
    if isinstance(value, dict | list | tuple) and below is not None and below > MAX_DEPTH:
        return "(nested too deep)"
    if isinstance(value, dict):
        return {_key(key, writable): _copy(item, depth=below) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(item, depth=below) for item in value]
    if isinstance(value, str):
        return value.encode(errors="replace").decode() if writable else value
    if isinstance(value, int) and not isinstance(value, bool):
        return value if not writable or _readable(value) else "(a very long integer)"
    if value is None or isinstance(value, bool | float):
        return value
    return repr(value)


def _key(key: Any, writable: bool) -> str:
    text = key if isinstance(key, str) else json.dumps(key)
    return text.encode(errors="replace").decode() if writable else text
