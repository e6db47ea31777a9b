"""What a whole-value template gives: JSON data, never a Jinja object.

A value that is one whole `${{ expr }}` keeps its type, so whatever the expression made
leaves the template: an `Undefined` inside a list (`map(attribute='x')` over items without
`x`), a generator (`map` without `| list`), a tuple, a set, a `Markup`. Params, outputs, the
journal and cassettes hold JSON, so the value is made JSON data here, at the template's edge:
an `Undefined` anywhere is the template's own error (strict undefined, located like any
other), iterators and tuples become lists, sets sorted lists, `Markup` text; anything else
(a function, a Jinja `namespace`) is an error that says what the template gave.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import jinja2
from markupsafe import Markup

from engine.errors import TemplateError
from engine.templating._budget import TemplateLimit, tick

__all__ = ["as_data"]

_ITERATORS: tuple[type, ...] = (
    Iterator,
    range,
    type({}.keys()),
    type({}.values()),
    type({}.items()),
    types.GeneratorType,
)


def as_data(value: Any) -> Any:
    """`value` as JSON data; the same object when it is data already (the usual case).

    Raises:
        jinja2.UndefinedError: an undefined value anywhere inside (strict undefined).
        TemplateError: a value that is not data (a function, a Jinja namespace).
    """
    return _convert(value, 0)


def _convert(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value
    if isinstance(value, jinja2.Undefined):
        str(value)  # strict undefined: raises UndefinedError with Jinja's own message
        raise TemplateError("the value is undefined")  # a lenient Undefined subclass
    if depth > 256:
        raise TemplateLimit("the value is nested more than 256 deep")
    if kind is list:
        return _items(value, depth)
    if isinstance(value, Mapping):
        return _mapping(value, depth)
    if isinstance(value, Markup):
        return str(value)
    if isinstance(value, str | int):  # subclasses (an IntEnum, a str subclass) as plain
        return int(value) if not isinstance(value, str) else str(value)
    if isinstance(value, float):
        return _convert(float(value), depth)
    if isinstance(value, tuple | list):
        return list(_items(list(value), depth))
    if isinstance(value, set | frozenset):
        try:
            ordered = sorted(value)
        except TypeError as exc:
            raise TemplateError(
                "the value is a set of mixed types, which has no order; make it a list"
            ) from exc
        return _items(ordered, depth)
    if isinstance(value, _ITERATORS):  # `map`, `select`, `unique`, `batch` without `| list`
        return _items(list(cast("Iterable[Any]", value)), depth)
    if callable(value):
        raise TemplateError(
            f"the value is a function ({getattr(value, '__name__', '?')}), not data; to read "
            "a key named like a method, write it as an index: `output['items']`"
        )
    raise TemplateError(
        f"the value is a {type(value).__name__}, not data: a template's value must be null, "
        "true/false, a number, text, a list or a mapping"
    )


def _items(items: list[Any], depth: int) -> list[Any]:
    tick()
    converted: list[Any] | None = None
    for index, item in enumerate(items):
        new = _convert(item, depth + 1)
        if new is not item and converted is None:
            converted = items[:index]
        if converted is not None:
            converted.append(new)
    return items if converted is None else converted


def _mapping(value: Mapping[Any, Any], depth: int) -> dict[str, Any]:
    tick()
    same = type(value) is dict
    result: dict[str, Any] = {}
    for key, item in value.items():
        if type(key) is not str:
            same = False
            key = _key(key)
        new = _convert(item, depth + 1)
        same = same and new is item
        result[key] = new
    return value if same else result  # type: ignore[return-value]  # a dict of str keys


def _key(key: Any) -> str:
    if isinstance(key, jinja2.Undefined):
        str(key)
    if isinstance(key, bool) or key is None:
        return "true" if key is True else "false" if key is False else "null"
    if isinstance(key, str | int | float):
        return str(key)
    raise TemplateError(f"a mapping key is a {type(key).__name__}; keys must be text")
